// hattn/ptx/barrier.cuh -- named CTA barriers (bar.sync / bar.arrive).
//
// Barrier 0 is __syncthreads(); kernels name the others in one enum. thread_count is the
// number of threads that participate (sync + arrive together) and must be a multiple of 32.
#pragma once

#include "common.cuh"

namespace hattn::ptx {

// PTX ISA 9.7.13.1 bar.sync: wait until thread_count threads have reached barrier `id`.
__device__ __forceinline__ void bar_sync(uint32_t id, uint32_t thread_count) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(thread_count) : "memory");
}

// PTX ISA 9.7.13.1 bar.arrive: count this thread at barrier `id` without waiting.
__device__ __forceinline__ void bar_arrive(uint32_t id, uint32_t thread_count) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(thread_count) : "memory");
}

}  // namespace hattn::ptx
