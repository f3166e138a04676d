// hattn/src/kernels/fwd_fp8.cuh -- FP8 (e4m3) forward attention for Hopper: e4m3 Q, K, V with
// per-block fp32 descales (hattn_fp8_prepass's output), fp32 accumulation, bf16/fp16 O, fp32 LSE.
//
// The schedule is the 16-bit forward's (kernels/fwd.cuh: one TMA producer warpgroup, two
// consumer warpgroups taking turns on the tensor cores, S_{j+1} issued with P_j V_j); what
// differs for 8-bit operands:
//   * wgmma reads 8-bit A and B K-major only. S = Q K^T is K-major on both sides as before, but
//     O += P V needs V with the keys (the reduction) contiguous: V^T. The launcher first writes
//     V^T ([batch, heads_kv, head_dim, vt_keys] e4m3) into the caller's workspace with a small
//     transpose kernel (transpose_v_kernel below), then the attention kernel loads V^T tiles
//     [head_dim rows x kBlockN keys] through TMA like K tiles. With HATTN_FWD_FP8_V_TRANSPOSED the
//     caller passes V^T itself (hattn_fp8_prepass writes it with HATTN_FP8_PREPASS_V_TRANSPOSED)
//     and the transpose pass is skipped. For short problems (in_kernel_transpose_max_rows) the
//     kernel transposes V itself instead (Tuning::kTransposeV): TMA stages each block's V rows,
//     and the producer warpgroup's three warps that issue no TMA write them into the V^T slot
//     (ldmatrix.trans, one byte permute per word, stmatrix: sm90::transpose_v_tile).
//   * P becomes the 8-bit A operand in registers. Its fragment wants 4 consecutive k per
//     register where the fp32 accumulator holds pairs 8 columns apart; instead of shuffling, the
//     transpose writes V^T's keys in the permuted order sm90::e4m3_k_to_key, so each thread's
//     own accumulator values are its A fragment (sm90::acc_to_a_fragment_e4m3).
//   * Descales. S = (Q K^T) * q_descale * k_descale(block) * softmax_scale: KV blocks are 128
//     keys, aligned to the 128-row descale blocks, so each has one k_descale; q_descale is one per
//     64-row slice. Both go into the block's exponent scale (sm90::BlockScaledSoftmax keeps the
//     running max in scaled units, so no score is multiplied separately). P is computed as
//     256 p (p <= 1, the gain folded into the exponent) and quantized to e4m3. V's descale changes from block to
//     block: O is kept in units of the current block's v_descale (O's per-row rescale before
//     each P V also carries v_descale(previous) / v_descale(current), a free multiply), and the
//     epilogue multiplies by v_descale(last) / row sum.
//
// NOTES
//   * Tile 128 x 128 at head_dim 128 (FA3 uses 128 x 224 for FP8 d128: more work per wait and
//     per turn). A block wider than the 128-row descale blocks takes its descales per group of
//     keys (Config::kDescaleGroups, LazyBlockScaledSoftmax's kGroups); 192-key blocks built so
//     (the lazy_n192 variants) measured +1.5% at d128 >= 8k and -2 to -6% at 2k (RESULTS run 37a):
//     no fewer instructions per key, so not the default. 256-key blocks would double S's
//     registers (128 + O's 64 + P's 32 per thread): no room under 240.
//   * Per head dim (DefaultTuning, default_consumers): d = 64 runs three consumer warpgroups
//     (192-row tiles; its exps take twice its GEMMs' time) with P in two register sets, the one
//     variant that fits their 160 registers; d = 128 and 256 sum P's rows on the tensor cores (an
//     m64n8 wgmma of P against a tile of ones), so their LSE comes from P as rounded to e4m3; d = 128
//     also takes the early exps (the block max beside the exps, not ahead of them). The row sums
//     cannot ride along as pad columns of P V (a probe of run 43a, 2-4% faster): FP8 wgmma adds in a
//     window of ~13 bits below its largest term, so a sum of positive weights chained over
//     thousands of keys stops taking the small ones (run 43a: rel L2 0.07 at 4k keys, 0.32 at 16k),
//     and restarting the pad columns each block, a partial write of the accumulator by ALU or by a
//     narrower wgmma, makes ptxas serialize every wgmma (C7511). O's chain is safe: the truncations
//     of its signed terms cancel instead of piling up. d = 256 takes the early exps too (it kept
//     Q's A fragments in registers before, Tuning::kQInRegisters: its 64-key S = Q K^T with both
//     operands from shared memory needs 64 B per 2*64*64*32 FLOP, shared memory's whole bandwidth
//     at the e4m3 rate; run 54f: the early exps +0.9-1.8% over that, the two together spill). Since
//     run 69a d = 128 and 256 keep Q's first 128 columns in registers beside the early exps
//     (Tuning::kQRegisterCols: at d = 256 half of Q, which fits; d256 +2.0-3.0%). No
//     head dim takes the ping-pong turns of the 16-bit forward: there the exps of one warpgroup
//     hide behind the other's GEMMs, but FP8's GEMMs are half as long as its exps, so with turns a
//     warpgroup whose softmax is done waits for the other's issue instead of queueing its own.
//   * Every descale of a KV block is read by all consumer threads from the same address (one
//     broadcast load per warp, L1-resident), issued at the top of a step so its latency hides
//     behind the mbarrier waits.
//   * A V block of all zeros has descale 0: it contributes nothing and O keeps its unit. The
//     ratio of two descales is in fp32; descales come from amax / 448 of real data, so their
//     ratios stay far from fp32's range limits.
//   * Grid: without a mask one persistent CTA per SM walking the tiles; causal, the same for short
//     keys and one CTA per tile past kPersistentCausalMaxSeqlenK, or with a schedule workspace,
//     from dynamic_causal_min_seqlen_k keys on, one CTA per SM claiming tiles from a counter
//     (+2-6% at d64/d128 2k-16k over those, bench/RESULTS.md run 47a). On a walk the schedule runs on
//     across tile boundaries as in the 16-bit forward: the ping-pong turn passes straight to the
//     next tile, Q is freed after the last QK^T into one of two slots, and the O store's read wait
//     moves to the next epilogue.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/fwd_fp8_args.h"
#include "kernels/sm90/epilogue.cuh"
#include "kernels/sm90/forward_roles.cuh"
#include "kernels/sm90/fragment.cuh"
#include "kernels/sm90/fragment_e4m3.cuh"
#include "kernels/sm90/launch_setup.h"
#include "kernels/sm90/mask.cuh"
#include "kernels/sm90/pipeline.cuh"
#include "kernels/sm90/scheduler.cuh"
#include "kernels/sm90/scores_recompute.cuh"
#include "kernels/sm90/vt_e4m3.cuh"
#include "kernels/sm90/softmax_block_scaled.cuh"
#include "kernels/sm90/split_tail.cuh"
#include "kernels/sm90/tensor_map.h"
#include "kernels/sm90/tile.cuh"
#include "ptx/fence.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "ptx/warp.cuh"
#include "ptx/wgmma.cuh"

// A timeline probe (bench/fwd_fp8_trace.cu) defines HATTN_FP8_TRACE_POINT(consumer, warp, pass,
// step, point) and HATTN_FP8_TRACE_TILE(consumer, warp, pass, point) before including this file to
// stamp the clock at the steady state's steps and at each tile's phases; the library's kernels
// leave them empty.
#ifndef HATTN_FP8_TRACE_POINT
#define HATTN_FP8_TRACE_POINT(consumer, warp, pass, step, point)
#endif
#ifndef HATTN_FP8_TRACE_TILE
#define HATTN_FP8_TRACE_TILE(consumer, warp, pass, point)
#endif

