// hattn/test/reference_test.cpp -- the judges judged (CPU, runs in CI): the 16-bit conversions,
// the comparison helper and the float64 reference attention that the GPU tests rely on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "hattn.h"
#include "reference_test_util.h"
#include "testing/cpu_reference.h"

namespace {

namespace nm = hattn::numerics;
using hattn::test::reference_attention_fp64;

constexpr int kNum16BitPatterns = 1 << 16;

bool is_nan16(uint16_t h, hattn_dtype t) { return std::isnan(nm::half_to_float(h, t)); }

// Every non-NaN 16-bit pattern survives widen-then-narrow unchanged.
TEST(Conversions, RoundTripEveryPattern) {
    for (hattn_dtype t : {HATTN_DTYPE_BF16, HATTN_DTYPE_FP16}) {
        for (int i = 0; i < kNum16BitPatterns; ++i) {
            const uint16_t h = static_cast<uint16_t>(i);
            if (is_nan16(h, t)) {
                EXPECT_TRUE(is_nan16(nm::float_to_half(nm::half_to_float(h, t), t), t));
                continue;
            }
            ASSERT_EQ(nm::float_to_half(nm::half_to_float(h, t), t), h) << "dtype " << t << ", pattern " << i;
        }
    }
}

// Between each pair of adjacent positive 16-bit values a < b: just below the midpoint rounds to
// a, just above to b, and the midpoint itself to the one with an even mantissa (ties to even).
// The midpoints need one more significand bit than the 16-bit format: exact in fp32.
TEST(Conversions, RoundToNearestEvenAtEveryMidpoint) {
    for (hattn_dtype t : {HATTN_DTYPE_BF16, HATTN_DTYPE_FP16}) {
        for (int i = 0; i + 1 < kNum16BitPatterns / 2; ++i) {
            const uint16_t lo = static_cast<uint16_t>(i), hi = static_cast<uint16_t>(i + 1);
            const float a = nm::half_to_float(lo, t), b = nm::half_to_float(hi, t);
            if (std::isnan(a) || std::isnan(b) || std::isinf(a) || std::isinf(b)) continue;
            const float mid = a + (b - a) / 2;
            ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(a) + b) / 2) << "midpoint not exact";
            const uint16_t even = (lo & 1u) == 0 ? lo : hi;
            EXPECT_EQ(nm::float_to_half(mid, t), even) << "dtype " << t << ", between patterns " << i << " and " << i + 1;
            EXPECT_EQ(nm::float_to_half(std::nextafter(mid, 0.f), t), lo) << "dtype " << t << ", pattern " << i;
            EXPECT_EQ(nm::float_to_half(std::nextafter(mid, INFINITY), t), hi) << "dtype " << t << ", pattern " << i;
            EXPECT_EQ(nm::float_to_half(-mid, t), static_cast<uint16_t>(even | 0x8000u)) << "sign, pattern " << i;
        }
    }
}

TEST(Conversions, Fp16OverflowAndUnderflow) {
    EXPECT_EQ(nm::float_to_fp16(65504.f), 0x7BFFu);        // largest finite
    EXPECT_EQ(nm::float_to_fp16(65519.99f), 0x7BFFu);      // below the overflow midpoint
    EXPECT_EQ(nm::float_to_fp16(65520.f), 0x7C00u);        // the midpoint rounds to even: inf
    EXPECT_EQ(nm::float_to_fp16(1e10f), 0x7C00u);
    EXPECT_EQ(nm::float_to_fp16(-INFINITY), 0xFC00u);
    EXPECT_EQ(nm::float_to_fp16(0x1p-24f), 0x0001u);       // smallest subnormal
    EXPECT_EQ(nm::float_to_fp16(0x1p-25f), 0x0000u);       // half of it: tie to even (0)
    EXPECT_EQ(nm::float_to_fp16(0x1.8p-25f), 0x0001u);     // above the tie
    EXPECT_EQ(nm::float_to_fp16(-0.f), 0x8000u);
    EXPECT_TRUE(std::isinf(nm::bf16_to_float(nm::float_to_bf16(std::numeric_limits<float>::max()))));
    EXPECT_TRUE(is_nan16(nm::kPoison16, HATTN_DTYPE_BF16));
    EXPECT_TRUE(is_nan16(nm::kPoison16, HATTN_DTYPE_FP16));
}

