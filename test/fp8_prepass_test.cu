// hattn/test/fp8_prepass_test.cu -- hattn_fp8_prepass on a Hopper GPU against the float64 reference
// (src/testing/fp8_reference.h).
//
// Each case checks, for q, k and v:
//   * every e4m3 byte equals the reference's or is one e4m3 ulp from it, and every byte is
//     bit-exact unless its value is so close to an e4m3 rounding midpoint that fp32 rounding can
//     move it across: the reference scales and rounds in fp32 like the kernel (see
//     testing/fp8_reference.h), so plain quantization (no RoPE, no Hadamard) must match every
//     byte; with RoPE or the Hadamard the kernel's fp32 values differ from the float64 ones by at
//     most the reference's fp32_error_bound, and only bytes whose scaled float64 value lies within
//     that error (plus the scale's) of a midpoint may round the other way. Such bytes must stay
//     rare (kMaxNearTieFraction), or the window would make the check vacuous;
//   * every descale is within 1e-6 relative of amax / 448;
//   * bytes of the outputs' padding (strided cases) keep their poison: nothing is written outside
//     the rows;
//   * the property the transform exists for: scores from the dequantized outputs,
//     (Q M)(K M)^T, equal the scores of the (rotated) inputs Q K^T within the e4m3 budget.
//
// HATTN_FP8_PREPASS_VARIANT=<chunks>x<blocks per CTA>[x<CTAs per block>[x<V overlapped>]] (e.g.
// 2x1, 4x4, 16x1x2, 16x1x0x1) runs the kernel layout it names (host/fp8_prepass_launch.h:
// fp8_prepass_variant) instead of the C API's default, so every candidate layout meets the same cases.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "hattn.h"
#include "host/fp8_prepass_launch.h"
#include "kernels/sm90/fragment_e4m3.cuh"  // e4m3_k_to_key: V^T's key order
#include "testing/fp8_reference.h"
#include "testing/numerics.h"

