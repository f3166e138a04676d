// hattn/test/ptx_cluster_test.cu -- thread-block clusters (ptx/cluster.cuh): %cluster_ctarank,
// the cluster barrier, and mapa + st.async into the other CTA's shared memory, counted on its
// mbarrier.
//
// Clusters of two CTAs (launched with the cluster-dimension attribute, as the FP8 pre-pass's
// paired kernel is): after one cluster barrier (both CTAs have started, their mbarriers are
// initialized), every thread stores a value that names its CTA, its thread and the round into the
// other CTA's shared memory with st.async, arrives on its own CTA's mbarrier expecting the
// partner's 4 bytes, waits, and reads what its partner wrote -- kRounds times into two buffers by
// round parity, the pattern of the pre-pass's amax exchange (a CTA is at most one round ahead of
// its partner, so it writes a buffer again only after its partner has read it).
#include "gpu_test_util.h"
#include "ptx_test_util.cuh"

#include "kernels/sm90/launch_setup.h"
#include "ptx/hattn_ptx.cuh"

#include <cstdint>
#include <vector>

namespace {

using hattn::test::DeviceBuffer;

constexpr int kClusterCtas = 2;
constexpr int kThreads = 64;
constexpr int kClusters = 8;
constexpr int kRounds = 64;
constexpr int kParities = 2;

// What thread t of the CTA of rank `rank` stores in round `round` (exact in fp32).
__host__ __device__ constexpr float tag(uint32_t rank, int t, int round) {
    return static_cast<float>(rank * 100000u + static_cast<uint32_t>(round) * 100u + static_cast<uint32_t>(t));
}

// ranks[cta] = its %cluster_ctarank; mismatches[cta * kThreads + t] counts the rounds in which
// thread t read something other than its partner's tag.
__global__ void cluster_exchange_kernel(uint32_t* ranks, int* mismatches) {
    __shared__ float inbox[kParities][kThreads];
    __shared__ uint64_t full[kParities];  // one phase per round of its parity
    const int t = static_cast<int>(threadIdx.x);
    const uint32_t rank = hattn::ptx::cluster_ctarank();
    const uint32_t partner = rank ^ 1u;
    if (t == 0) {
        ranks[blockIdx.x] = rank;
        for (int p = 0; p < kParities; ++p) hattn::ptx::mbarrier_init(&full[p], kThreads);
        hattn::ptx::fence_mbarrier_init();
    }
    hattn::ptx::barrier_cluster_arrive_release();
    hattn::ptx::barrier_cluster_wait_acquire();
    int wrong = 0;
    for (int round = 0; round < kRounds; ++round) {
        const int p = round % kParities;
        float* slot = &inbox[p][t];
        hattn::ptx::st_async_b32(hattn::ptx::mapa_shared_cluster(hattn::ptx::smem_u32(slot), partner),
                                 __float_as_uint(tag(rank, t, round)),
                                 hattn::ptx::mapa_shared_cluster(hattn::ptx::smem_u32(&full[p]), partner));
        hattn::ptx::mbarrier_arrive_expect_tx(&full[p], sizeof(float));
        hattn::ptx::mbarrier_wait(&full[p], static_cast<uint32_t>((round / kParities) & 1));
        if (*slot != tag(partner, t, round)) ++wrong;
    }
    mismatches[blockIdx.x * kThreads + t] = wrong;
    // Our last st.async may still be on its way to the partner: neither exits before both are done.
    hattn::ptx::barrier_cluster_arrive_relaxed();
    hattn::ptx::barrier_cluster_wait_acquire();
}

TEST(PtxCluster, PairsExchangeThroughSharedMemory) {
    HATTN_REQUIRE_HOPPER();
    const int ctas = kClusters * kClusterCtas;
    DeviceBuffer<uint32_t> ranks(ctas);
    DeviceBuffer<int> mismatches(static_cast<size_t>(ctas) * kThreads);
    HATTN_CUDA_CHECK(ranks.status);
    HATTN_CUDA_CHECK(mismatches.status);
    HATTN_CUDA_CHECK(cudaMemset(ranks.ptr, 0xFF, ranks.bytes()));
    HATTN_CUDA_CHECK(cudaMemset(mismatches.ptr, 0xFF, mismatches.bytes()));  // -1: never written

    cudaLaunchConfig_t config{};
    config.gridDim = dim3(ctas);
    config.blockDim = dim3(kThreads);
    cudaLaunchAttribute attribute[1] = {hattn::sm90::cluster_dimension_attribute(kClusterCtas)};
    config.attrs = attribute;
    config.numAttrs = 1;
    HATTN_CUDA_CHECK(cudaLaunchKernelEx(&config, cluster_exchange_kernel, ranks.ptr, mismatches.ptr));
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());

    std::vector<uint32_t> got_ranks(ctas);
    std::vector<int> got(static_cast<size_t>(ctas) * kThreads);
    HATTN_CUDA_CHECK(cudaMemcpy(got_ranks.data(), ranks.ptr, ranks.bytes(), cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(cudaMemcpy(got.data(), mismatches.ptr, mismatches.bytes(), cudaMemcpyDeviceToHost));
    for (int cta = 0; cta < ctas; ++cta) {
        // A 1-D grid's clusters are runs of consecutive CTAs.
        EXPECT_EQ(got_ranks[cta], static_cast<uint32_t>(cta % kClusterCtas)) << "CTA " << cta;
        for (int t = 0; t < kThreads; ++t) {
            EXPECT_EQ(got[static_cast<size_t>(cta) * kThreads + t], 0) << "CTA " << cta << " thread " << t;
        }
    }
}

}  // namespace