// ---- compare ----------------------------------------------------------------------------------

nm::CompareResult compare_vectors(const std::vector<double>& got, const std::vector<double>& ref, nm::Tolerance t) {
    return nm::compare(got.size(), [&](size_t i) { return got[i]; }, [&](size_t i) { return ref[i]; }, t);
}

TEST(Compare, PerElementBoundAndWorstElement) {
    nm::Tolerance t;
    t.atol = 0.01;
    t.rtol = 0.1;
    t.max_rel_l2 = 1.0;
    const std::vector<double> ref = {1.0, 2.0, -3.0, 0.0};
    // Allowed: 0.11, 0.21, 0.31, 0.01.
    EXPECT_TRUE(compare_vectors({1.1, 2.2, -3.3, 0.009}, ref, t).ok);
    const nm::CompareResult r = compare_vectors({1.1, 2.2, -3.3, 0.02}, ref, t);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.num_bad, 1u);
    EXPECT_EQ(r.worst_index, 3u);
    EXPECT_NEAR(r.worst_ratio, 2.0, 1e-12);
    EXPECT_NEAR(r.max_abs_err, 0.3, 1e-12);
}

TEST(Compare, NanAlwaysFailsAndInfinitiesMustMatch) {
    nm::Tolerance loose;
    loose.atol = 1e30;
    loose.rtol = 1e30;
    loose.max_rel_l2 = 1e30;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    EXPECT_FALSE(compare_vectors({nan}, {1.0}, loose).ok);
    EXPECT_FALSE(compare_vectors({1.0}, {nan}, loose).ok);
    EXPECT_EQ(compare_vectors({nan, 1.0}, {1.0, 1.0}, loose).num_nan, 1u);
    EXPECT_TRUE(compare_vectors({-inf, 1.0}, {-inf, 1.0}, loose).ok);
    EXPECT_FALSE(compare_vectors({-1e30, 1.0}, {-inf, 1.0}, loose).ok);
    EXPECT_FALSE(compare_vectors({inf, 1.0}, {-inf, 1.0}, loose).ok);
}

TEST(Compare, RelativeL2IsAGlobalBound) {
    nm::Tolerance t;
    t.atol = 1.0;  // every element passes on its own
    t.rtol = 0;
    t.max_rel_l2 = 0.05;
    const std::vector<double> ref(100, 1.0);
    const std::vector<double> biased(100, 1.1);  // 10% everywhere: each element fine, the whole not
    const nm::CompareResult r = compare_vectors(biased, ref, t);
    EXPECT_EQ(r.num_bad, 0u);
    EXPECT_NEAR(r.rel_l2, 0.1, 1e-12);
    EXPECT_NEAR(r.rmse, 0.1, 1e-12);
    EXPECT_FALSE(r.ok);
}

TEST(Tolerance, OutputBoundFollowsTheRoundingModel) {
    const nm::Tolerance bf = nm::fwd_output_tolerance(HATTN_DTYPE_BF16, 4.0, 1000, 0.0);
    EXPECT_DOUBLE_EQ(bf.rtol, 0x1p-8);
    EXPECT_NEAR(bf.atol, (0x1p-8 + 1e-4) * 4.0, 1e-15);
    EXPECT_DOUBLE_EQ(bf.max_rel_l2, 0x1p-7);
    const nm::Tolerance fp = nm::fwd_output_tolerance(HATTN_DTYPE_FP16, 4.0, 1000, 1e-5);
    EXPECT_DOUBLE_EQ(fp.rtol, 0x1p-11);
    EXPECT_NEAR(fp.atol, (0x1p-11 + 1e-4 + 1e-5 + 1000 * 0x1p-25) * 4.0, 1e-15);
}

