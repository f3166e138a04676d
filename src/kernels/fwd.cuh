// hattn/src/kernels/fwd.cuh -- FlashAttention-3-style forward attention for Hopper (bf16/fp16).
//
// A CTA computes kBlockM x head_dim tiles of O, one (query block, head, batch) at a time, with
// warpgroups in fixed roles (warp specialization):
//
//   warpgroup 0       producer   one elected thread issues every TMA load: Q once per tile,
//                                then K_j / V_j through two rings of kStages slots
//   warpgroups 1..C   consumers  64 query rows each: S = Q K^T (SS-wgmma), online softmax,
//                                O += P V (RS-wgmma: P never leaves the registers)
//
// Why this shape. The tensor cores do 4096 bf16 FLOP/clk/SM but the SFU only 16 ex2/clk/SM; at
// head_dim d a score costs 4d matmul FLOPs and one exp, so exps take ~50% of the matmul time at
// d = 128 (100% at d = 64) unless they overlap it. Two schedules hide them:
//   * ping-pong: the consumer warpgroups take turns issuing GEMMs (named "turn" barriers), so one
//     warpgroup's softmax runs while another's GEMMs occupy the tensor cores;
//   * intra-warpgroup pipelining: S_{j+1} = Q K_{j+1}^T is issued together with P_j V_j, and the
//     softmax of S_{j+1} runs while P_j V_j is still on the tensor cores.
// Both can be switched off (Config::kPingPong, Config::kIntraWgOverlap) for the ablation.
//
// NOTES (hardware and compiler facts this file depends on; measurements in bench/RESULTS.md)
//   * K and V have separate rings. With one "empty" barrier per K/V slot, a warpgroup that holds
//     S_{j+1}'s K and P_j's V at once pins both slots of a 2-slot ring and the producer can never
//     run ahead: 519 TFLOPS instead of 699 at d128 s8k.
//   * P's registers are the A operand of the PV wgmma in flight, so rewriting them must wait for
//     that wgmma. ptxas may move a wait upwards (waiting early is always correct) and pulls it
//     above the exps whenever P's conversion shares their basic block. So the PV wait, O's
//     rescale and P's conversion open the *next* step, behind its mbarrier waits (a basic-block
//     boundary ptxas does not schedule across). scripts/check_overlap_sass.py checks the result.
//   * KV blocks are visited from the last to the first, so the only blocks that need masking
//     (the seqlen_k tail and the causal diagonal) come first and the steady state is mask-free.
//   * d = 64 uses three consumer warpgroups (192-row tiles): its exps cost as much as its GEMMs,
//     and a third warpgroup's softmax gives the tensor cores another GEMM to run meanwhile.
//   * The unmasked steady state exponentiates before it looks for any row max (softmax.cuh's
//     speculative step; the max's FMNMX tree and shuffles were ~15% of a d64 step, and every exp
//     waited for them): +3% at d64, +4-6% at d128. Its rare redo reads K, so K's slot is released
//     after that softmax.
//   * At d = 256 (64 KB of Q, 128 KB of K/V slots) O is stored in two column halves through a
//     32 KB buffer of its own rather than through Q's: the next tile's Q then loads under the
//     last block and the epilogue instead of after the store's reads, +6% at 512-1k keys, +3% at
//     2k, +1% at 4k-8k (bench/RESULTS.md run 61a); the halves' one exposed read wait costs less.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/fwd_args.h"
#include "kernels/fwd_rules.h"
#include "kernels/sm90/epilogue.cuh"
#include "kernels/sm90/forward_roles.cuh"
#include "kernels/sm90/fragment.cuh"
#include "kernels/sm90/launch_setup.h"
#include "kernels/sm90/mask.cuh"
#include "kernels/sm90/pipeline.cuh"
#include "kernels/sm90/scheduler.cuh"
#include "kernels/sm90/scores_recompute.cuh"
#include "kernels/sm90/softmax.cuh"
#include "kernels/sm90/split_tail.cuh"
#include "kernels/sm90/tensor_map.h"
#include "kernels/sm90/tile.cuh"
#include "ptx/fence.cuh"
#include "ptx/griddep.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "ptx/warp.cuh"
#include "ptx/wgmma.cuh"

