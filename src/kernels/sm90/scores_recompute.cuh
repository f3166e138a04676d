// hattn/src/kernels/sm90/scores_recompute.cuh -- one warp's scores S = Q K^T recomputed from the Q
// and K tiles in shared memory, for a softmax that exponentiated a block against a reference so far
// below its scores that the weights overflowed (the FP8 forward's early exps, the 16-bit forward's
// speculative step). Rare: written for few registers and little code, not speed.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/sm90/fragment.cuh"
#include "kernels/sm90/tile.cuh"
#include "ptx/ldst.cuh"
#include "ptx/mma.cuh"

namespace hattn::sm90 {

// d += a b over one k-step of warp-level mma.sync (16 elements of a 16-bit row, 32 of an e4m3 one:
// 32 bytes either way).
template <class Elem>
__device__ __forceinline__ void mma_sync_k_step(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (std::is_same_v<Elem, E4m3>) ptx::mma_m16n8k32_f32_e4m3(d, a, b0, b1, d);
    else if constexpr (std::is_same_v<Elem, Bf16>) ptx::mma_m16n8k16_f32_bf16(d, a, b0, b1, d);
    else ptx::mma_m16n8k16_f32_f16(d, a, b0, b1, d);
}

// This thread's elements of the warpgroup's S = Q K^T (the wgmma accumulator layout, N keys) from
// the tiles in shared memory, by the calling warp alone. mma.sync's C/D fragment of an n8 group is
// the wgmma accumulator's (rows r0, r0 + 8; columns 8j + 2t + {0, 1}); its A / B fragments are
// 32-bit words of Q's and K's rows (row g / g + 8, words t and t + 4 of each 32-byte k-step) read
// through the tiles' swizzle. first_row: the warpgroup's first row in the Q tile.
// Loop order, for the registers left where the caller runs it: kStepsOuter, the k-steps outside
// (not unrolled) and s itself the accumulator, so only one step's A fragment and two words of K
// are live besides s (the 16-bit forward at d64, where s, O and P fill the registers); otherwise
// one n8 group at a time with its k-steps in a loop (the FP8 forward, whose other live values
// differ: there the steps-outer order spills).
template <int N, bool kStepsOuter, class QTile, class KTile>
__device__ __forceinline__ void scores_from_shared(float (&s)[N / 2], const QTile& q, int first_row, const KTile& k) {
    using Elem = typename QTile::Element;
    static_assert(std::is_same_v<Elem, typename KTile::Element> && QTile::kCols == KTile::kCols,
                  "Q and K rows of the same type and head_dim");
    constexpr int kSteps = QTile::kCols / Elem::kMmaK;
    constexpr int kElemsPerWord = 4 / Elem::kBytes;
    constexpr int kHalfStep = Elem::kMmaK / 2;
    constexpr int kGroupRows = 8;  // keys per n8 group: K's rows 8j + g
    const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
    const int row0 = first_row + acc_row_in_warpgroup(static_cast<int>(threadIdx.x % kWarpgroupThreads));
    auto word = [](const auto& tile, int row, int col) {
        using Tile = std::decay_t<decltype(tile)>;
        return ptx::ld_shared_b32(tile.bytes + Tile::offset(row, col));
    };
    // d += (Q K^T) of n8 group j over k-step `step`.
    auto mma_step = [&](float(&d)[4], int j, int step) {
        const int col = step * Elem::kMmaK + kElemsPerWord * t;
        const uint32_t a[4] = {word(q, row0, col), word(q, row0 + 8, col), word(q, row0, col + kHalfStep),
                               word(q, row0 + 8, col + kHalfStep)};
        mma_sync_k_step<Elem>(d, a, word(k, kGroupRows * j + g, col), word(k, kGroupRows * j + g, col + kHalfStep));
    };
    if constexpr (kStepsOuter) {
        zero_fill(s);
#pragma unroll 1
        for (int step = 0; step < kSteps; ++step) {
#pragma unroll
            for (int j = 0; j < N / 8; ++j) mma_step(*reinterpret_cast<float(*)[4]>(&s[4 * j]), j, step);
        }
    } else {
#pragma unroll
        for (int j = 0; j < N / 8; ++j) {
            float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
            for (int step = 0; step < kSteps; ++step) mma_step(d, j, step);
#pragma unroll
            for (int e = 0; e < 4; ++e) s[4 * j + e] = d[e];
        }
    }
}

}  // namespace hattn::sm90
