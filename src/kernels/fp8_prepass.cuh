// hattn/src/kernels/fp8_prepass.cuh -- the FP8 pre-pass: 16-bit Q, K, V -> [RoPE] -> [random-sign
// Hadamard] -> per-block e4m3 quantization, and its launcher.
//
// One launch covers q, k and v; a thread block quantizes one block of kBlockRows rows of one
// (batch, head) of one tensor at a time (kBlocksPerCta blocks, see HATTN_FP8_BLOCKS_PER_CTA):
//   1. load      every thread loads its rows' 8 * kChunks elements (kChunks 16-byte chunks:
//                columns 8l..8l+7 + k d / kChunks, k < kChunks, for lane l of the row's lane
//                group) and widens them to fp32; all loads of the block are issued before any
//                is used;
//   2. RoPE      both conventions pair elements a thread already holds: interleaved pairs
//                (2i, 2i+1) sit inside a chunk, half-split pairs (i, i+d/2) are the same register
//                of chunks k and k + kChunks/2 -- so the rotation is register arithmetic;
//   3. Hadamard  signs (a hash of seed and column, computed on the host per launch and passed as
//                a per-lane bit mask), then the butterfly over the d index bits:
//                bits 0-2 inside a chunk and the top log2(kChunks) bits between the chunks in
//                registers, the bits in between across the lane group with shfl.bfly (1/sqrt(d)
//                is folded into the quantization scale);
//                (Without RoPE the default is the tensor-core kernel further down,
//                fp8_hadamard_mma_kernel: H_16 by mma.sync, the rest in registers.)
//   4. amax      per thread, per warp (shuffles), per block (shared memory);
//   5. quantize  y * 448 / amax -> cvt.rn.satfinite.e4m3x2 -> two 8-byte stores per row, and
//                the block's descale amax / 448; or, for V with HATTN_FP8_PREPASS_V_TRANSPOSED,
//                the block's bytes through shared memory into V^T (store_vt_block), the layout
//                the FP8 forward reads, so that it needs no transpose pass of its own.
//
// NOTES:
//   * Memory-bound: 2 bytes read and 1 written per element. The whole block's fp32 values stay
//     in registers between the amax and the quantization (64 floats per thread),
//     so each element is read from HBM exactly once.
//   * Instruction issue, not HBM, limits the transform at d >= 64: an SM must retire about 6
//     elements per clock to keep up with HBM (3 bytes each at ~4.2 TB/s over 132 SMs at
//     ~1.8 GHz), and issues 128 thread-instructions per clock. (The first version hashed the
//     Hadamard signs per column in every thread: ~1000 of its 2300-2900 instructions per
//     thread; the signs now come from the host.) An in-register butterfly level
//     costs one FADD per element, a cross-lane level a SHFL plus an FFMA (and SHFL runs at 32
//     lanes per clock). Fewer chunks per row mean more cross-lane levels but better coalesced
//     loads and stores (see Layout): the default (fp8_default_variant) is the layout that measured
//     fastest per head dim and transform; Fp8PrepassVariant picks another per call (A/B).
//   * Rows past seqlen are zeros in registers (not loaded, not stored): they cannot raise amax.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <string>

#include "kernels/fp8_prepass_args.h"
#include "kernels/sm90/vt_e4m3.cuh"  // V^T for the FP8 forward
#include "ptx/convert.cuh"
#include "ptx/global.cuh"
#include "ptx/ldst.cuh"
#include "ptx/mma.cuh"

