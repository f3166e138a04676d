// hattn/test/ptx_bulk_test.cu -- bulk copies without a tensor map (ptx/tma.cuh): cp.async.bulk
// global -> shared completing on an mbarrier, and cp.reduce.async.bulk .add.f32 shared -> global
// completing in a bulk group.
//
//   * bulk_load in a ring of two slots, the way the backward kernel (src/kernels/bwd.cuh) brings
//     its LSE and D rows in: one producer thread waits on the slot's "empty" barrier, arms "full"
//     with 256 bytes (arrive.expect_tx) and issues the copy of one 64-float row; four consumer warps
//     wait on "full", read the row with ld_shared_v2_f32 at the columns a wgmma accumulator
//     fragment holds (8 j + 2 (lane % 4) + {0, 1}), add it up, and lane 0 of each warp arrives on
//     "empty". 1024 rows, so each barrier flips phase 512 times; every value read is compared with
//     global memory (a stale or early row shows up as a mismatch) and the per-thread sums with the
//     host's (the values are small integers: exact in any order).
//   * bulk_reduce_add_f32: several CTAs stage known floats in shared memory (st_shared_v4_f32,
//     fence_proxy_async_shared_cta, barrier), one thread reduce-adds two 16-KB slices into the same
//     global buffer, waits for the reads (bulk_wait_group_read<0>) before the staging is refilled
//     for the next round, and bulk_wait_group<0> at the end; the sums are exact and the floats
//     either side of the buffer keep their values.
//
// NOTE: the ring doubles as the smallest reproducer of a compute-sanitizer racecheck report on
//       the backward kernel: a hazard between the bulk copy's write into an LSE/D slot and the
//       consumers' ld.shared of it. LoadRingOfTwo is the pattern with the consumers' reads ordered
//       before the release (__syncwarp, then lane 0 arrives on "empty"). LoadRingOfTwoLaneZero-
//       ReleasesAlone leaves the __syncwarp out: lanes 1-31's reads are then ordered before lane
//       0's arrive by nothing in the memory model, as in bwd.cuh where only .sync.aligned wgmma
//       instructions (no memory ordering) lie between a warp's load_columns() and its lane 0's
//       release_stage() (head_dim 128, which delays dQ, and head_dim 256's dV kernel; at 64 and
//       in 256's dK/dQ kernel a named barrier does). Two more forms add a proxy fence, since the
//       reads are generic-proxy accesses and the next copy into the slot is an async-proxy write:
//       LoadRingOfTwoReaderProxyFence (every reading lane fences before the __syncwarp and the
//       release) and LoadRingOfTwoProducerProxyFence (the producer fences once after it acquires the
//       empty slot, before the copy), LoadRingOfTwoEveryLaneArrives (every reading thread
//       arrives on "empty", initialized to the consumer thread count), and LoadWithoutSlotReuse
//       (64 slots filled once each: no read is ever followed by a copy into its slot).
//       On the H200 (compute-sanitizer of CUDA 13.0, bench/RESULTS.md run 25) racecheck is clean
//       on the last two and reports the refill in the four others: it does not carry lanes 1-31's
//       reads through __syncwarp into lane 0's arrive, and a proxy fence does not change that.
//       So bwd.cuh releases with every thread's arrive. scripts/sanitize_ptx_tests.sh requires the
//       two accepted forms to be clean and runs the four others on lines of their own.
#include "gpu_test_util.h"
#include "ptx_test_util.cuh"

#include "ptx/hattn_ptx.cuh"

#include <climits>
#include <cstdint>
#include <random>
#include <vector>

