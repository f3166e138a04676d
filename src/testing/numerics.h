// hattn/src/testing/numerics.h -- host-side numerics shared by the CLI and the tests: 16-bit float
// conversions, the forward and backward passes' error budgets, and an element-by-element
// comparison.
//
// Header-only and CPU-only (no CUDA headers beyond hattn.h's dtype enum) so CPU tests can use it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>

#include "hattn.h"

namespace hattn::numerics {

// ---- 16-bit floats as raw bits ---------------------------------------------------------------

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
}

inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
}

// bf16 is the top half of an fp32: widening is a shift.
inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// Round to nearest, ties to even (what cvt.rn.bf16.f32 does). NaN stays a quiet NaN.
inline uint16_t float_to_bf16(float f) {
    const uint32_t u = float_bits(f);
    if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x0040u);
    const uint32_t lsb = (u >> 16) & 1u;
    const uint32_t rounding_bias = 0x7FFFu + lsb;
    return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
inline float fp16_to_float(uint16_t h) {
    const uint32_t sign = (h >> 15) & 1u;
    const uint32_t exponent = (h >> 10) & 0x1Fu;
    const uint32_t mantissa = h & 0x3FFu;
    float magnitude;
    if (exponent == 0) {
        magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // subnormal: m * 2^-24
    } else if (exponent == 0x1F) {
        magnitude = mantissa == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
    } else {
        magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
    }
    return sign ? -magnitude : magnitude;
}

// Round to nearest, ties to even, with subnormals and overflow to infinity (cvt.rn.f16.f32).
inline uint16_t float_to_fp16(float f) {
    const uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
    if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7E00u);
    const double a = std::fabs(static_cast<double>(f));
    // Halfway between the largest finite fp16 (65504) and 2^16: from here on, RNE gives inf.
    constexpr double kOverflowThreshold = 65520.0;
    if (a >= kOverflowThreshold) return static_cast<uint16_t>(sign | 0x7C00u);
    // Quantum (spacing) of fp16 numbers around a: 2^(e-10) for normals, 2^-24 for subnormals.
    int e = 0;
    std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1): the binade exponent is e - 1
    const int quantum_exp = (e - 1 < -14) ? -24 : (e - 1) - 10;
    const double q = std::ldexp(a, -quantum_exp);  // a in units of the quantum (exact: power-of-2 scale)
    double r = std::nearbyint(q);                 // default FP rounding mode: ties to even
    // Re-encode r * 2^quantum_exp. Rounding may carry into the next binade; handle by value.
    const double value = std::ldexp(r, quantum_exp);
    if (value == 0.0) return sign;
    int ve = 0;
    std::frexp(value, &ve);
    const int binade = ve - 1;
    if (binade < -14) {  // subnormal
        return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::ldexp(value, 24)));
    }
    const uint16_t exponent_field = static_cast<uint16_t>(binade + 15);
    if (exponent_field >= 0x1F) return static_cast<uint16_t>(sign | 0x7C00u);
    const uint16_t mantissa = static_cast<uint16_t>(std::ldexp(value, 10 - binade) - 1024.0);
    return static_cast<uint16_t>(sign | (exponent_field << 10) | mantissa);
}

inline float half_to_float(uint16_t h, hattn_dtype dtype) {
    return dtype == HATTN_DTYPE_BF16 ? bf16_to_float(h) : fp16_to_float(h);
}

inline uint16_t float_to_half(float f, hattn_dtype dtype) {
    return dtype == HATTN_DTYPE_BF16 ? float_to_bf16(f) : float_to_fp16(f);
}

// A 16-bit NaN in both formats (all exponent and mantissa bits set): the "poison" pattern
// written into outputs before a run, so an element the kernel forgot to write fails the check.
constexpr uint16_t kPoison16 = 0xFFFFu;
constexpr uint32_t kPoison32 = 0xFFFFFFFFu;  // fp32 NaN

