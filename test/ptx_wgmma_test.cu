// hattn/test/ptx_wgmma_test.cu -- wgmma.mma_async (ptx/wgmma.cuh, ptx/wgmma_instr.cuh) on the GPU
// against a float64 CPU reference, with the operand layouts the attention kernel uses:
//
//   A (64 x K)            K-major, 128B swizzle (Q in S = Q K^T), or registers (P in O = P V)
//   B K-major  (N x K)    stored as N rows of K, like K in S = Q K^T          (transpose bit 0)
//   B MN-major (K x N)    stored as K rows of N, like V in O = P V, N = head  (transpose bit 1)
//                         dim, in 64-column blocks of K * 128 bytes each
//
// One warpgroup stages A and B into shared memory element by element at the swizzled offsets of
// ptx_test_util.cuh (the formula is derived there from the PTX ISA), runs K / k_instr k-steps of
// one wgmma each, and writes D through the documented accumulator fragment layout. A wrong
// descriptor field, k-step advance, swizzle mode or fragment mapping therefore shows up as wrong
// numbers, not as a silent pass.
//
// Descriptor advance per k-step (each k-step consumes 32 bytes of K: k16 x 2 B or k32 x 1 B):
//   K-major:  start += 32 bytes inside a span-byte swizzle row; every span bytes of K the start
//             jumps to the next column block, rows * span bytes further on.
//   MN-major: start += k_instr rows * 128 bytes (16 rows of K for 16-bit types).
#include "gpu_test_util.h"
#include "ptx_test_util.cuh"

#include "ptx/hattn_ptx.cuh"

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using hattn::ptx::Swizzle;
using hattn::test::DeviceBuffer;
using hattn::test::kWarpgroupThreads;
using hattn::test::swizzled_tile_offset;

constexpr int kTileM = 64;                    // wgmma's fixed M
constexpr uint32_t kKStepBytes = 32;          // bytes of K one wgmma consumes (k16 x 2 B, k32 x 1 B)
constexpr uint32_t kMnMajorSpan = 128;        // MN-major operands here use the 128B swizzle only
constexpr uint32_t kAccRowsPerWarp = 16;      // each warp of the warpgroup owns 16 rows of D

enum class Elem { kBf16, kF16, kE4m3 };

template <Elem kElem>
struct ElemTraits;

template <>
struct ElemTraits<Elem::kBf16> {
    using Bits = uint16_t;
    static constexpr uint32_t kBytes = 2;
    static constexpr int kInstrK = 16;
    static constexpr int kK = 128;  // 8 k-steps, two 64-column blocks at 128B swizzle
    static Bits encode(float f) { return hattn::test::bf16_bits_from_float(f); }
    static double decode(Bits b) { return hattn::test::float_from_bf16_bits(b); }
};

template <>
struct ElemTraits<Elem::kF16> {
    using Bits = uint16_t;
    static constexpr uint32_t kBytes = 2;
    static constexpr int kInstrK = 16;
    static constexpr int kK = 128;
    static Bits encode(float f) { return hattn::test::f16_bits_from_float(f); }
    static double decode(Bits b) { return hattn::test::float_from_f16_bits(b); }
};

template <>
struct ElemTraits<Elem::kE4m3> {
    using Bits = uint8_t;
    static constexpr uint32_t kBytes = 1;
    static constexpr int kInstrK = 32;
    static constexpr int kK = 256;  // 8 k-steps, two 128-column blocks at 128B swizzle
    static Bits encode(float f) { return hattn::test::e4m3_bits_from_float(f); }
    static double decode(Bits b) { return hattn::test::float_from_e4m3_bits(b); }
};

struct WgmmaArgs {
    const void* a;         // [64][K] element bits, row-major
    const void* b;         // K-major: [N][K]; MN-major: [K][N]
    const float* d_init;   // [64][N], or nullptr: the first k-step zero-initialises D
    float* d;              // [64][N]
    uint32_t a_span;       // A's swizzle span in bytes (128, 64, 32)
    uint32_t b_span;       // B's swizzle span in bytes
};