namespace hattn::fwd_fp8 {

using namespace hattn::sm90;

constexpr int kSharedAlign = 1024;
constexpr int kMaxSharedBytes = 227 * 1024;

// The tile walk (sm90::TileScheduler), as in the 16-bit forward (kernels/fwd_rules.h): with
// Fp8FwdArgs::schedule_workspace, a causal problem of at least dynamic_causal_min_seqlen_k keys
// runs on a persistent grid whose producers claim tiles, longest first, from a counter
// (HATTN_FWD_FP8_DYNAMIC_CAUSAL=0 turns that off: the workspace is ignored; a kernel with Q in
// registers keeps the fixed walk, Config::kTileHandOff). The producer announces each tile on an mbarrier of its own
// before Q's TMA (HATTN_FWD_FP8_TILE_ANNOUNCE; 0: the tile arrives with Q), so the consumers read
// the tile's descales while Q loads.
#ifndef HATTN_FWD_FP8_DYNAMIC_CAUSAL
#define HATTN_FWD_FP8_DYNAMIC_CAUSAL 1
#endif
#ifndef HATTN_FWD_FP8_TILE_ANNOUNCE
#define HATTN_FWD_FP8_TILE_ANNOUNCE 1
#endif
constexpr bool kDynamicCausal = HATTN_FWD_FP8_DYNAMIC_CAUSAL != 0;
constexpr bool kTileAnnounce = HATTN_FWD_FP8_TILE_ANNOUNCE != 0;
// Where the dynamic walk starts, per tile height. d64's 192-row tiles (three consumers) pad short
// rows unevenly (640 rows are four tiles, 576 three), and on the fixed walk a CTA with a padded
// tile holds its SM while others finish: claiming tiles gains +8-18% at 512-640 keys and +14% at
// 1k, +2-7% at 768 and 1.5k-2k. Two consumers' 128-row tiles (d128) lose 1.6-4.8% to the claim's
// round trip at 512-1k keys and gain 3% at 1.5k, 2% at 2k (bench/RESULTS.md run 51c, H100).
// -DHATTN_FWD_FP8_DYNAMIC_CAUSAL_MIN_SEQLEN_K=N sets one start for every tile (A/B runs).
constexpr int kDynamicCausalMinSeqlenKThreeConsumers = 512;
constexpr int kDynamicCausalMinSeqlenKTwoConsumers = 1280;
constexpr int dynamic_causal_min_seqlen_k(int consumers) {
#ifdef HATTN_FWD_FP8_DYNAMIC_CAUSAL_MIN_SEQLEN_K
    return (void)consumers, HATTN_FWD_FP8_DYNAMIC_CAUSAL_MIN_SEQLEN_K;
#else
    return consumers == 3 ? kDynamicCausalMinSeqlenKThreeConsumers : kDynamicCausalMinSeqlenKTwoConsumers;
#endif
}
// 1: with three consumers (d64's 192-row tiles on 128-key blocks), a consumer skips the blocks
// none of its rows sees (Mask::hidden_blocks: the top block above the causal diagonal, every block
// of a tail tile's slices past seqlen_q), as the 16-bit forward does (kernels/fwd_rules.h): +2-3%
// at d64 causal 2k-16k (bench/RESULTS.md run 50d). d256's 128 x 64 tiles would skip too, but ptxas
// then schedules the steady step's block max differently and it lost 2.5-3.4% even on full
// masks. 0: every consumer computes every block of its tile, masked.
#ifndef HATTN_FWD_FP8_SKIP_HIDDEN_BLOCKS
#define HATTN_FWD_FP8_SKIP_HIDDEN_BLOCKS 1
#endif
constexpr bool skip_hidden_blocks(int consumers) { return HATTN_FWD_FP8_SKIP_HIDDEN_BLOCKS != 0 && consumers == 3; }
// 1: a full-mask problem with a workspace takes the dynamic walk where its last query tile is
// partial and skipped in part (sm90::TileScheduler::partial_tail_walk; the 16-bit forward's
// HATTN_FWD_DYNAMIC_FULL, kernels/fwd_rules.h): d64 +7.1 / +5.9 / +1.4 / +1.7 / +0.5% at 512 / 1k /
// 2k / 4k / 8k keys (bench/RESULTS.md run 55d, H100).
#ifndef HATTN_FWD_FP8_DYNAMIC_FULL
#define HATTN_FWD_FP8_DYNAMIC_FULL 1
#endif
constexpr bool kDynamicFull = HATTN_FWD_FP8_DYNAMIC_FULL != 0;
// 1: other full-mask problems with a workspace, whose query tiles are all whole, cut the tiles left
// over for a partly empty last pass over their KV blocks, in runs of at least
// HATTN_FWD_FP8_SPLIT_MIN_RUN blocks per CTA (the 16-bit forward's HATTN_FWD_SPLIT_TAIL,
// kernels/fwd_rules.h; sm90::TileScheduler::plan_split_tail).
#ifndef HATTN_FWD_FP8_SPLIT_TAIL
#define HATTN_FWD_FP8_SPLIT_TAIL 1
#endif
#ifndef HATTN_FWD_FP8_SPLIT_MIN_RUN
#define HATTN_FWD_FP8_SPLIT_MIN_RUN 16
#endif
constexpr bool kSplitTail = HATTN_FWD_FP8_SPLIT_TAIL != 0;
constexpr int kSplitMinRunBlocks = HATTN_FWD_FP8_SPLIT_MIN_RUN;
// 1 (an A/B option; Tuning::kOHalvesD256's default): d256 stores O in two column halves through a
// 32 KB buffer (sm90::store_o_rows, as the 16-bit d256 forward does) instead of a 64 KB one, which
// makes room for a second Q slot: the next tile's Q then loads during the whole tile rather than
// after its last QK^T (+6% at 512-1k for the 16-bit d256, whose Q had waited for O's store, run 61).
// Here it measured level, -0.4 to +0.7% at 1k-8k (run 62c, H100: the FP8 d256 kernel's Q is 32 KB
// and its tiles' ends were not waiting on it). 0: one 64 KB O buffer and one Q slot at d256.
#ifndef HATTN_FWD_FP8_D256_O_HALVES
#define HATTN_FWD_FP8_D256_O_HALVES 0
#endif
constexpr int o_parts(int head_dim, bool halves_at_d256) { return halves_at_d256 && head_dim > 128 ? 2 : 1; }
// P is quantized as e4m3(P * 2^gain) (kDefaultPGainLog2, lazy_p_gain_log2: kernels/fwd_fp8_args.h).
// The gain costs nothing: it is part of the exponent, and O and the row sum share it.
static_assert(0 <= kShortRowPGainLog2 && kShortRowPGainLog2 <= kDefaultPGainLog2 && kDefaultPGainLog2 <= kLazyMaxGainLog2,
              "the lazy softmax's gains: 0 .. kLazyMaxGainLog2");

// Softmax and accumulation options (Tuning<> is the plain path; the launcher's default is
// DefaultTuning below; A/B builds instantiate the others, see src/host/fwd_fp8_variants.h):
//   kLazyRescale     sm90::LazyBlockScaledSoftmax: V's descale in P's exponent, O rescaled only
//                    when a row's max grows by more than its headroom (warp vote)
//   kTwoLevel        each P V into a fresh fp32 accumulator, added to O in fp32 (the e4m3 wgmma
//                    accumulates with fewer bits than fp32); +head_dim / 2 registers: d <= 128
//   kRowSumMma       (lazy) P's row sums on the tensor cores: with each P V, a 64 x 8 wgmma of P
//                    against a constant tile of ones (Config::OnesTile) into a fresh accumulator,
//                    added to the row sums when its P V is (the softmax spends no FADD per weight)
//   kTwoPBuffers     P's e4m3 fragment in two register sets by block parity: P_j is written
//                    straight from the softmax while P_{j-1} V_{j-1} reads the other set, instead of
//                    after that wgmma's wait (ptxas otherwise stages it in temporaries + PRMT and
//                    converts after the turn is taken, on the way to the next GEMM issue)
//   kEarlyExp        (lazy) the steady state's exps against the rows' current references, the
//                    block max checked beside them (LazyBlockScaledSoftmax::online_update_early);
//                    K's slot is then held to the end of the softmax, for the rare block whose
//                    scores lie too far above a reference (recomputed from shared memory)
//   kPingPong        the consumer warpgroups take turns issuing their GEMMs (named barriers); off:
//                    each issues when it is ready and the tensor pipe queues them (the default:
//                    FP8's GEMMs take half its exps' time, so a turn only delays the issue)
//   kSoftmaxTurns    (kPingPong) the turns guard each softmax instead of each GEMM issue, so the
//                    warpgroups' softmaxes follow one another (at d = 64, where ptxas sinks the
//                    exps below the arrive, the turn holds the row max: +3-7%, run 41b; with the
//                    early exps it holds the exps too and loses 6-9% at d = 128)
//   kTransposeV      V's rows (not V^T) from global memory: TMA lands each block's rows in a staging
//                    slot and the producer warpgroup's three other warps write its V^T slot
//                    (sm90::transpose_v_tile), instead of a transpose pass before the kernel; a
//                    caller's V^T (v_transposed) runs the same kernel without it
//   kQInRegisters    Q's A fragments loaded once per tile into registers (ldmatrix), S = Q K^T
//                    then an RS wgmma: shared memory serves K alone. At d256 the 64-key
//                    QK^T from shared memory on both sides asks for 64 B per 2 x 64 x 64 x 32 FLOP,
//                    exactly shared memory's 128 B/clk at the e4m3 peak (run 42b); +head_dim / 8
//                    registers
//   kPGainLog2       (lazy; an A/B option) P's gain fixed at 2^kPGainLog2 instead of by the rows'
//                    length (0: lazy_p_gain_log2); the plain path's is always kDefaultPGainLog2
//   kOHalvesD256     (an A/B option) d256's O stored in halves, two Q slots (o_parts); the default
//                    is HATTN_FWD_FP8_D256_O_HALVES
//   kQRegisterCols   (kQInRegisters) only Q's first kQRegisterCols columns in registers, the rest
//                    of each QK^T an SS wgmma as without the option (0: all of them): at d256 half
//                    of Q takes 16 registers instead of 32, which leaves room for the early exps and
//                    the tile hand-off, and still takes an eighth of the shared-memory reads of a
//                    step away (the d128 / d256 default since run 69a: d256 +2.0-3.0%)
template <bool kLazyRescale_ = false, bool kTwoLevel_ = false, bool kRowSumMma_ = false, bool kTwoPBuffers_ = false,
          bool kEarlyExp_ = false, bool kPingPong_ = true, bool kSoftmaxTurns_ = false, bool kTransposeV_ = false,
          bool kQInRegisters_ = false, int kPGainLog2_ = 0,
          bool kOHalvesD256_ = HATTN_FWD_FP8_D256_O_HALVES != 0, int kQRegisterCols_ = 0>
struct Tuning {
    static constexpr bool kLazyRescale = kLazyRescale_;
    static constexpr bool kTwoLevel = kTwoLevel_;
    static constexpr bool kRowSumMma = kRowSumMma_;
    static constexpr bool kTwoPBuffers = kTwoPBuffers_;
    static constexpr bool kEarlyExp = kEarlyExp_;
    static constexpr bool kPingPong = kPingPong_;
    static constexpr bool kSoftmaxTurns = kSoftmaxTurns_;
    static constexpr bool kTransposeV = kTransposeV_;
    static constexpr bool kQInRegisters = kQInRegisters_;
    static constexpr int kPGainLog2 = kPGainLog2_;
    static constexpr bool kOHalvesD256 = kOHalvesD256_;
    static constexpr int kQRegisterCols = kQRegisterCols_;
    // (Q stays in shared memory beside the in-kernel transpose: the transposer warps' registers
    // leave the consumers 240, and d256's Q fragments spill 24 bytes there.)
    // (kEarlyBeside: whether the early exps stay beside the transpose, early_exps_beside_transpose.)
    template <bool kTranspose, bool kEarlyBeside = true>
    using WithTransposeV = Tuning<kLazyRescale_, kTwoLevel_, kRowSumMma_, kTwoPBuffers_,
                                  kEarlyExp_ && (kEarlyBeside || !kTranspose), kPingPong_, kSoftmaxTurns_, kTranspose,
                                  kQInRegisters_ && !kTranspose, kPGainLog2_, kOHalvesD256_,
                                  kTranspose ? 0 : kQRegisterCols_>;
    static_assert(!kSoftmaxTurns || kPingPong, "softmax turns are the ping-pong turns in another place");
    static_assert(!kEarlyExp || kLazyRescale, "the early exps need the lazy path's references");
    static_assert(kPGainLog2 == 0 || (kLazyRescale && kPGainLog2 <= kLazyMaxGainLog2), "a fixed gain: the lazy path's");
    static_assert(kQRegisterCols == 0 || (kQInRegisters_ && kQRegisterCols % E4m3::kMmaK == 0),
                  "Q's register columns: whole k-steps of Q in registers");
};

// What the launcher uses, decided by the A/Bs of bench/RESULTS.md (fwd_fp8_ab, H200): the lazy
// rescale at every head dim (run 26: +8-22% over the plain path, most at long rows: O is rescaled
// in a few blocks instead of each); at d = 128 and 256 the row sums on the tensor cores
// (row_sums_of_e4m3_p), at d = 128 with the early exps (early_exps; run 39c: +7% at 16k over the
// lazy path, each alone -1 to -3%); at d = 64 three consumer warpgroups (default_consumers) with P
// in two register sets, the one combination of the two that fits in 160 registers (run 38d: +13%
// over two consumers with two-level accumulation at 16k, +8% at 2k; two-level needs 32 more
// registers, and P's two sets alone cost 5-8% at d128); no turns around the GEMM issue (run 40a:
// +1-2% at d128, +1-2% at d256, +1-6% at d64, at 2k-16k), turns around each softmax at d = 64 only
// (fp8_softmax_turns; run 41b: +3-7% there); at d = 128 and 256 Q's first 128 columns in registers
// for S = Q K^T beside the early exps (q_in_registers; run 69a: d256 +2.0-3.0%, d128 within the
// noise). At d = 128, P written from the softmax into a second register set lost 4% on the early
// exps, and dropping the block max for a check of P's e4m3 codes (one IADD per 4 weights) lost 15%
// (run 49b): the conversion's place in the step matters more than the instructions saved. P's gain
// by the rows' length (lazy_p_gain_log2; run 54d).
template <int kHeadDim>
using DefaultTuning = Tuning<true, false, row_sums_of_e4m3_p(kHeadDim), kHeadDim <= 64, early_exps(kHeadDim),
                             fp8_softmax_turns(kHeadDim), fp8_softmax_turns(kHeadDim), false,
                             q_in_registers(kHeadDim), 0, HATTN_FWD_FP8_D256_O_HALVES != 0,
                             q_register_cols(kHeadDim)>;

template <int kHeadDim_, class OElem_, int kConsumers_ = 2, int kBlockN_ = 128, int kStages_ = 4,
          class Tuning_ = Tuning<>>
struct Config : ForwardShape<kConsumers_, kBlockN_, kStages_> {
    using Shape = ForwardShape<kConsumers_, kBlockN_, kStages_>;
    using OElem = OElem_;
    using Opt = Tuning_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr bool kSkipHiddenBlocks = skip_hidden_blocks(Shape::kConsumers);