// ---- The causal mask contract ----------------------------------------------------------------

TEST(Mask, BottomRightCausal) {
    // sq == sk: the usual lower triangle.
    EXPECT_EQ(nm::visible_keys(0, 5, 5, true), 1);
    EXPECT_EQ(nm::visible_keys(4, 5, 5, true), 5);
    // sq < sk: the last query sees every key, the first sees sk - sq + 1.
    EXPECT_EQ(nm::visible_keys(0, 3, 10, true), 8);
    EXPECT_EQ(nm::visible_keys(2, 3, 10, true), 10);
    // sq > sk: the first sq - sk queries see nothing.
    EXPECT_EQ(nm::visible_keys(0, 10, 3, true), 0);
    EXPECT_EQ(nm::visible_keys(6, 10, 3, true), 0);
    EXPECT_EQ(nm::visible_keys(7, 10, 3, true), 1);
    EXPECT_EQ(nm::visible_keys(9, 10, 3, true), 3);
    EXPECT_EQ(nm::visible_keys(0, 10, 3, false), 3);
}

// ---- The float64 reference ----------------------------------------------------------------------

hattn_fwd_params shape(int b, int hq, int hkv, int sq, int sk, int d) {
    return hattn_fwd_params_contiguous(nullptr, nullptr, nullptr, nullptr, b, hq, hkv, sq, sk, d, HATTN_DTYPE_BF16);
}

std::vector<float> random_vector(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
}

// One key: the softmax is exactly 1, so O is that key's value row and LSE its score.
TEST(Fp64Reference, SingleKey) {
    const int d = 64;
    const hattn_fwd_params p = shape(1, 2, 1, 3, 1, d);
    const std::vector<float> q = random_vector(3 * 2 * d, 1), k = random_vector(d, 2), v = random_vector(d, 3);
    const auto r = reference_attention_fp64(p, q.data(), k.data(), v.data());
    for (int i = 0; i < 3; ++i) {
        for (int h = 0; h < 2; ++h) {
            double dot = 0;
            for (int c = 0; c < d; ++c) dot += static_cast<double>(q[(i * 2 + h) * d + c]) * k[c];
            EXPECT_NEAR(r.lse[h * 3 + i], dot / 8.0, 1e-12);
            for (int c = 0; c < d; ++c) EXPECT_NEAR(r.o[(i * 2 + h) * d + c], v[c], 1e-12);
        }
    }
}

