// hattn/src/kernels/sm90/split_tail.cuh -- the split tail's hand-over of partial tiles between CTAs
// (TileScheduler::plan_split_tail cuts the last pass's tiles over their KV blocks).
//
// A writer's consumer warpgroup stores its normalized partial O (fp32) and LSE into its run's slot
// of the schedule workspace (sm90/schedule_workspace.h) and raises a flag; the merger's
// warpgroup of the same rows waits for each partner's flag, reads the partner's slot and combines
// it with its own registers. With O_i normalized and its rows' LSE_i (natural log):
//     LSE = log(sum_i exp(LSE_i)),  O = sum_i exp(LSE_i - LSE) O_i
// -- the softmax over all of the tile's keys, exactly (up to rounding). Each slot is laid out in
// the accumulator's register order, so thread t of a warpgroup reads back what thread t of the
// writer's stored and every access is 8 bytes of consecutive threads (coalesced).
//
// Memory ordering: every writer thread fences its stores (fence.acq_rel.gpu), the warpgroup meets
// at its epilogue barrier, then one thread releases the flag; each merger thread acquires it
// before its loads. The merger zeroes the flags it consumed (after a barrier, so no thread still
// spins on one), leaving the workspace's state words zero for the next call. A merger waits only
// for CTAs launched before it (TileScheduler::tail_run), so the wait cannot hang even where the
// grid's CTAs do not all fit on the GPU at once.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/sm90/forward_roles.cuh"
#include "kernels/sm90/fragment.cuh"
#include "kernels/sm90/schedule_workspace.h"
#include "kernels/sm90/scheduler.cuh"
#include "ptx/atomic.cuh"
#include "ptx/global.cuh"
#include "ptx/mbarrier.cuh"

namespace hattn::sm90 {

// One consumer warpgroup's view of the split tail's slots in `workspace` (a tile of kConsumers
// warpgroups of 64 rows).
template <int kConsumers, int kHeadDim>
struct SplitTail {
    static constexpr int kPairs = kHeadDim / 4;  // float pairs of O per thread (kHeadDim / 2 floats)
    static_assert(kConsumers * kMmaM * kHeadDim <= static_cast<int>(kSplitMaxTileFloats), "a slot holds the tile's O");
    static_assert(kConsumers <= kSplitFlagsPerCta, "a flag per consumer warpgroup");

    uint8_t* workspace;
    int cw, tid;  // the warpgroup (consumer index) and this thread in it

    __device__ __forceinline__ float* o_of(int slot) const {
        return reinterpret_cast<float*>(workspace + kSplitPartialsOffset + static_cast<size_t>(slot) * kSplitSlotBytes);
    }
    // Pair j of this thread's O; its rows' LSE r.
    __device__ __forceinline__ float* o_pair(int slot, int j) const {
        return o_of(slot) + 2 * ((cw * kPairs + j) * kWarpgroupThreads + tid);
    }
    __device__ __forceinline__ float* lse_at(int slot, int r) const {
        return o_of(slot) + kSplitMaxTileFloats + (cw * kAccRowsPerThread + r) * kWarpgroupThreads + tid;
    }
    __device__ __forceinline__ int32_t* flag(int slot) const {
        return reinterpret_cast<int32_t*>(workspace + kSplitFlagsOffset) + slot * kSplitFlagsPerCta + cw;
    }

    // A writer: this warpgroup's normalized O and LSE into `slot`, then the flag (bar: the
    // warpgroup's epilogue barrier).
    __device__ __forceinline__ void write(int slot, const float (&o)[kHeadDim / 2], const float (&lse)[kAccRowsPerThread],
                                          const EpilogueBarrier& bar) const {
        // Plain C++ stores (st.global.v2.f32): the fence's "memory" clobber keeps them above it. An
        // inline-PTX store of O's registers made ptxas serialize the kernel's wgmmas (C7514), as
        // if O were read inside a wgmma stage.
#pragma unroll
        for (int j = 0; j < kPairs; ++j) *reinterpret_cast<float2*>(o_pair(slot, j)) = make_float2(o[2 * j], o[2 * j + 1]);
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) *lse_at(slot, r) = lse[r];
        ptx::fence_acq_rel_gpu();
        bar.sync();
        if (tid == 0) ptx::st_release_gpu_global_s32(flag(slot), 1);
    }

    // The merger: the partials of slots [first_slot, first_slot + count) into this warpgroup's
    // normalized O and LSE, then their flags zeroed.
    __device__ __forceinline__ void merge(int first_slot, int count, float (&o)[kHeadDim / 2], float (&lse)[kAccRowsPerThread],
                                          const EpilogueBarrier& bar) const {
        for (int slot = first_slot; slot < first_slot + count; ++slot) {
            wait_flag(flag(slot));
            float mine[kAccRowsPerThread], theirs[kAccRowsPerThread];
#pragma unroll
            for (int r = 0; r < kAccRowsPerThread; ++r) {
                const float other = ptx::ld_global_f32(lse_at(slot, r));
                const float top = fmaxf(lse[r], other);
                if (top == -INFINITY) {  // neither saw a key (not on a full mask; kept exact anyway)
                    mine[r] = 1.f;
                    theirs[r] = 0.f;
                    continue;
                }
                const float a = expf(lse[r] - top), b = expf(other - top);
                mine[r] = a / (a + b);
                theirs[r] = b / (a + b);
                lse[r] = top + logf(a + b);
            }
#pragma unroll
            for (int j = 0; j < kPairs; ++j) {
                const float2 v = ptx::ld_global_v2_f32(o_pair(slot, j));
                const int r = acc_row_half(2 * j);  // both floats of a pair are in one row
                o[2 * j] = o[2 * j] * mine[r] + v.x * theirs[r];
                o[2 * j + 1] = o[2 * j + 1] * mine[r] + v.y * theirs[r];
            }
        }
        bar.sync();  // every thread is past its waits
        if (tid == 0)
            for (int slot = first_slot; slot < first_slot + count; ++slot) ptx::st_relaxed_gpu_global_s32(flag(slot), 0);
    }

  private:
    // Debug builds trap after the mbarrier waits' timeout instead of hanging.
    static __device__ __forceinline__ void wait_flag(const int32_t* f) {
#ifdef HATTN_DEBUG_HANG
        ptx::spin_until_equal_acquire_gpu(f, 1, ptx::kMbarrierTimeoutNs);
#else
        ptx::spin_until_equal_acquire_gpu(f, 1, 0);
#endif
    }
};

// A forward tile's epilogue, once O is normalized and the LSE known: a split tail's writer hands
// its partial over (true: nothing left to store), its merger takes its partners' in first, a
// whole tile passes through.
template <int kConsumers, int kHeadDim>
__device__ __forceinline__ bool hand_over_split_piece(const Tile& t, int run, uint8_t* workspace,
                                                      const ConsumerRole<kConsumers>& me, float (&o)[kHeadDim / 2],
                                                      float (&lse)[kAccRowsPerThread]) {
    if (t.split == kWholeTile) return false;
    const SplitTail<kConsumers, kHeadDim> split{workspace, me.cw, me.tid};
    // A slot per run (TileScheduler::tail_run): a run writes at most one partial (its first piece),
    // and a merger's partners hold the runs after its own (for_each_tail_piece).
    if (t.split == kSplitWriter) {
        split.write(run, o, lse, me.epilogue);
        return true;
    }
    split.merge(run + 1, t.split, o, lse, me.epilogue);
    return false;
}

}  // namespace hattn::sm90
