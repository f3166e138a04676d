// hattn/ptx/global.cuh -- plain vector loads and stores of global memory, for the memory-bound
// passes (the FP8 pre-pass) that stream tensors through registers rather than through TMA.
//
// The loads are of data the kernel never writes, so they carry no "memory" clobber and are not
// volatile: the compiler may schedule (hoist, batch) them freely, which is what keeps enough bytes
// in flight. The stores are volatile (they must happen) but order nothing. ld_global_v2_f32 and
// ld_global_f32 are the exception: they read what another CTA of the same kernel wrote and
// published with a flag, so they are volatile with a "memory" clobber and stay below the acquire
// that read the flag.
#pragma once

#include <cstdint>

#include "common.cuh"

namespace hattn::ptx {

// PTX ISA 9.7.9.9 ld.global.nc: 16 bytes through the non-coherent (read-only) path; data read
// once is not kept in L1 (L1::no_allocate), so it does not evict what is reused.
__device__ __forceinline__ uint4 ld_global_nc_na_v4_b32(const void* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.b32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

// PTX ISA 9.7.9.9 ld.global.nc: 4 floats through the read-only path, cached in L1 (tables that
// many thread blocks read).
__device__ __forceinline__ float4 ld_global_nc_v4_f32(const float* p) {
    float4 r;
    asm("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(p));
    return r;
}

// PTX ISA 9.7.9.18 createpolicy.fractional: an L2 eviction policy (an opaque 64-bit value for the
// loads below) under which every line a load touches is evicted last: for a table many thread
// blocks re-read while tensors stream past it once.
__device__ __forceinline__ uint64_t createpolicy_fractional_l2_evict_last() {
    uint64_t policy;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

// PTX ISA 9.7.9.9 ld.global.nc.L2::cache_hint: ld_global_nc_v4_f32 under an L2 eviction policy
// (createpolicy_fractional_l2_evict_last).
__device__ __forceinline__ float4 ld_global_nc_l2_hint_v4_f32(const float* p, uint64_t policy) {
    float4 r;
    asm("ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
        : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w)
        : "l"(p), "l"(policy));
    return r;
}

// PTX ISA 9.7.9.11 st: 8 bytes to global memory (8-byte aligned).
__device__ __forceinline__ void st_global_v2_b32(void* p, uint32_t a, uint32_t b) {
    asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(a), "r"(b));
}

// PTX ISA 9.7.9.8 ld: 2 floats (8-byte aligned) through the coherent path, ordered after the
// thread's earlier acquire (see above).
__device__ __forceinline__ float2 ld_global_v2_f32(const float* p) {
    float2 r;
    asm volatile("ld.global.v2.f32 {%0, %1}, [%2];" : "=f"(r.x), "=f"(r.y) : "l"(p) : "memory");
    return r;
}

// PTX ISA 9.7.9.8 ld: 1 float through the coherent path (as ld_global_v2_f32).
__device__ __forceinline__ float ld_global_f32(const float* p) {
    float r;
    asm volatile("ld.global.f32 %0, [%1];" : "=f"(r) : "l"(p) : "memory");
    return r;
}

// PTX ISA 9.7.9.11 st: 4 bytes to global memory (4-byte aligned).
__device__ __forceinline__ void st_global_b32(void* p, uint32_t a) {
    asm volatile("st.global.b32 [%0], %1;" ::"l"(p), "r"(a));
}

// PTX ISA 9.7.9.11 st.global.v4.b32: 16 bytes to global memory (16-byte aligned).
__device__ __forceinline__ void st_global_v4_b32(void* p, uint4 a) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w));
}

// PTX ISA 9.7.9.11 st: 4 bytes to global memory.
__device__ __forceinline__ void st_global_f32(float* p, float a) {
    asm volatile("st.global.f32 [%0], %1;" ::"l"(p), "f"(a));
}

// PTX ISA 9.7.9.25.3 cp.async: 16 bytes global -> shared without passing through registers,
// cached in L2 only (.cg); completes asynchronously (cp_async_commit_group / cp_async_wait_all).
__device__ __forceinline__ void cp_async_cg_16(void* smem, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(smem)), "l"(gmem) : "memory");
}

// PTX ISA 9.7.9.25.3 cp.async.commit_group: closes the group of the thread's cp.async so far.
__device__ __forceinline__ void cp_async_commit_group() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// PTX ISA 9.7.9.25.3 cp.async.wait_group 0: every committed group of the thread has landed.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// PTX ISA 9.7.9.25.3 cp.async.wait_group N: all but the thread's N most recent groups have landed
// (a double buffer waits for the older block while the newer one is still in flight).
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

}  // namespace hattn::ptx