namespace hattn::fp8 {
namespace detail {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kChunkElems = 8;      // one 16-byte load of 16-bit values
constexpr int kThreadValues = 64;   // fp32 values per thread (registers)
constexpr uint32_t kSignBit = 0x80000000u;

// The thread layout: a thread holds kThreadValues = 64 floats, kChunks 16-byte chunks of each of
// kRowsPerThread rows (chunk k at columns col + k d / kChunks .. +7). kChunks is the trade
// between the Hadamard's shuffles and the loads' coalescing (a warp's 16-byte load instruction
// covers 32 / kLanesPerRow rows of 2 d / kChunks contiguous bytes each; 4 full 128-byte lines is
// the ideal):
//   kChunks   lanes per row   cross-lane levels   128-byte lines per warp load (d 64 / 128 / 256)
//   2         d / 16          log2(d) - 4         8 / 4 / 4      (round 1's layout)
//   4         d / 32          log2(d) - 5         16 / 8 / 4
//   8         d / 64          log2(d) - 6         32 / 16 / 8    (round 2's layout)
// Every line a request touches costs the L1 a cycle (a wavefront) and the L2 a request; with
// kChunks 8 at d 64 a 16-byte load also uses half of each 32-byte sector (it is fetched twice).
template <int kHeadDim, int kChunks>
struct Layout {
    static constexpr int kThreadRowElems = kChunkElems * kChunks;           // values of one row per thread
    static constexpr int kRowsPerThread = kThreadValues / kThreadRowElems;  // rows of the block per thread
    static constexpr int kRowSlots = kBlockRows / kRowsPerThread;           // rows handled side by side
    static constexpr int kLanesPerRow = kHeadDim / kThreadRowElems;
    static constexpr int kHalf = kHeadDim / 2;                              // the RoPE half-split offset
    static constexpr int kChunkStride = kHeadDim / kChunks;                 // columns between chunks
    static constexpr int kThreads = kRowSlots * kLanesPerRow;               // 2d: 128, 256, 512
    static constexpr int kWarps = kThreads / kWarpSize;
    static_assert(kChunks == 2 || kChunks == 4 || kChunks == 8, "2, 4 or 8 chunks of a row per thread");
    static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head dims 64, 128, 256");
    static_assert(kLanesPerRow >= 1, "at most d / 8 chunks");
    static_assert(kWarpSize % kLanesPerRow == 0, "a row's lane group stays inside one warp (shuffles)");
    static_assert(kBlockRows % kRowsPerThread == 0, "whole rows per thread");
};

// 1/sqrt(d) in fp32 (exact for 64 and 256).
template <int kHeadDim>
HATTN_HOST_DEVICE constexpr float inv_sqrt_head_dim() {
    return kHeadDim == 64 ? 0.125f : kHeadDim == 256 ? 0.0625f : 0.08838834764831845f;
}


template <bool kIsBf16>
__device__ __forceinline__ void widen_chunk(const uint4 raw, float* out) {
    ptx::unpack_x2_f32<kIsBf16>(raw.x, out[0], out[1]);
    ptx::unpack_x2_f32<kIsBf16>(raw.y, out[2], out[3]);
    ptx::unpack_x2_f32<kIsBf16>(raw.z, out[4], out[5]);
    ptx::unpack_x2_f32<kIsBf16>(raw.w, out[6], out[7]);
}

// bf16 -> fp32 with D's signs applied on the way: widening moves the 16 bits into the top half
// (x * 2^16, or x & 0xffff0000), and flipping an fp32's sign is adding 2^31 modulo 2^32 (only bit
// 31 changes; the carry leaves the word), so each element stays one IMAD or one LOP3 -- the sign
// flips cost nothing. flip[e] is 0 or kSignBit.
constexpr uint32_t kBf16Shift = 65536u;       // 2^16: the bf16 bits into the fp32's top half
constexpr uint32_t kBf16HighMask = 0xFFFF0000u;
__device__ __forceinline__ void widen_chunk_bf16_signed(const uint4 raw, const uint32_t* flip, float* out) {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        out[2 * i] = __uint_as_float(w[i] * kBf16Shift + flip[2 * i]);
        out[2 * i + 1] = __uint_as_float((w[i] & kBf16HighMask) ^ flip[2 * i + 1]);
    }
}

// (a, b) -> (a cos - b sin, a sin + b cos)
__device__ __forceinline__ void rotate(float& a, float& b, float c, float s) {
    const float a0 = a;
    a = fmaf(a0, c, -b * s);
    b = fmaf(a0, s, b * c);
}

// v: the values of one row held by one thread, v[8k..8k+7] = columns col + k d / kChunks .. +7.
template <int kHeadDim, int kChunks, Rope kRope>
__device__ __forceinline__ void apply_rope(float* v, const float* __restrict__ cos_row,
                                           const float* __restrict__ sin_row, int col) {
    using L = Layout<kHeadDim, kChunks>;
    constexpr int kThreadRowElems = L::kThreadRowElems;
    if constexpr (kRope == Rope::kInterleaved) {
        // Pair i of columns (2i, 2i+1): chunk 0 holds pairs col/2 .. col/2+3, chunk 1 pairs
        // d/4 + col/2 .. +3.
#pragma unroll
        for (int chunk = 0; chunk < kChunks; ++chunk) {
            const int pair0 = (col + chunk * L::kChunkStride) / 2;
            const float4 c = ptx::ld_global_nc_v4_f32(cos_row + pair0);
            const float4 s = ptx::ld_global_nc_v4_f32(sin_row + pair0);
            float* x = v + chunk * kChunkElems;
            rotate(x[0], x[1], c.x, s.x);
            rotate(x[2], x[3], c.y, s.y);
            rotate(x[4], x[5], c.z, s.z);
            rotate(x[6], x[7], c.w, s.w);
        }
    } else if constexpr (kRope == Rope::kHalf) {
        // Pair i of columns (i, i + d/2): register j of chunk k with register j of chunk
        // k + kChunks / 2.
#pragma unroll
        for (int quad = 0; quad < kThreadRowElems / 2 / 4; ++quad) {
            const int chunk = quad * 4 / kChunkElems, in_chunk = quad * 4 % kChunkElems;
            const int column = col + chunk * L::kChunkStride + in_chunk;
            const float4 c = ptx::ld_global_nc_v4_f32(cos_row + column);
            const float4 s = ptx::ld_global_nc_v4_f32(sin_row + column);
            float* lo = v + 4 * quad;
            float* hi = v + kThreadRowElems / 2 + 4 * quad;
            rotate(lo[0], hi[0], c.x, s.x);
            rotate(lo[1], hi[1], c.y, s.y);
            rotate(lo[2], hi[2], c.z, s.z);
            rotate(lo[3], hi[3], c.w, s.w);
        }
    }
}

// The Sylvester butterfly over the d index bits of one row (unnormalized): for each bit, the pair
// (x[e], x[e + stride]) becomes (x[e] + x[e + stride], x[e] - x[e + stride]).
template <int kHeadDim, int kChunks>
__device__ __forceinline__ void hadamard_butterfly(float* v, int lane_in_row) {
    using L = Layout<kHeadDim, kChunks>;
    constexpr int kThreadRowElems = L::kThreadRowElems;
    // In registers: strides 1, 2, 4 inside a chunk, and multiples of d / kChunks between chunks
    // (register j and j + 8, j + 16, ...).
#pragma unroll
    for (int stride = 1; stride < kThreadRowElems; stride *= 2) {
#pragma unroll
        for (int j = 0; j < kThreadRowElems; ++j) {
            if ((j & stride) == 0) {
                const float a = v[j], b = v[j + stride];
                v[j] = a + b;
                v[j + stride] = a - b;
            }
        }
    }
    // Across the lane group: strides 8, 16, ... d/4 are lane bits 1, 2, ... of the group.
#pragma unroll
    for (int lane_bit = 1; lane_bit < L::kLanesPerRow; lane_bit *= 2) {
        const float mine = (lane_in_row & lane_bit) != 0 ? -1.f : 1.f;
#pragma unroll
        for (int j = 0; j < kThreadRowElems; ++j) {
            const float other = __shfl_xor_sync(kFullMask, v[j], lane_bit);
            // The lower lane holds x[e], the upper x[e + stride]: the upper one keeps the
            // difference, other - v = other + (-1) v: one FFMA for both lanes, no select.
            v[j] = fmaf(v[j], mine, other);
        }
    }
}

// D's signs for the launch, laid out per lane of a row's lane group: bits [l E, (l + 1) E) of the
// 256 are lane l's registers j < E = kThreadRowElems (register j: column 8l + (j / 8) d / kChunks
// + j % 8), so a thread reads its mask with one or two words and no per-column work.
template <int kHeadDim, int kChunks>
HadamardSigns make_lane_signs(uint64_t seed) {
    using L = Layout<kHeadDim, kChunks>;
    constexpr int kThreadRowElems = L::kThreadRowElems;
    HadamardSigns s;
    for (int lane = 0; lane < L::kLanesPerRow; ++lane) {
        for (int j = 0; j < kThreadRowElems; ++j) {
            const int column = lane * kChunkElems + (j / kChunkElems) * L::kChunkStride + j % kChunkElems;
            const int bit = lane * kThreadRowElems + j;
            s.words[bit / kSignWordBits] |= hadamard_sign_bit(seed, column) << (bit % kSignWordBits);
        }
    }
    return s;
}

// V^T for the FP8 forward (HATTN_FP8_PREPASS_V_TRANSPOSED): a 128-row V block is one 128-key
// stretch of V^T's rows (sm90/vt_e4m3.cuh). Rows past seqlen are zeros in registers, so V^T's
// padding keys are zeros.
using sm90::store_vt_block;
using sm90::vt_tile_pitch;
template <int kHeadDim>
__host__ __device__ constexpr int vt_tile_bytes() {
    return sm90::vt_tile_bytes<kHeadDim, kBlockRows>();
}

struct Fp8Tensors {
    Fp8Tensor t[3];  // q, k, v
};

// Where block g of a launch lives: blocks [0, q_blocks) are q's, the next k_blocks k's, the rest
// v's; inside a tensor, local_block = (batch * heads + head) * blocks + block (the descale's index).
struct BlockPlace {
    int which;        // 0 q, 1 k, 2 v
    int local_block;
    const uint16_t* in;  // the (batch, head)'s first input row
    uint8_t* out;        // the (batch, head)'s first output row
    int first_row;       // this thread's first row of the block
};

__device__ __forceinline__ BlockPlace place_block(const Fp8Tensors& tensors, int g, int q_blocks, int k_blocks,
                                                  int row_slot) {
    BlockPlace p;
    p.which = 0;
    p.local_block = g;
    if (p.local_block >= q_blocks) {
        p.local_block -= q_blocks;
        p.which = 1;
        if (p.local_block >= k_blocks) {
            p.local_block -= k_blocks;
            p.which = 2;
        }
    }
    const Fp8Tensor& t = tensors.t[p.which];
    const int blocks = (t.seqlen + kBlockRows - 1) / kBlockRows;
    const int block = p.local_block % blocks;
    const int head_linear = p.local_block / blocks;
    const int head = head_linear % t.heads;
    const int batch = head_linear / t.heads;
    p.in = static_cast<const uint16_t*>(t.in) + batch * t.in_batch_stride + head * t.in_head_stride;
    p.out = static_cast<uint8_t*>(t.out) + batch * t.out_batch_stride + head * t.out_head_stride;
    p.first_row = block * kBlockRows + row_slot;
    return p;
}

// Blocks per thread block. 1: a thread block loads, transforms and stores one block; its loads
// cannot overlap its own math and stores, only other resident thread blocks' (and d = 256 has
// one per SM: 512 threads at up to 128 registers). kStagedBlocks: block i + 1 is copied into
// shared memory with cp.async (each thread copies exactly the chunks it will read: no barrier)
// while block i is transformed and stored. fp8_default_variant picks per head dim and transform;
// HATTN_FP8_BLOCKS_PER_CTA (1 or kStagedBlocks; 0, the default: the table) overrides it for a
// build, and Fp8PrepassVariant per call (A/B measurements).
#ifndef HATTN_FP8_BLOCKS_PER_CTA
#define HATTN_FP8_BLOCKS_PER_CTA 0
#endif
constexpr int kStagedBlocks = kFp8StagedBlocks;
constexpr int kStageBuffers = 2;  // block i is read while block i + 1 lands
static_assert(HATTN_FP8_BLOCKS_PER_CTA == 0 || HATTN_FP8_BLOCKS_PER_CTA == 1 ||
                  HATTN_FP8_BLOCKS_PER_CTA == kStagedBlocks,
              "HATTN_FP8_BLOCKS_PER_CTA: 0 (the default table), 1 or kStagedBlocks");

// Shared memory of the staging buffers: [buffer][row][chunk][thread] 16-byte chunks (a warp's
// reads of one chunk are consecutive 16-byte words: no bank conflicts).
template <int kHeadDim, int kChunks, int kBlocksPerCta>
__host__ __device__ constexpr int stage_bytes() {
    using L = Layout<kHeadDim, kChunks>;
    return kBlocksPerCta > 1 ? kStageBuffers * L::kRowsPerThread * kChunks * L::kThreads * 16 : 0;
}

// cp.async of this thread's chunks of a block into staging buffer `buffer`.
template <int kHeadDim, int kChunks>
__device__ __forceinline__ void stage_block(const Fp8Tensors& tensors, const BlockPlace& p, int col, uint4* stage,
                                            int buffer) {
    using L = Layout<kHeadDim, kChunks>;
    const Fp8Tensor& t = tensors.t[p.which];
#pragma unroll
    for (int r = 0; r < L::kRowsPerThread; ++r) {
        const int row = p.first_row + r * L::kRowSlots;
        if (row >= t.seqlen) continue;
        const uint16_t* src = p.in + row * t.in_seq_stride + col;
#pragma unroll
        for (int chunk = 0; chunk < kChunks; ++chunk) {
            uint4* dst = stage + ((buffer * L::kRowsPerThread + r) * kChunks + chunk) * L::kThreads + threadIdx.x;
            ptx::cp_async_cg_16(dst, src + chunk * L::kChunkStride);
        }
    }
    ptx::cp_async_commit_group();
}

// ---- The tensor-core Hadamard (variant kFp8MmaChunks): Q and K without RoPE ----------------------
// The butterfly above spends ~10 instructions per element (log2(d) FADD levels, the cross-lane ones
// with a SHFL each) and makes the Hadamard kernels issue-bound. Sylvester's H_d is a Kronecker
// product, H_d = H_{d/16} (x) H_16 (column index = 16 j + k), so the transform splits into
//   1. H_16 on every group of 16 consecutive columns: one 16 x 16 matrix, applied by mma.sync
//      m16n8k16 to the 16-bit inputs as they are (bf16 or fp16: exact; +-1 products are exact and
//      the sums are fp32) with D's signs folded into B, so the diagonal costs nothing either;
//   2. H_{d/16} across the groups: every thread holds the same columns of every group (below), so
//      these log2(d/16) levels are FADDs between its own registers, no shuffles.
// About 8 instructions per element in all, as few as the plain quantizer's 10. (D's signs are hashed
// in the kernel here, once per thread block for B: a grid-stride walk has few thread blocks.)
//
// Layout: 256 threads, warp w owns rows 16w..16w+15 of the block (one m16 tile per group). A block
// lands in shared memory by cp.async (each warp copies its own rows: no barrier but the amax's),
// the next one while this one is computed (a grid-stride walk over Q's and K's blocks keeps the
// copies going). Rows are stored with their 16-byte chunks XOR-swizzled by row % 8, so ldmatrix's
// 8 rows of one chunk hit 8 different bank groups. B's columns are permuted (mma_out_col) so that
// lane (g, t)'s four accumulators of a row are output columns 16 j + 4t .. 4t + 3: one 32-bit word
// of e4m3 per row and group, staged in the warp's own rows of the input buffer (padded pitch:
// conflict-free), then written with 16-byte stores.
constexpr int kMmaThreads = 256;
constexpr int kMmaWarps = kMmaThreads / kWarpSize;
constexpr int kMmaRows = kBlockRows / kMmaWarps;  // one m16 tile per warp
constexpr int kMmaGroupCols = 16;                 // H_16 per mma (k = 16)
constexpr int kMmaStages = 2;
constexpr int kChunkBytes = 16;
constexpr int kSwizzleRows = 8;  // ldmatrix reads 8 rows of one chunk
constexpr int kOutPad = 16;      // bytes after each staged e4m3 row (bank spread of the word stores)
constexpr uint16_t kBf16One = 0x3F80u, kF16One = 0x3C00u, kHalfSign = 0x8000u;
static_assert(kMmaRows == 16, "mma.sync m16: 16 rows per warp");

template <int kHeadDim>
struct MmaLayout {
    static constexpr int kGroups = kHeadDim / kMmaGroupCols;
    static constexpr int kRowBytes = kHeadDim * 2;            // a 16-bit input row
    static constexpr int kRowChunks = kRowBytes / kChunkBytes;
    static constexpr int kStageBytes = kBlockRows * kRowBytes;
    static constexpr int kOutPitch = kHeadDim + kOutPad;       // staged e4m3 row
    static constexpr int kBTableBytes = kGroups * kWarpSize * kChunkBytes;  // B per group and lane
    static constexpr int kSmemBytes = kMmaStages * kStageBytes + kBTableBytes;
    static_assert(kRowChunks >= kSwizzleRows, "the swizzle needs 8 chunks per row");
    static_assert(kMmaRows * kOutPitch <= kMmaRows * kRowBytes, "the e4m3 rows fit in the warp's input rows");
};

// Output column (inside a group) of accumulator column n of n8 tile q: lane t's columns 2t, 2t+1 of
// both tiles become 4t .. 4t + 3.
HATTN_HOST_DEVICE constexpr int mma_out_col(int q, int n) { return 4 * (n / 2) + 2 * q + n % 2; }

// D H_16's entry (row k, column m) of group j as a 16-bit +-1.
template <bool kIsBf16>
__device__ __forceinline__ uint32_t signed_hadamard16(uint64_t seed, int j, int k, int m) {
    const uint32_t negative = (__popc(k & m) & 1) ^ hadamard_sign_bit(seed, j * kMmaGroupCols + k);
    return (kIsBf16 ? kBf16One : kF16One) | (negative ? kHalfSign : 0u);
}

// This warp's rows of block p into stage buffer `buffer` (rows past seqlen: zeros). Lane l copies
// chunk l % kRowChunks of rows l / kRowChunks + i * kRowStep: its source and destination advance by
// a constant per step, and the swizzle's row bits (row % 8 = first row + a multiple of the step, the
// two without common bits) XOR in as a compile-time constant.
template <int kHeadDim>
__device__ __forceinline__ void mma_stage_rows(const Fp8Tensors& tensors, const BlockPlace& p, uint8_t* buffer,
                                               int warp, int lane) {
    using L = MmaLayout<kHeadDim>;
    constexpr int kRowStep = kWarpSize / L::kRowChunks;  // rows per step: 4, 2, 1
    static_assert(kSwizzleRows % kRowStep == 0, "the step's multiples keep the swizzle's row bits apart");
    const Fp8Tensor& t = tensors.t[p.which];
    const int row0 = lane / L::kRowChunks, chunk = lane % L::kRowChunks;
    const int valid_rows = t.seqlen - (p.first_row + warp * kMmaRows);  // rows of the warp that exist
    const uint16_t* src = p.in + static_cast<int64_t>(p.first_row + warp * kMmaRows + row0) * t.in_seq_stride +
                          chunk * kChunkElems;
    uint8_t* dst = buffer + (warp * kMmaRows + row0) * L::kRowBytes;
    const int swizzled = chunk ^ row0;
#pragma unroll
    for (int i = 0; i < kMmaRows / kRowStep; ++i) {
        const int row = row0 + i * kRowStep;
        uint8_t* d = dst + i * kRowStep * L::kRowBytes + ((swizzled ^ ((i * kRowStep) % kSwizzleRows)) * kChunkBytes);
        if (row < valid_rows) {
            ptx::cp_async_cg_16(d, src + static_cast<int64_t>(i * kRowStep) * t.in_seq_stride);
        } else {
            ptx::st_shared_v4_b32(d, make_uint4(0u, 0u, 0u, 0u));
        }
    }
    ptx::cp_async_commit_group();
}

// 128-row blocks of one tensor over every (batch, head): its descale count, and its share of a launch.
inline int64_t tensor_blocks(const Fp8Tensor& t, int batch) {
    return static_cast<int64_t>((t.seqlen + kBlockRows - 1) / kBlockRows) * t.heads * batch;
}

// The block's scale from its amax (of the unnormalized butterfly outputs when `norm` < 1), and its
// descale stored by one thread: written once, shared by both kernels so that they quantize alike.
__device__ __forceinline__ float block_scale(float amax, float norm, bool write_descale, float* descale) {
    amax *= norm;
    if (write_descale) ptx::st_global_f32(descale, amax / kE4m3Max);
    return amax > 0.f ? fminf(kE4m3Max / amax, FLT_MAX) * norm : 0.f;
}

template <int kHeadDim, bool kIsBf16>
__global__ void __launch_bounds__(kMmaThreads, 1)
    fp8_hadamard_mma_kernel(const __grid_constant__ Fp8Tensors tensors, const int q_blocks, const int total_blocks,
                            const uint64_t seed) {
    using L = MmaLayout<kHeadDim>;
    constexpr int kGroups = L::kGroups;
    extern __shared__ __align__(128) uint8_t mma_smem[];  // [kMmaStages][block], then B per group and lane
    __shared__ float warp_amax[kStageBuffers][kMmaWarps];
    uint4* b_table = reinterpret_cast<uint4*>(mma_smem + kMmaStages * L::kStageBytes);
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize, lane = static_cast<int>(threadIdx.x) % kWarpSize;
    const int g = lane / 4, t = lane % 4;  // the fragment coordinates (ptx/mma.cuh)

    int block = static_cast<int>(blockIdx.x);  // the launch has no more thread blocks than blocks
    mma_stage_rows<kHeadDim>(tensors, place_block(tensors, block, q_blocks, total_blocks, 0), mma_smem, warp, lane);
    // B = D_j H_16 with the output permutation, per group j and lane: {tile 0 b0, b1, tile 1 b0, b1}.
    for (int e = static_cast<int>(threadIdx.x); e < kGroups * kWarpSize; e += kMmaThreads) {
        const int j = e / kWarpSize, bg = (e % kWarpSize) / 4, bt = e % 4;
        uint32_t w[4];
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            const int m = mma_out_col(q, bg);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int k = 2 * bt + 8 * half;
                w[2 * q + half] = signed_hadamard16<kIsBf16>(seed, j, k, m) |
                                  (signed_hadamard16<kIsBf16>(seed, j, k + 1, m) << 16);
            }
        }
        b_table[e] = make_uint4(w[0], w[1], w[2], w[3]);
    }
    __syncthreads();  // B is in place

    constexpr float kNorm = inv_sqrt_head_dim<kHeadDim>();
    BlockPlace next_place = place_block(tensors, block, q_blocks, total_blocks, 0);
