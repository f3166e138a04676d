// hattn/src/kernels/sm90/fragment_e4m3.cuh -- wgmma on e4m3 operands and the 8-bit A fragment the
// FP8 forward builds P in. Apart from fragment.cuh so that the 16-bit kernels (and their vendored
// single files, which carry only the 16-bit wgmma wrappers) do not depend on the 8-bit ones.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/sm90/fragment.cuh"
#include "kernels/sm90/tile.cuh"
#include "ptx/convert.cuh"
#include "ptx/ldst.cuh"
#include "ptx/wgmma.cuh"

namespace hattn::sm90 {

// S = Q K^T from shared memory (both operands K-major: 8-bit wgmma has no transpose bits).
template <int N>
__device__ __forceinline__ void mma_ss_e4m3(float (&d)[N / 2], uint64_t da, uint64_t db, uint32_t accumulate) {
    ptx::wgmma_ss_e4m3<N>(d, da, db, accumulate);
}

// O += P V with P in registers and V^T (K-major) in shared memory.
template <int N>
__device__ __forceinline__ void mma_rs_e4m3(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, uint32_t accumulate) {
    ptx::wgmma_rs_e4m3<N>(d, a, db, accumulate);
}

// ---- 8-bit A fragments (P of the FP8 forward) -------------------------------------------------
// The A fragment of an m64nNk32 8-bit wgmma (PTX ISA 9.7.15.5.1, the .e4m3 "matrix A" figure; per
// warp the same as mma.m16n8k32): thread (warp w, lane l, t = l % 4) holds 4 registers of 4 bytes,
// byte b of register j being row r0 + 8 * (j % 2), k = 16 * (j / 2) + 4 t + b (r0 = 16w + l/4).
// The fp32 accumulator of a 32-column slice holds, for the same thread and row, columns
// 8g + 2t + {0, 1} (g = 0..3): the columns 4t..4t+3 the A fragment wants sit in other lanes.
// Instead of shuffling, the k order of P V is permuted: the sum over k does not care, as long as
// B's k position p holds V's key e4m3_k_to_key(p) (V^T is written with its keys in that order).
// Then byte b of register j simply takes accumulator element e4m3_a_acc_index(j, b), its own.
__host__ __device__ constexpr int e4m3_a_row_half(int reg) { return reg % 2; }
__host__ __device__ constexpr int e4m3_a_k(int reg, int byte, int lane) { return 16 * (reg / 2) + 4 * (lane % 4) + byte; }
// Which element of the thread's 16-float accumulator slice (one k32 slice) goes to (reg, byte).
__host__ __device__ constexpr int e4m3_a_acc_index(int reg, int byte) {
    return 8 * (reg / 2) + 4 * (byte / 2) + 2 * (reg % 2) + byte % 2;
}
// The key (within an aligned group of 32) that k position p of the P V product stands for: the
// accumulator column of the element e4m3_a_acc_index put there. Thread-independent, a bijection.
__host__ __device__ constexpr int e4m3_k_to_key(int p) {
    return 16 * (p / 16) + 2 * ((p % 16) / 4) + 8 * ((p / 2) % 2) + p % 2;
}
constexpr int kE4m3KeyGroup = 32;  // keys permuted within aligned groups of this many (one k32 step)

// fp32 accumulator (m64nN, N a multiple of 32) -> e4m3 A fragments of k-steps of 32 (round to
// nearest, saturating), in the permuted k order above. Byte order in a register: lower k in lower bits.
template <int N>
__device__ __forceinline__ void acc_to_a_fragment_e4m3(const float (&acc)[N / 2], uint32_t (&a)[N / E4m3::kMmaK][4]) {
    constexpr int kAccPerStep = E4m3::kMmaK / 2;  // 16 floats of one thread per k32 slice
#pragma unroll
    for (int kk = 0; kk < N / E4m3::kMmaK; ++kk) {
        const float* f = &acc[kAccPerStep * kk];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint32_t lo = ptx::cvt_rn_satfinite_e4m3x2_f32(f[e4m3_a_acc_index(j, 0)], f[e4m3_a_acc_index(j, 1)]);
            const uint32_t hi = ptx::cvt_rn_satfinite_e4m3x2_f32(f[e4m3_a_acc_index(j, 2)], f[e4m3_a_acc_index(j, 3)]);
            a[kk][j] = lo | (hi << 16);
        }
    }
}

// The warpgroup's 8-bit A fragments of rows [first_row, first_row + 64) of a K-major swizzled tile,
// every k-step of 32 bytes (the layout above), by ldmatrix: lane l addresses row l % 8 of 8x8
// 16-bit matrix l / 8 -- matrices (rows 0-7 | 8-15) x (bytes 0-15 | 16-31) of the warp's 16 rows --
// and receives row l / 4, bytes 4 (l % 4) .. + 3 of each: registers j = 0..3 exactly (row r0 + 8
// (j % 2), k = 16 (j / 2) + 4 t + b).
// The row (of the warpgroup's 64) and the byte of k-step 0 whose 16 bytes lane `lane` of warp
// `warp` addresses for that ldmatrix (k-step kk: E4m3::kMmaK * kk bytes further).
struct RowByte {
    int row, byte;
};
__host__ __device__ constexpr RowByte a_fragment_ldmatrix_row(int warp, int lane) {
    constexpr int kMatrixRows = 8, kChunkBytes = 16, kWarpRows = 16;
    const int matrix = lane / kMatrixRows;
    return {kWarpRows * warp + kMatrixRows * (matrix % 2) + lane % kMatrixRows, kChunkBytes * (matrix / 2)};
}

// The A fragments of the first kSteps k-steps of a 64-row slice of an e4m3 tile (all of its
// columns, or the first kSteps x 32 of them).
template <class Tile, int kSteps>
__device__ __forceinline__ void load_a_fragments_e4m3(uint32_t (&a)[kSteps][4], const Tile& tile, int first_row) {
    static_assert(std::is_same_v<typename Tile::Element, E4m3> && kSteps * E4m3::kMmaK <= Tile::kCols,
                  "a fragment per k-step of (the first columns of) an e4m3 tile");
    const RowByte at = a_fragment_ldmatrix_row(static_cast<int>((threadIdx.x / 32) % 4), static_cast<int>(threadIdx.x % 32));
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
        ptx::ldmatrix_x4(a[kk], tile.bytes + Tile::offset(first_row + at.row, E4m3::kMmaK * kk + at.byte));
}

}  // namespace hattn::sm90