__host__ __device__ constexpr Swizzle swizzle_from_span(uint32_t span) {
    return span == 128 ? Swizzle::k128B : span == 64 ? Swizzle::k64B : Swizzle::k32B;
}

// Accumulator fragment of m64nN f32 (PTX ISA 9.7.15.5.1.1, "Accumulator D"): thread t, warp
// w = t / 32, lane l; register i belongs to n8-group g = i / 4, r = i % 4, at
//   row = 16 w + l / 4 + 8 (r / 2),   col = 8 g + 2 (l % 4) + (r % 2).
__device__ __forceinline__ int acc_row(int warp, int lane, int i) {
    return kAccRowsPerWarp * warp + lane / 4 + 8 * ((i % 4) / 2);
}
__device__ __forceinline__ int acc_col(int lane, int i) { return 8 * (i / 4) + 2 * (lane % 4) + (i % 2); }

template <Elem kElem, int N, int kTransB>
__device__ __forceinline__ void issue_ss(float (&acc)[N / 2], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
    if constexpr (kElem == Elem::kBf16) {
        hattn::ptx::wgmma_ss_bf16<N, 0, kTransB>(acc, desc_a, desc_b, accumulate);
    } else if constexpr (kElem == Elem::kF16) {
        hattn::ptx::wgmma_ss_f16<N, 0, kTransB>(acc, desc_a, desc_b, accumulate);
    } else {
        static_assert(kTransB == 0, "fp8 wgmma reads K-major operands only");
        hattn::ptx::wgmma_ss_e4m3<N>(acc, desc_a, desc_b, accumulate);
    }
}

template <Elem kElem, int N, int kTransB>
__device__ __forceinline__ void issue_rs(float (&acc)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                         uint32_t accumulate) {
    if constexpr (kElem == Elem::kBf16) {
        hattn::ptx::wgmma_rs_bf16<N, kTransB>(acc, a, desc_b, accumulate);
    } else if constexpr (kElem == Elem::kF16) {
        hattn::ptx::wgmma_rs_f16<N, kTransB>(acc, a, desc_b, accumulate);
    } else {
        static_assert(kTransB == 0, "fp8 wgmma reads K-major operands only");
        hattn::ptx::wgmma_rs_e4m3<N>(acc, a, desc_b, accumulate);
    }
}

