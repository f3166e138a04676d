// hattn/test/reference_bwd_test.cpp -- the backward's judges judged (CPU, runs in CI): the float64
// backward reference against finite differences of the float64 forward, its layouts, and the
// gradient tolerance against a float64 model of a kernel's roundings (it must admit the model and
// reject wrong gradients).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "hattn.h"
#include "reference_test_util.h"
#include "testing/cpu_reference.h"

namespace {

namespace nm = hattn::numerics;
using hattn::test::BackwardReferenceResult;
using hattn::test::reference_attention_backward_fp64;
using hattn::test::reference_attention_fp64;

hattn_bwd_params shape(int b, int hq, int hkv, int sq, int sk, int d, bool causal, hattn_dtype dtype = HATTN_DTYPE_BF16) {
    hattn_bwd_params p = hattn_bwd_params_contiguous(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                     nullptr, nullptr, b, hq, hkv, sq, sk, d, dtype);
    p.causal = causal ? 1 : 0;
    return p;
}

size_t q_elems(const hattn_bwd_params& p) { return static_cast<size_t>(p.batch) * p.seqlen_q * p.heads_q * p.head_dim; }
size_t kv_elems(const hattn_bwd_params& p) { return static_cast<size_t>(p.batch) * p.seqlen_k * p.heads_kv * p.head_dim; }

// Multiples of 2^-6 in [-2, 2]: x +- 2^-10 is exact in fp32, so a finite difference sees only the
// function's own curvature.
std::vector<float> dyadic_vector(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> pick(-128, 128);
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(pick(rng)) / 64.f;
    return v;
}

// N(0, 1) rounded to the 16-bit dtype, as the kernels see their inputs.
std::vector<float> normal_vector(size_t n, hattn_dtype dtype, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> v(n);
    for (float& x : v) x = nm::half_to_float(nm::float_to_half(normal(rng), dtype), dtype);
    return v;
}

// L = sum(dO * O) through the float64 forward: dL/dq, dL/dk, dL/dv are the backward's dq, dk, dv.
double loss(const hattn_bwd_params& p, const std::vector<float>& q, const std::vector<float>& k,
            const std::vector<float>& v, const std::vector<float>& dout) {
    const hattn::test::ReferenceResult r = reference_attention_fp64(p, q.data(), k.data(), v.data());
    double l = 0;
    for (size_t i = 0; i < r.o.size(); ++i) l += r.o[i] * dout[i];
    return l;
}

struct FdCase {
    int b, hq, hkv, sq, sk, d;
    bool causal;
    float scale;
};

// Central differences, step 2^-10, on every input element: truncation error ~h^2/6 * L''' (~1e-7).
TEST(BwdFp64Reference, MatchesFiniteDifferencesOfTheForward) {
    constexpr float kStep = 0x1p-10f;
    constexpr double kTolerance = 1e-5;
    const FdCase cases[] = {{1, 2, 1, 5, 7, 8, false, 0.37f}, {1, 2, 1, 5, 7, 8, true, 0.37f},
                            {2, 4, 2, 7, 3, 4, true, 0.f},    {1, 1, 1, 3, 9, 8, true, 0.5f},
                            {1, 3, 3, 1, 1, 4, false, 0.f}};
    uint64_t seed = 100;
    for (const FdCase& c : cases) {
        hattn_bwd_params p = shape(c.b, c.hq, c.hkv, c.sq, c.sk, c.d, c.causal);
        p.softmax_scale = c.scale;
        SCOPED_TRACE("b " + std::to_string(c.b) + " hq " + std::to_string(c.hq) + " hkv " + std::to_string(c.hkv) +
                     " sq " + std::to_string(c.sq) + " sk " + std::to_string(c.sk) + (c.causal ? " causal" : " full"));
        std::vector<float> q = dyadic_vector(q_elems(p), seed++), k = dyadic_vector(kv_elems(p), seed++);
        std::vector<float> v = dyadic_vector(kv_elems(p), seed++), dout = dyadic_vector(q_elems(p), seed++);
        const BackwardReferenceResult r =
            reference_attention_backward_fp64(p, q.data(), k.data(), v.data(), dout.data());
        struct Input {
            const char* name;
            std::vector<float>* x;
            const std::vector<double>* grad;
        } inputs[] = {{"q", &q, &r.dq}, {"k", &k, &r.dk}, {"v", &v, &r.dv}};
        for (const Input& in : inputs) {
            for (size_t e = 0; e < in.x->size(); ++e) {
                const float saved = (*in.x)[e];
                (*in.x)[e] = saved + kStep;
                const double up = loss(p, q, k, v, dout);
                (*in.x)[e] = saved - kStep;
                const double down = loss(p, q, k, v, dout);
                (*in.x)[e] = saved;
                const double fd = (up - down) / (2.0 * kStep);
                ASSERT_NEAR((*in.grad)[e], fd, kTolerance * (1 + std::fabs(fd))) << "d" << in.name << "[" << e << "]";
            }
        }
    }
}

// Causal with sq > sk: the first sq - sk rows see no key and get dq = 0 exactly (and add nothing
// to dk, dv: the same result as without them).
TEST(BwdFp64Reference, RowsThatSeeNoKeyGetZero) {
    const int sq = 6, sk = 3, d = 8;
    const hattn_bwd_params p = shape(1, 1, 1, sq, sk, d, true);
    const std::vector<float> q = normal_vector(q_elems(p), HATTN_DTYPE_BF16, 1),
                             k = normal_vector(kv_elems(p), HATTN_DTYPE_BF16, 2),
                             v = normal_vector(kv_elems(p), HATTN_DTYPE_BF16, 3),
                             dout = normal_vector(q_elems(p), HATTN_DTYPE_BF16, 4);
    const BackwardReferenceResult r = reference_attention_backward_fp64(p, q.data(), k.data(), v.data(), dout.data());
    for (int i = 0; i < sq - sk; ++i) {
        for (int c = 0; c < d; ++c) {
            EXPECT_EQ(r.dq[i * d + c], 0.0) << "row " << i;
            EXPECT_EQ(r.dq_weight[i * d + c], 0.0) << "row " << i;
        }
    }
    // The last sk rows alone (sq = sk) give the same dk, dv.
    const hattn_bwd_params tail = shape(1, 1, 1, sk, sk, d, true);
    const size_t skip = static_cast<size_t>(sq - sk) * d;
    const BackwardReferenceResult t = reference_attention_backward_fp64(tail, q.data() + skip, k.data(), v.data(),
                                                                        dout.data() + skip);
    for (size_t e = 0; e < r.dk.size(); ++e) {
        EXPECT_NEAR(r.dk[e], t.dk[e], 1e-14);
        EXPECT_NEAR(r.dv[e], t.dv[e], 1e-14);
    }
}

// Every tensor through head-major padded strides gives bit-identical results, and o_for_d = the
// exact O (as a strided float copy) reproduces the default.
TEST(BwdFp64Reference, StridedLayoutsAgree) {
    const int b = 2, hq = 4, hkv = 2, sq = 6, sk = 9, d = 8, pad = 8;
    const hattn_bwd_params packed = shape(b, hq, hkv, sq, sk, d, true);
    const std::vector<float> q = normal_vector(q_elems(packed), HATTN_DTYPE_FP16, 5),
                             k = normal_vector(kv_elems(packed), HATTN_DTYPE_FP16, 6),
                             v = normal_vector(kv_elems(packed), HATTN_DTYPE_FP16, 7),
                             dout = normal_vector(q_elems(packed), HATTN_DTYPE_FP16, 8);
    const BackwardReferenceResult ref =
        reference_attention_backward_fp64(packed, q.data(), k.data(), v.data(), dout.data());

    auto to_bhsd = [&](const std::vector<float>& x, int s, int h) { return hattn::test::to_bhsd(x, b, s, h, d, pad); };
    auto set_bhsd = [&](int64_t& batch, int64_t& seq, int64_t& head, int s, int h) {
        seq = d + pad;
        head = static_cast<int64_t>(s) * (d + pad);
        batch = static_cast<int64_t>(h) * s * (d + pad);
    };
    hattn_bwd_params strided = packed;
    set_bhsd(strided.q_batch_stride, strided.q_seq_stride, strided.q_head_stride, sq, hq);
    set_bhsd(strided.k_batch_stride, strided.k_seq_stride, strided.k_head_stride, sk, hkv);
    set_bhsd(strided.v_batch_stride, strided.v_seq_stride, strided.v_head_stride, sk, hkv);
    set_bhsd(strided.o_batch_stride, strided.o_seq_stride, strided.o_head_stride, sq, hq);
    set_bhsd(strided.do_batch_stride, strided.do_seq_stride, strided.do_head_stride, sq, hq);
    const std::vector<float> qs = to_bhsd(q, sq, hq), ks = to_bhsd(k, sk, hkv), vs = to_bhsd(v, sk, hkv),
                             dos = to_bhsd(dout, sq, hq);
    const BackwardReferenceResult r2 =
        reference_attention_backward_fp64(strided, qs.data(), ks.data(), vs.data(), dos.data());
    EXPECT_EQ(ref.dq, r2.dq);
    EXPECT_EQ(ref.dk, r2.dk);
    EXPECT_EQ(ref.dv, r2.dv);
    EXPECT_EQ(ref.dq_weight, r2.dq_weight);
    EXPECT_EQ(ref.dk_weight, r2.dk_weight);
    EXPECT_EQ(ref.dv_weight, r2.dv_weight);
    EXPECT_EQ(ref.dq_cancel, r2.dq_cancel);
    EXPECT_EQ(ref.dk_cancel, r2.dk_cancel);

    // The exact O, rounded to fp32, as the O of D_i: the same gradients within fp32 rounding.
    std::vector<float> o32(ref.o.begin(), ref.o.end());
    const std::vector<float> os = to_bhsd(o32, sq, hq);
    const BackwardReferenceResult r3 =
        reference_attention_backward_fp64(strided, qs.data(), ks.data(), vs.data(), dos.data(), os.data());
    for (size_t e = 0; e < ref.dq.size(); ++e) EXPECT_NEAR(r3.dq[e], ref.dq[e], 1e-6);
}

TEST(BwdMask, RowsSeeingKey) {
    // sq == sk: key j is seen by rows j .. sq - 1.
    EXPECT_EQ(nm::rows_seeing_key(0, 5, 5, true), 5);
    EXPECT_EQ(nm::rows_seeing_key(4, 5, 5, true), 1);
    // sq < sk: the first query sees sk - sq + 1 keys, so keys 0 .. sk - sq are seen by every row.
    EXPECT_EQ(nm::rows_seeing_key(7, 3, 10, true), 3);
    EXPECT_EQ(nm::rows_seeing_key(8, 3, 10, true), 2);
    EXPECT_EQ(nm::rows_seeing_key(9, 3, 10, true), 1);
    // sq > sk: key j is seen by rows j + sq - sk ..
    EXPECT_EQ(nm::rows_seeing_key(0, 10, 3, true), 3);
    EXPECT_EQ(nm::rows_seeing_key(2, 10, 3, true), 1);
    EXPECT_EQ(nm::rows_seeing_key(2, 10, 3, false), 10);
    // Consistent with visible_keys: both count the same (row, key) pairs.
    for (bool causal : {false, true}) {
        for (auto [sq, sk] : {std::pair{7, 7}, std::pair{3, 11}, std::pair{11, 3}, std::pair{1, 5}, std::pair{5, 1}}) {
            int64_t by_rows = 0, by_keys = 0;
            for (int i = 0; i < sq; ++i) by_rows += nm::visible_keys(i, sq, sk, causal);
            for (int j = 0; j < sk; ++j) by_keys += nm::rows_seeing_key(j, sq, sk, causal);
            EXPECT_EQ(by_rows, by_keys) << sq << " " << sk << " " << causal;
        }
    }
}

// ---- The gradient tolerance against a model of the kernel ----------------------------------------

// What a FlashAttention-style backward kernel does, in float64 except where it rounds: S and dP in
// fp32 (exact 16-bit products, fp32 sums), P = exp(scale S - LSE) in fp32 from the forward's fp32
// LSE, D from the forward's 16-bit O, dS in fp32, P and dS rounded to 16 bits for the GEMMs, fp32
// accumulation, one rounding of each output. `broken` switches on one mistake.
enum class Mistake { kNone, kDqWithoutScale, kMaskOffByOne, kNoDTerm, kGqaFirstHeadOnly };

struct Gradients {
    std::vector<double> dq, dk, dv;
};

float round16(double x, hattn_dtype t) { return nm::half_to_float(nm::float_to_half(static_cast<float>(x), t), t); }

Gradients model_kernel(const hattn_bwd_params& p, const std::vector<float>& q, const std::vector<float>& k,
                       const std::vector<float>& v, const std::vector<float>& dout, Mistake mistake) {
    const int d = p.head_dim, group = p.heads_q / p.heads_kv;
    const float scale = static_cast<float>(hattn::test::resolved_scale(p));
    const hattn::test::ReferenceResult fwd = reference_attention_fp64(p, q.data(), k.data(), v.data());
    std::vector<float> dq(q_elems(p), 0.f), dk(kv_elems(p), 0.f), dv(kv_elems(p), 0.f);
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.heads_q; ++h) {
            if (mistake == Mistake::kGqaFirstHeadOnly && h % group != 0) continue;
            const int hk = h / group;
            for (int i = 0; i < p.seqlen_q; ++i) {
                int n = nm::visible_keys(i, p.seqlen_q, p.seqlen_k, p.causal != 0);
                if (mistake == Mistake::kMaskOffByOne && p.causal) n = std::max(0, n - 1);
                const size_t q_row = ((static_cast<size_t>(b) * p.seqlen_q + i) * p.heads_q + h) * d;
                const float lse = static_cast<float>(fwd.lse[(static_cast<size_t>(b) * p.heads_q + h) * p.seqlen_q + i]);
                // D in another order than dP's sum (as a kernel's separate pass would): where dP and D
                // cancel exactly (seqlen_k = 1), dS is fp32 noise, not an exact 0.
                float row_d = 0.f;
                for (int c = d - 1; c >= 0; --c) row_d += dout[q_row + c] * round16(fwd.o[q_row + c], p.dtype);
                if (mistake == Mistake::kNoDTerm) row_d = 0.f;
                for (int j = 0; j < n; ++j) {
                    const size_t kv_row = ((static_cast<size_t>(b) * p.seqlen_k + j) * p.heads_kv + hk) * d;
                    float s = 0.f, dp = 0.f;
                    for (int c = 0; c < d; ++c) {
                        s += q[q_row + c] * k[kv_row + c];
                        dp += dout[q_row + c] * v[kv_row + c];
                    }
                    const float pij = std::exp(scale * s - lse);
                    const float ds = pij * (dp - row_d);
                    const float p16 = round16(pij, p.dtype), ds16 = round16(ds, p.dtype);
                    const float dq_scale = mistake == Mistake::kDqWithoutScale ? 1.f : scale;
                    for (int c = 0; c < d; ++c) {
                        dq[q_row + c] += dq_scale * ds16 * k[kv_row + c];
                        dk[kv_row + c] += scale * ds16 * q[q_row + c];
                        dv[kv_row + c] += p16 * dout[q_row + c];
                    }
                }
            }
        }
    Gradients g;
    for (auto [from, to] : {std::pair{&dq, &g.dq}, std::pair{&dk, &g.dk}, std::pair{&dv, &g.dv}}) {
        to->resize(from->size());
        for (size_t e = 0; e < from->size(); ++e) (*to)[e] = round16((*from)[e], p.dtype);
    }
    return g;
}

