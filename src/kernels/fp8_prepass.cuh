// hattn/src/kernels/fp8_prepass.cuh -- the FP8 pre-pass: 16-bit Q, K, V -> [RoPE] -> [random-sign
// Hadamard] -> per-block e4m3 quantization, and its launcher.
//
// One thread block quantizes one block of kBlockRows rows of one (batch, head), for one tensor:
//   1. load      every thread loads its rows' 16 elements (two 16-byte chunks: columns
//                8l..8l+7 and d/2+8l..d/2+8l+7 for lane l of the row's lane group) and widens
//                them to fp32; all loads of the block are issued before any is used;
//   2. RoPE      both conventions pair elements a thread already holds: interleaved pairs
//                (2i, 2i+1) sit inside a chunk, half-split pairs (i, i+d/2) are the same register
//                of the two chunks -- so the rotation is register arithmetic;
//   3. Hadamard  signs (a hash of seed and column), then the butterfly over the d index bits:
//                bits 0-2 inside a chunk and the top bit (d/2) between the chunks in registers,
//                the bits in between across the lane group with shfl.bfly; then * 1/sqrt(d);
//   4. amax      per thread, per warp (shuffles), per block (shared memory);
//   5. quantize  y * 448 / amax -> cvt.rn.satfinite.e4m3x2 -> two 8-byte stores per row, and
//                the block's descale amax / 448.
//
// NOTES:
//   * Memory-bound: 2 bytes read and 1 written per element. The whole block's fp32 values stay
//     in registers between the amax and the quantization (kRowsPerThread x 16 floats per thread),
//     so each element is read from HBM exactly once.
//   * The cross-lane butterfly stages cost one shuffle per element each (log2(d) - 4 of them:
//     2, 3, 4 at d = 64, 128, 256); at HBM speed this uses at most about half of the SM's
//     shuffle rate (32 lanes per clock).
//   * Rows past seqlen are zeros in registers (not loaded, not stored): they cannot raise amax.
#pragma once

#include <cuda_runtime_api.h>

#include <cfloat>
#include <cstdint>
#include <string>

#include "kernels/fp8_prepass_args.h"
#include "ptx/convert.cuh"
#include "ptx/global.cuh"