#pragma unroll 1
    for (int i = 0; block < total_blocks; ++i, block += static_cast<int>(gridDim.x)) {
        const BlockPlace p = next_place;
        const Fp8Tensor& tensor = tensors.t[p.which];
        uint8_t* buffer = mma_smem + (i % kMmaStages) * L::kStageBytes;
        const int next = block + static_cast<int>(gridDim.x);
        if (next < total_blocks) {
            next_place = place_block(tensors, next, q_blocks, total_blocks, 0);
            mma_stage_rows<kHeadDim>(tensors, next_place, mma_smem + ((i + 1) % kMmaStages) * L::kStageBytes, warp,
                                     lane);
        } else {
            ptx::cp_async_commit_group();  // an empty group: the wait below counts the same
        }
        ptx::cp_async_wait_group<1>();  // this block's copies (the next block's may be in flight)
        __syncwarp();                   // ... and the other lanes' copies of the warp's rows

        // ---- H_16 per group by the tensor cores ----
        float acc[kGroups][2][4];
        // Lane l gives ldmatrix the row of matrix l / 8 (rows +0 / +8, chunks 2j / 2j + 1): chunk
        // 2j + c of row r sits at chunk (2j) ^ (c ^ r % 8), a row base plus a constant per j.
        const int a_row = warp * kMmaRows + (lane % 8) + 8 * ((lane / 8) % 2);
        const uint8_t* a_base = buffer + a_row * L::kRowBytes;
        const int a_swizzle = (lane / 16) ^ (a_row % kSwizzleRows);
#pragma unroll
        for (int j = 0; j < kGroups; ++j) {
            uint32_t a[4];
            ptx::ldmatrix_x4(a, a_base + (((2 * j) ^ a_swizzle) * kChunkBytes));
            const uint4 b = ptx::ld_shared_v4_b32(b_table + j * kWarpSize + lane);
            constexpr float kZero[4] = {0.f, 0.f, 0.f, 0.f};
            if constexpr (kIsBf16) {
                ptx::mma_m16n8k16_f32_bf16(acc[j][0], a, b.x, b.y, kZero);
                ptx::mma_m16n8k16_f32_bf16(acc[j][1], a, b.z, b.w, kZero);
            } else {
                ptx::mma_m16n8k16_f32_f16(acc[j][0], a, b.x, b.y, kZero);
                ptx::mma_m16n8k16_f32_f16(acc[j][1], a, b.z, b.w, kZero);
            }
        }
        // ---- H_{d/16} across the groups, in registers ----
#pragma unroll
        for (int stride = 1; stride < kGroups; stride *= 2) {
#pragma unroll
            for (int j = 0; j < kGroups; ++j) {
                if ((j & stride) != 0) continue;
#pragma unroll
                for (int r = 0; r < 8; ++r) {
                    const float x = acc[j][r / 4][r % 4], y = acc[j + stride][r / 4][r % 4];
                    acc[j][r / 4][r % 4] = x + y;
                    acc[j + stride][r / 4][r % 4] = x - y;
                }
            }
        }

        // ---- amax of the block ----
        float amax = 0.f;
#pragma unroll
        for (int j = 0; j < kGroups; ++j)
#pragma unroll
            for (int r = 0; r < 8; ++r) amax = fmaxf(amax, fabsf(acc[j][r / 4][r % 4]));
#pragma unroll
        for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
            amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, offset));
        }
        if (lane == 0) warp_amax[i % kStageBuffers][warp] = amax;  // by parity, as in fp8_prepass_kernel
        __syncthreads();