// Identical keys: uniform attention, so O is the mean of V and LSE = score + log(n).
TEST(Fp64Reference, IdenticalKeysAverageV) {
    const int d = 64, sk = 37;
    const hattn_fwd_params p = shape(1, 1, 1, 1, sk, d);
    const std::vector<float> q = random_vector(d, 4), k_row = random_vector(d, 5), v = random_vector(sk * d, 6);
    std::vector<float> k;
    for (int j = 0; j < sk; ++j) k.insert(k.end(), k_row.begin(), k_row.end());
    const auto r = reference_attention_fp64(p, q.data(), k.data(), v.data());
    double dot = 0;
    for (int c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k_row[c];
    EXPECT_NEAR(r.lse[0], dot / 8.0 + std::log(static_cast<double>(sk)), 1e-12);
    for (int c = 0; c < d; ++c) {
        double mean = 0;
        for (int j = 0; j < sk; ++j) mean += v[j * d + c];
        EXPECT_NEAR(r.o[c], mean / sk, 1e-12);
    }
}

// Causal with sq > sk: the first sq - sk rows see no key (O = 0, LSE = -inf); the next row
// sees exactly key 0 (O = v_0).
TEST(Fp64Reference, CausalEmptyRows) {
    const int d = 64, sq = 5, sk = 2;
    hattn_fwd_params p = shape(1, 1, 1, sq, sk, d);
    p.causal = 1;
    const std::vector<float> q = random_vector(sq * d, 7), k = random_vector(sk * d, 8), v = random_vector(sk * d, 9);
    const auto r = reference_attention_fp64(p, q.data(), k.data(), v.data());
    for (int i = 0; i < sq - sk; ++i) {
        EXPECT_EQ(r.lse[i], -std::numeric_limits<double>::infinity()) << "row " << i;
        for (int c = 0; c < d; ++c) EXPECT_EQ(r.o[i * d + c], 0.0);
    }
    for (int c = 0; c < d; ++c) EXPECT_NEAR(r.o[(sq - sk) * d + c], v[c], 1e-12);
    EXPECT_TRUE(std::isfinite(r.lse[sq - 1]));
}

// GQA and strides: query head h reads KV head h / (hq / hkv), through arbitrary strides. Lay out
// the same data twice (packed, and head-major with padding) and demand identical results;
// then permute KV heads and check that exactly the expected query heads change.
TEST(Fp64Reference, GqaAndStridesAgree) {
    const int b = 2, hq = 4, hkv = 2, sq = 6, sk = 9, d = 64, pad = 8;
    const hattn_fwd_params packed = shape(b, hq, hkv, sq, sk, d);
    const std::vector<float> q = random_vector(static_cast<size_t>(b) * sq * hq * d, 10);
    const std::vector<float> k = random_vector(static_cast<size_t>(b) * sk * hkv * d, 11);
    const std::vector<float> v = random_vector(static_cast<size_t>(b) * sk * hkv * d, 12);
    const auto ref = reference_attention_fp64(packed, q.data(), k.data(), v.data());

    // Head-major [b, h, s, d + pad] copies.
    auto to_bhsd = [&](const std::vector<float>& x, int s, int h) { return hattn::test::to_bhsd(x, b, s, h, d, pad); };
    hattn_fwd_params strided = packed;
    strided.q_seq_stride = d + pad;
    strided.q_head_stride = static_cast<int64_t>(sq) * (d + pad);
    strided.q_batch_stride = static_cast<int64_t>(hq) * sq * (d + pad);
    strided.k_seq_stride = strided.v_seq_stride = d + pad;
    strided.k_head_stride = strided.v_head_stride = static_cast<int64_t>(sk) * (d + pad);
    strided.k_batch_stride = strided.v_batch_stride = static_cast<int64_t>(hkv) * sk * (d + pad);
    const auto qs = to_bhsd(q, sq, hq), ks = to_bhsd(k, sk, hkv), vs = to_bhsd(v, sk, hkv);
    const auto r2 = reference_attention_fp64(strided, qs.data(), ks.data(), vs.data());
    EXPECT_EQ(ref.o, r2.o);
    EXPECT_EQ(ref.lse, r2.lse);

    // GQA against MHA with each KV head repeated for its group: query head h must read KV head
    // h / (hq / hkv) (with hq 4, hkv 2: 0, 0, 1, 1; a modulo mapping would give 0, 1, 0, 1).
    const int group = hq / hkv;
    auto repeat_heads = [&](const std::vector<float>& x) {
        std::vector<float> y(static_cast<size_t>(b) * sk * hq * d);
        for (int bi = 0; bi < b; ++bi)
            for (int j = 0; j < sk; ++j)
                for (int h = 0; h < hq; ++h)
                    for (int c = 0; c < d; ++c)
                        y[((static_cast<size_t>(bi) * sk + j) * hq + h) * d + c] =
                            x[((static_cast<size_t>(bi) * sk + j) * hkv + h / group) * d + c];
        return y;
    };
    const std::vector<float> k_rep = repeat_heads(k), v_rep = repeat_heads(v);
    const hattn_fwd_params mha = shape(b, hq, hq, sq, sk, d);
    const auto r3 = reference_attention_fp64(mha, q.data(), k_rep.data(), v_rep.data());
    EXPECT_EQ(ref.o, r3.o);
    EXPECT_EQ(ref.lse, r3.lse);
}

}  // namespace