namespace hattn::fp8 {
namespace detail {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kChunkElems = 8;                                      // one 16-byte load of 16-bit values
constexpr int kChunks = 2;                                          // columns c and c + d/2
constexpr int kThreadRowElems = kChunkElems * kChunks;              // 16 values per row per thread
constexpr int kRowsPerThread = 4;                                   // rows of the block per thread
constexpr int kRowSlots = kBlockRows / kRowsPerThread;              // rows handled side by side
constexpr uint32_t kSignBit = 0x80000000u;

template <int kHeadDim>
struct Layout {
    static constexpr int kLanesPerRow = kHeadDim / kThreadRowElems;  // 4, 8, 16
    static constexpr int kHalf = kHeadDim / 2;                       // offset of the second chunk
    static constexpr int kThreads = kRowSlots * kLanesPerRow;        // 128, 256, 512
    static constexpr int kWarps = kThreads / kWarpSize;
    static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head dims 64, 128, 256");
    static_assert(kWarpSize % kLanesPerRow == 0, "a row's lane group stays inside one warp (shuffles)");
    static_assert(kBlockRows % kRowsPerThread == 0, "whole rows per thread");
};

// 1/sqrt(d) in fp32 (exact for 64 and 256).
template <int kHeadDim>
constexpr float inv_sqrt_head_dim() {
    return kHeadDim == 64 ? 0.125f : kHeadDim == 256 ? 0.0625f : 0.08838834764831845f;
}

// Values of one row held by one thread: v[0..7] = columns col..col+7, v[8..15] = columns
// col+d/2..col+d/2+7.
using RowValues = float[kThreadRowElems];

template <bool kIsBf16>
__device__ __forceinline__ void widen_chunk(const uint4 raw, float* out) {
    ptx::unpack_x2_f32<kIsBf16>(raw.x, out[0], out[1]);
    ptx::unpack_x2_f32<kIsBf16>(raw.y, out[2], out[3]);
    ptx::unpack_x2_f32<kIsBf16>(raw.z, out[4], out[5]);
    ptx::unpack_x2_f32<kIsBf16>(raw.w, out[6], out[7]);
}

// (a, b) -> (a cos - b sin, a sin + b cos)
__device__ __forceinline__ void rotate(float& a, float& b, float c, float s) {
    const float a0 = a;
    a = fmaf(a0, c, -b * s);
    b = fmaf(a0, s, b * c);
}

template <int kHeadDim, Rope kRope>
__device__ __forceinline__ void apply_rope(RowValues& v, const float* __restrict__ cos_row,
                                           const float* __restrict__ sin_row, int col) {
    using L = Layout<kHeadDim>;
    if constexpr (kRope == Rope::kInterleaved) {
        // Pair i of columns (2i, 2i+1): chunk 0 holds pairs col/2 .. col/2+3, chunk 1 pairs
        // d/4 + col/2 .. +3.
#pragma unroll
        for (int chunk = 0; chunk < kChunks; ++chunk) {
            const int pair0 = (col + chunk * L::kHalf) / 2;
            const float4 c = ptx::ld_global_nc_v4_f32(cos_row + pair0);
            const float4 s = ptx::ld_global_nc_v4_f32(sin_row + pair0);
            float* x = v + chunk * kChunkElems;
            rotate(x[0], x[1], c.x, s.x);
            rotate(x[2], x[3], c.y, s.y);
            rotate(x[4], x[5], c.z, s.z);
            rotate(x[6], x[7], c.w, s.w);
        }
    } else if constexpr (kRope == Rope::kHalf) {
        // Pair i of columns (i, i + d/2): register j of chunk 0 with register j of chunk 1.
#pragma unroll
        for (int quad = 0; quad < kChunkElems / 4; ++quad) {
            const float4 c = ptx::ld_global_nc_v4_f32(cos_row + col + 4 * quad);
            const float4 s = ptx::ld_global_nc_v4_f32(sin_row + col + 4 * quad);
            float* lo = v + 4 * quad;
            float* hi = v + kChunkElems + 4 * quad;
            rotate(lo[0], hi[0], c.x, s.x);
            rotate(lo[1], hi[1], c.y, s.y);
            rotate(lo[2], hi[2], c.z, s.z);
            rotate(lo[3], hi[3], c.w, s.w);
        }
    }
}

// The Sylvester butterfly over the d index bits of one row (unnormalized): for each bit, the pair
// (x[e], x[e + stride]) becomes (x[e] + x[e + stride], x[e] - x[e + stride]).
template <int kHeadDim>
__device__ __forceinline__ void hadamard_butterfly(RowValues& v, int lane_in_row) {
    using L = Layout<kHeadDim>;
    // In registers: strides 1, 2, 4 inside a chunk, and d/2 between the two chunks (register j
    // and j + 8).
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
        const bool upper = (lane_in_row & lane_bit) != 0;
#pragma unroll
        for (int j = 0; j < kThreadRowElems; ++j) {
            const float other = __shfl_xor_sync(kFullMask, v[j], lane_bit);
            // The lower lane holds x[e], the upper x[e + stride]: the upper one keeps the difference.
            v[j] = upper ? other - v[j] : v[j] + other;
        }
    }
}

template <int kHeadDim, bool kIsBf16, Rope kRope, bool kHadamard>
__global__ void __launch_bounds__(Layout<kHeadDim>::kThreads)
    fp8_prepass_kernel(const Fp8Tensor t, const float* __restrict__ rope_cos, const float* __restrict__ rope_sin,
                       uint64_t seed) {
    using L = Layout<kHeadDim>;
    __shared__ float warp_amax[L::kWarps];

    // Which block: blockIdx.x = (batch * heads + head) * blocks + block, the descale's index.
    const int blocks = (t.seqlen + kBlockRows - 1) / kBlockRows;
    const int block = static_cast<int>(blockIdx.x % blocks);
    const int head_linear = static_cast<int>(blockIdx.x / blocks);
    const int head = head_linear % t.heads;
    const int batch = head_linear / t.heads;
    const int lane_in_row = static_cast<int>(threadIdx.x) % L::kLanesPerRow;
    const int row_slot = static_cast<int>(threadIdx.x) / L::kLanesPerRow;
    const int col = lane_in_row * kChunkElems;  // first column of chunk 0; chunk 1 is at col + d/2

    const uint16_t* in = static_cast<const uint16_t*>(t.in) + batch * t.in_batch_stride + head * t.in_head_stride;
    uint8_t* out = static_cast<uint8_t*>(t.out) + batch * t.out_batch_stride + head * t.out_head_stride;
    const int first_row = block * kBlockRows + row_slot;

    // ---- 1. load (every load of the block in flight before the first use) ----
    float v[kRowsPerThread][kThreadRowElems];
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
        const int row = first_row + r * kRowSlots;
        uint4 raw[kChunks] = {};
        if (row < t.seqlen) {
            const uint16_t* src = in + row * t.in_seq_stride + col;
#pragma unroll
            for (int chunk = 0; chunk < kChunks; ++chunk) {
                raw[chunk] = ptx::ld_global_nc_na_v4_b32(src + chunk * L::kHalf);
            }
        }
#pragma unroll
        for (int chunk = 0; chunk < kChunks; ++chunk) widen_chunk<kIsBf16>(raw[chunk], v[r] + chunk * kChunkElems);
    }