// Unit roundoff u (half an ulp of 1): RNE rounding of x has |error| <= u * |x| for normals.
inline double unit_roundoff(hattn_dtype dtype) {
    constexpr int kBf16SignificandBits = 8;   // 7 stored + implicit 1
    constexpr int kFp16SignificandBits = 11;  // 10 stored + implicit 1
    return std::ldexp(1.0, -(dtype == HATTN_DTYPE_BF16 ? kBf16SignificandBits : kFp16SignificandBits));
}

// ---- The causal mask contract ------------------------------------------------------------------

// Number of keys query row i sees: all seqlen_k without a mask; with hattn's bottom-right causal
// mask, key j is visible iff j <= i + seqlen_k - seqlen_q (so the count is clamped to
// [0, seqlen_k]; rows i < seqlen_q - seqlen_k see nothing).
inline int visible_keys(int i, int seqlen_q, int seqlen_k, bool causal) {
    if (!causal) return seqlen_k;
    const int64_t last = static_cast<int64_t>(i) + seqlen_k - seqlen_q;  // last visible key index
    if (last < 0) return 0;
    return last + 1 < seqlen_k ? static_cast<int>(last + 1) : seqlen_k;
}

// Number of query rows (of one head) that see key j: the rows i >= j - (seqlen_k - seqlen_q).
inline int rows_seeing_key(int j, int seqlen_q, int seqlen_k, bool causal) {
    if (!causal) return seqlen_q;
    const int64_t first = static_cast<int64_t>(j) - seqlen_k + seqlen_q;  // first row that sees key j
    if (first >= seqlen_q) return 0;
    return first <= 0 ? seqlen_q : static_cast<int>(seqlen_q - first);
}

// ---- The forward pass's error budget ------------------------------------------------------------

struct Tolerance {
    double atol = 0;        // per element: |got - ref| <= atol + rtol * |ref|
    double rtol = 0;
    double max_rel_l2 = 0;  // ||got - ref||_2 / ||ref||_2 over the whole tensor
};

// Tolerance for O (16-bit) against an exact reference, derived from the kernel's roundings.
//   O_i = sum_j p_j v_j / l with p_j = exp(s_j - m) in [0, 1], l = sum_j p_j >= 1 (the row max
//   contributes exactly 1). The kernel
//   (1) rounds every p_j to 16 bits before the P V GEMM: relative error <= u each, so
//       |sum_j d_j p_j v_j| / l <= u * max|v|                            -> atol term u * max|v|;
//   (2) in fp16 only, p_j below 2^-24 underflows: each loses <= 2^-25 absolute, and there are at
//       most seqlen_k of them                                              -> seqlen_k * 2^-25 * max|v|;
//   (3) rounds O to 16 bits once at the end: relative error <= u        -> rtol = u;
//   (4) accumulates in fp32 (tile by tile, ~seqlen_k / 64 sequential adds plus the tensor core's
//       in-tile sum): a few 1e-5 relative at 16k keys; kAccumulationSlack = 1e-4 covers it with
//       margin for the tensor core's internal alignment                    -> 1e-4 * max|v|.
//   `reference_rel_err` is the reference's own error relative to max|v| (0 for fp64, ~1e-5 for
//   the fp32 GPU reference).
//   The L2 bound: (1) and (3) are independent roundings with RMS ~u/sqrt(3) each relative to
//   |O| for zero-mean V, ~0.8u together; 2u leaves a 2.4x margin yet still catches a
//   systematic error of one rounding step (e.g. truncation instead of round-to-nearest twice).
inline Tolerance fwd_output_tolerance(hattn_dtype dtype, double max_abs_v, int seqlen_k, double reference_rel_err) {
    constexpr double kAccumulationSlack = 1e-4;
    constexpr double kFp16UnderflowLoss = 0x1p-25;  // half the smallest fp16 subnormal
    const double u = unit_roundoff(dtype);
    Tolerance t;
    double atol = u + kAccumulationSlack + reference_rel_err;
    if (dtype == HATTN_DTYPE_FP16) atol += static_cast<double>(seqlen_k) * kFp16UnderflowLoss;
    t.atol = atol * max_abs_v;
    t.rtol = u;
    t.max_rel_l2 = 2.0 * u;
    return t;
}

