// hattn/src/kernels/bwd.cuh -- FlashAttention-3-style backward attention for Hopper (bf16/fp16).
//
// From Q, K, V, the forward's O and LSE, and dO = dL/dO, three kernels compute dQ, dK and dV:
//
//   1. bwd_preprocess   per query row: D = rowsum(dO * O), and LSE in log2 units (+inf where the
//                       row is padding or sees no key, so its probabilities come out as 0); zeroes
//                       dQ's fp32 accumulator (HATTN_BWD_DET_FIRST_STORE, deterministic mode:
//                       only the blocks no KV block reaches) and the deterministic mode's counters.
//   2. bwd_kernel       one CTA per (KV block of kBlockN keys, KV head, batch). K_j and V_j stay
//                       in shared memory while a producer warp streams Q_i, dO_i, LSE_i and D_i
//                       through a ring, for every query block i (of every query head of the GQA
//                       group) that sees the block. Consumer warpgroup w owns keys [64w, 64w + 64)
//                       of the block and, per query block, computes with keys as wgmma's M:
//                         S^T  = K_w Q_i^T      (SS)   P^T  = exp2(S^T scale log2e - LSE_i)
//                         dP^T = V_w dO_i^T     (SS)   dS^T = P^T o (dP^T - D_i)
//                         dV_w += P^T dO_i      (RS)
//                         dK_w += dS^T Q_i      (RS)
//                         dQ_i^T  = K^T dS^T    (SS, dS^T through shared memory), added to dQ's
//                                               fp32 accumulator in global memory
//                       and at the end writes dK_w (times the scale) and dV_w with TMA.
//   3. bwd_dq_convert   dQ = scale * accumulator, to 16-bit, in the caller's layout.
//
// Why keys are M. wgmma takes its A operand from registers or shared memory, its B operand from
// shared memory only. Held transposed, the accumulators of S^T and dP^T are already the A
// fragments of dV += P^T dO and dK += dS^T Q: P and dS never leave the registers for those two
// GEMMs (a conversion to 16 bits, as P in the forward). Only dQ, which needs dS the other way
// round, reads dS^T back from shared memory.
//
// NOTES (hardware facts this file depends on; measurements in bench/RESULTS.md)
//   * dK and dV of 64 keys x head_dim take head_dim fp32 registers per thread together. At
//     head_dim 256 that is more than a thread has, so head_dim 256 runs two kernels over the same
//     blocks: one accumulates dV, the other dK and dQ (S and P are computed in both). K and V
//     of 128 keys then take 128 KB of shared memory, and the dK + dQ kernel has room for one Q
//     and one dO tile: the two get a slot each, freed as soon as the last GEMM reading it has
//     completed, so each is refilled while the step still runs (HATTN_BWD_D256_DO_SLOT).
//   * dQ's accumulator is summed across CTAs in L2: red.global.add.v4 from the consumers (d64,
//     d256), or bulk reduce-adds of staged slices issued by a producer warp (d128). It is stored in
//     wgmma's fragment order so that a warp's adds cover whole lines (row-major: 8 sectors in 8
//     lines per instruction, 20-35% slower overall). Floating-point addition is not associative,
//     so the order of the additions changes the last bits from run to run; the deterministic mode
//     makes KV block j wait for blocks 0..j-1 of the same query block (a counter per query block).
//   * dK and dV of a GQA group are summed in registers: one CTA loops over the group's query
//     heads, so they are deterministic in both modes.
//   * At head_dim 64 the steps are short and dQ's fp32 reduce-adds are what limits them: without
//     them the kernel ran 34-46% faster, with half of them 10-20% faster (timing probes). Summing
//     the two warpgroups' partials in shared memory first, or bulk-adding dQ from there, measured
//     slower than the plain reds (bench/RESULTS.md run 64). What halves them: the warpgroups take
//     turns, one computing a step's dQ^T over all 128 keys a step later (kDqParity, run 65).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/bwd_args.h"
#include "kernels/sm90/epilogue.cuh"
#include "kernels/sm90/fragment.cuh"
#include "kernels/sm90/launch_setup.h"
#include "kernels/sm90/mask.cuh"
#include "kernels/sm90/pipeline.cuh"
#include "kernels/sm90/softmax.cuh"
#include "kernels/sm90/tensor_map.h"
#include "kernels/sm90/tile.cuh"
#include "ptx/atomic.cuh"
#include "ptx/convert.cuh"
#include "ptx/fence.cuh"
#include "ptx/global.cuh"
#include "ptx/griddep.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/mufu.cuh"
#include "ptx/tma.cuh"
#include "ptx/warp.cuh"
#include "ptx/wgmma.cuh"

namespace hattn::bwd {

using namespace hattn::sm90;

// ---------------------------------------------------------------------------------------
// Tile configuration
// ---------------------------------------------------------------------------------------
constexpr int kSharedAlign = 1024;
constexpr int kMaxSharedBytes = 227 * 1024;

// Scheduling (each measured against the plain order in bench/RESULTS.md):
// * The deterministic mode walks each CTA's query blocks last to first: every KV block of a head
//   starts at the last query block (all of them see it), so block j waits for block j - 1 by one
//   step only, where the first-to-last walk makes it wait until j - 1 reaches j's first block.
// * Head dim 256 (two kernels over the same blocks, NOTES): the dK + dQ kernel reads nothing the
//   dV kernel writes, so it is launched as its programmatic dependent and its CTAs take the SMs
//   the dV kernel's tail leaves idle; each of its CTAs waits for the dV grid before exiting, so
//   the launch's completion still implies both grids' (what follows on the stream reads dV).
//   The preprocess and the dQ conversion stay plain launches: chained the same way (with
//   per-head done counters or without), they cost head dim 64 ~9% and gained only at 2k tokens.
// * Causal: the KV blocks with the most query blocks (the lowest) start first, over groups of
//   (KV head, batch) pairs, so the grid ends on its shortest CTAs. Small groups keep the CTAs
//   that run together on few heads, which then share Q and dO in L2. Needs the KV blocks and the
//   pair groups within a grid dimension's 65535 (else the 1-D order, the KV block fastest).
//   Group size: 4 pairs beat 16 at 2k-16k (bench/RESULTS.md run 17). Below 2k a group of 4 spans
//   less than a wave, and the long CTAs of the last groups start late (a CPU model, run 65f: 2.5-
//   5.5% idle). At head dim 256 a group per length -- as many pairs as hold kLptQueryRows rows of
//   Q and dO (4 pairs of 4k rows, 32 of 512), at least 4 -- measured +3-5% at 512-2k and level
//   at 4k (runs 66a, 66d); at 64 and 128 it was level (-1..+0.5%, one -4% at d64 512), so they keep 4.
//   HATTN_BWD_LPT_GROUP overrides both for A/Bs (a group size, or 0 = the per-length group).
constexpr int kLptByLength = 0;
#ifdef HATTN_BWD_LPT_GROUP
constexpr int lpt_group(int /*head_dim*/) { return HATTN_BWD_LPT_GROUP; }
#else
constexpr int lpt_group(int head_dim) { return head_dim == 256 ? kLptByLength : 4; }
#endif
constexpr int kLptMinGroup = 4;
constexpr int64_t kLptQueryRows = 16384;

// Build-time choice for A/B (scripts/ab_bwd.sh), head dim 128 only. The default, 1, won the A/B of
// bench/RESULTS.md run 26 (d128 0.96-1.03x -> 1.06-1.16x cuDNN at 4k-16k; d64 and d256 unchanged);
// 0 = the earlier order (dQ at the start of the step, waited for alone), kept for that A/B.
// HATTN_BWD_DQ_LATE=1: step i's consumer issues dQ of step i - 1 right after its dK of step i
//   (once its own dS^T of step i is stored) and waits once for both, instead of issuing it at the
//   start of step i and waiting for it alone: one drain of the warpgroup's wgmma queue per step
//   instead of two, and dQ's accumulator is never live beside S^T and dP^T. Needs a third dS^T
//   buffer and a third ds_ready barrier per warpgroup (see kDsPhases).
// HATTN_BWD_DQ_LATE=2: the same, dQ of step i - 1 issued before dK of step i.
// Measured and not kept (bench/RESULTS.md run 66c): dQ before dK with dQ stored to the staging
//   while dK still runs (FA3's order; -1..-4.5%), and the dQ warp freeing each staging right
//   after its read instead of when it next turns to that warpgroup (-0.5..-7%: the warpgroups
//   then drift further apart, though a profile puts 8% of the consumers' samples at that wait).
#ifndef HATTN_BWD_DQ_LATE
#define HATTN_BWD_DQ_LATE 1
#endif
constexpr int kDqLate = HATTN_BWD_DQ_LATE;
// HATTN_BWD_DQ_WARPS=2: two dQ warps, one per consumer warpgroup (default 1, serving both in
//   turn, which ties a warpgroup's staging to the other's progress).
#ifndef HATTN_BWD_DQ_WARPS
#define HATTN_BWD_DQ_WARPS 1
#endif
constexpr int kDqWarps = HATTN_BWD_DQ_WARPS;
static_assert(kDqWarps == 1 || kDqWarps == 2, "one dQ warp, or one per consumer warpgroup");

// HATTN_BWD_PIPE (head dim 64 only): 1 (the default) = each step queues the next query block's
//   S^T and dP^T GEMMs behind its own dV, dK and dQ^T GEMMs before it waits for those, so the
//   tensor cores go on from one block's gradients to the next block's scores while this
//   warpgroup adds dQ (Config::kPipeline; +4-11% at 1k-16k, bench/RESULTS.md run 64);
//   0 = one query block at a time, kept for that A/B.
#ifndef HATTN_BWD_PIPE
#define HATTN_BWD_PIPE 1
#endif
// HATTN_BWD_D64_DQ_PARITY (head dim 64, with HATTN_BWD_PIPE): 1 (the default) = dQ^T of step j
//   over all 128 keys of the block, by consumer warpgroup j % 2 alone, issued in its step j + 1
//   (the other's dS^T of step j is then long stored): half the global reds of each warpgroup
//   adding its own 64 keys' partial sum, without summing the partials in shared memory
//   (Config::kDqParity; +2-11% at 2k-16k, bench/RESULTS.md run 65); 0 = each warpgroup adds its
//   own keys' partial dQ^T every step, kept for that A/B.
#ifndef HATTN_BWD_D64_DQ_PARITY
#define HATTN_BWD_D64_DQ_PARITY 1
#endif
// HATTN_BWD_D256_DO_SLOT (head dim 256's dK + dQ kernel, whose shared memory holds one Q / dO slot:
//   K and V take 128 KB): 1 (the default) = dO in a slot of its own, freed once dP^T = V dO^T has
//   completed, and Q's slot (with LSE and D) freed once dK's GEMM has, before dQ's: the producer
//   loads the next dO through most of the step and the next Q through the dQ GEMM and adds, and
//   the next step issues dP^T (its dO long there) before it waits for Q; 2 = one slot, freed once
//   dK's GEMM has completed; 3 = as 1, but S^T issued first (Q waited for first) so that the exps
//   run while dP^T does; 0 = one slot, freed at the step's end (kept for the A/B). A profile of 0
//   put 26% of the consumers' samples at the wait for that slot; 1 measured +8-25% over 0 at
//   1k-16k (full and causal), 3 +2-6% under 1, 2 +1-4% over 0 (bench/RESULTS.md run 67b).
#ifndef HATTN_BWD_D256_DO_SLOT
#define HATTN_BWD_D256_DO_SLOT 1
#endif
// HATTN_BWD_D256_DS_BUFFERS (head dim 256's dK + dQ kernel): dS^T tiles, 2 (the default; 16 KB more
//   than one, which just fits) or 1: with two, a warpgroup stores its dS^T without first waiting
//   for the other's dQ GEMM of the step before (it has completed: the barrier before this step's
//   dQ GEMM follows it), one barrier of both warpgroups fewer per step: +1-4% at 1k-8k, -2% at
//   causal 16k (bench/RESULTS.md run 67d).
#ifndef HATTN_BWD_D256_DS_BUFFERS
#define HATTN_BWD_D256_DS_BUFFERS 2
#endif
constexpr int kD256DsBuffers = HATTN_BWD_D256_DS_BUFFERS;
// HATTN_BWD_AUX_REVERSE (bits; for the A/B of scripts/ab_bwd.sh): which of the two aux kernels
//   walk their query blocks last (batch, head) first. The main kernel starts on the first (KV
//   head, batch) pairs and ends on the last, and L2 (50 MB) still holds what was touched last:
//   1 = the preprocess ends on the first pairs, so the main kernel's first adds find their zeroed
//   accumulator lines (and LSE, D) in L2 instead of reading them back from HBM; 2 = the dQ
//   conversion starts on the last pairs, whose accumulator the main kernel's last adds left in L2
//   (up to ~50 of the 134 MB it reads at 16k tokens x 2048). 0 = both in launch order.
#ifndef HATTN_BWD_AUX_REVERSE
#define HATTN_BWD_AUX_REVERSE 0
#endif
constexpr int kAuxReversePreprocess = 1, kAuxReverseConvert = 2;
// HATTN_BWD_DET_FIRST_STORE: 1 = in the deterministic mode the first KV block to reach a query
//   block (always block 0: its CTA sees every query block any later one sees, and the counter lets
//   it go first) stores its dQ^T slices instead of adding them, so the preprocess zeroes only the
//   accumulator blocks no KV block reaches (causal rows past seqlen_k's diagonal): 134 MB fewer
//   bytes written per call at 16k tokens x 2048. 0 = the preprocess zeroes every block (the
//   non-deterministic mode always does: its adds come in any order).
#ifndef HATTN_BWD_DET_FIRST_STORE
#define HATTN_BWD_DET_FIRST_STORE 0
#endif
constexpr bool kDetFirstStore = HATTN_BWD_DET_FIRST_STORE != 0;

// Which gradients a CTA accumulates (dK and dQ both need dS, so they go together).
enum class Grads { kAll, kDv, kDkDq };

// Q / dO slots: d64 gains from a third (+2-10%, its steps are short); d128 loses 1-2% with it.
constexpr int default_stages(int head_dim) { return head_dim <= 64 ? 3 : 2; }
// dS^T tiles: 2, so that a warpgroup never waits before rewriting one; 3 where the late dQ GEMM
// (kLateDq) reads a tile one step longer; 4 for d64's dQ by step parity (Config::kDqParity).
constexpr int default_ds_buffers(int head_dim) {
    return kDqLate != 0 && head_dim == 128 ? 3 : (HATTN_BWD_D64_DQ_PARITY != 0 && head_dim == 64 ? 4 : 2);
}

template <int kHeadDim_, class Elem_, Grads kGrads_ = Grads::kAll, int kStages_ = default_stages(kHeadDim_),
          int kDsBuffers_ = default_ds_buffers(kHeadDim_)>
struct Config {
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr Grads kGrads = kGrads_;
    static constexpr int kConsumers = 2;
    static constexpr int kBlockN = kConsumers * kMmaM;  // keys per CTA, 64 per consumer
    // Query rows per step. d64 on 128-row steps (FA3's tile there; D read from shared memory where
    // dS^T is formed and dQ^T in two 64-column halves, to fit 240 registers) measured 4-12% slower
    // at 1k-8k (bench/RESULTS.md run 63f).
    static constexpr int kBlockM = kQueryBlockRows;
    static constexpr int kStages = kStages_;            // Q / dO slots in the ring
    static constexpr int kDsBuffers = kDsBuffers_;      // dS^T tiles (default_ds_buffers)
    static constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;
    // The consumers hold dK and dV (head_dim registers together) besides S, dP and dQ; the
    // producer warpgroup only issues TMA (and at d128 the dQ warp's bulk adds):
    // 128 x 24 + 256 x 240 = 64512 of the SM's 65536 registers.
    static constexpr uint32_t kProducerRegs = 24;
    static constexpr uint32_t kConsumerRegs = 240;