    // ---- 2. RoPE, 3. Hadamard ----
    if constexpr (kRope != Rope::kNone) {
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
            const int row = first_row + r * kRowSlots;
            if (row < t.seqlen) {
                const int64_t table_row = static_cast<int64_t>(row + t.rope_offset) * L::kHalf;
                apply_rope<kHeadDim, kRope>(v[r], rope_cos + table_row, rope_sin + table_row, col);
            }
        }
    }
    if constexpr (kHadamard) {
        // D's signs for this thread's 16 columns (the same for every row).
        uint32_t sign_mask = 0;
#pragma unroll
        for (int j = 0; j < kThreadRowElems; ++j) {
            const int column = col + (j / kChunkElems) * L::kHalf + j % kChunkElems;
            sign_mask |= hadamard_sign_bit(seed, column) << j;
        }
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
#pragma unroll
            for (int j = 0; j < kThreadRowElems; ++j) {
                // A sign flip is an XOR of the sign bit: no multiply.
                const uint32_t flip = ((sign_mask >> j) & 1u) ? kSignBit : 0u;
                v[r][j] = __uint_as_float(__float_as_uint(v[r][j]) ^ flip);
            }
            hadamard_butterfly<kHeadDim>(v[r], lane_in_row);
#pragma unroll
            for (int j = 0; j < kThreadRowElems; ++j) v[r][j] *= inv_sqrt_head_dim<kHeadDim>();
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
    if (threadIdx.x % kWarpSize == 0) warp_amax[warp] = amax;
    __syncthreads();  // every warp's maximum is in shared memory
#pragma unroll
    for (int w = 0; w < L::kWarps; ++w) amax = fmaxf(amax, warp_amax[w]);

    // ---- 5. quantize and store ----
    // An all-zero block gets scale 0 (zeros out, descale 0); a tiny amax must not make the scale
    // infinite (0 * inf would be NaN), so it is clamped to the largest float.
    const float scale = amax > 0.f ? fminf(kE4m3Max / amax, FLT_MAX) : 0.f;
    if (threadIdx.x == 0) ptx::st_global_f32(t.descale + blockIdx.x, amax / kE4m3Max);
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
        const int row = first_row + r * kRowSlots;
        if (row >= t.seqlen) continue;
        uint8_t* dst = out + row * t.out_seq_stride + col;
#pragma unroll
        for (int chunk = 0; chunk < kChunks; ++chunk) {
            const float* x = v[r] + chunk * kChunkElems;
            uint32_t packed[2];
#pragma unroll
            for (int word = 0; word < 2; ++word) {
                const uint32_t lo = ptx::cvt_rn_satfinite_e4m3x2_f32(x[4 * word + 0] * scale, x[4 * word + 1] * scale);
                const uint32_t hi = ptx::cvt_rn_satfinite_e4m3x2_f32(x[4 * word + 2] * scale, x[4 * word + 3] * scale);
                packed[word] = lo | (hi << 16);
            }
            ptx::st_global_v2_b32(dst + chunk * L::kHalf, packed[0], packed[1]);
        }
    }
}