    // 8-bit rows are head_dim (Q, K) or kBlockN (V^T) bytes: 64-byte rows take the 64-byte swizzle.
    static constexpr int kQkSpan = kHeadDim < kSwizzleBytes ? kHeadDim : kSwizzleBytes;
    // V^T rows are kBlockN keys: whole 128-byte spans where they divide it, 64-byte ones otherwise.
    static constexpr int kVtSpan = Shape::kBlockN % kSwizzleBytes == 0 ? kSwizzleBytes : kSwizzleBytes / 2;
    using QTile = SwizzledTile<E4m3, Shape::kBlockM, kHeadDim, kQkSpan>;
    using KTile = SwizzledTile<E4m3, Shape::kBlockN, kHeadDim, kQkSpan>;
    using VtTile = SwizzledTile<E4m3, kHeadDim, Shape::kBlockN, kVtSpan>;  // rows: head_dim, cols: keys (permuted)
    using OTile = SwizzledTile<OElem, Shape::kBlockM, kHeadDim / o_parts(kHeadDim_, Opt::kOHalvesD256)>;  // O in column parts (store_o_rows)
    // kRowSumMma's B operand: kRowSumCols rows of kBlockN ones, K-major like V^T.
    using OnesTile = std::conditional_t<Opt::kRowSumMma, SwizzledTile<E4m3, kRowSumCols, Shape::kBlockN, kVtSpan>, NoTile>;
    // kTransposeV: V's rows staged as a K tile is (TMA), two slots: a block's rows land while
    // the previous one is transposed. The same kernel on a caller's V^T: VtConfig.
    static constexpr int kVRowStages = 2;
    static constexpr int kTransposeWarps = kWarpgroupThreads / 32 - 1;  // the producer's warps but the TMA one
    using VRowTile = std::conditional_t<Opt::kTransposeV, KTile, NoTile>;
    // The transposers' loop needs about 24 registers (two rings' states, two tiles, the lane's
    // addresses and permutes, 8 words); at d <= 128 ptxas spills one at 24, so with two consumers
    // they take setmaxnreg's next split, 128 x 40 + 256 x 232. At d = 256 (the default tuning) they
    // fit, and the consumers, whose O alone is 128 registers, keep 240. Three consumers give the
    // producer 32 anyway.
    static constexpr bool kWideProducer = Opt::kTransposeV && Shape::kConsumers == 2 && kHeadDim_ <= 128;
    static constexpr uint32_t kProducerRegs = kWideProducer ? 40 : Shape::kProducerRegs;
    static constexpr uint32_t kConsumerRegs = kWideProducer ? 232 : Shape::kConsumerRegs;
    using VtConfig = Config<kHeadDim_, OElem_, kConsumers_, kBlockN_, kStages_, typename Opt::template WithTransposeV<false>>;
    // Two Q slots where they fit (every head dim with the default tiles): on a persistent walk
    // the next tile's Q then loads during the current tile and is there when the consumers
    // arrive, instead of after every consumer's last QK^T.
    static constexpr int kQStages =
        2 * sizeof(QTile) + Shape::kStages * (sizeof(KTile) + sizeof(VtTile)) + sizeof(OTile) + sizeof(OnesTile) +
                    kVRowStages * sizeof(VRowTile) + 2 * kSharedAlign <=
                kMaxSharedBytes
            ? 2
            : 1;
    // A KV block's descale groups: its keys in slices that each lie inside one 128-row descale
    // block of K and V (the largest of 128, 64, 32 keys dividing kBlockN: one group per block at
    // 64 and 128 keys, three of 64 keys at 192). Each group has its own k and v descale.
    static constexpr int kDescaleGroupKeys =
        Shape::kBlockN % kDescaleRows == 0 ? kDescaleRows : Shape::kBlockN % 64 == 0 ? 64 : kE4m3KeyGroup;
    static constexpr int kDescaleGroups = Shape::kBlockN / kDescaleGroupKeys;
    static_assert(kDescaleRows % kDescaleGroupKeys == 0 && Shape::kBlockN % kDescaleGroupKeys == 0,
                  "every descale group of a KV block inside one descale block");
    // How many descale blocks one KV block's groups can touch (a block starts at a multiple of the
    // group width, so at most 128 - kDescaleGroupKeys keys into a descale block).
    static constexpr int kSpanned = (Shape::kBlockN - 1 + kDescaleRows - kDescaleGroupKeys) / kDescaleRows + 1;
    static_assert(kDescaleGroups == 1 || Opt::kLazyRescale,
                  "several descale groups per KV block: the lazy path only (V's descales go into P)");
    static_assert(kDescaleRows % kMmaM == 0, "a consumer's 64 rows must lie inside one descale block");
    static_assert(Shape::kBlockN % kE4m3KeyGroup == 0 && Shape::kBlockN <= 256, "wgmma N / K limits");
    static_assert(!Opt::kTwoLevel || kHeadDim <= 128, "two-level accumulation: no registers for a second O at d = 256");
    // kQInRegisters: the k-steps of each QK^T whose Q fragment a thread holds in registers.
    static constexpr int kQRegisterCols =
        Opt::kQRegisterCols == 0 || Opt::kQRegisterCols > kHeadDim_ ? kHeadDim_ : Opt::kQRegisterCols;
    static constexpr int kQRegisterSteps = Opt::kQInRegisters ? kQRegisterCols / E4m3::kMmaK : 0;
    // The producer hands each tile to the consumers (the dynamic walk needs it), except with all
    // of d256's Q in registers (an A/B option): there the consumers hold 240 registers to the
    // last, and the hand-off spills 40 bytes, so they walk the fixed passes themselves and causal
    // problems keep the fixed walk. With 16 registers of Q or fewer the hand-off fits.
    static constexpr int kHandOffMaxQRegisters = 16, kARegistersPerStep = 4;  // an m64 x k32 e4m3 A fragment
    static constexpr bool kTileHandOff = kQRegisterSteps * kARegistersPerStep <= kHandOffMaxQRegisters;
    // Full masks may split their last pass (HATTN_FWD_FP8_SPLIT_TAIL): the pieces travel with the
    // hand-off; not on three consumers, whose 160 registers the merge would spill, nor at d256,
    // where O's 128 registers leave the merge too few (36 bytes spilled).
    static constexpr bool kSplitTail = fwd_fp8::kSplitTail && kTileHandOff && Shape::kConsumers == 2 && kHeadDim_ <= 128;
    static_assert(!Opt::kRowSumMma || (Opt::kLazyRescale && kDescaleGroups == 1),
                  "row sums on the tensor cores: the lazy path, one V descale per block (its 1 / v_ds)");
};

template <class Cfg>
struct alignas(kSharedAlign) SharedStorage {
    typename Cfg::QTile q[Cfg::kQStages];
    typename Cfg::KTile k[Cfg::kStages];
    typename Cfg::VtTile vt[Cfg::kStages];
    typename Cfg::OTile o;
    typename Cfg::VRowTile v_rows[Cfg::kVRowStages];  // kTransposeV only
    Ring<Cfg::kQStages> q_ring;
    Ring<Cfg::kStages> k_ring;
    Ring<Cfg::kStages> v_ring;
    Ring<Cfg::kVRowStages> v_rows_ring;  // kTransposeV only
    uint32_t v_rows_end[Cfg::kVRowStages];  // kTransposeV: the walk's end, after its last V block
    TileHandOff<Cfg::kQStages, kTileAnnounce && Cfg::kTileHandOff> hand_off;  // kTileHandOff: each Q slot's tile
    typename Cfg::OnesTile ones;  // kRowSumMma only
};

template <class Cfg>
constexpr int shared_bytes() {
    return static_cast<int>(sizeof(SharedStorage<Cfg>)) + kSharedAlign;
}

struct KernelParams {
    float* lse;
    const float* q_descale;
    const float* k_descale;
    const float* v_descale;
    int q_descale_blocks;  // ceil(seqlen_q / 128): descales per (batch, head) of Q
    int kv_descale_blocks;
    Mask mask;
    TileScheduler scheduler;
    uint8_t* workspace;  // the split tail's flags and partial tiles (scheduler.split_run > 0)
    float scale;  // softmax scale (natural units)
    float p_gain_log2;  // the lazy path's P gain, log2 (lazy_p_gain_log2, or Tuning::kPGainLog2 when fixed)
};

// ---------------------------------------------------------------------------------------
// V -> V^T with the keys of each 32-key group in the P fragment's k order
// ---------------------------------------------------------------------------------------
// One CTA per (128 keys, kv head, batch): 16-byte rows of V into shared memory (zeros past
// seqlen_k), then sm90::store_vt_block (4 x 4 byte transposes) into V^T. A memory-bound pass of 2
// bytes moved per element; callers that quantize with hattn_fp8_prepass skip it (V^T straight from
// the pre-pass, HATTN_FWD_FP8_V_TRANSPOSED).
constexpr int kTransposeKeys = 128;
constexpr int kTransposeThreads = 256;
constexpr int kChunkBytes = 16;

template <int kHeadDim>
__global__ void __launch_bounds__(kTransposeThreads)
    transpose_v_kernel(const uint8_t* __restrict__ v, uint8_t* __restrict__ vt, int seqlen_k, int64_t v_batch_stride,
                       int64_t v_seq_stride, int64_t v_head_stride, int heads_kv) {
    constexpr int kPitch = vt_tile_pitch<kHeadDim>();
    __shared__ alignas(16) uint8_t tile[vt_tile_bytes<kHeadDim, kTransposeKeys>()];
    const int64_t key0 = static_cast<int64_t>(blockIdx.x) * kTransposeKeys;
    const int head = blockIdx.y, batch = blockIdx.z;
    const uint8_t* src = v + batch * v_batch_stride + head * v_head_stride;
    constexpr int kChunksPerRow = kHeadDim / kChunkBytes;
    for (int c = threadIdx.x; c < kTransposeKeys * kChunksPerRow; c += kTransposeThreads) {
        const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * kChunkBytes;
        const int64_t key = key0 + r;
        uint4 x = make_uint4(0, 0, 0, 0);  // keys past seqlen_k: zeros (P is 0 there too)
        if (key < seqlen_k) x = *reinterpret_cast<const uint4*>(src + key * v_seq_stride + col);
        // The padded pitch is 4-byte aligned only: four word stores.
        uint8_t* dst = tile + r * kPitch + col;
        ptx::st_shared_b32(dst, x.x);
        ptx::st_shared_b32(dst + 4, x.y);
        ptx::st_shared_b32(dst + 8, x.z);
        ptx::st_shared_b32(dst + 12, x.w);
    }
    __syncthreads();
    const int64_t keys = vt_keys(seqlen_k);
    uint8_t* dst = vt + (static_cast<int64_t>(batch) * heads_kv + head) * kHeadDim * keys;
    store_vt_block<kHeadDim, kTransposeThreads, kTransposeKeys>(tile, dst, keys, key0);
}

// ---------------------------------------------------------------------------------------
// The attention kernel
// ---------------------------------------------------------------------------------------
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    fwd_fp8_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                   const __grid_constant__ CUtensorMap tmap_v, const __grid_constant__ CUtensorMap tmap_o,
                   const KernelParams p) {
    using OElem = typename Cfg::OElem;
    constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kHeadDim = Cfg::kHeadDim;
    constexpr int kMmaK = E4m3::kMmaK;
    constexpr uint32_t kConsumerWarps = Cfg::kConsumers * kWarpgroupThreads / 32;
    // (The claim's time matters to the dynamic walk only; on d256's fixed walk a late one spills.)
    constexpr bool kClaimLate = kClaimAfterLoads && Cfg::kTileHandOff;

    extern __shared__ uint8_t smem_raw[];
    auto& smem = *reinterpret_cast<SharedStorage<Cfg>*>(
        (reinterpret_cast<uintptr_t>(smem_raw) + kSharedAlign - 1) & ~uintptr_t(kSharedAlign - 1));
    const uint32_t warpgroup = ptx::warpgroup_index();

    if constexpr (Cfg::Opt::kRowSumMma) {
        fill_words(smem.ones.bytes, sizeof(smem.ones.bytes), kE4m3OnesWord);
        // Those writes go through the generic proxy, the GEMMs read through the async one; then
        // init_barriers' __syncthreads.
        ptx::fence_proxy_async_shared_cta();
    }
    // O has its own staging buffer, so Q is free after the last QK^T (one lane per consumer warp).
    init_barriers([&] {
        prefetch_tensormaps(&tmap_q, &tmap_k, &tmap_v, &tmap_o);
        smem.q_ring.init(kConsumerWarps);
        smem.k_ring.init(kConsumerWarps);
        smem.v_ring.init(kConsumerWarps, Cfg::Opt::kTransposeV ? Cfg::kTransposeWarps : 1);
        smem.hand_off.init();
        if constexpr (Cfg::Opt::kTransposeV) {
            smem.v_rows_ring.init(Cfg::kTransposeWarps * 32);  // every transposer thread releases its reads
            for (int s = 0; s < Cfg::kVRowStages; ++s) smem.v_rows_end[s] = 0;
        }
    });

    // The producer walks the tiles (TileScheduler: fixed passes or a dynamic counter) and sends
    // each tile with its Q; the consumers count K/V blocks and Q tiles as it does, which
    // keeps every phase in step.
    if (warpgroup == 0) {
        // ================================ producer ================================
        ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
        if (is_tma_issuer()) {
            if constexpr (Cfg::Opt::kTransposeV) {
                const auto end = produce_forward_tiles<kBlockM, kBlockN, Cfg::VRowTile::kTxBytes, kClaimLate>(
                    p.scheduler, p.mask, smem, &tmap_q, &tmap_k, smem.v_rows_ring,
                    [&](int stage, uint64_t* full, const Tile& t, int key0) {
                        smem.v_rows[stage].load(&tmap_v, full, key0, t.kv_head, t.batch);  // V's rows, like K's
                    }, Cfg::kTileHandOff ? &smem.hand_off : nullptr);
                // The walk's end for the transposers (so they need not walk the tiles themselves):
                // one more staging slot, with no bytes and its flag set before the arrival.
                smem.v_rows_ring.producer_wait_empty(end);
                smem.v_rows_end[end.stage] = 1;
                smem.v_rows_ring.producer_commit(end);
            } else {
                produce_forward_tiles<kBlockM, kBlockN, Cfg::VtTile::kTxBytes, kClaimLate>(
                    p.scheduler, p.mask, smem, &tmap_q, &tmap_k, smem.v_ring,
                    [&](int stage, uint64_t* full, const Tile& t, int key0) {
                        smem.vt[stage].load_at(&tmap_v, full, key0, 0, t.kv_head, t.batch);  // V^T: columns are keys
                    }, Cfg::kTileHandOff ? &smem.hand_off : nullptr);
            }
        } else if constexpr (Cfg::Opt::kTransposeV) {
            if (threadIdx.x / 32 > 0) {
                // The transposers: each V block, in the TMA thread's order, from its staging slot
                // into its V^T slot once the consumers have released that (stmatrix writes through
                // the generic proxy, wgmma reads through the async one: each lane fences, then one
                // arrival per warp), until the slot that marks the walk's end. Every thread releases
                // the staging slot itself: racecheck orders a thread's reads before the slot's
                // refill only through that thread's own arrival (bench/RESULTS.md run 25).
                const uint32_t warp = threadIdx.x / 32 - 1;
                typename Ring<Cfg::kVRowStages>::State rows_state;
                typename Ring<Cfg::kStages>::State vt_state;
                for (;;) {
                    smem.v_rows_ring.consumer_wait(rows_state);
                    if (ptx::ld_shared_b32(&smem.v_rows_end[rows_state.stage]) != 0) break;
                    smem.v_ring.producer_wait_empty(vt_state);
                    auto& vt = static_cast<typename Cfg::VtTile&>(smem.vt[vt_state.stage]);
                    transpose_v_tile<Cfg::kTransposeWarps>(smem.v_rows[rows_state.stage], vt, warp);
                    ptx::fence_proxy_async_shared_cta();
                    __syncwarp();
                    if (threadIdx.x % 32 == 0) smem.v_ring.producer_commit(vt_state);
                    smem.v_rows_ring.consumer_release(rows_state);
                    rows_state.advance();
                    vt_state.advance();
                }
            }
        }
    } else {
        // ================================ consumers ===============================
        ptx::setmaxnreg_inc<Cfg::kConsumerRegs>();
        const ConsumerRole<Cfg::kConsumers> me(warpgroup);

        using Opt = typename Cfg::Opt;
        float o[kHeadDim / 2];
        float o_part[Opt::kTwoLevel ? kHeadDim / 2 : 1];  // two-level: the P V in flight
        // kRowSumMma: the row sums of P (units of O) and those of the P in flight (each register
        // pair of l_part is one row's, 8 equal columns)
        float l[kAccRowsPerThread], l_part[Opt::kRowSumMma ? kRowSumCols / 2 : 1];
        float s[kBlockN / 2];
        constexpr int kPBuffers = Opt::kTwoPBuffers ? 2 : 1;
        uint32_t pf[kPBuffers][kBlockN / kMmaK][4];  // P's A fragment (two sets: by block parity)
        float o_scale[kAccRowsPerThread];
        constexpr int kGroups = Cfg::kDescaleGroups;
        std::conditional_t<Opt::kLazyRescale, LazyBlockScaledSoftmax<kBlockN, kGroups, !Opt::kRowSumMma>,
                           BlockScaledSoftmax<kBlockN, kDefaultPGainLog2>>
            softmax;
        // Lazy: whether the last softmax moved some row of this warp (each tile's first softmax
        // sets it before it is read; O, the softmax state and O's unit start afresh per tile).
        bool rescale_pending = true;
        typename Ring<Cfg::kQStages>::State q_state;
        typename Ring<Cfg::kStages>::State k_state, v_state;
        Tile t;
        int m0, n_blocks;

        // kQInRegisters: this thread's A fragments of its 64-row slice of Q, per k-step (the first
        // Cfg::kQRegisterSteps of them; the rest of Q is read from shared memory).
        constexpr int kQRegisterSteps = Cfg::kQRegisterSteps;
        uint32_t qf[kQRegisterSteps > 0 ? kQRegisterSteps : 1][Cfg::kARegistersPerStep];
        auto gemm_qk = [&](int stage) {
#pragma unroll
            for (int kk = 0; kk < kHeadDim / kMmaK; ++kk) {
                if (kk < kQRegisterSteps)  // (the index clamped for the unrolled steps past them)
                    mma_rs_e4m3<kBlockN>(s, qf[kk < kQRegisterSteps ? kk : 0], smem.k[stage].desc_k_major(0, kk),
                                         kk > 0 ? 1u : 0u);
                else
                    mma_ss_e4m3<kBlockN>(s, smem.q[q_state.stage].desc_k_major(me.first_row_in_tile, kk),
                                         smem.k[stage].desc_k_major(0, kk), kk > 0 ? 1u : 0u);
            }
        };
        // P V from P's register set `buf` (a std::integral_constant: registers need constant indices).
        auto gemm_pv = [&](int stage, auto buf) {
            const auto& p = pf[decltype(buf)::value];
#pragma unroll
            for (int kk = 0; kk < kBlockN / kMmaK; ++kk) {
                if constexpr (Opt::kTwoLevel)
                    mma_rs_e4m3<kHeadDim>(o_part, p[kk], smem.vt[stage].desc_k_major(0, kk), kk > 0 ? 1u : 0u);
                else
                    mma_rs_e4m3<kHeadDim>(o, p[kk], smem.vt[stage].desc_k_major(0, kk), 1u);
            }
            if constexpr (Opt::kRowSumMma) {
#pragma unroll
                for (int kk = 0; kk < kBlockN / kMmaK; ++kk)
                    mma_rs_e4m3<kRowSumCols>(l_part, p[kk], smem.ones.desc_k_major(0, kk), kk > 0 ? 1u : 0u);
            }
        };
        // P's two register sets (with one set, both name it).
        constexpr std::integral_constant<int, 0> kSet0{};
        constexpr std::integral_constant<int, kPBuffers - 1> kSet1{};
        // After the wait for P V: the accumulator(s) it wrote are the registers' values again.
        auto fence_pv = [&] {
            if constexpr (Opt::kTwoLevel) ptx::wgmma_fence_operand(o_part);
            else ptx::wgmma_fence_operand(o);
            if constexpr (Opt::kRowSumMma) ptx::wgmma_fence_operand(l_part);
        };
        // (Tuning::kPingPong off: every warpgroup issues as soon as it is ready, no turns.)
        // take_turn / pass_turn go around each GEMM issue, take_ / pass_softmax_turn around each
        // softmax: Tuning::kSoftmaxTurns makes the second pair the turns and the first no-ops.
        constexpr bool kGemmTurns = Opt::kPingPong && !Opt::kSoftmaxTurns;
        auto take_turn = [&]() {
            if constexpr (kGemmTurns) me.my_turn.sync();
        };
        auto pass_turn = [&]() {
            if constexpr (kGemmTurns) me.next_turn.arrive();
        };
        // (bar.sync orders memory only: ptxas moves register arithmetic across it and would take
        // the exps above the turn. With softmax turns the block's descales, which every exp's
        // scale comes from, are read after the sync: no load moves above it.)
        auto take_softmax_turn = [&]() {
            if constexpr (Opt::kSoftmaxTurns) me.my_turn.sync();
        };
        auto pass_softmax_turn = [&]() {
            if constexpr (Opt::kSoftmaxTurns) me.next_turn.arrive();
        };
        auto release = [&](auto& ring, const auto& state) {
            if (me.lane == 0) ring.consumer_release(state);
        };

        // The turn carries over from tile to tile, as in the 16-bit forward: both consumers of a
        // tile see the same n_blocks and so take the same number of turns (n_blocks + 1 GEMM
        // issues or n_blocks softmaxes, none when n_blocks is 0), and the rotation ends where it
        // began (the last consumer hands to the first). The first consumer can then issue tile t+1's first GEMM as soon as the last one
        // has issued tile t's last P V, instead of waiting at the end of tile t for that hand-over
        // before its own epilogue and then for a fresh grant. The last consumer grants the opening
        // turn once per walk; the first consumer's barrier is then one arrival richer than its
        // waits, and it consumes that arrival after the walk so every barrier is left balanced.
        // (No barrier sees a second arrival before its wait for the first: between two arrivals
        // on a consumer's barrier, the arriving consumer waits for a hand-over that follows that
        // wait.)
        if (Opt::kPingPong && me.cw == Cfg::kConsumers - 1) TurnBarrier{kTurnFirst}.arrive();
        for (int pass = 0;; ++pass) {
            HATTN_FP8_TRACE_TILE(me.cw, me.tid / 32, pass, 0);
            // Which tile it is (past the last: done): announced ahead of its Q, or with it.
            if constexpr (Cfg::kTileHandOff) {
                t = smem.hand_off.consumer_tile(smem.q_ring, q_state, me.lane);
                if (!TileScheduler::place<kBlockM, kBlockN>(t, p.mask, m0, n_blocks)) break;
            } else if (!p.scheduler.template tile_for_pass<kBlockM, kBlockN>(pass, p.mask, t, m0, n_blocks)) {
                break;
            }
            HATTN_FP8_TRACE_TILE(me.cw, me.tid / 32, pass, 1);
            const int first_row = m0 + me.first_row_in_tile + acc_row_in_warpgroup(me.tid);
            // The blocks we compute, [first, end) (a split tail's piece, those none of our rows sees
            // skipped: see skip_hidden_blocks), the first n_masked of the tile's needing the mask.
            const auto blocks = TileScheduler::slice_blocks<Cfg::kSkipHiddenBlocks, kBlockN>(t, p.mask, m0, me.first_row_in_tile, n_blocks);
            const int first = blocks.first, end = blocks.end, n_masked = blocks.n_masked;
            // Descales of this slice of Q and of the KV blocks of this head.
            const int64_t q_head = static_cast<int64_t>(t.batch) * p.scheduler.heads_q + t.head;
            const int64_t kv_head = static_cast<int64_t>(t.batch) * (p.scheduler.heads_q / p.scheduler.heads_per_kv) + t.kv_head;
            // (A 192-row tile's last slice may lie wholly past seqlen_q, and so past Q's last descale
            // block: it takes that block's, as its rows are never stored.)
            const int q_block = min((m0 + me.first_row_in_tile) / kDescaleRows, p.q_descale_blocks - 1);
            const float q_ds = p.q_descale[q_head * p.q_descale_blocks + q_block];
            const float* k_ds_row = p.k_descale + kv_head * p.kv_descale_blocks;
            const float* v_ds_row = p.v_descale + kv_head * p.kv_descale_blocks;
            auto first_key = [&](int it) { return (n_blocks - 1 - it) * kBlockN; };  // blocks run backwards
            auto descale_index = [&](int it) { return first_key(it) / kDescaleRows; };
            // This block's score scale in log2 units: never 0, so that a masked -inf stays -inf
            // (a zero descale means all-zero codes, whose raw scores are 0 anyway).
            auto block_scale_log2 = [&](float k_ds) { return fmaxf(p.scale * kLog2e * q_ds * k_ds, FLT_MIN); };
            // O's unit: the v_descale of the last V block that had one (1 before the first).
            float o_unit = 1.f;
            auto unit_ratio = [&](float v_ds) {
                if (!(v_ds > 0.f)) return 1.f;  // an all-zero V block adds nothing: keep the unit
                const float r = o_unit / v_ds;
                o_unit = v_ds;
                return r;
            };
            auto mask = [&](int it) { p.mask.apply<kBlockN>(s, first_row, (n_blocks - 1 - it) * kBlockN); };
            // kRowSumMma: 1 / v_ds of the block whose P is in flight, and of the block whose P is in s
            // (P carries V's descale; the row sums must not).
            float inv_v_in_flight = 0.f, inv_v_next = 0.f;
            // After a P V's wait: its fresh accumulators join O (two-level) and the row sums.
            auto add_pv = [&] {
                if constexpr (Opt::kTwoLevel) {
#pragma unroll
                    for (int i = 0; i < kHeadDim / 2; ++i) o[i] += o_part[i];
                }
                if constexpr (Opt::kRowSumMma) {
#pragma unroll
                    for (int r = 0; r < kAccRowsPerThread; ++r) l[r] = fmaf(l_part[2 * r], inv_v_in_flight, l[r]);
                }
            };
            // Before P_j V_j: O takes the scale of softmax j (and, lazy: only when it moved), after the
            // last P V's fresh accumulators are added. v_ds: the plain path's new unit for O.
            auto rescale_o = [&](float v_ds) {
                add_pv();
                if constexpr (Opt::kLazyRescale) {
                    if (rescale_pending) {
                        rescale_rows(o, o_scale);
                        if constexpr (Opt::kRowSumMma) {
#pragma unroll
                            for (int r = 0; r < kAccRowsPerThread; ++r) l[r] *= o_scale[r];
                        }
                    }
                } else {
                    const float r = unit_ratio(v_ds);
#pragma unroll
                    for (int h = 0; h < kAccRowsPerThread; ++h) o_scale[h] *= r;
                    rescale_rows(o, o_scale);
                }
            };
            // Block it's descales. Its descale groups lie in at most kSpanned descale blocks (two
            // at 192 keys: keys 0-127 | 128-191, then 192-255 | 256-383, ...), so those are loaded
            // (at the top of a step; used after its waits) and converted once each, and every
            // group picks its block's (rel: 0 or 1 blocks after the first).
            struct BlockDescales {
                float k[Cfg::kSpanned], v[Cfg::kSpanned];
                int first_key;
            };
            auto load_descales = [&](int it) {
                BlockDescales d;
                d.first_key = first_key(it);
#pragma unroll
                for (int j = 0; j < Cfg::kSpanned; ++j) {
                    // (A block's first descale block always exists; a later one may lie past seqlen_k.)
                    const int index = j == 0 ? descale_index(it) : min(descale_index(it) + j, p.kv_descale_blocks - 1);
                    d.k[j] = k_ds_row[index];
                    d.v[j] = Opt::kLazyRescale ? v_ds_row[index] : 0.f;
                }
                return d;
            };
            // Block it's softmax: P_it in s, the O scale for P_it V_it in o_scale. V's descales of
            // the same block go into P (lazy); the plain path takes V's at the next rescale.
            // early: the speculative form (Tuning::kEarlyExp), with redo_scores() to put the raw
            // (masked) scores back into s when it declines.
            auto softmax_update = [&](const BlockDescales& d, auto early, auto&& redo_scores) {
                if constexpr (Opt::kLazyRescale) {
                    using Softmax = decltype(softmax);
                    float block_scale[Cfg::kSpanned];
                    typename Softmax::VShift block_v[Cfg::kSpanned];
#pragma unroll
                    for (int j = 0; j < Cfg::kSpanned; ++j) {
                        block_scale[j] = block_scale_log2(d.k[j]);
                        block_v[j] = Softmax::v_shift(d.v[j]);
                    }
                    float scale_log2[kGroups];
                    typename Softmax::VShift v[kGroups];
#pragma unroll
                    for (int g = 0; g < kGroups; ++g) {
                        // (A group wholly past seqlen_k is masked; load_descales clamped its
                        // descale to the last block's, which will do.)
                        const int rel = (d.first_key % kDescaleRows + g * Cfg::kDescaleGroupKeys) / kDescaleRows;
                        scale_log2[g] = block_scale[0];
                        v[g] = block_v[0];
#pragma unroll
                        for (int j = 1; j < Cfg::kSpanned; ++j) {
                            if (rel == j) {
                                scale_log2[g] = block_scale[j];
                                v[g] = block_v[j];
                            }
                        }
                    }
                    if constexpr (decltype(early)::value) {
                        if (!softmax.online_update_early(s, scale_log2, v, o_scale, rescale_pending)) {
                            redo_scores();
                            rescale_pending = softmax.online_update(s, scale_log2, v, o_scale);
                        }
                    } else {
                        rescale_pending = softmax.online_update(s, scale_log2, v, o_scale);
                    }
                    inv_v_next = block_v[0].inv;
                } else {
                    softmax.online_update(s, block_scale_log2(d.k[0]), o_scale);
                }
            };

            zero_fill(o);
            if constexpr (Opt::kTwoLevel) zero_fill(o_part);
            if constexpr (Opt::kRowSumMma) {
                zero_fill(l);
                zero_fill(l_part);  // the first step adds "the P V in flight" before there is one
            }
            if constexpr (Opt::kLazyRescale) softmax.init(p.p_gain_log2);
            else softmax.init();
            smem.q_ring.consumer_wait(q_state);
            if constexpr (Opt::kQInRegisters) load_a_fragments_e4m3(qf, smem.q[q_state.stage], me.first_row_in_tile);

            // Blocks no row of ours sees, passed over with the turns computing them would take
            // (one softmax and one GEMM issue each, the drain's issue with the last one).
            pass_over_blocks(first - t.it_begin, smem.k_ring, k_state, smem.v_ring, v_state, me.lane == 0, [&](int i) {
                for (int turn = 0; turn < 1 + (t.it_begin + i == end - 1); ++turn) {
                    take_turn();
                    pass_turn();
                }
                take_softmax_turn();
                pass_softmax_turn();
            });
            if (end > first) {
                // Prologue: S of the first block we see alone, its softmax.
                {
                    const BlockDescales ds_top = Opt::kSoftmaxTurns ? BlockDescales{} : load_descales(first);
                    smem.k_ring.consumer_wait(k_state);
                    take_turn();
                    ptx::wgmma_fence();
                    gemm_qk(k_state.stage);
                    ptx::wgmma_commit_group();
                    pass_turn();
                    ptx::wgmma_wait_group<0>();
                    ptx::wgmma_fence_operand(s);
                    HATTN_FP8_TRACE_TILE(me.cw, me.tid / 32, pass, 2);
                    release(smem.k_ring, k_state);
                    k_state.advance();
                    if (first < n_masked) mask(first);
                    take_softmax_turn();
                    const BlockDescales ds = Opt::kSoftmaxTurns ? load_descales(first) : ds_top;
                    softmax_update(ds, std::false_type{}, [] {});  // (no reference yet to take the exps against)
                    pass_softmax_turn();
                    if constexpr (kPBuffers == 2) acc_to_a_fragment_e4m3<kBlockN>(s, pf[0]);
                    HATTN_FP8_TRACE_TILE(me.cw, me.tid / 32, pass, 3);
                }
                auto v_release = v_state;

                // Steady state, as the 16-bit forward: S_it and P_{it-1} V_{it-1} issued together.
                // `in`: the register set P_{it-1} is in (two sets: block it's P goes to the other).
                auto step = [&](int it, auto masked, auto in) {
                    HATTN_FP8_TRACE_POINT(me.cw, me.tid / 32, pass, it, 0);
                    const BlockDescales ds_top = Opt::kSoftmaxTurns ? BlockDescales{} : load_descales(it);
                    const float v_ds = Opt::kLazyRescale ? 0.f : v_ds_row[descale_index(it - 1)];  // plain: O's unit
                    consumer_wait_both(smem.k_ring, k_state, smem.v_ring, v_state);
                    HATTN_FP8_TRACE_POINT(me.cw, me.tid / 32, pass, it, 1);
                    ptx::wgmma_wait_group<0>();  // P_{it-2} V_{it-2}
                    fence_pv();
                    HATTN_FP8_TRACE_POINT(me.cw, me.tid / 32, pass, it, 2);
                    if (it >= first + 2) {
                        release(smem.v_ring, v_release);
                        v_release.advance();
                    }
                    rescale_o(v_ds);
                    if constexpr (kPBuffers == 1) acc_to_a_fragment_e4m3<kBlockN>(s, pf[0]);
                    HATTN_FP8_TRACE_POINT(me.cw, me.tid / 32, pass, it, 3);
                    issue_qk_then_pv(
                        take_turn, [&] { gemm_qk(k_state.stage); }, [&] { gemm_pv(v_state.stage, in); }, pass_turn);
                    inv_v_in_flight = inv_v_next;
                    HATTN_FP8_TRACE_POINT(me.cw, me.tid / 32, pass, it, 4);
                    ptx::wgmma_wait_group<1>();
                    ptx::wgmma_fence_operand(s);
                    HATTN_FP8_TRACE_POINT(me.cw, me.tid / 32, pass, it, 5);
                    if constexpr (!Opt::kEarlyExp) {
                        release(smem.k_ring, k_state);
                        k_state.advance();
                    }
                    v_state.advance();
                    if constexpr (decltype(masked)::value) mask(it);
                    take_softmax_turn();
                    const BlockDescales ds = Opt::kSoftmaxTurns ? load_descales(it) : ds_top;
                    softmax_update(ds, std::bool_constant<Opt::kEarlyExp>{}, [&] {
                        scores_from_shared<kBlockN, false>(s, smem.q[q_state.stage], me.first_row_in_tile, smem.k[k_state.stage]);
                        if constexpr (decltype(masked)::value) mask(it);
                    });
                    pass_softmax_turn();
                    HATTN_FP8_TRACE_POINT(me.cw, me.tid / 32, pass, it, 6);
                    if constexpr (Opt::kEarlyExp) {  // (the redo reads K)
                        release(smem.k_ring, k_state);
                        k_state.advance();
                    }
                    // Two sets: P_{it-2} V_{it-2}, the last reader of this set, was waited for above.
                    if constexpr (kPBuffers == 2) acc_to_a_fragment_e4m3<kBlockN>(s, pf[1 - decltype(in)::value]);
                };
                // P_{it-1} is in set (it - 1 - first) % 2 (the one set when there is one).
                auto steps = [&](int& it, int end, auto masked) {
                    for (; it < end; ++it) {
                        if constexpr (kPBuffers == 1) step(it, masked, kSet0);
                        else if ((it - first) % 2 == 1) step(it, masked, kSet0);
                        else step(it, masked, kSet1);
                    }
                };
                int it = first + 1;
                steps(it, n_masked, std::true_type{});
                steps(it, end, std::false_type{});
                HATTN_FP8_TRACE_TILE(me.cw, me.tid / 32, pass, 4);
                // Our last QK^T has completed (waited for in the last step, or in the prologue) and
                // the drain's P V reads only P (registers) and V^T: Q is free one softmax and one
                // P V before the epilogue, and the producer can fill the slot for a later tile.
                release(smem.q_ring, q_state);

                // Drain: the last P V.
                {
                    const float v_ds = Opt::kLazyRescale ? 0.f : v_ds_row[descale_index(end - 1)];
                    smem.v_ring.consumer_wait(v_state);
                    ptx::wgmma_wait_group<0>();
                    fence_pv();
                    if (end - first >= 2) release(smem.v_ring, v_release);
                    rescale_o(v_ds);
                    if constexpr (kPBuffers == 1) acc_to_a_fragment_e4m3<kBlockN>(s, pf[0]);
                    // (Two sets: the branch on the set goes around the whole issue, fence to commit;
                    // one between them makes ptxas inject warpgroup.arrives, C7519.)
                    auto issue_pv = [&](auto set) {
                        take_turn();
                        ptx::wgmma_fence();
                        gemm_pv(v_state.stage, set);
                        ptx::wgmma_commit_group();
                        pass_turn();
                    };
                    if constexpr (kPBuffers == 1) issue_pv(kSet0);
                    else if ((end - 1 - first) % 2 == 0) issue_pv(kSet0);
                    else issue_pv(kSet1);
                    ptx::wgmma_wait_group<0>();
                    fence_pv();
                    inv_v_in_flight = inv_v_next;
                    add_pv();
                    release(smem.v_ring, v_state);
                    v_state.advance();
                    HATTN_FP8_TRACE_TILE(me.cw, me.tid / 32, pass, 5);
                }
            } else {
                release(smem.q_ring, q_state);  // a slice that sees no key never reads its Q
            }

            // ============================== epilogue ==============================
            float inv_sum[kAccRowsPerThread], lse[kAccRowsPerThread];
            if constexpr (Opt::kRowSumMma) {
                softmax.finalize_with_sums(l, inv_sum, lse);
            } else {
                softmax.finalize(inv_sum, lse);
            }
            // O is in units of o_unit (the P gain cancels against the row sum's; lazy: o_unit stays 1).
#pragma unroll
            for (int r = 0; r < kAccRowsPerThread; ++r) inv_sum[r] *= o_unit;
            rescale_rows(o, inv_sum);
            // A split tail's piece hands its partial O to the tile's merger, or merges its
            // partners' first (sm90/split_tail.cuh).
            const bool writer = Cfg::kSplitTail && hand_over_split_piece<Cfg::kConsumers, kHeadDim>(
                                                       t, p.scheduler.tail_run(), p.workspace, me, o, lse);
            if (!writer) {
                if (p.lse != nullptr && ptx::lane_id() % 4 == 0) {
                    float* lse_row = p.lse + q_head * p.mask.seqlen_q;
#pragma unroll
                    for (int r = 0; r < kAccRowsPerThread; ++r)
                        if (first_row + 8 * r < p.mask.seqlen_q) lse_row[first_row + 8 * r] = lse[r];
                }
                // (sm90::store_o_rows: the previous tile's store read out first, deferred to here.)
                store_o_rows<OElem, typename Cfg::OTile, kHeadDim>(smem.o, o, me.first_row_in_tile, me.tid == 0, me.epilogue,
                                                                   &tmap_o, m0, t.head, t.batch);
            }
            q_state.advance();
            HATTN_FP8_TRACE_TILE(me.cw, me.tid / 32, pass, 6);
        }
        if (Opt::kPingPong && me.cw == 0) me.my_turn.sync();  // the opening grant's arrival
        if (me.tid == 0) ptx::bulk_wait_group_read<0>();  // shared memory outlives the last store's reads
    }
}