// D (64 x N) (+)= A (64 x K) * B (K x N) by one warpgroup, K / kInstrK wgmmas in one batch.
template <Elem kElem, int N, int kTransB, bool kRegisterA>
__global__ void __launch_bounds__(kWarpgroupThreads, 1) wgmma_kernel(const WgmmaArgs args) {
    using T = ElemTraits<kElem>;
    using Bits = typename T::Bits;
    constexpr int kK = T::kK;
    constexpr int kKSteps = kK / T::kInstrK;
    constexpr uint32_t kABytes = kTileM * kK * T::kBytes;
    static_assert(kABytes % hattn::test::kSmemTileAlign == 0, "B must start 1024-byte aligned");

    // NOTE: swizzled operands need 1024-byte alignment (the XOR pattern is taken from absolute
    //       address bits 7-9); dynamic smem is only 16-byte aligned, so round up.
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = hattn::test::align_smem_for_swizzle(smem_raw);
    uint8_t* smem_a = smem;
    uint8_t* smem_b = smem + kABytes;

    const int tid = threadIdx.x;
    const Bits* a = static_cast<const Bits*>(args.a);
    const Bits* b = static_cast<const Bits*>(args.b);

    // ---- stage the operands at their swizzled offsets -------------------------------------
    for (int i = tid; i < kTileM * kK; i += kWarpgroupThreads) {
        const int row = i / kK, col = i % kK;
        *reinterpret_cast<Bits*>(smem_a + swizzled_tile_offset(row, col, kTileM, T::kBytes, args.a_span)) = a[i];
    }
    for (int i = tid; i < N * kK; i += kWarpgroupThreads) {
        if constexpr (kTransB == 0) {  // b is [N][K]: rows are N, columns K
            const int n = i / kK, k = i % kK;
            *reinterpret_cast<Bits*>(smem_b + swizzled_tile_offset(n, k, N, T::kBytes, args.b_span)) = b[i];
        } else {  // b is [K][N]: rows are K, columns N in 64-element blocks of K * 128 bytes
            const int k = i / N, n = i % N;
            *reinterpret_cast<Bits*>(smem_b + swizzled_tile_offset(k, n, kK, T::kBytes, kMnMajorSpan)) = b[i];
        }
    }
    // NOTE: wgmma reads shared memory through the async proxy: make the st.shared writes
    //       visible to it, then let every thread's writes land before anyone issues.
    hattn::ptx::fence_proxy_async_shared_cta();
    __syncthreads();

    const int warp = tid / hattn::test::kWarpSize, lane = tid % hattn::test::kWarpSize;

    // ---- accumulators: D_init for the scale-d test, else NaN (scale-d = 0 must ignore it) ----
    float acc[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
        acc[i] = args.d_init != nullptr ? args.d_init[acc_row(warp, lane, i) * N + acc_col(lane, i)] : __int_as_float(0x7fc00000);
    }

    // ---- register A fragments (RS form), PTX ISA 9.7.15.5.1.1 "Multiplicand A in registers":
    //      register j of a k-step holds row r0 + 8 (j % 2), K columns
    //      k0 + (j / 2) * k_instr / 2 + (l % 4) * e .. + e-1 with e = 4 bytes / element size,
    //      r0 = 16 w + l / 4; the lowest K column sits in the lowest bits.
    uint32_t a_frag[kKSteps][4];
    if constexpr (kRegisterA) {
        constexpr int kElemsPerReg = 4 / T::kBytes;
        const int r0 = kAccRowsPerWarp * warp + lane / 4;
#pragma unroll
        for (int s = 0; s < kKSteps; ++s) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int row = r0 + 8 * (j % 2);
                const int k = s * T::kInstrK + (j / 2) * (T::kInstrK / 2) + (lane % 4) * kElemsPerReg;
                uint32_t packed = 0;
#pragma unroll
                for (int e = 0; e < kElemsPerReg; ++e) {
                    packed |= static_cast<uint32_t>(a[row * kK + k + e]) << (8 * T::kBytes * e);
                }
                a_frag[s][j] = packed;
            }
        }
    }

    // ---- one batch of kKSteps wgmmas ----------------------------------------------------------
    const Swizzle a_swizzle = swizzle_from_span(args.a_span);
    const Swizzle b_swizzle = swizzle_from_span(args.b_span);
    const uint32_t a_base = hattn::ptx::smem_u32(smem_a);
    const uint32_t b_base = hattn::ptx::smem_u32(smem_b);
    const uint32_t first_accumulate = args.d_init != nullptr ? 1u : 0u;

    hattn::ptx::wgmma_fence_operand(acc);
    hattn::ptx::wgmma_fence();
#pragma unroll
    for (int s = 0; s < kKSteps; ++s) {
        const uint32_t k_bytes = s * kKStepBytes;
        uint64_t desc_b;
        if constexpr (kTransB == 0) {
            desc_b = hattn::ptx::make_smem_desc_k_major(
                b_base + (k_bytes / args.b_span) * N * args.b_span + k_bytes % args.b_span, b_swizzle);
        } else {
            desc_b = hattn::ptx::make_smem_desc_mn_major(b_base + s * T::kInstrK * kMnMajorSpan, Swizzle::k128B,
                                                         kK * kMnMajorSpan);
        }
        const uint32_t accumulate = s > 0 ? 1u : first_accumulate;
        if constexpr (kRegisterA) {
            issue_rs<kElem, N, kTransB>(acc, a_frag[s], desc_b, accumulate);
        } else {
            const uint64_t desc_a = hattn::ptx::make_smem_desc_k_major(
                a_base + (k_bytes / args.a_span) * kTileM * args.a_span + k_bytes % args.a_span, a_swizzle);
            issue_ss<kElem, N, kTransB>(acc, desc_a, desc_b, accumulate);
        }
    }
    hattn::ptx::wgmma_commit_group();
    hattn::ptx::wgmma_wait_group<0>();
    hattn::ptx::wgmma_fence_operand(acc);

