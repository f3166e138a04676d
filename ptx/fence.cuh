// hattn/ptx/fence.cuh -- memory-proxy and barrier-initialisation fences.
#pragma once

#include "common.cuh"

namespace hattn::ptx {

// PTX ISA 9.7.13.4 membar/fence: fence.proxy.async.shared::cta
// Generic-proxy shared-memory writes (st.shared, stmatrix) become visible to the async proxy
// (TMA, wgmma). Each writing thread fences before the barrier that hands the data over.
__device__ __forceinline__ void fence_proxy_async_shared_cta() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// PTX ISA 9.7.13.4 membar/fence: fence.mbarrier_init.release.cluster
// Makes freshly initialised mbarriers visible to other threads and to the async proxy
// before anyone arrives on them or TMA completes on them.
__device__ __forceinline__ void fence_mbarrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// PTX ISA 9.7.13.4 membar/fence: fence.acq_rel.cta (a plain CTA-scope fence).
__device__ __forceinline__ void fence_acq_rel_cta() { asm volatile("fence.acq_rel.cta;" ::: "memory"); }

}  // namespace hattn::ptx