// Tolerance for LSE (fp32, natural log). The kernel computes m + log(l) in fp32 from fp32 scores
// (exact 16-bit products, fp32 sums over head_dim), ex2.approx (rel. err ~2^-22) and an fp32 row
// sum; the realistic error is ~1e-6 absolute for |LSE| ~ 10. The bounds leave ~100x margin and
// still catch a wrong base (log2 vs ln: a 30% error), a missing scale or a stale row max.
inline Tolerance fwd_lse_tolerance() {
    Tolerance t;
    t.atol = 2e-4;
    t.rtol = 1e-5;
    t.max_rel_l2 = 1e-5;
    return t;
}

// ---- The backward pass's error budget -------------------------------------------------------------

// Tolerance for one gradient (dQ, dK or dV, 16-bit) against a reference that also gives, per
// element e, the weights W_e (rounded terms) and C_e (fp32 cancellation; 0 for dV) of
// cpu_reference.h / gpu_reference.h, and the number of terms n_e of its sum. Per element
//     |got - ref| <= weight_coef * W_e + cancel_coef * C_e + per_term * n_e + output_floor + rtol * |ref|
// and over the whole tensor
//     ||got - ref||_2 <= max_rel_l2 * ||ref||_2 + sqrt(sum_e floor_e^2).
// Derivation. Each gradient is one GEMM-like sum over the visible (row, key) pairs:
//     dV_j = sum_i P_ij dO_i,   dK_j = scale sum_i dS_ij q_i,   dQ_i = scale sum_j dS_ij k_j,
// with dS_ij = P_ij (dP_ij - D_i), dP_ij = dO_i . v_j, D_i = dO_i . O_i; the references take O as
// the 16-bit O the kernel received, so that rounding is common to both. The kernel keeps P, dP, D
// and dS in fp32 and
//   (1) rounds P (for dV) and dS (for dK, dQ) to 16 bits before the GEMMs: |error| <= u |x| + 2^-25
//       (the second term only for fp16, whose subnormals below 2^-14 have an absolute spacing of
//       2^-24; bf16's reach 2^-126, negligible). Summed: u * sum |terms| = u * W_e, and
//       2^-25 * max|B| per term, B the other factor (dO; scale*q; scale*k)  -> per_term;
//   (2) forms dP - D from two fp32 sums over head_dim: an absolute error of a few 2^-24 (at most
//       head_dim * 2^-24 = 1.5e-5 at d 256) times |dO|.|v| + |dO|.|O|, which C_e sums with the
//       same factors as W_e. It matters where dP and D cancel (seqlen_k = 1 makes dS = 0 exactly:
//       dQ = dK = 0 up to this error)                                          -> cancel_coef = 1e-4;
//   (3) rounds the result to 16 bits once: rtol = u, plus (fp16) 2^-25 in the subnormal range
//                                                                           -> output_floor;
//   (4) accumulates in fp32 and takes exp2 of an fp32 LSE: a few 1e-6 of W_e; kAccumulationSlack
//       = 1e-4 covers it with the tensor core's internal alignment, as for the forward.
//   `reference_rel_err` is the reference's own error relative to W_e and C_e (0 for fp64).
// The L2 bound: (1) and (3) are independent roundings, each with an RMS of at most u/sqrt(3)
// relative to its value; with random-sign terms their sum keeps that relative size, ~u/sqrt(3) to
// 0.8u for the gradient (a float64 model of the kernel's roundings, test/reference_bwd_test.cpp,
// measures 0.4-0.7u for bf16 and fp16, head dims 64-128, lengths 1-4097, full, causal and GQA);
// 2u leaves ~3x margin, as the forward's. The floor only matters where the exact gradient is ~0: kNoise * (W_e
// + C_e) for the fp32 arithmetic, plus the RMS of the fp16 underflows, (2^-24 / sqrt(12)) * max|B|
// * sqrt(n_e).
struct GradientTolerance {
    double weight_coef = 0;   // per unit of W_e
    double cancel_coef = 0;   // per unit of C_e
    double per_term = 0;      // per term of the sum (fp16 underflow)
    double output_floor = 0;  // fp16: the output's own rounding in the subnormal range
    double rtol = 0;
    double max_rel_l2 = 0;
    double noise_coef = 0;    // L2 floor, per unit of W_e + C_e
    double per_term_rms = 0;  // L2 floor, per sqrt(term)

