// hattn/src/kernels/sm90/vt_e4m3.cuh -- V^T for the FP8 forward's P V product, written from a block
// of e4m3 V rows in shared memory: shared by the FP8 pre-pass (which can write V^T directly) and
// the FP8 forward's own transpose pass (for callers that pass V's rows); and the same transpose
// from shared memory to shared memory inside the attention kernel (transpose_v_tile).
//
// 8-bit wgmma reads B K-major only, so O += P V needs V^T: for each (batch, kv head) a
// [head_dim, keys] e4m3 matrix, keys = seqlen_k rounded up to kE4m3KeyGroup, the keys of every
// aligned group of 32 in the P fragment's order (sm90::e4m3_k_to_key), padding keys zero.
//
// Method: a block of kBlockKeys rows sits in shared memory as [key][kHeadDim + kVtTilePad] bytes.
// One 4-byte word of V^T holds 4 consecutive positions of one dim: keys k, k+1, k+8, k+9 of a
// group (e4m3_k_to_key). A thread loads those 4 keys' words of 4 dims (4 LDS.32) and transposes
// the 4 x 4 bytes with 8 byte permutes into 4 words of V^T, one per dim; lanes run along a V^T row,
// so each warp store writes 128 contiguous bytes.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/sm90/fragment_e4m3.cuh"
#include "ptx/convert.cuh"
#include "ptx/global.cuh"
#include "ptx/ldst.cuh"