namespace {

namespace ht = hattn::testing;
namespace nm = hattn::numerics;
using hattn::test::DeviceMemory;

constexpr uint8_t kPoison8 = 0xFF;                     // e4m3 NaN
constexpr double kDescaleRelTol = 1e-6;
constexpr double kMaxNearTieFraction = 0.01;         // bytes whose rounding fp32 error may flip
constexpr double kUnitRoundoff = 0x1p-24;             // fp32
constexpr double kTieSafety = 2.0;                    // the error bounds are first order
constexpr double kOutlierProbability = 0.001;         // FA3's outlier inputs, scaled down
constexpr double kOutlierScale = 10.0;
constexpr uint64_t kSeed = 0xC0FFEEull;
constexpr int kFp8RowPad = 16;                        // bytes: keeps e4m3 strides 16-byte aligned
constexpr int kFp8BatchPad = 64;
// Scores: |S' - S| <= (2 * 2^-4 + 2^-8) |q| |k| bounds the e4m3 error (half an ulp is 2^-4 of
// the value); the RMS error is far smaller (each element's error is independent).
constexpr double kScoreBound = 2 * 0.0625 + 0.00390625;
constexpr double kScoreRmsBound = 0.02;
constexpr int kPropertyRows = 48;                     // rows of Q and K used by the property check

struct Case {
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    hattn_dtype dtype;
    hattn_rope rope;
    bool hadamard;
    bool strided;
    bool v_per_head = false;  // HATTN_FP8_PREPASS_V_PER_HEAD: one V descale per (batch, head)
};

std::string case_name(const Case& c) {
    const char* rope = c.rope == HATTN_ROPE_NONE ? "norope" : c.rope == HATTN_ROPE_INTERLEAVED ? "interleaved" : "half";
    return "b" + std::to_string(c.batch) + "_hq" + std::to_string(c.heads_q) + "_hkv" + std::to_string(c.heads_kv) +
           "_sq" + std::to_string(c.seqlen_q) + "_sk" + std::to_string(c.seqlen_k) + "_d" +
           std::to_string(c.head_dim) + "_" + hattn::test::dtype_name(c.dtype) + "_" + rope +
           (c.hadamard ? "_hadamard" : "") + (c.strided ? "_strided" : "") + (c.v_per_head ? "_vhead" : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

// The layout HATTN_FP8_PREPASS_VARIANT names; false when it is unset (the C API's default).
bool variant_from_env(hattn::fp8::Fp8PrepassVariant& variant) {
    const char* env = std::getenv("HATTN_FP8_PREPASS_VARIANT");
    if (env == nullptr || *env == '\0') return false;
    const int fields = std::sscanf(env, "%dx%dx%dx%d", &variant.chunks, &variant.blocks_per_cta, &variant.ctas_per_block,
                                   &variant.v_overlap);
    if (fields < 2 || fields > 4) {
        ADD_FAILURE() << "HATTN_FP8_PREPASS_VARIANT=" << env
                      << ": expected <chunks>x<blocks per CTA>[x<CTAs per block>[x<V overlapped>]], e.g. 2x1, "
                         "16x1x2 or 16x1x0x1";
    }
    return true;
}

// How the kernel this case runs evaluates RoPE (testing/fp8_reference.h: RopeEval): the
// tensor-core Hadamard rounds the rotated values to bf16, the butterfly kernels keep fp32.
ht::RopeEval rope_eval_of(const Case& c) {
    namespace f8 = hattn::fp8;
    const f8::Rope rope = static_cast<f8::Rope>(static_cast<int>(c.rope));
    f8::Fp8PrepassVariant v;
    const f8::Fp8PrepassVariant run = variant_from_env(v)
                                          ? f8::fp8_variant_run(c.head_dim, v.chunks, v.blocks_per_cta, rope, c.hadamard,
                                                                v.ctas_per_block)
                                          : f8::fp8_default_variant(c.head_dim, rope, c.hadamard);
    return c.hadamard && run.chunks == f8::kFp8MmaChunks ? ht::RopeEval::kRotateBf16 : ht::RopeEval::kFp32;
}

// A [b, s, h, d] tensor: its strides and the elements its buffer holds.
struct Layout {
    int64_t batch_stride, seq_stride, head_stride, size;
};

// 16-bit inputs: packed, or rows of heads padded by 8 elements (16 bytes) and a padded batch.
Layout input_layout(int b, int s, int h, int d, bool strided) {
    Layout l;
    l.head_stride = d;
    l.seq_stride = int64_t{h} * d + (strided ? hattn::test::kRowPad : 0);
    l.batch_stride = s * l.seq_stride + (strided ? hattn::test::kBatchPad : 0);
    l.size = b * l.batch_stride;
    return l;
}

// e4m3 outputs: packed, or head-major [b, h, s, d + 16] with a padded batch.
Layout output_layout(int b, int s, int h, int d, bool strided) {
    Layout l;
    if (!strided) {
        l.head_stride = d;
        l.seq_stride = int64_t{h} * d;
        l.batch_stride = s * l.seq_stride;
    } else {
        l.seq_stride = d + kFp8RowPad;
        l.head_stride = s * l.seq_stride;
        l.batch_stride = h * l.head_stride + kFp8BatchPad;
    }
    l.size = b * l.batch_stride;
    return l;
}

struct Tensor {
    Layout in, out;
    int seqlen, heads;
    std::vector<float> host;      // the 16-bit values, widened, in the input layout
    std::vector<uint16_t> bits;   // the same as uploaded
};

Tensor make_tensor(const Case& c, int seqlen, int heads, std::mt19937_64& rng) {
    Tensor t;
    t.seqlen = seqlen;
    t.heads = heads;
    t.in = input_layout(c.batch, seqlen, heads, c.head_dim, c.strided);
    t.out = output_layout(c.batch, seqlen, heads, c.head_dim, c.strided);
    t.host.assign(t.in.size, 0.f);
    t.bits.assign(t.in.size, nm::kPoison16);  // padding: a NaN the kernel must never read
    std::normal_distribution<float> normal;
    std::bernoulli_distribution outlier(kOutlierProbability);
    for (int b = 0; b < c.batch; ++b)
        for (int s = 0; s < seqlen; ++s)
            for (int h = 0; h < heads; ++h)
                for (int e = 0; e < c.head_dim; ++e) {
                    const int64_t i = b * t.in.batch_stride + s * t.in.seq_stride + h * t.in.head_stride + e;
                    float x = normal(rng);
                    if (outlier(rng)) x *= static_cast<float>(kOutlierScale);
                    t.bits[i] = nm::float_to_half(x, c.dtype);
                    t.host[i] = nm::half_to_float(t.bits[i], c.dtype);
                }
    return t;
}

ht::Fp8TensorLayout reference_layout(const Case& c, const Tensor& t) {
    return {c.batch, t.seqlen, t.heads, c.head_dim, t.in.batch_stride, t.in.seq_stride, t.in.head_stride};
}

// Compares one tensor's e4m3 output and descales with the reference; returns the reference.
ht::Fp8ReferenceResult check_tensor(const char* name, const Case& c, const Tensor& t, const std::vector<uint8_t>& out,
                                    const std::vector<float>& descale, hattn_rope rope, bool hadamard,
                                    const std::vector<float>& cos, const std::vector<float>& sin, int rope_offset,
                                    bool per_head = false) {
    SCOPED_TRACE(name);
    const ht::Fp8ReferenceResult r =
        ht::reference_fp8_prepass_fp64(t.host.data(), reference_layout(c, t), rope, cos.data(), sin.data(),
                                       rope_offset, hadamard, kSeed, rope_eval_of(c), per_head);
    // Descales.
    EXPECT_EQ(descale.size(), r.descale.size());
    int bad_descales = 0;
    for (size_t i = 0; i < r.descale.size() && i < descale.size(); ++i) {
        const double err = std::fabs(descale[i] - r.descale[i]);
        if (!(err <= kDescaleRelTol * r.descale[i])) {
            if (++bad_descales <= 5) {
                ADD_FAILURE() << name << " descale[" << i << "] = " << descale[i] << ", reference " << r.descale[i];
            }
        }
    }
    EXPECT_EQ(bad_descales, 0);
    // Bytes, in the output layout; the padding keeps its poison.
    std::vector<bool> covered(out.size(), false);
    int64_t total = 0, far = 0, near_tie = 0, near_tie_off = 0, inexact = 0;
    const int d = c.head_dim;
    const int blocks = ht::fp8_blocks(t.seqlen);
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < t.heads; ++h)
            for (int blk = 0; blk < blocks; ++blk) {
                const int s0 = blk * HATTN_FP8_BLOCK_ROWS, s1 = std::min(t.seqlen, s0 + HATTN_FP8_BLOCK_ROWS);
                auto ref_index = [&](int s, int e) { return ((static_cast<size_t>(b) * t.seqlen + s) * t.heads + h) * d + e; };
                // The kernel's amax errs by at most the block's largest error bound; its scale
                // 448 / amax then by that relative to amax, plus the division's rounding. (per_head:
                // the amax and the bound over the head's rows.)
                double amax = 0.0, worst_bound = 0.0;
                for (int s = per_head ? 0 : s0; s < (per_head ? t.seqlen : s1); ++s)
                    for (int e = 0; e < d; ++e) {
                        amax = std::max(amax, std::fabs(r.transformed[ref_index(s, e)]));
                        worst_bound = std::max(worst_bound, r.fp32_error_bound[ref_index(s, e)]);
                    }
                const double scale = amax > 0.0 ? ht::kE4m3Max / amax : 0.0;
                const double scale_rel_error = amax > 0.0 ? worst_bound / amax + kUnitRoundoff : 0.0;
                for (int s = s0; s < s1; ++s)
                    for (int e = 0; e < d; ++e) {
                        const int64_t o = b * t.out.batch_stride + s * t.out.seq_stride + h * t.out.head_stride + e;
                        const size_t ri = ref_index(s, e);
                        covered[o] = true;
                        const uint8_t got = out[o], want = r.e4m3[ri];
                        ++total;
                        // No transform: the kernel and the reference do the same fp32 operations
                        // on the same values, so no byte may differ. Otherwise: the window.
                        const double scaled = r.transformed[ri] * scale;
                        const double window =
                            worst_bound == 0.0 ? 0.0
                                               : kTieSafety * (r.fp32_error_bound[ri] * scale +
                                                               std::fabs(scaled) * (scale_rel_error + 2 * kUnitRoundoff));
                        // (Without a transform ~1% of bf16 values sit exactly on a midpoint in
                        // float64; the fp32 reference rounds them as the kernel does.)
                        const bool may_flip = worst_bound > 0.0 && ht::e4m3_tie_distance(scaled) <= window;
                        near_tie += may_flip;
                        if (got == want || (((got | want) & 0x7F) == 0)) continue;  // +0 and -0 are equal
                        ++inexact;
                        near_tie_off += may_flip;
                        const bool nan = (got & 0x7F) == ht::kE4m3NaN;
                        if (!nan && may_flip && std::abs(ht::e4m3_ordinal(got) - ht::e4m3_ordinal(want)) <= 1) continue;
                        if (++far <= 5) {
                            ADD_FAILURE() << name << "[b " << b << ", s " << s << ", h " << h << ", c " << e
                                          << "]: got 0x" << std::hex << int(got) << ", reference 0x" << int(want)
                                          << std::dec << " (transformed value " << r.transformed[ri] << ", scaled "
                                          << scaled << ", " << ht::e4m3_tie_distance(scaled)
                                          << " from a rounding midpoint, fp32 window " << window << ")";
                        }
                    }
            }
    EXPECT_EQ(far, 0) << name << ": bytes differ from the reference (more than one ulp, or not near a tie)";
    EXPECT_LE(static_cast<double>(near_tie), kMaxNearTieFraction * static_cast<double>(total))
        << name << ": " << near_tie << " of " << total << " bytes lie within fp32 error of a rounding midpoint";
    std::printf("  %s: %lld bytes, %lld near a tie, %lld of them one ulp off; %lld inexact in all\n", name,
                static_cast<long long>(total), static_cast<long long>(near_tie), static_cast<long long>(near_tie_off),
                static_cast<long long>(inexact));
    int64_t written_padding = 0;
    for (size_t i = 0; i < out.size(); ++i) written_padding += (!covered[i] && out[i] != kPoison8);
    EXPECT_EQ(written_padding, 0) << name << ": bytes outside the rows were written";
    return r;
}

// (Q M)(K M)^T from the dequantized outputs against Q K^T of the rotated (not Hadamard-transformed)
// inputs, for the first rows of every (batch, query head) with its KV head.
void check_scores(const Case& c, const Tensor& q, const Tensor& k, const std::vector<uint8_t>& q8,
                  const std::vector<float>& qs, const std::vector<uint8_t>& k8, const std::vector<float>& ks,
                  const std::vector<float>& cos, const std::vector<float>& sin, int rope_offset) {
    const ht::Fp8ReferenceResult qr = ht::reference_fp8_prepass_fp64(q.host.data(), reference_layout(c, q), c.rope,
                                                                      cos.data(), sin.data(), rope_offset, false, 0);
    const ht::Fp8ReferenceResult kr =
        ht::reference_fp8_prepass_fp64(k.host.data(), reference_layout(c, k), c.rope, cos.data(), sin.data(), 0, false, 0);
    const int d = c.head_dim, group = c.heads_q / c.heads_kv;
    const int nq = std::min(q.seqlen, kPropertyRows), nk = std::min(k.seqlen, kPropertyRows);
    auto dequant = [&](const Tensor& t, const std::vector<uint8_t>& bytes, const std::vector<float>& descale, int b,
                       int s, int h, int e) {
        const int64_t o = b * t.out.batch_stride + s * t.out.seq_stride + h * t.out.head_stride + e;
        const int blocks = ht::fp8_blocks(t.seqlen);
        const double scale = descale[(static_cast<size_t>(b) * t.heads + h) * blocks + s / HATTN_FP8_BLOCK_ROWS];
        return ht::e4m3_to_double(bytes[o]) * scale;
    };
    double worst = 0, sum_sq = 0;
    int64_t n = 0;
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.heads_q; ++h) {
            const int hk = h / group;
            for (int i = 0; i < nq; ++i)
                for (int j = 0; j < nk; ++j) {
                    const double* qi = &qr.transformed[((static_cast<size_t>(b) * q.seqlen + i) * c.heads_q + h) * d];
                    const double* kj = &kr.transformed[((static_cast<size_t>(b) * k.seqlen + j) * c.heads_kv + hk) * d];
                    double exact = 0, approx = 0, nqi = 0, nkj = 0;
                    for (int e = 0; e < d; ++e) {
                        exact += qi[e] * kj[e];
                        nqi += qi[e] * qi[e];
                        nkj += kj[e] * kj[e];
                        approx += dequant(q, q8, qs, b, i, h, e) * dequant(k, k8, ks, b, j, hk, e);
                    }
                    const double norm = std::sqrt(nqi * nkj) + 1e-30;
                    const double err = std::fabs(approx - exact) / norm;
                    worst = std::max(worst, err);
                    sum_sq += err * err;
                    ++n;
                }
        }
    EXPECT_LE(worst, kScoreBound) << "(QM)(KM)^T differs from QK^T by more than the e4m3 budget";
    EXPECT_LE(std::sqrt(sum_sq / std::max<int64_t>(n, 1)), kScoreRmsBound) << "RMS score error / (|q| |k|)";
}

// The pre-pass params of case c on device buffers in[] (q, k, v), out[] and descale[], with the
// tensors' layouts as strides; `vt`: v's output is V^T (its strides zero: ignored).
struct CaseBuffers {
    void* in[3];
    void* out[3];
    void* descale[3];
    const void* cos;
    const void* sin;
};
hattn_fp8_prepass_params case_params(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const CaseBuffers& d, int rope_rows, int rope_offset, bool vt) {
    hattn_fp8_prepass_params p = hattn_fp8_prepass_params_contiguous(
        d.in[0], d.in[1], d.in[2], d.out[0], d.out[1], d.out[2], static_cast<float*>(d.descale[0]),
        static_cast<float*>(d.descale[1]), static_cast<float*>(d.descale[2]), c.batch, c.heads_q, c.heads_kv,
        c.seqlen_q, c.seqlen_k, c.head_dim, c.dtype);
    auto set = [](const Layout& l, int64_t& bs, int64_t& ss, int64_t& hs) {
        bs = l.batch_stride;
        ss = l.seq_stride;
        hs = l.head_stride;
    };
    set(q.in, p.q_batch_stride, p.q_seq_stride, p.q_head_stride);
    set(k.in, p.k_batch_stride, p.k_seq_stride, p.k_head_stride);
    set(v.in, p.v_batch_stride, p.v_seq_stride, p.v_head_stride);
    set(q.out, p.q_fp8_batch_stride, p.q_fp8_seq_stride, p.q_fp8_head_stride);
    set(k.out, p.k_fp8_batch_stride, p.k_fp8_seq_stride, p.k_fp8_head_stride);
    if (vt) {
        p.v_fp8_batch_stride = p.v_fp8_seq_stride = p.v_fp8_head_stride = 0;
        p.flags = HATTN_FP8_PREPASS_V_TRANSPOSED;
    } else {
        set(v.out, p.v_fp8_batch_stride, p.v_fp8_seq_stride, p.v_fp8_head_stride);
    }
    if (c.v_per_head) p.flags |= HATTN_FP8_PREPASS_V_PER_HEAD;
    p.rope = c.rope;
    p.rope_cos = static_cast<const float*>(d.cos);
    p.rope_sin = static_cast<const float*>(d.sin);
    p.rope_rows = rope_rows;
    p.rope_q_offset = rope_offset;
    p.hadamard = c.hadamard ? 1 : 0;
    p.hadamard_seed = kSeed;
    return p;
}

// A case's inputs: q, k, v (their host values and layouts) and the rotary tables for every
// position the rows use (queries end where the keys end).
struct CaseInputs {
    Tensor q, k, v;
    int rope_offset, rope_rows;
    std::vector<float> cos, sin;
};
CaseInputs make_case_inputs(const Case& c, std::mt19937_64& rng) {
    CaseInputs in{make_tensor(c, c.seqlen_q, c.heads_q, rng), make_tensor(c, c.seqlen_k, c.heads_kv, rng),
                  make_tensor(c, c.seqlen_k, c.heads_kv, rng), 0, 0, {}, {}};
    in.rope_offset = c.seqlen_k > c.seqlen_q ? c.seqlen_k - c.seqlen_q : 0;
    in.rope_rows = std::max(c.seqlen_k, in.rope_offset + c.seqlen_q);
    ht::rope_tables(in.rope_rows, c.head_dim, &in.cos, &in.sin);
    return in;
}

class Fp8PrepassTest : public ::testing::TestWithParam<Case> {};

TEST_P(Fp8PrepassTest, MatchesFloat64Reference) {
    HATTN_REQUIRE_HOPPER();
    const Case c = GetParam();
    std::mt19937_64 rng(kSeed ^ std::hash<std::string>{}(case_name(c)));
    CaseInputs inputs = make_case_inputs(c, rng);
    Tensor &q = inputs.q, &k = inputs.k, &v = inputs.v;
    const int rope_offset = inputs.rope_offset, rope_rows = inputs.rope_rows;
    const std::vector<float>&cos = inputs.cos, &sin = inputs.sin;

    Tensor* tensors[3] = {&q, &k, &v};
    DeviceMemory in_q(q.in.size * 2), in_k(k.in.size * 2), in_v(v.in.size * 2);
    DeviceMemory out_q(q.out.size), out_k(k.out.size), out_v(v.out.size);
    const size_t nbq = static_cast<size_t>(c.batch) * c.heads_q * ht::fp8_blocks(c.seqlen_q);
    const size_t nbk = static_cast<size_t>(c.batch) * c.heads_kv * ht::fp8_blocks(c.seqlen_k);
    DeviceMemory ds_q(nbq * 4), ds_k(nbk * 4), ds_v(nbk * 4);
    DeviceMemory d_cos(cos.size() * 4), d_sin(sin.size() * 4);
    DeviceMemory* ins[3] = {&in_q, &in_k, &in_v};
    DeviceMemory* outs[3] = {&out_q, &out_k, &out_v};
    DeviceMemory* descales[3] = {&ds_q, &ds_k, &ds_v};
    const size_t nblocks[3] = {nbq, nbk, nbk};
    for (int i = 0; i < 3; ++i) {
        ASSERT_NE(ins[i]->ptr, nullptr);
        ASSERT_NE(outs[i]->ptr, nullptr);
        ASSERT_NE(descales[i]->ptr, nullptr);
        HATTN_CUDA_CHECK(cudaMemcpy(ins[i]->ptr, tensors[i]->bits.data(), tensors[i]->in.size * 2, cudaMemcpyHostToDevice));
        HATTN_CUDA_CHECK(cudaMemset(outs[i]->ptr, kPoison8, tensors[i]->out.size));
        HATTN_CUDA_CHECK(cudaMemset(descales[i]->ptr, 0xFF, nblocks[i] * 4));  // NaN
    }
    ASSERT_NE(d_cos.ptr, nullptr);
    ASSERT_NE(d_sin.ptr, nullptr);
    HATTN_CUDA_CHECK(cudaMemcpy(d_cos.ptr, cos.data(), cos.size() * 4, cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemcpy(d_sin.ptr, sin.data(), sin.size() * 4, cudaMemcpyHostToDevice));

    const hattn_fp8_prepass_params p =
        case_params(c, q, k, v, CaseBuffers{{in_q.ptr, in_k.ptr, in_v.ptr}, {out_q.ptr, out_k.ptr, out_v.ptr},
                                            {ds_q.ptr, ds_k.ptr, ds_v.ptr}, d_cos.ptr, d_sin.ptr},
                    rope_rows, rope_offset, false);
    char msg[512];
    ASSERT_EQ(hattn_fp8_prepass_validate(&p, msg, sizeof msg), HATTN_SUCCESS) << msg;
    hattn::fp8::Fp8PrepassVariant variant;
    if (variant_from_env(variant)) {
        ASSERT_EQ(hattn::host::fp8_prepass_variant(&p, variant, nullptr), HATTN_SUCCESS)
            << "variant " << variant.chunks << "x" << variant.blocks_per_cta << "x" << variant.ctas_per_block;
    } else {
        ASSERT_EQ(hattn_fp8_prepass(&p, nullptr), HATTN_SUCCESS);
    }
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());

    std::vector<uint8_t> bytes[3];
    std::vector<float> scales[3];
    for (int i = 0; i < 3; ++i) {
        bytes[i].resize(tensors[i]->out.size);
        scales[i].resize(nblocks[i]);
        HATTN_CUDA_CHECK(cudaMemcpy(bytes[i].data(), outs[i]->ptr, bytes[i].size(), cudaMemcpyDeviceToHost));
        HATTN_CUDA_CHECK(cudaMemcpy(scales[i].data(), descales[i]->ptr, nblocks[i] * 4, cudaMemcpyDeviceToHost));
    }
    check_tensor("q", c, q, bytes[0], scales[0], c.rope, c.hadamard, cos, sin, rope_offset);
    check_tensor("k", c, k, bytes[1], scales[1], c.rope, c.hadamard, cos, sin, 0);
    check_tensor("v", c, v, bytes[2], scales[2], HATTN_ROPE_NONE, false, cos, sin, 0, c.v_per_head);
    check_scores(c, q, k, bytes[0], scales[0], bytes[1], scales[1], cos, sin, rope_offset);
}

// HATTN_FP8_PREPASS_V_TRANSPOSED: the same call writing V^T (the FP8 forward's layout) instead of
// V's rows gives the same q, k and descales bit for bit, and V^T holds V's bytes: position
// 32 g + p of row (b, h, dim) is key 32 g + e4m3_k_to_key(p), zeros past seqlen_k. The rows run is
// the one MatchesFloat64Reference checks against float64.
TEST_P(Fp8PrepassTest, VTransposedMatchesRows) {
    HATTN_REQUIRE_HOPPER();
    const Case c = GetParam();
    std::mt19937_64 rng(kSeed ^ std::hash<std::string>{}(case_name(c)) ^ 0x7);
    CaseInputs inputs = make_case_inputs(c, rng);
    Tensor &q = inputs.q, &k = inputs.k, &v = inputs.v;
    const int rope_offset = inputs.rope_offset, rope_rows = inputs.rope_rows;
    const std::vector<float>&cos = inputs.cos, &sin = inputs.sin;
    const size_t vt_bytes = hattn_fwd_fp8_workspace_size(c.batch, c.heads_kv, c.seqlen_k, c.head_dim);
    const int64_t vt_keys = static_cast<int64_t>(vt_bytes) / (int64_t{c.batch} * c.heads_kv * c.head_dim);
    ASSERT_EQ(vt_keys % 32, 0);
    ASSERT_GE(vt_keys, c.seqlen_k);
    const size_t nbq = static_cast<size_t>(c.batch) * c.heads_q * ht::fp8_blocks(c.seqlen_q);
    const size_t nbk = static_cast<size_t>(c.batch) * c.heads_kv * ht::fp8_blocks(c.seqlen_k);
    DeviceMemory in_q(q.in.size * 2), in_k(k.in.size * 2), in_v(v.in.size * 2), d_cos(cos.size() * 4),
        d_sin(sin.size() * 4);
    ASSERT_TRUE(in_q.ptr && in_k.ptr && in_v.ptr && d_cos.ptr && d_sin.ptr);
    HATTN_CUDA_CHECK(cudaMemcpy(in_q.ptr, q.bits.data(), q.in.size * 2, cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemcpy(in_k.ptr, k.bits.data(), k.in.size * 2, cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemcpy(in_v.ptr, v.bits.data(), v.in.size * 2, cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemcpy(d_cos.ptr, cos.data(), cos.size() * 4, cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemcpy(d_sin.ptr, sin.data(), sin.size() * 4, cudaMemcpyHostToDevice));

    // Run r = 0: V's rows; r = 1: V^T. Each into its own poisoned outputs.
    struct Outputs {
        std::vector<uint8_t> q8, k8, v8;
        std::vector<float> qs, ks, vs;
    } got[2];
    for (int r = 0; r < 2; ++r) {
        const size_t v_out = r == 0 ? static_cast<size_t>(v.out.size) : vt_bytes;
        DeviceMemory out_q(q.out.size), out_k(k.out.size), out_v(v_out), ds_q(nbq * 4), ds_k(nbk * 4), ds_v(nbk * 4);
        ASSERT_TRUE(out_q.ptr && out_k.ptr && out_v.ptr && ds_q.ptr && ds_k.ptr && ds_v.ptr);
        HATTN_CUDA_CHECK(cudaMemset(out_q.ptr, kPoison8, q.out.size));
        HATTN_CUDA_CHECK(cudaMemset(out_k.ptr, kPoison8, k.out.size));
        HATTN_CUDA_CHECK(cudaMemset(out_v.ptr, kPoison8, v_out));
        for (DeviceMemory* d : {&ds_q, &ds_k, &ds_v}) HATTN_CUDA_CHECK(cudaMemset(d->ptr, 0xFF, d == &ds_q ? nbq * 4 : nbk * 4));
        const hattn_fp8_prepass_params p =
            case_params(c, q, k, v, CaseBuffers{{in_q.ptr, in_k.ptr, in_v.ptr}, {out_q.ptr, out_k.ptr, out_v.ptr},
                                                {ds_q.ptr, ds_k.ptr, ds_v.ptr}, d_cos.ptr, d_sin.ptr},
                        rope_rows, rope_offset, r == 1);
        char msg[512];
        ASSERT_EQ(hattn_fp8_prepass_validate(&p, msg, sizeof msg), HATTN_SUCCESS) << msg;
        hattn::fp8::Fp8PrepassVariant variant;
        if (variant_from_env(variant)) {
            ASSERT_EQ(hattn::host::fp8_prepass_variant(&p, variant, nullptr), HATTN_SUCCESS);
        } else {
            ASSERT_EQ(hattn_fp8_prepass(&p, nullptr), HATTN_SUCCESS);
        }
        HATTN_CUDA_CHECK(cudaDeviceSynchronize());
        auto fetch = [](const DeviceMemory& m, auto& host, size_t n) {
            host.resize(n / sizeof(host[0]));
            HATTN_CUDA_CHECK(cudaMemcpy(host.data(), m.ptr, n, cudaMemcpyDeviceToHost));
        };
        fetch(out_q, got[r].q8, q.out.size);
        fetch(out_k, got[r].k8, k.out.size);
        fetch(out_v, got[r].v8, v_out);
        fetch(ds_q, got[r].qs, nbq * 4);
        fetch(ds_k, got[r].ks, nbk * 4);
        fetch(ds_v, got[r].vs, nbk * 4);
    }
    EXPECT_TRUE(got[0].q8 == got[1].q8) << "q differs between the rows and the V^T runs";
    EXPECT_TRUE(got[0].k8 == got[1].k8) << "k differs";
    EXPECT_EQ(std::memcmp(got[0].qs.data(), got[1].qs.data(), nbq * 4), 0) << "q descales differ";
    EXPECT_EQ(std::memcmp(got[0].ks.data(), got[1].ks.data(), nbk * 4), 0) << "k descales differ";
    EXPECT_EQ(std::memcmp(got[0].vs.data(), got[1].vs.data(), nbk * 4), 0) << "v descales differ";
    int64_t bad = 0;
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.heads_kv; ++h)
            for (int e = 0; e < c.head_dim; ++e)
                for (int64_t pos = 0; pos < vt_keys; ++pos) {
                    const int64_t key = pos / 32 * 32 + hattn::sm90::e4m3_k_to_key(static_cast<int>(pos % 32));
                    const uint8_t want =
                        key < c.seqlen_k ? got[0].v8[b * v.out.batch_stride + key * v.out.seq_stride + h * v.out.head_stride + e]
                                         : uint8_t{0};
                    const uint8_t have = got[1].v8[((static_cast<int64_t>(b) * c.heads_kv + h) * c.head_dim + e) * vt_keys + pos];
                    if (have != want && ++bad <= 5) {
                        ADD_FAILURE() << "V^T[b " << b << ", h " << h << ", dim " << e << ", position " << pos << " (key "
                                      << key << ")] = 0x" << std::hex << int(have) << ", V has 0x" << int(want);
                    }
                }
    EXPECT_EQ(bad, 0) << "V^T bytes differ from V's";
}

// Fp8PrepassVariant::v_overlap: V's launch as a programmatic dependent of the Q / K launch gives
// the same bytes and descales as the plain launch after it, for V's rows and V^T, behind the
// tensor-core Hadamard (with and without RoPE) and behind a butterfly transform (V^T only: the
// rows run in one launch there); so does the C API's default (all 0s), which overlaps. Sizes of
// hundreds of 128-row blocks, so that some of V's thread blocks start while Q's and K's still run;
// the call must also leave both grids finished for what follows on the stream (here the copies
// that read every output).
TEST(Fp8PrepassVOverlap, MatchesPlainLaunch) {
    HATTN_REQUIRE_HOPPER();
    struct Run {
        Case c;
        int chunks;  // the layout of Q and K: 0 = the default's (the tensor-core Hadamard)
        bool vt;
    };
    enum Launch { kPlain, kOverlapped, kCApiDefault, kLaunches };
    const Run runs[] = {
        {{2, 8, 2, 4097, 4097, 64, HATTN_DTYPE_BF16, HATTN_ROPE_NONE, true, false}, 0, false},
        {{2, 8, 8, 4097, 1000, 128, HATTN_DTYPE_BF16, HATTN_ROPE_HALF, true, false}, 0, true},
        {{1, 8, 4, 4097, 4097, 256, HATTN_DTYPE_FP16, HATTN_ROPE_INTERLEAVED, true, true}, 0, false},
        {{1, 4, 4, 1000, 4097, 256, HATTN_DTYPE_BF16, HATTN_ROPE_HALF, true, false}, 0, true},
        {{2, 8, 2, 4097, 4097, 128, HATTN_DTYPE_BF16, HATTN_ROPE_HALF, true, false}, 2, true},
    };
    for (const Run& run : runs) {
        const Case& c = run.c;
        SCOPED_TRACE(case_name(c) + (run.vt ? " V^T" : " V rows") + (run.chunks ? " butterfly" : ""));
        std::mt19937_64 rng(kSeed ^ std::hash<std::string>{}(case_name(c)) ^ 0x11);
        CaseInputs inputs = make_case_inputs(c, rng);
        Tensor &q = inputs.q, &k = inputs.k, &v = inputs.v;
        const size_t v_out = run.vt ? hattn_fwd_fp8_workspace_size(c.batch, c.heads_kv, c.seqlen_k, c.head_dim)
                                    : static_cast<size_t>(v.out.size);
        const size_t nbq = static_cast<size_t>(c.batch) * c.heads_q * ht::fp8_blocks(c.seqlen_q);
        const size_t nbk = static_cast<size_t>(c.batch) * c.heads_kv * ht::fp8_blocks(c.seqlen_k);
        DeviceMemory in_q(q.in.size * 2), in_k(k.in.size * 2), in_v(v.in.size * 2), d_cos(inputs.cos.size() * 4),
            d_sin(inputs.sin.size() * 4);
        ASSERT_TRUE(in_q.ptr && in_k.ptr && in_v.ptr && d_cos.ptr && d_sin.ptr);
        HATTN_CUDA_CHECK(cudaMemcpy(in_q.ptr, q.bits.data(), q.in.size * 2, cudaMemcpyHostToDevice));
        HATTN_CUDA_CHECK(cudaMemcpy(in_k.ptr, k.bits.data(), k.in.size * 2, cudaMemcpyHostToDevice));
        HATTN_CUDA_CHECK(cudaMemcpy(in_v.ptr, v.bits.data(), v.in.size * 2, cudaMemcpyHostToDevice));
        HATTN_CUDA_CHECK(cudaMemcpy(d_cos.ptr, inputs.cos.data(), inputs.cos.size() * 4, cudaMemcpyHostToDevice));
        HATTN_CUDA_CHECK(cudaMemcpy(d_sin.ptr, inputs.sin.data(), inputs.sin.size() * 4, cudaMemcpyHostToDevice));
        std::vector<uint8_t> got[kLaunches][6];  // [Launch][q, k, v, their descales]
        // (The default's Q / K kernel is the tensor-core one: a butterfly layout has no default twin.)
        const int launches = run.chunks == 0 ? kLaunches : kCApiDefault;
        for (int launch = kPlain; launch < launches; ++launch) {
            DeviceMemory out_q(q.out.size), out_k(k.out.size), out_v(v_out), ds_q(nbq * 4), ds_k(nbk * 4),
                ds_v(nbk * 4);
            DeviceMemory* outs[6] = {&out_q, &out_k, &out_v, &ds_q, &ds_k, &ds_v};
            const size_t sizes[6] = {static_cast<size_t>(q.out.size), static_cast<size_t>(k.out.size), v_out,
                                     nbq * 4, nbk * 4, nbk * 4};
            for (int i = 0; i < 6; ++i) {
                ASSERT_NE(outs[i]->ptr, nullptr);
                HATTN_CUDA_CHECK(cudaMemset(outs[i]->ptr, kPoison8, sizes[i]));
            }
            const hattn_fp8_prepass_params p = case_params(
                c, q, k, v,
                CaseBuffers{{in_q.ptr, in_k.ptr, in_v.ptr}, {out_q.ptr, out_k.ptr, out_v.ptr},
                            {ds_q.ptr, ds_k.ptr, ds_v.ptr}, d_cos.ptr, d_sin.ptr},
                inputs.rope_rows, inputs.rope_offset, run.vt);
            char msg[512];
            ASSERT_EQ(hattn_fp8_prepass_validate(&p, msg, sizeof msg), HATTN_SUCCESS) << msg;
            if (launch == kCApiDefault) {
                ASSERT_EQ(hattn_fp8_prepass(&p, nullptr), HATTN_SUCCESS);
            } else {
                // Named, so that the default's overlap does not apply (0 CTAs per block: the default's).
                hattn::fp8::Fp8PrepassVariant variant;
                variant.chunks = run.chunks != 0 ? run.chunks : hattn::fp8::kFp8MmaChunks;
                variant.blocks_per_cta = 1;
                variant.v_overlap = launch == kOverlapped ? 1 : 0;
                ASSERT_EQ(hattn::host::fp8_prepass_variant(&p, variant, nullptr), HATTN_SUCCESS);
            }
            for (int i = 0; i < 6; ++i) {  // a plain copy on the same stream: it waits for both grids
                got[launch][i].resize(sizes[i]);
                HATTN_CUDA_CHECK(cudaMemcpy(got[launch][i].data(), outs[i]->ptr, sizes[i], cudaMemcpyDeviceToHost));
            }
        }
        const char* names[6] = {"q", "k", "v", "q descales", "k descales", "v descales"};
        const char* launch_names[kLaunches] = {"plain", "overlapped", "C API default"};
        for (int launch = kOverlapped; launch < launches; ++launch) {
            for (int i = 0; i < 6; ++i) {
                EXPECT_TRUE(got[kPlain][i] == got[launch][i])
                    << names[i] << " differ between the plain and the " << launch_names[launch] << " launch";
                EXPECT_NE(std::count(got[launch][i].begin(), got[launch][i].end(), kPoison8),
                          static_cast<std::ptrdiff_t>(got[launch][i].size()))
                    << names[i] << " not written (" << launch_names[launch] << ")";
            }
        }
    }
}

// Every rope x Hadamard x head dim x dtype x (contiguous, strided) (72 cases), with the
// (seqlen_q, seqlen_k) pair and the GQA head counts cycling through the odd lengths 1, 17, 1000,
// 4097 and the group sizes 1, 2, 6, 4; then every pair of the odd lengths at one configuration.
std::vector<Case> cases() {
    const int lengths[] = {1, 17, 1000, 4097};
    const int heads[][2] = {{4, 2}, {6, 1}, {2, 2}, {8, 2}};
    std::vector<Case> all;
    int i = 0;
    for (hattn_rope rope : {HATTN_ROPE_NONE, HATTN_ROPE_INTERLEAVED, HATTN_ROPE_HALF})
        for (bool hadamard : {false, true})
            for (int d : {64, 128, 256})
                for (hattn_dtype t : {HATTN_DTYPE_BF16, HATTN_DTYPE_FP16})
                    for (bool strided : {false, true}) {
                        // Consecutive groups of 4 (dtype x layout) shift the lengths, so each
                        // (dtype, layout) pair meets every (seqlen_q, seqlen_k) pair.
                        const int combo = i % 4, group = i / 4;
                        const int sq = lengths[(combo + group) % 4], sk = lengths[(combo + group / 4) % 4];
                        const int* hh = heads[(combo + group / 2) % 4];
                        all.push_back({2, hh[0], hh[1], sq, sk, d, t, rope, hadamard, strided});
                        ++i;
                    }
    for (int sq : lengths)
        for (int sk : lengths) all.push_back({1, 4, 2, sq, sk, 128, HATTN_DTYPE_BF16, HATTN_ROPE_HALF, true, true});
    // One V descale per head (HATTN_FP8_PREPASS_V_PER_HEAD): every head dim and dtype, odd lengths,
    // GQA, strides, with and without the Hadamard on Q and K (the tensor-core kernel then quantizes
    // V in a launch of its own).
    for (int d : {64, 128, 256})
        for (hattn_dtype t : {HATTN_DTYPE_BF16, HATTN_DTYPE_FP16})
            for (bool hadamard : {false, true}) {
                Case c{2, 4, 2, 17, hadamard ? 4097 : 1000, d, t, HATTN_ROPE_NONE, hadamard, t == HATTN_DTYPE_FP16};
                c.v_per_head = true;
                all.push_back(c);
            }
    return all;
}

INSTANTIATE_TEST_SUITE_P(Fp8Prepass, Fp8PrepassTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

}  // namespace
