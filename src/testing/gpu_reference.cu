// hattn/src/testing/gpu_reference.cu -- the plain GPU reference attention, forward and backward (see
// gpu_reference.h).
//
// Every kernel has the same shape: a thread block of 8 warps owns a block of rows of one (head,
// batch) -- query rows for the forward and dQ, key rows for dK and dV -- each warp a few of them;
// the other side streams through shared memory 32 rows at a time, one per lane for the dot
// products. Everything accumulates in fp32 on CUDA cores (the forward's running row sum in fp64,
// so that summing 16k exponentials adds no visible error to LSE).
//
// NOTES:
//   * Dot products (dot_rows): lane j takes the streamed row j and each of its warp's own rows.
//     Streamed rows are padded by 4 floats so that the lanes' float4 reads of 32 different rows
//     hit distinct banks (a row stride that is a multiple of 32 words would put every lane in the
//     same bank: a 32-way conflict). The warp's own rows are warp-wide broadcasts.
//   * Weighted sums (accumulate_rows): each warp writes its rows' 32 weights to shared memory and
//     every lane then owns head_dim / 32 output columns (lane + 32 t), reading the streamed rows
//     contiguously: conflict-free.
//   * Masking follows the public contract: key j is visible to query i iff j < seqlen_k and, if
//     causal, j <= i + seqlen_k - seqlen_q. A row that sees no key gets O = 0, LSE = -inf and
//     dQ = 0; a key no row sees gets dK = dV = 0.
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
constexpr int kTileRows = kWarpSize;  // streamed rows per tile: one per lane in the dot products
constexpr int kRowPad = 4;            // floats; keeps float4 reads of 32 streamed rows conflict-free
constexpr unsigned kFullMask = 0xFFFFFFFFu;

// ---- Building blocks ------------------------------------------------------------------------------

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
__device__ __forceinline__ int key_end(int i, int seqlen_q, int seqlen_k, bool causal) {
    if (!causal) return seqlen_k;
    const int64_t end = static_cast<int64_t>(i) + seqlen_k - seqlen_q + 1;
    return static_cast<int>(end < 0 ? 0 : (end > seqlen_k ? seqlen_k : end));
}

// First query row that sees key j (seqlen_q when none does).
__device__ __forceinline__ int first_row_seeing(int j, int seqlen_q, int seqlen_k, bool causal) {
    if (!causal) return 0;
    const int64_t first = static_cast<int64_t>(j) - seqlen_k + seqlen_q;
    return static_cast<int>(first < 0 ? 0 : (first > seqlen_q ? seqlen_q : first));
}

// rows [first_row, first_row + kRows) of a [seqlen, head_dim] 16-bit matrix (row stride in
// elements) into dst as floats, zero past row_end; the whole block cooperates.
template <bool kIsBf16, int kRows, int kCols, int kPitch>
__device__ __forceinline__ void load_rows(float (*dst)[kPitch], const uint16_t* src, int64_t row_stride, int first_row,
                                          int row_end) {
    for (int idx = threadIdx.x; idx < kRows * kCols; idx += blockDim.x) {
        const int r = idx / kCols, c = idx % kCols;
        const int row = first_row + r;
        dst[r][c] = row < row_end ? to_float<kIsBf16>(src[row * row_stride + c]) : 0.f;
    }
}

// acc[r] += own[r] . streamed (kAbs: |own[r]| . |streamed|) for the warp's kRows own rows
// (broadcast reads) and one streamed row per lane (float4 reads of a padded row).
template <int kHeadDim, bool kAbs, int kRows, int kOwnPitch>
__device__ __forceinline__ void dot_rows(const float (*own)[kOwnPitch], const float* streamed, float (&acc)[kRows]) {
    auto f = [](float x) { return kAbs ? fabsf(x) : x; };
    for (int c = 0; c < kHeadDim; c += 4) {
        const float4 x = *reinterpret_cast<const float4*>(streamed + c);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const float4 y = *reinterpret_cast<const float4*>(&own[r][c]);
            acc[r] = fmaf(f(y.x), f(x.x), acc[r]);
            acc[r] = fmaf(f(y.y), f(x.y), acc[r]);
            acc[r] = fmaf(f(y.z), f(x.z), acc[r]);
            acc[r] = fmaf(f(y.w), f(x.w), acc[r]);
        }
    }
}

