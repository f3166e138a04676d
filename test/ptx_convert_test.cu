// hattn/test/ptx_convert_test.cu -- the widening conversions of ptx/convert.cuh: cvt_f32_f16 and
// unpack_x2_f32<kIsBf16> (a 16-bit pair, low half first, to two floats), over every 16-bit pattern
// in both halves of the pair.
//
// Widening is exact in both formats: every f16 value (subnormals included) and every bf16 value
// is an f32 value. So each result must equal the host decoder's (src/testing/numerics.h) bit for
// bit; f16 NaNs must give an f32 NaN (the payload is not checked: the ISA does not promise it),
// bf16 NaNs keep their bits (bf16 widening is a shift). Hand-worked anchors check the decoders.
// prmt_b32<kSelector> (byte permute) against a host model of the ISA's generic form for the
// selectors the kernels use (the 4x4 byte transpose of sm90/vt_e4m3.cuh) and a few more.
#include "gpu_test_util.h"
#include "ptx_test_util.cuh"

#include "ptx/hattn_ptx.cuh"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using hattn::test::DeviceBuffer;

constexpr int kThreads = 256;
constexpr uint32_t kPatterns = 1u << 16;
// hi = (lo * kHiMultiplier + kHiOffset) mod 2^16 is a permutation of the 16-bit patterns (the
// multiplier is odd), so every pattern is widened once as a low half and once as a high half.
constexpr uint32_t kHiMultiplier = 40503u;
constexpr uint32_t kHiOffset = 12345u;

struct Widened {
    uint32_t cvt_lo, cvt_hi;    // cvt_f32_f16 of each half
    uint32_t f16_lo, f16_hi;    // unpack_x2_f32<false>
    uint32_t bf16_lo, bf16_hi;  // unpack_x2_f32<true>
};

__global__ void __launch_bounds__(kThreads) widen_kernel(const uint32_t* pairs, Widened* out, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const uint32_t p = pairs[i];
        Widened w;
        w.cvt_lo = __float_as_uint(hattn::ptx::cvt_f32_f16(static_cast<uint16_t>(p & 0xFFFFu)));
        w.cvt_hi = __float_as_uint(hattn::ptx::cvt_f32_f16(static_cast<uint16_t>(p >> 16)));
        float lo, hi;
        hattn::ptx::unpack_x2_f32<false>(p, lo, hi);
        w.f16_lo = __float_as_uint(lo);
        w.f16_hi = __float_as_uint(hi);
        hattn::ptx::unpack_x2_f32<true>(p, lo, hi);
        w.bf16_lo = __float_as_uint(lo);
        w.bf16_hi = __float_as_uint(hi);
        out[i] = w;
    }
}

// The byte-permute selectors under test: sm90::transpose_4x4_bytes's four, identity, byte
// reverse, and a broadcast of b's top byte.
constexpr uint32_t kPrmtSelectors[] = {0x5140, 0x7362, 0x5410, 0x7632, 0x3210, 0x0123, 0x7777};
constexpr int kPrmtSelectorCount = sizeof(kPrmtSelectors) / sizeof(kPrmtSelectors[0]);

__global__ void __launch_bounds__(kThreads) prmt_kernel(const uint32_t* a, const uint32_t* b, uint32_t* out, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        uint32_t* o = out + i * kPrmtSelectorCount;
        o[0] = hattn::ptx::prmt_b32<kPrmtSelectors[0]>(a[i], b[i]);
        o[1] = hattn::ptx::prmt_b32<kPrmtSelectors[1]>(a[i], b[i]);
        o[2] = hattn::ptx::prmt_b32<kPrmtSelectors[2]>(a[i], b[i]);
        o[3] = hattn::ptx::prmt_b32<kPrmtSelectors[3]>(a[i], b[i]);
        o[4] = hattn::ptx::prmt_b32<kPrmtSelectors[4]>(a[i], b[i]);
        o[5] = hattn::ptx::prmt_b32<kPrmtSelectors[5]>(a[i], b[i]);
        o[6] = hattn::ptx::prmt_b32<kPrmtSelectors[6]>(a[i], b[i]);
    }
}

