// hattn/src/kernels/sm90/tile.cuh -- element types and 128B-swizzled operand tiles: one type
// answers the TMA box, the expect_tx byte count, the shared-memory footprint and the wgmma
// descriptors, so none of these can disagree with another.
//
// A [kRows x kCols] tile is stored as kCols / kAtomCols column blocks ("atoms") of
// [kRows][128 bytes], exactly what a TMA load with a box of {128 bytes, kRows} and the 128-byte
// swizzle writes. wgmma reads it K-major (Q, K: the 128-byte rows run along the reduction) or
// MN-major (V for O += P V: rows are the reduction).
// NOTE: 128B swizzle -> every atom starts 1024-byte aligned (8 rows of 128 bytes repeat the
//       XOR pattern), hence alignas(1024) and kRows % 8 == 0.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"

namespace hattn::sm90 {

// ---- Element types -------------------------------------------------------------------------
// kMmaK is wgmma's reduction depth per instruction: 32 bytes of K per row for every type.
struct Bf16 {
    using Storage = uint16_t;
    static constexpr int kBytes = 2;
    static constexpr int kMmaK = 16;
    static constexpr CUtensorMapDataType kTmaType = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
};
struct Fp16 {
    using Storage = uint16_t;
    static constexpr int kBytes = 2;
    static constexpr int kMmaK = 16;
    static constexpr CUtensorMapDataType kTmaType = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
};
// FP8 operands: wgmma reads both K-major only (no transpose bit), so V needs a transposed tile.
struct E4m3 {
    using Storage = uint8_t;
    static constexpr int kBytes = 1;
    static constexpr int kMmaK = 32;
    static constexpr CUtensorMapDataType kTmaType = CU_TENSOR_MAP_DATA_TYPE_UINT8;
};

constexpr int kSwizzleBytes = 128;  // TMA + wgmma swizzle span: one row of an atom
constexpr int kSwizzleRowsPerAtom = 8;
constexpr int kSwizzleChunkBytes = 16;

// kSpan: the swizzle span, 128 bytes (the default, every 16-bit tile) or 64 (8-bit tiles whose rows
// are only 64 bytes: e4m3 Q/K at head_dim 64, V^T with 64-key blocks).
template <class Elem, int kRows_, int kCols_, int kSpan_ = kSwizzleBytes>
struct alignas(1024) SwizzledTile {
    using Element = Elem;
    static constexpr int kRows = kRows_;
    static constexpr int kCols = kCols_;
    static constexpr int kSpan = kSpan_;
    static_assert(kSpan == 128 || kSpan == 64, "128- or 64-byte swizzle");
    static constexpr ptx::Swizzle kSwizzle = kSpan == 128 ? ptx::Swizzle::k128B : ptx::Swizzle::k64B;
    static constexpr CUtensorMapSwizzle kTmaSwizzle = kSpan == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
    static constexpr int kAtomCols = kSpan / Elem::kBytes;  // TMA box width
    static constexpr int kAtoms = kCols / kAtomCols;
    static constexpr uint32_t kAtomBytes = kRows * kSpan;
    static constexpr uint32_t kBytes = kAtoms * kAtomBytes;         // footprint == expect_tx bytes
    static constexpr uint32_t kTxBytes = kRows * kCols * Elem::kBytes;
    static constexpr int kKStepsPerAtom = kAtomCols / Elem::kMmaK;
    static constexpr uint32_t kKStepBytes = Elem::kMmaK * Elem::kBytes;
    static_assert(kCols % kAtomCols == 0, "tile width must be whole swizzle rows");
    static_assert(kRows % kSwizzleRowsPerAtom == 0, "swizzled atoms are 8-row groups");
    static_assert(kTxBytes == kBytes, "the tile is dense: TMA delivers exactly its footprint");

    uint8_t bytes[kBytes];

    __device__ __forceinline__ uint8_t* atom(int a) { return bytes + a * kAtomBytes; }