// ---------------------------------------------------------------------------------------
// Launcher
// ---------------------------------------------------------------------------------------
// Problems with at most this many keys run on a persistent grid (one CTA per SM walking the
// tiles, see launch_fwd_fp8), the causal and non-causal limits separately. Without a mask every
// length walks: the walk overlaps a tile's prologue (Q, the first QK^T) with the last one's
// epilogue, +0.2-2.3% at 8k-16k keys at every head dim (bench/RESULTS.md run 43d; the 16-bit
// forward's 4096 was where run 6 stopped measuring). Causal tiles differ in length and a static
// walk balances them worse than the hardware's hand-out: -30 to -40% at d128/d256 16k, so causal
// keeps the 16-bit forward's limit. Each can be overridden at build time (-D...=N) for an A/B; 0
// turns the persistent grid off. Fp8FwdArgs::grid_ctas > 0 overrides the rule per call
// (bench/fwd_fp8_ab's --grids compares the grids in one process).
#ifndef HATTN_FWD_FP8_PERSISTENT_MAX_SEQLEN_K
#define HATTN_FWD_FP8_PERSISTENT_MAX_SEQLEN_K 0x7FFFFFFF  // every length
#endif
#ifndef HATTN_FWD_FP8_PERSISTENT_CAUSAL_MAX_SEQLEN_K
#define HATTN_FWD_FP8_PERSISTENT_CAUSAL_MAX_SEQLEN_K 4096
#endif
constexpr int kPersistentMaxSeqlenK = HATTN_FWD_FP8_PERSISTENT_MAX_SEQLEN_K;
constexpr int kPersistentCausalMaxSeqlenK = HATTN_FWD_FP8_PERSISTENT_CAUSAL_MAX_SEQLEN_K;