namespace hattn::sm90 {

constexpr int kVtTilePad = 4;   // bytes after each key row: an odd word pitch spreads keys over banks
constexpr int kVtQuadKeys = 4;  // keys per 4-byte word of V^T

template <int kHeadDim>
__host__ __device__ constexpr int vt_tile_pitch() {
    return kHeadDim + kVtTilePad;
}
template <int kHeadDim, int kBlockKeys>
__host__ __device__ constexpr int vt_tile_bytes() {
    return kBlockKeys * vt_tile_pitch<kHeadDim>();
}

// w[e] = 4 dims of key e (byte j: dim j); out[j] = 4 keys of dim j (byte e: key e).
__device__ __forceinline__ void transpose_4x4_bytes(const uint32_t (&w)[4], uint32_t (&out)[4]) {
    const uint32_t lo01 = ptx::prmt_b32<0x5140>(w[0], w[1]);  // dims 0, 1 of keys 0, 1
    const uint32_t hi01 = ptx::prmt_b32<0x7362>(w[0], w[1]);  // dims 2, 3 of keys 0, 1
    const uint32_t lo23 = ptx::prmt_b32<0x5140>(w[2], w[3]);
    const uint32_t hi23 = ptx::prmt_b32<0x7362>(w[2], w[3]);
    out[0] = ptx::prmt_b32<0x5410>(lo01, lo23);
    out[1] = ptx::prmt_b32<0x7632>(lo01, lo23);
    out[2] = ptx::prmt_b32<0x5410>(hi01, hi23);
    out[3] = ptx::prmt_b32<0x7632>(hi01, hi23);
}

// After the block's rows are in `tile` (and a barrier): V^T positions [key0, key0 + kBlockKeys) of
// the (batch, kv head) whose V^T starts at `vt` (row length vt_keys, a multiple of 32), clipped at
// vt_keys. key0 is a multiple of kE4m3KeyGroup.
template <int kHeadDim, int kThreads, int kBlockKeys>
__device__ __forceinline__ void store_vt_block(const uint8_t* tile, uint8_t* vt, int64_t vt_keys, int64_t key0) {
    static_assert(kBlockKeys % kE4m3KeyGroup == 0, "whole key groups per block");
    constexpr int kPitch = vt_tile_pitch<kHeadDim>();
    constexpr int kDimQuads = kHeadDim / 4;
    const int positions = static_cast<int>(vt_keys - key0 < kBlockKeys ? vt_keys - key0 : kBlockKeys);
    const int quads = positions / kVtQuadKeys;
    for (int u = static_cast<int>(threadIdx.x); u < quads * kDimQuads; u += kThreads) {
        const int quad = u % quads, dim0 = kVtQuadKeys * (u / quads);
        const int position0 = kVtQuadKeys * quad;
        const int group0 = position0 / kE4m3KeyGroup * kE4m3KeyGroup;
        uint32_t w[kVtQuadKeys], out[kVtQuadKeys];
#pragma unroll
        for (int e = 0; e < kVtQuadKeys; ++e) {
            const int key = group0 + e4m3_k_to_key(position0 % kE4m3KeyGroup + e);
            w[e] = ptx::ld_shared_b32(tile + key * kPitch + dim0);
        }
        transpose_4x4_bytes(w, out);
#pragma unroll
        for (int j = 0; j < kVtQuadKeys; ++j) {
            ptx::st_global_b32(vt + (dim0 + j) * vt_keys + key0 + position0, out[j]);
        }
    }
}

// ---- V^T inside the attention kernel ----------------------------------------------------
// The FP8 forward's in-kernel transpose (fwd_fp8::Tuning::kTransposeV): a [keys x head_dim] tile of
// V rows, as TMA wrote it (swizzled like a K tile), into a V^T slot [head_dim x keys] (swizzled,
// keys in e4m3_k_to_key order), by kWarps whole warps, each taking every kWarps-th unit of 32 keys (one
// permuted key group) x 16 dims (one 16-byte chunk of a V row).
//
// Per unit, three instructions move 512 bytes: ldmatrix.x4.trans reads the group's four 8-key x
// 16-dim matrices (keys 8j..8j+7 in matrix j) as 16-bit pairs, so lane 4c + q holds, of each, the
// two keys 2q, 2q + 1 of dims 2c, 2c + 1 (a pair of dims is one 16-bit element). A V^T word is 4
// keys of one dim; quad q of a group holds keys {2q, 2q + 1, 2q + 8, 2q + 9} (e4m3_k_to_key), the
// lane's halves of matrices 0 and 1: one byte permute per dim (even bytes: dim 2c, odd: dim 2c +
// 1), and matrices 2 and 3 give quad q + 4. stmatrix.x4 then writes them as four 8 x 16-byte
// matrices whose row c (a V^T row: one dim) is lanes 4c..4c+3's words, i.e. positions 0-15 or
// 16-31 of the group. Which dim of the pair a stored matrix's row takes alternates at row 4
// (rows 2c + c / 4, and the other dim in the next matrix), so a matrix's 8 rows are 8 distinct dims
// mod 8: the swizzle then puts them in 8 distinct bank groups (dims 0, 2, .., 14 would share 4).
// Both reads and writes are conflict-free; each lane's addresses change by constants per unit.
constexpr uint32_t kEvenBytes = 0x6420;  // prmt: bytes 0, 2 of a, then of b (dim 2c of 4 keys)
constexpr uint32_t kOddBytes = 0x7531;   // bytes 1, 3 (dim 2c + 1)

// Lane `lane`'s part in transpose_v_tile: the row addresses it gives ldmatrix and stmatrix in the
// first unit (group 0, chunk 0; later units are offset_moved from them) and its permute selector
// for the first stored matrix of each pair (the second takes the other).
struct TransposeLane {
    uint32_t load_at, store_at, first_selector;
};
constexpr int kTransposeMatrixRows = 8;     // rows of an 8x8 16-bit matrix
constexpr int kTransposeChunkDims = 16;     // a unit's dims: one 16-byte chunk of a V row
constexpr int kTransposeStorePositions = 16;  // positions of one stored matrix row

template <class VRowTile, class VtTile>
__host__ __device__ constexpr TransposeLane transpose_lane(int lane) {
    const int matrix = lane / kTransposeMatrixRows, row = lane % kTransposeMatrixRows;  // the row it addresses
    const bool upper = lane / 4 >= 4;  // its words go to rows 4-7 of the stored matrices (row = lane / 4)
    const int store_dim = 2 * row + ((matrix % 2) ^ (row / 4));  // stored matrix `matrix`'s row `row`
    return {VRowTile::offset(kTransposeMatrixRows * matrix + row, 0),
            VtTile::offset(store_dim, kTransposeStorePositions * (matrix / 2)), upper ? kOddBytes : kEvenBytes};
}
// Unit (group, chunk)'s addresses for that lane.
template <class VRowTile>
__host__ __device__ constexpr uint32_t transpose_load_offset(const TransposeLane& l, int group, int chunk) {
    return VRowTile::offset_moved(l.load_at, kE4m3KeyGroup * group, kTransposeChunkDims * chunk);
}
template <class VtTile>
__host__ __device__ constexpr uint32_t transpose_store_offset(const TransposeLane& l, int group, int chunk) {
    return VtTile::offset_moved(l.store_at, kTransposeChunkDims * chunk, kE4m3KeyGroup * group);
}
template <class VRowTile>
__host__ __device__ constexpr int transpose_units() {
    return VRowTile::kRows / kE4m3KeyGroup * (VRowTile::kCols / kTransposeChunkDims);
}

template <int kWarps, class VRowTile, class VtTile>
__device__ __forceinline__ void transpose_v_tile(const VRowTile& v, VtTile& vt, uint32_t warp) {
    static_assert(std::is_same_v<typename VRowTile::Element, E4m3> && std::is_same_v<typename VtTile::Element, E4m3>,
                  "e4m3 tiles");
    static_assert(VRowTile::kRows == VtTile::kCols && VRowTile::kCols == VtTile::kRows, "V^T is V's transpose");
    static_assert(VRowTile::kRows % kE4m3KeyGroup == 0, "whole key groups");
    constexpr uint32_t kDimChunks = VRowTile::kCols / kTransposeChunkDims;
    constexpr uint32_t kUnits = transpose_units<VRowTile>();
    const TransposeLane me = transpose_lane<VRowTile, VtTile>(static_cast<int>(threadIdx.x % 32));
#pragma unroll 1
    for (uint32_t u = warp; u < kUnits; u += kWarps) {
        const int group = static_cast<int>(u / kDimChunks), chunk = static_cast<int>(u % kDimChunks);
        uint32_t x[4], y[4];
        const uint32_t first = me.first_selector, second = first ^ kEvenBytes ^ kOddBytes;
        ptx::ldmatrix_x4_trans(x, v.bytes + transpose_load_offset<VRowTile>(me, group, chunk));
        y[0] = ptx::prmt_b32(x[0], x[1], first);
        y[1] = ptx::prmt_b32(x[0], x[1], second);
        y[2] = ptx::prmt_b32(x[2], x[3], first);
        y[3] = ptx::prmt_b32(x[2], x[3], second);
        ptx::stmatrix_x4(vt.bytes + transpose_store_offset<VtTile>(me, group, chunk), y);
    }
}

// ---- Row sums of P on the tensor cores ----------------------------------------------------
// P's row sums as a GEMM: P (the A fragment of P V) times a K-major [kRowSumCols x keys] tile of
// e4m3 ones gives, in every one of kRowSumCols accumulator columns, each row's sum of P as
// quantized (the weights P V multiplies), where the softmax would spend one FADD per weight.
// 64 x 8 is wgmma's narrowest shape. 128B-swizzling permutes 16-byte chunks within a row, which
// leaves a tile of equal bytes as it is; TMA never touches it.
constexpr int kRowSumCols = 8;
constexpr uint32_t kE4m3OnesWord = 0x38383838u;  // four e4m3 1.0 (sign 0, exponent 0111, mantissa 000)

// Fills `bytes` bytes of shared memory with `word`, every thread of the CTA taking a share; the
// caller fences the writes to the async proxy (wgmma reads shared memory through it) and
// synchronizes before any GEMM.
__device__ __forceinline__ void fill_words(uint8_t* smem, int bytes, uint32_t word) {
    for (int w = threadIdx.x; w < bytes / 4; w += blockDim.x) reinterpret_cast<uint32_t*>(smem)[w] = word;
}

}  // namespace hattn::sm90
