// hattn/src/kernels/sm90/exp2_poly.cuh -- 2^x on the FMA pipe instead of the MUFU (SFU).
//
// Why: Hopper's MUFU retires 16 ex2 per SM per clock while the FMA pipe retires 128 FFMA. The
// FP8 forward needs one exp per 256 e4m3 matmul FLOPs at head_dim 128: the MUFU is as busy as
// the tensor cores. Evaluating a fraction of the exps as a polynomial on the FMA pipe raises the
// combined exp rate (bench/mufu_bench: 20.8 /SM/clk with 2 of 8 on the FMA pipe, 1.3x the MUFU
// alone), at ~8 issue slots per exp instead of 1.
//
// Method (Cody-Waite range reduction, polynomial, exponent-field scale):
//   x = n + f with n = round(x), f in [-1/2, 1/2]
//   2^f ~ p(f), a minimax polynomial for relative error on [-1/2, 1/2]
//   2^x = p(f) * 2^n, done by adding n << 23 to p's bits (one integer shift-add, no multiply).
// Rounding trick: adding 1.5 * 2^23 to |x| < 2^22 pushes the fraction bits out of the mantissa,
// so (sum - 1.5 * 2^23) is round(x) and the sum's low mantissa bits hold n in two's complement;
// shifting the sum's bits left by 23 leaves exactly n << 23.
// Valid for x in [-125, 128): normal results. Inputs are clamped at kExp2PolyMinArg, where the
// result is ~2^-127 instead of 0: exp2(-inf) (a masked score) is a denormal, not 0 -- harmless
// where the result is rounded to e4m3 (0) or added to a sum of weights >= 2^-8.
//
// Accuracy (max relative error of the minimax fit on [-1/2, 1/2], Remez; f32 Horner adds ~1e-7):
//   degree 2: 1.7e-3, degree 3: 7.5e-5, degree 5: 7.5e-8 (ex2.approx.f32 itself: 2^-22.5).
// For P rounded to e4m3 (half an ulp = 2^-4 relative at significand 1, 2^-5 just below 2),
// degree 3 moves the rounding bound from 2^-4 to 2^-4 + 7.5e-5 and flips ~0.1-0.2% of roundings to
// the neighbouring code (those within 7.5e-5 of a midpoint): far below the rounding itself.
#pragma once

#include <cstdint>

namespace hattn::sm90 {

constexpr float kExp2PolyMinArg = -127.0f;
constexpr float kExp2PolyMaxArg = 127.0f;
constexpr float kRoundToIntMagic = 12582912.0f;  // 1.5 * 2^23
constexpr int kFloatMantissaBits = 23;

// Minimax coefficients of 2^f on [-1/2, 1/2] (relative error), constant term first.
template <int kDegree>
__host__ __device__ constexpr float exp2_poly_coeff(int k) {
    static_assert(kDegree == 2 || kDegree == 3 || kDegree == 5, "coefficients exist for degrees 2, 3 and 5");
    if constexpr (kDegree == 2) {
        constexpr float c[3] = {1.000443142e+00f, 7.034480059e-01f, 2.384289358e-01f};
        return c[k];
    } else if constexpr (kDegree == 3) {
        constexpr float c[4] = {9.999280735e-01f, 6.932609855e-01f, 2.426111222e-01f, 5.517166907e-02f};
        return c[k];
    } else {
        constexpr float c[6] = {1.000000072e+00f, 6.931469671e-01f, 2.402211972e-01f,
                                5.550713276e-02f, 9.675541540e-03f, 1.327647174e-03f};
        return c[k];
    }
}

// 2^x for x <= kExp2PolyMaxArg (larger x must not occur; the caller's bound). Lower inputs
// (-inf included) are clamped. Instructions: FMNMX, 3 FADD, kDegree FFMA, one shift-add (LEA).
template <int kDegree>
__device__ __forceinline__ float exp2_poly(float x) {
    x = fmaxf(x, kExp2PolyMinArg);
    // __fadd_rn / __fsub_rn: never contracted or reassociated, so (x + M) - M survives.
    const float shifted = __fadd_rn(x, kRoundToIntMagic);
    const float n = __fsub_rn(shifted, kRoundToIntMagic);
    const float f = __fsub_rn(x, n);
    float p = exp2_poly_coeff<kDegree>(kDegree);
#pragma unroll
    for (int k = kDegree - 1; k >= 0; --k) p = fmaf(p, f, exp2_poly_coeff<kDegree>(k));
    const uint32_t scale_bits = __float_as_uint(shifted) << kFloatMantissaBits;  // n << 23
    return __uint_as_float(__float_as_uint(p) + scale_bits);
}

// As exp2_poly, with the upper clamp too: any finite or infinite x.
template <int kDegree>
__device__ __forceinline__ float exp2_poly_clamped(float x) {
    return exp2_poly<kDegree>(fminf(x, kExp2PolyMaxArg));
}

}  // namespace hattn::sm90