inline bool check_args(const Fp8FwdArgs& a, std::string* error) {
    auto fail = [&](const char* what) {
        if (error) *error = what;
        return false;
    };
    if (!a.q || !a.k || !a.v || !a.o || !a.vt || !a.q_descale || !a.k_descale || !a.v_descale)
        return fail("q, k, v, o, the workspace and the three descales must be non-NULL");
    if (a.batch <= 0 || a.heads_q <= 0 || a.heads_kv <= 0 || a.seqlen_q <= 0 || a.seqlen_k <= 0)
        return fail("batch, heads_q, heads_kv, seqlen_q and seqlen_k must be positive");
    if (a.heads_q % a.heads_kv != 0) return fail("heads_q must be a multiple of heads_kv");
    if (!(a.softmax_scale > 0.f) || std::isinf(a.softmax_scale)) return fail("softmax_scale must be resolved, > 0");
    if (a.grid_ctas < 0) return fail("grid_ctas must be >= 0 (0: automatic)");
    if (!fwd::workspace_aligned(a.schedule_workspace)) return fail("schedule_workspace must be 16-byte aligned");
    return true;
}

template <int kHeadDim>
cudaError_t launch_transpose_v(const Fp8FwdArgs& a, cudaStream_t stream, std::string* error) {
    const int64_t key_tiles = (vt_keys(a.seqlen_k) + kTransposeKeys - 1) / kTransposeKeys;
    const dim3 grid(static_cast<unsigned>(key_tiles), static_cast<unsigned>(a.heads_kv), static_cast<unsigned>(a.batch));
    if (a.heads_kv > 65535 || a.batch > 65535) {
        if (error) *error = "V transpose: heads_kv and batch must be <= 65535 (grid y/z)";
        return cudaErrorInvalidValue;
    }
    transpose_v_kernel<kHeadDim><<<grid, kTransposeThreads, 0, stream>>>(
        static_cast<const uint8_t*>(a.v), static_cast<uint8_t*>(a.vt), a.seqlen_k, a.v_batch_stride, a.v_seq_stride,
        a.v_head_stride, a.heads_kv);
    const cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess && error) *error = std::string("V transpose launch: ") + cudaGetErrorString(rc);
    return rc;
}

