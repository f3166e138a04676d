// hattn/ptx/atomic.cuh -- reductions and flags in global memory, performed at the L2 cache.
//
// The backward pass adds every KV block's share of dQ into one fp32 buffer (red: no value comes
// back, so the issuing thread does not wait), and its deterministic mode orders those additions
// with a per-query-block counter (a release increment by the writer, acquire loads by the next).
// The forward's dynamic tile scheduler hands out work tiles from a counter (atom: the old value
// comes back) and the last CTA to finish zeroes it for the next launch.
// Debug-build timeouts reuse the mbarrier wait's budget (kMbarrierTimeoutNs in mbarrier.cuh).
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

// PTX ISA 9.7.13.5 atom.global.add.s32 (relaxed, gpu scope): a ticket from a shared counter;
// returns the value before the addition.
__device__ __forceinline__ int32_t atom_global_add_s32(int32_t* addr, int32_t value) {
    int32_t old;
    asm volatile("atom.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(addr), "r"(value) : "memory");
    return old;
}

// PTX ISA 9.7.13.5 atom.acq_rel.gpu.global.add.s32: as above, and orders this thread's earlier
// memory operations before the addition and its later ones after it (a count of finished CTAs).
__device__ __forceinline__ int32_t atom_acq_rel_gpu_global_add_s32(int32_t* addr, int32_t value) {
    int32_t old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(addr), "r"(value) : "memory");
    return old;
}

// PTX ISA 9.7.9.10 st.relaxed.gpu.global.s32: a plain store other CTAs' atomics may race with.
__device__ __forceinline__ void st_relaxed_gpu_global_s32(int32_t* addr, int32_t value) {
    asm volatile("st.relaxed.gpu.global.s32 [%0], %1;" ::"l"(addr), "r"(value) : "memory");
}

// PTX ISA 9.7.9.11 st.release.gpu.global.s32: a flag that publishes this thread's earlier writes
// (and, after a CTA barrier, its CTA's) to whoever reads it with acquire.
__device__ __forceinline__ void st_release_gpu_global_s32(int32_t* addr, int32_t value) {
    asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(addr), "r"(value) : "memory");
}

// PTX ISA 9.7.9.8 ld.acquire.gpu in a PTX loop: blocks until *addr == value. With a non-zero
// timeout_ns the thread executes `trap` once that much wall time has passed (debug builds), so a
// broken ordering fails the launch instead of hanging the GPU.
__device__ __forceinline__ void spin_until_equal_acquire_gpu(const int32_t* addr, int32_t value, uint64_t timeout_ns) {
    asm volatile(
        "{\n\t.reg .pred p;\n\t.reg .b32 v;\n\t.reg .u64 t0, t1;\n\t"
        "mov.u64 t0, %%globaltimer;\n\t"
        "SPIN_%=:\n\t"
        "ld.acquire.gpu.global.b32 v, [%0];\n\t"
        "setp.eq.s32 p, v, %1;\n\t"
        "@p bra DONE_%=;\n\t"
        "setp.eq.u64 p, %2, 0;\n\t"
        "@p bra SPIN_%=;\n\t"
        "mov.u64 t1, %%globaltimer;\n\t"
        "sub.u64 t1, t1, t0;\n\t"
        "setp.gt.u64 p, t1, %2;\n\t"
        "@p trap;\n\t"
        "bra SPIN_%=;\n\t"
        "DONE_%=:\n\t}" ::"l"(addr),
        "r"(value), "l"(timeout_ns)
        : "memory");
}

// PTX ISA 9.7.13.4 membar/fence: fence.acq_rel.gpu, ordering this thread's global writes (red
// included) before a later release by another thread of the CTA.
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

}  // namespace hattn::ptx
