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
//                (With the Hadamard the default is the tensor-core kernel further down,
//                fp8_hadamard_mma_kernel: 4 column bits by mma.sync, the rest in registers,
//                RoPE before it; these kernels run V, RoPE alone, and the A/B variants.)
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
#include "kernels/sm90/launch_setup.h"
#include "kernels/sm90/vt_e4m3.cuh"  // V^T for the FP8 forward
#include "ptx/cluster.cuh"
#include "ptx/convert.cuh"
#include "ptx/global.cuh"
#include "ptx/griddep.cuh"
#include "ptx/fence.cuh"
#include "ptx/ldst.cuh"
#include "ptx/mbarrier.cuh"
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

// RoPE's tables (fp32 cos and sin, head_dim / 2 per position) are read by every head of every
// batch of Q and K while the tensors stream past them once. At d256 a 16k-position call's tables
// are 16 MB, and without a hint many of their lines fell out of L2 between two readers (ncu,
// bench/RESULTS.md run 52d: 863 MB of DRAM traffic for 805 MB of tensors at 64k tokens). So their
// loads ask L2 to evict them last, which also keeps them there from one call to the next (a model
// applies the same tables in every layer): +1 to +5 points of the copy bandwidth on every RoPE
// mode in back-to-back calls (most at d128, 16k tokens), Hadamard alone unchanged (run 52e, H100;
// one cold call reads 3% fewer DRAM bytes in the same time). 0 turns the hint off.
#ifndef HATTN_FP8_PREPASS_TABLE_EVICT_LAST
#define HATTN_FP8_PREPASS_TABLE_EVICT_LAST 1
#endif
struct TableLoad {  // a table's 16-byte loads, under that policy (one createpolicy per thread)
    uint64_t policy = HATTN_FP8_PREPASS_TABLE_EVICT_LAST != 0 ? ptx::createpolicy_fractional_l2_evict_last() : 0;
    __device__ __forceinline__ float4 operator()(const float* p) const {
        if constexpr (HATTN_FP8_PREPASS_TABLE_EVICT_LAST != 0) return ptx::ld_global_nc_l2_hint_v4_f32(p, policy);
        else return ptx::ld_global_nc_v4_f32(p);
    }
};

// (a, b) -> (a cos - b sin, a sin + b cos)
__device__ __forceinline__ void rotate(float& a, float& b, float c, float s) {
    const float a0 = a;
    a = fmaf(a0, c, -b * s);
    b = fmaf(a0, s, b * c);
}