// acc[r][t] += sum_jj w[r][jj] * f(x[jj][lane + 32 t]) over a tile of streamed rows, with
// f = identity, or |.| for the error weights.
template <int kHeadDim, int kRows, bool kAbs, int kPitch>
__device__ __forceinline__ void accumulate_rows(const float (*w)[kTileRows], const float (*x)[kPitch], int lane,
                                                float (&acc)[kRows][kHeadDim / kWarpSize]) {
    for (int jj = 0; jj < kTileRows; ++jj) {
        float wr[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) wr[r] = w[r][jj];
#pragma unroll
        for (int t = 0; t < kHeadDim / kWarpSize; ++t) {
            const float xv = kAbs ? fabsf(x[jj][lane + kWarpSize * t]) : x[jj][lane + kWarpSize * t];
#pragma unroll
            for (int r = 0; r < kRows; ++r) acc[r][t] = fmaf(wr[r], xv, acc[r][t]);
        }
    }
}

// Writes a warp's kRows packed fp32 output rows (row r at out + r * row_elems), times `factor`.
template <int kHeadDim, int kRows>
__device__ __forceinline__ void store_rows(float* out, int64_t row_elems, int valid_rows, int lane, float factor,
                                           const float (&acc)[kRows][kHeadDim / kWarpSize]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        if (r >= valid_rows) break;
#pragma unroll
        for (int t = 0; t < kHeadDim / kWarpSize; ++t) out[r * row_elems + lane + kWarpSize * t] = acc[r][t] * factor;
    }
}

template <int kHeadDim, int kRows>
__device__ __forceinline__ void zero(float (&acc)[kRows][kHeadDim / kWarpSize]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int t = 0; t < kHeadDim / kWarpSize; ++t) acc[r][t] = 0.f;
    }
}

// The kernel's dynamic shared memory as its layout struct (float4: 16-byte alignment for the
// vector reads).
template <class Shared>
__device__ __forceinline__ Shared& shared_as() {
    extern __shared__ float4 smem_raw[];
    return *reinterpret_cast<Shared*>(smem_raw);
}

// This thread's warp and lane, and its block's first row, head and batch (grid x, y, z).
struct BlockPosition {
    int warp, lane, first_row, head, batch;
};

__device__ __forceinline__ BlockPosition block_position(int rows_per_block) {
    return {static_cast<int>(threadIdx.x) / kWarpSize, static_cast<int>(threadIdx.x) % kWarpSize,
            static_cast<int>(blockIdx.x) * rows_per_block, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z)};
}

// A 16-bit tensor's element `offset` (in elements from its base pointer).
__device__ __forceinline__ const uint16_t* tensor(const void* base, int64_t offset) {
    return static_cast<const uint16_t*>(base) + offset;
}

// A head-dim / dtype pair as a type, for the dispatch below.
template <int kD, bool kBf16>
struct Variant {
    static constexpr int kHeadDim = kD;
    static constexpr bool kIsBf16 = kBf16;
};

// Calls launch(Variant<head_dim, is_bf16>{}) for the built head dims and both dtypes.
template <class Launch>
cudaError_t dispatch(int head_dim, hattn_dtype dtype, Launch launch) {
    if (dtype != HATTN_DTYPE_BF16 && dtype != HATTN_DTYPE_FP16) return cudaErrorInvalidValue;
    const bool bf16 = dtype == HATTN_DTYPE_BF16;
    switch (head_dim) {
        case 64: return bf16 ? launch(Variant<64, true>{}) : launch(Variant<64, false>{});
        case 128: return bf16 ? launch(Variant<128, true>{}) : launch(Variant<128, false>{});
        case 256: return bf16 ? launch(Variant<256, true>{}) : launch(Variant<256, false>{});
        default: return cudaErrorInvalidValue;
    }
}