// PTX ISA prmt, generic form with copy selectors (nibble msb 0): byte k of the result is byte
// (selector >> 4 k) & 7 of the 8-byte {b, a}.
uint32_t prmt_model(uint32_t a, uint32_t b, uint32_t selector) {
    const uint64_t src = (static_cast<uint64_t>(b) << 32) | a;
    uint32_t d = 0;
    for (int k = 0; k < 4; ++k) {
        const uint32_t byte = (selector >> (4 * k)) & 7u;
        d |= static_cast<uint32_t>((src >> (8 * byte)) & 0xFFu) << (8 * k);
    }
    return d;
}

uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
}

bool is_f32_nan(uint32_t bits) { return (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0; }

}  // namespace

TEST(PtxConvert, WideningHostDecodersAnchors) {
    // Hand-worked (f32 bits of the exact value), independent of the host decoders under test.
    struct Anchor {
        uint16_t bits;
        uint32_t f32_bits;
    };
    const Anchor f16[] = {
        {0x0001, 0x33800000u},  // smallest subnormal, 2^-24
        {0x8001, 0xB3800000u},  // -2^-24
        {0x03FF, 0x387FC000u},  // largest subnormal, 1023 * 2^-24
        {0x0400, 0x38800000u},  // smallest normal, 2^-14
        {0x3C00, 0x3F800000u},  // 1
        {0x3555, 0x3EAAA000u},  // 0.333251953125
        {0x7BFF, 0x477FE000u},  // 65504, the largest finite
        {0x7C00, 0x7F800000u},  // +inf
        {0xFC00, 0xFF800000u},  // -inf
        {0x8000, 0x80000000u},  // -0
    };
    for (const Anchor& a : f16) {
        EXPECT_EQ(bits_of(hattn::test::float_from_f16_bits(a.bits)), a.f32_bits) << "f16 0x" << std::hex << a.bits;
    }
    const Anchor bf16[] = {
        {0x0001, 0x00010000u},  // an f32 subnormal: 2^-133
        {0x3F80, 0x3F800000u},  // 1
        {0x7F80, 0x7F800000u},  // +inf
        {0xFF80, 0xFF800000u},  // -inf
        {0xFFC1, 0xFFC10000u},  // a NaN keeps its payload
        {0x8000, 0x80000000u},  // -0
    };
    for (const Anchor& a : bf16) {
        EXPECT_EQ(bits_of(hattn::test::float_from_bf16_bits(a.bits)), a.f32_bits) << "bf16 0x" << std::hex << a.bits;
    }
    EXPECT_TRUE(std::isnan(hattn::test::float_from_f16_bits(0x7E00)));
    EXPECT_TRUE(std::isnan(hattn::test::float_from_f16_bits(0xFC01)));
}

