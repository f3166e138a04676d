// hattn/ptx/convert.cuh -- packing conversions from f32 pairs to 16-bit and 8-bit pairs, and back.
//
// Convention: the first argument lands in the LOW half of the result (lower address when
// stored), matching how wgmma register fragments hold consecutive columns.
#pragma once

#include "common.cuh"

namespace hattn::ptx {

// PTX ISA 9.7.9.7 prmt.b32: byte i of the result is byte (selector >> 4 i) & 7 of {b, a} (a's
// bytes are 0-3, b's 4-7). kSelector is a compile-time constant (an immediate in SASS).
template <uint32_t kSelector>
__device__ __forceinline__ uint32_t prmt_b32(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "n"(kSelector));
    return d;
}
// The same with the selector in a register: for a permutation that differs from lane to lane.
__device__ __forceinline__ uint32_t prmt_b32(uint32_t a, uint32_t b, uint32_t selector) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
    return d;
}

// PTX ISA 9.7.9.21 cvt.rn.bf16x2.f32: d = {hi: b, lo: a}
__device__ __forceinline__ uint32_t cvt_rn_bf16x2_f32(float lo, float hi) {
    uint32_t d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

// PTX ISA 9.7.9.21 cvt.rn.f16x2.f32
__device__ __forceinline__ uint32_t cvt_rn_f16x2_f32(float lo, float hi) {
    uint32_t d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

// PTX ISA 9.7.9.21 cvt.rn.satfinite.e4m3x2.f32: two e4m3 bytes in the low 16 bits.
__device__ __forceinline__ uint16_t cvt_rn_satfinite_e4m3x2_f32(float lo, float hi) {
    uint16_t d;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
    return d;
}

// PTX ISA 9.7.9.21 cvt.rn.satfinite.e5m2x2.f32
__device__ __forceinline__ uint16_t cvt_rn_satfinite_e5m2x2_f32(float lo, float hi) {
    uint16_t d;
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
    return d;
}

// 16-bit pair packer chosen by element type (bf16 or f16), for templated kernels.
template <bool kIsBf16>
__device__ __forceinline__ uint32_t pack_f32x2(float lo, float hi) {
    if constexpr (kIsBf16) {
        return cvt_rn_bf16x2_f32(lo, hi);
    } else {
        return cvt_rn_f16x2_f32(lo, hi);
    }
}

// PTX ISA 9.7.9.21 cvt.f32.f16: one half-precision value (the low 16 bits) to f32, exactly.
__device__ __forceinline__ float cvt_f32_f16(uint16_t h) {
    float d;
    asm("cvt.f32.f16 %0, %1;" : "=f"(d) : "h"(h));
    return d;
}

// A 16-bit pair (low half first) to two floats. bf16 is the top half of an f32, so widening it
// is a shift, no instruction of its own.
template <bool kIsBf16>
__device__ __forceinline__ void unpack_x2_f32(uint32_t pair, float& lo, float& hi) {
    if constexpr (kIsBf16) {
        lo = __uint_as_float(pair << 16);
        hi = __uint_as_float(pair & 0xFFFF0000u);
    } else {
        lo = cvt_f32_f16(static_cast<uint16_t>(pair & 0xFFFFu));
        hi = cvt_f32_f16(static_cast<uint16_t>(pair >> 16));
    }
}

}  // namespace hattn::ptx