#pragma unroll
    for (int i = 0; i < N / 2; ++i) args.d[acc_row(warp, lane, i) * N + acc_col(lane, i)] = acc[i];
}

// Tolerances: 16-bit products are exact in f32 and K = 128 sums stay far below f32 rounding
// trouble; Hopper's fp8 path accumulates with fewer mantissa bits, so it gets a looser bound.
// Any layout mistake moves elements by O(0.1 .. 10), far outside both.
template <Elem kElem>
struct Tolerance;
template <>
struct Tolerance<Elem::kBf16> { static constexpr double kAtol = 1e-3, kRtol = 1e-3, kRelL2 = 1e-4; };
template <>
struct Tolerance<Elem::kF16> { static constexpr double kAtol = 1e-3, kRtol = 1e-3, kRelL2 = 1e-4; };
template <>
struct Tolerance<Elem::kE4m3> { static constexpr double kAtol = 2e-2, kRtol = 1e-2, kRelL2 = 5e-3; };

struct WgmmaCase {
    uint32_t a_span = 128;
    uint32_t b_span = 128;
    bool init_d = false;   // scale-d = 1 from the first k-step: D = D_init + A B
    uint64_t seed = 0;
};

template <Elem kElem, int N, int kTransB, bool kRegisterA>
void run_wgmma_case(const WgmmaCase& c) {
    using T = ElemTraits<kElem>;
    using Bits = typename T::Bits;
    constexpr int kK = T::kK;
    static_assert(kTransB == 0 || N % 64 == 0, "MN-major B: whole 64-column blocks (the head dims)");

    std::mt19937_64 rng(c.seed);
    std::uniform_real_distribution<float> operand(-1.0f, 1.0f);
    std::uniform_real_distribution<float> init(-2.0f, 2.0f);

    std::vector<Bits> a_bits(kTileM * kK), b_bits(static_cast<size_t>(kK) * N);
    std::vector<double> a_val(a_bits.size()), b_val(b_bits.size());  // b_val is [K][N]
    for (size_t i = 0; i < a_bits.size(); ++i) {
        a_bits[i] = T::encode(operand(rng));
        a_val[i] = T::decode(a_bits[i]);
    }
    for (int k = 0; k < kK; ++k) {
        for (int n = 0; n < N; ++n) {
            const Bits bits = T::encode(operand(rng));
            b_val[k * N + n] = T::decode(bits);
            b_bits[kTransB == 0 ? n * kK + k : k * N + n] = bits;
        }
    }
    std::vector<float> d_init(kTileM * N);
    for (float& x : d_init) x = init(rng);

    std::vector<double> ref(kTileM * N);
    for (int m = 0; m < kTileM; ++m) {
        for (int n = 0; n < N; ++n) {
            double sum = c.init_d ? d_init[m * N + n] : 0.0;
            for (int k = 0; k < kK; ++k) sum += a_val[m * kK + k] * b_val[k * N + n];
            ref[m * N + n] = sum;
        }
    }

    DeviceBuffer<Bits> d_a(a_bits.size()), d_b(b_bits.size());
    DeviceBuffer<float> d_dinit(d_init.size()), d_d(ref.size());
    HATTN_CUDA_CHECK(d_a.status);
    HATTN_CUDA_CHECK(d_b.status);
    HATTN_CUDA_CHECK(d_dinit.status);
    HATTN_CUDA_CHECK(d_d.status);
    HATTN_CUDA_CHECK(cudaMemcpy(d_a.ptr, a_bits.data(), d_a.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemcpy(d_b.ptr, b_bits.data(), d_b.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemcpy(d_dinit.ptr, d_init.data(), d_dinit.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemset(d_d.ptr, 0xFF, d_d.bytes()));  // NaN poison: unwritten D fails

    const WgmmaArgs args{d_a.ptr, d_b.ptr, c.init_d ? d_dinit.ptr : nullptr, d_d.ptr, c.a_span, c.b_span};
    const size_t smem_bytes = (kTileM + N) * kK * T::kBytes + hattn::test::kSmemTileAlign;
    auto kernel = wgmma_kernel<kElem, N, kTransB, kRegisterA>;
    HATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_bytes)));
    kernel<<<1, kWarpgroupThreads, smem_bytes>>>(args);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());

    std::vector<float> got(ref.size());
    HATTN_CUDA_CHECK(cudaMemcpy(got.data(), d_d.ptr, d_d.bytes(), cudaMemcpyDeviceToHost));
    EXPECT_TRUE(hattn::test::all_close(got, ref, Tolerance<kElem>::kAtol, Tolerance<kElem>::kRtol,
                                       Tolerance<kElem>::kRelL2, N));
}

