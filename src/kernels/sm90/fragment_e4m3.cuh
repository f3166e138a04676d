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
#include "ptx/mma.cuh"
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

template <class Tile, int kSteps>
__device__ __forceinline__ void load_a_fragments_e4m3(uint32_t (&a)[kSteps][4], const Tile& tile, int first_row) {
    static_assert(std::is_same_v<typename Tile::Element, E4m3> && kSteps * E4m3::kMmaK == Tile::kCols,
                  "a fragment per k-step of an e4m3 tile");
    const RowByte at = a_fragment_ldmatrix_row(static_cast<int>((threadIdx.x / 32) % 4), static_cast<int>(threadIdx.x % 32));
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
        ptx::ldmatrix_x4(a[kk], tile.bytes + Tile::offset(first_row + at.row, E4m3::kMmaK * kk + at.byte));
}

// ---- Scores from shared memory (a rare path) -----------------------------------------------
// This thread's elements of S = Q K^T (the accumulator layout) recomputed from the e4m3 Q and K
// tiles in shared memory by the warp alone, with warp-level mma.sync m16n8k32 (ptx/mma.cuh): its
// C/D fragment of an n8 group is the wgmma accumulator's (rows r0, r0 + 8; columns 8j + 2t +
// {0, 1}), its A / B fragments 32-bit words of Q's and K's rows read through the tiles' swizzle.
// For the FP8 forward's early exps (LazyBlockScaledSoftmax::online_update_early), when a block's
// scores lie too far above a row's reference to exponentiate against it: rare, so written for few
// registers and little code, not speed. first_row: the warpgroup's first row in the Q tile.
template <int N, class QTile, class KTile>
__device__ __forceinline__ void scores_from_shared_e4m3(float (&s)[N / 2], const QTile& q, int first_row, const KTile& k) {
    static_assert(std::is_same_v<typename QTile::Element, E4m3> && std::is_same_v<typename KTile::Element, E4m3> &&
                      QTile::kCols == KTile::kCols,
                  "e4m3 Q and K rows of the same head_dim");
    constexpr int kStepBytes = E4m3::kMmaK;  // one mma k-step: 32 bytes of a row
    constexpr int kHalfStepBytes = kStepBytes / 2;
    constexpr int kWordBytes = 4;
    const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
    const int row0 = first_row + acc_row_in_warpgroup(static_cast<int>(threadIdx.x % kWarpgroupThreads));
    auto word = [](const auto& tile, int row, int byte) {
        using Tile = std::decay_t<decltype(tile)>;
        return ptx::ld_shared_b32(tile.bytes + Tile::offset(row, byte));
    };
    // One n8 group at a time, its k-steps in a loop: a few registers live besides s.
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
        const int key = 8 * j + g;
        float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
        for (int step = 0; step < QTile::kCols / kStepBytes; ++step) {
            const int byte = step * kStepBytes + kWordBytes * t;
            const uint32_t a[4] = {word(q, row0, byte), word(q, row0 + 8, byte), word(q, row0, byte + kHalfStepBytes),
                                   word(q, row0 + 8, byte + kHalfStepBytes)};
            ptx::mma_m16n8k32_f32_e4m3(d, a, word(k, key, byte), word(k, key, byte + kHalfStepBytes), d);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) s[4 * j + e] = d[e];
    }
}

}  // namespace hattn::sm90
