// hattn/test/ptx_mufu_test.cu -- ex2 on the special-function unit (ptx/mufu.cuh) against exp2 in
// float64, and the packing conversions (ptx/convert.cuh) against host round-to-nearest-even.
//
// Bounds on the relative error |y - 2^x| / 2^x:
//   f32   2^-21 (the ISA quotes 2^-22.5 for ex2.approx.ftz.f32; the test keeps a margin)
//   f16   2^-9  (two f16 ulps: rounding to 11 significant bits alone costs up to 2^-11)
//   bf16  2^-7  (two bf16 ulps: rounding to 8 significant bits alone costs up to 2^-8)
// Inputs cover negatives down to -126 (the smallest exponent whose result is still normal: the
// .ftz forms flush smaller results), zero, large positives, and for the 16-bit forms every
// representable input of the tested range.
#include "gpu_test_util.h"
#include "ptx_test_util.cuh"

#include "ptx/hattn_ptx.cuh"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

namespace {

using hattn::test::DeviceBuffer;

constexpr int kThreads = 256;
constexpr float kMinNormalExponent = -126.0f;      // 2^-126 = FLT_MIN: below it .ftz gives 0
constexpr float kMaxF32Exponent = 127.99f;         // 2^127.99 < FLT_MAX
constexpr float kMinF16NormalExponent = -14.0f;    // f16 normals start at 2^-14
constexpr float kMaxF16Exponent = 15.99f;          // 2^15.99 < 65504 (f16 max)
const double kF32RelBound = std::ldexp(1.0, -21);
const double kF16RelBound = std::ldexp(1.0, -9);
const double kBf16RelBound = std::ldexp(1.0, -7);

enum class Ex2Op { kF32, kF16x2, kBf16x2 };

// kF32: in/out hold f32 bits; the 16-bit forms hold one packed pair per word.
__global__ void ex2_kernel(Ex2Op op, const uint32_t* in, uint32_t* out, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        switch (op) {
            case Ex2Op::kF32:
                out[i] = __float_as_uint(hattn::ptx::ex2_approx_f32(__uint_as_float(in[i])));
                break;
            case Ex2Op::kF16x2:
                out[i] = hattn::ptx::ex2_approx_f16x2(in[i]);
                break;
            case Ex2Op::kBf16x2:
                out[i] = hattn::ptx::ex2_approx_ftz_bf16x2(in[i]);
                break;
        }
    }
}

struct Packed {
    uint32_t bf16x2, f16x2, e4m3x2, e5m2x2, pack_bf16, pack_f16;
};

__global__ void convert_kernel(const float* lo, const float* hi, Packed* out, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        Packed p;
        p.bf16x2 = hattn::ptx::cvt_rn_bf16x2_f32(lo[i], hi[i]);
        p.f16x2 = hattn::ptx::cvt_rn_f16x2_f32(lo[i], hi[i]);
        p.e4m3x2 = hattn::ptx::cvt_rn_satfinite_e4m3x2_f32(lo[i], hi[i]);
        p.e5m2x2 = hattn::ptx::cvt_rn_satfinite_e5m2x2_f32(lo[i], hi[i]);
        p.pack_bf16 = hattn::ptx::pack_f32x2<true>(lo[i], hi[i]);
        p.pack_f16 = hattn::ptx::pack_f32x2<false>(lo[i], hi[i]);
        out[i] = p;
    }
}

float float_of(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}
uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
}

// Runs ex2_kernel over `in` and returns the output words.
std::vector<uint32_t> run_ex2(Ex2Op op, const std::vector<uint32_t>& in) {
    DeviceBuffer<uint32_t> d_in(in.size()), d_out(in.size());
    std::vector<uint32_t> out(in.size(), 0);
    EXPECT_EQ(d_in.status, cudaSuccess);
    EXPECT_EQ(d_out.status, cudaSuccess);
    if (d_in.status != cudaSuccess || d_out.status != cudaSuccess) return out;
    EXPECT_EQ(cudaMemcpy(d_in.ptr, in.data(), d_in.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemset(d_out.ptr, 0xFF, d_out.bytes()), cudaSuccess);  // NaN poison
    const int blocks = static_cast<int>((in.size() + kThreads - 1) / kThreads);
    ex2_kernel<<<blocks, kThreads>>>(op, d_in.ptr, d_out.ptr, static_cast<int>(in.size()));
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), d_out.ptr, d_out.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
}

// Checks rel error of every (x, y) pair; x, y already decoded.
::testing::AssertionResult ex2_within(const std::vector<double>& x, const std::vector<double>& y, double bound) {
    size_t bad = 0;
    double worst = 0.0, worst_x = 0.0;
    std::ostringstream first;
    for (size_t i = 0; i < x.size(); ++i) {
        const double ref = std::exp2(x[i]);
        const double rel = std::fabs(y[i] - ref) / ref;
        if (!(rel <= bound)) {
            if (bad < 8) first << "\n  2^" << x[i] << ": got " << y[i] << ", want " << ref << " (rel " << rel << ")";
            ++bad;
        }
        if (rel > worst) {
            worst = rel;
            worst_x = x[i];
        }
    }
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << bad << " of " << x.size() << " inputs over the bound " << bound
                                         << "; worst rel " << worst << " at x = " << worst_x << first.str();
}

