// hattn/test/fwd_fp8_accuracy_test.cu -- the accuracy FP8 attention costs on inputs with outliers
// (FlashAttention-3's Table 3 setup, testing::measure_fp8_accuracy), on a Hopper GPU:
//   * the measurement's own tools first: the float64 GPU reference over a subset of rows against
//     the CPU float64 reference, and the per-tensor e4m3 quantizer byte for byte against
//     testing/fp8_reference.h;
//   * then the bound at seqlen 4096, d128: with Q, K, V ~ N(0,1) + N(0,100) Bernoulli(0.001), O of
//     the pre-pass with block scales and the random-sign Hadamard has an RMSE (against the float64
//     attention of the unquantized inputs) of at most 9e-3 (the goal hattn set itself), and at
//     least kMinRatio below that of one e4m3 scale per tensor without the Hadamard. The goal for
//     that ratio is 2.5 (FlashAttention-3's own table gives 2.6); the H200 measured 2.26 on these
//     inputs (bench/RESULTS.md run 27): the error is dominated by a few rows where one key with an
//     outlier aligned in q and k takes the softmax, so the ratio moves 2.0-3.6 with the seed and
//     the rows sampled. The test guards what is reached and prints where the goal stands.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "hattn.h"
#include "testing/cpu_reference.h"
#include "testing/fp8_accuracy.h"
#include "testing/fp8_reference.h"
#include "testing/numerics.h"

