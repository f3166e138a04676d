// hattn/ptx/mma.cuh -- the warp-level tensor-core instruction (mma.sync), for small fixed matrices
// applied to register fragments: the FP8 pre-pass's Hadamard transform over 16-column groups.
//
// m16n8k16, row-major A (16 x 16), column-major B (16 x 8), fp32 C/D (16 x 8). For lane l, with
// g = l / 4 and t = l % 4 (each 32-bit register holds two 16-bit elements, the lower index in the
// low half):
//   A  a[0]: row g,   k 2t..2t+1    a[1]: row g + 8, k 2t..2t+1
//      a[2]: row g,   k 2t+8..+9    a[3]: row g + 8, k 2t+8..+9   (ldmatrix_x4's matrices 0-3)
//   B  b[0]: k 2t..2t+1, n g        b[1]: k 2t+8..2t+9, n g
//   D  d[0..1]: row g, n 2t..2t+1   d[2..3]: row g + 8, n 2t..2t+1
// m16n8k32 with e4m3 elements: the same positions in bytes (4 elements per register, k 4t..4t+3
// and 4t+16..4t+19), so a fragment is the same 32-bit words of the rows for either type.
// Register-only: no "memory" clobber (see common.cuh).
#pragma once

#include "common.cuh"

namespace hattn::ptx {

// PTX ISA 9.7.14.5.14 mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (d = a b + c)
__device__ __forceinline__ void mma_m16n8k16_f32_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                                      const float (&c)[4]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// PTX ISA 9.7.14.5.14 mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (d = a b + c)
__device__ __forceinline__ void mma_m16n8k16_f32_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                                     const float (&c)[4]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// PTX ISA 9.7.14.5.14 mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 (d = a b + c)
__device__ __forceinline__ void mma_m16n8k32_f32_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                                      const float (&c)[4]) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

}  // namespace hattn::ptx