TEST(PtxConvert, WideningEveryPatternBothHalves) {
    HATTN_REQUIRE_HOPPER();
    std::vector<uint32_t> pairs(kPatterns);
    for (uint32_t lo = 0; lo < kPatterns; ++lo) {
        const uint32_t hi = (lo * kHiMultiplier + kHiOffset) & 0xFFFFu;
        pairs[lo] = lo | (hi << 16);
    }
    DeviceBuffer<uint32_t> d_pairs(pairs.size());
    DeviceBuffer<Widened> d_out(pairs.size());
    HATTN_CUDA_CHECK(d_pairs.status);
    HATTN_CUDA_CHECK(d_out.status);
    HATTN_CUDA_CHECK(cudaMemcpy(d_pairs.ptr, pairs.data(), d_pairs.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemset(d_out.ptr, 0, d_out.bytes()));  // +0: wrong for every other pattern
    const int n = static_cast<int>(pairs.size());
    widen_kernel<<<(n + kThreads - 1) / kThreads, kThreads>>>(d_pairs.ptr, d_out.ptr, n);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<Widened> got(pairs.size());
    HATTN_CUDA_CHECK(cudaMemcpy(got.data(), d_out.ptr, d_out.bytes(), cudaMemcpyDeviceToHost));

    int bad = 0;
    std::vector<int> seen_lo(kPatterns, 0), seen_hi(kPatterns, 0);
    auto check_f16 = [&](const char* what, uint16_t h, uint32_t got_bits) {
        const float want = hattn::test::float_from_f16_bits(h);
        const bool ok = std::isnan(want) ? is_f32_nan(got_bits) : got_bits == bits_of(want);
        if (!ok && ++bad <= 12) {
            ADD_FAILURE() << what << "(f16 0x" << std::hex << h << "): 0x" << got_bits << ", want 0x" << bits_of(want)
                          << std::dec << " (" << want << ")";
        }
    };
    auto check_bf16 = [&](const char* what, uint16_t h, uint32_t got_bits) {
        const uint32_t want = bits_of(hattn::test::float_from_bf16_bits(h));
        if (got_bits != want && ++bad <= 12) {
            ADD_FAILURE() << what << "(bf16 0x" << std::hex << h << "): 0x" << got_bits << ", want 0x" << want
                          << std::dec;
        }
    };
    for (size_t i = 0; i < pairs.size(); ++i) {
        const uint16_t lo = static_cast<uint16_t>(pairs[i] & 0xFFFFu), hi = static_cast<uint16_t>(pairs[i] >> 16);
        ++seen_lo[lo];
        ++seen_hi[hi];
        check_f16("cvt_f32_f16 of the low half ", lo, got[i].cvt_lo);
        check_f16("cvt_f32_f16 of the high half ", hi, got[i].cvt_hi);
        check_f16("unpack_x2_f32<f16> low half ", lo, got[i].f16_lo);
        check_f16("unpack_x2_f32<f16> high half ", hi, got[i].f16_hi);
        check_bf16("unpack_x2_f32<bf16> low half ", lo, got[i].bf16_lo);
        check_bf16("unpack_x2_f32<bf16> high half ", hi, got[i].bf16_hi);
    }
    EXPECT_EQ(bad, 0);
    for (uint32_t h = 0; h < kPatterns; ++h) {
        ASSERT_EQ(seen_lo[h], 1) << "pattern 0x" << std::hex << h << " as a low half";
        ASSERT_EQ(seen_hi[h], 1) << "pattern 0x" << std::hex << h << " as a high half";
    }
}

TEST(PtxConvert, PrmtSelectorsMatchTheIsaModel) {
    HATTN_REQUIRE_HOPPER();
    constexpr int kPairs = 4096;
    std::vector<uint32_t> a(kPairs), b(kPairs);
    uint32_t x = 0x9E3779B9u;  // xorshift32: distinct, every byte value many times
    for (int i = 0; i < kPairs; ++i) {
        auto next = [&x] {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            return x;
        };
        a[i] = next();
        b[i] = next();
    }
    a[0] = 0x03020100u;  // the byte indices themselves: the result spells the selector
    b[0] = 0x07060504u;
    DeviceBuffer<uint32_t> d_a(kPairs), d_b(kPairs), d_out(size_t{kPairs} * kPrmtSelectorCount);
    HATTN_CUDA_CHECK(d_a.status);
    HATTN_CUDA_CHECK(d_b.status);
    HATTN_CUDA_CHECK(d_out.status);
    HATTN_CUDA_CHECK(cudaMemcpy(d_a.ptr, a.data(), d_a.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemcpy(d_b.ptr, b.data(), d_b.bytes(), cudaMemcpyHostToDevice));
    prmt_kernel<<<(kPairs + kThreads - 1) / kThreads, kThreads>>>(d_a.ptr, d_b.ptr, d_out.ptr, kPairs);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint32_t> got(size_t{kPairs} * kPrmtSelectorCount);
    HATTN_CUDA_CHECK(cudaMemcpy(got.data(), d_out.ptr, d_out.bytes(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(got[0], 0x05010400u) << "selector 0x5140 on the byte indices";
    int bad = 0;
    for (int i = 0; i < kPairs; ++i)
        for (int s = 0; s < kPrmtSelectorCount; ++s) {
            const uint32_t want = prmt_model(a[i], b[i], kPrmtSelectors[s]);
            const uint32_t have = got[static_cast<size_t>(i) * kPrmtSelectorCount + s];
            if (have != want && ++bad <= 8) {
                ADD_FAILURE() << "prmt 0x" << std::hex << kPrmtSelectors[s] << " (a 0x" << a[i] << ", b 0x" << b[i]
                              << "): 0x" << have << ", want 0x" << want;
            }
        }
    EXPECT_EQ(bad, 0);
}
