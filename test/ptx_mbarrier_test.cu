// hattn/test/ptx_mbarrier_test.cu -- mbarrier wrappers (ptx/mbarrier.cuh).
//
//   * A producer/consumer ring of kStages stages driven for kIterations tiles, so every stage's
//     full and empty barriers flip phase kIterations / kStages = 64 times. The producer arms the
//     full barrier with transaction bytes and issues two TMA half-tile loads per stage; the
//     consumers verify every element of every tile against global memory and release the stage
//     through its empty barrier. A wrong parity, a lost byte count or an early release shows up
//     as stale or half-written tiles.
//   * mbarrier_try_wait_parity on a fresh barrier (parity 1 = the phase before phase 0, complete;
//     parity 0 = in progress), phase flips, arrival counts > 1, and mbarrier_inval.
#include "gpu_test_util.h"
#include "ptx_test_util.cuh"

#include "kernels/sm90/tensor_map.h"
#include "ptx/hattn_ptx.cuh"

#include <climits>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using hattn::test::DeviceBuffer;

constexpr int kStages = 4;
constexpr int kPhaseFlipsPerStage = 64;
constexpr int kIterations = kStages * kPhaseFlipsPerStage;  // 256 tiles
constexpr uint32_t kElemBytes = 2;                          // uint16 payload
constexpr uint32_t kSwizzleSpan = 128;
constexpr uint32_t kTileCols = kSwizzleSpan / kElemBytes;   // 64
constexpr uint32_t kTileRows = 64;
constexpr uint32_t kHalfRows = kTileRows / 2;               // each stage arrives as two TMA boxes
constexpr uint32_t kTileBytes = kTileRows * kTileCols * kElemBytes;
constexpr uint32_t kHalfBytes = kTileBytes / 2;
constexpr int kConsumerWarps = 4;
constexpr int kConsumerThreads = kConsumerWarps * hattn::test::kWarpSize;
constexpr int kRingThreads = kConsumerThreads + hattn::test::kWarpSize;  // + one producer warp

struct RingResult {
    unsigned long long checked;  // elements compared by the consumers
    unsigned int mismatches;
    int first_bad_iteration;     // INT_MAX if none
};

// NOTE: phase convention of ptx/mbarrier.cuh: iteration i uses stage i % kStages and waits for
//       parity (i / kStages) & 1 on the full barrier; the producer waits on the empty barrier
//       with the opposite parity, which a fresh barrier reports as complete.
__global__ void __launch_bounds__(kRingThreads) ring_kernel(const __grid_constant__ CUtensorMap tmap,
                                                            const uint16_t* tiles, RingResult* result) {
    extern __shared__ uint8_t smem_raw[];
    uint8_t* stage_tiles = hattn::test::align_smem_for_swizzle(smem_raw);
    __shared__ uint64_t full[kStages];
    __shared__ uint64_t empty[kStages];

    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            hattn::ptx::mbarrier_init(&full[s], 1);                // the producer's arrive_expect_tx
            hattn::ptx::mbarrier_init(&empty[s], kConsumerWarps);  // one arrival per consumer warp
        }
        hattn::ptx::fence_mbarrier_init();  // visible to the other threads and to the TMA unit
    }
    __syncthreads();

    const int warp = threadIdx.x / hattn::test::kWarpSize, lane = threadIdx.x % hattn::test::kWarpSize;
    if (warp == kConsumerWarps) {
        // ---- producer: one elected lane issues every load ------------------------------------
        if (hattn::ptx::elect_one_sync()) {
            hattn::ptx::prefetch_tensormap(&tmap);
            for (int i = 0; i < kIterations; ++i) {
                const int s = i % kStages;
                const uint32_t parity = (i / kStages) & 1;
                hattn::ptx::mbarrier_wait(&empty[s], parity ^ 1);
                if (i % 2 == 0) {
                    hattn::ptx::mbarrier_arrive_expect_tx(&full[s], kTileBytes);
                } else {  // the same byte count split across expect_tx and arrive.expect_tx
                    hattn::ptx::mbarrier_expect_tx(&full[s], kHalfBytes);
                    hattn::ptx::mbarrier_arrive_expect_tx(&full[s], kHalfBytes);
                }
                uint8_t* tile = stage_tiles + s * kTileBytes;
                const int row0 = i * kTileRows;
                hattn::ptx::tma_load_2d(tile, &tmap, &full[s], 0, row0);
                hattn::ptx::tma_load_2d(tile + kHalfBytes, &tmap, &full[s], 0, row0 + kHalfRows);
            }
        }
    } else {
        // ---- consumers: verify each tile, then release its stage ---------------------------------
        unsigned long long checked = 0;
        unsigned int mismatches = 0;
        int first_bad = INT_MAX;
        for (int i = 0; i < kIterations; ++i) {
            const int s = i % kStages;
            const uint32_t parity = (i / kStages) & 1;
            hattn::ptx::mbarrier_wait(&full[s], parity);
            const uint8_t* tile = stage_tiles + s * kTileBytes;
            const uint16_t* expect = tiles + static_cast<size_t>(i) * kTileRows * kTileCols;
            for (uint32_t e = threadIdx.x; e < kTileRows * kTileCols; e += kConsumerThreads) {
                const uint32_t r = e / kTileCols, c = e % kTileCols;
                const uint16_t got = *reinterpret_cast<const uint16_t*>(
                    tile + hattn::test::swizzled_tile_offset(r, c, kTileRows, kElemBytes, kSwizzleSpan));
                ++checked;
                if (got != expect[e]) {
                    ++mismatches;
                    first_bad = min(first_bad, i);
                }
            }
            __syncwarp();  // the whole warp has read the stage before its one release
            if (lane == 0) hattn::ptx::mbarrier_arrive(&empty[s]);
        }
        atomicAdd(&result->checked, checked);
        if (mismatches != 0) {
            atomicAdd(&result->mismatches, mismatches);
            atomicMin(&result->first_bad_iteration, first_bad);
        }
    }
}