// Every 16-bit pattern whose decoded value lies in [lo, hi], paired two per word.
template <class Decode>
std::vector<uint16_t> all_inputs_in(double lo, double hi, Decode decode) {
    std::vector<uint16_t> v;
    for (uint32_t b = 0; b <= 0xFFFF; ++b) {
        const double x = decode(static_cast<uint16_t>(b));
        if (std::isfinite(x) && x >= lo && x <= hi) v.push_back(static_cast<uint16_t>(b));
    }
    if (v.size() % 2 != 0) v.push_back(v.front());
    return v;
}

template <class Decode>
void check_ex2_16bit(Ex2Op op, double lo, double hi, double bound, Decode decode) {
    const std::vector<uint16_t> inputs = all_inputs_in(lo, hi, decode);
    std::vector<uint32_t> packed(inputs.size() / 2);
    for (size_t i = 0; i < packed.size(); ++i) {
        packed[i] = inputs[2 * i] | (static_cast<uint32_t>(inputs[2 * i + 1]) << 16);  // low half first
    }
    const std::vector<uint32_t> out = run_ex2(op, packed);
    std::vector<double> x(inputs.size()), y(inputs.size());
    for (size_t i = 0; i < packed.size(); ++i) {
        for (int h = 0; h < 2; ++h) {
            x[2 * i + h] = decode(static_cast<uint16_t>(packed[i] >> (16 * h)));
            y[2 * i + h] = decode(static_cast<uint16_t>(out[i] >> (16 * h)));
        }
    }
    EXPECT_TRUE(ex2_within(x, y, bound));
}

