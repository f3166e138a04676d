// hattn/src/testing/fp8_reference.h -- the float64 CPU reference of the FP8 pre-pass
// (hattn_fp8_prepass): RoPE in both conventions, the random-sign Hadamard transform with the
// kernel's signs, per-block scales and e4m3 rounding (round to nearest even, saturating to +-448).
//
// Everything up to the block's amax is float64. The last step, scale and round, is done the way
// the kernel does it, in fp32: scale = fp32(448 / fp32(amax)), code = e4m3(fp32(fp32(y) * scale)).
// A float64 scale would round values at or next to an e4m3 tie the other way than any fp32
// kernel can (bf16 inputs, 8 significant bits, land on ties often), so a kernel that quantizes
// exactly like this matches every byte when there is nothing before the scaling (no RoPE, no
// Hadamard). With RoPE or the Hadamard the kernel's fp32 values differ from the float64 ones by
// rounding; fp32_error_bound and e4m3_tie_distance let a test find the bytes where that can flip
// a rounding.
//
// Header-only and CPU-only, so CPU tests can judge it and GPU tests can judge the kernel with it.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "hattn.h"
#include "kernels/fp8_prepass_args.h"  // hadamard_sign_bit: the kernel's own signs

namespace hattn::testing {

static_assert(FLT_EVAL_METHOD == 0, "the fp32 final step needs float arithmetic in single precision");

// ---- e4m3 (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no infinities) ----------------

constexpr double kE4m3Max = 448.0;
constexpr int kE4m3MantissaBits = 3;
constexpr int kE4m3MinNormalExp = -6;
constexpr uint8_t kE4m3NaN = 0x7F;
constexpr uint8_t kE4m3SignBit = 0x80;

inline double e4m3_to_double(uint8_t code) {
    const int exponent = (code >> kE4m3MantissaBits) & 0xF;
    const int mantissa = code & 0x7;
    const double sign = (code & kE4m3SignBit) ? -1.0 : 1.0;
    if ((code & 0x7F) == kE4m3NaN) return std::nan("");
    if (exponent == 0) return sign * std::ldexp(mantissa, kE4m3MinNormalExp - kE4m3MantissaBits);  // subnormal
    return sign * std::ldexp(8 + mantissa, exponent - 7 - kE4m3MantissaBits);
}

// cvt.rn.satfinite.e4m3: round to nearest, ties to even; magnitudes past 448 saturate to 448; NaN
// stays NaN.
inline uint8_t double_to_e4m3(double x) {
    if (std::isnan(x)) return kE4m3NaN;
    const uint8_t sign = std::signbit(x) ? kE4m3SignBit : 0;
    const double a = std::fabs(x);
    if (a >= kE4m3Max) return static_cast<uint8_t>(sign | 0x7E);
    int e = 0;
    std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): binade exponent e - 1
    const int binade = a == 0.0 ? kE4m3MinNormalExp : e - 1;
    const int quantum_exp = (binade < kE4m3MinNormalExp ? kE4m3MinNormalExp : binade) - kE4m3MantissaBits;
    const double units = std::nearbyint(std::ldexp(a, -quantum_exp));  // ties to even (default mode)
    const double r = std::ldexp(units, quantum_exp);
    if (r >= kE4m3Max) return static_cast<uint8_t>(sign | 0x7E);
    if (r < std::ldexp(1.0, kE4m3MinNormalExp)) {  // subnormal (or zero): the mantissa is the units
        return static_cast<uint8_t>(sign | static_cast<uint8_t>(units));
    }
    int re = 0;
    std::frexp(r, &re);
    const int exponent_field = re - 1 + 7;
    const int mantissa = static_cast<int>(std::ldexp(r, kE4m3MantissaBits - (re - 1))) - 8;
    return static_cast<uint8_t>(sign | (exponent_field << kE4m3MantissaBits) | mantissa);
}

// Position of a code on the number line in ulps (sign-magnitude to two's complement), so that
// |ordinal(a) - ordinal(b)| is the distance in e4m3 ulps (+0 and -0 are the same point).
inline int e4m3_ordinal(uint8_t code) {
    const int magnitude = code & 0x7F;
    return (code & kE4m3SignBit) ? -magnitude : magnitude;
}

