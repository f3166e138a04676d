// hattn/src/testing/gpu_reference.cu -- the plain GPU reference attention (see reference.h).
//
// One thread block per (block of 32 query rows, query head, batch). Each warp owns 4 rows; K and
// V stream through shared memory 32 keys at a time (one key per lane for the scores). Scores and
// O accumulate in fp32 on CUDA cores; the running row sum is fp64 so that summing 16k
// exponentials adds no visible error to LSE.
//
// NOTES:
//   * Scores: lane j computes the dot product of key j with each of its warp's 4 query rows.
//     K rows are padded by 4 floats so that the lanes' float4 reads of 32 different rows hit
//     distinct banks (a row stride that is a multiple of 32 words would put every lane in the
//     same bank: a 32-way conflict). Q reads are warp-wide broadcasts.
//   * P V: each warp writes its 4 x 32 probabilities to shared memory and every lane then owns
//     head_dim / 32 output columns (lane + 32 t), reading V rows contiguously: conflict-free.
//   * Masking follows the public contract: key j is visible to query i iff j < seqlen_k and, if
//     causal, j <= i + seqlen_k - seqlen_q. A row that sees no key ends with l = 0 and gets
//     O = 0, LSE = -inf.
#include "testing/gpu_reference.h"

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

namespace hattn::reference {
namespace {

constexpr int kWarpSize = 32;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kKeysPerTile = kWarpSize;  // one key per lane when computing scores
constexpr int kKeyRowPad = 4;            // floats; keeps float4 reads of 32 K rows conflict-free
constexpr unsigned kFullMask = 0xFFFFFFFFu;

template <int kHeadDim>
struct SharedLayout {
    float q[kRowsPerBlock][kHeadDim];
    float k[kKeysPerTile][kHeadDim + kKeyRowPad];
    float v[kKeysPerTile][kHeadDim];
    float p[kWarps][kRowsPerWarp][kKeysPerTile];
};

struct KernelArgs {
    const uint16_t* q;
    const uint16_t* k;
    const uint16_t* v;
    float* o;
    float* lse;
    int heads_q, group, seqlen_q, seqlen_k;
    int64_t q_batch_stride, q_seq_stride, q_head_stride;
    int64_t k_batch_stride, k_seq_stride, k_head_stride;
    int64_t v_batch_stride, v_seq_stride, v_head_stride;
    float scale;
    bool causal;
};

template <bool kIsBf16>
__device__ __forceinline__ float to_float(uint16_t bits) {
    if constexpr (kIsBf16) {
        return __uint_as_float(static_cast<uint32_t>(bits) << 16);  // bf16 = top half of an fp32
    } else {
        return __half2float(__ushort_as_half(bits));
    }
}

__device__ __forceinline__ float warp_max(float x) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(kFullMask, x, offset));
    return x;
}

__device__ __forceinline__ float warp_sum(float x) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullMask, x, offset);
    return x;
}

// Last key (exclusive) that query row i may see.
__device__ __forceinline__ int key_end(int i, const KernelArgs& a) {
    if (!a.causal) return a.seqlen_k;
    const int64_t end = static_cast<int64_t>(i) + a.seqlen_k - a.seqlen_q + 1;
    return static_cast<int>(end < 0 ? 0 : (end > a.seqlen_k ? a.seqlen_k : end));
}

