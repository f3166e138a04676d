// hattn/ptx/ldst.cuh -- moves between registers and shared memory: warp-collective 8x8 matrices,
// and plain vector loads / stores through the shared window.
//
// Each 8x8 matrix of 16-bit elements is addressed by 8 row pointers (16 bytes each) supplied
// by lanes 0-7 (matrix 0), 8-15 (matrix 1), 16-23 and 24-31. Lane l receives/provides the
// pair at row l/4, columns 2*(l%4)..+1 of each matrix (transposed with .trans).
#pragma once

#include "common.cuh"

namespace hattn::ptx {

// PTX ISA 9.7.14.5.15 ldmatrix.sync.aligned.m8n8.x4.shared.b16
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_ptr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(row_ptr))
                 : "memory");
}

// PTX ISA 9.7.14.5.15 ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_ptr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(row_ptr))
                 : "memory");
}

// PTX ISA 9.7.14.5.16 stmatrix.sync.aligned.m8n8.x4.shared.b16
__device__ __forceinline__ void stmatrix_x4(void* row_ptr, const uint32_t (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(
                     smem_u32(row_ptr)),
                 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

// PTX ISA 9.7.14.5.16 stmatrix.sync.aligned.m8n8.x4.trans.shared.b16
__device__ __forceinline__ void stmatrix_x4_trans(void* row_ptr, const uint32_t (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(
                     smem_u32(row_ptr)),
                 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

// PTX ISA 9.7.9.8 ld.shared.v2.f32. Kernels reach their shared storage through a pointer cast
// from an aligned integer, which hides the address space from the compiler: a plain C++ access
// becomes a generic LD (address translation, 64-bit address registers). These name it.
__device__ __forceinline__ float2 ld_shared_v2_f32(const float* p) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(smem_u32(p)) : "memory");
    return v;
}

// PTX ISA 9.7.9.9 st.shared.v4.f32 (see ld_shared_v2_f32).
__device__ __forceinline__ void st_shared_v4_f32(float* p, float a, float b, float c, float d) {
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(smem_u32(p)), "f"(a), "f"(b), "f"(c), "f"(d)
                 : "memory");
}

// PTX ISA 9.7.9.8 ld.shared.b32: 4 bytes (4-byte aligned; see ld_shared_v2_f32). Volatile with a
// memory clobber: it reads what other threads stored before a barrier.
__device__ __forceinline__ uint32_t ld_shared_b32(const void* p) {
    uint32_t r;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(r) : "r"(smem_u32(p)) : "memory");
    return r;
}

// PTX ISA 9.7.9.9 st.shared.b32 (see ld_shared_b32).
__device__ __forceinline__ void st_shared_b32(void* p, uint32_t a) {
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(smem_u32(p)), "r"(a) : "memory");
}

// PTX ISA 9.7.9.8 ld.shared.v4.b32: 16 bytes (16-byte aligned; see ld_shared_v2_f32). It may read
// what cp.async wrote, so volatile with a memory clobber: it stays after cp_async_wait_all.
__device__ __forceinline__ uint4 ld_shared_v4_b32(const void* p) {
    uint4 r;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "r"(smem_u32(p))
                 : "memory");
    return r;
}

// PTX ISA 9.7.9.8 ld.shared.v2.b32: 8 bytes (8-byte aligned; see ld_shared_v4_b32).
__device__ __forceinline__ uint2 ld_shared_v2_b32(const void* p) {
    uint2 r;
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "r"(smem_u32(p)) : "memory");
    return r;
}

// PTX ISA 9.7.9.9 st.shared.v4.b32: 16 bytes (16-byte aligned; see ld_shared_v2_f32).
__device__ __forceinline__ void st_shared_v4_b32(void* p, uint4 a) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(smem_u32(p)), "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w)
                 : "memory");
}

}  // namespace hattn::ptx