#pragma unroll
        for (int w = 0; w < kMmaWarps; ++w) amax = fmaxf(amax, warp_amax[i % kStageBuffers][w]);
        const float scale = block_scale(amax, kNorm, threadIdx.x == 0, tensor.descale + p.local_block);

        // ---- quantize into the warp's rows of the buffer, then 16-byte stores ----
        uint8_t* staged = buffer + warp * kMmaRows * L::kRowBytes;
#pragma unroll
        for (int j = 0; j < kGroups; ++j) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {  // rows g and g + 8
                const uint32_t lo = ptx::cvt_rn_satfinite_e4m3x2_f32(acc[j][0][2 * half] * scale,
                                                                     acc[j][0][2 * half + 1] * scale);
                const uint32_t hi = ptx::cvt_rn_satfinite_e4m3x2_f32(acc[j][1][2 * half] * scale,
                                                                     acc[j][1][2 * half + 1] * scale);
                ptx::st_shared_b32(staged + (g + 8 * half) * L::kOutPitch + j * kMmaGroupCols + 4 * t, lo | (hi << 16));
            }
        }
        __syncwarp();
        constexpr int kOutChunks = kHeadDim / kChunkBytes;      // 16-byte chunks of an e4m3 row
        constexpr int kOutRowStep = kWarpSize / kOutChunks;     // rows per store step: 8, 4, 2
        const int out_row0 = lane / kOutChunks, out_chunk = lane % kOutChunks;
        const int valid_rows = tensor.seqlen - (p.first_row + warp * kMmaRows);
        uint8_t* out = p.out + static_cast<int64_t>(p.first_row + warp * kMmaRows + out_row0) * tensor.out_seq_stride +
                       out_chunk * kChunkBytes;
        const uint8_t* from = staged + out_row0 * L::kOutPitch + out_chunk * kChunkBytes;