template <class Kernel, class Args>
cudaError_t launch_kernel(Kernel kernel, dim3 grid, size_t smem_bytes, cudaStream_t stream, const Args& args) {
    // More than the default 48 KB of dynamic shared memory needs an explicit opt-in.
    const cudaError_t rc =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes));
    if (rc != cudaSuccess) return rc;
    kernel<<<grid, kThreads, smem_bytes, stream>>>(args);
    return cudaGetLastError();
}

float resolved_scale(float softmax_scale, int head_dim) {
    return softmax_scale != 0.f ? softmax_scale : 1.f / sqrtf(static_cast<float>(head_dim));
}

// ---- Forward -------------------------------------------------------------------------------------

struct FwdKernelArgs {
    hattn_fwd_params p;  // pointers, sizes and strides as given (a plain C struct, passed by value)
    float* o;
    float* lse;
    int group;  // query heads per KV head
    float scale;
};

template <int kHeadDim>
struct FwdShared {
    float q[kRowsPerBlock][kHeadDim];
    float k[kTileRows][kHeadDim + kRowPad];
    float v[kTileRows][kHeadDim];
    float p[kWarps][kRowsPerWarp][kTileRows];
};

// (kThreads, 1): a one-block-per-SM floor lets ptxas use the registers the unrolled loops want;
// without it ptxas aimed for higher occupancy and spilled at head_dim 256.
template <int kHeadDim, bool kIsBf16>
__global__ void __launch_bounds__(kThreads, 1) reference_fwd_kernel(const FwdKernelArgs a) {
    constexpr int kColsPerLane = kHeadDim / kWarpSize;
    auto& s = shared_as<FwdShared<kHeadDim>>();
    const hattn_fwd_params& p = a.p;
    const auto [warp, lane, row0, head, batch] = block_position(kRowsPerBlock);
    const int kv_head = head / a.group;

    const uint16_t* q = tensor(p.q, batch * p.q_batch_stride + head * p.q_head_stride);
    const uint16_t* k = tensor(p.k, batch * p.k_batch_stride + kv_head * p.k_head_stride);
    const uint16_t* v = tensor(p.v, batch * p.v_batch_stride + kv_head * p.v_head_stride);

    // Q rows of this block, zero past seqlen_q.
    load_rows<kIsBf16, kRowsPerBlock, kHeadDim>(s.q, q, p.q_seq_stride, row0, p.seqlen_q);

    // Keys any row of this block may see: stop the tile loop there.
    const int last_row = min(row0 + kRowsPerBlock, p.seqlen_q) - 1;
    const int block_key_end = key_end(last_row, p.seqlen_q, p.seqlen_k, p.causal != 0);

    float m[kRowsPerWarp], o[kRowsPerWarp][kColsPerLane];
    double l[kRowsPerWarp];
    int row_key_end[kRowsPerWarp];
    zero<kHeadDim, kRowsPerWarp>(o);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0;
        row_key_end[r] = key_end(row0 + warp * kRowsPerWarp + r, p.seqlen_q, p.seqlen_k, p.causal != 0);
    }

    for (int tile = 0; tile < block_key_end; tile += kTileRows) {
        __syncthreads();  // the previous tile's K, V and P are no longer read (and Q is written)
        load_rows<kIsBf16, kTileRows, kHeadDim>(s.k, k, p.k_seq_stride, tile, p.seqlen_k);
        load_rows<kIsBf16, kTileRows, kHeadDim>(s.v, v, p.v_seq_stride, tile, p.seqlen_k);
        __syncthreads();

        // Scores of key (tile + lane) against this warp's rows.
        float score[kRowsPerWarp] = {};
        dot_rows<kHeadDim, false>(&s.q[warp * kRowsPerWarp], &s.k[lane][0], score);

        // Online softmax, one row at a time.
        const int j = tile + lane;
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
            const float sc = j < row_key_end[r] ? score[r] * a.scale : -INFINITY;
            const float m_new = fmaxf(m[r], warp_max(sc));
            // A row with no visible key so far keeps m = -inf: use 0 for p and 1 for the
            // rescale instead of exp(-inf - -inf) = NaN.
            const float pj = m_new == -INFINITY ? 0.f : expf(sc - m_new);
            const float alpha = m_new == -INFINITY ? 1.f : expf(m[r] - m_new);
            l[r] = l[r] * alpha + static_cast<double>(warp_sum(pj));
            m[r] = m_new;
#pragma unroll
            for (int t = 0; t < kColsPerLane; ++t) o[r][t] *= alpha;
            s.p[warp][r][lane] = pj;
        }
        __syncwarp();

        // O += P V for this tile. (The __syncthreads at the top of the next tile orders these
        // reads before the rewrite; s.p is per-warp and the next write to it follows the score
        // loop, after that barrier.)
        accumulate_rows<kHeadDim, kRowsPerWarp, false>(s.p[warp], s.v, lane, o);
    }

    // Normalize and store.
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        const int i = row0 + warp * kRowsPerWarp + r;
        if (i >= p.seqlen_q) continue;
        const bool empty = l[r] == 0.0;
        // fp64 only for the sum itself: rounding the finished sum to fp32 costs 2^-24 relative.
        const float row_sum = static_cast<float>(l[r]);
        const float inv_l = empty ? 0.f : 1.f / row_sum;
        float* out = a.o + ((static_cast<int64_t>(batch) * p.seqlen_q + i) * p.heads_q + head) * kHeadDim;