namespace hattn::fwd {

using namespace hattn::sm90;

// ---------------------------------------------------------------------------------------
// Tile configuration
// ---------------------------------------------------------------------------------------
constexpr int kSharedAlign = 1024;
constexpr int kMaxSharedBytes = 227 * 1024;

// Defaults per head dim. O takes d/2 fp32 registers per thread and S takes kBlockN/2, so wider
// head dims get narrower KV blocks to stay inside the register and 227 KB shared-memory budgets.
constexpr int default_consumers(int head_dim) { return head_dim <= 64 ? HATTN_FWD_D64_CONSUMERS : 2; }
constexpr int default_block_n(int head_dim) { return head_dim <= 64 ? HATTN_FWD_D64_BLOCK_N : head_dim <= 128 ? 128 : HATTN_FWD_D256_BLOCK_N; }
constexpr int default_stages(int head_dim) { return head_dim <= 64 ? HATTN_FWD_D64_STAGES : 2; }

template <int kHeadDim_, class Elem_, bool kPingPong_ = true, bool kIntraWgOverlap_ = true,
          int kConsumers_ = default_consumers(kHeadDim_), int kBlockN_ = default_block_n(kHeadDim_),
          int kStages_ = default_stages(kHeadDim_)>
struct Config : ForwardShape<kConsumers_, kBlockN_, kStages_> {  // + kConsumers, kBlockM, kBlockN, kStages, kThreads, regs
    using Shape = ForwardShape<kConsumers_, kBlockN_, kStages_>;
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr bool kPingPong = kPingPong_;
    static constexpr bool kIntraWgOverlap = kIntraWgOverlap_;
    using Softmax = OnlineSoftmax<Shape::kBlockN, lazy_rescale(kHeadDim)>;
    // The unmasked steps' exps ahead of any row max (fwd_rules.h; it keeps the lazy reference).
    static constexpr bool kSpeculative = kSpeculativeMax && lazy_rescale(kHeadDim);
    // Consumers skip the blocks none of their rows sees (fwd_rules.h).
    static constexpr bool kSkipHiddenBlocks = skip_hidden_blocks(Shape::kBlockM, Shape::kBlockN);
    // Full masks may split their last pass (fwd_rules.h): d128 only. Three consumers' 160
    // registers would spill with the merge's code (d64), and d256's 128 KB partial tiles cost
    // more than the split saves (-2 to -7% at 512-2k, level beyond: bench/RESULTS.md run 56c).
    static constexpr bool kSplitTail = fwd::kSplitTail && Shape::kConsumers == 2 && kHeadDim_ <= 128;

