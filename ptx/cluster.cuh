// hattn/ptx/cluster.cuh -- thread-block clusters: a CTA's rank, the cluster-wide barrier, and
// asynchronous stores into another CTA's shared memory (distributed shared memory).
//
// A cluster's CTAs run at the same time on one GPC, and each can address the others' shared
// memory through the shared::cluster window. Before a CTA touches another's shared memory, that
// CTA must have started (one cluster barrier after launch), and it must not exit while another may
// still touch its memory (a cluster barrier after the last access) -- the kernels say where.
#pragma once

#include "common.cuh"

namespace hattn::ptx {

// PTX ISA 10 special registers: %cluster_ctarank, this CTA's rank in its cluster (0 .. size - 1).
// Constant for the CTA's life, so not volatile: the compiler may read it once.
__device__ __forceinline__ uint32_t cluster_ctarank() {
    uint32_t rank;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
}

// PTX ISA 9.7.13.3 barrier.cluster.arrive.release.aligned: count this thread at the cluster
// barrier; its earlier memory writes (shared::cluster included) are released to the threads that
// then pass the wait. Every thread of the warp executes it together (.aligned).
__device__ __forceinline__ void barrier_cluster_arrive_release() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

// PTX ISA 9.7.13.3 barrier.cluster.wait.acquire.aligned: wait until every thread of every CTA of
// the cluster has arrived; what they released is then visible. One wait follows each arrive.
__device__ __forceinline__ void barrier_cluster_wait_acquire() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// PTX ISA 9.7.13.3 barrier.cluster.arrive.relaxed.aligned: as barrier_cluster_arrive_release, without
// ordering this thread's memory accesses (for a barrier that only says "every CTA got here").
__device__ __forceinline__ void barrier_cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

// PTX ISA 9.7.9 (data movement) mapa.shared::cluster.u32: the shared::cluster address of the
// variable at `smem_addr` (this CTA's shared window) in the CTA of rank `cta_rank`. Pure address
// arithmetic: no "memory" clobber.
__device__ __forceinline__ uint32_t mapa_shared_cluster(uint32_t smem_addr, uint32_t cta_rank) {
    uint32_t remote;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr), "r"(cta_rank));
    return remote;
}

// PTX ISA 9.7.9 (data movement) st.async.shared::cluster.mbarrier::complete_tx::bytes.b32: 4 bytes
// into the shared memory of a CTA of the cluster (`cluster_addr` from mapa_shared_cluster), which
// then counts 4 bytes of transactions on ITS mbarrier `cluster_bar` (also mapped). The receiver
// posts the bytes it expects (mbarrier_arrive_expect_tx) and waits on its own barrier: no fence and
// no cluster barrier per exchange (the cluster barrier's release / acquire cost a MEMBAR.GPU and an
// L1 invalidation in SASS). Asynchronous: the sender's register may be reused at once.
__device__ __forceinline__ void st_async_b32(uint32_t cluster_addr, uint32_t value, uint32_t cluster_bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(cluster_addr),
                 "r"(value), "r"(cluster_bar)
                 : "memory");
}

}  // namespace hattn::ptx