#pragma unroll
        for (int t = 0; t < kColsPerLane; ++t) out[lane + kWarpSize * t] = o[r][t] * inv_l;
        if (a.lse != nullptr && lane == 0) {
            const int64_t lse_index = (static_cast<int64_t>(batch) * p.heads_q + head) * p.seqlen_q + i;
            a.lse[lse_index] = empty ? -INFINITY : m[r] + logf(row_sum);
        }
    }
}

// ---- Backward ------------------------------------------------------------------------------------

struct BwdKernelArgs {
    hattn_bwd_params p;  // pointers, sizes and strides as given (a plain C struct, passed by value)
    BwdReferenceOutputs out;
    const float* d;      // [batch, heads_q, seqlen_q]: D_i = sum_c dO_i[c] O_i[c]
    const float* d_abs;  // [batch, heads_q, seqlen_q]: sum_c |dO_i[c] O_i[c]|
    int group;
    float scale;
};

// D and Dabs, one warp per (batch, row, head).
template <int kHeadDim, bool kIsBf16>
__global__ void __launch_bounds__(kThreads) reference_bwd_rowsum_kernel(const hattn_bwd_params p, float* d,
                                                                        float* d_abs) {
    const int64_t rows = static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (row >= rows) return;
    const int head = static_cast<int>(row % p.heads_q);
    const int i = static_cast<int>(row / p.heads_q % p.seqlen_q);
    const int batch = static_cast<int>(row / p.heads_q / p.seqlen_q);
    const uint16_t* o = tensor(p.o, batch * p.o_batch_stride + i * p.o_seq_stride + head * p.o_head_stride);
    const uint16_t* dout = tensor(p.dout, batch * p.do_batch_stride + i * p.do_seq_stride + head * p.do_head_stride);
    float sum = 0.f, sum_abs = 0.f;
    for (int c = lane; c < kHeadDim; c += kWarpSize) {
        const float x = to_float<kIsBf16>(dout[c]) * to_float<kIsBf16>(o[c]);
        sum += x;
        sum_abs += fabsf(x);
    }
    sum = warp_sum(sum);
    sum_abs = warp_sum(sum_abs);
    if (lane == 0) {
        const int64_t index = (static_cast<int64_t>(batch) * p.heads_q + head) * p.seqlen_q + i;
        d[index] = sum;
        d_abs[index] = sum_abs;
    }
}

// P, dS and their error weights for one (row, key) pair; all 0 for a pair the mask hides.
struct DsTerms {
    float p, ds, ds_abs, cancel;
};

__device__ __forceinline__ DsTerms ds_terms(bool visible, float score, float dp, float dp_abs, float lse, float d,
                                            float d_abs, float scale) {
    DsTerms t{0.f, 0.f, 0.f, 0.f};
    if (visible) {
        t.p = expf(scale * score - lse);
        t.ds = t.p * (dp - d);
        t.ds_abs = fabsf(t.ds);
        t.cancel = t.p * (dp_abs + d_abs);
    }
    return t;
}

