// hattn/src/kernels/fwd.cuh -- FlashAttention-3-style forward attention for Hopper (bf16/fp16).
//
// A CTA computes kBlockM x head_dim tiles of O, one (query block, head, batch) at a time. It
// holds three warpgroups with fixed roles (warp specialization):
//
//   warpgroup 0  producer   one elected thread issues every TMA load: Q once per tile, then
//                           K_j / V_j through a ring of kStages shared-memory slots
//                           (full/empty mbarriers; K and V are released separately).
//   warpgroup 1  consumer   rows [0, 64) of the tile     S = Q K^T (SS-wgmma), online softmax,
//   warpgroup 2  consumer   rows [64, 128) of the tile   O += P V (RS-wgmma, P stays in registers)
//
// Why this shape. The tensor cores do 4096 bf16 FLOP/clk/SM but the SFU only 16 ex2/clk/SM;
// at head_dim d a score costs 4d matmul FLOPs and one exp, so exps take ~50% of the matmul
// time at d = 128 unless they overlap it. Two schedules hide them:
//   * ping-pong: the consumer warpgroups take turns issuing GEMMs (named barriers kTurnWg*),
//     so one warpgroup's softmax runs while the other's GEMMs occupy the tensor cores;
//   * intra-warpgroup pipelining: S_{j+1} = Q K_{j+1}^T is issued together with P_j V_j, so
//     the tensor cores always have two GEMMs queued per turn.
// Both can be switched off (Config::kPingPong, Config::kIntraWgOverlap) for the ablation.
//
// NOTES (hardware and compiler facts this file depends on; measurements in bench/RESULTS.md)
//   * K and V have separate "empty" barriers. With one barrier per K/V slot, a warpgroup that
//     holds S_{j+1}'s K and P_j's V at once pins both slots of a 2-slot ring and the producer
//     can never run ahead: 519 TFLOPS instead of 699 at d128 s8k.
//   * ptxas (CUDA 13.0) schedules `wgmma.wait_group 0` as early as its basic block allows:
//     in the steady state the wait for P_j V_j lands above the softmax of S_{j+1} (visible in
//     SASS: WARPGROUP.DEPBAR.LE gsb0, 0x0 right after ... 0x1, before the MUFU.EX2s). So a
//     warpgroup's exps overlap the *other* warpgroup's GEMMs (ping-pong), not its own PV.
//     Writing P into a second register buffer to keep the S registers untouched until the
//     wait made ptxas serialize the wgmmas instead (C7513); left as future work.
//   * KV blocks are visited from the last to the first, so the only blocks that need masking
//     (the seqlen_k tail and the causal diagonal) come first and the steady state is mask-free.
//   * Tiles are walked blockIdx.x, blockIdx.x + gridDim.x, ...; the launcher picks one CTA
//     per tile (long or causal problems) or one persistent CTA per SM (short non-causal ones).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/sm90/tensor_map.h"
#include "kernels/fwd_args.h"
#include "ptx/barrier.cuh"
#include "ptx/convert.cuh"
#include "ptx/fence.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/mufu.cuh"
#include "ptx/tma.cuh"
#include "ptx/warp.cuh"
#include "ptx/wgmma.cuh"