    double atol(double weight, double cancel, double terms) const {
        return weight_coef * weight + cancel_coef * cancel + per_term * terms + output_floor;
    }
    double floor(double weight, double cancel, double terms) const {
        const double noise = noise_coef * (weight + cancel);
        return std::sqrt(noise * noise + per_term_rms * per_term_rms * terms);
    }
};

// `max_abs_operand` is max|B| for the gradient: max|dO| for dV, scale * max|q| for dK, scale *
// max|k| for dQ.
inline GradientTolerance bwd_gradient_tolerance(hattn_dtype dtype, double max_abs_operand, double reference_rel_err) {
    constexpr double kAccumulationSlack = 1e-4;
    constexpr double kCancellation = 1e-4;           // (2): ~7x d * 2^-24 at d 256
    constexpr double kNoise = 1e-5;                  // fp32 arithmetic relative to W_e + C_e
    constexpr double kFp16UnderflowLoss = 0x1p-25;   // half the smallest fp16 subnormal
    const double kFp16UnderflowRms = 0x1p-24 / std::sqrt(12.0);  // uniform over one spacing
    const double u = unit_roundoff(dtype);
    const bool fp16 = dtype == HATTN_DTYPE_FP16;
    GradientTolerance t;
    t.weight_coef = u + kAccumulationSlack + reference_rel_err;
    t.cancel_coef = kCancellation + reference_rel_err;
    t.per_term = fp16 ? kFp16UnderflowLoss * max_abs_operand : 0.0;
    t.output_floor = fp16 ? kFp16UnderflowLoss : 0.0;
    t.rtol = u;
    t.max_rel_l2 = 2.0 * u;
    t.noise_coef = kNoise + reference_rel_err;
    t.per_term_rms = fp16 ? kFp16UnderflowRms * max_abs_operand : 0.0;
    return t;
}

// ---- Comparison ------------------------------------------------------------------------------

struct CompareResult {
    size_t count = 0;       // elements compared
    size_t num_bad = 0;     // elements outside atol + rtol * |ref| (NaN included)
    size_t num_nan = 0;     // NaN in got or ref: always a failure
    bool has_worst = false;
    size_t worst_index = 0;  // the element with the largest error / allowed ratio
    double worst_got = 0, worst_ref = 0, worst_ratio = 0;
    double max_abs_err = 0;  // over elements where both sides are finite
    double rel_l2 = 0;       // ||got - ref|| / ||ref|| over finite reference elements
    double rmse = 0;         // sqrt(mean (got - ref)^2) over finite reference elements
    double l2_floor = 0;     // absolute allowance added to the L2 bound (0 unless given)
    bool ok = false;         // num_bad == 0 and ||got - ref|| <= max_rel_l2 * ||ref|| + l2_floor

    std::string summary() const {
        std::ostringstream s;
        s << (ok ? "PASS" : "FAIL") << ": " << count << " elements, " << num_bad << " outside tolerance ("
          << num_nan << " NaN), max abs err " << max_abs_err << ", rel L2 " << rel_l2 << ", RMSE " << rmse;
        if (l2_floor > 0) s << ", L2 floor " << l2_floor;
        if (has_worst) {
            s << "; worst at flat index " << worst_index << ": got " << worst_got << ", ref " << worst_ref
              << " (error / allowed = " << worst_ratio << ")";
        }
        return s.str();
    }
};

