// hattn/src/kernels/sm90/epilogue.cuh -- a warpgroup's fp32 output fragment to global memory:
// registers -> 16-bit -> stmatrix into a swizzled staging tile -> TMA store.
//
// stmatrix.x4 writes four 8x8 matrices of 16-bit pairs, one 16x16 block of the warp's 16 rows
// per instruction; the pair lane l provides for each matrix is the one the accumulator fragment
// already holds (row l/4, columns 2(l%4)..+1), so no shuffles are needed.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/sm90/fragment.cuh"
#include "ptx/fence.cuh"
#include "ptx/ldst.cuh"
#include "ptx/tma.cuh"

namespace hattn::sm90 {

// Writes the warpgroup's m64 x kCols fragment `acc` into rows [first_row, first_row + 64) of
// `tile` (a SwizzledTile of 16-bit elements). The caller fences and synchronizes before the
// TMA store (see store_fence below).
template <class Elem, class Tile, int kCols>
__device__ __forceinline__ void store_fragment(Tile& tile, const float (&acc)[kCols / 2], int first_row) {
    static_assert(Elem::kBytes == 2, "stmatrix moves 16-bit pairs");
    constexpr bool kIsBf16 = std::is_same_v<Elem, Bf16>;
    constexpr int kRegsPer16Cols = 8;
    const int tid = threadIdx.x % kWarpgroupThreads;
    const int lane = tid % 32;
    // Lanes 0-7 address matrix 0 (rows 0-7, columns 0-7 of the block), 8-15 matrix 1 (rows
    // 8-15), 16-23 matrix 2 (rows 0-7, columns 8-15), 24-31 matrix 3 (rows 8-15, columns 8-15).
    const int row = first_row + 16 * (tid / 32) + lane % 8 + 8 * ((lane / 8) % 2);
    const int col_in_block = 8 * (lane / 16);
#pragma unroll
    for (int j = 0; j < kCols / 16; ++j) {
        const float* f = &acc[kRegsPer16Cols * j];
        const uint32_t r[4] = {ptx::pack_f32x2<kIsBf16>(f[0], f[1]), ptx::pack_f32x2<kIsBf16>(f[2], f[3]),
                               ptx::pack_f32x2<kIsBf16>(f[4], f[5]), ptx::pack_f32x2<kIsBf16>(f[6], f[7])};
        ptx::stmatrix_x4(tile.bytes + Tile::offset(row, 16 * j + col_in_block), r);
    }
}

// stmatrix writes through the generic proxy; the TMA store reads through the async proxy. Every
// writing thread fences before the barrier that hands the tile to the storing thread.
__device__ __forceinline__ void store_fence() { ptx::fence_proxy_async_shared_cta(); }

// A consumer warpgroup's O rows out to global memory: its fragment `o` (kHeadDim columns; a wider
// accumulator keeps its leading ones) through rows [first_row, first_row + 64) of `staging`, one TMA
// store of the rows per column part -- one part where the staging tile is as wide as O, two where
// shared memory holds only half of O. `issuer` (one thread of the warpgroup) issues the stores; a
// bulk group is tracked per issuing thread, so it also waits, before each part is written, for
// the reads of the store before it: the previous part's, or for the first part the previous
// tile's last (deferred to here, so those reads overlap this tile's GEMMs). kWaitFirst false: the
// caller has no earlier store in flight on these rows (O staged in Q's buffer waits at once).
// `barrier` is the warpgroup's epilogue barrier; the rows go to m0 + first_row.. of the map.
template <class Elem, class Tile, int kHeadDim, bool kWaitFirst = true, int kN, class Barrier>
__device__ __forceinline__ void store_o_rows(Tile& staging, const float (&o)[kN], int first_row, bool issuer,
                                             Barrier& barrier, const CUtensorMap* map, int m0, int head, int batch) {
    constexpr int kCols = Tile::kCols, kParts = kHeadDim / kCols;
    static_assert(kParts * kCols == kHeadDim, "O in whole column parts");
    static_for<kParts>([&](auto part) {
        constexpr int kCol0 = decltype(part)::value * kCols;
        if ((kWaitFirst || kCol0 > 0) && issuer) ptx::bulk_wait_group_read<0>();
        barrier.sync();
        store_fragment<Elem, Tile, kCols>(staging, regs_slice<kCols / 2, kCol0 / 2>(o), first_row);
        store_fence();
        barrier.sync();
        if (issuer) {
            staging.store_rows(map, first_row, m0 + first_row, head, batch, kCol0);
            ptx::bulk_commit_group();
        }
    });
}

}  // namespace hattn::sm90
