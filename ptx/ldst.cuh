// hattn/ptx/ldst.cuh -- warp-collective 8x8 matrix moves between registers and shared memory.
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

}  // namespace hattn::ptx