#pragma unroll
        for (int k = 0; k < kMmaRows / kOutRowStep; ++k) {
            if (out_row0 + k * kOutRowStep < valid_rows) {
                ptx::st_global_v4_b32(out + static_cast<int64_t>(k * kOutRowStep) * tensor.out_seq_stride,
                                      ptx::ld_shared_v4_b32(from + k * kOutRowStep * L::kOutPitch));
            }
        }
        __syncwarp();  // the staged rows are read before the next-but-one block's copies land there
    }
    ptx::cp_async_wait_all();  // nothing outstanding at exit
}

// Q's and K's blocks by the tensor-core Hadamard on a grid-stride walk (as many thread blocks as
// fit on the GPU at once).
template <int kHeadDim, bool kIsBf16>
cudaError_t launch_hadamard_mma_qk(const Fp8PrepassArgs& a, cudaStream_t stream) {
    auto blocks_of = [&](const Fp8Tensor& t) { return tensor_blocks(t, a.batch); };
    constexpr int kSmem = MmaLayout<kHeadDim>::kSmemBytes;
    constexpr int kDefaultSmemLimit = 48 * 1024;
    auto kernel = fp8_hadamard_mma_kernel<kHeadDim, kIsBf16>;
    cudaError_t rc = cudaSuccess;
    if (kSmem > kDefaultSmemLimit) {
        rc = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
        if (rc != cudaSuccess) return rc;
    }
    int device = 0, sms = 0, per_sm = 0;
    if ((rc = cudaGetDevice(&device)) != cudaSuccess) return rc;
    if ((rc = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return rc;
    if ((rc = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kMmaThreads, kSmem)) != cudaSuccess) {
        return rc;
    }
    const int64_t resident = static_cast<int64_t>(sms) * std::max(per_sm, 1);
    auto launch = [&](const Fp8Tensors& tensors, int64_t q_blocks, int64_t total) {
        if (total == 0) return cudaSuccess;
        const int64_t grid = std::min(total, resident);
        kernel<<<static_cast<unsigned>(grid), kMmaThreads, kSmem, stream>>>(
            tensors, static_cast<int>(q_blocks), static_cast<int>(total), a.hadamard_seed);
        return cudaGetLastError();
    };
    const int64_t nq = blocks_of(a.q), nk = blocks_of(a.k);
    constexpr int64_t kMaxBlocks = INT32_MAX;
    if (nq + nk <= kMaxBlocks) return launch(Fp8Tensors{{a.q, a.k, a.v}}, nq, nq + nk);
    rc = launch(Fp8Tensors{{a.q, a.q, a.q}}, nq, nq);  // q alone: every block is a q block
    if (rc == cudaSuccess) rc = launch(Fp8Tensors{{a.k, a.k, a.k}}, nk, nk);
    return rc;
}

// One launch quantizes all three tensors (one wave tail instead of three). V is never rotated (that
// would change the attention output); the branch is uniform per thread block.
// kVtOut: the V^T store path is compiled in (a tensor with vt_keys > 0 takes it). It is a separate
// instantiation, launched for V alone when Q and K are transformed: under d = 256's 128-register
// cap its code in the transform kernels tips some of them into spills.
template <int kHeadDim, int kChunks, int kBlocksPerCta, bool kIsBf16, Rope kRope, bool kHadamard, bool kVtOut = false>
__global__ void __launch_bounds__(Layout<kHeadDim, kChunks>::kThreads, 1)
    fp8_prepass_kernel(const __grid_constant__ Fp8Tensors tensors, const int q_blocks, const int k_blocks,
                       const int total_blocks, const float* __restrict__ rope_cos,
                       const float* __restrict__ rope_sin, const HadamardSigns signs) {
    using L = Layout<kHeadDim, kChunks>;
    constexpr int kRowsPerThread = L::kRowsPerThread;
    constexpr int kRowSlots = L::kRowSlots;
    constexpr int kThreadRowElems = L::kThreadRowElems;
    constexpr bool kStaged = kBlocksPerCta > 1;
    // bf16 with the Hadamard and no RoPE: D's signs ride on the widening (widen_chunk_bf16_signed).
    // (RoPE comes before D and mixes columns of different signs; with 64 values of one row per
    // thread the 64 flips do not stay in registers: no gain there.)
    constexpr bool kFuseSigns = kIsBf16 && kHadamard && kRope == Rope::kNone && kChunks <= 4;
    __shared__ float warp_amax[kStageBuffers][L::kWarps];  // by block parity: one barrier per block
    extern __shared__ uint4 stage[];  // kStaged: stage_bytes<...>(); then V^T's tile (vt_tile_bytes) if asked

    const int lane_in_row = static_cast<int>(threadIdx.x) % L::kLanesPerRow;
    const int row_slot = static_cast<int>(threadIdx.x) / L::kLanesPerRow;
    const int col = lane_in_row * kChunkElems;  // first column of chunk 0; chunk k at col + k d / kChunks
    const int g0 = static_cast<int>(blockIdx.x) * kBlocksPerCta;
    if constexpr (kStaged) {
        stage_block<kHeadDim, kChunks>(tensors, place_block(tensors, g0, q_blocks, k_blocks, row_slot), col, stage,
                                       0);
    }

    // D's signs for this thread's columns (the same for every row), from the host-made mask:
    // flip[j] is register j's sign bit (make_lane_signs).
    uint32_t flip[kThreadRowElems];
    if constexpr (kHadamard) {
        const int bit0 = lane_in_row * kThreadRowElems;
        uint64_t sign_mask = signs.words[bit0 / kSignWordBits] >> (bit0 % kSignWordBits);
        if constexpr (kThreadRowElems > kSignWordBits) {
            sign_mask |= static_cast<uint64_t>(signs.words[bit0 / kSignWordBits + 1]) << kSignWordBits;
        }
#pragma unroll
        for (int j = 0; j < kThreadRowElems; ++j) flip[j] = ((sign_mask >> j) & 1u) != 0 ? kSignBit : 0u;
    }

#pragma unroll 1
    for (int i = 0; i < kBlocksPerCta; ++i) {
        const int g = g0 + i;
        if (g >= total_blocks) break;
        const BlockPlace p = place_block(tensors, g, q_blocks, k_blocks, row_slot);
        // __grid_constant__: the reference reads the parameter bank in place (an ordinary parameter
        // whose address is taken is copied to the stack first).
        const Fp8Tensor& t = tensors.t[p.which];
        const bool transform = p.which != 2;
        const int local_block = p.local_block;
        const uint16_t* in = p.in;
        uint8_t* out = p.out;
        const int first_row = p.first_row;

        // ---- 1. load (every load of the block in flight before the first use) ----
        float v[kRowsPerThread][kThreadRowElems];
        if constexpr (kStaged) ptx::cp_async_wait_all();  // this thread's copies of block i
        {
            uint4 raw[kRowsPerThread][kChunks] = {};
#pragma unroll
            for (int r = 0; r < kRowsPerThread; ++r) {
                const int row = first_row + r * kRowSlots;
                if (row < t.seqlen) {
                    const uint16_t* src = in + row * t.in_seq_stride + col;
#pragma unroll
                    for (int chunk = 0; chunk < kChunks; ++chunk) {
                        if constexpr (kStaged) {
                            raw[r][chunk] = ptx::ld_shared_v4_b32(
                                stage + (((i % kStageBuffers) * kRowsPerThread + r) * kChunks + chunk) * L::kThreads +
                                threadIdx.x);
                        } else {
                            raw[r][chunk] = ptx::ld_global_nc_na_v4_b32(src + chunk * L::kChunkStride);
                        }
                    }
                }
            }
            // kFuseSigns: the block's flips are 0 where it is not transformed (V), selected once.
            uint32_t block_flip[kFuseSigns ? kThreadRowElems : 1];
            if constexpr (kFuseSigns) {
#pragma unroll
                for (int j = 0; j < kThreadRowElems; ++j) block_flip[j] = transform ? flip[j] : 0u;
            }
#pragma unroll
            for (int r = 0; r < kRowsPerThread; ++r) {
#pragma unroll
                for (int chunk = 0; chunk < kChunks; ++chunk) {
                    if constexpr (kFuseSigns) {
                        widen_chunk_bf16_signed(raw[r][chunk], block_flip + chunk * kChunkElems,
                                                v[r] + chunk * kChunkElems);
                    } else {
                        widen_chunk<kIsBf16>(raw[r][chunk], v[r] + chunk * kChunkElems);
                    }
                }
            }
        }
        if constexpr (kStaged) {
            // The next block's bytes travel while this one is transformed and stored. (The buffer it
            // lands in was read, by this thread only, one block ago.)
            if (i + 1 < kBlocksPerCta && g + 1 < total_blocks) {
                stage_block<kHeadDim, kChunks>(tensors, place_block(tensors, g + 1, q_blocks, k_blocks, row_slot),
                                               col, stage, (i + 1) % kStageBuffers);
            }
        }

        // ---- 2. RoPE, 3. Hadamard ----
        if (kRope != Rope::kNone && transform) {  // (compile-time false without RoPE)
#pragma unroll
            for (int r = 0; r < kRowsPerThread; ++r) {
                const int row = first_row + r * kRowSlots;
                if (row < t.seqlen) {
                    const int64_t table_row = static_cast<int64_t>(row + t.rope_offset) * L::kHalf;
                    apply_rope<kHeadDim, kChunks, kRope>(v[r], rope_cos + table_row, rope_sin + table_row, col);
                }
            }
        }
        if (kHadamard && transform) {
#pragma unroll
            for (int r = 0; r < kRowsPerThread; ++r) {
                if constexpr (!kFuseSigns) {
#pragma unroll
                    for (int j = 0; j < kThreadRowElems; ++j) {
                        // A sign flip is an XOR of the sign bit: no multiply (bf16: in the widening).
                        v[r][j] = __uint_as_float(__float_as_uint(v[r][j]) ^ flip[j]);
                    }
                }
                hadamard_butterfly<kHeadDim, kChunks>(v[r], lane_in_row);
                // The 1/sqrt(d) is folded into the quantization scale (one multiply per element fewer).
            }
        }

        // ---- 4. amax of the block: thread, warp, block ----
        float amax = 0.f;
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
#pragma unroll
            for (int j = 0; j < kThreadRowElems; ++j) amax = fmaxf(amax, fabsf(v[r][j]));
        }
#pragma unroll
        for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
            amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, offset));
        }
        const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
        // Block i's maxima go to slot i % 2: a warp can be one block ahead of another (it passed this
        // barrier) but not two (it would have to pass the next block's barrier first).
        if (threadIdx.x % kWarpSize == 0) warp_amax[i % kStageBuffers][warp] = amax;
        __syncthreads();  // every warp's maximum is in shared memory