struct ToleranceCase {
    int b, hq, hkv, sq, sk, d;
    bool causal;
    hattn_dtype dtype;
};

std::string describe(const ToleranceCase& c) {
    return std::string(c.dtype == HATTN_DTYPE_BF16 ? "bf16" : "fp16") + " b" + std::to_string(c.b) + " h" +
           std::to_string(c.hq) + "x" + std::to_string(c.hkv) + " q" + std::to_string(c.sq) + " k" +
           std::to_string(c.sk) + " d" + std::to_string(c.d) + (c.causal ? " causal" : " full");
}

// Compares the model's three gradients with the float64 reference the way test/bwd_test.cu does;
// returns which of dq, dk, dv pass.
struct Verdict {
    bool dq, dk, dv;
    double worst_rel_l2_in_u;
};

Verdict judge(const ToleranceCase& c, Mistake mistake, uint64_t seed) {
    const hattn_bwd_params p = shape(c.b, c.hq, c.hkv, c.sq, c.sk, c.d, c.causal, c.dtype);
    const std::vector<float> q = normal_vector(q_elems(p), c.dtype, seed), k = normal_vector(kv_elems(p), c.dtype, seed + 1),
                             v = normal_vector(kv_elems(p), c.dtype, seed + 2),
                             dout = normal_vector(q_elems(p), c.dtype, seed + 3);
    // As test/bwd_test.cu: D from the 16-bit O the kernel received.
    const hattn::test::ReferenceResult fwd = reference_attention_fp64(p, q.data(), k.data(), v.data());
    std::vector<float> o16(fwd.o.size());
    for (size_t e = 0; e < o16.size(); ++e) o16[e] = round16(fwd.o[e], c.dtype);
    const BackwardReferenceResult ref =
        reference_attention_backward_fp64(p, q.data(), k.data(), v.data(), dout.data(), o16.data());
    const Gradients got = model_kernel(p, q, k, v, dout, mistake);
    auto max_abs = [](const std::vector<float>& x) {
        double m = 0;
        for (float f : x) m = std::max(m, std::fabs(static_cast<double>(f)));
        return m;
    };
    const double scale = hattn::test::resolved_scale(p);
    const int group = c.hq / c.hkv;
    const int d = c.d;
    auto q_terms = [&](size_t e) {
        const int i = static_cast<int>(e / d / c.hq % c.sq);
        return static_cast<double>(nm::visible_keys(i, c.sq, c.sk, c.causal));
    };
    auto kv_terms = [&](size_t e) {
        const int j = static_cast<int>(e / d / c.hkv % c.sk);
        return static_cast<double>(group) * nm::rows_seeing_key(j, c.sq, c.sk, c.causal);
    };
    const std::vector<double> no_cancel(ref.dv.size(), 0.0);
    auto check = [&](const std::vector<double>& g, const std::vector<double>& r, const std::vector<double>& w,
                     const std::vector<double>& cancel, double max_operand,
                     const std::function<double(size_t)>& terms, const char* name) {
        const nm::GradientTolerance tol = nm::bwd_gradient_tolerance(c.dtype, max_operand, 0.0);
        const nm::CompareResult cr = nm::compare_gradient(
            r.size(), [&](size_t e) { return g[e]; }, [&](size_t e) { return r[e]; }, [&](size_t e) { return w[e]; },
            [&](size_t e) { return cancel[e]; }, terms, tol);
        if (mistake == Mistake::kNone) EXPECT_TRUE(cr.ok) << describe(c) << " " << name << ": " << cr.summary();
        return std::pair{cr.ok, cr.rel_l2 / nm::unit_roundoff(c.dtype)};
    };
    const auto [dq_ok, dq_l2] = check(got.dq, ref.dq, ref.dq_weight, ref.dq_cancel, scale * max_abs(k), q_terms, "dq");
    const auto [dk_ok, dk_l2] = check(got.dk, ref.dk, ref.dk_weight, ref.dk_cancel, scale * max_abs(q), kv_terms, "dk");
    const auto [dv_ok, dv_l2] = check(got.dv, ref.dv, ref.dv_weight, no_cancel, max_abs(dout), kv_terms, "dv");
    // A gradient whose exact value is 0 everywhere (seqlen_k = 1) has no relative error to report.
    auto finite = [](double x) { return std::isfinite(x) ? x : 0.0; };
    const double worst = std::max({finite(dq_l2), finite(dk_l2), finite(dv_l2)});
    return {dq_ok, dk_ok, dv_ok, worst};
}