// v: the values of one row held by one thread, v[8k..8k+7] = columns col + k d / kChunks .. +7.
template <int kHeadDim, int kChunks, Rope kRope>
__device__ __forceinline__ void apply_rope(float* v, const float* __restrict__ cos_row,
                                           const float* __restrict__ sin_row, int col, const TableLoad& load) {
    using L = Layout<kHeadDim, kChunks>;
    constexpr int kThreadRowElems = L::kThreadRowElems;
    if constexpr (kRope == Rope::kInterleaved) {
        // Pair i of columns (2i, 2i+1): chunk 0 holds pairs col/2 .. col/2+3, chunk 1 pairs
        // d/4 + col/2 .. +3.
#pragma unroll
        for (int chunk = 0; chunk < kChunks; ++chunk) {
            const int pair0 = (col + chunk * L::kChunkStride) / 2;
            const float4 c = load(cos_row + pair0);
            const float4 s = load(sin_row + pair0);
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
            const float4 c = load(cos_row + column);
            const float4 s = load(sin_row + column);
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
using sm90::launch_with_dynamic_smem;
using sm90::max_active_ctas_per_sm;
using sm90::store_vt_block;
using sm90::vt_tile_pitch;
template <int kHeadDim>
__host__ __device__ constexpr int vt_tile_bytes() {
    return sm90::vt_tile_bytes<kHeadDim, kBlockRows>();
}

struct Fp8Tensors {
    Fp8Tensor t[3];  // q, k, v
};

// 128-row blocks of one (batch, head) of a tensor (the last one partial).
HATTN_HOST_DEVICE inline int seq_blocks(const Fp8Tensor& t) { return (t.seqlen + kBlockRows - 1) / kBlockRows; }

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
    const int blocks = seq_blocks(t);
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

// ---- The tensor-core Hadamard (variant kFp8MmaChunks): Q and K, with or without RoPE ------------
// The butterfly above spends ~10 instructions per element (log2(d) FADD levels, the cross-lane ones
// with a SHFL each) and makes the Hadamard kernels issue-bound. Sylvester's H_d is a Kronecker
// product of d's index bits, H[c][o] = (-1)^popcount(c & o), so any 4 of the log2(d) column bits can
// go to one 16 x 16 matrix and the rest to butterfly levels:
//   1. the 4 "mma bits" {0, 2, 3, 4} of every 32-column span by mma.sync m16n8k16 on the 16-bit
//      inputs as they are (+-1 products are exact, the sums fp32), D's signs folded into B;
//   2. the other bits (bit 1, and the span index, bits >= 5) as FADD levels between a thread's own
//      registers: every thread holds the same columns of every span, so no shuffles.
// SASS of the d128 loop: about 14 instructions per element with RoPE, 10 without. (D's signs are
// hashed in the kernel, once per thread block for B and the sign ratios: the walk has few blocks.)
//
// Layout (MmaLayout): a warp owns 8 kRowsPerLane rows of the block; lane group g (lane / 4) rows
// g + 8r of them, r < kRowsPerLane. Lane (g, q) reads with one 16-byte shared-memory load the 8 contiguous columns
// 32m + 8q .. +7 of span m of one row: words w0..w3 (column pairs), and these four registers are the
// A operand as they are: the mma's rows g and g + 8 are the two halves of the same input row
// (a0 = w0, a2 = w2: columns 8q + {0, 1, 4, 5}; a1 = w1, a3 = w3: 8q + {2, 3, 6, 7}). So mma index
// k = e + 2q + 8h is column 8q + 4h + e of the first half and column + 2 of the second: the mma
// sums over column bits {0, 2, 3, 4}, and bit 1 (the mma row half) is a FADD level between a
// lane's own accumulators. B is shared by both halves, so D's sign is B's for the first half; the
// second half's words get the ratio of the two signs (an XOR of sign bits, sign_ratio_mask).
// B's columns are ordered the same way (mma_out_col), so after the FADD levels a lane holds output
// columns 32m + 8q .. +7 of its rows: 8 contiguous e4m3 bytes, one 8-byte store straight to global
// memory (4 lanes fill a row's 32-byte sector).
//   Why this order and not ldmatrix's: RoPE pairs columns, and here each pair sits in one thread --
// interleaved pairs (2i, 2i + 1) are one word, half-split pairs (i, i + d/2) the same word of spans
// m and m + d/64 -- and its cos/sin are 4 contiguous floats per word quad (one 16-byte load each).
//   RoPE rotates in fp32 and rounds the result once to bf16 for the mma (bf16 also for fp16 inputs:
// a rotation can overflow fp16's range, never bf16's). That rounding (2^-9 relative) is 1/32 of the
// e4m3 step it feeds; the float64 reference models it (testing/fp8_reference.h: kRotateBf16).
//   Walk: each thread block takes a contiguous range of Q's then K's blocks, ordered (batch, block,
// head) with heads fastest, so one thread block quantizes the same 128 positions of consecutive
// heads: RoPE's table rows are then read from L1 again instead of L2, and the walk advances by
// increments (no division per block). A block lands in shared memory by cp.async (each warp copies
// its own rows: no barrier but the amax's), the next one while this one is computed. Rows are stored
// with 16-byte chunk index XOR 4 (row & 1), so a quarter-warp's 16-byte loads (rows 2p and 2p + 1,
// 4 chunks each) hit all 32 banks once.
constexpr int kMmaGroupRows = 8;   // rows of one mma: 8 lane groups, each one row's two halves
constexpr int kMmaSpanCols = 32;   // columns of one span: 8 per lane quad member
constexpr int kMmaTilesN = 2;      // n8 tiles per mma (16 outputs)
constexpr int kMmaStages = 2;
constexpr int kChunkBytes = 16;
constexpr int kRowParitySwizzle = 4;  // chunk index XOR 4 (row & 1): rows 2p, 2p + 1 in other bank halves
constexpr uint16_t kBf16One = 0x3F80u, kF16One = 0x3C00u, kHalfSign = 0x8000u;

// Rows per lane: 64 accumulators per thread at every head dim, 4 rows (g + 8r) at d 64 (a warp owns
// 32 rows, 128 threads), 2 at d 128 (16 rows, 256 threads), 1 at d 256 (8 rows, 512 threads). Fewer
// rows would spread a block's fixed costs (staging addresses, the amax barrier, the descale) over
// fewer elements; more would cap the resident warps (at d 256 two rows, 128 accumulators, leave one
// thread block of 8 warps per SM, too few to hide a warp's chain of loads, mma, levels and stores).
// kCtasPerBlock = 2 (an A/B variant, "16x1x2") splits each 128-row block over the two thread blocks
// of a cluster, 64 rows each, which exchange their warps' amax through distributed shared memory:
// at d 256 the block-wide amax barrier then spans 8 warps of each of two SMs, and an SM holds two
// such thread blocks of different blocks, so one computes while the other waits (d 128's shape:
// two 8-warp thread blocks per SM), instead of one 16-warp thread block that stops at every barrier.
template <int kHeadDim, int kCtasPerBlock = 1>
struct MmaLayout {
    static constexpr int kRowsPerLane = kHeadDim == 64 ? 4 : kHeadDim == 128 ? 2 : 1;
    static constexpr int kWarpRows = kMmaGroupRows * kRowsPerLane;
    static constexpr int kCtaRows = kBlockRows / kCtasPerBlock;  // rows of a block per thread block
    static constexpr int kWarps = kCtaRows / kWarpRows;
    static constexpr int kBlockWarps = kWarps * kCtasPerBlock;    // warps holding one block
    static constexpr int kThreads = kWarps * kWarpSize;
    static constexpr int kSpans = kHeadDim / kMmaSpanCols;
    static constexpr int kRowBytes = kHeadDim * 2;  // a 16-bit input row
    static constexpr int kRowChunks = kRowBytes / kChunkBytes;
    static constexpr int kStageBytes = kCtaRows * kRowBytes;
    static constexpr int kBTableBytes = kSpans * kWarpSize * kChunkBytes;  // one B per span and lane
    static constexpr int kRatioBytes = kSpans * kWarpSize * 8;             // two sign-ratio words per span and lane
    static constexpr int kSmemBytes = kMmaStages * kStageBytes + kBTableBytes + kRatioBytes;
    static_assert(kRowChunks >= 2 * kRowParitySwizzle, "the swizzle flips chunk bit 2 inside the row");
    static_assert(kCtasPerBlock == 1 || kCtasPerBlock == 2, "a block on one thread block or on a pair");
    static_assert(kCtaRows % kWarpRows == 0, "whole warps per thread block");
};

// Column (inside a span, first half: bit 1 clear) of mma index k: k = e + 2q + 8h -> 8q + 4h + e.
HATTN_HOST_DEVICE constexpr int mma_in_col(int k) { return 8 * ((k >> 1) & 3) + 4 * (k >> 3) + (k & 1); }
// Output column (inside a span, bit 1 set later by its FADD level) of accumulator column n of n8
// tile nb: n = 2q + e -> 8q + 4 nb + e.
HATTN_HOST_DEVICE constexpr int mma_out_col(int nb, int n) { return 8 * (n >> 1) + 4 * nb + (n & 1); }
constexpr int kMmaBitsMask = 0x1D;  // column bits {0, 2, 3, 4}: the mma's share of H
constexpr int kMmaHalfBit = 2;      // column bit 1: the mma row half (a1, a3: columns + 2)

// B's entry (k, n) of span m, tile nb: D's sign of the first half's input column times H's entry
// over the mma bits, as a 16-bit +-1.
template <bool kIsBf16>
__device__ __forceinline__ uint32_t signed_hadamard_b(uint64_t seed, int m, int nb, int k, int n) {
    const int in = mma_in_col(k), out = mma_out_col(nb, n);
    const uint32_t negative =
        (__popc(in & out & kMmaBitsMask) & 1) ^ hadamard_sign_bit(seed, m * kMmaSpanCols + in);
    return (kIsBf16 ? kBf16One : kF16One) | (negative ? kHalfSign : 0u);
}

// The sign flips of word `word` (1 or 3: the second half) of lane quad member q in span m: where
// D's sign of its column differs from the first half's column (2 lower), which B carries.
__device__ __forceinline__ uint32_t sign_ratio_mask(uint64_t seed, int m, int q, int word) {
    uint32_t mask = 0;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int col = m * kMmaSpanCols + 8 * q + 2 * word + e;
        if (hadamard_sign_bit(seed, col) != hadamard_sign_bit(seed, col - kMmaHalfBit)) mask |= kHalfSign << (16 * e);
    }
    return mask;
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a stage buffer.
template <int kHeadDim>
HATTN_HOST_DEVICE constexpr int mma_smem_offset(int row, int chunk) {
    return row * MmaLayout<kHeadDim>::kRowBytes + ((chunk ^ (kRowParitySwizzle * (row & 1))) * kChunkBytes);
}

// Where the walk is: block `blk` of head `head` of batch `batch` of tensor `which` (0 q, 1 k).
// Blocks go heads fastest, then blocks, then batches, Q's before K's.
struct MmaCursor {
    int which, batch, blk, head;

    __device__ __forceinline__ void advance(const Fp8Tensors& tensors, int batches) {
        const Fp8Tensor& t = tensors.t[which];
        if (++head < t.heads) return;
        head = 0;
        if (++blk < seq_blocks(t)) return;
        blk = 0;
        if (++batch < batches) return;
        batch = 0;
        ++which;
    }
};

// The cursor at block g of the walk (once per thread block: divisions).
__device__ __forceinline__ MmaCursor mma_cursor_at(const Fp8Tensors& tensors, int64_t g, int64_t q_blocks) {
    MmaCursor c;
    c.which = g < q_blocks ? 0 : 1;
    if (c.which == 1) g -= q_blocks;
    const Fp8Tensor& t = tensors.t[c.which];
    const int64_t blocks = seq_blocks(t);
    c.head = static_cast<int>(g % t.heads);
    g /= t.heads;
    c.blk = static_cast<int>(g % blocks);
    c.batch = static_cast<int>(g / blocks);
    return c;
}

// This warp's rows of the cursor's block into stage buffer `buffer` (rows past seqlen: zeros).
// Lane l copies chunk l % kRowChunks of rows l / kRowChunks + i * kRowStep. The thread block holds
// rows cta_row0 .. cta_row0 + kCtaRows - 1 of the block (0 unless a pair shares it).
template <int kHeadDim, int kCtasPerBlock>
__device__ __forceinline__ void mma_stage_rows(const Fp8Tensors& tensors, const MmaCursor& at, uint8_t* buffer,
                                               int cta_row0, int warp, int lane) {
    using L = MmaLayout<kHeadDim, kCtasPerBlock>;
    constexpr int kRowStep = kWarpSize / L::kRowChunks;  // rows per step: 4, 2, 1
    const Fp8Tensor& t = tensors.t[at.which];
    const int row0 = lane / L::kRowChunks, chunk = lane % L::kRowChunks;
    const int warp_row = at.blk * kBlockRows + cta_row0 + warp * L::kWarpRows;
    const int valid_rows = t.seqlen - warp_row;  // rows of the warp that exist
    const uint16_t* src = static_cast<const uint16_t*>(t.in) + at.batch * t.in_batch_stride +
                          at.head * t.in_head_stride + static_cast<int64_t>(warp_row + row0) * t.in_seq_stride +
                          chunk * kChunkElems;
    const int64_t step = kRowStep * t.in_seq_stride;
    if (valid_rows >= L::kWarpRows) {  // every row exists (all but a tensor's last block): no per-row tests
#pragma unroll
        for (int i = 0; i < L::kWarpRows / kRowStep; ++i, src += step) {
            ptx::cp_async_cg_16(buffer + mma_smem_offset<kHeadDim>(warp * L::kWarpRows + row0 + i * kRowStep, chunk),
                                src);
        }
    } else {
#pragma unroll
        for (int i = 0; i < L::kWarpRows / kRowStep; ++i, src += step) {
            const int row = row0 + i * kRowStep;
            uint8_t* d = buffer + mma_smem_offset<kHeadDim>(warp * L::kWarpRows + row, chunk);
            if (row < valid_rows) {
                ptx::cp_async_cg_16(d, src);
            } else {
                ptx::st_shared_v4_b32(d, make_uint4(0u, 0u, 0u, 0u));
            }
        }
    }
    ptx::cp_async_commit_group();
}

// 128-row blocks of one tensor over every (batch, head): its descale count, and its share of a launch.
inline int64_t tensor_blocks(const Fp8Tensor& t, int batch) {
    return static_cast<int64_t>(seq_blocks(t)) * t.heads * batch;
}

// The block's scale from its amax (of the unnormalized butterfly outputs when `norm` < 1), and its
// descale stored by one thread: written once, shared by both kernels so that they quantize alike.
__device__ __forceinline__ float block_scale(float amax, float norm, bool write_descale, float* descale) {
    amax *= norm;
    if (write_descale) ptx::st_global_f32(descale, amax / kE4m3Max);
    return amax > 0.f ? fminf(kE4m3Max / amax, FLT_MAX) * norm : 0.f;
}

// One word (a column pair of one row) rotated by RoPE and rounded to bf16x2: interleaved pairs are
// the word's two halves, half-split pairs the same half of two words (lo: column i, hi: i + d/2).
template <bool kIsBf16>
__device__ __forceinline__ uint32_t rope_word_interleaved(uint32_t w, float c, float s) {
    float a, b;
    ptx::unpack_x2_f32<kIsBf16>(w, a, b);
    rotate(a, b, c, s);
    return ptx::cvt_rn_bf16x2_f32(a, b);
}
template <bool kIsBf16>
__device__ __forceinline__ void rope_words_half(uint32_t& lo, uint32_t& hi, float2 c, float2 s) {
    float a0, a1, b0, b1;
    ptx::unpack_x2_f32<kIsBf16>(lo, a0, a1);
    ptx::unpack_x2_f32<kIsBf16>(hi, b0, b1);
    rotate(a0, b0, c.x, s.x);
    rotate(a1, b1, c.y, s.y);
    lo = ptx::cvt_rn_bf16x2_f32(a0, a1);
    hi = ptx::cvt_rn_bf16x2_f32(b0, b1);
}

// Thread blocks per SM the registers must allow: 8 warps alone cannot hide the latencies of a
// warp's chain of loads, mma, butterfly levels and stores, so 16 warps at <= 128 registers (d 64:
// 4 x 4 warps, d 128: 2 x 8, d 256: 1 x 16; ptxas fits each without spills).
template <int kHeadDim>
constexpr int mma_min_ctas_per_sm() { return kHeadDim == 64 ? 4 : kHeadDim == 128 ? 2 : 1; }

// kCtasPerBlock (MmaLayout): 2 launches it in clusters of two thread blocks (cudaLaunchKernelEx,
// launch_hadamard_mma_qk_rope), both of which walk the same blocks, 64 rows each.
template <int kHeadDim, bool kIsBf16, Rope kRope, int kCtasPerBlock = 1>
__global__ void __launch_bounds__(MmaLayout<kHeadDim, kCtasPerBlock>::kThreads,
                                  mma_min_ctas_per_sm<kHeadDim>() * kCtasPerBlock)
    fp8_hadamard_mma_kernel(const __grid_constant__ Fp8Tensors tensors, const int64_t q_blocks,
                            const int64_t total_blocks, const int batches, const uint64_t seed,
                            const float* __restrict__ rope_cos, const float* __restrict__ rope_sin) {
    using L = MmaLayout<kHeadDim, kCtasPerBlock>;
    constexpr bool kPair = kCtasPerBlock > 1;
    constexpr int kSpans = L::kSpans;
    constexpr int kHalfSpans = kSpans / 2;  // RoPE half-split: span m pairs with m + kHalfSpans
    constexpr int kTableCols = kHeadDim / 2;
    // The mma's type: the input's, or bf16 when RoPE rounded the rotated values to it.
    constexpr bool kMmaBf16 = kIsBf16 || kRope != Rope::kNone;
    // [kMmaStages][block], then B and the sign ratios per span and lane (tables in shared memory, not
    // registers: ptxas would recompute their hashes in the loop rather than hold them).
    extern __shared__ __align__(128) uint8_t mma_smem[];
    constexpr int kRowsPerLane = L::kRowsPerLane;
    // Every warp's amax of the block, this thread block's and (kPair) its partner's, by block parity.
    __shared__ float warp_amax[kStageBuffers][L::kBlockWarps];
    // kPair, by block parity: full once this thread block's warps have written their amax (one
    // arrival each) and the partner's have landed (their st.async count 4 bytes each).
    __shared__ uint64_t amax_full[kStageBuffers];
    uint4* b_table = reinterpret_cast<uint4*>(mma_smem + kMmaStages * L::kStageBytes);
    uint2* ratio_table = reinterpret_cast<uint2*>(mma_smem + kMmaStages * L::kStageBytes + L::kBTableBytes);
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize, lane = static_cast<int>(threadIdx.x) % kWarpSize;
    const int g = lane / 4, q = lane % 4;  // the fragment coordinates (ptx/mma.cuh)
    // A pair: this thread block's rank in its cluster, its partner's, and its rows of each block.
    const uint32_t rank = kPair ? ptx::cluster_ctarank() : 0u;
    const uint32_t partner = rank ^ 1u;
    const int cta_row0 = static_cast<int>(rank) * L::kCtaRows;
    if (kPair && threadIdx.x == 0) {
        for (int b = 0; b < kStageBuffers; ++b) ptx::mbarrier_init(&amax_full[b], L::kWarps);
        ptx::fence_mbarrier_init();  // visible to the partner's st.async (cluster scope)
    }

    // Fp8PrepassVariant::v_overlap: V's launch may be scheduled once every thread block of this
    // grid has started (a no-op for a plain launch behind it). Its thread blocks still find no room
    // until ours retire: this walk fills every SM's registers.
    ptx::griddepcontrol_launch_dependents();

    // This thread block's (or pair's: a 1-D grid's clusters are consecutive) contiguous range of the walk.
    const int64_t unit = blockIdx.x / kCtasPerBlock, units = gridDim.x / kCtasPerBlock;
    const int64_t first = total_blocks * unit / units;
    const int64_t count = total_blocks * (unit + 1) / units - first;
    MmaCursor at = mma_cursor_at(tensors, first, q_blocks);
    if (count > 0) mma_stage_rows<kHeadDim, kCtasPerBlock>(tensors, at, mma_smem, cta_row0, warp, lane);
    // B = D H over the mma bits, per span m and lane: {tile 0 b0, b1, tile 1 b0, b1}.
    for (int e = static_cast<int>(threadIdx.x); e < kSpans * kWarpSize; e += L::kThreads) {
        const int m = e / kWarpSize, bg = (e % kWarpSize) / 4, bq = e % 4;
        uint32_t w[4];
#pragma unroll
        for (int nb = 0; nb < kMmaTilesN; ++nb) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {  // b0: k = 2q, 2q + 1; b1: k + 8
                const int k = 2 * bq + 8 * half;
                w[2 * nb + half] = signed_hadamard_b<kMmaBf16>(seed, m, nb, k, bg) |
                                   (signed_hadamard_b<kMmaBf16>(seed, m, nb, k + 1, bg) << 16);
            }
        }
        b_table[e] = make_uint4(w[0], w[1], w[2], w[3]);
        ratio_table[e] = make_uint2(sign_ratio_mask(seed, m, bq, 1), sign_ratio_mask(seed, m, bq, 3));
    }
    // B is in place (kPair: and both thread blocks have started, their barriers initialized, so each
    // may store into the other; the one cluster barrier with release / acquire semantics).
    if constexpr (kPair) {
        ptx::barrier_cluster_arrive_release();
        ptx::barrier_cluster_wait_acquire();
    } else {
        __syncthreads();
    }

    constexpr float kNorm = inv_sqrt_head_dim<kHeadDim>();
    // Lane (g, q)'s 16-byte chunk of span m in row r is chunk 4m + q XOR 4 (r & 1) (rows g + 8r
    // alike): span bit 0 flips on odd rows, so span m sits one span up (m even) or down (m odd).
    constexpr int kSpanBytes = kMmaSpanCols * 2;
    constexpr int kRowsApart = kMmaGroupRows * L::kRowBytes;  // row g + 8r to g + 8 (r + 1)
    const int lane_row = warp * L::kWarpRows + g;
    const int odd_row_shift = (g & 1) != 0 ? kSpanBytes : 0;
    MmaCursor next = at;
    const TableLoad load_table;
#pragma unroll 1
    for (int64_t i = 0; i < count; ++i) {
        const Fp8Tensor& tensor = tensors.t[at.which];
        const uint8_t* buffer = mma_smem + (i % kMmaStages) * L::kStageBytes;
        const uint8_t* a_base = buffer + lane_row * L::kRowBytes + q * kChunkBytes;
        next.advance(tensors, batches);
        if (i + 1 < count) {
            mma_stage_rows<kHeadDim, kCtasPerBlock>(tensors, next, mma_smem + ((i + 1) % kMmaStages) * L::kStageBytes,
                                                    cta_row0, warp, lane);
        } else {
            ptx::cp_async_commit_group();  // an empty group: the wait below counts the same
        }
        ptx::cp_async_wait_group<1>();  // this block's copies (the next block's may be in flight)
        __syncwarp();                   // ... and the other lanes' copies of the warp's rows

        const int row0 = at.blk * kBlockRows + cta_row0 + lane_row;  // rows row0 + 8r of the tensor
        float acc[kSpans][kRowsPerLane][kMmaTilesN][4];
        // Span m's words of rows g + 8r: x[r].
        auto load_span = [&](int m, uint4 (&x)[kRowsPerLane]) {
            const uint8_t* a = a_base + m * kSpanBytes + ((m & 1) != 0 ? -odd_row_shift : odd_row_shift);
#pragma unroll
            for (int r = 0; r < kRowsPerLane; ++r) x[r] = ptx::ld_shared_v4_b32(a + r * kRowsApart);
        };
        // Span m of the lane's rows on the tensor cores, two n8 tiles each (D's sign ratios first).
        auto mma_span = [&](int m, const uint4 (&x)[kRowsPerLane]) {
            const uint4 b = ptx::ld_shared_v4_b32(b_table + m * kWarpSize + lane);
            const uint2 ratio = ptx::ld_shared_v2_b32(ratio_table + m * kWarpSize + lane);
#pragma unroll
            for (int r = 0; r < kRowsPerLane; ++r) {
                const uint32_t a[4] = {x[r].x, x[r].y ^ ratio.x, x[r].z, x[r].w ^ ratio.y};
                constexpr float kZero[4] = {0.f, 0.f, 0.f, 0.f};
                if constexpr (kMmaBf16) {
                    ptx::mma_m16n8k16_f32_bf16(acc[m][r][0], a, b.x, b.y, kZero);
                    ptx::mma_m16n8k16_f32_bf16(acc[m][r][1], a, b.z, b.w, kZero);
                } else {
                    ptx::mma_m16n8k16_f32_f16(acc[m][r][0], a, b.x, b.y, kZero);
                    ptx::mma_m16n8k16_f32_f16(acc[m][r][1], a, b.z, b.w, kZero);
                }
            }
        };
        // ---- RoPE, then the mma bits: D H by the tensor cores ----
        // This lane's first table entry of each row (a pointer each, so that the spans are
        // immediate offsets): interleaved pair 4q of span 0, half-split column 8q. Rows past seqlen
        // are zeros: any table row rotates them to zeros, so clamp to a valid one.
        const float* cos_row[kRowsPerLane];
        const float* sin_row[kRowsPerLane];
        if constexpr (kRope != Rope::kNone) {
            constexpr int kLaneEntries = kRope == Rope::kInterleaved ? 4 : 8;
#pragma unroll
            for (int r = 0; r < kRowsPerLane; ++r) {
                const int row = min(row0 + kMmaGroupRows * r, tensor.seqlen - 1);
                const int64_t entry = static_cast<int64_t>(row + tensor.rope_offset) * kTableCols + kLaneEntries * q;
                cos_row[r] = rope_cos + entry;
                sin_row[r] = rope_sin + entry;
            }
        }
        if constexpr (kRope == Rope::kHalf) {
            // Column 32m + 8q + t (t < 8, m < kHalfSpans) pairs with the same of span m + kHalfSpans.
#pragma unroll
            for (int m = 0; m < kHalfSpans; ++m) {
                uint4 lo[kRowsPerLane], hi[kRowsPerLane];
                load_span(m, lo);
                load_span(m + kHalfSpans, hi);
#pragma unroll
                for (int r = 0; r < kRowsPerLane; ++r) {
                    const float* cp = cos_row[r] + kMmaSpanCols * m;
                    const float* sp = sin_row[r] + kMmaSpanCols * m;
                    const float4 c0 = load_table(cp), c1 = load_table(cp + 4);
                    const float4 s0 = load_table(sp), s1 = load_table(sp + 4);
                    rope_words_half<kIsBf16>(lo[r].x, hi[r].x, make_float2(c0.x, c0.y), make_float2(s0.x, s0.y));
                    rope_words_half<kIsBf16>(lo[r].y, hi[r].y, make_float2(c0.z, c0.w), make_float2(s0.z, s0.w));
                    rope_words_half<kIsBf16>(lo[r].z, hi[r].z, make_float2(c1.x, c1.y), make_float2(s1.x, s1.y));
                    rope_words_half<kIsBf16>(lo[r].w, hi[r].w, make_float2(c1.z, c1.w), make_float2(s1.z, s1.w));
                }
                mma_span(m, lo);
                mma_span(m + kHalfSpans, hi);
            }
        } else {
#pragma unroll
            for (int m = 0; m < kSpans; ++m) {
                uint4 x[kRowsPerLane];
                load_span(m, x);
                if constexpr (kRope == Rope::kInterleaved) {
                    // Word j of span m is pair 16m + 4q + j.
#pragma unroll
                    for (int r = 0; r < kRowsPerLane; ++r) {
                        const float4 c = load_table(cos_row[r] + kMmaSpanCols / 2 * m);
                        const float4 s = load_table(sin_row[r] + kMmaSpanCols / 2 * m);
                        x[r].x = rope_word_interleaved<kIsBf16>(x[r].x, c.x, s.x);
                        x[r].y = rope_word_interleaved<kIsBf16>(x[r].y, c.y, s.y);
                        x[r].z = rope_word_interleaved<kIsBf16>(x[r].z, c.z, s.z);
                        x[r].w = rope_word_interleaved<kIsBf16>(x[r].w, c.w, s.w);
                    }
                }
                mma_span(m, x);
            }
        }
        // ---- the other bits in registers: column bit 1 (the mma row half: accumulators 0, 1 with
        // 2, 3), then the span bits (m) ----
#pragma unroll
        for (int m = 0; m < kSpans; ++m)
#pragma unroll
            for (int r = 0; r < kRowsPerLane; ++r)
#pragma unroll
                for (int nb = 0; nb < kMmaTilesN; ++nb)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        float& x = acc[m][r][nb][e];
                        float& y = acc[m][r][nb][e + 2];
                        const float sum = x + y, diff = x - y;
                        x = sum;
                        y = diff;
                    }
        // All span levels but the last: its sums and differences are formed in the quantization,
        // x * scale +- y * scale (two FFMAs and a FMUL for two outputs instead of two FADDs and two
        // FMULs), and its amax needs none of them: max(|x + y|, |x - y|) = |x| + |y|.
        constexpr int kLastStride = kSpans / 2;
#pragma unroll
        for (int stride = 1; stride < kLastStride; stride *= 2) {
#pragma unroll
            for (int m = 0; m < kSpans; ++m) {
                if ((m & stride) != 0) continue;
#pragma unroll
                for (int v = 0; v < kRowsPerLane * kMmaTilesN * 4; ++v) {
                    float& x = acc[m][v / 8][(v / 4) % 2][v % 4];
                    float& y = acc[m + stride][v / 8][(v / 4) % 2][v % 4];
                    const float sum = x + y, diff = x - y;
                    x = sum;
                    y = diff;
                }
            }
        }

        // ---- amax of the block ----
        float amax = 0.f;
#pragma unroll
        for (int m = 0; m < kLastStride; ++m)
#pragma unroll
            for (int v = 0; v < kRowsPerLane * kMmaTilesN * 4; ++v) {
                const float x = acc[m][v / 8][(v / 4) % 2][v % 4], y = acc[m + kLastStride][v / 8][(v / 4) % 2][v % 4];
                amax = fmaxf(amax, fabsf(x) + fabsf(y));
            }
#pragma unroll
        for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
            amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, offset));
        }
        // By parity, as in fp8_prepass_kernel: a slot is written again only after the barrier that
        // every reader of its last value has passed. kPair: the partner's warps store their amax
        // into our slots (st.async, counted on our amax_full), ours into theirs; one mbarrier
        // phase per block and parity. A partner is at most one block ahead (it needs our amax to
        // finish a block), so it writes a slot of parity p again only once we have read it.
        const int parity = static_cast<int>(i % kStageBuffers);
        float* amax_slot = &warp_amax[parity][static_cast<int>(rank) * L::kWarps + warp];
        if constexpr (kPair) {
            if (lane == 0) {
                *amax_slot = amax;
                ptx::st_async_b32(ptx::mapa_shared_cluster(ptx::smem_u32(amax_slot), partner), __float_as_uint(amax),
                                  ptx::mapa_shared_cluster(ptx::smem_u32(&amax_full[parity]), partner));
                // This warp's arrival, and the 4 bytes of one partner warp's store (kWarps in all).
                ptx::mbarrier_arrive_expect_tx(&amax_full[parity], sizeof(float));
            }
            // The CTA-scope wait suffices for the partner's bytes: they land in this SM's shared
            // memory before their transaction count completes the phase (as a TMA load's do), and
            // shared memory is not cached; a cluster-scope acquire would also invalidate the L1,
            // which holds RoPE's table rows for the next head.
            ptx::mbarrier_wait(&amax_full[parity], static_cast<uint32_t>((i / kStageBuffers) & 1));
        } else {
            if (lane == 0) *amax_slot = amax;
            __syncthreads();
        }
