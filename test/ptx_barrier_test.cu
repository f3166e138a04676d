// hattn/test/ptx_barrier_test.cu -- named barriers (ptx/barrier.cuh) and warpgroup register
// reallocation (ptx/warp.cuh).
//
//   * Ping-pong: two warpgroups hand a shared-memory buffer back and forth kRounds times with
//     bar.arrive (the writer, no wait) and bar.sync (the reader). Each side checks the other's
//     data and a shared turn counter that must alternate strictly: 0, 1, 2, ... -- the pattern the
//     attention kernel's consumer warpgroups use to take turns on the tensor cores.
//   * Role split: __launch_bounds__(384, 1), warpgroup 0 gives registers back (setmaxnreg.dec 24)
//     and issues TMA loads; warpgroups 1-2 take registers (setmaxnreg.inc 240) and reduce the
//     tiles. Each role is one branch of a single if/else, so ptxas honours setmaxnreg (no C7508
//     warning: the CI build turns it into an error).
#include "gpu_test_util.h"
#include "ptx_test_util.cuh"

#include "kernels/sm90/tensor_map.h"
#include "ptx/hattn_ptx.cuh"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using hattn::test::DeviceBuffer;
using hattn::test::kWarpgroupThreads;
using hattn::test::kWarpSize;

// ---- ping-pong ------------------------------------------------------------------------------

// Named barrier ids; 0 is __syncthreads().
enum NamedBarrier : uint32_t {
    kRequestWritten = 1,  // warpgroup 0 has filled `request`
    kReplyWritten = 2,    // warpgroup 1 has filled `reply` (and finished reading `request`)
};
constexpr uint32_t kPingPongThreads = 2 * kWarpgroupThreads;  // both warpgroups take part in each
constexpr int kRounds = 1000;

struct PingPongResult {
    unsigned int data_errors;
    unsigned int order_errors;
};

__device__ __forceinline__ uint32_t request_value(int round, int t) { return 0x10000000u + round * 1024u + t; }
__device__ __forceinline__ uint32_t reply_value(int round, int t) { return 0x20000000u + round * 1024u + t; }

__global__ void __launch_bounds__(kPingPongThreads) ping_pong_kernel(PingPongResult* result) {
    __shared__ uint32_t request[kWarpgroupThreads];
    __shared__ uint32_t reply[kWarpgroupThreads];
    __shared__ uint32_t turn;  // 2 r while warpgroup 0 owns round r, 2 r + 1 while warpgroup 1 does
    const int wg = threadIdx.x / kWarpgroupThreads, t = threadIdx.x % kWarpgroupThreads;
    if (threadIdx.x == 0) turn = 0;
    __syncthreads();

    unsigned int data_errors = 0, order_errors = 0;
    if (wg == 0) {
        for (int r = 0; r < kRounds; ++r) {
            if (r > 0) {
                hattn::ptx::bar_sync(kReplyWritten, kPingPongThreads);
                data_errors += reply[t] != reply_value(r - 1, t);
            }
            if (t == 0) {
                order_errors += turn != 2u * r;
                turn = 2u * r + 1;
            }
            request[t] = request_value(r, t);
            hattn::ptx::bar_arrive(kRequestWritten, kPingPongThreads);  // publish, do not wait
        }
        hattn::ptx::bar_sync(kReplyWritten, kPingPongThreads);  // consume the last reply
        data_errors += reply[t] != reply_value(kRounds - 1, t);
        if (t == 0) order_errors += turn != 2u * kRounds;
    } else {
        for (int r = 0; r < kRounds; ++r) {
            hattn::ptx::bar_sync(kRequestWritten, kPingPongThreads);
            data_errors += request[t] != request_value(r, t);
            if (t == 0) {
                order_errors += turn != 2u * r + 1;
                turn = 2u * r + 2;
            }
            reply[t] = reply_value(r, t);
            hattn::ptx::bar_arrive(kReplyWritten, kPingPongThreads);
        }
    }
    if (data_errors != 0) atomicAdd(&result->data_errors, data_errors);
    if (order_errors != 0) atomicAdd(&result->order_errors, order_errors);
}

// ---- setmaxnreg role split ------------------------------------------------------------------

constexpr int kRoleThreads = 3 * kWarpgroupThreads;  // producer + 2 consumer warpgroups
constexpr uint32_t kProducerRegs = 24;               // enough to issue TMA and wait on barriers
constexpr uint32_t kConsumerRegs = 240;              // 128*24 + 256*240 = 64512 <= 64K registers
static_assert(kWarpgroupThreads * kProducerRegs + 2 * kWarpgroupThreads * kConsumerRegs <= 65536,
              "the register file holds both roles");
constexpr int kRoleStages = 2;
constexpr int kRoleTiles = 32;
constexpr uint32_t kElemBytes = 2;  // bf16
constexpr uint32_t kSwizzleSpan = 128;
constexpr uint32_t kTileCols = kSwizzleSpan / kElemBytes;  // 64
constexpr uint32_t kTileRows = 64;
constexpr uint32_t kTileBytes = kTileRows * kTileCols * kElemBytes;
constexpr int kConsumerWarps = 2 * kWarpgroupThreads / kWarpSize;  // 8 releases per stage
constexpr int kLanesPerRow = 4;                                     // a row's 64 columns over 4 lanes
constexpr int kColsPerLane = kTileCols / kLanesPerRow;
constexpr int kRowsPerConsumerWg = kTileRows / 2;

