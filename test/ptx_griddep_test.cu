// hattn/test/ptx_griddep_test.cu -- programmatic dependent launch (ptx/griddep.cuh).
//
// A primary grid issues griddepcontrol.launch_dependents first thing and only then, after a delay,
// writes its output; the dependent grid, launched with programmatic stream serialization, may so
// start while the primary still runs, and must still see every one of those writes after its
// griddepcontrol.wait. Without a programmatic dependency, griddepcontrol.wait returns at once.
#include "gpu_test_util.h"
#include "ptx_test_util.cuh"

#include "ptx/hattn_ptx.cuh"

#include <cstdint>
#include <vector>

namespace {

using hattn::test::DeviceBuffer;

constexpr int kPrimaryBlocks = 264;  // two CTAs per SM of an H100 / H200, and more
constexpr int kThreads = 128;
constexpr int kValues = kPrimaryBlocks * kThreads;
constexpr int64_t kDelayCycles = 200000;  // ~0.1 ms at 1.8 GHz: the dependent grid can start meanwhile

__device__ void spin_cycles(int64_t cycles) {
    const int64_t start = clock64();
    while (clock64() - start < cycles) {
    }
}

__global__ void primary_kernel(uint32_t* values) {
    hattn::ptx::griddepcontrol_launch_dependents();
    spin_cycles(kDelayCycles);
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    values[i] = static_cast<uint32_t>(i) + 1u;
}

// Counts the values the primary has not written yet, once griddepcontrol.wait has returned.
__global__ void dependent_kernel(const uint32_t* values, uint32_t* missing) {
    hattn::ptx::griddepcontrol_wait();
    uint32_t count = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < kValues; i += gridDim.x * blockDim.x)
        count += values[i] != static_cast<uint32_t>(i) + 1u;
    if (count) atomicAdd(missing, count);
}

cudaError_t launch_dependent(const uint32_t* values, uint32_t* missing, bool programmatic) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(kPrimaryBlocks);
    config.blockDim = dim3(kThreads);
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    if (programmatic) {
        config.attrs = attribute;
        config.numAttrs = 1;
    }
    return cudaLaunchKernelEx(&config, dependent_kernel, values, missing);
}

void run_pair(bool programmatic) {
    DeviceBuffer<uint32_t> values(kValues);
    DeviceBuffer<uint32_t> missing(1);
    HATTN_CUDA_CHECK(values.status);
    HATTN_CUDA_CHECK(missing.status);
    for (int repeat = 0; repeat < 3; ++repeat) {
        HATTN_CUDA_CHECK(cudaMemset(values.ptr, 0, values.bytes()));
        HATTN_CUDA_CHECK(cudaMemset(missing.ptr, 0, missing.bytes()));
        primary_kernel<<<kPrimaryBlocks, kThreads>>>(values.ptr);
        HATTN_CUDA_CHECK(cudaGetLastError());
        HATTN_CUDA_CHECK(launch_dependent(values.ptr, missing.ptr, programmatic));
        HATTN_CUDA_CHECK(cudaDeviceSynchronize());
        uint32_t got = 0;
        HATTN_CUDA_CHECK(cudaMemcpy(&got, missing.ptr, sizeof(got), cudaMemcpyDeviceToHost));
        EXPECT_EQ(got, 0u) << "after griddepcontrol.wait, " << got << " of the primary grid's " << kValues
                           << " writes were not visible (repeat " << repeat << ")";
    }
}

}  // namespace

TEST(PtxGriddep, WaitSeesEveryWriteOfThePrimaryGrid) {
    HATTN_REQUIRE_HOPPER();
    run_pair(/*programmatic=*/true);
}

TEST(PtxGriddep, WaitWithoutProgrammaticDependencyIsANoOp) {
    HATTN_REQUIRE_HOPPER();
    run_pair(/*programmatic=*/false);  // plain stream order: the primary is done before it starts
}