#pragma unroll
        for (int v = 0; v < L::kBlockWarps; ++v) amax = fmaxf(amax, warp_amax[parity][v]);
        const int descale_index = (at.batch * tensor.heads + at.head) * seq_blocks(tensor) + at.blk;
        const float scale = block_scale(amax, kNorm, threadIdx.x == 0 && rank == 0, tensor.descale + descale_index);
        // The last span level with the scale: acc[m], acc[m + kLastStride] <- (x +- y) * scale.
#pragma unroll
        for (int m = 0; m < kLastStride; ++m)
#pragma unroll
            for (int v = 0; v < kRowsPerLane * kMmaTilesN * 4; ++v) {
                float& x = acc[m][v / 8][(v / 4) % 2][v % 4];
                float& y = acc[m + kLastStride][v / 8][(v / 4) % 2][v % 4];
                const float ys = y * scale;
                const float sum = fmaf(x, scale, ys), diff = fmaf(x, scale, -ys);
                x = sum;
                y = diff;
            }

        // ---- quantize and store: 8 contiguous bytes per row and span ----
        // Output columns 32m + 8q + 4nb + 2h + e of row g + 8r are acc[m][r][nb][2h + e].
        uint8_t* out = static_cast<uint8_t*>(tensor.out) + at.batch * tensor.out_batch_stride +
                       at.head * tensor.out_head_stride + static_cast<int64_t>(row0) * tensor.out_seq_stride + 8 * q;