// row_sums[tile * 64 + row] = sum of the 64 bf16 values of that row.
__global__ void __launch_bounds__(kRoleThreads, 1) role_split_kernel(const __grid_constant__ CUtensorMap tmap,
                                                                     float* row_sums) {
    extern __shared__ uint8_t smem_raw[];
    uint8_t* tiles = hattn::test::align_smem_for_swizzle(smem_raw);
    __shared__ uint64_t full[kRoleStages];
    __shared__ uint64_t empty[kRoleStages];
    if (threadIdx.x == 0) {
        for (int s = 0; s < kRoleStages; ++s) {
            hattn::ptx::mbarrier_init(&full[s], 1);
            hattn::ptx::mbarrier_init(&empty[s], kConsumerWarps);
        }
        hattn::ptx::fence_mbarrier_init();
    }
    __syncthreads();

    const uint32_t wg = hattn::ptx::warpgroup_index();
    if (wg == 0) {
        // ---- producer warpgroup ----
        hattn::ptx::setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x < kWarpSize && hattn::ptx::elect_one_sync()) {
            hattn::ptx::prefetch_tensormap(&tmap);
            for (int i = 0; i < kRoleTiles; ++i) {
                const int s = i % kRoleStages;
                hattn::ptx::mbarrier_wait(&empty[s], ((i / kRoleStages) & 1) ^ 1);
                hattn::ptx::mbarrier_arrive_expect_tx(&full[s], kTileBytes);
                hattn::ptx::tma_load_2d(tiles + s * kTileBytes, &tmap, &full[s], 0, i * kTileRows);
            }
        }
    } else {
        // ---- consumer warpgroups: warpgroup 1 takes rows 0-31, warpgroup 2 rows 32-63 ----
        hattn::ptx::setmaxnreg_inc<kConsumerRegs>();
        const int t = threadIdx.x % kWarpgroupThreads;
        const int row = (wg - 1) * kRowsPerConsumerWg + t / kLanesPerRow;
        const int col0 = (t % kLanesPerRow) * kColsPerLane;
        for (int i = 0; i < kRoleTiles; ++i) {
            const int s = i % kRoleStages;
            hattn::ptx::mbarrier_wait(&full[s], (i / kRoleStages) & 1);
            const uint8_t* tile = tiles + s * kTileBytes;
            float sum = 0.0f;
#pragma unroll
            for (int c = 0; c < kColsPerLane; ++c) {
                const uint32_t off = hattn::test::swizzled_tile_offset(row, col0 + c, kTileRows, kElemBytes, kSwizzleSpan);
                sum += __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(tile + off));
            }
            __syncwarp();
            if (threadIdx.x % kWarpSize == 0) hattn::ptx::mbarrier_arrive(&empty[s]);
            // the 4 lanes of a row are adjacent: butterfly over lane bits 0-1
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            if (t % kLanesPerRow == 0) row_sums[i * kTileRows + row] = sum;
        }
    }
}

}  // namespace

TEST(PtxBarrier, NamedBarrierPingPongStrictAlternation) {
    HATTN_REQUIRE_HOPPER();
    DeviceBuffer<PingPongResult> result(1);
    HATTN_CUDA_CHECK(result.status);
    HATTN_CUDA_CHECK(cudaMemset(result.ptr, 0, result.bytes()));
    ping_pong_kernel<<<1, kPingPongThreads>>>(result.ptr);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    PingPongResult got;
    HATTN_CUDA_CHECK(cudaMemcpy(&got, result.ptr, sizeof(got), cudaMemcpyDeviceToHost));
    EXPECT_EQ(got.data_errors, 0u) << "a reader saw data from the wrong round";
    EXPECT_EQ(got.order_errors, 0u) << "the warpgroups did not strictly alternate";
}

TEST(PtxBarrier, SetmaxnregProducerConsumerRoleSplit) {
    HATTN_REQUIRE_HOPPER();
    constexpr size_t kRows = static_cast<size_t>(kRoleTiles) * kTileRows;
    std::vector<uint16_t> host(kRows * kTileCols);
    std::vector<double> ref(kRows, 0.0);
    std::mt19937 rng(0x7e9);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (size_t i = 0; i < host.size(); ++i) {
        host[i] = hattn::test::bf16_bits_from_float(value(rng));
        ref[i / kTileCols] += hattn::test::float_from_bf16_bits(host[i]);
    }
    DeviceBuffer<uint16_t> tensor(host.size());
    DeviceBuffer<float> sums(kRows);
    HATTN_CUDA_CHECK(tensor.status);
    HATTN_CUDA_CHECK(sums.status);
    HATTN_CUDA_CHECK(cudaMemcpy(tensor.ptr, host.data(), tensor.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemset(sums.ptr, 0xFF, sums.bytes()));  // NaN poison

    const hattn::sm90::TensorMapSpec spec = hattn::test::swizzled_2d_spec(
        tensor.ptr, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, kTileCols, kRows, kTileCols, kTileRows);
    CUtensorMap map;
    std::string error;
    ASSERT_TRUE(hattn::sm90::encode_tensor_map(&map, spec, &error)) << error;

    const size_t smem = kRoleStages * kTileBytes + hattn::test::kSmemTileAlign;
    role_split_kernel<<<1, kRoleThreads, smem>>>(map, sums.ptr);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());

    std::vector<float> got(kRows);
    HATTN_CUDA_CHECK(cudaMemcpy(got.data(), sums.ptr, sums.bytes(), cudaMemcpyDeviceToHost));
    // 64 f32 additions of values in [-1, 1]: error well under 1e-5; a wrong row or tile is O(1).
    EXPECT_TRUE(hattn::test::all_close(got, ref, 1e-4, 1e-5, 1e-5, kTileRows));
}