    static constexpr bool kAccDv = kGrads != Grads::kDkDq;
    static constexpr bool kAccDk = kGrads != Grads::kDv;  // and dQ
    static constexpr bool kNeedV = kAccDk;                // dP^T = V dO^T feeds dS only
    // dQ^T = K^T dS^T, in 64-row slices of head_dim. At head_dim 64 each warpgroup multiplies its
    // own 64 keys (a partial sum; both add theirs) and never waits for the other's dS^T; wider
    // heads split the slices between the warpgroups, each summing over all kBlockN keys, so every
    // dQ element is added once per CTA.
    static constexpr bool kDqOwnKeys = kHeadDim == kMmaM;
    static constexpr int kDqSlices = kDqOwnKeys ? kHeadDim / kMmaM : kHeadDim / kMmaM / kConsumers;
    static constexpr int kDqKeys = kDqOwnKeys ? kMmaM : kBlockN;

    static constexpr int kDqSliceFloats = kMmaM * kBlockM;
    // At d128 dQ leaves the consumers through shared memory: they store their fragments
    // (conflict-free, fragment order) and a warp of the producer warpgroup hands each slice to
    // the TMA unit's bulk reduce-add, so the consumers issue no global adds: +6-8% (and 16 KB of
    // shared memory per slice). At d64 it measured -0-4% against the consumers' own reds, and
    // -0.4..+3.4% in kDqParity's order (not taken: 32 KB of shared memory for a gain inside the
    // noise, bench/RESULTS.md run 65d); at d256 there is no room. The deterministic mode always
    // uses the ordered red path.
    static constexpr bool kDqWarp = kAccDk && kHeadDim == 128;
    // Step i's dQ GEMM is issued in step i + 1, so a warpgroup waits for the other's dS^T of the
    // step before rather than of the current one, and the two warpgroups can drift up to a step
    // apart: one's softmax then overlaps the other's GEMMs (+1-3% at d128).
    static constexpr bool kDelayDq = kAccDk && !kDqOwnKeys && kDsBuffers_ >= 2 && kHeadDim == 128;
    // kDelayDq, HATTN_BWD_DQ_LATE: step i - 1's dQ GEMM issued with step i's dK GEMM (not before
    // step i's S^T), one wait for both.
    static constexpr bool kLateDq = kDelayDq && kDqLate != 0;
    // kDelayDq: ds_ready barriers per warpgroup, used in turn. A warpgroup arrives on one once per
    // step; before it arrives on the same one again the other must have waited on it. Plain
    // order: the other waits at its next step's start, before its own arrive, so 2 suffice. Late
    // dQ: the other waits after its next step's arrive, and a warpgroup can be kStages steps
    // ahead of the other's wait (the Q ring bounds it), so kStages + 1. Likewise the dS^T buffer
    // of step i is read by the other's dQ GEMM up to the end of its step i + 1.
    static constexpr int kDsPhases = kLateDq ? kStages + 1 : 2;
    static_assert(!kLateDq || kDsBuffers >= kStages + 1, "the late dQ GEMM needs kStages + 1 dS^T buffers");
    // d64's steps are short: loading each column's LSE and D before the GEMMs are issued, and
    // exponentiating once both S and dP are done, measured +10-19% there against the order wider
    // heads use (loads after S, exps while dP runs), which in turn is 5-9% faster at d128.
    static constexpr bool kShortStep = kHeadDim == kMmaM;
    // HATTN_BWD_PIPE: the next query block's S^T and dP^T queued behind this block's gradient GEMMs.
    static constexpr bool kPipeline = kShortStep && kAccDk && kAccDv && HATTN_BWD_PIPE != 0;
    // HATTN_BWD_D64_DQ_PARITY. Safe with 4 dS^T buffers and ds_ready barriers because a warpgroup
    // can run at most kStages = 3 steps ahead of the other (the Q ring): it rewrites the buffer of
    // step j in step j + 4, after the other has freed step j + 1's slot, so after that one's dQ^T
    // GEMM of step j has completed; likewise for the barrier of step j, reused in step j + 4.
    static constexpr bool kDqParity = kPipeline && kDqOwnKeys && HATTN_BWD_D64_DQ_PARITY != 0;
    static_assert(!kDqParity || (kStages <= 3 && kDsBuffers >= 4 && (kDsBuffers & (kDsBuffers - 1)) == 0),
                  "dQ parity: buffer and barrier reuse (a power of two: the step picks its buffer by a mask)");
    // dV's GEMM is issued as soon as P is ready, so it runs while dS is computed: +6-8% at d128,
    // neutral at d256; at d64 the later issue (dV and dK in one batch) is 2-6% faster.
    static constexpr bool kEarlyDv = kHeadDim >= 128;
    // HATTN_BWD_D256_DO_SLOT, where the ring has one slot and no dV is accumulated (dO then feeds
    // dP^T alone). kOwnDoSlot: dO in a ring of its own (kDpFirst: dP^T issued before S^T);
    // kFreeAfterDk: the Q slot freed before the dQ GEMM completes (dQ reads K and dS^T only).
    static constexpr int kDoSlot = kStages == 1 && !kAccDv ? HATTN_BWD_D256_DO_SLOT : 0;
    static constexpr bool kOwnDoSlot = kDoSlot == 1 || kDoSlot == 3;
    static constexpr bool kDpFirst = kDoSlot == 1;
    static constexpr bool kFreeAfterDk = kDoSlot != 0;