#pragma unroll
        for (int w = 0; w < L::kWarps; ++w) amax = fmaxf(amax, warp_amax[i % kStageBuffers][w]);

        // ---- 5. quantize and store ----
        // The values are the unnormalized butterfly outputs when the Hadamard ran: their amax times
        // 1/sqrt(d) is the transformed block's amax (rounding is monotone), and the scale takes the
        // 1/sqrt(d) along. An all-zero block gets scale 0 (zeros out, descale 0); a tiny amax must not
        // make the scale infinite (0 * inf would be NaN), so it is clamped to the largest float.
        const float norm = kHadamard && transform ? inv_sqrt_head_dim<kHeadDim>() : 1.f;
        const float scale = block_scale(amax, norm, threadIdx.x == 0, t.descale + local_block);
        auto quantize = [&](const float* x, uint32_t (&packed)[2]) {  // 8 values -> 8 e4m3 bytes
#pragma unroll
            for (int word = 0; word < 2; ++word) {
                const uint32_t lo = ptx::cvt_rn_satfinite_e4m3x2_f32(x[4 * word + 0] * scale, x[4 * word + 1] * scale);
                const uint32_t hi = ptx::cvt_rn_satfinite_e4m3x2_f32(x[4 * word + 2] * scale, x[4 * word + 3] * scale);
                packed[word] = lo | (hi << 16);
            }
        };
        if (kVtOut && t.vt_keys > 0) {  // V^T (uniform per thread block: every thread is in the same block)
            uint8_t* tile = reinterpret_cast<uint8_t*>(stage) + stage_bytes<kHeadDim, kChunks, kBlocksPerCta>();
#pragma unroll
            for (int r = 0; r < kRowsPerThread; ++r) {  // every row, the zeros past seqlen too
                uint8_t* dst = tile + (row_slot + r * kRowSlots) * vt_tile_pitch<kHeadDim>() + col;
#pragma unroll
                for (int chunk = 0; chunk < kChunks; ++chunk) {
                    uint32_t packed[2];
                    quantize(v[r] + chunk * kChunkElems, packed);
                    ptx::st_shared_b32(dst + chunk * L::kChunkStride, packed[0]);
                    ptx::st_shared_b32(dst + chunk * L::kChunkStride + 4, packed[1]);
                }
            }
            // The next block's tile writes come after its amax barrier, past every read here.
            __syncthreads();
            store_vt_block<kHeadDim, L::kThreads, kBlockRows>(tile, out, t.vt_keys, first_row - row_slot);
            continue;
        }
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
            const int row = first_row + r * kRowSlots;
            if (row >= t.seqlen) continue;
            uint8_t* dst = out + row * t.out_seq_stride + col;
