// hattn/ptx/atomic.cuh -- reductions and flags in global memory, performed at the L2 cache.
//
// The backward pass adds every KV block's share of dQ into one fp32 buffer (red: no value comes
// back, so the issuing thread does not wait), and its deterministic mode orders those additions
// with a per-query-block counter (a release increment by the writer, acquire loads by the next).
#pragma once

#include "common.cuh"

namespace hattn::ptx {

// PTX ISA 9.7.13.6 red.global.add.v2.f32: two consecutive floats (8-byte aligned) added at L2.
__device__ __forceinline__ void red_global_add_v2_f32(float* addr, float a, float b) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(addr), "f"(a), "f"(b) : "memory");
}

// PTX ISA 9.7.13.6 red.global.add.v4.f32: four consecutive floats (16-byte aligned), one
// instruction: half the load/store-unit issue slots of two v2 reds.
__device__ __forceinline__ void red_global_add_v4_f32(float* addr, float a, float b, float c, float d) {
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(addr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}

// PTX ISA 9.7.13.6 red.release.gpu.global.add.s32: publish everything this thread wrote (and,
// after a CTA barrier, what the CTA wrote) before the counter moves.
__device__ __forceinline__ void red_release_gpu_global_add_s32(int32_t* addr, int32_t value) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(addr), "r"(value) : "memory");
}

// PTX ISA 9.7.9.8 ld.acquire.gpu.global.b32: later reads and writes stay after this load.
__device__ __forceinline__ int32_t ld_acquire_gpu_global_s32(const int32_t* addr) {
    int32_t v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(addr) : "memory");
    return v;
}

// PTX ISA 9.7.13.4 membar/fence: fence.acq_rel.gpu, ordering this thread's global writes (red
// included) before a later release by another thread of the CTA.
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// PTX ISA 9.7.19.2 nanosleep: back off between polls of a counter.
__device__ __forceinline__ void nanosleep(uint32_t ns) { asm volatile("nanosleep.u32 %0;" ::"r"(ns)); }

}  // namespace hattn::ptx