namespace {

namespace ht = hattn::testing;
namespace nm = hattn::numerics;
using hattn::test::DeviceMemory;

// The goal (FlashAttention-3 reports 9.1e-3 for block scales + Hadamard, 2.4e-2 per tensor).
constexpr double kGoalRmse = 9e-3;
constexpr double kGoalRatio = 2.5;
constexpr double kMinRatio = 2.0;  // what the test requires of the ratio (2.26 measured)
// The kernel's RMSE over its inputs' floor: 1.006 (a) and 1.018 (c) on this test's inputs,
// 1.008-1.013 on eight samples of 16-64 heads (bench/RESULTS.md run 55c).
constexpr double kOverFloorMax = 1.05;
constexpr double kOverFloorMin = 0.95;
constexpr double kVPerHeadMaxRatio = 1.05;  // (c) with one V descale per head, at most this times (c)
// The float64 GPU reference differs from the CPU one only by summation order: ~1e-15 relative.
constexpr double kReferenceRelTol = 1e-12;
constexpr uint64_t kSeed = 0xACC8ull;

struct RowsCase {
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, rows;
    bool causal;
};

class Fp64RowsReference : public ::testing::TestWithParam<RowsCase> {};

TEST_P(Fp64RowsReference, MatchesCpuFloat64) {
    HATTN_REQUIRE_HOPPER();
    const RowsCase c = GetParam();
    const size_t nq = static_cast<size_t>(c.batch) * c.seqlen_q * c.heads_q * c.head_dim;
    const size_t nk = static_cast<size_t>(c.batch) * c.seqlen_k * c.heads_kv * c.head_dim;
    DeviceMemory q(nq * 2), k(nk * 2), v(nk * 2);
    const size_t n_out = static_cast<size_t>(c.batch) * c.heads_q * c.rows;
    DeviceMemory o(n_out * c.head_dim * sizeof(double)), lse(n_out * sizeof(double));
    ASSERT_TRUE(q.ptr && k.ptr && v.ptr && o.ptr && lse.ptr);
    HATTN_CUDA_CHECK(ht::fill_normal_outliers(q.ptr, nq, HATTN_DTYPE_BF16, kSeed, 0.01f, 10.f, nullptr));
    HATTN_CUDA_CHECK(ht::fill_normal_outliers(k.ptr, nk, HATTN_DTYPE_BF16, kSeed + 1, 0.01f, 10.f, nullptr));
    HATTN_CUDA_CHECK(ht::fill_normal_outliers(v.ptr, nk, HATTN_DTYPE_BF16, kSeed + 2, 0.01f, 10.f, nullptr));
    hattn_fwd_params p = hattn_fwd_params_contiguous(q.ptr, k.ptr, v.ptr, nullptr, c.batch, c.heads_q, c.heads_kv,
                                                     c.seqlen_q, c.seqlen_k, c.head_dim, HATTN_DTYPE_BF16);
    p.causal = c.causal ? 1 : 0;
    HATTN_CUDA_CHECK(ht::reference_fwd_fp64_rows(p, c.rows, static_cast<double*>(o.ptr), static_cast<double*>(lse.ptr),
                                                 nullptr));
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<double> got_o(n_out * c.head_dim), got_lse(n_out);
    HATTN_CUDA_CHECK(cudaMemcpy(got_o.data(), o.ptr, got_o.size() * sizeof(double), cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(cudaMemcpy(got_lse.data(), lse.ptr, got_lse.size() * sizeof(double), cudaMemcpyDeviceToHost));
    auto to_float = [](const DeviceMemory& d, size_t n) {
        std::vector<uint16_t> h(n);
        EXPECT_EQ(cudaMemcpy(h.data(), d.ptr, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        std::vector<float> f(n);
        for (size_t i = 0; i < n; ++i) f[i] = nm::bf16_to_float(h[i]);
        return f;
    };
    const std::vector<float> fq = to_float(q, nq), fk = to_float(k, nk), fv = to_float(v, nk);
    const hattn::test::ReferenceResult ref = hattn::test::reference_attention_fp64(p, fq.data(), fk.data(), fv.data());
    double worst = 0;
    size_t checked = 0;
    for (int b = 0; b < c.batch; ++b) {
        for (int h = 0; h < c.heads_q; ++h) {
            for (int r = 0; r < c.rows; ++r) {
                const int i = ht::reference_row(r, c.rows, c.seqlen_q);
                const size_t out = (static_cast<size_t>(b) * c.heads_q + h) * c.rows + r;
                const double ref_lse = ref.lse[(static_cast<size_t>(b) * c.heads_q + h) * c.seqlen_q + i];
                if (std::isinf(ref_lse)) {
                    EXPECT_EQ(got_lse[out], ref_lse) << "row " << i << " sees no key";
                } else {
                    EXPECT_NEAR(got_lse[out], ref_lse, kReferenceRelTol * (1 + std::fabs(ref_lse))) << "LSE row " << i;
                }
                for (int e = 0; e < c.head_dim; ++e) {
                    const double want = ref.o[((static_cast<size_t>(b) * c.seqlen_q + i) * c.heads_q + h) * c.head_dim + e];
                    const double err = std::fabs(got_o[out * c.head_dim + e] - want);
                    worst = std::max(worst, err);
                    ASSERT_LE(err, kReferenceRelTol * 20.0) << "O at b " << b << " h " << h << " row " << i << " col " << e;
                    ++checked;
                }
            }
        }
    }
    std::printf("fp64 rows reference: %zu elements, max abs err vs CPU %.3e\n", checked, worst);
}

INSTANTIATE_TEST_SUITE_P(Cases, Fp64RowsReference,
                         ::testing::Values(RowsCase{1, 2, 2, 300, 300, 128, 37, false},
                                           RowsCase{2, 4, 2, 200, 333, 64, 200, true},
                                           RowsCase{1, 2, 1, 333, 100, 256, 50, true}),
                         [](const ::testing::TestParamInfo<RowsCase>& info) {
                             const RowsCase& c = info.param;
                             return "d" + std::to_string(c.head_dim) + "_sq" + std::to_string(c.seqlen_q) + "_sk" +
                                    std::to_string(c.seqlen_k) + (c.causal ? "_causal" : "_full");
                         });

TEST(Fp8PerTensorQuantizer, MatchesReferenceByteForByte) {
    HATTN_REQUIRE_HOPPER();
    constexpr size_t kN = 1 << 20;
    constexpr size_t kDescales = 77;
    DeviceMemory x(kN * 2), out(kN), ds(kDescales * 4), scratch(4);
    ASSERT_TRUE(x.ptr && out.ptr && ds.ptr && scratch.ptr);
    HATTN_CUDA_CHECK(ht::fill_normal_outliers(x.ptr, kN, HATTN_DTYPE_BF16, kSeed, 0.001f, 10.f, nullptr));
    HATTN_CUDA_CHECK(ht::quantize_e4m3_per_tensor(x.ptr, kN, HATTN_DTYPE_BF16, static_cast<uint8_t*>(out.ptr),
                                                  static_cast<float*>(ds.ptr), kDescales,
                                                  static_cast<float*>(scratch.ptr), nullptr));
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> hx(kN);
    std::vector<uint8_t> hq(kN);
    std::vector<float> hds(kDescales);
    HATTN_CUDA_CHECK(cudaMemcpy(hx.data(), x.ptr, kN * 2, cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(cudaMemcpy(hq.data(), out.ptr, kN, cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(cudaMemcpy(hds.data(), ds.ptr, kDescales * 4, cudaMemcpyDeviceToHost));
    float amax = 0.f;
    size_t outliers = 0;
    for (uint16_t b : hx) {
        const float a = std::fabs(nm::bf16_to_float(b));
        amax = std::max(amax, a);
        outliers += a > 6.f ? 1 : 0;  // beyond 6 sigma of N(0,1): (almost) only the outliers
    }
    // The outlier draw happened at about the asked rate (0.1%; about 60% of them land past 6).
    EXPECT_GT(outliers, kN / 4000);
    EXPECT_LT(outliers, kN / 500);
    const float scale = std::fmin(HATTN_FP8_E4M3_MAX / amax, FLT_MAX);
    for (size_t i = 0; i < kN; ++i) {
        ASSERT_EQ(hq[i], ht::double_to_e4m3(nm::bf16_to_float(hx[i]) * scale)) << "element " << i;
    }
    for (float d : hds) EXPECT_EQ(d, amax / HATTN_FP8_E4M3_MAX);
}

// Issue 10's bound on FlashAttention-3's setup at seqlen 4096, d128 (batch 1, 4 heads, 1024
// reference rows per head). A few seconds on an H200, most of it the float64 reference.
TEST(Fp8Accuracy, BlockScalesWithHadamardBeatPerTensorScaling) {
    HATTN_REQUIRE_HOPPER();
    ht::Fp8AccuracyConfig c;
    c.batch = 1;
    c.heads = 4;
    c.seqlen = 4096;
    c.head_dim = 128;
    c.rows_per_head = 1024;
    c.seed = kSeed;
    ht::Fp8AccuracyResult r;
    std::string error;
    ASSERT_TRUE(ht::measure_fp8_accuracy(c, &r, &error)) << error;
    const double ratio = r.rmse_per_tensor / r.rmse_block_hadamard;
    std::printf("fp8 accuracy s4096 d128 b1 h4, %d rows/head: O rms %.3e; RMSE bf16 %.3e, (a) per-tensor %.3e, "
                "(b) block %.3e, (c) block+Hadamard %.3e, (a)/(c) %.2f (reference %.0f ms)\n",
                r.rows_per_head, r.o_rms, r.rmse_bf16, r.rmse_per_tensor, r.rmse_block, r.rmse_block_hadamard, ratio,
                r.reference_ms);
    // bf16 is two orders below any FP8 variant (FlashAttention-3: 1.9e-4-3.2e-4): a sanity check of
    // the reference and the row bookkeeping.
    EXPECT_LT(r.rmse_bf16, 1e-3);
    EXPECT_LT(r.rmse_block_hadamard, r.rmse_block);
    EXPECT_LE(r.rmse_block_hadamard, kGoalRmse);
    EXPECT_GE(ratio, kMinRatio);
    std::printf("goal (a)/(c) >= %.1f: %s\n", kGoalRatio, ratio >= kGoalRatio ? "met" : "NOT met");
    // The floors (float64 attention of the quantized inputs themselves): the kernel's own share of
    // the error (P's rounding, the lazy rescale, the e4m3 wgmma's accumulation) is small, and the
    // kernel is not a lot better than exact attention of its inputs either (that would mean the
    // reference or the row bookkeeping went wrong).
    const double over_a = r.rmse_per_tensor / r.floor_per_tensor, over_c = r.rmse_block_hadamard / r.floor_block_hadamard;
    std::printf("floors: (a) %.3e, (c) %.3e (ratio %.2f); the kernel over its floor: (a) %.3f, (c) %.3f\n",
                r.floor_per_tensor, r.floor_block_hadamard, r.floor_per_tensor / r.floor_block_hadamard, over_a, over_c);
    EXPECT_LE(over_a, kOverFloorMax);
    EXPECT_LE(over_c, kOverFloorMax);
    EXPECT_GE(over_a, kOverFloorMin);
    EXPECT_GE(over_c, kOverFloorMin);
    // One V descale per head: as accurate as the 128-row blocks (e4m3 is floating point: the scale
    // only moves where its subnormals start; CPU emulation 8.24e-3 vs 8.30e-3, bench/RESULTS.md 38f).
    std::printf("(c) with one V descale per head: %.3e (%.3f x (c))\n", r.rmse_block_hadamard_v_head,
                r.rmse_block_hadamard_v_head / r.rmse_block_hadamard);
    EXPECT_LE(r.rmse_block_hadamard_v_head, kVPerHeadMaxRatio * r.rmse_block_hadamard);
}

}  // namespace
