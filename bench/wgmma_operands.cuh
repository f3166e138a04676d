// hattn/bench/wgmma_operands.cuh -- operand types, random shared-memory operands and a
// dtype-generic front for the ptx/wgmma.cuh wrappers, shared by wgmma_bench and
// exp_vs_mma_bench.
//
// NOTE: operands are random and non-zero: tensor cores run measurably faster on zeros.
// NOTE: 128B-swizzled operand tiles must start 1024-byte aligned (address bits 7-9 feed the
//       XOR pattern), so kernels round their dynamic smem base up with align_smem().
#pragma once

#include <cstdint>

#include "micro_harness.cuh"
#include "ptx/convert.cuh"
#include "ptx/fence.cuh"
#include "ptx/wgmma.cuh"

namespace hattn::bench {

enum class Dtype { kBf16, kF16, kE4m3 };

constexpr const char* dtype_name(Dtype t) { return t == Dtype::kBf16 ? "bf16" : t == Dtype::kF16 ? "fp16" : "e4m3"; }

constexpr int kWgmmaM = 64;           // wgmma's M: one warpgroup's rows
constexpr int kSwizzleRowBytes = 128; // 128B swizzle: a K-major row of an atom is 128 bytes
constexpr int kSwizzleAtomBytes = 8 * kSwizzleRowBytes;  // 8 rows: the swizzle period (SBO)
constexpr int kKStepBytes = 32;       // bytes of K per wgmma: k16 x 2 B or k32 x 1 B
constexpr int kSmemAlign = 1024;

template <Dtype kType>
constexpr int elem_bytes() {
    return kType == Dtype::kE4m3 ? 1 : 2;
}

template <Dtype kType>
constexpr int k_per_instruction() {
    return kKStepBytes / elem_bytes<kType>();
}

template <Dtype kType>
constexpr double peak_flop_per_clk() {
    return kType == Dtype::kE4m3 ? kFp8FlopPerClkPerSm : kBf16FlopPerClkPerSm;
}

__device__ __forceinline__ uint8_t* align_smem(uint8_t* raw) {
    return raw + ((kSmemAlign - (ptx::smem_u32(raw) % kSmemAlign)) % kSmemAlign);
}

// 32 bits of random, non-zero elements of the operand type (two 16-bit or four 8-bit ones).
template <Dtype kType>
__device__ __forceinline__ uint32_t random_operand_word(uint64_t h) {
    const float a = hash_to_unit_nonzero(h);
    const float b = hash_to_unit_nonzero(mix64(h + 1));
    if constexpr (kType == Dtype::kBf16) {
        return ptx::cvt_rn_bf16x2_f32(a, b);
    } else if constexpr (kType == Dtype::kF16) {
        return ptx::cvt_rn_f16x2_f32(a, b);
    } else {
        const float c = hash_to_unit_nonzero(mix64(h + 2));
        const float d = hash_to_unit_nonzero(mix64(h + 3));
        return uint32_t(ptx::cvt_rn_satfinite_e4m3x2_f32(a, b)) |
               (uint32_t(ptx::cvt_rn_satfinite_e4m3x2_f32(c, d)) << 16);
    }
}

// The whole CTA fills `bytes` of smem with random operand words, then hands them to the async
// proxy: generic-proxy stores are invisible to wgmma without fence.proxy.async + a barrier.
template <Dtype kType>
__device__ __forceinline__ void fill_smem_random(uint8_t* smem, int bytes, uint64_t seed) {
    uint32_t* words = reinterpret_cast<uint32_t*>(smem);
    for (int i = threadIdx.x; i < bytes / 4; i += blockDim.x) {
        words[i] = random_operand_word<kType>(mix64(seed ^ (uint64_t(blockIdx.x) << 32 | uint32_t(i))));
    }
    ptx::fence_proxy_async_shared_cta();
    __syncthreads();
}

// D(64 x kN) (+)= A(smem) * B(smem); K-major A and B (fp8 allows nothing else).
template <Dtype kType, int kN, int kTransB = 0>
__device__ __forceinline__ void mma_ss(float (&acc)[kN / 2], uint64_t desc_a, uint64_t desc_b,
                                       uint32_t accumulate) {
    if constexpr (kType == Dtype::kBf16) {
        ptx::wgmma_ss_bf16<kN, 0, kTransB>(acc, desc_a, desc_b, accumulate);
    } else if constexpr (kType == Dtype::kF16) {
        ptx::wgmma_ss_f16<kN, 0, kTransB>(acc, desc_a, desc_b, accumulate);
    } else {
        static_assert(kTransB == 0, "e4m3 wgmma takes K-major operands only");
        ptx::wgmma_ss_e4m3<kN>(acc, desc_a, desc_b, accumulate);
    }
}

// D(64 x kN) (+)= A(registers, 4 x b32 per thread) * B(smem).
template <Dtype kType, int kN, int kTransB = 0>
__device__ __forceinline__ void mma_rs(float (&acc)[kN / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                       uint32_t accumulate) {
    if constexpr (kType == Dtype::kBf16) {
        ptx::wgmma_rs_bf16<kN, kTransB>(acc, a, desc_b, accumulate);
    } else if constexpr (kType == Dtype::kF16) {
        ptx::wgmma_rs_f16<kN, kTransB>(acc, a, desc_b, accumulate);
    } else {
        static_assert(kTransB == 0, "e4m3 wgmma takes K-major operands only");
        ptx::wgmma_rs_e4m3<kN>(acc, a, desc_b, accumulate);
    }
}

}  // namespace hattn::bench