    using KvTile = SwizzledTile<Elem, kBlockN, kHeadDim>;
    using QTile = SwizzledTile<Elem, kBlockM, kHeadDim>;
    using DsTile = SwizzledTile<Elem, kBlockN, kBlockM>;  // dS^T: keys x query rows
    static_assert(kHeadDim % (kMmaM * (kDqOwnKeys ? 1 : kConsumers)) == 0, "dQ slices split evenly");
};

// Named barriers (0 is __syncthreads).
enum BarrierId : uint32_t {
    kConsumersSync = 1,   // both consumer warpgroups
    kWarpgroupFirst = 2,  // + consumer: one warpgroup's own
    kDqFullFirst = 4,     // + consumer: its dQ staging is written (the consumer arrives, the dQ warp waits)
    kDqEmptyFirst = 6,    // + consumer: its dQ staging has been read out (the dQ warp arrives)
    kDsReadyFirst = 8,    // + kDsPhases consumer + phase: dS^T of a step is stored (it arrives, the other waits)
};
constexpr uint32_t kHardwareBarriers = 16;
constexpr int kWarpThreads = 32;
using ConsumersBarrier = NamedBarrier<2 * kWarpgroupThreads>;
using WarpgroupBarrier = NamedBarrier<kWarpgroupThreads>;
using DqStagingBarrier = NamedBarrier<kWarpgroupThreads + kWarpThreads>;  // a consumer + the dQ warp
using DsReadyBarrier = NamedBarrier<2 * kWarpgroupThreads>;                // one consumer arrives, the other waits

// ---------------------------------------------------------------------------------------
// Shared memory
// ---------------------------------------------------------------------------------------
template <class Cfg>
struct alignas(kSharedAlign) SharedStorage {
    typename Cfg::KvTile k;
    std::conditional_t<Cfg::kNeedV, typename Cfg::KvTile, NoTile> v;
    typename Cfg::QTile q[Cfg::kStages];
    typename Cfg::QTile dout[Cfg::kStages];
    std::conditional_t<Cfg::kAccDk, typename Cfg::DsTile[Cfg::kDsBuffers], NoTile> ds;
    alignas(16) float lse_log2[Cfg::kStages][Cfg::kBlockM];
    alignas(16) float dpsum[Cfg::kStages][Cfg::kBlockM];
    Ring<1> kv_ring;  // K and V arrive once
    Ring<Cfg::kStages> q_ring;
    std::conditional_t<Cfg::kOwnDoSlot, Ring<1>, NoTile> do_ring;  // Config::kOwnDoSlot: dO's slot
    alignas(16) std::conditional_t<Cfg::kDqWarp, float[Cfg::kConsumers][Cfg::kDqSlices][Cfg::kDqSliceFloats], NoTile> dq_staging;
};

template <class Cfg>
constexpr int shared_bytes() {
    return static_cast<int>(sizeof(SharedStorage<Cfg>)) + kSharedAlign;  // + slack to align the base
}

// Scalars the main kernel needs besides its tensor maps. Workspace rows of (batch b, query head
// h) start at (b * heads_q + h) * seqlen_q_padded.
struct KernelParams {
    const float* lse_log2;
    const float* dpsum;
    float* dq_accum;
    int32_t* semaphores;
    Mask mask;
    int heads_q, heads_kv, heads_per_kv;
    int num_n_blocks, num_m_blocks;
    int64_t seqlen_q_padded;
    float scale;       // dK and dQ carry the softmax scale (S = scale * Q K^T)
    float scale_log2;  // scale * log2(e)
    bool deterministic;
};

// dQ's accumulator holds each query block as head_dim / 64 slices of 64 x kQueryBlockRows floats
// in wgmma's fragment order, so that a warp's adds touch whole contiguous lines: the four floats
// of register pairs 2j and 2j + 1 of warpgroup thread `tid` sit at (j * 128 + tid) * 4. Pair
// `pair` holds head_dim column 16 (tid / 32) + (tid % 32) / 4 + 8 (pair % 2) of the slice and
// query rows 8 (pair / 2) + 2 (tid % 4) + {0, 1} of the block (the fragment of dQ^T).
__host__ __device__ constexpr int dq_accum_index(int pair, int tid) {
    return ((pair / 2) * kWarpgroupThreads + tid) * 4 + (pair % 2) * 2;
}
// The inverse, for the float pair at dq_accum_index(pair, tid) == 2 * i.
struct DqPair {
    int pair, tid;
};
__host__ __device__ constexpr DqPair dq_accum_pair(int i) {
    return {2 * (i / (2 * kWarpgroupThreads)) + i % 2, (i / 2) % kWarpgroupThreads};
}

// Blocks until *counter == value (acquire). Debug builds trap after the mbarrier wait's timeout.
__device__ __forceinline__ void wait_counter(const int32_t* counter, int32_t value) {
#ifdef HATTN_DEBUG_HANG
    ptx::spin_until_equal_acquire_gpu(counter, value, ptx::kMbarrierTimeoutNs);
#else
    ptx::spin_until_equal_acquire_gpu(counter, value, 0);
#endif
}

// ---------------------------------------------------------------------------------------
// The main kernel
// ---------------------------------------------------------------------------------------
// The six tensor maps of one backward launch (they live in the kernel's parameter space).
struct TensorMaps {
    CUtensorMap q, k, v, dout, dk, dv;
};

template <class Cfg, bool kLptGrid = false, bool kWalkDown = false>
__global__ void __launch_bounds__(Cfg::kThreads, 1) bwd_kernel(const __grid_constant__ TensorMaps maps, const KernelParams p) {
    using Elem = typename Cfg::Elem;
    using KvTile = typename Cfg::KvTile;
    using QTile = typename Cfg::QTile;
    constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kHeadDim = Cfg::kHeadDim;
    constexpr uint32_t kConsumerThreads = Cfg::kConsumers * kWarpgroupThreads;
    constexpr uint32_t kRowBytes = kBlockM * sizeof(float);

    extern __shared__ uint8_t smem_raw[];
    auto& smem = *reinterpret_cast<SharedStorage<Cfg>*>(
        (reinterpret_cast<uintptr_t>(smem_raw) + kSharedAlign - 1) & ~uintptr_t(kSharedAlign - 1));

    // kLptGrid: a grid of (group of lpt_group() pairs, KV block, pair group), launched x fastest:
    // block j of every (KV head, batch) pair of a group before block j + 1, so causal grids start
    // with their longest CTAs (and the deterministic wait for block j - 1 of the same head still
    // waits for an earlier CTA). Otherwise a 1-D grid, the KV block fastest, so the blocks of one
    // head start in order: the deterministic mode's wait for block j - 1 is then always a wait
    // for a CTA already running.
    // (Unsigned index math, as on blockIdx itself: signed division here made d128 spill.)
    const unsigned pair = kLptGrid ? blockIdx.z * gridDim.x + blockIdx.x : blockIdx.x / p.num_n_blocks;
    const int n_block = kLptGrid ? blockIdx.y : blockIdx.x % p.num_n_blocks;
    const int kv_head = pair % p.heads_kv;
    const int batch = pair / p.heads_kv;
    const int n0 = n_block * kBlockN;
    const int head_begin = kv_head * p.heads_per_kv;
    const int m_begin = p.mask.first_query_block(n0, kBlockM);  // earlier query blocks see none of these keys
    const int m_unmasked = max(m_begin, p.mask.first_unmasked_query_block(n0, kBlockN, kBlockM));
    // The CTA's query blocks, m_begin .. m_end - 1, in the order `walk(t)`, t = 0 .. m_end - m_begin - 1.
    const int m_end = max(m_begin, p.num_m_blocks);
    constexpr bool descending = kWalkDown;  // the deterministic mode's walk
    auto walk = [&](int t) { return descending ? m_end - 1 - t : m_begin + t; };
    auto head_rows = [&](int head) { return (static_cast<int64_t>(batch) * p.heads_q + head) * p.seqlen_q_padded; };
    // dQ's fp32 accumulator block of query block m of query head `head`.
    auto dq_block = [&](int head, int m) {
        return p.dq_accum + (head_rows(head) + static_cast<int64_t>(m) * kBlockM) * kHeadDim;
    };

    const uint32_t warpgroup = ptx::warpgroup_index();
    if constexpr (Cfg::kHeadDim == 256 && Cfg::kGrads == Grads::kDv) ptx::griddepcontrol_launch_dependents();
    init_barriers([&] {
        ptx::prefetch_tensormap(&maps.q);
        ptx::prefetch_tensormap(&maps.k);
        ptx::prefetch_tensormap(&maps.v);
        ptx::prefetch_tensormap(&maps.dout);
        smem.kv_ring.init(1);
        smem.q_ring.init(kConsumerThreads);  // every consumer thread frees each slot (release_stage)
        if constexpr (Cfg::kOwnDoSlot) smem.do_ring.init(kConsumerThreads);
    });

    if (warpgroup == 0) {
        // ================================ producer ================================
        ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
        if (is_tma_issuer()) {
            typename Ring<1>::State kv_state;
            uint64_t* kv_full = smem.kv_ring.producer_acquire(kv_state, KvTile::kTxBytes * (Cfg::kNeedV ? 2 : 1));
            smem.k.load(&maps.k, kv_full, n0, kv_head, batch);
            if constexpr (Cfg::kNeedV) smem.v.load(&maps.v, kv_full, n0, kv_head, batch);

            typename Ring<Cfg::kStages>::State st;
            typename Ring<1>::State do_st;
            // (kOwnDoSlot: dO's slot is freed first in a step, so it is refilled first.)
            constexpr uint32_t kStageTxBytes = (Cfg::kOwnDoSlot ? 1 : 2) * QTile::kTxBytes + 2 * kRowBytes;
            for (int head = head_begin; head < head_begin + p.heads_per_kv; ++head) {
                for (int t = 0; t < m_end - m_begin; ++t) {
                    const int m = walk(t);
                    if constexpr (Cfg::kOwnDoSlot) {
                        uint64_t* do_full = smem.do_ring.producer_acquire(do_st, QTile::kTxBytes);
                        smem.dout[0].load(&maps.dout, do_full, m * kBlockM, head, batch);
                        do_st.advance();
                    }
                    uint64_t* full = smem.q_ring.producer_acquire(st, kStageTxBytes);
                    smem.q[st.stage].load(&maps.q, full, m * kBlockM, head, batch);
                    if constexpr (!Cfg::kOwnDoSlot) smem.dout[st.stage].load(&maps.dout, full, m * kBlockM, head, batch);
                    const int64_t row = head_rows(head) + static_cast<int64_t>(m) * kBlockM;
                    ptx::bulk_load(smem.lse_log2[st.stage], p.lse_log2 + row, kRowBytes, full);
                    ptx::bulk_load(smem.dpsum[st.stage], p.dpsum + row, kRowBytes, full);
                    st.advance();
                }
            }
        } else if (Cfg::kDqWarp && !p.deterministic && threadIdx.x / kWarpThreads >= 1 &&
                   threadIdx.x / kWarpThreads <= static_cast<unsigned>(kDqWarps)) {
            // ------------------------------ dQ warp ------------------------------
            // Walks the consumers' steps; per step and consumer: wait for its staged dQ slices,
            // reduce-add them into the accumulator, and free the staging once read. With two
            // dQ warps, warp 1 + c serves consumer c alone.
            if constexpr (Cfg::kDqWarp) {
                const int lane = threadIdx.x % kWarpThreads;
                const int c_begin = kDqWarps == 1 ? 0 : static_cast<int>(threadIdx.x / kWarpThreads) - 1;
                const int c_end = kDqWarps == 1 ? Cfg::kConsumers : c_begin + 1;
                for (int head = head_begin; head < head_begin + p.heads_per_kv; ++head) {
                    for (int m = m_begin; m < p.num_m_blocks; ++m) {
                        float* block = dq_block(head, m);
                        for (int c = c_begin; c < c_end; ++c) {
                            // "empty" pairs with the consumer's wait before it writes: the staging
                            // was read out (bulk_wait_group_read below, one step earlier).
                            DqStagingBarrier{kDqEmptyFirst + c}.arrive();
                            DqStagingBarrier{kDqFullFirst + c}.sync();
                            if (lane == 0) {
                                for (int sl = 0; sl < Cfg::kDqSlices; ++sl) {
                                    const int slice = Cfg::kDqOwnKeys ? sl : c * Cfg::kDqSlices + sl;
                                    ptx::bulk_reduce_add_f32(block + slice * Cfg::kDqSliceFloats, smem.dq_staging[c][sl],
                                                             Cfg::kDqSliceFloats * sizeof(float));
                                }
                                ptx::bulk_commit_group();
                                ptx::bulk_wait_group_read<0>();
                            }
                            __syncwarp();
                        }
                    }
                }
                if (lane == 0) ptx::bulk_wait_group<0>();  // the adds land before the CTA retires
            }
        }
        // d256 dK + dQ: the CTA retires only after the dV grid has (its producer warpgroup waits for it).
        if constexpr (Cfg::kHeadDim == 256 && Cfg::kGrads == Grads::kDkDq) ptx::griddepcontrol_wait();
    } else {
        // ================================ consumers ===============================
        ptx::setmaxnreg_inc<Cfg::kConsumerRegs>();
        const int cw = warpgroup - 1;  // which 64 keys of the block
        const int tid = threadIdx.x % kWarpgroupThreads;
        const int lane = tid % 32;
        const int first_key_in_block = cw * kMmaM;
        const int first_key = n0 + first_key_in_block + acc_row_in_warpgroup(tid);  // this thread's key (and +8)
        const ConsumersBarrier consumers{kConsumersSync};
        const WarpgroupBarrier own_warpgroup{static_cast<uint32_t>(kWarpgroupFirst + cw)};
        // The late dQ order (Config::kLateDq) in the non-deterministic instantiation only: the
        // deterministic one (kWalkDown, picked on the host exactly when p.deterministic) keeps the
        // plain order, whose ordered adds need the step's query block. So where kLate holds, the
        // mode is known not to be deterministic, and the ordered-add path is not compiled in.
        constexpr bool kLate = Cfg::kLateDq && !kWalkDown;
        auto deterministic = [&] { return !kLate && p.deterministic; };  // (read where used, as p's other fields)

        float dv[kHeadDim / 2];
        float dk[kHeadDim / 2];
#pragma unroll
        for (int i = 0; i < kHeadDim / 2; ++i) dv[i] = dk[i] = 0.f;

        // dQ^T slice sl of this warpgroup: head_dim columns [dq_col(sl), +64), summed over the keys
        // from k-step dq_key_step0 on (kDqKeys of them).
        auto dq_col = [&](int sl) { return (Cfg::kDqOwnKeys ? sl : cw * Cfg::kDqSlices + sl) * kMmaM; };
        const int dq_key_step0 = Cfg::kDqOwnKeys ? first_key_in_block / Elem::kMmaK : 0;  // first k-step over keys

        // Adds this warpgroup's dQ^T slices to the accumulator block of query block m, whose
        // slices are stored in fragment order (dq_accum_index): a warp's 16-byte reds of register
        // pairs 2j, 2j + 1 cover 512 contiguous bytes, where a row-major layout would spread each
        // instruction over 8 lines (+20-35% overall; bench/RESULTS.md run 14). `write` takes each
        // 16 bytes: a red by default; a store for the first of the deterministic mode's ordered
        // adders (kDetFirstStore; a branch around the whole loop, not in it: in it, d256's dK + dQ
        // kernel spilled 12 bytes).
        using DqFragment = float[Cfg::kDqSlices][kBlockM / 2];
        auto red_v4 = [](float* at, float a, float b, float c, float d) { ptx::red_global_add_v4_f32(at, a, b, c, d); };
        auto add_dq = [&](float* block, const DqFragment& dq, auto write) {
#pragma unroll
            for (int sl = 0; sl < Cfg::kDqSlices; ++sl) {
                float* slice = block + (dq_col(sl) / kMmaM) * Cfg::kDqSliceFloats;
#pragma unroll
                for (int i = 0; i < kBlockM / 2; i += 4)
                    write(slice + dq_accum_index(i / 2, tid), dq[sl][i], dq[sl][i + 1], dq[sl][i + 2], dq[sl][i + 3]);
            }
        };

        typename Ring<1>::State kv_state;
        smem.kv_ring.consumer_wait(kv_state);
        typename Ring<Cfg::kStages>::State read_st, release_st;  // the slot to read next / to free next
        [[maybe_unused]] float dq[Cfg::kDqSlices][kBlockM / 2];

        // A step's dV and dK GEMMs have completed: free its Q / dO slot.
        auto release_stage = [&] {
            ptx::wgmma_fence_operand(dv);
            ptx::wgmma_fence_operand(dk);
            // Every thread releases the slot after its own reads of LSE and D, so program order puts
            // each read before an arrive the producer's next bulk copy into the slot waits for.
            // (One arrive per warp after __syncwarp is as correct by the memory model, but
            // compute-sanitizer's racecheck then reports the refill as racing the other lanes'
            // reads: test/ptx_bulk_test.cu's ring reproducers. One arrive per thread costs 256
            // shared-memory arrivals per query block.)
            smem.q_ring.consumer_release(release_st);
            release_st.advance();
        };
        // The dQ GEMM of query block m (head `head`) has completed: add it to the accumulator.
        auto finish_dq = [&](int head, int m) {
            if constexpr (Cfg::kAccDk) {
#pragma unroll
                for (int sl = 0; sl < Cfg::kDqSlices; ++sl) ptx::wgmma_fence_operand(dq[sl]);
                float* block = dq_block(head, m);
                if (Cfg::kDqWarp && !deterministic()) {
                    if constexpr (Cfg::kDqWarp) {
                        const DqStagingBarrier empty{kDqEmptyFirst + cw}, full{kDqFullFirst + cw};
                        empty.sync();  // the dQ warp has read out the previous step's slices
#pragma unroll
                        for (int sl = 0; sl < Cfg::kDqSlices; ++sl) {
#pragma unroll
                            for (int i = 0; i < kBlockM / 2; i += 4)
                                ptx::st_shared_v4_f32(&smem.dq_staging[cw][sl][dq_accum_index(i / 2, tid)], dq[sl][i],
                                                      dq[sl][i + 1], dq[sl][i + 2], dq[sl][i + 3]);
                        }
                        ptx::fence_proxy_async_shared_cta();  // the bulk reduce reads through the async proxy
                        full.arrive();
                    }
                } else if (!deterministic()) {
                    add_dq(block, dq, red_v4);
                } else {
                    // KV block n_block is the n_block-th to add to this query block (every block
                    // before it sees it too). Within the CTA, warpgroups whose slices overlap add
                    // one after the other. kDetFirstStore: block 0's first turn stores.
                    int32_t* counter = p.semaphores + head_rows(head) / kBlockM + m;
                    if (cw == 0 && tid == 0) wait_counter(counter, n_block);
                    consumers.sync();
#pragma unroll
                    for (int turn = 0; turn < (Cfg::kDqOwnKeys ? Cfg::kConsumers : 1); ++turn) {
                        if (!Cfg::kDqOwnKeys || cw == turn) {
                            if (kDetFirstStore && kWalkDown && n_block == 0 && turn == 0) {
                                add_dq(block, dq, [](float* at, float a, float b, float c, float d) {
                                    ptx::st_global_v4_b32(at, make_uint4(__float_as_uint(a), __float_as_uint(b),
                                                                         __float_as_uint(c), __float_as_uint(d)));
                                });
                            } else {
                                add_dq(block, dq, red_v4);
                            }
                        }
                        ptx::fence_acq_rel_gpu();
                        consumers.sync();
                    }
                    if (cw == 0 && tid == 0) ptx::red_release_gpu_global_add_s32(counter, 1);
                }
            }
        };

        // dQ^T = K^T dS^T for the step whose dS^T is in buffer `buf`.
        auto issue_dq = [&](int buf) {
            if constexpr (Cfg::kAccDk) {
                ptx::wgmma_fence();
#pragma unroll
                for (int sl = 0; sl < Cfg::kDqSlices; ++sl) {
#pragma unroll
                    for (int kk = 0; kk < Cfg::kDqKeys / Elem::kMmaK; ++kk)
                        mma_ss<kBlockM, Elem, 1, 1>(dq[sl], smem.k.desc_mn_major(dq_key_step0 + kk, dq_col(sl)),
                                                    smem.ds[buf].desc_mn_major(dq_key_step0 + kk), kk > 0 ? 1u : 0u);
                }
                ptx::wgmma_commit_group();
            }
        };
        // kDelayDq: "warpgroup c stored its dS^T of a step of phase b" is barrier ds_ready(c, b),
        // kDsPhases per warpgroup used in turn, so consecutive stores never share a barrier before
        // the other warpgroup has waited (Config::kDsPhases).
        // The id is computed, not read from a table: a table indexed at run time lives on the
        // stack (a local load before each of these barriers, in every step).
        constexpr int kDsPhases = Cfg::kDsPhases;
        static_assert(kDsReadyFirst + Cfg::kConsumers * kDsPhases <= kHardwareBarriers, "named barrier ids");
        auto ds_ready = [](int c, int b) {
            return DsReadyBarrier{kDsReadyFirst + kDsPhases * static_cast<uint32_t>(c) + static_cast<uint32_t>(b)};
        };
        // The step's ds_ready barrier (ds_phase) and dS^T buffer (ds_buf). kLate: one counter for
        // both (as many of each, advancing together; a register fewer, which it needs). Otherwise
        // two, as in the plain build's code.
        int ds_phase = 0;
        [[maybe_unused]] int ds_buf = 0;
        static_assert(!kLate || Cfg::kDsBuffers == kDsPhases, "kLate: a dS^T buffer per phase");
        auto ds_buffer = [&] { return kLate ? ds_phase : ds_buf; };
        auto previous_phase = [&] {
            if constexpr (kDsPhases == 2) return ds_phase ^ 1;
            else return ds_phase == 0 ? kDsPhases - 1 : ds_phase - 1;
        };
        struct Previous {
            int head, m, ds_buf;
        } previous{-1, -1, 0};  // kDelayDq: the step whose dQ GEMM is still to be issued
        // kLate: whether there is one (the first step has none); its dS^T buffer is the previous
        // ds_phase's, and the kLate path needs neither its head nor its query block.
        bool has_previous = false;

        // The pieces of a step, shared by the one-block-at-a-time step and the pipelined walk.
        // Per query column of the fragment (columns 8j + 2 (lane % 4) + {0, 1}): its LSE and D.
        // (The array types name Cfg's constants: nvcc takes one sized by a local constexpr for a
        // variable-length array in a lambda's parameters.)
        using Columns = float2[Cfg::kBlockM / 8];
        auto load_columns = [&](int stage, Columns& lse, Columns& dpsum) {
#pragma unroll
            for (int j = 0; j < kBlockM / 8; ++j) {
                lse[j] = ptx::ld_shared_v2_f32(&smem.lse_log2[stage][acc_col(4 * j, lane)]);
                if constexpr (Cfg::kAccDk) dpsum[j] = ptx::ld_shared_v2_f32(&smem.dpsum[stage][acc_col(4 * j, lane)]);
            }
        };
        auto column = [](const Columns& v, int i) { return i % 2 == 0 ? v[i / 4].x : v[i / 4].y; };
        using Scores = float[Cfg::kBlockM / 2];
        // S^T = K_w Q^T and dP^T = V_w dO^T from slot `stage` (issued, not committed).
        auto gemm_st = [&](int stage, Scores& s) {
#pragma unroll
            for (int kk = 0; kk < kHeadDim / Elem::kMmaK; ++kk)
                mma_ss<kBlockM, Elem, 0>(s, smem.k.desc_k_major(first_key_in_block, kk), smem.q[stage].desc_k_major(0, kk),
                                         kk > 0 ? 1u : 0u);
        };
        auto gemm_dpt = [&](int stage, Scores& dp) {
            if constexpr (Cfg::kAccDk) {  // (only dS needs dP^T; the dV kernel holds no V)
#pragma unroll
                for (int kk = 0; kk < kHeadDim / Elem::kMmaK; ++kk)
                    mma_ss<kBlockM, Elem, 0>(dp, smem.v.desc_k_major(first_key_in_block, kk),
                                             smem.dout[stage].desc_k_major(0, kk), kk > 0 ? 1u : 0u);
            }
        };
        // Both of the block in slot `stage`: two commit groups (`split`: S^T's wait can leave dP^T
        // running) or one.
        auto issue_scores = [&](int stage, Scores& s, Scores& dp, auto split) {
            ptx::wgmma_fence();
            gemm_st(stage, s);
            if constexpr (decltype(split)::value) ptx::wgmma_commit_group();
            gemm_dpt(stage, dp);
            if constexpr (Cfg::kAccDk || !decltype(split)::value) ptx::wgmma_commit_group();
        };
        // Config::kOwnDoSlot: S^T = K_w Q^T and dP^T = V_w dO^T, each issued once its operand is
        // here. kDpFirst: dP^T first (its dO was loaded while the previous step ran), dO's slot
        // freed as soon as it completes, and both done on return; else S^T first, done on return
        // (dP^T may still run: form_ds's wait frees dO's slot). One slot in each ring, one use per
        // step, so dO's phase is Q's: no state of its own (a register fewer; the 1-D grid's
        // instantiation spilled 7 with one).
        auto release_do = [&] {
            if constexpr (Cfg::kOwnDoSlot) smem.do_ring.consumer_release(typename Ring<1>::State{});
        };
        auto issue_scores_own_do = [&](int stage, Scores& s, Scores& dp) {
            if constexpr (Cfg::kOwnDoSlot) {
                static_assert(Cfg::kStages == 1, "dO's slot shares the Q ring's state");
                const typename Ring<1>::State st = read_st;
                auto issue_s = [&] {
                    smem.q_ring.consumer_wait(st);
                    ptx::wgmma_fence();  // (after the wait's branch: else ptxas inserts one, C7519)
                    gemm_st(stage, s);
                    ptx::wgmma_commit_group();
                };
                auto issue_dp = [&] {
                    smem.do_ring.consumer_wait(st);
                    ptx::wgmma_fence();
                    gemm_dpt(0, dp);  // (dO's one slot)
                    ptx::wgmma_commit_group();
                };
                if constexpr (Cfg::kDpFirst) {
                    issue_dp();
                    issue_s();
                    ptx::wgmma_wait_group<1>();
                    ptx::wgmma_fence_operand(dp);
                    release_do();
                    ptx::wgmma_wait_group<0>();
                } else {
                    issue_s();
                    issue_dp();
                    ptx::wgmma_wait_group<1>();
                }
                read_st.advance();
            }
        };
        // P^T = exp2(S^T scale log2(e) - LSE), in place, and dS^T = P^T o (dP^T - D) in dP^T's place.
        auto exponentiate = [&](Scores& s, const Columns& lse) {
#pragma unroll
            for (int i = 0; i < kBlockM / 2; ++i) s[i] = ptx::ex2_approx_f32(fmaf(s[i], p.scale_log2, -column(lse, i)));
        };
        auto form_ds = [&](const Scores& pt, Scores& dp, const Columns& dpsum) {
#pragma unroll
            for (int i = 0; i < kBlockM / 2; ++i) dp[i] = pt[i] * (dp[i] - column(dpsum, i));
        };
        using AFragment = uint32_t[Cfg::kBlockM / Cfg::Elem::kMmaK][4];
        // dV += P^T dO and dK += dS^T Q, P^T and dS^T from registers (no fence, no commit).
        auto gemm_dv = [&](const AFragment& pf, int stage) {
#pragma unroll
            for (int kk = 0; kk < kBlockM / Elem::kMmaK; ++kk)
                mma_rs<kHeadDim, Elem, 1>(dv, pf[kk], smem.dout[stage].desc_mn_major(kk), 1u);
        };
        auto gemm_dk = [&](const AFragment& dsf, int stage) {
#pragma unroll
            for (int kk = 0; kk < kBlockM / Elem::kMmaK; ++kk)
                mma_rs<kHeadDim, Elem, 1>(dk, dsf[kk], smem.q[stage].desc_mn_major(kk), 1u);
        };

        // One query block: the five GEMMs, the softmax recomputed from LSE.
        auto step = [&](int head, int m, auto masked) {
            const int stage = read_st.stage;
            if constexpr (!Cfg::kOwnDoSlot) {
                smem.q_ring.consumer_wait(read_st);
                read_st.advance();
            }
            Scores s;
            [[maybe_unused]] Scores dp;
            // The previous step's dQ first, once the other warpgroup's dS^T of it is stored (it
            // was, unless that warpgroup is behind).
            if constexpr (Cfg::kDelayDq && !kLate) {
                if (previous.m >= 0) {
                    ds_ready(1 - cw, previous_phase()).sync();
                    issue_dq(previous.ds_buf);
                    ptx::wgmma_wait_group<0>();
                    finish_dq(previous.head, previous.m);
                }
                previous = {head, m, ds_buffer()};
            }

            Columns lse;
            [[maybe_unused]] Columns dpsum;
            if constexpr (Cfg::kShortStep) load_columns(stage, lse, dpsum);

            if constexpr (Cfg::kOwnDoSlot) {
                issue_scores_own_do(stage, s, dp);
            } else {
                // S^T and dP^T issued together; P^T is computed while dP^T runs.
                issue_scores(stage, s, dp, std::true_type{});
                if constexpr (Cfg::kAccDk && !Cfg::kShortStep) ptx::wgmma_wait_group<1>();  // S^T; dP^T may still run
                else ptx::wgmma_wait_group<0>();
            }
            ptx::wgmma_fence_operand(s);

            if constexpr (!Cfg::kShortStep) load_columns(stage, lse, dpsum);
            if constexpr (decltype(masked)::value) p.mask.apply_transposed<kBlockM>(s, first_key, m * kBlockM);
            exponentiate(s, lse);

            AFragment pf;
            acc_to_a_fragment<Elem, kBlockM>(s, pf);
            if constexpr (Cfg::kAccDv && (Cfg::kEarlyDv || !Cfg::kAccDk)) {
                ptx::wgmma_fence();
                gemm_dv(pf, stage);
                ptx::wgmma_commit_group();
            }
            if constexpr (Cfg::kAccDk) {
                AFragment dsf;
                if constexpr (Cfg::kAccDv && Cfg::kEarlyDv) ptx::wgmma_wait_group<1>();  // dP^T; dV may still run
                else ptx::wgmma_wait_group<0>();
                ptx::wgmma_fence_operand(dp);
                if constexpr (Cfg::kOwnDoSlot && !Cfg::kDpFirst) release_do();
                form_ds(s, dp, dpsum);
                acc_to_a_fragment<Elem, kBlockM>(dp, dsf);
                // dS^T -> shared memory for dQ. With one buffer, the other warpgroup's dQ GEMM of
                // the previous step must be done reading it.
                if constexpr (Cfg::kDsBuffers == 1 && !Cfg::kDqOwnKeys) consumers.sync();
                store_fragment<Elem, typename Cfg::DsTile, kBlockM>(smem.ds[ds_buffer()], dp, first_key_in_block);
                store_fence();
                if constexpr (Cfg::kDelayDq) ds_ready(cw, ds_phase).arrive();
                // dK += dS^T Q, dS^T from registers (after dV when that is not issued early).
                auto issue_dk = [&] {
                    ptx::wgmma_fence();
                    if constexpr (Cfg::kAccDv && !Cfg::kEarlyDv) gemm_dv(pf, stage);
                    gemm_dk(dsf, stage);
                    ptx::wgmma_commit_group();
                };
                if constexpr (kLate) {
                    // Late dQ: the previous step's dQ GEMM, once the other warpgroup's dS^T of it
                    // is stored (it was, unless that warpgroup is behind), queued beside dK's, and
                    // one wait for all. First the wait for dV's GEMM (issued long before): P^T's
                    // registers are then free, the 32 consecutive ones dQ's accumulator needs
                    // (else the compiler serializes dQ behind dK, or spills). The dQ registers are
                    // written and read within the branch (a merge of them with the other path's
                    // before the wait would read them while in flight, serializing every wgmma).
                    auto wait_dv_issue_dq = [&] {
                        ptx::wgmma_wait_group<kDqLate == 2 ? 0 : 1>();
                        ptx::wgmma_fence_operand(dv);
                        ds_ready(1 - cw, previous_phase()).sync();
                        issue_dq(previous_phase());
                    };
                    if (has_previous) {
                        if constexpr (kDqLate == 2) wait_dv_issue_dq();
                        issue_dk();
                        if constexpr (kDqLate != 2) wait_dv_issue_dq();
                        ptx::wgmma_wait_group<0>();
                        release_stage();
                        finish_dq(head, m);  // (head and m are unused in this mode)
                    } else {
                        issue_dk();
                        ptx::wgmma_wait_group<0>();
                        release_stage();
                    }
                    has_previous = true;
                } else {
                    issue_dk();
                }
            }

            if constexpr (!kLate) {
                // dQ^T = K^T dS^T once the dS^T rows it reads are in shared memory.
                if constexpr (Cfg::kAccDk && !Cfg::kDelayDq) {
                    if constexpr (Cfg::kDqOwnKeys) own_warpgroup.sync();
                    else consumers.sync();
                    issue_dq(ds_buffer());
                }
                if constexpr (Cfg::kFreeAfterDk) {
                    ptx::wgmma_wait_group<1>();  // dK's GEMM, the last to read Q: its slot refills while dQ runs
                    release_stage();
                    ptx::wgmma_wait_group<0>();
                } else {
                    ptx::wgmma_wait_group<0>();
                    release_stage();
                }
                if constexpr (!Cfg::kDelayDq) finish_dq(head, m);
            }
            // (xor where there are two: the compiler cannot know the value is 0 or 1)
            if constexpr (!kLate && Cfg::kAccDk && Cfg::kDsBuffers == 2) ds_buf ^= 1;
            if constexpr (!kLate && Cfg::kAccDk && Cfg::kDsBuffers > 2) ds_buf = ds_buf + 1 == Cfg::kDsBuffers ? 0 : ds_buf + 1;
            if constexpr (kDsPhases == 2) ds_phase ^= 1;
            else ds_phase = ds_phase + 1 == kDsPhases ? 0 : ds_phase + 1;
        };

        // The masked query blocks (m_begin .. masked_end - 1) come first when walking up, last
        // when walking down.
        const int masked_end = min(m_unmasked, m_end);
        if constexpr (Cfg::kPipeline) {
            // Config::kPipeline: block t's scores were issued by step t - 1 (by the prologue for
            // t = 0), behind step t - 1's gradient GEMMs. One loop over every (head, block): the
            // next block's GEMMs do not depend on its mask, only its softmax does.
            const int blocks = m_end - m_begin;
            const int steps = p.heads_per_kv * blocks;
            Scores s, dp;
            Columns lse, dpsum;
            // The next block's LSE and D, then its S^T and dP^T in one commit group.
            auto begin_block = [&](int stage) {
                load_columns(stage, lse, dpsum);
                issue_scores(stage, s, dp, std::false_type{});
            };
            int stage = read_st.stage;
            if (steps > 0) {
                smem.q_ring.consumer_wait(read_st);
                read_st.advance();
                begin_block(stage);
            }
            // kParity (Config::kDqParity, not the deterministic walk, whose ordered adds take both
            // warpgroups' partial sums): dQ^T of step j is computed by warpgroup j % 2 over all
            // the block's keys in its step j + 1, once the other's dS^T of step j is stored
            // (barrier ds_ready(other, j / 2 % 2)), and added by it alone.
            constexpr bool kParity = Cfg::kDqParity && !kWalkDown;
            auto ds_buffer_of = [](int j) { return j & (Cfg::kDsBuffers - 1); };
            // Step j's dQ^T over all keys, once the other warpgroup's dS^T of it is stored.
            auto issue_dq_of_step = [&](int j) {
                ds_ready(1 - cw, (j / 2) % 2).sync();
                ptx::wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < kBlockN / Elem::kMmaK; ++kk)
                    mma_ss<kBlockM, Elem, 1, 1>(dq[0], smem.k.desc_mn_major(kk, 0), smem.ds[ds_buffer_of(j)].desc_mn_major(kk),
                                                kk > 0 ? 1u : 0u);
                ptx::wgmma_commit_group();
            };
            int prev_head = head_begin, prev_m = 0;  // kParity: the previous step's query block
            int head = head_begin, t = 0;
            for (int k = 0; k < steps; ++k) {
                const int m = walk(t);
                const int this_stage = stage;
                ptx::wgmma_wait_group<0>();
                ptx::wgmma_fence_operand(s);
                ptx::wgmma_fence_operand(dp);
                if (m < masked_end) p.mask.apply_transposed<kBlockM>(s, first_key, m * kBlockM);
                exponentiate(s, lse);
                AFragment pf, dsf;
                acc_to_a_fragment<Elem, kBlockM>(s, pf);
                form_ds(s, dp, dpsum);
                acc_to_a_fragment<Elem, kBlockM>(dp, dsf);
                const int buf = kParity ? ds_buffer_of(k) : ds_buf;
                store_fragment<Elem, typename Cfg::DsTile, kBlockM>(smem.ds[buf], dp, first_key_in_block);
                store_fence();
                if (kParity && k % 2 != cw) ds_ready(cw, (k / 2) % 2).arrive();  // for the other's dQ^T
                // dV += P^T dO and dK += dS^T Q from registers, then dQ^T = K_w^T dS^T once the
                // warpgroup's dS^T rows are stored.
                ptx::wgmma_fence();
                gemm_dv(pf, this_stage);
                gemm_dk(dsf, this_stage);
                ptx::wgmma_commit_group();
                // The next block's scores, queued behind this block's gradients; then the wait
                // for those alone (the scores stay in flight through the dQ adds).
                auto next_scores_then_wait = [&] {
                    if (k + 1 < steps) {
                        stage = read_st.stage;
                        smem.q_ring.consumer_wait(read_st);
                        read_st.advance();
                        begin_block(stage);
                        ptx::wgmma_wait_group<1>();
                    } else {
                        ptx::wgmma_wait_group<0>();
                    }
                };
                if constexpr (kParity) {
                    // (dQ's registers written and read within one branch: ptxas would otherwise
                    // see them in flight where the branches meet, and serialize the wgmmas.)
                    if (k >= 1 && (k - 1) % 2 == cw) {
                        issue_dq_of_step(k - 1);
                        next_scores_then_wait();
                        release_stage();
                        ptx::wgmma_fence_operand(dq[0]);
                        add_dq(dq_block(prev_head, prev_m), dq, red_v4);
                    } else {
                        next_scores_then_wait();
                        release_stage();
                    }
                    prev_head = head;
                    prev_m = m;
                } else {
                    own_warpgroup.sync();
                    issue_dq(ds_buf);
                    next_scores_then_wait();
                    release_stage();
                    finish_dq(head, m);
                    ds_buf ^= 1;
                }
                if (++t == blocks) {
                    t = 0;
                    ++head;
                }
            }
            // Nothing is in flight here (the last step waited for everything), but ptxas cannot
            // tell which branch the last step took and would insert this wait itself (C7517).
            ptx::wgmma_wait_group<0>();
            if (kParity && steps > 0 && (steps - 1) % 2 == cw) {  // the last step's dQ^T
                issue_dq_of_step(steps - 1);
                ptx::wgmma_wait_group<0>();
                ptx::wgmma_fence_operand(dq[0]);
                add_dq(dq_block(prev_head, prev_m), dq, red_v4);
            }
        } else {
            // One loop of each kind, so the step is inlined twice (its mask is a template argument).
            for (int head = head_begin; head < head_begin + p.heads_per_kv; ++head) {
#pragma unroll
                for (int phase = 0; phase < 2; ++phase) {
                    if ((phase == 0) != descending) {
                        for (int t = 0; t < masked_end - m_begin; ++t)
                            step(head, descending ? masked_end - 1 - t : m_begin + t, std::true_type{});
                    } else {
                        for (int t = 0; t < m_end - masked_end; ++t)
                            step(head, descending ? m_end - 1 - t : masked_end + t, std::false_type{});
                    }
                }
            }
        }
        if constexpr (Cfg::kDelayDq) {  // the last step's dQ
            ds_ready(1 - cw, previous_phase()).sync();
            issue_dq(kLate ? previous_phase() : previous.ds_buf);
            ptx::wgmma_wait_group<0>();
            finish_dq(previous.head, previous.m);
        }

        // ============================== epilogue ==============================
        // dK (times the scale) and dV -> 16-bit -> the K (and V) tiles -> TMA store. K is free
        // once both warpgroups' last dQ GEMMs (which read all of K) are done.
        consumers.sync();
        auto& dv_tile = [&]() -> KvTile& {
            if constexpr (Cfg::kNeedV) return smem.v;
            else return smem.k;
        }();
        if constexpr (Cfg::kAccDk) {
#pragma unroll
            for (int i = 0; i < kHeadDim / 2; ++i) dk[i] *= p.scale;
            store_fragment<Elem, KvTile, kHeadDim>(smem.k, dk, first_key_in_block);
        }
        if constexpr (Cfg::kAccDv) store_fragment<Elem, KvTile, kHeadDim>(dv_tile, dv, first_key_in_block);
        store_fence();
        own_warpgroup.sync();
        if (tid == 0) {
            const int row0 = n0 + first_key_in_block;
            if constexpr (Cfg::kAccDk) smem.k.store_rows(&maps.dk, first_key_in_block, row0, kv_head, batch);
            if constexpr (Cfg::kAccDv) dv_tile.store_rows(&maps.dv, first_key_in_block, row0, kv_head, batch);
            ptx::bulk_commit_group();
            ptx::bulk_wait_group_read<0>();  // shared memory must outlive the stores' reads
        }
    }
}