namespace hattn::fwd {

// ---------------------------------------------------------------------------------------
// Tile configuration
// ---------------------------------------------------------------------------------------
constexpr int kWarpgroupThreads = 128;
constexpr int kNumConsumerWarpgroups = 2;
constexpr int kNumThreads = (1 + kNumConsumerWarpgroups) * kWarpgroupThreads;
constexpr int kRowsPerConsumer = 64;                                    // wgmma's M
constexpr int kBlockM = kNumConsumerWarpgroups * kRowsPerConsumer;     // 128 query rows per CTA
constexpr int kSwizzleBytes = 128;                                      // TMA + wgmma swizzle span
constexpr int kColsPerSwizzleRow = kSwizzleBytes / 2;                   // 64 16-bit elements
constexpr int kMmaK = 16;                                               // wgmma K for 16-bit types
// Register split (65536 per SM): 128 x 24 + 256 x 240 = 64512. The producer only computes
// coordinates; the consumers hold O, S and P in registers.
constexpr uint32_t kProducerRegs = 24;
constexpr uint32_t kConsumerRegs = 240;
constexpr int kSharedAlign = 1024;
constexpr int kMaxSharedBytes = 227 * 1024;

// Default KV block width per head dim. O takes d/2 fp32 registers per thread and S takes
// kBlockN/2, so wider head dims get narrower KV blocks to stay inside 240 registers and
// 227 KB of shared memory.
constexpr int default_block_n(int head_dim) { return head_dim <= 64 ? 128 : head_dim <= 128 ? 128 : 80; }

template <int kHeadDim_, bool kIsBf16_, bool kPingPong_ = true, bool kIntraWgOverlap_ = true,
          int kStages_ = (kHeadDim_ <= 64 ? 3 : 2), int kBlockN_ = default_block_n(kHeadDim_)>
struct Config {
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr bool kIsBf16 = kIsBf16_;
    static constexpr bool kPingPong = kPingPong_;
    static constexpr bool kIntraWgOverlap = kIntraWgOverlap_;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kStages = kStages_;  // K and V ring depth
    static constexpr int kChunks = kHeadDim / kColsPerSwizzleRow;  // 64-column swizzle blocks
    // O is staged in its own buffer when shared memory allows, so the next tile's Q can land
    // while this tile's O is still being stored; otherwise (head_dim 256) it reuses Q's buffer.
    static constexpr int kQTileBytes = 2 * kBlockM * kHeadDim;
    static constexpr int kKvRingBytes = 2 * 2 * kStages * kBlockN * kHeadDim;
    static constexpr bool kSeparateO = kQTileBytes * 2 + kKvRingBytes + 2 * kSharedAlign <= kMaxSharedBytes;
    static_assert(kHeadDim % kColsPerSwizzleRow == 0, "head_dim must be a multiple of 64");
    static_assert(kBlockN % kMmaK == 0 && kBlockN <= 256, "wgmma N / K limits");
};

// Named barriers (0 is __syncthreads). A warpgroup waits on its own "turn" before issuing
// GEMMs and, once issued, hands the turn to the other consumer warpgroup.
enum NamedBarrier : uint32_t {
    kTurnWg1 = 1,
    kTurnWg2 = 2,
    kEpilogueWg1 = 3,
    kEpilogueWg2 = 4,
};
constexpr uint32_t kTurnThreads = kNumConsumerWarpgroups * kWarpgroupThreads;

// ---------------------------------------------------------------------------------------
// Shared memory
// ---------------------------------------------------------------------------------------
// Every operand tile is stored as kChunks column blocks of [rows][64] 16-bit elements with
// the 128-byte swizzle, exactly as TMA writes a box of 64 columns and as wgmma's K-major
// (Q, K) and MN-major (V) descriptors read it.
// NOTE: 128B swizzle -> every block must start 1024-byte aligned (rows are multiples of 8).
template <class Cfg>
struct alignas(1024) SharedStorage {
    static constexpr int kORows = Cfg::kSeparateO ? kBlockM : 1;  // 1: O is staged in q
    uint16_t q[Cfg::kChunks][kBlockM][kColsPerSwizzleRow];
    uint16_t k[Cfg::kStages][Cfg::kChunks][Cfg::kBlockN][kColsPerSwizzleRow];
    uint16_t v[Cfg::kStages][Cfg::kChunks][Cfg::kBlockN][kColsPerSwizzleRow];
    uint16_t o[Cfg::kChunks][kORows][kColsPerSwizzleRow];
    uint64_t q_full;
    uint64_t q_empty;
    uint64_t k_full[Cfg::kStages];
    uint64_t v_full[Cfg::kStages];
    uint64_t k_empty[Cfg::kStages];
    uint64_t v_empty[Cfg::kStages];
};

constexpr float kLog2e = 1.4426950408889634f;  // exp(x) = exp2(x * log2(e))

template <class Cfg>
constexpr int shared_bytes() {
    return static_cast<int>(sizeof(SharedStorage<Cfg>)) + kSharedAlign;  // + slack to align the base
}

// Scalars the kernel needs besides the four tensor maps.
struct KernelParams {
    float* lse;           // [batch, heads_q, seqlen_q] or nullptr
    int seqlen_q;
    int seqlen_k;
    int heads_q;
    int heads_per_kv;     // GQA group size
    int num_m_blocks;
    int num_tiles;        // num_m_blocks * heads_q * batch
    int causal;
    float scale;          // softmax scale (natural units), for the LSE
    float scale_log2;     // scale * log2(e): exp(x*scale) = exp2(x*scale_log2)
};

// ---------------------------------------------------------------------------------------
// Small device helpers
// ---------------------------------------------------------------------------------------
template <int N, bool kIsBf16, int kTransB>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, uint32_t acc) {
    if constexpr (kIsBf16) {
        ptx::wgmma_ss_bf16<N, 0, kTransB>(d, da, db, acc);
    } else {
        ptx::wgmma_ss_f16<N, 0, kTransB>(d, da, db, acc);
    }
}

template <int N, bool kIsBf16, int kTransB>
__device__ __forceinline__ void mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, uint32_t acc) {
    if constexpr (kIsBf16) {
        ptx::wgmma_rs_bf16<N, kTransB>(d, a, db, acc);
    } else {
        ptx::wgmma_rs_f16<N, kTransB>(d, a, db, acc);
    }
}

// Byte offset of element (row, col) inside one [rows][64] 128B-swizzled block: the 16-byte
// chunk index (col / 8) is XORed with row % 8, which spreads the 8 rows of an 8x8 core
// matrix over all 32 banks.
__device__ __forceinline__ uint32_t swizzle128_offset(int row, int col) {
    constexpr int kElemBytes = 2, kChunkBytes = 16, kRowsPerAtom = 8;
    const int byte_in_row = col * kElemBytes;
    const int chunk = (byte_in_row / kChunkBytes) ^ (row % kRowsPerAtom);
    return row * kSwizzleBytes + chunk * kChunkBytes + byte_in_row % kChunkBytes;
}

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ---------------------------------------------------------------------------------------
// Per-warpgroup softmax state. Accumulator fragment of an m64nN f32 wgmma: thread (warp w,
// lane l) holds rows r0 = 16w + l/4 and r0 + 8; element i sits in row r0 + 8*((i/2)%2),
// column 8*(i/4) + 2*(l%4) + i%2. A thread's two rows are shared with the 3 other lanes of
// its quad, so row reductions are two shuffles.
// ---------------------------------------------------------------------------------------
template <class Cfg>
struct Softmax {
    static constexpr int kRowsPerThread = 2;
    float row_max[kRowsPerThread];  // running max of raw scores (-inf: nothing seen yet)
    float row_sum[kRowsPerThread];  // running sum of exps, partial per thread until the end