    // TMA: the whole tile, one box per atom, from a 4-D map {cols, rows, heads, batch}.
    __device__ __forceinline__ void load(const CUtensorMap* map, uint64_t* bar, int row0, int head, int batch) {
#pragma unroll 1
        for (int a = 0; a < kAtoms; ++a) ptx::tma_load_4d(atom(a), map, bar, a * kAtomCols, row0, head, batch);
    }
    // The same, from column col0 of the map on (a multiple of kAtomCols): V^T tiles start at their
    // KV block's first key.
    __device__ __forceinline__ void load_at(const CUtensorMap* map, uint64_t* bar, int col0, int row0, int head, int batch) {
#pragma unroll 1
        for (int a = 0; a < kAtoms; ++a) ptx::tma_load_4d(atom(a), map, bar, col0 + a * kAtomCols, row0, head, batch);
    }
    // TMA store of rows [first_row, first_row + rows) of the tile (rows a multiple of 8), to
    // columns col0.. of the map (a multiple of kAtomCols: a tile narrower than the tensor).
    __device__ __forceinline__ void store_rows(const CUtensorMap* map, int first_row, int row0, int head, int batch,
                                               int col0 = 0) {
        for (int a = 0; a < kAtoms; ++a)
            ptx::tma_store_4d(map, atom(a) + first_row * kSpan, col0 + a * kAtomCols, row0, head, batch);
    }

    // K-major descriptor of k-step kk for the rows starting at `first_row` (a multiple of 8):
    // inside an atom a k-step is kKStepBytes further along the 128-byte row. Every k-step's
    // descriptor is the tile's plus a constant (ptx::smem_desc_advance), so the tile's is built
    // once per GEMM and each wgmma costs one integer add (re-packing the fields per k-step took
    // ~5 uniform-datapath instructions per wgmma, ~15% of the d64 mainloop's issue slots).
    __device__ __forceinline__ uint64_t desc_k_major(int first_row, int kk) const {
        const uint64_t base = ptx::make_smem_desc_k_major(ptx::smem_u32(bytes) + first_row * kSpan, kSwizzle);
        return ptx::smem_desc_advance(base, (kk / kKStepsPerAtom) * kAtomBytes + (kk % kKStepsPerAtom) * kKStepBytes);
    }
    // MN-major descriptor of k-step kk (rows are the reduction): kMmaK rows further per step; the
    // atoms along MN lie one atom apart (the leading byte offset). first_col (a multiple of
    // kAtomCols) starts the operand at a later atom: the backward reads K^T one 64-column slice
    // of head_dim at a time.
    __device__ __forceinline__ uint64_t desc_mn_major(int kk, int first_col = 0) const {
        const uint64_t base = ptx::make_smem_desc_mn_major(ptx::smem_u32(bytes), kSwizzle, kAtomBytes);
        return ptx::smem_desc_advance(base, (first_col / kAtomCols) * kAtomBytes + kk * Elem::kMmaK * kSpan);
    }

    // Byte offset of element (row, col): the 16-byte chunk index is XORed with address bits 7 and
    // up (row % 8 for 128-byte rows, (row / 2) % 4 for 64-byte ones), which spreads the rows of an
    // 8x8 core matrix over the banks.
    __host__ __device__ static constexpr uint32_t offset(int row, int col) {
        const int byte_in_row = (col % kAtomCols) * Elem::kBytes;
        constexpr int kChunksPerRow = kSpan / kSwizzleChunkBytes;
        const int chunk = (byte_in_row / kSwizzleChunkBytes) ^ ((row * kSpan / kSwizzleBytes) % kChunksPerRow);
        return (col / kAtomCols) * kAtomBytes + row * kSpan + chunk * kSwizzleChunkBytes +
               byte_in_row % kSwizzleChunkBytes;
    }
    // offset(row + row0, col0 + col) from at = offset(row, col0), for row0 a multiple of 8 and col
    // whole 16-byte chunks whose bits within a span do not overlap col0's: the XOR pattern repeats
    // every 8 rows and touches only the chunk bits, so a lane whose (row, col0) is fixed reaches
    // every later position with an add and an XOR (no division or swizzle arithmetic per use).
    __host__ __device__ static constexpr uint32_t offset_moved(uint32_t at, int row0, int col) {
        return ((at + row0 * kSpan) ^ ((col % kAtomCols) * Elem::kBytes)) + (col / kAtomCols) * kAtomBytes;
    }
};

// What a kernel's shared-memory layout holds in place of a tile it does not use.
struct NoTile {};

}  // namespace hattn::sm90
