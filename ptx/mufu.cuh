// hattn/ptx/mufu.cuh -- the special-function unit (MUFU): base-2 exponentials.
//
// Hopper's SFU retires 16 ex2 per SM per clock. The packed f16x2 / bf16x2 forms are two MUFU
// operations on sm_90 (same element rate as f32), but halve the instruction count.
#pragma once

#include "common.cuh"

namespace hattn::ptx {

// PTX ISA 9.7.4.7 ex2.approx.ftz.f32 (max rel. error 2^-22.5 in full range per the ISA)
__device__ __forceinline__ float ex2_approx_f32(float x) {
    float y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// PTX ISA 9.7.5.4 ex2.approx.f16x2: two half-precision 2^x in one register.
__device__ __forceinline__ uint32_t ex2_approx_f16x2(uint32_t x) {
    uint32_t y;
    asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
    return y;
}

// PTX ISA 9.7.6.3 ex2.approx.ftz.bf16x2: two bfloat16 2^x in one register.
__device__ __forceinline__ uint32_t ex2_approx_ftz_bf16x2(uint32_t x) {
    uint32_t y;
    asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(y) : "r"(x));
    return y;
}

}  // namespace hattn::ptx