#pragma unroll
        for (int r = 0; r < kRowsPerLane; ++r) {
            if (row0 + kMmaGroupRows * r >= tensor.seqlen) continue;
            uint8_t* row_out = out + static_cast<int64_t>(kMmaGroupRows * r) * tensor.out_seq_stride;
#pragma unroll
            for (int m = 0; m < kSpans; ++m) {
                uint32_t word[kMmaTilesN];
#pragma unroll
                for (int nb = 0; nb < kMmaTilesN; ++nb) {
                    const float* y = acc[m][r][nb];
                    const uint32_t lo = ptx::cvt_rn_satfinite_e4m3x2_f32(y[0], y[1]);
                    const uint32_t hi = ptx::cvt_rn_satfinite_e4m3x2_f32(y[2], y[3]);
                    word[nb] = lo | (hi << 16);
                }
                ptx::st_global_v2_b32(row_out + m * kMmaSpanCols, word[0], word[1]);
            }
        }
        __syncwarp();  // the warp's rows are read before the next-but-one block's copies land there
        at = next;
    }
    ptx::cp_async_wait_all();  // nothing outstanding at exit
    if constexpr (kPair) {
        // Every st.async into this thread block has landed (we waited for each), but ours into
        // the partner may still be in flight: neither exits before both are done.
        ptx::barrier_cluster_arrive_relaxed();
        ptx::barrier_cluster_wait_acquire();
    }
}