#pragma unroll
            for (int chunk = 0; chunk < kChunks; ++chunk) {
                uint32_t packed[2];
                quantize(v[r] + chunk * kChunkElems, packed);
                ptx::st_global_v2_b32(dst + chunk * L::kChunkStride, packed[0], packed[1]);
            }
        }
    }  // blocks of this thread block
}

// Which tensors a launch covers: all three, or Q and K (then V alone, by the V^T kernel).
enum class Tensors3 { kAll, kQK, kV };

template <int kHeadDim, int kChunks, int kBlocksPerCta, bool kIsBf16, Rope kRope, bool kHadamard, bool kVtOut = false>
cudaError_t launch_tensors(const Fp8PrepassArgs& a, cudaStream_t stream, Tensors3 which = Tensors3::kAll) {
    auto blocks_of = [&](const Fp8Tensor& t) { return tensor_blocks(t, a.batch); };
    const int64_t nq = which == Tensors3::kV ? 0 : blocks_of(a.q), nk = which == Tensors3::kV ? 0 : blocks_of(a.k),
                  nv = which == Tensors3::kQK ? 0 : blocks_of(a.v);
    const HadamardSigns signs = make_lane_signs<kHeadDim, kChunks>(a.hadamard_seed);
    constexpr int kThreads = Layout<kHeadDim, kChunks>::kThreads;
    // V^T's staging tile follows the stage buffers, only when V^T is asked for.
    constexpr int kSmem = stage_bytes<kHeadDim, kChunks, kBlocksPerCta>() + (kVtOut ? vt_tile_bytes<kHeadDim>() : 0);
    constexpr int kDefaultSmemLimit = 48 * 1024;  // more must be opted into per kernel
    constexpr int64_t kMaxBlocks = INT32_MAX;     // block indices are int; each tensor alone fits (validated)
    auto kernel = fp8_prepass_kernel<kHeadDim, kChunks, kBlocksPerCta, kIsBf16, kRope, kHadamard, kVtOut>;
    if (kSmem > kDefaultSmemLimit) {
        const cudaError_t rc = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
        if (rc != cudaSuccess) return rc;
    }
    auto launch = [&](const Fp8Tensors& tensors, int64_t q_blocks, int64_t k_blocks, int64_t total) {
        const int64_t grid = (total + kBlocksPerCta - 1) / kBlocksPerCta;
        kernel<<<static_cast<unsigned>(grid), kThreads, kSmem, stream>>>(
            tensors, static_cast<int>(q_blocks), static_cast<int>(k_blocks), static_cast<int>(total), a.rope_cos,
            a.rope_sin, signs);
        return cudaGetLastError();
    };
    if (nq + nk + nv <= kMaxBlocks) return launch(Fp8Tensors{{a.q, a.k, a.v}}, nq, nk, nq + nk + nv);
    // Too many blocks for one launch: one per tensor (q and k in the first slot, v in the third).
    cudaError_t rc = cudaSuccess;
    if (nq > 0) rc = launch(Fp8Tensors{{a.q, a.q, a.q}}, nq, 0, nq);
    if (rc == cudaSuccess && nk > 0) rc = launch(Fp8Tensors{{a.k, a.k, a.k}}, nk, 0, nk);
    if (rc == cudaSuccess && nv > 0) rc = launch(Fp8Tensors{{a.v, a.v, a.v}}, 0, 0, nv);
    return rc;
}

// V^T asked for (a.v.vt_keys > 0): with no transform, one launch of the V^T kernel in the given
// layout; else Q and K by the transform kernel, then V by the V^T quantizer in the quantizer's
// default layout (one more wave tail, and the transform kernels stay as they are).
template <int kHeadDim, int kChunks, int kBlocksPerCta, bool kIsBf16, Rope kRope, bool kHadamard>
cudaError_t launch_with_vt(const Fp8PrepassArgs& a, cudaStream_t stream) {
    if constexpr (kRope == Rope::kNone && !kHadamard) {
        return launch_tensors<kHeadDim, kChunks, kBlocksPerCta, kIsBf16, kRope, kHadamard, true>(a, stream);
    } else {
        constexpr Fp8PrepassVariant kQuant = fp8_default_variant(kHeadDim, Rope::kNone, false);
        const cudaError_t rc =
            launch_tensors<kHeadDim, kChunks, kBlocksPerCta, kIsBf16, kRope, kHadamard>(a, stream, Tensors3::kQK);
        if (rc != cudaSuccess) return rc;
        return launch_tensors<kHeadDim, kQuant.chunks, kQuant.blocks_per_cta, kIsBf16, Rope::kNone, false, true>(
            a, stream, Tensors3::kV);
    }
}

template <int kHeadDim, int kChunks, int kBlocksPerCta, bool kIsBf16, Rope kRope, bool kHadamard>
cudaError_t launch_layout(const Fp8PrepassArgs& a, cudaStream_t stream) {
    if (a.v.vt_keys > 0) return launch_with_vt<kHeadDim, kChunks, kBlocksPerCta, kIsBf16, kRope, kHadamard>(a, stream);
    return launch_tensors<kHeadDim, kChunks, kBlocksPerCta, kIsBf16, kRope, kHadamard>(a, stream);
}