    __device__ __forceinline__ void init() {
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
            row_max[r] = -INFINITY;
            row_sum[r] = 0.f;
        }
    }

    // s holds raw scores of one block; on return it holds unnormalised probabilities
    // exp(scale * (s - max)) and o_scale the factor by which O must be rescaled.
    __device__ __forceinline__ void online_update(float (&s)[Cfg::kBlockN / 2], float scale_log2,
                                                  float (&o_scale)[kRowsPerThread]) {
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
            float m = row_max[r];
#pragma unroll
            for (int i = 0; i < Cfg::kBlockN / 2; ++i)
                if ((i / 2) % 2 == r) m = fmaxf(m, s[i]);
            m = quad_max(m);
            // A row with every key masked so far keeps max = -inf; exponentiate against 0
            // instead so that exp2(-inf - (-inf)) never produces a NaN.
            const float m_scaled = (m == -INFINITY) ? 0.f : m * scale_log2;
            o_scale[r] = ptx::ex2_approx_f32(row_max[r] * scale_log2 - m_scaled);
            row_max[r] = m;
            float sum = 0.f;
#pragma unroll
            for (int i = 0; i < Cfg::kBlockN / 2; ++i) {
                if ((i / 2) % 2 == r) {
                    s[i] = ptx::ex2_approx_f32(fmaf(s[i], scale_log2, -m_scaled));
                    sum += s[i];
                }
            }
            row_sum[r] = row_sum[r] * o_scale[r] + sum;
        }
    }
};

template <int kN>
__device__ __forceinline__ void rescale_rows(float (&acc)[kN], const float (&row_scale)[2]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) acc[i] *= row_scale[(i / 2) % 2];
}

// P (fp32 probabilities in the S accumulator layout) -> 16-bit A fragments for RS-wgmma.
// The k16 slice kk of P is n8 groups 2kk and 2kk+1 of S, which is exactly wgmma's A
// fragment order: no shuffles, no trip through shared memory.
template <class Cfg>
__device__ __forceinline__ void convert_p(const float (&s)[Cfg::kBlockN / 2],
                                          uint32_t (&p)[Cfg::kBlockN / kMmaK][4]) {
#pragma unroll
    for (int kk = 0; kk < Cfg::kBlockN / kMmaK; ++kk) {
#pragma unroll
        for (int j = 0; j < 4; ++j) p[kk][j] = ptx::pack_f32x2<Cfg::kIsBf16>(s[8 * kk + 2 * j], s[8 * kk + 2 * j + 1]);
    }
}

// Set scores of keys this row may not see to -inf: keys past seqlen_k, and (causal, aligned
// bottom-right) keys after query_row + seqlen_k - seqlen_q.
template <class Cfg>
__device__ __forceinline__ void apply_mask(float (&s)[Cfg::kBlockN / 2], int n_block, int first_row,
                                           const KernelParams& p) {
    const int lane = threadIdx.x % 32;
    const int col0 = n_block * Cfg::kBlockN + 2 * (lane % 4);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = first_row + 8 * r;
        const int limit = p.causal ? min(p.seqlen_k, row + p.seqlen_k - p.seqlen_q + 1) : p.seqlen_k;
#pragma unroll
        for (int i = 0; i < Cfg::kBlockN / 2; ++i) {
            if ((i / 2) % 2 != r) continue;
            const int col = col0 + 8 * (i / 4) + i % 2;
            if (col >= limit) s[i] = -INFINITY;
        }
    }
}

// One work tile: kBlockM query rows of one (head, batch) and the KV blocks they need.
struct Tile {
    int m0, head, batch, kv_head;
    int n_blocks;  // KV blocks to visit (0: every row is fully masked; O = 0, LSE = -inf)
};

// Tiles are numbered with the query block fastest, so CTAs running at the same time share a
// head's K and V in L2; causal tiles of a head go longest first (the highest query block sees
// the most keys), so a head's short tiles fill the tail.
template <class Cfg>
__device__ __forceinline__ Tile tile_at(int index, const KernelParams& p) {
    Tile t;
    const int m_index = index % p.num_m_blocks;
    const int head_batch = index / p.num_m_blocks;
    const int m_block = p.causal ? p.num_m_blocks - 1 - m_index : m_index;
    t.m0 = m_block * kBlockM;
    t.head = head_batch % p.heads_q;
    t.batch = head_batch / p.heads_q;
    t.kv_head = t.head / p.heads_per_kv;
    // KV blocks needed: all of them, or (causal) up to the last row's diagonal.
    const int kv_end = p.causal ? min(p.seqlen_k, t.m0 + kBlockM + p.seqlen_k - p.seqlen_q) : p.seqlen_k;
    t.n_blocks = kv_end > 0 ? (kv_end + Cfg::kBlockN - 1) / Cfg::kBlockN : 0;
    return t;
}