// Compares got_at(i) with ref_at(i) for i in [0, n), element i within atol_at(i) + rtol * |ref|, and
// the whole within ||got - ref||_2 <= max_rel_l2 * ||ref||_2 + sqrt(sum_i floor_at(i)^2). All are
// callables of the index returning double, so the caller handles layouts (strided output vs packed
// reference), element types and per-element bounds. Infinite reference values (LSE of a fully
// masked row is -inf) must be matched exactly.
template <class GotAt, class RefAt, class AtolAt, class FloorAt>
CompareResult compare_elementwise(size_t n, GotAt got_at, RefAt ref_at, AtolAt atol_at, FloorAt floor_at, double rtol,
                                  double max_rel_l2) {
    CompareResult r;
    r.count = n;
    double err_sq = 0, ref_sq = 0, floor_sq = 0;
    size_t finite_count = 0;
    for (size_t i = 0; i < n; ++i) {
        const double got = got_at(i);
        const double ref = ref_at(i);
        double ratio;
        if (std::isnan(got) || std::isnan(ref)) {
            ++r.num_nan;
            ratio = std::numeric_limits<double>::infinity();
        } else if (std::isinf(ref) || std::isinf(got)) {
            ratio = got == ref ? 0.0 : std::numeric_limits<double>::infinity();
        } else {
            const double err = std::fabs(got - ref);
            const double allowed = atol_at(i) + rtol * std::fabs(ref);
            ratio = allowed > 0 ? err / allowed : (err > 0 ? std::numeric_limits<double>::infinity() : 0.0);
            if (err > r.max_abs_err) r.max_abs_err = err;
            err_sq += err * err;
            ref_sq += ref * ref;
            const double floor = floor_at(i);
            floor_sq += floor * floor;
            ++finite_count;
        }
        if (ratio > 1.0) ++r.num_bad;
        if (!r.has_worst || ratio > r.worst_ratio) {
            r.has_worst = true;
            r.worst_index = i;
            r.worst_got = got;
            r.worst_ref = ref;
            r.worst_ratio = ratio;
        }
    }
    if (ref_sq > 0) {
        r.rel_l2 = std::sqrt(err_sq / ref_sq);
    } else {
        r.rel_l2 = err_sq > 0 ? std::numeric_limits<double>::infinity() : 0.0;
    }
    r.rmse = finite_count > 0 ? std::sqrt(err_sq / static_cast<double>(finite_count)) : 0.0;
    r.l2_floor = std::sqrt(floor_sq);
    r.ok = r.num_bad == 0 && r.num_nan == 0 && std::sqrt(err_sq) <= max_rel_l2 * std::sqrt(ref_sq) + r.l2_floor;
    return r;
}

// One tolerance for every element (the forward's O and LSE).
template <class GotAt, class RefAt>
CompareResult compare(size_t n, GotAt got_at, RefAt ref_at, const Tolerance& tol) {
    return compare_elementwise(
        n, got_at, ref_at, [&tol](size_t) { return tol.atol; }, [](size_t) { return 0.0; }, tol.rtol,
        tol.max_rel_l2);
}

// A gradient against a reference with per-element weights W_e (weight_at) and C_e (cancel_at; 0
// for dV) and term counts (terms_at).
template <class GotAt, class RefAt, class WeightAt, class CancelAt, class TermsAt>
CompareResult compare_gradient(size_t n, GotAt got_at, RefAt ref_at, WeightAt weight_at, CancelAt cancel_at,
                               TermsAt terms_at, const GradientTolerance& tol) {
    return compare_elementwise(
        n, got_at, ref_at, [&](size_t i) { return tol.atol(weight_at(i), cancel_at(i), terms_at(i)); },
        [&](size_t i) { return tol.floor(weight_at(i), cancel_at(i), terms_at(i)); }, tol.rtol, tol.max_rel_l2);
}

// "[b, s, h, d]" for a flat index into a packed [dim0, dim1, dim2, dim3] tensor.
inline std::string describe_index(size_t flat, const int64_t dims[4]) {
    int64_t idx[4];
    int64_t rest = static_cast<int64_t>(flat);
    for (int i = 3; i >= 0; --i) {
        idx[i] = rest % dims[i];
        rest /= dims[i];
    }
    std::ostringstream s;
    s << "[" << idx[0] << ", " << idx[1] << ", " << idx[2] << ", " << idx[3] << "]";
    return s.str();
}

}  // namespace hattn::numerics