const ToleranceCase kToleranceCases[] = {
    {1, 2, 1, 130, 150, 64, true, HATTN_DTYPE_BF16},   {1, 2, 1, 130, 150, 64, false, HATTN_DTYPE_FP16},
    {2, 2, 1, 200, 77, 64, true, HATTN_DTYPE_FP16},    {1, 4, 1, 1, 200, 128, true, HATTN_DTYPE_BF16},
    {1, 2, 2, 17, 1, 64, false, HATTN_DTYPE_FP16},     {1, 2, 2, 17, 1, 64, true, HATTN_DTYPE_BF16},
    {1, 1, 1, 600, 600, 64, false, HATTN_DTYPE_FP16},  {1, 8, 1, 64, 90, 128, false, HATTN_DTYPE_BF16},
};

TEST(BwdTolerance, AdmitsTheKernelsRoundings) {
    uint64_t seed = 1000;
    for (const ToleranceCase& c : kToleranceCases) {
        const Verdict v = judge(c, Mistake::kNone, seed += 10);
        // The rounding model's relative L2 error is ~0.6u, well inside the 2u bound.
        EXPECT_LT(v.worst_rel_l2_in_u, 1.0) << describe(c);
    }
}

TEST(BwdTolerance, RejectsWrongGradients) {
    const ToleranceCase bf16{1, 4, 2, 130, 150, 64, true, HATTN_DTYPE_BF16};
    const ToleranceCase fp16{1, 4, 2, 130, 150, 64, true, HATTN_DTYPE_FP16};
    for (const ToleranceCase& c : {bf16, fp16}) {
        SCOPED_TRACE(describe(c));
        Verdict v = judge(c, Mistake::kDqWithoutScale, 7);
        EXPECT_FALSE(v.dq) << "dQ without the softmax scale";
        EXPECT_TRUE(v.dk && v.dv);
        v = judge(c, Mistake::kMaskOffByOne, 7);
        EXPECT_FALSE(v.dq || v.dk || v.dv) << "each row misses its last key";
        v = judge(c, Mistake::kNoDTerm, 7);
        EXPECT_FALSE(v.dq) << "D = rowsum(dO * O) left out";
        EXPECT_FALSE(v.dk) << "D = rowsum(dO * O) left out";
        EXPECT_TRUE(v.dv);
        v = judge(c, Mistake::kGqaFirstHeadOnly, 7);
        EXPECT_FALSE(v.dk || v.dv) << "dK, dV from the group's first query head only";
    }
}

}  // namespace