namespace {

using hattn::test::DeviceBuffer;
using hattn::test::kWarpSize;

// ---- bulk_load ring ---------------------------------------------------------------------------

constexpr int kRowFloats = 64;  // one query block of the backward: 64 rows of LSE (or D)
constexpr uint32_t kRowBytes = kRowFloats * sizeof(float);
constexpr int kStages = 2;
constexpr int kRows = 1024;  // kRows / kStages = 512 phase flips per barrier
constexpr int kNoReuseRows = 64;  // LoadWithoutSlotReuse: 64 slots of 256 bytes, each filled once
constexpr int kConsumerWarps = 4;
constexpr int kConsumerThreads = kConsumerWarps * kWarpSize;
constexpr int kRingThreads = kWarpSize + kConsumerThreads;  // warp 0 produces
constexpr int kPairsPerLane = kRowFloats / 8;              // float2 reads per lane and row
constexpr int kSumsPerThread = 2 * kPairsPerLane;
constexpr int kRowValueRange = 129;  // row values: integers in [-64, 64]
static_assert(kRowBytes % 16 == 0, "cp.async.bulk moves multiples of 16 bytes");

struct RingResult {
    unsigned int mismatches;  // values read that differ from the row in global memory
    int first_bad_row;        // INT_MAX if none
};

// Column of the fragment pair j of `lane` (bwd.cuh: acc_col(4 j, lane)).
__host__ __device__ constexpr int pair_column(int j, int lane) { return 8 * j + 2 * (lane % 4); }

// How a consumer warp hands its slot back (see the NOTE at the top).
enum class Release {
    kWarpSync,           // __syncwarp, then lane 0 arrives on "empty"
    kLaneZeroAlone,      // lane 0 arrives; lanes 1-31's reads are ordered before it by nothing
    kReaderProxyFence,   // each lane fence.proxy.async, __syncwarp, lane 0 arrives
    kProducerProxyFence, // as kWarpSync; the producer fences after acquiring the slot
    kEveryLaneArrives,   // every reading lane arrives on "empty" (initialized to the thread count)
};

// kSlots slots for kRingRows rows; kSlots == kRingRows (LoadWithoutSlotReuse) fills every slot
// once, so no copy ever overwrites a slot that was read: what racecheck reports there is about the
// copy -> read order, not the read -> next copy order.
template <Release kRelease, int kSlots = kStages, int kRingRows = kRows>
__global__ void __launch_bounds__(kRingThreads) row_ring_kernel(const float* rows, float* sums, RingResult* result) {
    __shared__ alignas(16) float slot[kSlots][kRowFloats];
    __shared__ uint64_t full[kSlots];
    __shared__ uint64_t empty[kSlots];

    if (threadIdx.x == 0) {
        for (int s = 0; s < kSlots; ++s) {
            hattn::ptx::mbarrier_init(&full[s], 1);                // the producer's arrive.expect_tx
            // lane 0 of each consumer warp, or every consumer thread
            hattn::ptx::mbarrier_init(&empty[s], kRelease == Release::kEveryLaneArrives ? kConsumerThreads : kConsumerWarps);
        }
        hattn::ptx::fence_mbarrier_init();  // visible to the other threads and to the copy engine
    }
    __syncthreads();

    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    int stage = 0;
    uint32_t phase = 0;
    if (warp == 0) {
        // ---- producer: one elected thread issues every copy -------------------------------------
        if (hattn::ptx::elect_one_sync()) {
            for (int i = 0; i < kRingRows; ++i) {
                hattn::ptx::mbarrier_wait(&empty[stage], phase ^ 1u);  // a fresh slot counts as empty
                if constexpr (kRelease == Release::kProducerProxyFence) hattn::ptx::fence_proxy_async_shared_cta();
                hattn::ptx::mbarrier_arrive_expect_tx(&full[stage], kRowBytes);
                hattn::ptx::bulk_load(slot[stage], rows + static_cast<size_t>(i) * kRowFloats, kRowBytes, &full[stage]);
                if (++stage == kSlots) {
                    stage = 0;
                    phase ^= 1u;
                }
            }
        }
    } else {
        // ---- consumers: read the row at the fragment's columns, add it up, release the slot -----
        float acc[kSumsPerThread] = {};
        unsigned int mismatches = 0;
        int first_bad = INT_MAX;
        for (int i = 0; i < kRingRows; ++i) {
            hattn::ptx::mbarrier_wait(&full[stage], phase);
            const float* expect = rows + static_cast<size_t>(i) * kRowFloats;
            unsigned int row_bad = 0;
#pragma unroll
            for (int j = 0; j < kPairsPerLane; ++j) {
                const int col = pair_column(j, lane);
                const float2 v = hattn::ptx::ld_shared_v2_f32(&slot[stage][col]);
                acc[2 * j] += v.x;
                acc[2 * j + 1] += v.y;
                row_bad += (v.x != expect[col]) + (v.y != expect[col + 1]);
            }
            if (row_bad != 0) {
                mismatches += row_bad;
                first_bad = min(first_bad, i);
            }
            if constexpr (kRelease == Release::kReaderProxyFence) hattn::ptx::fence_proxy_async_shared_cta();
            if constexpr (kRelease != Release::kLaneZeroAlone) __syncwarp();
            if (lane == 0 || kRelease == Release::kEveryLaneArrives) hattn::ptx::mbarrier_arrive(&empty[stage]);
            if (++stage == kSlots) {
                stage = 0;
                phase ^= 1u;
            }
        }
        const int c = threadIdx.x - kWarpSize;
#pragma unroll
        for (int k = 0; k < kSumsPerThread; ++k) sums[c * kSumsPerThread + k] = acc[k];
        if (mismatches != 0) {
            atomicAdd(&result->mismatches, mismatches);
            atomicMin(&result->first_bad_row, first_bad);
        }
    }
}

template <Release kRelease, int kSlots = kStages, int kRingRows = kRows>
void check_row_ring(uint64_t seed) {
    std::vector<float> rows(static_cast<size_t>(kRingRows) * kRowFloats);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    for (auto& x : rows) x = static_cast<float>(static_cast<int>(rng() % kRowValueRange) - kRowValueRange / 2);
    // Consumer thread c (lane c % 32) sums column pair_column(j, lane) + h into k = 2 j + h.
    std::vector<float> want(static_cast<size_t>(kConsumerThreads) * kSumsPerThread, 0.0f);
    for (int c = 0; c < kConsumerThreads; ++c) {
        for (int j = 0; j < kPairsPerLane; ++j) {
            for (int h = 0; h < 2; ++h) {
                double sum = 0.0;  // |sum| <= 64 * 1024: exact in fp32, whatever the order
                for (int i = 0; i < kRingRows; ++i) {
                    sum += rows[static_cast<size_t>(i) * kRowFloats + pair_column(j, c) + h];
                }
                want[c * kSumsPerThread + 2 * j + h] = static_cast<float>(sum);
            }
        }
    }

    DeviceBuffer<float> d_rows(rows.size()), d_sums(want.size());
    DeviceBuffer<RingResult> d_result(1);
    HATTN_CUDA_CHECK(d_rows.status);
    HATTN_CUDA_CHECK(d_sums.status);
    HATTN_CUDA_CHECK(d_result.status);
    HATTN_CUDA_CHECK(cudaMemcpy(d_rows.ptr, rows.data(), d_rows.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemset(d_sums.ptr, 0xFF, d_sums.bytes()));  // NaN: an unwritten sum fails
    const RingResult init{0, INT_MAX};
    HATTN_CUDA_CHECK(cudaMemcpy(d_result.ptr, &init, sizeof(init), cudaMemcpyHostToDevice));

    row_ring_kernel<kRelease, kSlots, kRingRows><<<1, kRingThreads>>>(d_rows.ptr, d_sums.ptr, d_result.ptr);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());

    RingResult got_result;
    std::vector<float> got(want.size());
    HATTN_CUDA_CHECK(cudaMemcpy(&got_result, d_result.ptr, sizeof(got_result), cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(cudaMemcpy(got.data(), d_sums.ptr, d_sums.bytes(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(got_result.mismatches, 0u) << "values that differ from their row; first bad row "
                                         << got_result.first_bad_row;
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!(got[i] == want[i]) && ++bad <= 8) {
            ADD_FAILURE() << "consumer thread " << i / kSumsPerThread << " sum " << i % kSumsPerThread << ": got "
                          << got[i] << ", want " << want[i];
        }
    }
    EXPECT_EQ(bad, 0);
}

// ---- bulk_reduce_add_f32 -----------------------------------------------------------------------

constexpr int kReduceBlocks = 8;
constexpr int kReduceThreads = 256;
constexpr int kSliceFloats = 64 * 64;  // 16 KB: one dQ slice of the backward's staging
constexpr uint32_t kSliceBytes = kSliceFloats * sizeof(float);
constexpr int kSlices = 2;  // reduce-added side by side, one commit group per round
constexpr int kRounds = 3;  // the staging is refilled after each round's reads completed
constexpr int kDstFloats = kSlices * kSliceFloats;
constexpr int kGuardFloats = 64;  // before and after the destination; never written
constexpr int kInitRange = 97;
static_assert(kSliceBytes % 16 == 0 && (kGuardFloats * sizeof(float)) % 16 == 0, "16-byte alignment");
static_assert(kSliceFloats % (4 * kReduceThreads) == 0, "every thread stages whole 16-byte vectors");

// Integers in [-8, 8] over 1, 2, 4 or 8: every sum below is a multiple of 1/8 far below 2^21.
__host__ __device__ constexpr float staged_value(int block, int round, int slice, int i) {
    const int v = (block * 131 + round * 31 + slice * 17 + i * 7) % 17 - 8;
    return static_cast<float>(v) / static_cast<float>(1 << (i % 4));
}

// dst: kDstFloats floats, added to by every CTA.
__global__ void __launch_bounds__(kReduceThreads) bulk_reduce_kernel(float* dst) {
    __shared__ alignas(128) float staging[kSlices][kSliceFloats];
    const int b = blockIdx.x;
    for (int r = 0; r < kRounds; ++r) {
        for (int sl = 0; sl < kSlices; ++sl) {
            for (int i = 4 * threadIdx.x; i < kSliceFloats; i += 4 * kReduceThreads) {
                hattn::ptx::st_shared_v4_f32(&staging[sl][i], staged_value(b, r, sl, i), staged_value(b, r, sl, i + 1),
                                             staged_value(b, r, sl, i + 2), staged_value(b, r, sl, i + 3));
            }
        }
        // NOTE: the staging was written through the generic proxy and the bulk reduction reads it
        //       through the async proxy: every writer fences, then the barrier hands it over.
        hattn::ptx::fence_proxy_async_shared_cta();
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int sl = 0; sl < kSlices; ++sl) {
                hattn::ptx::bulk_reduce_add_f32(dst + sl * kSliceFloats, staging[sl], kSliceBytes);
            }
            hattn::ptx::bulk_commit_group();
            hattn::ptx::bulk_wait_group_read<0>();  // the staging may be overwritten from here on
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) hattn::ptx::bulk_wait_group<0>();  // the adds have landed in global memory
}

}  // namespace

TEST(PtxBulk, LoadRingOfTwo) {
    HATTN_REQUIRE_HOPPER();
    check_row_ring<Release::kWarpSync>(0xb10c);
}

TEST(PtxBulk, LoadRingOfTwoLaneZeroReleasesAlone) {
    HATTN_REQUIRE_HOPPER();
    check_row_ring<Release::kLaneZeroAlone>(0xb10d);
}

TEST(PtxBulk, LoadRingOfTwoReaderProxyFence) {
    HATTN_REQUIRE_HOPPER();
    check_row_ring<Release::kReaderProxyFence>(0xb10e);
}

TEST(PtxBulk, LoadRingOfTwoProducerProxyFence) {
    HATTN_REQUIRE_HOPPER();
    check_row_ring<Release::kProducerProxyFence>(0xb10f);
}

TEST(PtxBulk, LoadRingOfTwoEveryLaneArrives) {
    HATTN_REQUIRE_HOPPER();
    check_row_ring<Release::kEveryLaneArrives>(0xb111);
}

TEST(PtxBulk, LoadWithoutSlotReuse) {
    HATTN_REQUIRE_HOPPER();
    check_row_ring<Release::kWarpSync, kNoReuseRows, kNoReuseRows>(0xb110);
}

TEST(PtxBulk, ReduceAddF32FromSeveralCtas) {
    HATTN_REQUIRE_HOPPER();
    const size_t total = kGuardFloats + kDstFloats + kGuardFloats;
    std::vector<float> init(total);
    for (size_t i = 0; i < total; ++i) init[i] = static_cast<float>(static_cast<int>(i % kInitRange) - kInitRange / 2);
    std::vector<double> want(init.begin(), init.end());
    for (int b = 0; b < kReduceBlocks; ++b) {
        for (int r = 0; r < kRounds; ++r) {
            for (int sl = 0; sl < kSlices; ++sl) {
                for (int i = 0; i < kSliceFloats; ++i) {
                    want[kGuardFloats + sl * kSliceFloats + i] += staged_value(b, r, sl, i);
                }
            }
        }
    }

    DeviceBuffer<float> d_buf(total);
    HATTN_CUDA_CHECK(d_buf.status);
    HATTN_CUDA_CHECK(cudaMemcpy(d_buf.ptr, init.data(), d_buf.bytes(), cudaMemcpyHostToDevice));
    bulk_reduce_kernel<<<kReduceBlocks, kReduceThreads>>>(d_buf.ptr + kGuardFloats);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> got(total);
    HATTN_CUDA_CHECK(cudaMemcpy(got.data(), d_buf.ptr, d_buf.bytes(), cudaMemcpyDeviceToHost));

    int bad = 0;
    for (size_t i = 0; i < total; ++i) {
        const bool guard = i < kGuardFloats || i >= kGuardFloats + kDstFloats;
        if (!(got[i] == static_cast<float>(want[i])) && ++bad <= 8) {
            ADD_FAILURE() << (guard ? "guard float " : "float ") << i << ": got " << got[i] << ", want " << want[i];
        }
    }
    EXPECT_EQ(bad, 0);
}