template <class Cfg>
cudaError_t launch_fwd_fp8(const Fp8FwdArgs& a, cudaStream_t stream, std::string* error) {
    if (!check_args(a, error)) return cudaErrorInvalidValue;
    if (a.head_dim != Cfg::kHeadDim) {
        if (error) *error = "launch_fwd_fp8: head_dim mismatch";
        return cudaErrorInvalidValue;
    }
    if constexpr (Cfg::Opt::kTransposeV) {
        if (a.v_transposed) return launch_fwd_fp8<typename Cfg::VtConfig>(a, stream, error);  // nothing to transpose
    }
    // V rows: into V^T in the workspace first, unless the kernel transposes them itself.
    cudaError_t rc =
        a.v_transposed || Cfg::Opt::kTransposeV ? cudaSuccess : launch_transpose_v<Cfg::kHeadDim>(a, stream, error);
    if (rc != cudaSuccess) return rc;

    using OElem = typename Cfg::OElem;
    using QTile = typename Cfg::QTile;
    using VtTile = typename Cfg::VtTile;
    const int64_t keys = vt_keys(a.seqlen_k);
    const BshdTensor q{a.q, Cfg::kHeadDim, a.seqlen_q, a.heads_q, a.batch, a.q_seq_stride, a.q_head_stride, a.q_batch_stride};
    const BshdTensor k{a.k, Cfg::kHeadDim, a.seqlen_k, a.heads_kv, a.batch, a.k_seq_stride, a.k_head_stride, a.k_batch_stride};
    // V^T as a 4-D map {keys, head_dim, heads_kv, batch}: "rows" are head dims.
    const BshdTensor vt{a.vt, static_cast<int>(keys), Cfg::kHeadDim, a.heads_kv, a.batch, keys, Cfg::kHeadDim * keys,
                        static_cast<int64_t>(a.heads_kv) * Cfg::kHeadDim * keys};
    const BshdTensor v{a.v, Cfg::kHeadDim, a.seqlen_k, a.heads_kv, a.batch, a.v_seq_stride, a.v_head_stride, a.v_batch_stride};
    const BshdTensor o{a.o, Cfg::kHeadDim, a.seqlen_q, a.heads_q, a.batch, a.o_seq_stride, a.o_head_stride, a.o_batch_stride};
    CUtensorMap tq, tk, tv, to;  // tv: V^T, or V's rows (kTransposeV)
    const bool v_map_ok = Cfg::Opt::kTransposeV
                              ? make_bshd_map(&tv, v, E4m3::kTmaType, QTile::kAtomCols, Cfg::kBlockN, error, QTile::kTmaSwizzle)
                              : make_bshd_map(&tv, vt, E4m3::kTmaType, VtTile::kAtomCols, Cfg::kHeadDim, error, VtTile::kTmaSwizzle);
    if (!make_bshd_map(&tq, q, E4m3::kTmaType, QTile::kAtomCols, Cfg::kBlockM, error, QTile::kTmaSwizzle) ||
        !make_bshd_map(&tk, k, E4m3::kTmaType, QTile::kAtomCols, Cfg::kBlockN, error, QTile::kTmaSwizzle) || !v_map_ok ||
        !make_bshd_map(&to, o, OElem::kTmaType, Cfg::OTile::kAtomCols, kMmaM, error)) {
        return cudaErrorInvalidValue;
    }
    KernelParams p;
    p.lse = a.lse;
    p.q_descale = a.q_descale;
    p.k_descale = a.k_descale;
    p.v_descale = a.v_descale;
    p.q_descale_blocks = (a.seqlen_q + kDescaleRows - 1) / kDescaleRows;
    p.kv_descale_blocks = (a.seqlen_k + kDescaleRows - 1) / kDescaleRows;
    p.mask = Mask{a.seqlen_q, a.seqlen_k, a.causal};
    const int64_t kv_bytes_per_head = (a.seqlen_k + vt_keys(a.seqlen_k)) * Cfg::kHeadDim;  // K and V^T, one byte each
    if (!TileScheduler::make(Cfg::kBlockM, a.seqlen_q, a.heads_q, a.heads_kv, a.batch, a.causal, kv_bytes_per_head,
                             p.scheduler, error, a.section_heads)) {
        return cudaErrorInvalidValue;
    }
    p.scale = a.softmax_scale;
    p.p_gain_log2 = static_cast<float>(Cfg::Opt::kPGainLog2 > 0 ? Cfg::Opt::kPGainLog2 : lazy_p_gain_log2(a.seqlen_k));
    // With a workspace the dynamic walk on a persistent grid: causal (kDynamicCausal) and full
    // masks with a partial last tile (kDynamicFull).
    const bool dynamic = Cfg::kTileHandOff && a.schedule_workspace != nullptr &&
                         (a.causal ? kDynamicCausal && a.seqlen_k >= dynamic_causal_min_seqlen_k(Cfg::kConsumers)
                                   : kDynamicFull && TileScheduler::partial_tail_walk(Cfg::kSkipHiddenBlocks, Cfg::kBlockM,
                                                                                      a.seqlen_q, a.seqlen_k));
    static_assert(TileScheduler::kCounterWords * sizeof(int32_t) <= fwd::kWorkspaceBytes, "the workspace holds the counters");
    if (dynamic) p.scheduler.tile_counter = static_cast<int32_t*>(a.schedule_workspace);
    // Other full masks given a workspace split their last pass over KV blocks.
    const bool split_tail = Cfg::kSplitTail && TileScheduler::may_split_tail(a.causal, dynamic, a.schedule_workspace,
                                                                             Cfg::kBlockM, a.seqlen_q);
    p.workspace = static_cast<uint8_t*>(a.schedule_workspace);

    constexpr int kSmem = shared_bytes<Cfg>();
    static_assert(kSmem <= kMaxSharedBytes, "tile does not fit in shared memory");
    // Persistent for short keys: +15-23% at 512, +5-14% at 2k, +2-10% at 4k (RESULTS run 33d).
    int ctas = 0;
    const char* what = "querying the SM count";
    rc = p.scheduler.grid_ctas(a.grid_ctas,
                               dynamic || split_tail || a.seqlen_k <= (a.causal ? kPersistentCausalMaxSeqlenK : kPersistentMaxSeqlenK),
                               &ctas);
    if (rc == cudaSuccess && split_tail) p.scheduler.plan_split_tail(ctas, (a.seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN, kSplitMinRunBlocks);
    if (rc == cudaSuccess) {
        what = "kernel launch";
        rc = launch_with_dynamic_smem<fwd_fp8_kernel<Cfg>>(kSmem, [&] {
            fwd_fp8_kernel<Cfg><<<ctas, Cfg::kThreads, kSmem, stream>>>(tq, tk, tv, to, p);
            return cudaGetLastError();
        });
    }
    if (rc != cudaSuccess && error) *error = std::string("FP8 forward ") + what + ": " + cudaGetErrorString(rc);
    return rc;
}

// Per head dim: d = 256 takes 64-key blocks (O alone is 128 registers per thread; 128-key blocks
// spill) and 3 stages (O's bf16 staging is 64 KB); d = 64 three consumer warpgroups (192-row
// tiles): its exps take twice its GEMMs' time, and a third softmax in flight keeps the MUFU busier.
constexpr int default_block_n(int head_dim) { return head_dim <= 128 ? 128 : 64; }
constexpr int default_stages(int head_dim) { return head_dim <= 128 ? 4 : 3; }
constexpr int default_consumers(int head_dim) { return head_dim <= 64 ? 3 : 2; }

// V's rows (not the caller's V^T) are transposed inside the kernel (Tuning::kTransposeV) when each
// KV head serves at most this many query rows (seqlen_q x heads_q / heads_kv), else by the
// transpose pass first. The pass costs in proportion to V's bytes, so relative to the attention
// as 1 / (query rows per KV head); the in-kernel transpose a fixed share of every block: one more
// read and write of V per CTA through shared memory and the transposers' issue slots, 2-6% at
// d <= 128 and ~30% at d = 256, whose 64-key QK^T reads 1 byte of shared memory per 64 FLOP, its
// bandwidth at the e4m3 rate (bench/RESULTS.md run 42: at 512 rows +14-28%, at 2048 +0-7% at
// d <= 128). Overridable at build time (-D...=N for every head dim; 0: always the pass).
#ifdef HATTN_FWD_FP8_IN_KERNEL_TRANSPOSE_MAX_ROWS
constexpr int64_t in_kernel_transpose_max_rows(int) { return HATTN_FWD_FP8_IN_KERNEL_TRANSPOSE_MAX_ROWS; }
#else
constexpr int64_t in_kernel_transpose_max_rows(int head_dim) { return head_dim <= 128 ? 2048 : 512; }
#endif

template <int kHeadDim, class Opt = DefaultTuning<kHeadDim>>
cudaError_t launch_fwd_fp8_head_dim(const Fp8FwdArgs& a, cudaStream_t stream, std::string* error) {
    constexpr int kBlockN = default_block_n(kHeadDim), kStages = default_stages(kHeadDim);
    constexpr int kConsumers = default_consumers(kHeadDim);
    // The library's kernels keep the tile hand-off, which the dynamic causal walk and the split
    // tail need: Q in registers (DefaultTuning) must stay within Config::kHandOffMaxQRegisters.
    static_assert(!std::is_same_v<Opt, DefaultTuning<kHeadDim>> ||
                      Config<kHeadDim, Bf16, kConsumers, kBlockN, kStages, Opt>::kTileHandOff,
                  "the default kernels keep the tile hand-off");
    auto launch = [&](auto transpose) {
        using Tuned = typename Opt::template WithTransposeV<decltype(transpose)::value, early_exps_beside_transpose(kHeadDim)>;
        if (a.o_dtype == fwd::Dtype::kBf16)
            return launch_fwd_fp8<Config<kHeadDim, Bf16, kConsumers, kBlockN, kStages, Tuned>>(a, stream, error);
        return launch_fwd_fp8<Config<kHeadDim, Fp16, kConsumers, kBlockN, kStages, Tuned>>(a, stream, error);
    };
    const int64_t rows_per_kv_head = static_cast<int64_t>(a.seqlen_q) * (a.heads_q / a.heads_kv);
    if (!a.v_transposed && rows_per_kv_head <= in_kernel_transpose_max_rows(kHeadDim)) return launch(std::true_type{});
    return launch(std::false_type{});
}

}  // namespace hattn::fwd_fp8
