// hattn/src/kernels/sm90/schedule_workspace.h -- the layout of the forwards' optional schedule
// workspace (hattn_fwd_params.workspace, hattn_fwd_fp8_params.schedule_workspace). Plain C++: the
// C API's host files size and check it, the kernels address it.
//
//   [0, kSplitFlagsOffset)                    the dynamic walk's counters (TileScheduler)
//   [kSplitFlagsOffset, kSplitPartialsOffset) the split tail's flags: one per (run, consumer)
//   [kSplitPartialsOffset, kScheduleWorkspaceBytes)  the split tail's partial tiles, one per run
//   (a CTA's run: TileScheduler::tail_run)
//
// The first kScheduleStateBytes must be zero before the first call; every call leaves them zero
// (the last CTA zeroes the counters, a tile's merger its partners' flags). The partial tiles are
// scratch: written and read within one call.
#pragma once

#include <cstddef>

namespace hattn::sm90 {

// Grids of more CTAs than this do not split their last pass (GH100's full die has 144 SMs; the
// H100 SXM and H200 have 132).
constexpr int kSplitMaxCtas = 144;
// Flags per run (per CTA): one per consumer warpgroup (at most 3), rounded up.
constexpr int kSplitFlagsPerCta = 4;
// A partial tile's O in fp32 for the largest forward tile: 128 rows x head_dim 256 (d64's 192 x
// 64 is smaller), and its LSE as the consumer threads hold it (two rows per thread, 128 threads
// per warpgroup, kSplitFlagsPerCta warpgroups).
constexpr size_t kSplitMaxTileFloats = 128 * 256;
constexpr size_t kSplitLseFloats = kSplitFlagsPerCta * 2 * 128;
constexpr size_t kSplitSlotBytes = (kSplitMaxTileFloats + kSplitLseFloats) * sizeof(float);

constexpr size_t kSplitFlagsOffset = 256;
constexpr size_t kSplitPartialsOffset = 4096;
constexpr size_t kScheduleStateBytes = kSplitPartialsOffset;
constexpr size_t kScheduleWorkspaceBytes = kSplitPartialsOffset + kSplitMaxCtas * kSplitSlotBytes;

static_assert(kSplitFlagsOffset + kSplitMaxCtas * kSplitFlagsPerCta * sizeof(int) <= kSplitPartialsOffset,
              "the flags fit between the counters and the partial tiles");
static_assert(kSplitSlotBytes % 16 == 0 && kSplitPartialsOffset % 16 == 0, "partial tiles are 16-byte aligned");

}  // namespace hattn::sm90