    using QTile = SwizzledTile<Elem, Shape::kBlockM, kHeadDim>;
    using KvTile = SwizzledTile<Elem, Shape::kBlockN, kHeadDim>;
    // Whether q_tiles Q slots and an O staging buffer of 1 / o_parts of O's columns (none: 0)
    // fit beside the K/V rings.
    static constexpr bool fits(int q_tiles, int o_parts) {
        return q_tiles * sizeof(QTile) + (o_parts > 0 ? sizeof(QTile) / o_parts : 0) + 2 * Shape::kStages * sizeof(KvTile) +
                   2 * kSharedAlign <= kMaxSharedBytes;
    }
    // O is staged in its own buffer when shared memory allows, so the next tile's Q can land
    // while this tile's O is still being stored. At head_dim 256 (Q and two K/V stages: 192 KB)
    // only half of O fits beside them: O then goes out in two column halves through a buffer of
    // half its width (kOParts 2; fwd_rules.h). Otherwise it reuses Q's buffer (kOParts 0), and
    // the next Q waits for the store to be read out.
    static constexpr int kOParts = fits(1, 1) ? 1 : kOHalves && fits(1, 2) ? 2 : 0;
    static constexpr bool kSeparateO = kOParts > 0;
    using OTile = SwizzledTile<Elem, Shape::kBlockM, kHeadDim / (kSeparateO ? kOParts : 1)>;
    // Two Q slots where they fit too (d64, d128): the next tile's Q then loads during this whole
    // tile, not only after our last QK^T, and is there on arrival.
    static constexpr int kQStages = kSeparateO && fits(2, kOParts) ? 2 : 1;
    static_assert(Shape::kBlockN % Elem::kMmaK == 0 && Shape::kBlockN <= 256, "wgmma N / K limits");
};

// ---------------------------------------------------------------------------------------
// Shared memory
// ---------------------------------------------------------------------------------------
template <class Cfg>
struct alignas(kSharedAlign) SharedStorage {
    typename Cfg::QTile q[Cfg::kQStages];
    typename Cfg::KvTile k[Cfg::kStages];
    typename Cfg::KvTile v[Cfg::kStages];
    std::conditional_t<Cfg::kSeparateO, typename Cfg::OTile, NoTile> o;  // NoTile: O is staged in q
    Ring<Cfg::kQStages> q_ring;
    Ring<Cfg::kStages> k_ring;
    Ring<Cfg::kStages> v_ring;
    TileHandOff<Cfg::kQStages, kTileAnnounce> hand_off;  // each Q slot's tile (produce_forward_tiles)
};

template <class Cfg>  // + slack to align the base
constexpr int shared_bytes() { return static_cast<int>(sizeof(SharedStorage<Cfg>)) + kSharedAlign; }

// Scalars the kernel needs besides the four tensor maps.
struct KernelParams {
    float* lse;         // [batch, heads_q, seqlen_q] or nullptr
    Mask mask;
    TileScheduler scheduler;
    uint8_t* workspace;  // the split tail's flags and partial tiles (scheduler.split_run > 0)
    float scale;        // softmax scale (natural units), for the LSE
    float scale_log2;   // scale * log2(e): exp(x*scale) = exp2(x*scale_log2)
};

// ---------------------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------------------
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    fwd_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
               const __grid_constant__ CUtensorMap tmap_v, const __grid_constant__ CUtensorMap tmap_o,
               const KernelParams p) {
    using Elem = typename Cfg::Elem;
    constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kHeadDim = Cfg::kHeadDim;
    constexpr uint32_t kConsumerWarps = Cfg::kConsumers * kWarpgroupThreads / 32;

    extern __shared__ uint8_t smem_raw[];
    auto& smem = *reinterpret_cast<SharedStorage<Cfg>*>(
        (reinterpret_cast<uintptr_t>(smem_raw) + kSharedAlign - 1) & ~uintptr_t(kSharedAlign - 1));
    auto& o_staging = *[&] { if constexpr (Cfg::kSeparateO) return &smem.o; else return &smem.q[0]; }();

    const uint32_t warpgroup = ptx::warpgroup_index();

    // Barrier setup by one thread, published to the async proxy (TMA completes on these
    // barriers) and to every thread before anyone touches them. Every consumer warp releases a
    // K or V slot (one lane each) once its last wgmma on it is done. Q is free again right after
    // the consumers' last QK^T when O has its own staging buffer, else once the O store that
    // reuses Q's buffer has been read out (by the thread that issued it; its warpgroup's other
    // warps arrive after the epilogue). One lane per warp either way: the lane that read the slot's
    // tile, so that read is ordered before the producer rewrites it.
    init_barriers([&] {
        prefetch_tensormaps(&tmap_q, &tmap_k, &tmap_v, &tmap_o);
        smem.q_ring.init(kConsumerWarps);
        smem.k_ring.init(kConsumerWarps);
        smem.v_ring.init(kConsumerWarps);
        smem.hand_off.init();
    });
    if constexpr (kProgrammaticLaunch) {  // (fwd_rules.h) nothing above touched global memory
        ptx::griddepcontrol_wait();
        ptx::griddepcontrol_launch_dependents();
    }

    // The producer walks the tiles (TileScheduler: fixed passes or a dynamic counter) and sends
    // each tile with its Q; the consumers count K/V blocks and Q tiles as it does, which
    // keeps every phase in step.
    if (warpgroup == 0) {
        // ================================ producer ================================
        ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
        if (is_tma_issuer()) {
            produce_forward_tiles<kBlockM, kBlockN, Cfg::KvTile::kTxBytes, kClaimAfterLoads>(
                p.scheduler, p.mask, smem, &tmap_q, &tmap_k, smem.v_ring, [&](int stage, uint64_t* full, const Tile& t, int key0) {
                    smem.v[stage].load(&tmap_v, full, key0, t.kv_head, t.batch);
                }, &smem.hand_off);
        }
    } else {
        // ================================ consumers ===============================
        ptx::setmaxnreg_inc<Cfg::kConsumerRegs>();
        const ConsumerRole<Cfg::kConsumers> me(warpgroup);

        float o[kHeadDim / 2];
        float s[kBlockN / 2];
        uint32_t pf[kBlockN / Elem::kMmaK][4];
        float o_scale[kAccRowsPerThread];
        bool rescale_o = true;  // O needs o_scale before the next PV (the lazy softmax skips most)
        typename Cfg::Softmax softmax;
        typename Ring<Cfg::kQStages>::State q_state;
        typename Ring<Cfg::kStages>::State k_state, v_state;
        Tile t;
        int m0, n_blocks;

        auto gemm_qk = [&](int stage) {
            const auto& q = smem.q[q_state.stage];
#pragma unroll
            for (int kk = 0; kk < kHeadDim / Elem::kMmaK; ++kk)
                mma_ss<kBlockN, Elem, 0>(s, q.desc_k_major(me.first_row_in_tile, kk), smem.k[stage].desc_k_major(0, kk),
                                         kk > 0 ? 1u : 0u);
        };
        auto gemm_pv = [&](int stage) {
#pragma unroll
            for (int kk = 0; kk < kBlockN / Elem::kMmaK; ++kk)
                mma_rs<kHeadDim, Elem, 1>(o, pf[kk], smem.v[stage].desc_mn_major(kk), 1u);
        };
        // Ping-pong: wait for our turn on the tensor cores / hand it to the next consumer.
        auto take_turn = [&]() {
            if constexpr (Cfg::kPingPong) me.my_turn.sync();
        };
        auto pass_turn = [&]() {
            if constexpr (Cfg::kPingPong) me.next_turn.arrive();
        };
        // One GEMM batch in our turn, waited for before anything else runs.
        auto gemm_alone = [&](auto issue) {
            take_turn();
            ptx::wgmma_fence();
            issue();
            ptx::wgmma_commit_group();
            pass_turn();
            ptx::wgmma_wait_group<0>();
        };
        auto release = [&](auto& ring, const auto& state) {
            if (me.lane == 0) ring.consumer_release(state);
        };
        auto release_q = [&] {
            if (Cfg::kSeparateO && me.lane == 0) smem.q_ring.consumer_release(q_state);
        };
        // The turn carries over from tile to tile: every consumer of a tile sees the same n_blocks
        // and so takes the same number of turns, and the rotation ends where it began (the last
        // consumer hands to the first). So the first consumer can issue tile t+1's first GEMM
        // while the others still run tile t's epilogue, instead of waiting for a fresh grant
        // after the last one's. The last consumer grants the opening turn once per walk; the
        // first consumer's barrier is then one arrival richer than its waits, and it consumes
        // that arrival after the walk so every barrier is left balanced.
        if (Cfg::kPingPong && me.cw == Cfg::kConsumers - 1) TurnBarrier{kTurnFirst}.arrive();

        for (;;) {
            // Which tile it is (past the last: done): announced ahead of its Q, or with it.
            t = smem.hand_off.consumer_tile(smem.q_ring, q_state, me.lane);
            if (!TileScheduler::place<kBlockM, kBlockN>(t, p.mask, m0, n_blocks)) break;
            const int first_row = m0 + me.first_row_in_tile + acc_row_in_warpgroup(me.tid);  // this thread's row (and +8)
            // Blocks are visited from n_blocks - 1 down, so the ones needing a mask come first; we
            // compute [first, end) of them (a split tail's piece, the blocks none of our rows sees
            // skipped: fwd_rules.h).
            const auto blocks = TileScheduler::slice_blocks<Cfg::kSkipHiddenBlocks, kBlockN>(t, p.mask, m0, me.first_row_in_tile, n_blocks);
            const int first = blocks.first, end = blocks.end, n_masked = blocks.n_masked;
            auto mask = [&](int it) { p.mask.apply<kBlockN>(s, first_row, (n_blocks - 1 - it) * kBlockN); };
            // S = Q K_it^T alone on the tensor cores, then its softmax (the pipeline's first
            // block, or every block without the intra-warpgroup overlap).
            auto s_block = [&](int it) {
                smem.k_ring.consumer_wait(k_state);
                gemm_alone([&] { gemm_qk(k_state.stage); });
                ptx::wgmma_fence_operand(s);
                release(smem.k_ring, k_state);
                k_state.advance();
                if (it < n_masked) mask(it);
                rescale_o = softmax.online_update(s, p.scale_log2, o_scale);
            };
            // The unmasked steady state's softmax (fwd_rules.h): the exps first; in the rare step
            // whose scores overflow against a row's reference, this warp alone recomputes them from
            // Q and K in shared memory (mma.sync: no wgmma wait may go there). Three consumers at
            // 160 registers take the k-steps outermost.
            auto speculative_softmax = [&] {
                return softmax.online_update_speculative(s, p.scale_log2, o_scale, [&](auto& scores) {
                    scores_from_shared<kBlockN, (Cfg::kConsumers > 2)>(scores, smem.q[q_state.stage], me.first_row_in_tile,
                                                                         smem.k[k_state.stage]);
                });
            };
            // O += P V for the V slot in v_state (already waited for), alone on the tensor cores.
            auto pv_block = [&]() {
                gemm_alone([&] { gemm_pv(v_state.stage); });
                ptx::wgmma_fence_operand(o);
                release(smem.v_ring, v_state);
                v_state.advance();
            };

            zero_fill(o);
            softmax.init();
            if constexpr (kTileAnnounce) smem.q_ring.consumer_wait(q_state);

            // Blocks no row of ours sees, passed over with as many turns as computing them would
            // take (one per block with the overlap, whose drain takes one more: the last block's
            // here when we see none), so every consumer of the tile takes the same number.
            pass_over_blocks(first - t.it_begin, smem.k_ring, k_state, smem.v_ring, v_state, me.lane == 0, [&](int i) {
                const bool last = t.it_begin + i == end - 1;
                for (int turn = 0; turn < (Cfg::kIntraWgOverlap ? 1 : 2) + (Cfg::kIntraWgOverlap && last); ++turn) {
                    take_turn();
                    pass_turn();
                }
            });
            if (end > first) {
                if constexpr (Cfg::kIntraWgOverlap) {
                    // Prologue: S for the first (highest) block we see and its softmax; no PV yet.
                    s_block(first);
                    auto v_release = v_state;  // the V slot the PV GEMM in flight reads

                    // Steady state: wait for P_{it-2} V_{it-2}, rescale O, convert P_{it-1}; then
                    // issue S_it and P_{it-1} V_{it-1} together, wait for S_it only and run its
                    // softmax while the PV GEMM is on the tensor cores. Stamped out twice, with and
                    // without the mask, so the steady state has no data-dependent branch.
                    auto step = [&](int it, auto masked) {
                        // Both mbarrier waits come before the GEMMs: a wait loop between two
                        // wgmma batches makes ptxas inject an extra warpgroup.arrive.
                        consumer_wait_both(smem.k_ring, k_state, smem.v_ring, v_state);
                        ptx::wgmma_wait_group<0>();  // P_{it-2} V_{it-2} (none at it = first + 1)
                        ptx::wgmma_fence_operand(o);
                        if (it >= first + 2) {
                            release(smem.v_ring, v_release);
                            v_release.advance();
                        }
                        if (rescale_o) rescale_rows(o, o_scale);
                        acc_to_a_fragment<Elem, kBlockN>(s, pf);
                        issue_qk_then_pv(
                            take_turn, [&] { gemm_qk(k_state.stage); }, [&] { gemm_pv(v_state.stage); }, pass_turn);
                        ptx::wgmma_wait_group<1>();  // S_it is ready; PV may still run
                        ptx::wgmma_fence_operand(s);
                        v_state.advance();
                        if constexpr (Cfg::kSpeculative && !decltype(masked)::value) {
                            rescale_o = speculative_softmax();
                            release(smem.k_ring, k_state);  // after the softmax: its rare redo reads K
                            k_state.advance();
                        } else {
                            release(smem.k_ring, k_state);
                            k_state.advance();
                            if constexpr (decltype(masked)::value) mask(it);
                            rescale_o = softmax.online_update(s, p.scale_log2, o_scale);
                        }
                    };
                    int it = first + 1;
                    for (; it < n_masked; ++it) step(it, std::true_type{});
                    for (; it < end; ++it) step(it, std::false_type{});
                    // Our last QK^T has completed (waited for above) and the drain PV reads only P
                    // (registers) and V: Q is free one softmax and one PV earlier than the epilogue.
                    release_q();
                    // Drain: the last PV.
                    smem.v_ring.consumer_wait(v_state);
                    ptx::wgmma_wait_group<0>();
                    ptx::wgmma_fence_operand(o);
                    if (end - first >= 2) release(smem.v_ring, v_release);
                    if (rescale_o) rescale_rows(o, o_scale);
                    acc_to_a_fragment<Elem, kBlockN>(s, pf);
                    pv_block();
                } else {
                    // One block at a time: S, softmax, PV, with no overlap inside the warpgroup.
                    for (int it = first; it < end; ++it) {
                        s_block(it);
                        if (rescale_o) rescale_rows(o, o_scale);
                        acc_to_a_fragment<Elem, kBlockN>(s, pf);
                        smem.v_ring.consumer_wait(v_state);
                        pv_block();
                    }
                }
            }
            // With its own O buffer, Q is free once our last QK^T has completed: the producer
            // loads the next tile's Q while we write this tile's O.
            if (!Cfg::kIntraWgOverlap || end == first) release_q();

            // ============================== epilogue ==============================
            // O /= rowsum, then O -> smem (stmatrix) -> TMA store. LSE straight to global. A split
            // tail's piece hands its partial O to the tile's merger or merges its partners' first.
            float inv_sum[kAccRowsPerThread], lse[kAccRowsPerThread];
            softmax.finalize(p.scale, inv_sum, lse);
            rescale_rows(o, inv_sum);
            const bool writer = Cfg::kSplitTail && hand_over_split_piece<Cfg::kConsumers, kHeadDim>(
                                                       t, p.scheduler.tail_run(), p.workspace, me, o, lse);
            if (!writer) {
                if (p.lse != nullptr && me.lane % 4 == 0) {
                    float* lse_row = p.lse + (static_cast<int64_t>(t.batch) * p.scheduler.heads_q + t.head) * p.mask.seqlen_q;
#pragma unroll
                    for (int r = 0; r < kAccRowsPerThread; ++r)
                        if (first_row + 8 * r < p.mask.seqlen_q) lse_row[first_row + 8 * r] = lse[r];
                }
                // Thread 0 waits for the previous tile's O store to read our staging rows out only
                // here (nothing else touches them in between), so those reads overlap this tile's
                // GEMMs; O in Q's buffer waited at once. d256's O goes out in two column halves.
                store_o_rows<Elem, typename Cfg::OTile, kHeadDim, Cfg::kSeparateO>(
                    o_staging, o, me.first_row_in_tile, me.tid == 0, me.epilogue, &tmap_o, m0, t.head, t.batch);
                if (me.tid == 0) {
                    if (!Cfg::kSeparateO) {  // O was staged in Q: the next Q may land once it is read out
                        ptx::bulk_wait_group_read<0>();
                        smem.q_ring.consumer_release(q_state);
                    }
                } else if (!Cfg::kSeparateO && me.lane == 0) {
                    smem.q_ring.consumer_release(q_state);  // (the slot stays held until thread 0's arrival)
                }
            } else if (!Cfg::kSeparateO && me.lane == 0) {
                smem.q_ring.consumer_release(q_state);  // a writer stages no O in Q
            }
            q_state.advance();
        }
        if (Cfg::kPingPong && me.cw == 0) me.my_turn.sync();  // the opening grant's arrival
        if (Cfg::kSeparateO && me.tid == 0) ptx::bulk_wait_group_read<0>();  // shared memory outlives the last store's reads
    }
}

