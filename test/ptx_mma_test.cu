// hattn/test/ptx_mma_test.cu -- mma.sync m16n8k16 with fp32 accumulation (ptx/mma.cuh), bf16 and
// fp16 operands, against a float64 product on the host, in the fragment layout of PTX ISA
// 9.7.14.5.14 as ptx/mma.cuh states it: lane l (g = l / 4, t = l % 4) holds A's rows g / g + 8,
// k 2t..2t+1 / 2t+8..2t+9, B's column g at the same k, and D's rows g / g + 8, columns 2t..2t+1.
// Inputs are random small integers times powers of two, so every product and every partial sum
// is exact in fp32 and the result must match bit for bit, whatever the order of the additions.
#include "gpu_test_util.h"
#include "ptx_test_util.cuh"

#include "ptx/hattn_ptx.cuh"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace {

using hattn::test::DeviceBuffer;
using hattn::test::kWarpSize;

constexpr int kM = 16, kN = 8, kK = 16;

// a: [16][16] row-major, b: [16 k][8 n], c / d: [16][8], 16-bit elements as raw bits.
template <bool kBf16>
__global__ void mma_kernel(const uint16_t* a, const uint16_t* b, const float* c, float* d) {
    const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
    auto pack = [](uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16); };
    const uint32_t af[4] = {pack(a[g * kK + 2 * t], a[g * kK + 2 * t + 1]),
                            pack(a[(g + 8) * kK + 2 * t], a[(g + 8) * kK + 2 * t + 1]),
                            pack(a[g * kK + 2 * t + 8], a[g * kK + 2 * t + 9]),
                            pack(a[(g + 8) * kK + 2 * t + 8], a[(g + 8) * kK + 2 * t + 9])};
    const uint32_t b0 = pack(b[(2 * t) * kN + g], b[(2 * t + 1) * kN + g]);
    const uint32_t b1 = pack(b[(2 * t + 8) * kN + g], b[(2 * t + 9) * kN + g]);
    const float cf[4] = {c[g * kN + 2 * t], c[g * kN + 2 * t + 1], c[(g + 8) * kN + 2 * t], c[(g + 8) * kN + 2 * t + 1]};
    float df[4];
    if constexpr (kBf16) {
        hattn::ptx::mma_m16n8k16_f32_bf16(df, af, b0, b1, cf);
    } else {
        hattn::ptx::mma_m16n8k16_f32_f16(df, af, b0, b1, cf);
    }
    d[g * kN + 2 * t] = df[0];
    d[g * kN + 2 * t + 1] = df[1];
    d[(g + 8) * kN + 2 * t] = df[2];
    d[(g + 8) * kN + 2 * t + 1] = df[3];
}

// v = small integer * 2^e, exact in both 16-bit formats; returns its bits.
uint16_t to_bits(double v, bool bf16) {
    const float f = static_cast<float>(v);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (bf16) return static_cast<uint16_t>(u >> 16);  // exact: at most 8 significant bits
    // fp16 from an exactly representable float: rebuild sign, exponent and 10-bit fraction.
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    if ((u & 0x7FFFFFFFu) == 0) return sign;
    const int exp = static_cast<int>((u >> 23) & 0xFF) - 127 + 15;
    return static_cast<uint16_t>(sign | (exp << 10) | ((u >> 13) & 0x3FFu));
}

template <bool kBf16>
void check_mma(uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> small(-15, 15), shift(-3, 3);
    std::vector<double> a(kM * kK), b(kK * kN), c(kM * kN);
    std::vector<uint16_t> a_bits(a.size()), b_bits(b.size());
    std::vector<float> c_f(c.size());
    for (size_t i = 0; i < a.size(); ++i) a_bits[i] = to_bits(a[i] = std::ldexp(small(rng), shift(rng)), kBf16);
    for (size_t i = 0; i < b.size(); ++i) b_bits[i] = to_bits(b[i] = std::ldexp(small(rng), shift(rng)), kBf16);
    for (size_t i = 0; i < c.size(); ++i) c_f[i] = static_cast<float>(c[i] = std::ldexp(small(rng), shift(rng)));
    DeviceBuffer<uint16_t> da(a_bits.size()), db(b_bits.size());
    DeviceBuffer<float> dc(c_f.size()), dd(c_f.size());
    HATTN_CUDA_CHECK(da.status);
    HATTN_CUDA_CHECK(db.status);
    HATTN_CUDA_CHECK(dc.status);
    HATTN_CUDA_CHECK(dd.status);
    HATTN_CUDA_CHECK(cudaMemcpy(da.ptr, a_bits.data(), da.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemcpy(db.ptr, b_bits.data(), db.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemcpy(dc.ptr, c_f.data(), dc.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemset(dd.ptr, 0xFF, dd.bytes()));  // NaN poison: every element must be written
    mma_kernel<kBf16><<<1, kWarpSize>>>(da.ptr, db.ptr, dc.ptr, dd.ptr);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> d(c_f.size());
    HATTN_CUDA_CHECK(cudaMemcpy(d.data(), dd.ptr, dd.bytes(), cudaMemcpyDeviceToHost));
    for (int m = 0; m < kM; ++m)
        for (int n = 0; n < kN; ++n) {
            double want = c[m * kN + n];
            for (int k = 0; k < kK; ++k) want += a[m * kK + k] * b[k * kN + n];
            EXPECT_EQ(static_cast<double>(d[m * kN + n]), want) << (kBf16 ? "bf16" : "f16") << " d[" << m << "][" << n << "]";
        }
}

TEST(PtxMma, M16n8k16Bf16MatchesTheFragmentLayout) {
    HATTN_REQUIRE_HOPPER();
    for (uint32_t seed = 1; seed <= 4; ++seed) check_mma<true>(seed);
}

TEST(PtxMma, M16n8k16F16MatchesTheFragmentLayout) {
    HATTN_REQUIRE_HOPPER();
    for (uint32_t seed = 1; seed <= 4; ++seed) check_mma<false>(seed);
}

}  // namespace
