// hattn/bench/exp2_poly.cuh -- 2^x evaluated on the FMA pipe instead of the MUFU (SFU).
//
// Why: Hopper's MUFU retires 16 ex2 per SM per clock, the FMA pipe 128 FFMA per SM per clock.
// Moving a fraction of a softmax's exponentials onto the FMA pipe raises the combined rate
// above the MUFU's alone, as long as the extra instructions fit in the issue slots.
//
// Method (Cody-Waite range reduction, then a polynomial, then an exponent-field scale):
//   x = n + f with n = round(x), f in [-1/2, 1/2]
//   2^f ~ p(f), degree-5 minimax polynomial for RELATIVE error on [-1/2, 1/2] (Remez; the
//         coefficients' own error is 7.5e-8, f32 Horner rounding brings it to ~2e-7, about the
//         ex2.approx.f32 bound of 2^-22.5)
//   2^x = p(f) * 2^n, done by adding n to p's exponent bits (an integer add, no multiply).
//
// The rounding trick: adding 1.5 * 2^23 to |x| < 2^22 pushes the fraction bits out of the
// mantissa, so the sum's low mantissa bits hold n in two's complement and (sum - 1.5 * 2^23)
// is n as a float. Shifting the sum's bit pattern left by 23 leaves exactly n << 23 (the
// constant's own bits all shift out of the 32-bit word), the value to add to p's bits.
//
// Cost per element: 2 FMNMX (clamp) + 3 FADD + 5 FFMA + SHL + IADD = 12 instructions on the
// FMA/ALU pipes. Valid output range: x in [-125, 128) gives normal results; below -125 the
// exponent add underflows the field, so the clamp at kExp2PolyMinArg returns a tiny value
// (about 2^-127) instead of 0 -- fine for softmax, where such terms vanish in the sum.
#pragma once

#include <cstdint>

namespace hattn::bench {

constexpr float kExp2PolyMinArg = -127.0f;
constexpr float kExp2PolyMaxArg = 127.0f;
constexpr float kExp2PolyMinAccurateArg = -125.0f;  // below this the result is not a normal float
constexpr float kRoundToIntMagic = 12582912.0f;      // 1.5 * 2^23
constexpr int kFloatMantissaBits = 23;

// Minimax coefficients of 2^f on [-1/2, 1/2] (relative error), constant term first.
constexpr float kExp2PolyC0 = 1.000000119e+00f;
constexpr float kExp2PolyC1 = 6.931469440e-01f;
constexpr float kExp2PolyC2 = 2.402212024e-01f;
constexpr float kExp2PolyC3 = 5.550713092e-02f;
constexpr float kExp2PolyC4 = 9.675540961e-03f;
constexpr float kExp2PolyC5 = 1.327647245e-03f;

__device__ __forceinline__ float exp2_poly5_f32(float x) {
    x = fminf(fmaxf(x, kExp2PolyMinArg), kExp2PolyMaxArg);
    // __fadd_rn / __fsub_rn: never contracted or reassociated, so (x + M) - M survives.
    const float shifted = __fadd_rn(x, kRoundToIntMagic);
    const float n = __fsub_rn(shifted, kRoundToIntMagic);
    const float f = __fsub_rn(x, n);
    float p = kExp2PolyC5;
    p = fmaf(p, f, kExp2PolyC4);
    p = fmaf(p, f, kExp2PolyC3);
    p = fmaf(p, f, kExp2PolyC2);
    p = fmaf(p, f, kExp2PolyC1);
    p = fmaf(p, f, kExp2PolyC0);
    const uint32_t scale_bits = __float_as_uint(shifted) << kFloatMantissaBits;  // n << 23
    return __uint_as_float(__float_as_uint(p) + scale_bits);
}

}  // namespace hattn::bench