// ---------------------------------------------------------------------------------------
// Launcher
// ---------------------------------------------------------------------------------------
// The rules for grid and tile (persistence, tile per length) are in kernels/fwd_rules.h.
// The checks a vendoring user gets without the C API in front (which checks much more, with
// messages naming each field): what would otherwise crash the host or launch nonsense.
inline bool check_args(FwdArgs& a, std::string* error) {
    const char* what = !a.q || !a.k || !a.v || !a.o ? "q, k, v and o must be non-NULL"
                       : a.grid_ctas < 0              ? "grid_ctas must be >= 0 (0: automatic)"
                       : !workspace_aligned(a.workspace) ? "workspace must be 16-byte aligned"
                           : fwd::check_shape_dtype_scale(a);
    if (what != nullptr && error) *error = what;
    return what == nullptr;  // base alignment, strides and sizes are checked by encode_tensor_map below
}

template <class Cfg>
cudaError_t launch_fwd(FwdArgs a, cudaStream_t stream, std::string* error) {
    if (!check_args(a, error)) return cudaErrorInvalidValue;
    using Elem = typename Cfg::Elem;
    constexpr uint32_t kBoxCols = Cfg::QTile::kAtomCols;
    const BshdTensor q{a.q, Cfg::kHeadDim, a.seqlen_q, a.heads_q, a.batch, a.q_seq_stride, a.q_head_stride, a.q_batch_stride};
    const BshdTensor k{a.k, Cfg::kHeadDim, a.seqlen_k, a.heads_kv, a.batch, a.k_seq_stride, a.k_head_stride, a.k_batch_stride};
    const BshdTensor v{a.v, Cfg::kHeadDim, a.seqlen_k, a.heads_kv, a.batch, a.v_seq_stride, a.v_head_stride, a.v_batch_stride};
    const BshdTensor o{a.o, Cfg::kHeadDim, a.seqlen_q, a.heads_q, a.batch, a.o_seq_stride, a.o_head_stride, a.o_batch_stride};
    CUtensorMap tq, tk, tv, to;
    if (!make_bshd_map(&tq, q, Elem::kTmaType, kBoxCols, Cfg::kBlockM, error) ||
        !make_bshd_map(&tk, k, Elem::kTmaType, kBoxCols, Cfg::kBlockN, error) ||
        !make_bshd_map(&tv, v, Elem::kTmaType, kBoxCols, Cfg::kBlockN, error) ||
        !make_bshd_map(&to, o, Elem::kTmaType, kBoxCols, kMmaM, error)) {
        return cudaErrorInvalidValue;
    }
    TileScheduler scheduler;
    const int64_t kv_bytes_per_head = 2 * static_cast<int64_t>(a.seqlen_k) * Cfg::kHeadDim * Elem::kBytes;
    const int section_heads = a.section_heads > 0 ? a.section_heads : kCausalSections ? 0 : 1;
    if (!TileScheduler::make(Cfg::kBlockM, a.seqlen_q, a.heads_q, a.heads_kv, a.batch, a.causal, kv_bytes_per_head,
                             scheduler, error, section_heads)) {
        return cudaErrorInvalidValue;
    }
    // Persistent for short keys: +4-15% at seqlen_k <= 2k, +1-2% at 4k, causal +8-14% up to 4k
    // with the back-and-forth walk, -10-40% at 8k-16k; without a mask at d64/d256 at any length;
    // causal with the dynamic walk (a workspace) from 1k keys (d64's 192-row tile: fwd_rules.h),
    // and so full masks whose last tile is partly skipped (kDynamicFull).
    const bool dynamic = a.workspace != nullptr && (a.causal ? kDynamicCausal && a.seqlen_k >= dynamic_causal_min_seqlen_k(Cfg::kBlockM)
                                                             : kDynamicFull && TileScheduler::partial_tail_walk(
                                                                   Cfg::kSkipHiddenBlocks, Cfg::kBlockM, a.seqlen_q, a.seqlen_k));
    static_assert(TileScheduler::kCounterWords * sizeof(int32_t) <= kWorkspaceBytes, "the workspace holds the counters");
    if (dynamic) scheduler.tile_counter = static_cast<int32_t*>(a.workspace);
    // Other full masks given a workspace split their last pass over KV blocks.
    const bool split_tail =
        Cfg::kSplitTail && TileScheduler::may_split_tail(a.causal, dynamic, a.workspace, Cfg::kBlockM, a.seqlen_q);
    int ctas = 0;
    const char* what = "querying the SM count";
    const int persistent_max = a.causal ? kPersistentCausalMaxSeqlenK : persistent_max_seqlen_k(Cfg::kHeadDim);
    const bool persistent = dynamic || a.seqlen_k <= persistent_max;
    cudaError_t rc = scheduler.grid_ctas(a.grid_ctas, persistent || split_tail, &ctas);
    // A problem the plan does not split (no partly empty pass, or runs too short) keeps the rule's grid.
    if (rc == cudaSuccess && split_tail &&
        !scheduler.plan_split_tail(ctas, (a.seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN, kSplitMinRunBlocks) && !persistent)
        rc = scheduler.grid_ctas(a.grid_ctas, false, &ctas);
    // (After the grid: it settles the tile order the kernel walks.)
    const KernelParams p{a.lse, Mask{a.seqlen_q, a.seqlen_k, a.causal}, scheduler, static_cast<uint8_t*>(a.workspace),
                         a.softmax_scale, a.softmax_scale * kLog2e};

    constexpr int kSmem = shared_bytes<Cfg>();
    static_assert(kSmem <= kMaxSharedBytes, "tile does not fit in shared memory");
    if (rc == cudaSuccess) {
        what = "kernel launch";
        cudaLaunchAttribute pdl[1] = {programmatic_launch_attribute()};  // with kProgrammaticLaunch only
        rc = launch_with_dynamic_smem<fwd_kernel<Cfg>>(kSmem, [&] {
            return launch_kernel_ex(fwd_kernel<Cfg>, dim3(ctas), dim3(Cfg::kThreads), kSmem, stream, pdl,
                                    kProgrammaticLaunch ? 1u : 0u, tq, tk, tv, to, p);
        });
    }
    if (rc != cudaSuccess && error) *error = std::string("forward ") + what + ": " + cudaGetErrorString(rc);
    return rc;
}

template <int kHeadDim, int kConsumers, int kBlockN, int kStages>
cudaError_t launch_fwd_dtype(const FwdArgs& a, cudaStream_t stream, std::string* error) {
    constexpr bool kOverlap = default_intra_wg_overlap(kHeadDim);
    if (a.dtype == Dtype::kBf16) return launch_fwd<Config<kHeadDim, Bf16, true, kOverlap, kConsumers, kBlockN, kStages>>(a, stream, error);
    return launch_fwd<Config<kHeadDim, Fp16, true, kOverlap, kConsumers, kBlockN, kStages>>(a, stream, error);
}

// Entry point for one head dim: picks dtype and (d = 128, bf16 only) the ablation variant.
template <int kHeadDim>
cudaError_t launch_fwd_head_dim(const FwdArgs& a, cudaStream_t stream, std::string* error) {
    if (a.head_dim != kHeadDim) {
        if (error) *error = "launch_fwd_head_dim: head_dim mismatch";
        return cudaErrorInvalidValue;
    }
    const bool ablation = !a.pingpong || !a.intra_wg_overlap;
    if constexpr (kHeadDim == 128) {
        if (ablation && a.dtype == Dtype::kBf16) {
            if (!a.pingpong && !a.intra_wg_overlap) return launch_fwd<Config<kHeadDim, Bf16, false, false>>(a, stream, error);
            if (!a.pingpong) return launch_fwd<Config<kHeadDim, Bf16, false, true>>(a, stream, error);
            return launch_fwd<Config<kHeadDim, Bf16, true, false>>(a, stream, error);
        }
    }
    if (ablation) {
        if (error) *error = "ablation variants are built for head_dim 128 bf16 only";
        return cudaErrorInvalidValue;
    }
    // The tile per length (kernels/fwd_rules.h): for d = 64 on short causal problems without the
    // dynamic walk 128-row tiles with 2 K/V stages.
    constexpr int kConsumers = default_consumers(kHeadDim);
    if constexpr (kHeadDim == 64) {
        const int longest = std::max(a.seqlen_q, a.seqlen_k);
        if (d64_narrow_tile(a.causal, longest, kDynamicCausal && a.workspace != nullptr))
            return launch_fwd_dtype<64, 2, 128, 2>(a, stream, error);
    }
    return launch_fwd_dtype<kHeadDim, kConsumers, default_block_n(kHeadDim), default_stages(kHeadDim)>(a, stream, error);
}

}  // namespace hattn::fwd