// Q's and K's blocks by the tensor-core Hadamard, one contiguous range of the walk per thread block
// (as many thread blocks as fit on the GPU at once); kCtasPerBlock = 2: per cluster of two.
template <int kHeadDim, bool kIsBf16, Rope kRope, int kCtasPerBlock>
cudaError_t launch_hadamard_mma_qk_rope(const Fp8PrepassArgs& a, cudaStream_t stream) {
    using L = MmaLayout<kHeadDim, kCtasPerBlock>;
    constexpr int kSmem = L::kSmemBytes;
    constexpr int kThreads = L::kThreads;
    constexpr auto kKernel = fp8_hadamard_mma_kernel<kHeadDim, kIsBf16, kRope, kCtasPerBlock>;
    int device = 0, sms = 0, per_sm = 0;
    cudaError_t rc = cudaGetDevice(&device);
    if (rc != cudaSuccess) return rc;
    if ((rc = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return rc;
    if ((rc = max_active_ctas_per_sm<kKernel, kThreads, kSmem>(&per_sm)) != cudaSuccess) return rc;
    const int64_t resident = static_cast<int64_t>(sms) * std::max(per_sm, 1) / kCtasPerBlock;  // walkers
    const int64_t nq = tensor_blocks(a.q, a.batch), total = nq + tensor_blocks(a.k, a.batch);
    if (total == 0) return cudaSuccess;
    const int64_t walkers = std::max<int64_t>(std::min(total, resident), 1);
    const unsigned grid = static_cast<unsigned>(walkers * kCtasPerBlock);
    const Fp8Tensors tensors{{a.q, a.k, a.v}};
    cudaLaunchAttribute cluster[1] = {sm90::cluster_dimension_attribute(kCtasPerBlock)};  // pairs only
    return launch_with_dynamic_smem<kKernel>(kSmem, [&] {
        return sm90::launch_kernel_ex(kKernel, dim3(grid), dim3(kThreads), kSmem, stream, cluster,
                                      kCtasPerBlock > 1 ? 1u : 0u, tensors, nq, total, a.batch, a.hadamard_seed,
                                      a.rope_cos, a.rope_sin);
    });
}

template <int kHeadDim, bool kIsBf16>
cudaError_t launch_hadamard_mma_qk(const Fp8PrepassArgs& a, cudaStream_t stream) {
    if constexpr (fp8_mma_pair_built(kHeadDim)) {
        const int ctas = a.variant.ctas_per_block != 0 ? a.variant.ctas_per_block
                                                       : fp8_default_variant(kHeadDim, a.rope, true).ctas_per_block;
        if (ctas == kFp8MmaPairCtas) {
            switch (a.rope) {
                case Rope::kNone: return launch_hadamard_mma_qk_rope<kHeadDim, kIsBf16, Rope::kNone, kFp8MmaPairCtas>(a, stream);
                case Rope::kInterleaved:
                    return launch_hadamard_mma_qk_rope<kHeadDim, kIsBf16, Rope::kInterleaved, kFp8MmaPairCtas>(a, stream);
                case Rope::kHalf: return launch_hadamard_mma_qk_rope<kHeadDim, kIsBf16, Rope::kHalf, kFp8MmaPairCtas>(a, stream);
            }
            return cudaErrorInvalidValue;
        }
    }
    switch (a.rope) {
        case Rope::kNone: return launch_hadamard_mma_qk_rope<kHeadDim, kIsBf16, Rope::kNone, 1>(a, stream);
        case Rope::kInterleaved: return launch_hadamard_mma_qk_rope<kHeadDim, kIsBf16, Rope::kInterleaved, 1>(a, stream);
        case Rope::kHalf: return launch_hadamard_mma_qk_rope<kHeadDim, kIsBf16, Rope::kHalf, 1>(a, stream);
    }
    return cudaErrorInvalidValue;
}

// One launch quantizes all three tensors (one wave tail instead of three). V is never rotated (that
// would change the attention output); the branch is uniform per thread block.
// kVtOut: the V^T store path is compiled in (a tensor with vt_keys > 0 takes it). It is a separate
// instantiation, launched for V alone when Q and K are transformed: under d = 256's 128-register
// cap its code in the transform kernels tips some of them into spills.
// programmatic: this grid was launched as a programmatic dependent (launch_tensors).
template <int kHeadDim, int kChunks, int kBlocksPerCta, bool kIsBf16, Rope kRope, bool kHadamard, bool kVtOut = false>
__global__ void __launch_bounds__(Layout<kHeadDim, kChunks>::kThreads, 1)
    fp8_prepass_kernel(const __grid_constant__ Fp8Tensors tensors, const int q_blocks, const int k_blocks,
                       const int total_blocks, const float* __restrict__ rope_cos,
                       const float* __restrict__ rope_sin, const HadamardSigns signs, const bool programmatic) {
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
    const TableLoad load_table;
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
                    apply_rope<kHeadDim, kChunks, kRope>(v[r], rope_cos + table_row, rope_sin + table_row, col, load_table);
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
        if (t.amax_given) {  // (uniform per thread block: all of its threads work on one block)
            // The head's amax, waiting in this block's entry; the barrier orders every thread's read
            // before thread 0 overwrites the entry with the descale (read here, not held in a
            // register through the block's math: at d = 256 that one register spilled).
            amax = t.descale[local_block];
            __syncthreads();
        }

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
    // Launched as a programmatic dependent (Fp8PrepassVariant::v_overlap: V's quantizer, no
    // transform), this grid could finish before the Q / K grid ahead of it. Waiting for that grid
    // here makes this grid's completion imply both, which is what the stream promises whatever
    // follows. (The transform kernels let no dependent start early -- no launch_dependents: in
    // them it cost registers, one RoPE kernel its second thread block per SM -- so V's thread
    // blocks start as theirs exit.)
    if constexpr (kRope == Rope::kNone && !kHadamard) {
        if (programmatic) ptx::griddepcontrol_wait();
    }
}

// Which tensors a launch covers: all three, or Q and K (then V alone, by the V^T kernel).
enum class Tensors3 { kAll, kQK, kV };

// programmatic: launched as a programmatic dependent of the kernel before it (Fp8PrepassVariant::
// v_overlap; only V's launch behind Q's and K's asks for it).
template <int kHeadDim, int kChunks, int kBlocksPerCta, bool kIsBf16, Rope kRope, bool kHadamard, bool kVtOut = false>
cudaError_t launch_tensors(const Fp8PrepassArgs& a, cudaStream_t stream, Tensors3 which = Tensors3::kAll,
                           bool programmatic = false) {
    auto blocks_of = [&](const Fp8Tensor& t) { return tensor_blocks(t, a.batch); };
    const int64_t nq = which == Tensors3::kV ? 0 : blocks_of(a.q), nk = which == Tensors3::kV ? 0 : blocks_of(a.k),
                  nv = which == Tensors3::kQK ? 0 : blocks_of(a.v);
    const HadamardSigns signs = make_lane_signs<kHeadDim, kChunks>(a.hadamard_seed);
    constexpr int kThreads = Layout<kHeadDim, kChunks>::kThreads;
    // V^T's staging tile follows the stage buffers, only when V^T is asked for.
    constexpr int kSmem = stage_bytes<kHeadDim, kChunks, kBlocksPerCta>() + (kVtOut ? vt_tile_bytes<kHeadDim>() : 0);
    constexpr int64_t kMaxBlocks = INT32_MAX;     // block indices are int; each tensor alone fits (validated)
    constexpr auto kKernel = fp8_prepass_kernel<kHeadDim, kChunks, kBlocksPerCta, kIsBf16, kRope, kHadamard, kVtOut>;
    auto launch = [&](const Fp8Tensors& tensors, int64_t q_blocks, int64_t k_blocks, int64_t total) {
        const int64_t grid = (total + kBlocksPerCta - 1) / kBlocksPerCta;
        cudaLaunchAttribute pdl[1] = {sm90::programmatic_launch_attribute()};
        return launch_with_dynamic_smem<kKernel>(kSmem, [&] {
            return sm90::launch_kernel_ex(kKernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads), kSmem, stream, pdl,
                                          programmatic ? 1u : 0u, tensors, static_cast<int>(q_blocks),
                                          static_cast<int>(k_blocks), static_cast<int>(total), a.rope_cos, a.rope_sin,
                                          signs, programmatic);
        });
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
            a, stream, Tensors3::kV, a.variant.v_overlap != 0);
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
    const bool overlap = a.variant.v_overlap != 0;
    return a.v.vt_keys > 0
               ? launch_tensors<kHeadDim, kQuant.chunks, kQuant.blocks_per_cta, kIsBf16, Rope::kNone, false, true>(
                     a, stream, Tensors3::kV, overlap)
               : launch_tensors<kHeadDim, kQuant.chunks, kQuant.blocks_per_cta, kIsBf16, Rope::kNone, false>(
                     a, stream, Tensors3::kV, overlap);
}

// ---- One V descale per head (HATTN_FP8_PREPASS_V_PER_HEAD) -----------------------------------
// Before the quantizer: each 128-row block's amax into its descale entry (one thread block per
// block, the entry's index its 1-D grid index: the rows read once, as the quantizer will read them
// again), then each head's largest into all of its entries. The quantizer (Fp8Tensor::amax_given) scales every block by its
// head's amax and leaves amax / 448 in every entry. V is 16-bit [b, s, h, d] with strides.
constexpr int kAmaxThreads = 256;

template <int kHeadDim, bool kIsBf16>
__global__ void __launch_bounds__(kAmaxThreads) v_block_amax_kernel(const Fp8Tensor t) {
    constexpr int kChunksPerRow = kHeadDim / kChunkElems;
    __shared__ float warp_amax[kAmaxThreads / kWarpSize];
    const int blocks = seq_blocks(t);
    const int64_t entry = blockIdx.x;  // (batch * heads + head) * blocks + blk, as the descales are laid out
    const int blk = static_cast<int>(entry % blocks);
    const int64_t head = entry / blocks % t.heads, batch = entry / blocks / t.heads;
    const uint16_t* in = static_cast<const uint16_t*>(t.in) + batch * t.in_batch_stride + head * t.in_head_stride;
    float amax = 0.f;
    for (int c = static_cast<int>(threadIdx.x); c < kBlockRows * kChunksPerRow; c += kAmaxThreads) {
        const int row = blk * kBlockRows + c / kChunksPerRow;
        if (row >= t.seqlen) break;  // rows run in order: the rest lie past seqlen too
        float x[kChunkElems];
        widen_chunk<kIsBf16>(ptx::ld_global_nc_na_v4_b32(in + row * t.in_seq_stride + (c % kChunksPerRow) * kChunkElems), x);
#pragma unroll
        for (int j = 0; j < kChunkElems; ++j) amax = fmaxf(amax, fabsf(x[j]));
    }
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, offset));
    if (threadIdx.x % kWarpSize == 0) warp_amax[threadIdx.x / kWarpSize] = amax;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (float w : warp_amax) amax = fmaxf(amax, w);
        t.descale[entry] = amax;
    }
}