template <int kHeadDim>
struct DqShared {
    float q[kRowsPerBlock][kHeadDim];
    float dout[kRowsPerBlock][kHeadDim];
    float k[kTileRows][kHeadDim + kRowPad];
    float v[kTileRows][kHeadDim + kRowPad];
    float ds[kWarps][kRowsPerWarp][kTileRows];
    float ds_abs[kWarps][kRowsPerWarp][kTileRows];
    float cancel[kWarps][kRowsPerWarp][kTileRows];
};

// dQ_i = scale sum_j dS_ij k_j: one block per (32 query rows, query head, batch), keys streamed.
template <int kHeadDim, bool kIsBf16>
__global__ void __launch_bounds__(kThreads, 1) reference_dq_kernel(const BwdKernelArgs a) {
    constexpr int kColsPerLane = kHeadDim / kWarpSize;
    auto& s = shared_as<DqShared<kHeadDim>>();
    const hattn_bwd_params& p = a.p;
    const bool causal = p.causal != 0;
    const auto [warp, lane, row0, head, batch] = block_position(kRowsPerBlock);
    const int kv_head = head / a.group;

    load_rows<kIsBf16, kRowsPerBlock, kHeadDim>(s.q, tensor(p.q, batch * p.q_batch_stride + head * p.q_head_stride),
                                                p.q_seq_stride, row0, p.seqlen_q);
    load_rows<kIsBf16, kRowsPerBlock, kHeadDim>(
        s.dout, tensor(p.dout, batch * p.do_batch_stride + head * p.do_head_stride), p.do_seq_stride, row0,
        p.seqlen_q);
    const uint16_t* k = tensor(p.k, batch * p.k_batch_stride + kv_head * p.k_head_stride);
    const uint16_t* v = tensor(p.v, batch * p.v_batch_stride + kv_head * p.v_head_stride);

    float lse[kRowsPerWarp], d[kRowsPerWarp], d_abs[kRowsPerWarp];
    int row_key_end[kRowsPerWarp];
    const int64_t stats0 = (static_cast<int64_t>(batch) * p.heads_q + head) * p.seqlen_q;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        const int i = row0 + warp * kRowsPerWarp + r;
        const bool in_range = i < p.seqlen_q;
        lse[r] = in_range ? p.lse[stats0 + i] : 0.f;
        d[r] = in_range ? a.d[stats0 + i] : 0.f;
        d_abs[r] = in_range ? a.d_abs[stats0 + i] : 0.f;
        row_key_end[r] = in_range ? key_end(i, p.seqlen_q, p.seqlen_k, causal) : 0;
    }
    const int last_row = min(row0 + kRowsPerBlock, p.seqlen_q) - 1;
    const int block_key_end = key_end(last_row, p.seqlen_q, p.seqlen_k, causal);

    float dq[kRowsPerWarp][kColsPerLane], dq_weight[kRowsPerWarp][kColsPerLane], dq_cancel[kRowsPerWarp][kColsPerLane];
    zero<kHeadDim, kRowsPerWarp>(dq);
    zero<kHeadDim, kRowsPerWarp>(dq_weight);
    zero<kHeadDim, kRowsPerWarp>(dq_cancel);
    for (int tile = 0; tile < block_key_end; tile += kTileRows) {
        __syncthreads();  // the previous tile is no longer read (and Q, dO are written)
        load_rows<kIsBf16, kTileRows, kHeadDim>(s.k, k, p.k_seq_stride, tile, p.seqlen_k);
        load_rows<kIsBf16, kTileRows, kHeadDim>(s.v, v, p.v_seq_stride, tile, p.seqlen_k);
        __syncthreads();

        // Key (tile + lane) against this warp's rows: q . k, dO . v and |dO| . |v|.
        float score[kRowsPerWarp] = {}, dp[kRowsPerWarp] = {}, dp_abs[kRowsPerWarp] = {};
        dot_rows<kHeadDim, false>(&s.q[warp * kRowsPerWarp], &s.k[lane][0], score);
        dot_rows<kHeadDim, false>(&s.dout[warp * kRowsPerWarp], &s.v[lane][0], dp);
        dot_rows<kHeadDim, true>(&s.dout[warp * kRowsPerWarp], &s.v[lane][0], dp_abs);
        const int j = tile + lane;
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
            const DsTerms t =
                ds_terms(j < row_key_end[r], score[r], dp[r], dp_abs[r], lse[r], d[r], d_abs[r], a.scale);
            s.ds[warp][r][lane] = t.ds;
            s.ds_abs[warp][r][lane] = t.ds_abs;
            s.cancel[warp][r][lane] = t.cancel;
        }
        __syncwarp();
        accumulate_rows<kHeadDim, kRowsPerWarp, false>(s.ds[warp], s.k, lane, dq);
        accumulate_rows<kHeadDim, kRowsPerWarp, true>(s.ds_abs[warp], s.k, lane, dq_weight);
        accumulate_rows<kHeadDim, kRowsPerWarp, true>(s.cancel[warp], s.k, lane, dq_cancel);
    }

    const int first = row0 + warp * kRowsPerWarp;
    const int valid = min(kRowsPerWarp, p.seqlen_q - first);
    const int64_t row_elems = static_cast<int64_t>(p.heads_q) * kHeadDim;
    const int64_t offset = ((static_cast<int64_t>(batch) * p.seqlen_q + first) * p.heads_q + head) * kHeadDim;
    store_rows<kHeadDim>(a.out.dq + offset, row_elems, valid, lane, a.scale, dq);
    if (a.out.dq_weight != nullptr) store_rows<kHeadDim>(a.out.dq_weight + offset, row_elems, valid, lane, a.scale, dq_weight);
    if (a.out.dq_cancel != nullptr) store_rows<kHeadDim>(a.out.dq_cancel + offset, row_elems, valid, lane, a.scale, dq_cancel);
}