// The variants that compile without spills under d = 256's 128-register cap (512 threads; the
// build treats spills as errors; fp8_variant_built lists them). The others are not instantiated:
// a call for one runs the same chunks with one block per thread block if that is built, else the
// round-2 layout (kChunks 8, one block per thread block), which fits everywhere.
template <int kHeadDim, int kChunks, int kBlocksPerCta, Rope kRope, bool kHadamard>
constexpr bool variant_built() {
    return fp8_variant_built(kHeadDim, kChunks, kBlocksPerCta, kRope, kHadamard);
}

template <int kHeadDim, int kChunks, int kBlocksPerCta, bool kIsBf16, Rope kRope, bool kHadamard>
cudaError_t launch_built(const Fp8PrepassArgs& a, cudaStream_t stream) {
    if constexpr (variant_built<kHeadDim, kChunks, kBlocksPerCta, kRope, kHadamard>()) {
        return launch_layout<kHeadDim, kChunks, kBlocksPerCta, kIsBf16, kRope, kHadamard>(a, stream);
    } else if constexpr (variant_built<kHeadDim, kChunks, 1, kRope, kHadamard>()) {
        return launch_layout<kHeadDim, kChunks, 1, kIsBf16, kRope, kHadamard>(a, stream);
    } else {
        return launch_layout<kHeadDim, 8, 1, kIsBf16, kRope, kHadamard>(a, stream);
    }
}

template <int kHeadDim, int kChunks, int kBlocksPerCta, bool kIsBf16>
cudaError_t launch_all(const Fp8PrepassArgs& a, cudaStream_t stream) {
    switch (a.rope) {
        case Rope::kNone:
            return a.hadamard ? launch_built<kHeadDim, kChunks, kBlocksPerCta, kIsBf16, Rope::kNone, true>(a, stream)
                              : launch_built<kHeadDim, kChunks, kBlocksPerCta, kIsBf16, Rope::kNone, false>(a, stream);
        case Rope::kInterleaved:
            return a.hadamard
                       ? launch_built<kHeadDim, kChunks, kBlocksPerCta, kIsBf16, Rope::kInterleaved, true>(a, stream)
                       : launch_built<kHeadDim, kChunks, kBlocksPerCta, kIsBf16, Rope::kInterleaved, false>(a, stream);
        case Rope::kHalf:
            return a.hadamard ? launch_built<kHeadDim, kChunks, kBlocksPerCta, kIsBf16, Rope::kHalf, true>(a, stream)
                              : launch_built<kHeadDim, kChunks, kBlocksPerCta, kIsBf16, Rope::kHalf, false>(a, stream);
    }
    return cudaErrorInvalidValue;
}

template <int kHeadDim, int kChunks, bool kIsBf16>
cudaError_t launch_blocks(const Fp8PrepassArgs& a, int blocks_per_cta, cudaStream_t stream) {
    return blocks_per_cta == kStagedBlocks ? launch_all<kHeadDim, kChunks, kStagedBlocks, kIsBf16>(a, stream)
                                           : launch_all<kHeadDim, kChunks, 1, kIsBf16>(a, stream);
}

template <int kHeadDim, bool kIsBf16>
cudaError_t launch_variant(const Fp8PrepassArgs& a, int chunks, int blocks_per_cta, cudaStream_t stream) {
    switch (chunks) {
        case 2: return launch_blocks<kHeadDim, 2, kIsBf16>(a, blocks_per_cta, stream);
        case 4: return launch_blocks<kHeadDim, 4, kIsBf16>(a, blocks_per_cta, stream);
        case 8: return launch_blocks<kHeadDim, 8, kIsBf16>(a, blocks_per_cta, stream);
    }
    return cudaErrorInvalidValue;
}

// The tensor-core Hadamard: Q and K by fp8_hadamard_mma_kernel, then V by the plain quantizer in
// its default layout (V^T when asked for).
template <int kHeadDim, bool kIsBf16>
cudaError_t launch_mma(const Fp8PrepassArgs& a, cudaStream_t stream) {
    const cudaError_t rc = launch_hadamard_mma_qk<kHeadDim, kIsBf16>(a, stream);
    if (rc != cudaSuccess) return rc;
    constexpr Fp8PrepassVariant kQuant = fp8_default_variant(kHeadDim, Rope::kNone, false);
    return a.v.vt_keys > 0
               ? launch_tensors<kHeadDim, kQuant.chunks, kQuant.blocks_per_cta, kIsBf16, Rope::kNone, false, true>(
                     a, stream, Tensors3::kV)
               : launch_tensors<kHeadDim, kQuant.chunks, kQuant.blocks_per_cta, kIsBf16, Rope::kNone, false>(
                     a, stream, Tensors3::kV);
}

}  // namespace detail

// Quantizes q, k (RoPE and Hadamard as the args say) and v (block quantizer only) on `stream`:
// one launch for the three tensors, in the layout a.variant names (0s: the defaults). The args are
// validated (the C API does it), the variant here.
template <int kHeadDim>
cudaError_t launch_fp8_prepass_head_dim(const Fp8PrepassArgs& a, cudaStream_t stream, std::string* error) {
    const Fp8PrepassVariant fallback = fp8_default_variant(kHeadDim, a.rope, a.hadamard);
    const int build_blocks = HATTN_FP8_BLOCKS_PER_CTA != 0 ? HATTN_FP8_BLOCKS_PER_CTA : fallback.blocks_per_cta;
    int chunks = a.variant.chunks != 0 ? a.variant.chunks : fallback.chunks;
    int blocks = a.variant.blocks_per_cta != 0 ? a.variant.blocks_per_cta
                 : chunks == kFp8MmaChunks        ? 1  // its walk is grid-stride
                                                  : build_blocks;
    if (chunks == kFp8MmaChunks) {
        if (blocks != 1) {
            if (error != nullptr) *error = "fp8 pre-pass: the tensor-core variant takes 1 block per CTA (16x1)";
            return cudaErrorInvalidValue;
        }
        if (a.hadamard && a.rope == Rope::kNone) {
            const bool bf16 = a.dtype == fwd::Dtype::kBf16;
            const cudaError_t rc = bf16 ? detail::launch_mma<kHeadDim, true>(a, stream)
                                        : detail::launch_mma<kHeadDim, false>(a, stream);
            if (rc != cudaSuccess && error != nullptr) *error = "fp8 pre-pass launch failed";
            return rc;
        }
        chunks = fallback.chunks;  // no RoPE in the tensor-core kernel, nothing for it to do without the Hadamard
        blocks = build_blocks;
    }
    if ((chunks != 2 && chunks != 4 && chunks != 8) || (blocks != 1 && blocks != detail::kStagedBlocks)) {
        if (error != nullptr) {
            *error = "fp8 pre-pass: unknown variant (chunks 2, 4 or 8 with 1 or 4 blocks per CTA; or 16x1)";
        }
        return cudaErrorInvalidValue;
    }
    const cudaError_t rc = a.dtype == fwd::Dtype::kBf16 ? detail::launch_variant<kHeadDim, true>(a, chunks, blocks, stream)
                                                         : detail::launch_variant<kHeadDim, false>(a, chunks, blocks, stream);
    if (rc != cudaSuccess && error != nullptr) *error = "fp8 pre-pass launch failed";
    return rc;
}

}  // namespace hattn::fp8