// One thread block per (batch, head): the largest of its blocks' amaxes into every entry. (A
// template, like every kernel of this header, so that each head dim's translation unit has its own.)
template <int kHeadDim>
__global__ void __launch_bounds__(kAmaxThreads) v_head_amax_kernel(float* descale, int blocks_per_head) {
    __shared__ float warp_amax[kAmaxThreads / kWarpSize];
    float* entries = descale + static_cast<int64_t>(blockIdx.x) * blocks_per_head;
    float amax = 0.f;
    for (int b = static_cast<int>(threadIdx.x); b < blocks_per_head; b += kAmaxThreads) amax = fmaxf(amax, entries[b]);
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, offset));
    if (threadIdx.x % kWarpSize == 0) warp_amax[threadIdx.x / kWarpSize] = amax;
    __syncthreads();  // every read done before any entry is overwritten
    for (float w : warp_amax) amax = fmaxf(amax, w);
    for (int b = static_cast<int>(threadIdx.x); b < blocks_per_head; b += kAmaxThreads) entries[b] = amax;
}

template <int kHeadDim>
cudaError_t launch_v_head_amax(const Fp8PrepassArgs& a, cudaStream_t stream) {
    const int blocks = seq_blocks(a.v);
    const unsigned grid = static_cast<unsigned>(static_cast<int64_t>(a.batch) * a.v.heads * blocks);
    if (a.dtype == fwd::Dtype::kBf16) v_block_amax_kernel<kHeadDim, true><<<grid, kAmaxThreads, 0, stream>>>(a.v);
    else v_block_amax_kernel<kHeadDim, false><<<grid, kAmaxThreads, 0, stream>>>(a.v);
    cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess) return rc;
    const unsigned heads = static_cast<unsigned>(static_cast<int64_t>(a.batch) * a.v.heads);
    v_head_amax_kernel<kHeadDim><<<heads, kAmaxThreads, 0, stream>>>(a.v.descale, blocks);
    return cudaGetLastError();
}

}  // namespace detail