// try_wait semantics, recorded by one thread; kParityChecks entries of 0/1 in `out`.
enum ParityCheck : int {
    kFreshParity1Done,      // 1: the phase before phase 0 counts as complete
    kFreshParity0Pending,   // 0: phase 0 is in progress
    kAfterArriveParity0,    // 1: the single expected arrival completed phase 0
    kAfterArriveParity1,    // 0: phase 1 is in progress
    kSecondFlipParity1,     // 1: another arrival completes phase 1
    kSecondFlipParity0,     // 0: phase 2 (parity 0) is in progress
    kCount3After2Arrivals,  // 0: an arrival count of 3 is not met by 2 arrivals
    kCount3After3Arrivals,  // 1: ... and is by 3
    kInvalMemoryReusable,   // 1: after mbarrier.inval the 8 bytes hold ordinary data
    kReinitFreshPending,    // 0: re-initialised after inval, phase 0 is in progress again
    kReinitArriveDone,      // 1: and completes on its arrival
    kParityChecks
};

__global__ void parity_kernel(int* out) {
    __shared__ uint64_t bar;
    __shared__ uint64_t bar3;
    if (threadIdx.x != 0) return;
    using namespace hattn::ptx;
    mbarrier_init(&bar, 1);
    mbarrier_init(&bar3, 3);
    fence_mbarrier_init();
    out[kFreshParity1Done] = mbarrier_try_wait_parity(&bar, 1);
    out[kFreshParity0Pending] = mbarrier_try_wait_parity(&bar, 0);
    mbarrier_arrive(&bar);
    out[kAfterArriveParity0] = mbarrier_try_wait_parity(&bar, 0);
    out[kAfterArriveParity1] = mbarrier_try_wait_parity(&bar, 1);
    mbarrier_arrive(&bar);
    out[kSecondFlipParity1] = mbarrier_try_wait_parity(&bar, 1);
    out[kSecondFlipParity0] = mbarrier_try_wait_parity(&bar, 0);

    mbarrier_arrive(&bar3);
    mbarrier_arrive(&bar3);
    out[kCount3After2Arrivals] = mbarrier_try_wait_parity(&bar3, 0);
    mbarrier_arrive(&bar3);
    out[kCount3After3Arrivals] = mbarrier_try_wait_parity(&bar3, 0);

    mbarrier_inval(&bar);
    constexpr uint64_t kPattern = 0x0123456789ABCDEFull;
    volatile uint64_t* reuse = &bar;
    *reuse = kPattern;
    out[kInvalMemoryReusable] = *reuse == kPattern;

    mbarrier_init(&bar, 1);
    fence_mbarrier_init();
    out[kReinitFreshPending] = mbarrier_try_wait_parity(&bar, 0);
    mbarrier_arrive(&bar);
    out[kReinitArriveDone] = mbarrier_try_wait_parity(&bar, 0);
    mbarrier_inval(&bar);
    mbarrier_inval(&bar3);
}

}  // namespace