// Distance from x to the nearest rounding midpoint of e4m3 (halfway between two neighbouring
// codes of x's magnitude; none past 448, where everything saturates). A value computed with an
// error smaller than this rounds to the same code as x.
inline double e4m3_tie_distance(double x) {
    const double a = std::fabs(x);
    if (a >= kE4m3Max) return INFINITY;
    const uint8_t code = double_to_e4m3(a) & 0x7F;
    const double here = e4m3_to_double(code);
    double dist = INFINITY;
    if (code > 0) dist = a - 0.5 * (here + e4m3_to_double(static_cast<uint8_t>(code - 1)));
    if (code < 0x7E) dist = std::min(dist, 0.5 * (here + e4m3_to_double(static_cast<uint8_t>(code + 1))) - a);
    return dist;
}

// ---- The row transforms -----------------------------------------------------------------------

constexpr double kRopeBase = 10000.0;  // angle(p, i) = p * base^(-2i / d), the common choice

// Rotary tables [rows, d / 2] fp32 (hattn_fp8_prepass_params' rope_cos / rope_sin) for positions
// 0 .. rows - 1.
inline void rope_tables(int rows, int d, std::vector<float>* cos_t, std::vector<float>* sin_t) {
    const int half = d / 2;
    cos_t->resize(static_cast<size_t>(rows) * half);
    sin_t->resize(cos_t->size());
    for (int p = 0; p < rows; ++p) {
        for (int i = 0; i < half; ++i) {
            const double angle = p * std::pow(kRopeBase, -2.0 * i / d);
            (*cos_t)[static_cast<size_t>(p) * half + i] = static_cast<float>(std::cos(angle));
            (*sin_t)[static_cast<size_t>(p) * half + i] = static_cast<float>(std::sin(angle));
        }
    }
}

// The columns of RoPE pair i: (2i, 2i + 1) interleaved, (i, i + d/2) half-split.
inline int rope_first(hattn_rope rope, int i) { return rope == HATTN_ROPE_INTERLEAVED ? 2 * i : i; }
inline int rope_second(hattn_rope rope, int d, int i) { return rope == HATTN_ROPE_INTERLEAVED ? 2 * i + 1 : i + d / 2; }

// Rotates one row of d values in place with table rows cos_row / sin_row (d / 2 values each).
inline void rope_row(double* x, int d, hattn_rope rope, const float* cos_row, const float* sin_row) {
    if (rope == HATTN_ROPE_NONE) return;
    for (int i = 0; i < d / 2; ++i) {
        const int ia = rope_first(rope, i), ib = rope_second(rope, d, i);
        const double c = cos_row[i], s = sin_row[i];
        const double a = x[ia], b = x[ib];
        x[ia] = a * c - b * s;
        x[ib] = a * s + b * c;
    }
}

// How the kernel that runs evaluates RoPE before the Hadamard (kernels/fp8_prepass.cuh):
//   kFp32       the butterfly kernels: in fp32, the result stays fp32 (the error bound covers it);
//   kRotateBf16 the tensor-core kernel: a' = fma(a, cos, -(b sin)), b' = fma(a, sin, b cos) in
//               fp32, each rounded to nearest-even bf16 for the mma. The reference does the same
//               operations (they are exactly rounded, so the host gets the kernel's bits), and the
//               Hadamard then starts from exact values.
enum class RopeEval { kFp32, kRotateBf16 };

inline float round_to_bf16(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);  // to nearest, ties to even (finite inputs)
    u &= 0xFFFF0000u;
    std::memcpy(&x, &u, sizeof x);
    return x;
}

// RoPE of one row as the tensor-core kernel evaluates it (RopeEval::kRotateBf16).
inline void rope_row_bf16(double* x, int d, hattn_rope rope, const float* cos_row, const float* sin_row) {
    if (rope == HATTN_ROPE_NONE) return;
    for (int i = 0; i < d / 2; ++i) {
        const int ia = rope_first(rope, i), ib = rope_second(rope, d, i);
        const float c = cos_row[i], s = sin_row[i];
        const float a = static_cast<float>(x[ia]), b = static_cast<float>(x[ib]);
        // fp32 products: the double product of two floats is exact, so one rounding to float is the
        // fp32 multiply (no contraction into an fma can change it).
        const float bs = static_cast<float>(static_cast<double>(b) * s);
        const float bc = static_cast<float>(static_cast<double>(b) * c);
        x[ia] = round_to_bf16(std::fma(a, c, -bs));
        x[ib] = round_to_bf16(std::fma(a, s, bc));
    }
}

// +1 or -1: column c of the diagonal D.
inline double hadamard_sign(uint64_t seed, int column) { return fp8::hadamard_sign_bit(seed, column) ? -1.0 : 1.0; }