template <int kHeadDim, bool kIsBf16, Rope kRope, bool kHadamard>
cudaError_t launch_tensor(const Fp8Tensor& t, const Fp8PrepassArgs& a, cudaStream_t stream) {
    const int64_t blocks = static_cast<int64_t>((t.seqlen + kBlockRows - 1) / kBlockRows) * t.heads * a.batch;
    fp8_prepass_kernel<kHeadDim, kIsBf16, kRope, kHadamard>
        <<<static_cast<unsigned>(blocks), Layout<kHeadDim>::kThreads, 0, stream>>>(t, a.rope_cos, a.rope_sin,
                                                                                   a.hadamard_seed);
    return cudaGetLastError();
}

template <int kHeadDim, bool kIsBf16>
cudaError_t launch_rotated(const Fp8Tensor& t, const Fp8PrepassArgs& a, cudaStream_t stream) {
    switch (a.rope) {
        case Rope::kNone:
            return a.hadamard ? launch_tensor<kHeadDim, kIsBf16, Rope::kNone, true>(t, a, stream)
                              : launch_tensor<kHeadDim, kIsBf16, Rope::kNone, false>(t, a, stream);
        case Rope::kInterleaved:
            return a.hadamard ? launch_tensor<kHeadDim, kIsBf16, Rope::kInterleaved, true>(t, a, stream)
                              : launch_tensor<kHeadDim, kIsBf16, Rope::kInterleaved, false>(t, a, stream);
        case Rope::kHalf:
            return a.hadamard ? launch_tensor<kHeadDim, kIsBf16, Rope::kHalf, true>(t, a, stream)
                              : launch_tensor<kHeadDim, kIsBf16, Rope::kHalf, false>(t, a, stream);
    }
    return cudaErrorInvalidValue;
}

template <int kHeadDim, bool kIsBf16>
cudaError_t launch_all(const Fp8PrepassArgs& a, cudaStream_t stream) {
    cudaError_t rc = launch_rotated<kHeadDim, kIsBf16>(a.q, a, stream);
    if (rc == cudaSuccess) rc = launch_rotated<kHeadDim, kIsBf16>(a.k, a, stream);
    // V: the block quantizer only (rotating V would change the attention output).
    if (rc == cudaSuccess) rc = launch_tensor<kHeadDim, kIsBf16, Rope::kNone, false>(a.v, a, stream);
    return rc;
}

}  // namespace detail

// Quantizes q, k (RoPE and Hadamard as the args say) and v (block quantizer only) on `stream`:
// three launches, one per tensor. The args are validated (the C API does it).
template <int kHeadDim>
cudaError_t launch_fp8_prepass_head_dim(const Fp8PrepassArgs& a, cudaStream_t stream, std::string* error) {
    const cudaError_t rc = a.dtype == fwd::Dtype::kBf16 ? detail::launch_all<kHeadDim, true>(a, stream)
                                                         : detail::launch_all<kHeadDim, false>(a, stream);
    if (rc != cudaSuccess && error != nullptr) *error = "fp8 pre-pass launch failed";
    return rc;
}

}  // namespace hattn::fp8
