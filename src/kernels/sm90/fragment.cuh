// hattn/src/kernels/sm90/fragment.cuh -- wgmma per element type, and the register fragments it
// produces and consumes.
//
// Accumulator of an m64nN f32 wgmma (PTX ISA 9.7.15.5.1, "Register fragments"): thread (warp w
// of the warpgroup, lane l) holds N/2 floats for rows r0 = 16w + l/4 and r0 + 8; element i sits
// in row r0 + 8 * ((i / 2) % 2), column 8 * (i / 4) + 2 * (l % 4) + i % 2. A row's values are
// spread over the 4 lanes of a quad, so row reductions are two shuffles.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/sm90/tile.cuh"
#include "ptx/convert.cuh"
#include "ptx/wgmma.cuh"

namespace hattn::sm90 {

constexpr int kWarpgroupThreads = 128;
constexpr int kMmaM = 64;  // wgmma's M: one warpgroup computes 64 rows
constexpr int kAccRowsPerThread = 2;

// ---- wgmma by element type (S = Q K^T from shared memory; O += P V with P in registers) -------
// kTransB / kTransA: 1 when that operand is stored MN-major (V in P V; K^T in the backward's dQ).
template <int N, class Elem, int kTransB, int kTransA = 0>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, uint32_t accumulate) {
    if constexpr (std::is_same_v<Elem, Bf16>) {
        ptx::wgmma_ss_bf16<N, kTransA, kTransB>(d, da, db, accumulate);
    } else {
        static_assert(std::is_same_v<Elem, Fp16>, "16-bit element types only (e4m3: fragment_e4m3.cuh)");
        ptx::wgmma_ss_f16<N, kTransA, kTransB>(d, da, db, accumulate);
    }
}

template <int N, class Elem, int kTransB>
__device__ __forceinline__ void mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, uint32_t accumulate) {
    if constexpr (std::is_same_v<Elem, Bf16>) {
        ptx::wgmma_rs_bf16<N, kTransB>(d, a, db, accumulate);
    } else {
        static_assert(std::is_same_v<Elem, Fp16>, "16-bit element types only (e4m3: fragment_e4m3.cuh)");
        ptx::wgmma_rs_f16<N, kTransB>(d, a, db, accumulate);
    }
}

// ---- Where each accumulator register lives -------------------------------------------------
__device__ __forceinline__ int acc_row_in_warpgroup(int tid) { return 16 * (tid / 32) + (tid % 32) / 4; }
__host__ __device__ constexpr int acc_row_half(int i) { return (i / 2) % 2; }  // 0: row r0, 1: r0 + 8
__host__ __device__ constexpr int acc_col(int i, int lane) { return 8 * (i / 4) + 2 * (lane % 4) + i % 2; }

// f(std::integral_constant<int, 0>{}) .. f(std::integral_constant<int, kCount - 1>{}): a loop whose
// index is a constant expression in the body (template arguments such as a register slice). The
// body reads the index as decltype(i)::value: integral_constant's conversion operator is a host
// function, which device code may call only under --expt-relaxed-constexpr (vendored builds lack it).
template <int kCount, class F, int... kI>
__device__ __forceinline__ void static_for_impl(F&& f, std::integer_sequence<int, kI...>) {
    (f(std::integral_constant<int, kI>{}), ...);
}
template <int kCount, class F>
__device__ __forceinline__ void static_for(F&& f) {
    static_for_impl<kCount>(f, std::make_integer_sequence<int, kCount>{});
}

// An accumulator fragment cleared before its first GEMM (unrolled: it stays in registers).
template <int N>
__device__ __forceinline__ void zero_fill(float (&acc)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = 0.f;
}

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// A row's own kN/4 values of an m64nN accumulator (kN = N/2 registers), reduced in a balanced
// tree: log2(kN/4) dependent steps instead of a chain of kN/4 - 1 (same instruction count). The
// softmax runs these between a GEMM's completion and its exps, so their latency is on the
// critical path: a 31-deep FMNMX chain is ~130 cycles at d64's 128-key blocks.
#ifndef HATTN_ROW_REDUCE_TREE
#define HATTN_ROW_REDUCE_TREE 1
#endif
// One level of the tree per call: v[i] op= v[i + ceil(n/2)], until one value is left.
template <int kCount, class Op>
__device__ __forceinline__ void tree_fold(float (&v)[kCount], Op op) {
    if constexpr (kCount > 1) {
        constexpr int kNext = (kCount + 1) / 2;
        float w[kNext];
#pragma unroll
        for (int i = 0; i < kNext; ++i) w[i] = i + kNext < kCount ? op(v[i], v[i + kNext]) : v[i];
        tree_fold<kNext>(w, op);
        v[0] = w[0];
    }
}