// x <- x D H / sqrt(d) (H Sylvester, symmetric), by the fast Walsh-Hadamard transform.
inline void hadamard_row(double* x, int d, uint64_t seed) {
    for (int c = 0; c < d; ++c) x[c] *= hadamard_sign(seed, c);
    for (int stride = 1; stride < d; stride *= 2) {
        for (int e = 0; e < d; ++e) {
            if ((e & stride) != 0) continue;
            const double a = x[e], b = x[e + stride];
            x[e] = a + b;
            x[e + stride] = a - b;
        }
    }
    const double norm = 1.0 / std::sqrt(static_cast<double>(d));
    for (int c = 0; c < d; ++c) x[c] *= norm;
}

// The dense d x d matrix M = D H / sqrt(d) (row-major), for tests of hadamard_row.
inline std::vector<double> hadamard_matrix(int d, uint64_t seed) {
    std::vector<double> m(static_cast<size_t>(d) * d);
    const double norm = 1.0 / std::sqrt(static_cast<double>(d));
    for (int r = 0; r < d; ++r) {
        for (int c = 0; c < d; ++c) {
            const double h = (__builtin_popcount(static_cast<unsigned>(r & c)) & 1) ? -1.0 : 1.0;
            m[static_cast<size_t>(r) * d + c] = hadamard_sign(seed, r) * h * norm;
        }
    }
    return m;
}

// ---- The whole pre-pass of one tensor ---------------------------------------------------------

struct Fp8TensorLayout {
    int batch = 0, seqlen = 0, heads = 0, head_dim = 0;
    int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;  // of the float input, in elements
};

struct Fp8ReferenceResult {
    std::vector<double> transformed;       // [b, s, h, d] packed: after RoPE and Hadamard, before scaling
    std::vector<double> fp32_error_bound;  // [b, s, h, d]: |fp32 evaluation - transformed| is below this
    std::vector<uint8_t> e4m3;             // [b, s, h, d] packed, scaled and rounded in fp32 (see top)
    std::vector<double> descale;           // [b, h, ceil(s / HATTN_FP8_BLOCK_ROWS)]: amax / 448, float64
};

// A first-order bound on the error of evaluating RoPE and the Hadamard transform of one row in
// fp32 (unit roundoff u = 2^-24), for any evaluation order of the butterfly: RoPE's
// a cos - b sin (a product and an fma) errs by at most 2u (|a cos| + |b sin|); each of the log2(d)
// butterfly levels of an output adds at most u times the sum of the magnitudes below it (at most
// sum_c |x_c| per level), the 1/sqrt(d) multiply (and its constant, inexact at d = 128) 2u of
// the output. m[c] receives the magnitudes |x_c| (after RoPE: |a cos| + |b sin|); the bound per
// output element is written to bound[c].
inline void fp32_error_bound_row(const double* m, int d, bool rope, bool hadamard, double* bound) {
    constexpr double kUnitRoundoff = 0x1p-24;
    const double rope_levels = rope ? 2.0 : 0.0;
    if (!hadamard) {
        for (int c = 0; c < d; ++c) bound[c] = rope_levels * kUnitRoundoff * m[c];
        return;
    }
    double sum = 0.0;
    for (int c = 0; c < d; ++c) sum += m[c];
    const double levels = std::log2(static_cast<double>(d)) + rope_levels + 2.0;
    const double b = levels * kUnitRoundoff * sum / std::sqrt(static_cast<double>(d));
    for (int c = 0; c < d; ++c) bound[c] = b;
}

inline int fp8_blocks(int seqlen) { return (seqlen + HATTN_FP8_BLOCK_ROWS - 1) / HATTN_FP8_BLOCK_ROWS; }

