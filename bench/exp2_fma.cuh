// hattn/bench/exp2_fma.cuh -- 2^x on the FMA pipe instead of the MUFU (SFU).
//
// Why: Hopper's MUFU retires 16 ex2 per SM per clock while the FMA pipe retires 128 FFMA. At
// head_dim 64 a bf16 attention step needs one exp per 256 matmul FLOPs, i.e. 16 exps per clock
// at the tensor-core peak: the MUFU alone is exactly saturated and any imperfection in the
// overlap shows. Evaluating a fraction of the exps as a polynomial on the FMA pipe raises the
// combined exp rate (bench/mufu_bench measures 20.8 /SM/clk with 2 of 8 on the FMA pipe).
//
// Method (Cody-Waite range reduction, polynomial, exponent-field scale):
//   x = n + f with n = round(x), f in [-1/2, 1/2]
//   2^f ~ p(f), a minimax polynomial for relative error on [-1/2, 1/2]
//   2^x = p(f) * 2^n, done by adding n << 23 to p's bits (an integer add, no multiply).
// Rounding trick: adding 1.5 * 2^23 to |x| < 2^22 pushes the fraction bits out of the mantissa,
// so (sum - 1.5 * 2^23) is round(x) and the sum's low mantissa bits hold n in two's complement;
// shifting the sum's bits left by 23 leaves exactly n << 23.
// Valid for x in [-125, 128): normal results. Inputs are clamped at kExp2FmaMinArg, where the
// result is ~2^-127 instead of 0, so exp2(-inf) is not 0.
//
// Tried in the forward kernel (2026-11-29, bench/RESULTS.md): moving 1 n8 column group in 8, 4
// or 2 of the d64 softmax's exps here made it 3%, 8% and 11% slower -- the kernel's softmax is
// bound by instruction issue and latency, not by MUFU throughput -- so the kernel does not use it.
#pragma once

#include <cstdint>

namespace hattn::bench {

constexpr float kExp2FmaMinArg = -127.0f;
constexpr float kExp2FmaMaxArg = 127.0f;
constexpr float kRoundToIntMagic = 12582912.0f;  // 1.5 * 2^23
constexpr int kFloatMantissaBits = 23;

// Minimax coefficients of 2^f on [-1/2, 1/2] (relative error), constant term first. Degree 5
// gives 2.3e-7 in f32 Horner (about ex2.approx.f32's own 2^-22.5). (The degree-3 fit tried in
// the kernel, {0.99992807, 0.69326099, 0.24261114, 0.05517167}, gives 7.5e-5.)
template <int kDegree>
__host__ __device__ constexpr float exp2_poly_coeff(int k) {
    static_assert(kDegree == 5, "coefficients exist for degree 5");
    constexpr float c[6] = {1.000000072e+00f, 6.931469671e-01f, 2.402211972e-01f,
                            5.550713276e-02f, 9.675541540e-03f, 1.327647174e-03f};
    return c[k];
}

template <int kDegree>
__device__ __forceinline__ float exp2_fma(float x) {
    x = fminf(fmaxf(x, kExp2FmaMinArg), kExp2FmaMaxArg);
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

}  // namespace hattn::bench