// Independent round-to-nearest-even to bf16 (no NaN inputs): add half an ulp minus one, plus
// the lowest kept bit, and truncate.
uint16_t bf16_rne_reference(float f) {
    const uint32_t u = bits_of(f);
    return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace

TEST(PtxMufu, Ex2ApproxF32RelativeError) {
    HATTN_REQUIRE_HOPPER();
    std::vector<float> xs;
    constexpr int kGrid = 1 << 16;  // an even grid over the whole normal range ...
    for (int i = 0; i <= kGrid; ++i) {
        xs.push_back(kMinNormalExponent + (kMaxF32Exponent - kMinNormalExponent) * i / kGrid);
    }
    std::mt19937 rng(0xe2f3);  // ... random points near zero, where softmax lives ...
    std::uniform_real_distribution<float> near_zero(-20.0f, 1.0f);
    for (int i = 0; i < 4096; ++i) xs.push_back(near_zero(rng));
    for (float special : {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 1e-7f, -1e-7f, -126.0f, 127.0f, -100.25f, 64.0f}) {
        xs.push_back(special);  // ... and exact cases
    }
    std::vector<uint32_t> in(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) in[i] = bits_of(xs[i]);
    const std::vector<uint32_t> out = run_ex2(Ex2Op::kF32, in);
    std::vector<double> x(xs.begin(), xs.end()), y(out.size());
    for (size_t i = 0; i < out.size(); ++i) y[i] = float_of(out[i]);
    EXPECT_TRUE(ex2_within(x, y, kF32RelBound));
}

TEST(PtxMufu, Ex2ApproxF16x2EveryInput) {
    HATTN_REQUIRE_HOPPER();
    check_ex2_16bit(Ex2Op::kF16x2, kMinF16NormalExponent, kMaxF16Exponent, kF16RelBound,
                    [](uint16_t b) { return static_cast<double>(hattn::test::float_from_f16_bits(b)); });
}

TEST(PtxMufu, Ex2ApproxFtzBf16x2EveryInput) {
    HATTN_REQUIRE_HOPPER();
    check_ex2_16bit(Ex2Op::kBf16x2, kMinNormalExponent, 127.0, kBf16RelBound,
                    [](uint16_t b) { return static_cast<double>(hattn::test::float_from_bf16_bits(b)); });
}

TEST(PtxConvert, PackersRoundToNearestEvenLowHalfFirst) {
    HATTN_REQUIRE_HOPPER();
    // Exact ties (round to the even neighbour), saturation and ordinary random values.
    std::vector<float> values = {
        1.0f + 0x1p-8f,  1.0f + 3 * 0x1p-8f,    // bf16 ties at 1: -> 1.0, -> 1 + 2^-6
        1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,   // f16 ties at 1
        1.0625f,         1.1875f,               // e4m3 ties at 1: -> 1.0, -> 1.25
        1.125f,          -1.375f,               // e5m2 ties at 1: -> 1.0, -> -1.5
        448.0f,          1000.0f,  -1e6f,       // e4m3 max and saturation
        65504.0f,        0.0f,     -0.0f,       // f16 max
        0x1p-9f,         -0x1p-12f,             // e4m3 smallest subnormal; below it
    };
    std::mt19937 rng(0xc0de);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    std::uniform_real_distribution<float> wide(-600.0f, 600.0f);
    for (int i = 0; i < 2048; ++i) values.push_back(i % 2 ? unit(rng) : wide(rng));
    if (values.size() % 2 != 0) values.push_back(0.75f);
    // Pairs (lo, hi) = (values[i], values[n - 1 - i]): every value is tried in both halves.
    const size_t n = values.size();
    std::vector<float> lo(n), hi(n);
    for (size_t i = 0; i < n; ++i) {
        lo[i] = values[i];
        hi[i] = values[n - 1 - i];
    }

    DeviceBuffer<float> d_lo(n), d_hi(n);
    DeviceBuffer<Packed> d_out(n);
    HATTN_CUDA_CHECK(d_lo.status);
    HATTN_CUDA_CHECK(d_hi.status);
    HATTN_CUDA_CHECK(d_out.status);
    HATTN_CUDA_CHECK(cudaMemcpy(d_lo.ptr, lo.data(), d_lo.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemcpy(d_hi.ptr, hi.data(), d_hi.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemset(d_out.ptr, 0xFF, d_out.bytes()));
    convert_kernel<<<static_cast<int>((n + kThreads - 1) / kThreads), kThreads>>>(d_lo.ptr, d_hi.ptr, d_out.ptr,
                                                                                 static_cast<int>(n));
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<Packed> got(n);
    HATTN_CUDA_CHECK(cudaMemcpy(got.data(), d_out.ptr, d_out.bytes(), cudaMemcpyDeviceToHost));

    int bad = 0;
    auto expect_bits = [&](const char* what, size_t i, uint32_t got_bits, uint32_t want_bits) {
        if (got_bits != want_bits && ++bad <= 12) {
            ADD_FAILURE() << what << " (" << lo[i] << ", " << hi[i] << "): 0x" << std::hex << got_bits << ", want 0x"
                          << want_bits << std::dec;
        }
    };
    for (size_t i = 0; i < n; ++i) {
        const uint32_t bf16 = bf16_rne_reference(lo[i]) | (uint32_t{bf16_rne_reference(hi[i])} << 16);
        const uint32_t f16 = hattn::test::f16_bits_from_float(lo[i]) |
                             (uint32_t{hattn::test::f16_bits_from_float(hi[i])} << 16);
        const uint32_t e4m3 = hattn::test::e4m3_bits_from_float(lo[i]) |
                              (uint32_t{hattn::test::e4m3_bits_from_float(hi[i])} << 8);
        const uint32_t e5m2 = hattn::test::e5m2_bits_from_float(lo[i]) |
                              (uint32_t{hattn::test::e5m2_bits_from_float(hi[i])} << 8);
        expect_bits("cvt_rn_bf16x2_f32", i, got[i].bf16x2, bf16);
        expect_bits("cvt_rn_f16x2_f32", i, got[i].f16x2, f16);
        expect_bits("cvt_rn_satfinite_e4m3x2_f32", i, got[i].e4m3x2 & 0xFFFFu, e4m3);
        expect_bits("cvt_rn_satfinite_e5m2x2_f32", i, got[i].e5m2x2 & 0xFFFFu, e5m2);
        expect_bits("pack_f32x2<bf16>", i, got[i].pack_bf16, bf16);
        expect_bits("pack_f32x2<f16>", i, got[i].pack_f16, f16);
    }
    EXPECT_EQ(bad, 0);

    // Hand-worked anchors (independent of the host conversion library):
    //   bf16 1 + 2^-8 is a tie between 1.0 (0x3F80, even) and 1 + 2^-7 (0x3F81) -> 0x3F80;
    //   bf16 1 + 3 2^-8 ties 0x3F81 / 0x3F82 -> 0x3F82.  f16 the same at 2^-11: 0x3C00, 0x3C02.
    //   e4m3 (bias 7, 3 mantissa bits): 1.0 = 0x38, 1.25 = 0x3A, 448 = 0x7E (largest finite).
    EXPECT_EQ(got[0].bf16x2 & 0xFFFFu, 0x3F80u);
    EXPECT_EQ(got[1].bf16x2 & 0xFFFFu, 0x3F82u);
    EXPECT_EQ(got[2].f16x2 & 0xFFFFu, 0x3C00u);
    EXPECT_EQ(got[3].f16x2 & 0xFFFFu, 0x3C02u);
    EXPECT_EQ(got[4].e4m3x2 & 0xFFu, 0x38u);
    EXPECT_EQ(got[5].e4m3x2 & 0xFFu, 0x3Au);
    EXPECT_EQ(got[8].e4m3x2 & 0xFFu, 0x7Eu);
    EXPECT_EQ(got[9].e4m3x2 & 0xFFu, 0x7Eu) << "1000 saturates to 448";
    EXPECT_EQ(got[10].e4m3x2 & 0xFFu, 0xFEu) << "-1e6 saturates to -448";
}