// x: a host float copy laid out as `layout` says. rope_cos / rope_sin: [rows, d / 2]; sequence row
// i uses table row i + rope_offset.
inline Fp8ReferenceResult reference_fp8_prepass_fp64(const float* x, const Fp8TensorLayout& layout, hattn_rope rope,
                                                     const float* rope_cos, const float* rope_sin, int rope_offset,
                                                     bool hadamard, uint64_t seed,
                                                     RopeEval rope_eval = RopeEval::kFp32, bool per_head_amax = false) {
    const int d = layout.head_dim;
    const int blocks = fp8_blocks(layout.seqlen);
    Fp8ReferenceResult r;
    const size_t n = static_cast<size_t>(layout.batch) * layout.seqlen * layout.heads * d;
    r.transformed.assign(n, 0.0);
    r.fp32_error_bound.assign(n, 0.0);
    r.e4m3.assign(n, 0);
    std::vector<double> magnitude(d);
    r.descale.assign(static_cast<size_t>(layout.batch) * layout.heads * blocks, 0.0);
    auto packed = [&](int b, int s, int h) { return ((static_cast<size_t>(b) * layout.seqlen + s) * layout.heads + h) * d; };
    for (int b = 0; b < layout.batch; ++b) {
        for (int s = 0; s < layout.seqlen; ++s) {
            for (int h = 0; h < layout.heads; ++h) {
                const float* src = x + b * layout.batch_stride + s * layout.seq_stride + h * layout.head_stride;
                double* row = &r.transformed[packed(b, s, h)];
                for (int c = 0; c < d; ++c) row[c] = src[c];
                for (int c = 0; c < d; ++c) magnitude[c] = std::fabs(row[c]);
                const bool rounded_rope = rope != HATTN_ROPE_NONE && rope_eval == RopeEval::kRotateBf16;
                if (rounded_rope) {
                    // The rotated bf16 values are the kernel's exactly: the error starts after them.
                    const size_t table_row = static_cast<size_t>(s + rope_offset) * (d / 2);
                    rope_row_bf16(row, d, rope, rope_cos + table_row, rope_sin + table_row);
                    for (int c = 0; c < d; ++c) magnitude[c] = std::fabs(row[c]);
                } else if (rope != HATTN_ROPE_NONE) {
                    const size_t table_row = static_cast<size_t>(s + rope_offset) * (d / 2);
                    rope_row(row, d, rope, rope_cos + table_row, rope_sin + table_row);
                    // |a cos| + |b sin| and |a sin| + |b cos|: the same rotation with magnitudes.
                    for (int i = 0; i < d / 2; ++i) {
                        const int ia = rope_first(rope, i), ib = rope_second(rope, d, i);
                        const double c = std::fabs(rope_cos[table_row + i]), sn = std::fabs(rope_sin[table_row + i]);
                        const double ma = magnitude[ia], mb = magnitude[ib];
                        magnitude[ia] = ma * c + mb * sn;
                        magnitude[ib] = ma * sn + mb * c;
                    }
                }
                fp32_error_bound_row(magnitude.data(), d, rope != HATTN_ROPE_NONE && !rounded_rope, hadamard,
                                     &r.fp32_error_bound[packed(b, s, h)]);
                if (hadamard) hadamard_row(row, d, seed);
            }
        }
    }
    for (int b = 0; b < layout.batch; ++b) {
        for (int h = 0; h < layout.heads; ++h) {
            // per_head_amax (HATTN_FP8_PREPASS_V_PER_HEAD): every block takes its head's amax.
            double head_amax = 0.0;
            if (per_head_amax) {
                for (int s = 0; s < layout.seqlen; ++s)
                    for (int c = 0; c < d; ++c) head_amax = std::fmax(head_amax, std::fabs(r.transformed[packed(b, s, h) + c]));
            }
            for (int blk = 0; blk < blocks; ++blk) {
                const int s0 = blk * HATTN_FP8_BLOCK_ROWS;
                const int s1 = s0 + HATTN_FP8_BLOCK_ROWS < layout.seqlen ? s0 + HATTN_FP8_BLOCK_ROWS : layout.seqlen;
                double amax = head_amax;
                if (!per_head_amax) {
                    for (int s = s0; s < s1; ++s) {
                        for (int c = 0; c < d; ++c) amax = std::fmax(amax, std::fabs(r.transformed[packed(b, s, h) + c]));
                    }
                }
                r.descale[(static_cast<size_t>(b) * layout.heads + h) * blocks + blk] = amax / kE4m3Max;
                // The final step in fp32, as the kernel does it (float arithmetic on the host is
                // IEEE single precision: SSE on x86-64, no wider intermediates).
                const float amax32 = static_cast<float>(amax);
                const float scale32 =
                    amax32 > 0.f ? std::fmin(static_cast<float>(kE4m3Max) / amax32, FLT_MAX) : 0.f;
                for (int s = s0; s < s1; ++s) {
                    for (int c = 0; c < d; ++c) {
                        const size_t i = packed(b, s, h) + c;
                        const float scaled = static_cast<float>(r.transformed[i]) * scale32;
                        r.e4m3[i] = double_to_e4m3(scaled);
                    }
                }
            }
        }
    }
    return r;
}

}  // namespace hattn::testing