// ---------------------------------------------------------------------------------------
// Pre- and post-processing
// ---------------------------------------------------------------------------------------
constexpr int kAuxThreads = 256;
constexpr int kAuxThreadsPerRow = 8;  // preprocess: 8 threads share a row's dot product
constexpr int kVecElems = 8;          // 16-byte vectors of 16-bit elements

struct AuxParams {
    const void* o;
    const void* dout;
    const float* lse;  // the forward's, natural log, [batch, heads_q, seqlen_q]
    void* dq;
    int64_t o_batch_stride, o_seq_stride, o_head_stride;
    int64_t do_batch_stride, do_seq_stride, do_head_stride;
    int64_t dq_batch_stride, dq_seq_stride, dq_head_stride;
    float* lse_log2;
    float* dpsum;
    float* dq_accum;
    int32_t* semaphores;
    int seqlen_q, heads_q, num_m_blocks;
    int64_t seqlen_q_padded;
    float scale;
    Mask mask;    // the main kernel's (which KV blocks reach a query block)
    int block_n;  // the main kernel's keys per CTA (its dQ-accumulating kernel's)
    bool deterministic;
};

// Query block (m, head, batch) of a 1-D grid, the query block fastest; `reversed`: block i of the
// grid takes what block gridDim.x - 1 - i would (the last (batch, head) first).
struct AuxBlock {
    int m, head, batch;
    int64_t rows;  // first workspace row of (batch, head)
};
__device__ __forceinline__ AuxBlock aux_block(const AuxParams& p, bool reversed) {
    const unsigned i = reversed ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    AuxBlock b;
    b.m = i % p.num_m_blocks;
    b.head = (i / p.num_m_blocks) % p.heads_q;
    b.batch = i / p.num_m_blocks / p.heads_q;
    b.rows = (static_cast<int64_t>(b.batch) * p.heads_q + b.head) * p.seqlen_q_padded;
    return b;
}