// (kThreads, 1): a one-block-per-SM floor lets ptxas use the registers the unrolled loops want;
// without it ptxas aimed for higher occupancy and spilled at head_dim 256.
template <int kHeadDim, bool kIsBf16>
__global__ void __launch_bounds__(kThreads, 1) reference_attention_kernel(const KernelArgs a) {
    constexpr int kColsPerLane = kHeadDim / kWarpSize;
    extern __shared__ float4 smem_raw[];  // float4: 16-byte alignment for the vector reads
    auto& s = *reinterpret_cast<SharedLayout<kHeadDim>*>(smem_raw);

    const int warp = threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    const int row0 = blockIdx.x * kRowsPerBlock;
    const int head = blockIdx.y;
    const int kv_head = head / a.group;
    const int batch = blockIdx.z;

    const uint16_t* q = a.q + batch * a.q_batch_stride + head * a.q_head_stride;
    const uint16_t* k = a.k + batch * a.k_batch_stride + kv_head * a.k_head_stride;
    const uint16_t* v = a.v + batch * a.v_batch_stride + kv_head * a.v_head_stride;

    // Q rows of this block, zero past seqlen_q.
    for (int idx = threadIdx.x; idx < kRowsPerBlock * kHeadDim; idx += kThreads) {
        const int r = idx / kHeadDim, c = idx % kHeadDim;
        const int i = row0 + r;
        s.q[r][c] = i < a.seqlen_q ? to_float<kIsBf16>(q[i * a.q_seq_stride + c]) : 0.f;
    }

    // Keys any row of this block may see: stop the tile loop there.
    const int last_row = min(row0 + kRowsPerBlock, a.seqlen_q) - 1;
    const int block_key_end = key_end(last_row, a);

    float m[kRowsPerWarp], o[kRowsPerWarp][kColsPerLane];
    double l[kRowsPerWarp];
    int row_key_end[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0;
        row_key_end[r] = key_end(row0 + warp * kRowsPerWarp + r, a);
#pragma unroll
        for (int t = 0; t < kColsPerLane; ++t) o[r][t] = 0.f;
    }

    for (int tile = 0; tile < block_key_end; tile += kKeysPerTile) {
        __syncthreads();  // the previous tile's K, V and P are no longer read (and Q is written)
        for (int idx = threadIdx.x; idx < kKeysPerTile * kHeadDim; idx += kThreads) {
            const int j = idx / kHeadDim, c = idx % kHeadDim;
            const bool in_range = tile + j < a.seqlen_k;
            s.k[j][c] = in_range ? to_float<kIsBf16>(k[(tile + j) * a.k_seq_stride + c]) : 0.f;
            s.v[j][c] = in_range ? to_float<kIsBf16>(v[(tile + j) * a.v_seq_stride + c]) : 0.f;
        }
        __syncthreads();

        // Scores of key (tile + lane) against this warp's rows.
        float score[kRowsPerWarp];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) score[r] = 0.f;
        for (int c = 0; c < kHeadDim; c += 4) {
            const float4 kv = *reinterpret_cast<const float4*>(&s.k[lane][c]);
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r) {
                const float4 qv = *reinterpret_cast<const float4*>(&s.q[warp * kRowsPerWarp + r][c]);
                score[r] = fmaf(qv.x, kv.x, score[r]);
                score[r] = fmaf(qv.y, kv.y, score[r]);
                score[r] = fmaf(qv.z, kv.z, score[r]);
                score[r] = fmaf(qv.w, kv.w, score[r]);
            }
        }

        // Online softmax, one row at a time.
        const int j = tile + lane;
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
            const float sc = j < row_key_end[r] ? score[r] * a.scale : -INFINITY;
            const float m_new = fmaxf(m[r], warp_max(sc));
            // A row with no visible key so far keeps m = -inf: use 0 for p and 1 for the
            // rescale instead of exp(-inf - -inf) = NaN.
            const float p = m_new == -INFINITY ? 0.f : expf(sc - m_new);
            const float alpha = m_new == -INFINITY ? 1.f : expf(m[r] - m_new);
            l[r] = l[r] * alpha + static_cast<double>(warp_sum(p));
            m[r] = m_new;