// kFirst / kLen (multiples of 4): only the registers [kFirst, kFirst + kLen), i.e. the columns of
// n8 groups kFirst / 4 .. (kFirst + kLen) / 4 - 1 (the FP8 forward reduces each descale group of a
// KV block on its own).
template <int kN, class Op, int kFirst = 0, int kLen = kN>
__device__ __forceinline__ float row_reduce(const float (&acc)[kN], int row_half, Op op) {
    static_assert(kFirst % 4 == 0 && kLen % 4 == 0 && kLen > 0 && kFirst + kLen <= kN,
                  "whole n8 groups of the accumulator");
    constexpr int kCount = kLen / 2;  // values of one row: i = kFirst + 4j + 2 * row_half + {0, 1}
    float v[kCount];
#pragma unroll
    for (int j = 0; j < kCount / 2; ++j) {
        v[2 * j] = acc[kFirst + 4 * j + 2 * row_half];
        v[2 * j + 1] = acc[kFirst + 4 * j + 2 * row_half + 1];
    }
    if constexpr (HATTN_ROW_REDUCE_TREE) {
        tree_fold(v, op);
    } else {
#pragma unroll
        for (int i = 1; i < kCount; ++i) v[0] = op(v[0], v[i]);
    }
    return v[0];
}

// This thread's part of a row's max and sum (the quad's other lanes hold the rest).
// (kFirst, kLen: a slice of registers, as row_reduce.)
struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
template <int kN, int kFirst = 0, int kLen = kN>
__device__ __forceinline__ float row_max_of(const float (&acc)[kN], int row_half) {
    return row_reduce<kN, MaxOp, kFirst, kLen>(acc, row_half, MaxOp{});
}
template <int kN, int kFirst = 0, int kLen = kN>
__device__ __forceinline__ float row_sum_of(const float (&acc)[kN], int row_half) {
    return row_reduce<kN, SumOp, kFirst, kLen>(acc, row_half, SumOp{});
}

// Registers [kFirst, kFirst + kM) of a fragment (its columns 2 kFirst .. 2 (kFirst + kM)) as an
// array of their own: the part of an accumulator one store takes (the leading head_dim columns of a
// wider accumulator, or one column part of O).
template <int kM, int kFirst, int kN>
__device__ __forceinline__ const float (&regs_slice(const float (&acc)[kN]))[kM] {
    static_assert(kFirst + kM <= kN && kM % 4 == 0 && kFirst % 4 == 0, "whole n8 column groups of the fragment");
    return *reinterpret_cast<const float(*)[kM]>(&acc[kFirst]);
}

// Multiply each of the thread's two rows by its factor.
template <int kN>
__device__ __forceinline__ void rescale_rows(float (&acc)[kN], const float (&row_scale)[kAccRowsPerThread]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) acc[i] *= row_scale[acc_row_half(i)];
}

// fp32 accumulator (m64nN) -> 16-bit A fragments of an RS-wgmma with K = N. For 16-bit types the
// k16 slice kk of the accumulator is its n8 groups 2kk and 2kk+1, which is exactly the A
// fragment's register order: a conversion, no shuffles, no trip through shared memory.
// (8-bit A fragments hold 4 consecutive k per register instead of 2: see fragment_e4m3.cuh.)
template <class Elem, int N>
__device__ __forceinline__ void acc_to_a_fragment(const float (&acc)[N / 2], uint32_t (&a)[N / Elem::kMmaK][4]) {
    static_assert(Elem::kBytes == 2, "16-bit A fragments");
    constexpr bool kIsBf16 = std::is_same_v<Elem, Bf16>;
#pragma unroll
    for (int kk = 0; kk < N / Elem::kMmaK; ++kk) {
#pragma unroll
        for (int j = 0; j < 4; ++j) a[kk][j] = ptx::pack_f32x2<kIsBf16>(acc[8 * kk + 2 * j], acc[8 * kk + 2 * j + 1]);
    }
}

}  // namespace hattn::sm90