// ---------------------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------------------
template <class Cfg>
__global__ void __launch_bounds__(kNumThreads, 1)
    fwd_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
               const __grid_constant__ CUtensorMap tmap_v, const __grid_constant__ CUtensorMap tmap_o,
               const KernelParams p) {
    constexpr int kBlockN = Cfg::kBlockN;
    constexpr int kStages = Cfg::kStages;
    constexpr int kChunks = Cfg::kChunks;
    constexpr uint32_t kQBytes = sizeof(uint16_t) * kBlockM * Cfg::kHeadDim;
    constexpr uint32_t kKvBytes = sizeof(uint16_t) * kBlockN * Cfg::kHeadDim;
    constexpr uint32_t kBlockBytes = kBlockN * kSwizzleBytes;  // one [kBlockN][64] swizzle block
    constexpr uint32_t kWarpsPerWarpgroup = kWarpgroupThreads / 32;

    extern __shared__ uint8_t smem_raw[];
    auto& smem = *reinterpret_cast<SharedStorage<Cfg>*>(
        (reinterpret_cast<uintptr_t>(smem_raw) + kSharedAlign - 1) & ~uintptr_t(kSharedAlign - 1));

    const uint32_t warpgroup = ptx::warpgroup_index();

    // Barrier setup by one thread, published to the async proxy (TMA completes on these
    // barriers) and to every thread before anyone touches them.
    if (threadIdx.x == 0) {
        ptx::prefetch_tensormap(&tmap_q);
        ptx::prefetch_tensormap(&tmap_k);
        ptx::prefetch_tensormap(&tmap_v);
        ptx::prefetch_tensormap(&tmap_o);
        ptx::mbarrier_init(&smem.q_full, 1);
        // Q is free again once both consumers are done with it: right after their last QK^T
        // when O has its own staging buffer (one lane per warp arrives), else once the O
        // store that reuses Q's buffer has been read out (one thread per warpgroup).
        ptx::mbarrier_init(&smem.q_empty, Cfg::kSeparateO ? kNumConsumerWarpgroups * kWarpsPerWarpgroup
                                                           : kNumConsumerWarpgroups);
        for (int s = 0; s < kStages; ++s) {
            ptx::mbarrier_init(&smem.k_full[s], 1);
            ptx::mbarrier_init(&smem.v_full[s], 1);
            // Released by one lane of every consumer warp once its last wgmma on the slot is done.
            // K and V are released separately (K after QK^T, V after PV) so the producer can
            // refill K while the PV GEMM of the same block still reads V.
            ptx::mbarrier_init(&smem.k_empty[s], kNumConsumerWarpgroups * kWarpsPerWarpgroup);
            ptx::mbarrier_init(&smem.v_empty[s], kNumConsumerWarpgroups * kWarpsPerWarpgroup);
        }
        ptx::fence_mbarrier_init();
    }
    __syncthreads();

    // Every CTA walks the tiles blockIdx.x, blockIdx.x + gridDim.x, ... The host launches one
    // CTA per tile for long sequences (the hardware then balances the tiles) and one CTA per SM
    // for short ones (persistent: the producer loads the next tile's Q and K while the
    // consumers finish the current one, hiding the per-tile start-up). Producer and consumers
    // count K/V blocks and Q tiles the same way, which keeps every barrier phase in step.
    if (warpgroup == 0) {
        // ================================ producer ================================
        ptx::setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x / 32 == 0 && ptx::elect_one_sync()) {
            int kv_count = 0;  // K/V blocks loaded so far, over all tiles: slot and phase
            int q_count = 0;   // Q tiles loaded so far
            for (int index = blockIdx.x; index < p.num_tiles; index += gridDim.x) {
                const Tile t = tile_at<Cfg>(index, p);
                // K runs one block ahead of V, matching the consumers' order: they need K_it and
                // V_{it-1} together (S_it and P_{it-1} V_{it-1} are issued back to back).
                auto load_k = [&](int it) {
                    const int g = kv_count + it, stage = g % kStages;
                    ptx::mbarrier_wait(&smem.k_empty[stage], ((g / kStages) & 1) ^ 1);  // first pass: free
                    ptx::mbarrier_arrive_expect_tx(&smem.k_full[stage], kKvBytes);
#pragma unroll 1
                    for (int c = 0; c < kChunks; ++c)
                        ptx::tma_load_4d(&smem.k[stage][c][0][0], &tmap_k, &smem.k_full[stage], c * kColsPerSwizzleRow,
                                         (t.n_blocks - 1 - it) * kBlockN, t.kv_head, t.batch);
                };
                auto load_v = [&](int it) {
                    const int g = kv_count + it, stage = g % kStages;
                    ptx::mbarrier_wait(&smem.v_empty[stage], ((g / kStages) & 1) ^ 1);
                    ptx::mbarrier_arrive_expect_tx(&smem.v_full[stage], kKvBytes);
#pragma unroll 1
                    for (int c = 0; c < kChunks; ++c)
                        ptx::tma_load_4d(&smem.v[stage][c][0][0], &tmap_v, &smem.v_full[stage], c * kColsPerSwizzleRow,
                                         (t.n_blocks - 1 - it) * kBlockN, t.kv_head, t.batch);
                };
                // Q is loaded for every tile, even one with nothing to attend to, so that the Q
                // barriers' phases never depend on the mask.
                ptx::mbarrier_wait(&smem.q_empty, (q_count & 1) ^ 1);
                ptx::mbarrier_arrive_expect_tx(&smem.q_full, kQBytes);
#pragma unroll 1
                for (int c = 0; c < kChunks; ++c)
                    ptx::tma_load_4d(&smem.q[c][0][0], &tmap_q, &smem.q_full, c * kColsPerSwizzleRow, t.m0, t.head,
                                     t.batch);
                ++q_count;
                if (t.n_blocks > 0) {
                    load_k(0);
                    for (int it = 1; it < t.n_blocks; ++it) {
                        load_k(it);
                        load_v(it - 1);
                    }
                    load_v(t.n_blocks - 1);
                }
                kv_count += t.n_blocks;
            }
        }
    } else {
        // ================================ consumers ===============================
        ptx::setmaxnreg_inc<kConsumerRegs>();
        const int cw = warpgroup - 1;  // 0 or 1: which 64-row half of the tile
        const int tid = threadIdx.x % kWarpgroupThreads;
        const int warp = tid / 32, lane = tid % 32;
        const uint32_t my_turn = cw == 0 ? kTurnWg1 : kTurnWg2;
        const uint32_t other_turn = cw == 0 ? kTurnWg2 : kTurnWg1;

        float o[Cfg::kHeadDim / 2];
        Softmax<Cfg> softmax;

        // Descriptors. Q/K are K-major: the k16 step kk is 32 bytes into the 128-byte swizzle
        // row of chunk kk/4. V is MN-major (rows are keys): k16 step kk is 16 rows further,
        // and the 64-column blocks of head_dim are one kBlockN x 128-byte block apart (LBO).
        const uint32_t q_base = ptx::smem_u32(&smem.q[0][cw * kRowsPerConsumer][0]);
        constexpr uint32_t kQChunkBytes = kBlockM * kSwizzleBytes;
        constexpr uint32_t kKStepBytes = kMmaK * sizeof(uint16_t);
        constexpr int kKStepsPerChunk = kColsPerSwizzleRow / kMmaK;

        auto gemm_qk = [&](float (&s)[kBlockN / 2], int stage) {
            const uint32_t k_base = ptx::smem_u32(&smem.k[stage][0][0][0]);
#pragma unroll
            for (int kk = 0; kk < Cfg::kHeadDim / kMmaK; ++kk) {
                const uint32_t off = (kk % kKStepsPerChunk) * kKStepBytes;
                const uint32_t chunk = kk / kKStepsPerChunk;
                const uint64_t da = ptx::make_smem_desc_k_major(q_base + chunk * kQChunkBytes + off, ptx::Swizzle::k128B);
                const uint64_t db = ptx::make_smem_desc_k_major(k_base + chunk * kBlockBytes + off, ptx::Swizzle::k128B);
                mma_ss<kBlockN, Cfg::kIsBf16, 0>(s, da, db, kk > 0 ? 1u : 0u);
            }
        };
        auto gemm_pv = [&](const uint32_t (&pf)[kBlockN / kMmaK][4], int stage) {
            const uint32_t v_base = ptx::smem_u32(&smem.v[stage][0][0][0]);
#pragma unroll
            for (int kk = 0; kk < kBlockN / kMmaK; ++kk) {
                const uint64_t db = ptx::make_smem_desc_mn_major(v_base + kk * kMmaK * kSwizzleBytes, ptx::Swizzle::k128B,
                                                                 kBlockBytes);
                mma_rs<Cfg::kHeadDim, Cfg::kIsBf16, 1>(o, pf[kk], db, 1u);
            }
        };
        // Ping-pong: wait for our turn on the tensor cores / hand it to the other warpgroup.
        auto take_turn = [&]() {
            if constexpr (Cfg::kPingPong) ptx::bar_sync(my_turn, kTurnThreads);
        };
        auto pass_turn = [&]() {
            if constexpr (Cfg::kPingPong) ptx::bar_arrive(other_turn, kTurnThreads);
        };
        auto release_k = [&](int stage) {
            if (lane == 0) ptx::mbarrier_arrive(&smem.k_empty[stage]);
        };
        auto release_v = [&](int stage) {
            if (lane == 0) ptx::mbarrier_arrive(&smem.v_empty[stage]);
        };

        int kv_count = 0;  // K/V blocks consumed so far, over all tiles: slot and phase
        int q_count = 0;   // Q tiles consumed so far
        for (int index = blockIdx.x; index < p.num_tiles; index += gridDim.x) {
            const Tile t = tile_at<Cfg>(index, p);
            const int first_row = t.m0 + cw * kRowsPerConsumer + 16 * warp + lane / 4;  // this thread's row (and +8)
            // Blocks that can contain masked keys: the seqlen_k tail and (causal) the diagonal.
            auto needs_mask = [&](int n_block) {
                const int block_end = (n_block + 1) * kBlockN;
                return block_end > p.seqlen_k || (p.causal && block_end > t.m0 + p.seqlen_k - p.seqlen_q + 1);
            };
            // Blocks are visited from n_blocks - 1 down, and needs_mask is monotonic in n_block,
            // so the masked ones are exactly the first iterations: count them.
            auto masked_block_count = [&]() {
                int first_masked = p.seqlen_k / kBlockN;  // lowest block reaching past seqlen_k
                if (p.causal) first_masked = min(first_masked, max(t.m0 + p.seqlen_k - p.seqlen_q + 1, 0) / kBlockN);
                return min(t.n_blocks, max(t.n_blocks - first_masked, 0));
            };
            // Pipeline slot and phase of this tile's it-th K/V block.
            auto slot = [&](int it) { return (kv_count + it) % kStages; };
            auto phase = [&](int it) { return static_cast<uint32_t>(((kv_count + it) / kStages) & 1); };

#pragma unroll
            for (int i = 0; i < Cfg::kHeadDim / 2; ++i) o[i] = 0.f;
            softmax.init();
            ptx::mbarrier_wait(&smem.q_full, q_count & 1);

            if (t.n_blocks > 0) {
                // Warpgroup 1 goes first: warpgroup 2 grants it the first turn.
                if (Cfg::kPingPong && cw == 1) ptx::bar_arrive(other_turn, kTurnThreads);

                float s[kBlockN / 2];
                uint32_t pf[kBlockN / kMmaK][4];
                float o_scale[2];

                if constexpr (Cfg::kIntraWgOverlap) {
                    // Prologue: S for the first (highest) block and its softmax; no PV yet.
                    const int n_block = t.n_blocks - 1;
                    ptx::mbarrier_wait(&smem.k_full[slot(0)], phase(0));
                    take_turn();
                    ptx::wgmma_fence();
                    gemm_qk(s, slot(0));
                    ptx::wgmma_commit_group();
                    pass_turn();
                    ptx::wgmma_wait_group<0>();
                    ptx::wgmma_fence_operand(s);
                    release_k(slot(0));
                    if (needs_mask(n_block)) apply_mask<Cfg>(s, n_block, first_row, p);
                    softmax.online_update(s, p.scale_log2, o_scale);

                    // Steady state: issue S_it and O += P_{it-1} V_{it-1} together, then run the
                    // softmax of S_it while that PV GEMM is still on the tensor cores. The wait for
                    // the PV GEMM, O's rescale and P's conversion open the *next* step, behind its
                    // mbarrier waits: P's registers are the A operand of the PV GEMM in flight, so
                    // any write to them must follow the wait, and ptxas would otherwise pull the
                    // wait (and the conversion with it) above the exps of the same basic block.
                    auto step = [&](int it, auto masked) {
                        const int n_block = t.n_blocks - 1 - it;
                        const int stage = slot(it), prev_stage = slot(it - 1);
                        // Both waits come before the GEMMs: a wait loop between two wgmma batches
                        // makes ptxas inject an extra warpgroup.arrive.
                        ptx::mbarrier_wait(&smem.k_full[stage], phase(it));
                        ptx::mbarrier_wait(&smem.v_full[prev_stage], phase(it - 1));
                        ptx::wgmma_wait_group<0>();  // P_{it-2} V_{it-2} done (none at it = 1)
                        ptx::wgmma_fence_operand(o);
                        if (it >= 2) release_v(slot(it - 2));
                        rescale_rows(o, o_scale);
                        convert_p<Cfg>(s, pf);
                        take_turn();
                        ptx::wgmma_fence();
                        gemm_qk(s, stage);
                        ptx::wgmma_commit_group();
                        ptx::wgmma_fence();
                        gemm_pv(pf, prev_stage);
                        ptx::wgmma_commit_group();
                        pass_turn();
                        ptx::wgmma_wait_group<1>();  // S_it is ready; PV may still run
                        ptx::wgmma_fence_operand(s);
                        release_k(stage);
                        if constexpr (decltype(masked)::value) apply_mask<Cfg>(s, n_block, first_row, p);
                        softmax.online_update(s, p.scale_log2, o_scale);
                    };
                    const int n_masked = masked_block_count();
                    int it = 1;
                    for (; it < n_masked; ++it) step(it, std::true_type{});
                    for (; it < t.n_blocks; ++it) step(it, std::false_type{});
                    // Epilogue of the pipeline: the last PV.
                    const int last = t.n_blocks - 1;
                    ptx::mbarrier_wait(&smem.v_full[slot(last)], phase(last));
                    ptx::wgmma_wait_group<0>();
                    ptx::wgmma_fence_operand(o);
                    if (last >= 1) release_v(slot(last - 1));
                    rescale_rows(o, o_scale);
                    convert_p<Cfg>(s, pf);
                    take_turn();
                    ptx::wgmma_fence();
                    gemm_pv(pf, slot(last));
                    ptx::wgmma_commit_group();
                    pass_turn();
                    ptx::wgmma_wait_group<0>();
                    ptx::wgmma_fence_operand(o);
                    release_v(slot(last));
                } else {
                    // One block at a time: S, softmax, PV, with no overlap inside the warpgroup.
                    for (int it = 0; it < t.n_blocks; ++it) {
                        const int n_block = t.n_blocks - 1 - it;
                        const int stage = slot(it);
                        ptx::mbarrier_wait(&smem.k_full[stage], phase(it));
                        take_turn();
                        ptx::wgmma_fence();
                        gemm_qk(s, stage);
                        ptx::wgmma_commit_group();
                        pass_turn();
                        ptx::wgmma_wait_group<0>();
                        ptx::wgmma_fence_operand(s);
                        release_k(stage);
                        if (needs_mask(n_block)) apply_mask<Cfg>(s, n_block, first_row, p);
                        softmax.online_update(s, p.scale_log2, o_scale);
                        rescale_rows(o, o_scale);
                        convert_p<Cfg>(s, pf);
                        ptx::mbarrier_wait(&smem.v_full[stage], phase(it));
                        take_turn();
                        ptx::wgmma_fence();
                        gemm_pv(pf, stage);
                        ptx::wgmma_commit_group();
                        pass_turn();
                        ptx::wgmma_wait_group<0>();
                        ptx::wgmma_fence_operand(o);
                        release_v(stage);
                    }
                }
                // Warpgroup 2 granted one turn more than warpgroup 1 takes (the opening one);
                // consume it so the barrier is left balanced.
                if (Cfg::kPingPong && cw == 0) ptx::bar_sync(my_turn, kTurnThreads);
            }
            kv_count += t.n_blocks;
            ++q_count;
            // With its own O buffer, Q is free as soon as our last QK^T has completed: the
            // producer loads the next tile's Q while we write this tile's O.
            if (Cfg::kSeparateO && lane == 0) ptx::mbarrier_arrive(&smem.q_empty);

            // ============================== epilogue ==============================
            // O /= rowsum, then O -> smem -> TMA store. LSE straight to global.
            float inv_sum[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float sum = quad_sum(softmax.row_sum[r]);
                inv_sum[r] = sum > 0.f ? 1.f / sum : 0.f;
                const int row = first_row + 8 * r;
                if (p.lse != nullptr && lane % 4 == 0 && row < p.seqlen_q) {
                    const float lse = sum > 0.f ? softmax.row_max[r] * p.scale + logf(sum) : -INFINITY;
                    p.lse[(static_cast<int64_t>(t.batch) * p.heads_q + t.head) * p.seqlen_q + row] = lse;
                }
            }
            rescale_rows(o, inv_sum);

            // This warpgroup's 64 rows of the staging buffer (O's own, or Q's, whose last reader,
            // our QK^T, has completed). The barrier keeps anyone from overwriting it before the
            // previous tile's store has read it out (thread 0 waits for that below).
            const uint32_t epilogue_barrier = cw == 0 ? kEpilogueWg1 : kEpilogueWg2;
            uint8_t* o_tile = Cfg::kSeparateO ? reinterpret_cast<uint8_t*>(&smem.o[0][cw * kRowsPerConsumer][0])
                                              : reinterpret_cast<uint8_t*>(&smem.q[0][cw * kRowsPerConsumer][0]);
            ptx::bar_sync(epilogue_barrier, kWarpgroupThreads);
            const int local_row = 16 * warp + lane / 4;
#pragma unroll
            for (int i = 0; i < Cfg::kHeadDim / 2; i += 2) {
                const int row = local_row + 8 * ((i / 2) % 2);
                const int col = 8 * (i / 4) + 2 * (lane % 4);
                const int chunk = col / kColsPerSwizzleRow;
                *reinterpret_cast<uint32_t*>(o_tile + chunk * kQChunkBytes + swizzle128_offset(row, col % kColsPerSwizzleRow)) =
                    ptx::pack_f32x2<Cfg::kIsBf16>(o[i], o[i + 1]);
            }
            // Generic-proxy stores -> visible to the TMA engine, then the whole warpgroup agrees.
            ptx::fence_proxy_async_shared_cta();
            ptx::bar_sync(epilogue_barrier, kWarpgroupThreads);
            if (tid == 0) {
                for (int c = 0; c < kChunks; ++c)
                    ptx::tma_store_4d(&tmap_o, o_tile + c * kQChunkBytes, c * kColsPerSwizzleRow,
                                      t.m0 + cw * kRowsPerConsumer, t.head, t.batch);
                ptx::bulk_commit_group();
                ptx::bulk_wait_group_read<0>();  // the staging buffer must outlive the copy's reads
                if (!Cfg::kSeparateO) ptx::mbarrier_arrive(&smem.q_empty);  // O was staged in Q
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Launcher
// ---------------------------------------------------------------------------------------
inline bool make_qkvo_map(CUtensorMap* map, const void* base, int head_dim, int seqlen, int heads, int batch,
                          int64_t seq_stride, int64_t head_stride, int64_t batch_stride, uint32_t box_rows,
                          bool is_bf16, std::string* error) {
    constexpr uint64_t kElemBytes = 2;
    sm90::TensorMapSpec spec;
    spec.base = base;
    spec.dtype = is_bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    spec.rank = 4;  // {head_dim, seqlen, heads, batch}, innermost first
    spec.dims[0] = head_dim;
    spec.dims[1] = seqlen;
    spec.dims[2] = heads;
    spec.dims[3] = batch;
    spec.strides_bytes[0] = seq_stride * kElemBytes;
    spec.strides_bytes[1] = head_stride * kElemBytes;
    spec.strides_bytes[2] = batch_stride * kElemBytes;
    spec.box[0] = kColsPerSwizzleRow;
    spec.box[1] = box_rows;
    spec.box[2] = 1;
    spec.box[3] = 1;
    spec.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    return sm90::encode_tensor_map(map, spec, error);
}

// Non-causal problems with at most this many keys run on a persistent grid (see launch_fwd).
constexpr int kPersistentMaxSeqlenK = 2048;

template <class Cfg>
cudaError_t launch_fwd(const FwdArgs& a, cudaStream_t stream, std::string* error) {
    const bool bf16 = Cfg::kIsBf16;
    CUtensorMap tq, tk, tv, to;
    if (!make_qkvo_map(&tq, a.q, a.head_dim, a.seqlen_q, a.heads_q, a.batch, a.q_seq_stride, a.q_head_stride,
                       a.q_batch_stride, kBlockM, bf16, error) ||
        !make_qkvo_map(&tk, a.k, a.head_dim, a.seqlen_k, a.heads_kv, a.batch, a.k_seq_stride, a.k_head_stride,
                       a.k_batch_stride, Cfg::kBlockN, bf16, error) ||
        !make_qkvo_map(&tv, a.v, a.head_dim, a.seqlen_k, a.heads_kv, a.batch, a.v_seq_stride, a.v_head_stride,
                       a.v_batch_stride, Cfg::kBlockN, bf16, error) ||
        !make_qkvo_map(&to, a.o, a.head_dim, a.seqlen_q, a.heads_q, a.batch, a.o_seq_stride, a.o_head_stride,
                       a.o_batch_stride, kRowsPerConsumer, bf16, error)) {
        return cudaErrorInvalidValue;
    }
    KernelParams p;
    p.lse = a.lse;
    p.seqlen_q = a.seqlen_q;
    p.seqlen_k = a.seqlen_k;
    p.heads_q = a.heads_q;
    p.heads_per_kv = a.heads_q / a.heads_kv;
    p.num_m_blocks = (a.seqlen_q + kBlockM - 1) / kBlockM;
    const int64_t num_tiles = static_cast<int64_t>(p.num_m_blocks) * a.heads_q * a.batch;
    if (num_tiles > INT32_MAX) {
        if (error) *error = "batch * heads_q * ceil(seqlen_q / 128) exceeds 2^31 - 1 tiles";
        return cudaErrorInvalidValue;
    }
    p.num_tiles = static_cast<int>(num_tiles);
    p.causal = a.causal ? 1 : 0;
    p.scale = a.softmax_scale;
    p.scale_log2 = a.softmax_scale * kLog2e;

    constexpr int kSmem = shared_bytes<Cfg>();
    static_assert(kSmem <= kMaxSharedBytes, "tile does not fit in shared memory");
    auto kernel = fwd_kernel<Cfg>;
    cudaError_t rc = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (rc != cudaSuccess) {
        if (error) *error = std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(rc);
        return rc;
    }
    int ctas = a.grid_ctas > 0 ? min(a.grid_ctas, p.num_tiles) : p.num_tiles;
    if (a.grid_ctas == 0) {
        // Short tiles spend a large share of their time starting up (barrier setup, first Q/K
        // loads, O store); without a causal mask every tile costs the same, and one persistent
        // CTA per SM overlaps that start-up with the previous tile: +4-15% at seqlen_k <= 2k
        // (bench/RESULTS.md, run 6). Long tiles amortize it (and measured up to 5% slower
        // persistent at 16k), and causal tiles differ in cost, which the hardware's block
        // scheduler balances better than a static walk (5-20% slower persistent), so both get
        // one CTA per tile.
        int device = 0, sms = 0;
        rc = cudaGetDevice(&device);
        if (rc == cudaSuccess) rc = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        if (rc != cudaSuccess) {
            if (error) *error = std::string("querying the SM count: ") + cudaGetErrorString(rc);
            return rc;
        }
        if (!a.causal && a.seqlen_k <= kPersistentMaxSeqlenK) ctas = min(p.num_tiles, sms);
    }
    kernel<<<ctas, kNumThreads, kSmem, stream>>>(tq, tk, tv, to, p);
    rc = cudaGetLastError();
    if (rc != cudaSuccess && error) *error = std::string("forward kernel launch: ") + cudaGetErrorString(rc);
    return rc;
}

// Entry point for one head dim: picks dtype and (d = 128, bf16 only) the ablation variant.
template <int kHeadDim>
cudaError_t launch_fwd_head_dim(const FwdArgs& a, cudaStream_t stream, std::string* error) {
    if (a.head_dim != kHeadDim) {
        if (error) *error = "launch_fwd_head_dim: head_dim mismatch";
        return cudaErrorInvalidValue;
    }
    if (a.dtype == Dtype::kBf16) {
        if constexpr (kHeadDim == 128) {
            if (!a.pingpong && !a.intra_wg_overlap) return launch_fwd<Config<kHeadDim, true, false, false>>(a, stream, error);
            if (!a.pingpong) return launch_fwd<Config<kHeadDim, true, false, true>>(a, stream, error);
            if (!a.intra_wg_overlap) return launch_fwd<Config<kHeadDim, true, true, false>>(a, stream, error);
        }
        if (!a.pingpong || !a.intra_wg_overlap) {
            if (error) *error = "ablation variants are built for head_dim 128 bf16 only";
            return cudaErrorInvalidValue;
        }
        return launch_fwd<Config<kHeadDim, true>>(a, stream, error);
    }
    if (!a.pingpong || !a.intra_wg_overlap) {
        if (error) *error = "ablation variants are built for head_dim 128 bf16 only";
        return cudaErrorInvalidValue;
    }
    return launch_fwd<Config<kHeadDim, false>>(a, stream, error);
}

}  // namespace hattn::fwd