// Keys per warp in the dK/dV kernel: four accumulators per key (dK, dV and their weights).
constexpr int kKeysPerWarp = 2;
constexpr int kKeysPerBlock = kWarps * kKeysPerWarp;

template <int kHeadDim>
struct DkvShared {
    float k[kKeysPerBlock][kHeadDim];
    float v[kKeysPerBlock][kHeadDim];
    float q[kTileRows][kHeadDim + kRowPad];
    float dout[kTileRows][kHeadDim + kRowPad];
    float lse[kTileRows], d[kTileRows], d_abs[kTileRows];
    float p[kWarps][kKeysPerWarp][kTileRows];
    float ds[kWarps][kKeysPerWarp][kTileRows];
    float ds_abs[kWarps][kKeysPerWarp][kTileRows];
    float cancel[kWarps][kKeysPerWarp][kTileRows];
};

// dK_j = scale sum_(h,i) dS_ij q_i and dV_j = sum_(h,i) P_ij dO_i: one block per (16 keys, KV head,
// batch), looping over the group's query heads and streaming their query rows.
template <int kHeadDim, bool kIsBf16>
__global__ void __launch_bounds__(kThreads, 1) reference_dkv_kernel(const BwdKernelArgs a) {
    constexpr int kColsPerLane = kHeadDim / kWarpSize;
    auto& s = shared_as<DkvShared<kHeadDim>>();
    const hattn_bwd_params& p = a.p;
    const bool causal = p.causal != 0;
    const auto [warp, lane, key0, kv_head, batch] = block_position(kKeysPerBlock);

    load_rows<kIsBf16, kKeysPerBlock, kHeadDim>(
        s.k, tensor(p.k, batch * p.k_batch_stride + kv_head * p.k_head_stride), p.k_seq_stride, key0, p.seqlen_k);
    load_rows<kIsBf16, kKeysPerBlock, kHeadDim>(
        s.v, tensor(p.v, batch * p.v_batch_stride + kv_head * p.v_head_stride), p.v_seq_stride, key0, p.seqlen_k);
    // The block's first key is seen by the fewest rows: start there.
    const int first_row = first_row_seeing(key0, p.seqlen_q, p.seqlen_k, causal);

    float dk[kKeysPerWarp][kColsPerLane], dv[kKeysPerWarp][kColsPerLane];
    float dk_weight[kKeysPerWarp][kColsPerLane], dv_weight[kKeysPerWarp][kColsPerLane];
    float dk_cancel[kKeysPerWarp][kColsPerLane];
    zero<kHeadDim, kKeysPerWarp>(dk);
    zero<kHeadDim, kKeysPerWarp>(dv);
    zero<kHeadDim, kKeysPerWarp>(dk_weight);
    zero<kHeadDim, kKeysPerWarp>(dv_weight);
    zero<kHeadDim, kKeysPerWarp>(dk_cancel);
    for (int head = kv_head * a.group; head < (kv_head + 1) * a.group; ++head) {
        const uint16_t* q = tensor(p.q, batch * p.q_batch_stride + head * p.q_head_stride);
        const uint16_t* dout = tensor(p.dout, batch * p.do_batch_stride + head * p.do_head_stride);
        const int64_t stats0 = (static_cast<int64_t>(batch) * p.heads_q + head) * p.seqlen_q;
        for (int tile = first_row; tile < p.seqlen_q; tile += kTileRows) {
            __syncthreads();  // the previous tile is no longer read (and K, V are written)
            load_rows<kIsBf16, kTileRows, kHeadDim>(s.q, q, p.q_seq_stride, tile, p.seqlen_q);
            load_rows<kIsBf16, kTileRows, kHeadDim>(s.dout, dout, p.do_seq_stride, tile, p.seqlen_q);
            if (threadIdx.x < kTileRows) {
                const int i = tile + threadIdx.x;
                const bool in_range = i < p.seqlen_q;
                s.lse[threadIdx.x] = in_range ? p.lse[stats0 + i] : 0.f;
                s.d[threadIdx.x] = in_range ? a.d[stats0 + i] : 0.f;
                s.d_abs[threadIdx.x] = in_range ? a.d_abs[stats0 + i] : 0.f;
            }
            __syncthreads();

            // Query row (tile + lane) against this warp's keys: k . q, v . dO and |v| . |dO|.
            float score[kKeysPerWarp] = {}, dp[kKeysPerWarp] = {}, dp_abs[kKeysPerWarp] = {};
            dot_rows<kHeadDim, false>(&s.k[warp * kKeysPerWarp], &s.q[lane][0], score);
            dot_rows<kHeadDim, false>(&s.v[warp * kKeysPerWarp], &s.dout[lane][0], dp);
            dot_rows<kHeadDim, true>(&s.v[warp * kKeysPerWarp], &s.dout[lane][0], dp_abs);
            const int i = tile + lane;
            const int row_end = i < p.seqlen_q ? key_end(i, p.seqlen_q, p.seqlen_k, causal) : 0;
#pragma unroll
            for (int r = 0; r < kKeysPerWarp; ++r) {
                const int j = key0 + warp * kKeysPerWarp + r;
                const DsTerms t = ds_terms(j < row_end, score[r], dp[r], dp_abs[r], s.lse[lane], s.d[lane],
                                           s.d_abs[lane], a.scale);
                s.p[warp][r][lane] = t.p;
                s.ds[warp][r][lane] = t.ds;
                s.ds_abs[warp][r][lane] = t.ds_abs;
                s.cancel[warp][r][lane] = t.cancel;
            }
            __syncwarp();
            accumulate_rows<kHeadDim, kKeysPerWarp, false>(s.p[warp], s.dout, lane, dv);
            accumulate_rows<kHeadDim, kKeysPerWarp, true>(s.p[warp], s.dout, lane, dv_weight);
            accumulate_rows<kHeadDim, kKeysPerWarp, false>(s.ds[warp], s.q, lane, dk);
            accumulate_rows<kHeadDim, kKeysPerWarp, true>(s.ds_abs[warp], s.q, lane, dk_weight);
            accumulate_rows<kHeadDim, kKeysPerWarp, true>(s.cancel[warp], s.q, lane, dk_cancel);
        }
    }

    const int first = key0 + warp * kKeysPerWarp;
    const int valid = min(kKeysPerWarp, p.seqlen_k - first);
    const int64_t row_elems = static_cast<int64_t>(p.heads_kv) * kHeadDim;
    const int64_t offset = ((static_cast<int64_t>(batch) * p.seqlen_k + first) * p.heads_kv + kv_head) * kHeadDim;
    const BwdReferenceOutputs& out = a.out;
    store_rows<kHeadDim>(out.dk + offset, row_elems, valid, lane, a.scale, dk);
    store_rows<kHeadDim>(out.dv + offset, row_elems, valid, lane, 1.f, dv);
    if (out.dk_weight != nullptr) store_rows<kHeadDim>(out.dk_weight + offset, row_elems, valid, lane, a.scale, dk_weight);
    if (out.dv_weight != nullptr) store_rows<kHeadDim>(out.dv_weight + offset, row_elems, valid, lane, 1.f, dv_weight);
    if (out.dk_cancel != nullptr) store_rows<kHeadDim>(out.dk_cancel + offset, row_elems, valid, lane, a.scale, dk_cancel);
}

}  // namespace