// Quantizes q, k (RoPE and Hadamard as the args say) and v (block quantizer only) on `stream`:
// one launch for the three tensors, in the layout a.variant names (0s: the defaults). The args are
// validated (the C API does it), the variant here.
template <int kHeadDim>
cudaError_t launch_fp8_prepass_head_dim(const Fp8PrepassArgs& args, cudaStream_t stream, std::string* error) {
    const Fp8PrepassVariant fallback = fp8_default_variant(kHeadDim, args.rope, args.hadamard);
    // The default (all 0s) takes its v_overlap from fp8_default_variant (overlapped behind the
    // tensor-core Hadamard); a named variant says so itself (Fp8PrepassVariant::v_overlap).
    Fp8PrepassArgs a = args;
    if (a.variant.chunks == 0) a.variant.v_overlap = fallback.v_overlap;
    if (a.v.amax_given) {
        const cudaError_t rc = detail::launch_v_head_amax<kHeadDim>(a, stream);
        if (rc != cudaSuccess) {
            if (error != nullptr) *error = "fp8 pre-pass: V's per-head amax launch failed";
            return rc;
        }
    }
    const int build_blocks = HATTN_FP8_BLOCKS_PER_CTA != 0 ? HATTN_FP8_BLOCKS_PER_CTA : fallback.blocks_per_cta;
    int chunks = a.variant.chunks != 0 ? a.variant.chunks : fallback.chunks;
    int blocks = a.variant.blocks_per_cta != 0 ? a.variant.blocks_per_cta
                 : chunks == kFp8MmaChunks        ? 1  // its walk is one range per thread block
                                                  : build_blocks;
    if (a.variant.ctas_per_block != 0 && a.variant.ctas_per_block != 1 &&
        !(chunks == kFp8MmaChunks && a.variant.ctas_per_block == kFp8MmaPairCtas)) {
        if (error != nullptr) *error = "fp8 pre-pass: thread blocks per block are 1, or 2 for the tensor-core variant (16x1x2)";
        return cudaErrorInvalidValue;
    }
    if (chunks == kFp8MmaChunks) {
        if (blocks != 1) {
            if (error != nullptr) *error = "fp8 pre-pass: the tensor-core variant takes 1 block per CTA (16x1)";
            return cudaErrorInvalidValue;
        }
        if (a.hadamard) {
            const bool bf16 = a.dtype == fwd::Dtype::kBf16;
            const cudaError_t rc = bf16 ? detail::launch_mma<kHeadDim, true>(a, stream)
                                        : detail::launch_mma<kHeadDim, false>(a, stream);
            if (rc != cudaSuccess && error != nullptr) *error = "fp8 pre-pass launch failed";
            return rc;
        }
        chunks = fallback.chunks;  // nothing for the tensor cores to do without the Hadamard
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