#pragma unroll
            for (int t = 0; t < kColsPerLane; ++t) o[r][t] *= alpha;
            s.p[warp][r][lane] = p;
        }
        __syncwarp();

        // O += P V for this tile.
        for (int jj = 0; jj < kKeysPerTile; ++jj) {
            float p[kRowsPerWarp];
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r) p[r] = s.p[warp][r][jj];
#pragma unroll
            for (int t = 0; t < kColsPerLane; ++t) {
                const float vv = s.v[jj][lane + kWarpSize * t];
#pragma unroll
                for (int r = 0; r < kRowsPerWarp; ++r) o[r][t] = fmaf(p[r], vv, o[r][t]);
            }
        }
        // (The __syncthreads at the top of the next tile orders these reads before the rewrite;
        //  s.p is per-warp and the next write to it follows the score loop, after that barrier.)
    }

    // Normalize and store.
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        const int i = row0 + warp * kRowsPerWarp + r;
        if (i >= a.seqlen_q) continue;
        const bool empty = l[r] == 0.0;
        // fp64 only for the sum itself: rounding the finished sum to fp32 costs 2^-24 relative.
        const float row_sum = static_cast<float>(l[r]);
        const float inv_l = empty ? 0.f : 1.f / row_sum;
        float* out = a.o + ((static_cast<int64_t>(batch) * a.seqlen_q + i) * a.heads_q + head) * kHeadDim;
#pragma unroll
        for (int t = 0; t < kColsPerLane; ++t) out[lane + kWarpSize * t] = o[r][t] * inv_l;
        if (a.lse != nullptr && lane == 0) {
            const int64_t lse_index = (static_cast<int64_t>(batch) * a.heads_q + head) * a.seqlen_q + i;
            a.lse[lse_index] = empty ? -INFINITY : m[r] + logf(row_sum);
        }
    }
}

template <int kHeadDim, bool kIsBf16>
cudaError_t launch(const KernelArgs& a, int batch, cudaStream_t stream) {
    constexpr size_t kSmemBytes = sizeof(SharedLayout<kHeadDim>);
    auto kernel = reference_attention_kernel<kHeadDim, kIsBf16>;
    // More than the default 48 KB of dynamic shared memory needs an explicit opt-in.
    cudaError_t rc = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kSmemBytes));
    if (rc != cudaSuccess) return rc;
    const dim3 grid((a.seqlen_q + kRowsPerBlock - 1) / kRowsPerBlock, a.heads_q, batch);
    kernel<<<grid, kThreads, kSmemBytes, stream>>>(a);
    return cudaGetLastError();
}

template <int kHeadDim>
cudaError_t launch_dtype(const KernelArgs& a, int batch, hattn_dtype dtype, cudaStream_t stream) {
    switch (dtype) {
        case HATTN_DTYPE_BF16: return launch<kHeadDim, true>(a, batch, stream);
        case HATTN_DTYPE_FP16: return launch<kHeadDim, false>(a, batch, stream);
    }
    return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t reference_fwd(const hattn_fwd_params& p, float* o, float* lse, cudaStream_t stream) {
    if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0 || o == nullptr) return cudaErrorInvalidValue;
    KernelArgs a;
    a.q = static_cast<const uint16_t*>(p.q);
    a.k = static_cast<const uint16_t*>(p.k);
    a.v = static_cast<const uint16_t*>(p.v);
    a.o = o;
    a.lse = lse;
    a.heads_q = p.heads_q;
    a.group = p.heads_q / p.heads_kv;
    a.seqlen_q = p.seqlen_q;
    a.seqlen_k = p.seqlen_k;
    a.q_batch_stride = p.q_batch_stride;
    a.q_seq_stride = p.q_seq_stride;
    a.q_head_stride = p.q_head_stride;
    a.k_batch_stride = p.k_batch_stride;
    a.k_seq_stride = p.k_seq_stride;
    a.k_head_stride = p.k_head_stride;
    a.v_batch_stride = p.v_batch_stride;
    a.v_seq_stride = p.v_seq_stride;
    a.v_head_stride = p.v_head_stride;
    a.scale = p.softmax_scale != 0.f ? p.softmax_scale : 1.f / sqrtf(static_cast<float>(p.head_dim));
    a.causal = p.causal != 0;
    switch (p.head_dim) {
        case 64: return launch_dtype<64>(a, p.batch, p.dtype, stream);
        case 128: return launch_dtype<128>(a, p.batch, p.dtype, stream);
        case 256: return launch_dtype<256>(a, p.batch, p.dtype, stream);
        default: return cudaErrorInvalidValue;
    }
}

}  // namespace hattn::reference