cudaError_t reference_fwd(const hattn_fwd_params& p, float* o, float* lse, cudaStream_t stream) {
    if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0 || o == nullptr) return cudaErrorInvalidValue;
    const FwdKernelArgs a{p, o, lse, p.heads_q / p.heads_kv, resolved_scale(p.softmax_scale, p.head_dim)};
    return dispatch(p.head_dim, p.dtype, [&](auto variant) {
        using V = decltype(variant);
        const dim3 grid((p.seqlen_q + kRowsPerBlock - 1) / kRowsPerBlock, p.heads_q, p.batch);
        return launch_kernel(reference_fwd_kernel<V::kHeadDim, V::kIsBf16>, grid, sizeof(FwdShared<V::kHeadDim>),
                             stream, a);
    });
}

cudaError_t reference_bwd(const hattn_bwd_params& p, const BwdReferenceOutputs& out, cudaStream_t stream) {
    if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0 || out.dq == nullptr || out.dk == nullptr ||
        out.dv == nullptr) {
        return cudaErrorInvalidValue;
    }
    // D and Dabs live in stream-ordered scratch, freed once the kernels that read it are done.
    const size_t rows = static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q;
    float* stats = nullptr;
    cudaError_t rc = cudaMallocAsync(reinterpret_cast<void**>(&stats), 2 * rows * sizeof(float), stream);
    if (rc != cudaSuccess) return rc;
    const BwdKernelArgs a{p, out, stats, stats + rows, p.heads_q / p.heads_kv, resolved_scale(p.softmax_scale, p.head_dim)};
    rc = dispatch(p.head_dim, p.dtype, [&](auto variant) {
        using V = decltype(variant);
        const dim3 rowsum_grid(static_cast<unsigned>((rows + kWarps - 1) / kWarps));
        reference_bwd_rowsum_kernel<V::kHeadDim, V::kIsBf16><<<rowsum_grid, kThreads, 0, stream>>>(p, stats, stats + rows);
        cudaError_t launch_rc = cudaGetLastError();
        if (launch_rc != cudaSuccess) return launch_rc;
        const dim3 dq_grid((p.seqlen_q + kRowsPerBlock - 1) / kRowsPerBlock, p.heads_q, p.batch);
        launch_rc = launch_kernel(reference_dq_kernel<V::kHeadDim, V::kIsBf16>, dq_grid, sizeof(DqShared<V::kHeadDim>),
                                  stream, a);
        if (launch_rc != cudaSuccess) return launch_rc;
        const dim3 dkv_grid((p.seqlen_k + kKeysPerBlock - 1) / kKeysPerBlock, p.heads_kv, p.batch);
        return launch_kernel(reference_dkv_kernel<V::kHeadDim, V::kIsBf16>, dkv_grid, sizeof(DkvShared<V::kHeadDim>),
                             stream, a);
    });
    const cudaError_t free_rc = cudaFreeAsync(stats, stream);
    return rc != cudaSuccess ? rc : free_rc;
}

}  // namespace hattn::reference