uint64_t seed_of(const char* name) { return std::hash<std::string>{}(name); }

constexpr int kKMajor = 0;   // transpose bit 0: B stored N x K
constexpr int kMnMajor = 1;  // transpose bit 1: B stored K x N
constexpr bool kSmemA = false;
constexpr bool kRegA = true;

}  // namespace

// One test per case: WGMMA_CASE(name, element, N, B major-ness, A source, A span, B span, init D)
#define WGMMA_CASE(name, elem, n, trans_b, reg_a, a_span, b_span, init_d)                          \
    TEST(PtxWgmma, name) {                                                                         \
        HATTN_REQUIRE_HOPPER();                                                                    \
        run_wgmma_case<Elem::elem, n, trans_b, reg_a>(WgmmaCase{a_span, b_span, init_d, seed_of(#name)}); \
    }

// bf16, SS, B K-major (S = Q K^T): every N the forward kernels use, plus 80 and 176 (FA3 tiles).
WGMMA_CASE(Bf16SsKMajorN64, kBf16, 64, kKMajor, kSmemA, 128, 128, false)
WGMMA_CASE(Bf16SsKMajorN80, kBf16, 80, kKMajor, kSmemA, 128, 128, false)
WGMMA_CASE(Bf16SsKMajorN128, kBf16, 128, kKMajor, kSmemA, 128, 128, false)
WGMMA_CASE(Bf16SsKMajorN176, kBf16, 176, kKMajor, kSmemA, 128, 128, false)
WGMMA_CASE(Bf16SsKMajorN192, kBf16, 192, kKMajor, kSmemA, 128, 128, false)
WGMMA_CASE(Bf16SsKMajorN256, kBf16, 256, kKMajor, kSmemA, 128, 128, false)
// Narrower swizzles (K-major): 64B = 32-column blocks, 32B = 16-column blocks; and mixed spans.
WGMMA_CASE(Bf16SsKMajor64BSwizzleN128, kBf16, 128, kKMajor, kSmemA, 64, 64, false)
WGMMA_CASE(Bf16SsKMajor32BSwizzleN64, kBf16, 64, kKMajor, kSmemA, 32, 32, false)
WGMMA_CASE(Bf16SsKMajorA128BB64BN80, kBf16, 80, kKMajor, kSmemA, 128, 64, false)
// bf16, SS, B MN-major (V as stored): head dims 64 / 128 / 256 and 192.
WGMMA_CASE(Bf16SsMnMajorN64, kBf16, 64, kMnMajor, kSmemA, 128, 128, false)
WGMMA_CASE(Bf16SsMnMajorN128, kBf16, 128, kMnMajor, kSmemA, 128, 128, false)
WGMMA_CASE(Bf16SsMnMajorN192, kBf16, 192, kMnMajor, kSmemA, 128, 128, false)
WGMMA_CASE(Bf16SsMnMajorN256, kBf16, 256, kMnMajor, kSmemA, 128, 128, false)
// bf16, RS (A from registers, like P): K-major B and MN-major B (O = P V).
WGMMA_CASE(Bf16RsKMajorN64, kBf16, 64, kKMajor, kRegA, 128, 128, false)
WGMMA_CASE(Bf16RsKMajorN80, kBf16, 80, kKMajor, kRegA, 128, 128, false)
WGMMA_CASE(Bf16RsKMajorN176, kBf16, 176, kKMajor, kRegA, 128, 128, false)
WGMMA_CASE(Bf16RsKMajorN256, kBf16, 256, kKMajor, kRegA, 128, 128, false)
WGMMA_CASE(Bf16RsKMajor32BSwizzleN64, kBf16, 64, kKMajor, kRegA, 128, 32, false)
WGMMA_CASE(Bf16RsMnMajorN64, kBf16, 64, kMnMajor, kRegA, 128, 128, false)
WGMMA_CASE(Bf16RsMnMajorN128, kBf16, 128, kMnMajor, kRegA, 128, 128, false)
WGMMA_CASE(Bf16RsMnMajorN192, kBf16, 192, kMnMajor, kRegA, 128, 128, false)
WGMMA_CASE(Bf16RsMnMajorN256, kBf16, 256, kMnMajor, kRegA, 128, 128, false)
// scale-d = 1 from the first k-step: D = D_init + A B (the O accumulator across KV blocks).
WGMMA_CASE(Bf16SsKMajorAccumulateN128, kBf16, 128, kKMajor, kSmemA, 128, 128, true)
WGMMA_CASE(Bf16RsMnMajorAccumulateN128, kBf16, 128, kMnMajor, kRegA, 128, 128, true)

// fp16: the same instruction family with the other 16-bit type.
WGMMA_CASE(F16SsKMajorN64, kF16, 64, kKMajor, kSmemA, 128, 128, false)
WGMMA_CASE(F16SsKMajorN176, kF16, 176, kKMajor, kSmemA, 128, 128, false)
WGMMA_CASE(F16SsKMajorN256, kF16, 256, kKMajor, kSmemA, 128, 128, false)
WGMMA_CASE(F16SsKMajor32BSwizzleN128, kF16, 128, kKMajor, kSmemA, 32, 32, false)
WGMMA_CASE(F16SsMnMajorN128, kF16, 128, kMnMajor, kSmemA, 128, 128, false)
WGMMA_CASE(F16RsKMajor64BSwizzleN128, kF16, 128, kKMajor, kRegA, 128, 64, false)
WGMMA_CASE(F16RsMnMajorN64, kF16, 64, kMnMajor, kRegA, 128, 128, false)
WGMMA_CASE(F16RsMnMajorN256, kF16, 256, kMnMajor, kRegA, 128, 128, false)
WGMMA_CASE(F16RsMnMajorAccumulateN256, kF16, 256, kMnMajor, kRegA, 128, 128, true)

// e4m3 (k32, K-major only): K = 256 = two 128-column blocks at 128B swizzle.
WGMMA_CASE(E4m3SsKMajorN64, kE4m3, 64, kKMajor, kSmemA, 128, 128, false)
WGMMA_CASE(E4m3SsKMajorN80, kE4m3, 80, kKMajor, kSmemA, 128, 128, false)
WGMMA_CASE(E4m3SsKMajorN128, kE4m3, 128, kKMajor, kSmemA, 128, 128, false)
WGMMA_CASE(E4m3SsKMajorN176, kE4m3, 176, kKMajor, kSmemA, 128, 128, false)
WGMMA_CASE(E4m3SsKMajorN192, kE4m3, 192, kKMajor, kSmemA, 128, 128, false)
WGMMA_CASE(E4m3SsKMajorN256, kE4m3, 256, kKMajor, kSmemA, 128, 128, false)
WGMMA_CASE(E4m3SsKMajor64BSwizzleN128, kE4m3, 128, kKMajor, kSmemA, 64, 64, false)
WGMMA_CASE(E4m3RsKMajorN128, kE4m3, 128, kKMajor, kRegA, 128, 128, false)
WGMMA_CASE(E4m3RsKMajorN256, kE4m3, 256, kKMajor, kRegA, 128, 128, false)
WGMMA_CASE(E4m3SsKMajorAccumulateN64, kE4m3, 64, kKMajor, kSmemA, 128, 128, true)