template <int kHeadDim, class Elem>
__global__ void __launch_bounds__(kAuxThreads) bwd_preprocess(const AuxParams p) {
    constexpr bool kIsBf16 = std::is_same_v<Elem, Bf16>;
    constexpr int kRowsPerPass = kAuxThreads / kAuxThreadsPerRow;
    const AuxBlock blk = aux_block(p, (HATTN_BWD_AUX_REVERSE & kAuxReversePreprocess) != 0);
    const int t = threadIdx.x;
    const auto* o = static_cast<const uint8_t*>(p.o);
    const auto* dout = static_cast<const uint8_t*>(p.dout);
    for (int r = t / kAuxThreadsPerRow; r < kQueryBlockRows; r += kRowsPerPass) {
        const int row = blk.m * kQueryBlockRows + r;
        float sum = 0.f;
        if (row < p.seqlen_q) {
            const int64_t o_off = (blk.batch * p.o_batch_stride + row * p.o_seq_stride + blk.head * p.o_head_stride) * Elem::kBytes;
            const int64_t d_off =
                (blk.batch * p.do_batch_stride + row * p.do_seq_stride + blk.head * p.do_head_stride) * Elem::kBytes;
            for (int c = (t % kAuxThreadsPerRow) * kVecElems; c < kHeadDim; c += kAuxThreadsPerRow * kVecElems) {
                const uint4 ov = *reinterpret_cast<const uint4*>(o + o_off + c * Elem::kBytes);
                const uint4 dv = *reinterpret_cast<const uint4*>(dout + d_off + c * Elem::kBytes);
                const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, dw[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    float o0, o1, d0, d1;
                    ptx::unpack_x2_f32<kIsBf16>(ow[j], o0, o1);
                    ptx::unpack_x2_f32<kIsBf16>(dw[j], d0, d1);
                    sum = fmaf(o0, d0, fmaf(o1, d1, sum));
                }
            }
        }
#pragma unroll
        for (int off = 1; off < kAuxThreadsPerRow; off *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        if (t % kAuxThreadsPerRow == 0) {
            const int64_t idx = blk.rows + row;
            float lse = INFINITY;  // padding, or a row that sees no key (LSE = -inf): P = 0
            if (row < p.seqlen_q) {
                const float l = p.lse[(static_cast<int64_t>(blk.batch) * p.heads_q + blk.head) * p.seqlen_q + row];
                if (l != -INFINITY) lse = l * kLog2e;
            }
            p.lse_log2[idx] = lse;
            p.dpsum[idx] = sum;
        }
    }
    // kDetFirstStore: in the deterministic mode KV block 0 stores every accumulator block some KV
    // block reaches (it reaches each of them first); only the others need zeros.
    const bool stored_by_block0 = kDetFirstStore && p.deterministic &&
                                  p.mask.n_blocks(blk.m * kQueryBlockRows, kQueryBlockRows, p.block_n) > 0;
    float4* acc = reinterpret_cast<float4*>(p.dq_accum + (blk.rows + blk.m * kQueryBlockRows) * kHeadDim);
    if (!stored_by_block0)
        for (int i = t; i < kQueryBlockRows * kHeadDim / 4; i += kAuxThreads) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (t == 0) p.semaphores[blk.rows / kQueryBlockRows + blk.m] = 0;
}

// dQ = scale * accumulator. A shared tile turns each 64-column slice of a block from fragment order
// (dq_accum_index) into rows, so both the reads and the writes are coalesced.
template <int kHeadDim, class Elem>
__global__ void __launch_bounds__(kAuxThreads) bwd_dq_convert(const AuxParams p) {
    constexpr bool kIsBf16 = std::is_same_v<Elem, Bf16>;
    constexpr int kCols = kMmaM;  // head_dim columns per slice
    constexpr int kPad = 1;       // a padded row: column writes hit 32 different banks
    constexpr int kColsPerThread = kCols * kQueryBlockRows / kAuxThreads;
    constexpr int kSliceFloats = kCols * kQueryBlockRows;
    __shared__ float tile[kQueryBlockRows][kCols + kPad];
    const AuxBlock blk = aux_block(p, (HATTN_BWD_AUX_REVERSE & kAuxReverseConvert) != 0);
    const int t = threadIdx.x;
    const float* acc = p.dq_accum + (blk.rows + blk.m * kQueryBlockRows) * kHeadDim;
    const int r = t / (kAuxThreads / kQueryBlockRows);
    const int c_first = (t % (kAuxThreads / kQueryBlockRows)) * kColsPerThread;
    const int row = blk.m * kQueryBlockRows + r;
    auto* dq = static_cast<uint8_t*>(p.dq) +
               (blk.batch * p.dq_batch_stride + static_cast<int64_t>(row) * p.dq_seq_stride + blk.head * p.dq_head_stride) * Elem::kBytes;
    for (int c0 = 0; c0 < kHeadDim; c0 += kCols) {
        const float2* slice = reinterpret_cast<const float2*>(acc + (c0 / kCols) * kSliceFloats);
        for (int i = t; i < kSliceFloats / 2; i += kAuxThreads) {
            const DqPair at = dq_accum_pair(i);
            const int owner = at.tid, pair = at.pair;
            const float2 x = slice[i];
            const int col = acc_row_in_warpgroup(owner) + 8 * (pair % 2);
            const int q = 8 * (pair / 2) + 2 * (owner % 4);
            tile[q][col] = x.x;
            tile[q + 1][col] = x.y;
        }
        __syncthreads();
        if (row < p.seqlen_q) {
#pragma unroll
            for (int v = 0; v < kColsPerThread / kVecElems; ++v) {
                const int c = c_first + v * kVecElems;
                uint32_t w[4];
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    w[j] = ptx::pack_f32x2<kIsBf16>(p.scale * tile[r][c + 2 * j], p.scale * tile[r][c + 2 * j + 1]);
                *reinterpret_cast<uint4*>(dq + (c0 + c) * Elem::kBytes) = make_uint4(w[0], w[1], w[2], w[3]);
            }
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------------
// Launcher
// ---------------------------------------------------------------------------------------
// The checks a vendoring user gets without the C API in front: what would otherwise crash the
// host or launch nonsense (the C API checks much more, naming each field).
inline bool check_args(BwdArgs& a, std::string* error) {
    auto fail = [&](const char* what) {
        if (error) *error = what;
        return false;
    };
    if (!a.q || !a.k || !a.v || !a.o || !a.dout || !a.lse || !a.dq || !a.dk || !a.dv)
        return fail("q, k, v, o, dout, lse, dq, dk and dv must be non-NULL");
    if (const char* what = fwd::check_shape_dtype_scale(a)) return fail(what);
    const WorkspaceLayout w = workspace_layout(a.batch, a.heads_q, a.seqlen_q, a.head_dim);
    if (w.bytes == 0) return fail("the workspace size overflows");
    if (!a.workspace || reinterpret_cast<uintptr_t>(a.workspace) % kWorkspaceAlign != 0 || a.workspace_size < w.bytes)
        return fail("workspace must be non-NULL, 256-byte aligned and at least workspace_layout(...).bytes long");
    // Base alignment, strides and sizes of the tensors are checked by make_bshd_map below.
    return true;
}

template <class Cfg>
cudaError_t launch_bwd_kernel(const BwdArgs& a, const KernelParams& p, cudaStream_t stream, std::string* error) {
    using Elem = typename Cfg::Elem;
    constexpr uint32_t kBoxCols = Cfg::QTile::kAtomCols;
    constexpr int d = Cfg::kHeadDim;
    const BshdTensor q{a.q, d, a.seqlen_q, a.heads_q, a.batch, a.q_seq_stride, a.q_head_stride, a.q_batch_stride};
    const BshdTensor k{a.k, d, a.seqlen_k, a.heads_kv, a.batch, a.k_seq_stride, a.k_head_stride, a.k_batch_stride};
    const BshdTensor v{a.v, d, a.seqlen_k, a.heads_kv, a.batch, a.v_seq_stride, a.v_head_stride, a.v_batch_stride};
    const BshdTensor dout{a.dout, d, a.seqlen_q, a.heads_q, a.batch, a.do_seq_stride, a.do_head_stride, a.do_batch_stride};
    const BshdTensor dk{a.dk, d, a.seqlen_k, a.heads_kv, a.batch, a.dk_seq_stride, a.dk_head_stride, a.dk_batch_stride};
    const BshdTensor dv{a.dv, d, a.seqlen_k, a.heads_kv, a.batch, a.dv_seq_stride, a.dv_head_stride, a.dv_batch_stride};
    TensorMaps maps;
    if (!make_bshd_map(&maps.q, q, Elem::kTmaType, kBoxCols, Cfg::kBlockM, error) ||
        !make_bshd_map(&maps.k, k, Elem::kTmaType, kBoxCols, Cfg::kBlockN, error) ||
        !make_bshd_map(&maps.v, v, Elem::kTmaType, kBoxCols, Cfg::kBlockN, error) ||
        !make_bshd_map(&maps.dout, dout, Elem::kTmaType, kBoxCols, Cfg::kBlockM, error) ||
        !make_bshd_map(&maps.dk, dk, Elem::kTmaType, kBoxCols, kMmaM, error) ||
        !make_bshd_map(&maps.dv, dv, Elem::kTmaType, kBoxCols, kMmaM, error)) {
        return cudaErrorInvalidValue;
    }
    constexpr int kSmem = shared_bytes<Cfg>();
    static_assert(kSmem <= kMaxSharedBytes, "tile does not fit in shared memory");
    const int64_t pairs = static_cast<int64_t>(p.heads_kv) * a.batch;
    const int64_t ctas = p.num_n_blocks * pairs;
    // The grid order (kLptGrid) and the walk (kWalkDown) are template arguments: an index or a
    // flag at run time costs registers the d128 / d256 kernels do not have (they spilled).
    // The longest-first grid (kLptGrid) for causal launches: the largest group size up to
    // lpt_group(kHeadDim) that divides the pairs, within the grid's y and z limits.
    bool lpt_grid = false;
    dim3 grid(static_cast<unsigned>(ctas));
    constexpr int64_t kMaxGridYz = 65535;
    const int64_t pair_rows = static_cast<int64_t>(p.heads_per_kv) * a.seqlen_q;  // Q / dO rows a pair reads
    const int64_t rows_group = std::max<int64_t>(kLptMinGroup, std::min(pairs, kLptQueryRows / pair_rows));
    constexpr int kLptGroup = lpt_group(Cfg::kHeadDim);
    const int max_group = kLptGroup != kLptByLength ? kLptGroup : static_cast<int>(rows_group);
    for (int group = max_group; group > 1 && a.causal && p.num_n_blocks <= kMaxGridYz; --group) {
        if (pairs % group == 0 && pairs / group <= kMaxGridYz) {
            lpt_grid = true;
            grid = dim3(group, p.num_n_blocks, static_cast<unsigned>(pairs / group));
            break;
        }
    }
    // The dV kernel before the d256 dK/dQ kernel lets it start as its CTAs retire (scheduling, above).
    cudaLaunchAttribute pdl[1] = {programmatic_launch_attribute()};
    constexpr unsigned kPdlAttributes = Cfg::kHeadDim == 256 && Cfg::kGrads == Grads::kDkDq ? 1u : 0u;
    // One of four instantiations (grid order x determinism), each with its own launch set-up.
    using Kernel = void (*)(TensorMaps, KernelParams);
    auto launch = [&](auto kernel) {
        return launch_with_dynamic_smem<decltype(kernel)::value>(kSmem, [&] {
            return launch_kernel_ex(decltype(kernel)::value, grid, dim3(Cfg::kThreads), kSmem, stream, pdl, kPdlAttributes,
                                    maps, p);
        });
    };
    const cudaError_t rc =
        lpt_grid ? (p.deterministic ? launch(std::integral_constant<Kernel, bwd_kernel<Cfg, true, true>>{})
                                    : launch(std::integral_constant<Kernel, bwd_kernel<Cfg, true>>{}))
                 : (p.deterministic ? launch(std::integral_constant<Kernel, bwd_kernel<Cfg, false, true>>{})
                                    : launch(std::integral_constant<Kernel, bwd_kernel<Cfg>>{}));
    if (rc != cudaSuccess && error) *error = std::string("backward kernel launch: ") + cudaGetErrorString(rc);
    return rc;
}

template <int kHeadDim, class Elem>
cudaError_t launch_bwd_typed(const BwdArgs& a, cudaStream_t stream, std::string* error) {
    using Cfg = Config<kHeadDim, Elem>;  // (every config of a head dim has its kBlockN)
    const WorkspaceLayout w = workspace_layout(a.batch, a.heads_q, a.seqlen_q, a.head_dim);
    auto* ws = static_cast<uint8_t*>(a.workspace);
    AuxParams aux;
    aux.o = a.o;
    aux.dout = a.dout;
    aux.lse = a.lse;
    aux.dq = a.dq;
    aux.o_batch_stride = a.o_batch_stride, aux.o_seq_stride = a.o_seq_stride, aux.o_head_stride = a.o_head_stride;
    aux.do_batch_stride = a.do_batch_stride, aux.do_seq_stride = a.do_seq_stride, aux.do_head_stride = a.do_head_stride;
    aux.dq_batch_stride = a.dq_batch_stride, aux.dq_seq_stride = a.dq_seq_stride, aux.dq_head_stride = a.dq_head_stride;
    aux.lse_log2 = reinterpret_cast<float*>(ws + w.lse_offset);
    aux.dpsum = reinterpret_cast<float*>(ws + w.dpsum_offset);
    aux.dq_accum = reinterpret_cast<float*>(ws + w.dq_accum_offset);
    aux.semaphores = reinterpret_cast<int32_t*>(ws + w.semaphore_offset);
    aux.seqlen_q = a.seqlen_q;
    aux.heads_q = a.heads_q;
    aux.num_m_blocks = static_cast<int>(w.seqlen_q_padded / kQueryBlockRows);
    aux.seqlen_q_padded = w.seqlen_q_padded;
    aux.scale = a.softmax_scale;
    aux.mask = Mask{a.seqlen_q, a.seqlen_k, a.causal};
    aux.block_n = Cfg::kBlockN;
    aux.deterministic = a.deterministic;

    KernelParams p;
    p.lse_log2 = aux.lse_log2;
    p.dpsum = aux.dpsum;
    p.dq_accum = aux.dq_accum;
    p.semaphores = aux.semaphores;
    p.mask = aux.mask;
    p.heads_q = a.heads_q;
    p.heads_kv = a.heads_kv;
    p.heads_per_kv = a.heads_q / a.heads_kv;
    p.num_m_blocks = aux.num_m_blocks;
    p.seqlen_q_padded = w.seqlen_q_padded;
    p.scale = a.softmax_scale;
    p.scale_log2 = a.softmax_scale * kLog2e;
    p.deterministic = a.deterministic;
    p.num_n_blocks = (a.seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN;

    const int64_t aux_blocks = static_cast<int64_t>(aux.num_m_blocks) * a.heads_q * a.batch;
    const int64_t main_ctas = static_cast<int64_t>(p.num_n_blocks) * a.heads_kv * a.batch;
    if (aux_blocks > INT32_MAX || main_ctas > INT32_MAX) {
        if (error) *error = "batch * heads * (blocks of 64 queries or 128 keys) exceeds 2^31 - 1";
        return cudaErrorInvalidValue;
    }

    bwd_preprocess<kHeadDim, Elem><<<static_cast<unsigned>(aux_blocks), kAuxThreads, 0, stream>>>(aux);
    cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess) {
        if (error) *error = std::string("backward preprocess launch: ") + cudaGetErrorString(rc);
        return rc;
    }
    if constexpr (kHeadDim == 256) {
        // dK + dV would not fit the registers together (NOTES): two passes over the same blocks.
        rc = launch_bwd_kernel<Config<kHeadDim, Elem, Grads::kDv, 2, 1>>(a, p, stream, error);
        if (rc == cudaSuccess) rc = launch_bwd_kernel<Config<kHeadDim, Elem, Grads::kDkDq, 1, kD256DsBuffers>>(a, p, stream, error);
    } else {
        rc = launch_bwd_kernel<Cfg>(a, p, stream, error);
    }
    if (rc != cudaSuccess) return rc;
    bwd_dq_convert<kHeadDim, Elem><<<static_cast<unsigned>(aux_blocks), kAuxThreads, 0, stream>>>(aux);
    rc = cudaGetLastError();
    if (rc != cudaSuccess && error) *error = std::string("backward dQ conversion launch: ") + cudaGetErrorString(rc);
    return rc;
}

// Entry point for one head dim.
template <int kHeadDim>
cudaError_t launch_bwd_head_dim(const BwdArgs& args, cudaStream_t stream, std::string* error) {
    BwdArgs a = args;
    if (a.head_dim != kHeadDim) {
        if (error) *error = "launch_bwd_head_dim: head_dim mismatch";
        return cudaErrorInvalidValue;
    }
    if (!check_args(a, error)) return cudaErrorInvalidValue;
    if (a.dtype == Dtype::kBf16) return launch_bwd_typed<kHeadDim, Bf16>(a, stream, error);
    return launch_bwd_typed<kHeadDim, Fp16>(a, stream, error);
}

}  // namespace hattn::bwd