TEST(PtxMbarrier, RingOfStagesOverManyPhaseFlips) {
    HATTN_REQUIRE_HOPPER();
    // Tiles of distinct random 16-bit patterns: a stale or misplaced tile cannot match.
    std::vector<uint16_t> host(static_cast<size_t>(kIterations) * kTileRows * kTileCols);
    std::mt19937 rng(0x5eed);
    for (auto& x : host) x = static_cast<uint16_t>(rng());
    DeviceBuffer<uint16_t> tiles(host.size());
    DeviceBuffer<RingResult> result(1);
    HATTN_CUDA_CHECK(tiles.status);
    HATTN_CUDA_CHECK(result.status);
    HATTN_CUDA_CHECK(cudaMemcpy(tiles.ptr, host.data(), tiles.bytes(), cudaMemcpyHostToDevice));
    const RingResult init{0, 0, INT_MAX};
    HATTN_CUDA_CHECK(cudaMemcpy(result.ptr, &init, sizeof(init), cudaMemcpyHostToDevice));

    const hattn::sm90::TensorMapSpec spec =
        hattn::test::swizzled_2d_spec(tiles.ptr, CU_TENSOR_MAP_DATA_TYPE_UINT16, kTileCols,
                                      static_cast<uint64_t>(kIterations) * kTileRows, kTileCols, kHalfRows);
    CUtensorMap map;
    std::string error;
    ASSERT_TRUE(hattn::sm90::encode_tensor_map(&map, spec, &error)) << error;

    const size_t smem = kStages * kTileBytes + hattn::test::kSmemTileAlign;
    HATTN_CUDA_CHECK(cudaFuncSetAttribute(ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    ring_kernel<<<1, kRingThreads, smem>>>(map, tiles.ptr, result.ptr);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());

    RingResult got;
    HATTN_CUDA_CHECK(cudaMemcpy(&got, result.ptr, sizeof(got), cudaMemcpyDeviceToHost));
    EXPECT_EQ(got.checked, host.size()) << "every element of every tile is compared once";
    EXPECT_EQ(got.mismatches, 0u) << "first bad iteration " << got.first_bad_iteration;
}

TEST(PtxMbarrier, TryWaitParityFreshBarrierAndInval) {
    HATTN_REQUIRE_HOPPER();
    DeviceBuffer<int> out(kParityChecks);
    HATTN_CUDA_CHECK(out.status);
    HATTN_CUDA_CHECK(cudaMemset(out.ptr, 0xFF, out.bytes()));  // -1: not written
    parity_kernel<<<1, hattn::test::kWarpSize>>>(out.ptr);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<int> got(kParityChecks);
    HATTN_CUDA_CHECK(cudaMemcpy(got.data(), out.ptr, out.bytes(), cudaMemcpyDeviceToHost));

    const int want[kParityChecks] = {1, 0, 1, 0, 1, 0, 0, 1, 1, 0, 1};
    const char* names[kParityChecks] = {"fresh, parity 1",          "fresh, parity 0",
                                        "after 1 arrival, parity 0", "after 1 arrival, parity 1",
                                        "after 2 arrivals, parity 1", "after 2 arrivals, parity 0",
                                        "count 3, 2 arrivals",       "count 3, 3 arrivals",
                                        "memory reusable after inval", "re-initialised, parity 0",
                                        "re-initialised + arrival, parity 0"};
    for (int i = 0; i < kParityChecks; ++i) EXPECT_EQ(got[i], want[i]) << names[i];
}
