// hattn/src/testing/fp8_accuracy.cu -- the FP8 accuracy measurement (see fp8_accuracy.h).
//
// NOTES:
//   * The float64 reference gives one thread block to kRefRows query rows of one head: its threads
//     first stream the visible keys (one key per thread at a time; each key element is converted
//     to float64 once for all the block's rows) for each row's max and sum with an online softmax
//     per thread, combined across the block; then, chunk by chunk, they recompute the chunk's
//     weights into shared memory and accumulate P V with threads over the head dim (256 / head_dim
//     thread groups share a chunk's keys), reading V rows contiguously. Scores are computed twice:
//     cheaper than holding them (131k keys x 8 bytes per row). FP64 FMAs bound it: ~3 * rows *
//     seqlen_k * head_dim of them.
//   * Per-tensor quantization takes its amax with atomicMax on the bits of |x|: non-negative
//     floats order like their bit patterns as unsigned integers.
#include "testing/fp8_accuracy.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "common/format.h"
#include "testing/device_random.cuh"
#include "testing/numerics.h"

namespace hattn::testing {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;  // grid-stride loops beyond this
constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xFFFFFFFFu;
constexpr int kRefRows = 8;            // query rows per thread block of the float64 reference
constexpr int kReferenceChunk = 256;   // keys whose weights are staged in shared memory at a time
constexpr int kVectorElems = 8;        // 16-bit elements per 16-byte load

int grid_for(size_t n) {
    const size_t blocks = (n + kThreads - 1) / kThreads;
    return static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

template <bool kIsBf16>
__device__ __forceinline__ float to_float(uint16_t bits) {
    if constexpr (kIsBf16) {
        return __uint_as_float(static_cast<uint32_t>(bits) << 16);
    } else {
        return __half2float(__ushort_as_half(bits));
    }
}

template <bool kIsBf16>
__device__ __forceinline__ uint16_t from_float(float x) {
    if constexpr (kIsBf16) {
        return __bfloat16_as_ushort(__float2bfloat16_rn(x));
    } else {
        return __half_as_ushort(__float2half_rn(x));
    }
}

// ---- Inputs with outliers -------------------------------------------------------------------------

template <bool kIsBf16>
__global__ void fill_outliers_kernel(uint16_t* out, size_t n, uint64_t seed, float prob, float outlier_stddev) {
    constexpr float kInv2Pow32 = 1.0f / 4294967296.0f;
    const uint64_t salt_base = detail::splitmix64(seed);
    const uint64_t salt_pick = detail::splitmix64(seed ^ 0xA5A5A5A5A5A5A5A5ull);
    const uint64_t salt_size = detail::splitmix64(seed ^ 0x5A5A5A5A5A5A5A5Aull);
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        float x = detail::normal_from_hash(detail::splitmix64(salt_base ^ i));
        const float u = static_cast<float>(detail::splitmix64(salt_pick ^ i) >> 32) * kInv2Pow32;
        if (u < prob) x += outlier_stddev * detail::normal_from_hash(detail::splitmix64(salt_size ^ i));
        out[i] = from_float<kIsBf16>(x);
    }
}

// ---- Per-tensor e4m3 ------------------------------------------------------------------------------

template <bool kIsBf16>
__global__ void amax_kernel(const uint16_t* x, size_t n, unsigned* amax_bits) {
    float m = 0.f;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        m = fmaxf(m, fabsf(to_float<kIsBf16>(x[i])));
    }
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, offset));
    if (threadIdx.x % kWarpSize == 0) atomicMax(amax_bits, __float_as_uint(m));
}

template <bool kIsBf16>
__global__ void quantize_kernel(const uint16_t* x, size_t n, const unsigned* amax_bits, uint8_t* out,
                                float* descales, size_t n_descales) {
    const float amax = __uint_as_float(*amax_bits);
    // As the pre-pass: scale = 448 / amax (capped at FLT_MAX for a tiny amax), 0 for an all-zero tensor.
    const float scale = amax > 0.f ? fminf(HATTN_FP8_E4M3_MAX / amax, 3.402823466e38f) : 0.f;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    const size_t first = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    for (size_t i = first; i < n; i += stride) {
        out[i] = __nv_cvt_float_to_fp8(to_float<kIsBf16>(x[i]) * scale, __NV_SATFINITE, __NV_E4M3);
    }
    for (size_t i = first; i < n_descales; i += stride) descales[i] = amax / HATTN_FP8_E4M3_MAX;
}

// ---- Dequantized e4m3, for the floors ------------------------------------------------------------

// out[i] = fp16(e4m3 x[i] * descale of its (batch, head, 128-row block)), x contiguous [b, s, h, d].
// fp16 holds every such product within 2^-11 relative (e4m3 carries 3 mantissa bits): the floor's
// inputs are the quantized values, not a second rounding of them.
__global__ void dequantize_kernel(const uint8_t* x, const float* descales, size_t n, int seqlen, int heads,
                                  int head_dim, uint16_t* out) {
    const int blocks_per_head = (seqlen + HATTN_FP8_BLOCK_ROWS - 1) / HATTN_FP8_BLOCK_ROWS;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const size_t row = i / head_dim;  // (b * seqlen + s) * heads + h
        const int h = static_cast<int>(row % heads);
        const size_t bs = row / heads;
        const int s = static_cast<int>(bs % seqlen);
        const size_t b = bs / seqlen;
        const float descale = descales[(b * heads + h) * blocks_per_head + s / HATTN_FP8_BLOCK_ROWS];
        const float value = __half2float(__half(__nv_cvt_fp8_to_halfraw(x[i], __NV_E4M3)));
        out[i] = __half_as_ushort(__float2half_rn(value * descale));
    }
}

// ---- RoPE of the reference's inputs ----------------------------------------------------------------

template <bool kIsBf16>
__global__ void rope_kernel(uint16_t* x, size_t pairs, int seqlen, int heads, int head_dim, hattn_rope rope,
                            const float* cos_t, const float* sin_t, int table_offset) {
    const int half = head_dim / 2;
    for (size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; t < pairs;
         t += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const int i = static_cast<int>(t % half);
        const size_t row = t / half;  // (b * seqlen + s) * heads + h
        const int s = static_cast<int>(row / heads % seqlen);
        uint16_t* r = x + row * head_dim;
        const int ia = rope == HATTN_ROPE_INTERLEAVED ? 2 * i : i;
        const int ib = rope == HATTN_ROPE_INTERLEAVED ? 2 * i + 1 : i + half;
        const size_t table = static_cast<size_t>(s + table_offset) * half + i;
        const float c = cos_t[table], sn = sin_t[table];
        const float a = to_float<kIsBf16>(r[ia]), b = to_float<kIsBf16>(r[ib]);
        r[ia] = from_float<kIsBf16>(fmaf(a, c, -b * sn));
        r[ib] = from_float<kIsBf16>(fmaf(a, sn, b * c));
    }
}

// ---- Float64 reference over a subset of rows ---------------------------------------------------------

__device__ __forceinline__ int key_end(int i, int seqlen_q, int seqlen_k, bool causal) {
    if (!causal) return seqlen_k;
    const int64_t end = static_cast<int64_t>(i) + seqlen_k - seqlen_q + 1;
    return static_cast<int>(end < 0 ? 0 : (end > seqlen_k ? seqlen_k : end));
}

// s[r] = dot(q[r], row) in float64 for the block's kRefRows query rows; row: kD 16-bit values,
// 16-byte aligned. Each key element is converted once and used for every query row.
template <int kD, bool kIsBf16>
__device__ __forceinline__ void dot_rows(const double (*q)[kD], const uint16_t* row, double* s) {
#pragma unroll
    for (int r = 0; r < kRefRows; ++r) s[r] = 0.0;
    const uint4* v = reinterpret_cast<const uint4*>(row);
#pragma unroll 2
    for (int c = 0; c < kD / kVectorElems; ++c) {
        const uint4 w = __ldg(v + c);
        const uint32_t words[4] = {w.x, w.y, w.z, w.w};
        double x[kVectorElems];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            x[2 * e] = static_cast<double>(to_float<kIsBf16>(static_cast<uint16_t>(words[e] & 0xFFFFu)));
            x[2 * e + 1] = static_cast<double>(to_float<kIsBf16>(static_cast<uint16_t>(words[e] >> 16)));
        }
#pragma unroll
        for (int r = 0; r < kRefRows; ++r) {
#pragma unroll
            for (int e = 0; e < kVectorElems; ++e) s[r] = fma(q[r][c * kVectorElems + e], x[e], s[r]);
        }
    }
}

__device__ __forceinline__ double warp_max(double x) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x = fmax(x, __shfl_xor_sync(kFullMask, x, offset));
    return x;
}

__device__ __forceinline__ double warp_sum(double x) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullMask, x, offset);
    return x;
}

struct RowsArgs {
    hattn_fwd_params p;
    int rows;
    double scale;
    double* o;
    double* lse;
};

template <int kD, bool kIsBf16>
__global__ void __launch_bounds__(kThreads) reference_rows_kernel(const RowsArgs a) {
    static_assert(kThreads % kD == 0, "thread groups over the head dim");
    static_assert(kReferenceChunk == kThreads, "one key of a chunk per thread");
    constexpr int kGroups = kThreads / kD;
    constexpr int kWarps = kThreads / kWarpSize;
    __shared__ double q_s[kRefRows][kD];
    __shared__ double w_s[kRefRows][kReferenceChunk];  // a chunk's weights, then the P V partial sums
    __shared__ double red_m[kRefRows][kWarps];
    __shared__ double red_l[kRefRows][kWarps];
    const hattn_fwd_params& p = a.p;
    const int r0 = blockIdx.x * kRefRows, h = blockIdx.y, b = blockIdx.z;
    const int hk = h / (p.heads_q / p.heads_kv);
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    const auto* k = static_cast<const uint16_t*>(p.k) + b * p.k_batch_stride + hk * p.k_head_stride;
    const auto* v = static_cast<const uint16_t*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride;
    int end[kRefRows];
    int max_end = 0;
#pragma unroll
    for (int r = 0; r < kRefRows; ++r) {
        const bool live = r0 + r < a.rows;
        const int i = live ? reference_row(r0 + r, a.rows, p.seqlen_q) : 0;
        end[r] = live ? key_end(i, p.seqlen_q, p.seqlen_k, p.causal != 0) : 0;
        max_end = end[r] > max_end ? end[r] : max_end;
        const auto* q = static_cast<const uint16_t*>(p.q) + b * p.q_batch_stride + i * p.q_seq_stride + h * p.q_head_stride;
        for (int c = threadIdx.x; c < kD; c += kThreads) {
            q_s[r][c] = live ? a.scale * static_cast<double>(to_float<kIsBf16>(q[c])) : 0.0;
        }
    }
    __syncthreads();

    // Pass 1: each row's max and sum (online per thread, then combined across the block).
    double m[kRefRows], l[kRefRows], s[kRefRows];
#pragma unroll
    for (int r = 0; r < kRefRows; ++r) {
        s[r] = 0.0;
        m[r] = -INFINITY;
        l[r] = 0.0;
    }
    for (int j = threadIdx.x; j < max_end; j += kThreads) {
        dot_rows<kD, kIsBf16>(q_s, k + j * p.k_seq_stride, s);
#pragma unroll
        for (int r = 0; r < kRefRows; ++r) {
            if (j >= end[r]) continue;
            if (s[r] > m[r]) {
                l[r] = l[r] * exp(m[r] - s[r]) + 1.0;
                m[r] = s[r];
            } else {
                l[r] += exp(s[r] - m[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < kRefRows; ++r) {
        const double wm = warp_max(m[r]);
        const double wl = warp_sum(m[r] == -INFINITY ? 0.0 : l[r] * exp(m[r] - wm));
        if (lane == 0) {
            red_m[r][warp] = wm;
            red_l[r][warp] = wl;
        }
    }
    __syncthreads();
    double row_max[kRefRows], row_sum[kRefRows];
#pragma unroll
    for (int r = 0; r < kRefRows; ++r) {
        row_max[r] = -INFINITY;
        for (int w = 0; w < kWarps; ++w) row_max[r] = fmax(row_max[r], red_m[r][w]);
        row_sum[r] = 0.0;
        for (int w = 0; w < kWarps; ++w) {
            if (red_m[r][w] != -INFINITY) row_sum[r] += red_l[r][w] * exp(red_m[r][w] - row_max[r]);
        }
    }

    // Pass 2: O = sum_j exp(s_j - max) v_j / sum, chunk by chunk.
    const int c = threadIdx.x % kD, g = threadIdx.x / kD;
    double acc[kRefRows];
#pragma unroll
    for (int r = 0; r < kRefRows; ++r) acc[r] = 0.0;
    for (int j0 = 0; j0 < max_end; j0 += kReferenceChunk) {
        __syncthreads();  // the previous chunk's weights are consumed
        const int j = j0 + threadIdx.x;
        if (j < max_end) dot_rows<kD, kIsBf16>(q_s, k + j * p.k_seq_stride, s);
#pragma unroll
        for (int r = 0; r < kRefRows; ++r) w_s[r][threadIdx.x] = j < end[r] ? exp(s[r] - row_max[r]) : 0.0;
        __syncthreads();
        const int n = max_end - j0 < kReferenceChunk ? max_end - j0 : kReferenceChunk;
        for (int jj = g; jj < n; jj += kGroups) {
            const double x = static_cast<double>(to_float<kIsBf16>(v[(j0 + jj) * p.v_seq_stride + c]));
#pragma unroll
            for (int r = 0; r < kRefRows; ++r) acc[r] = fma(w_s[r][jj], x, acc[r]);
        }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRefRows; ++r) w_s[r][threadIdx.x] = acc[r];
    __syncthreads();
    for (int r = 0; r < kRefRows && r0 + r < a.rows; ++r) {
        const size_t out_row = (static_cast<size_t>(b) * p.heads_q + h) * a.rows + r0 + r;
        if (threadIdx.x < kD) {
            double sum = 0.0;
            for (int t = 0; t < kGroups; ++t) sum += w_s[r][t * kD + threadIdx.x];
            a.o[out_row * kD + threadIdx.x] = row_sum[r] > 0.0 ? sum / row_sum[r] : 0.0;
        }
        if (threadIdx.x == 0 && a.lse != nullptr) {
            a.lse[out_row] = row_sum[r] > 0.0 ? row_max[r] + log(row_sum[r]) : -INFINITY;
        }
    }
}

template <int kD>
cudaError_t launch_rows(const RowsArgs& a, cudaStream_t stream) {
    const dim3 grid((a.rows + kRefRows - 1) / kRefRows, a.p.heads_q, a.p.batch);
    if (a.p.dtype == HATTN_DTYPE_BF16) {
        reference_rows_kernel<kD, true><<<grid, kThreads, 0, stream>>>(a);
    } else {
        reference_rows_kernel<kD, false><<<grid, kThreads, 0, stream>>>(a);
    }
    return cudaGetLastError();
}

bool is_16bit(hattn_dtype t) { return t == HATTN_DTYPE_BF16 || t == HATTN_DTYPE_FP16; }

}  // namespace

cudaError_t fill_normal_outliers(void* out, size_t n, hattn_dtype dtype, uint64_t seed, float outlier_prob,
                                 float outlier_stddev, cudaStream_t stream) {
    if (!is_16bit(dtype)) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    auto* p = static_cast<uint16_t*>(out);
    if (dtype == HATTN_DTYPE_BF16) {
        fill_outliers_kernel<true><<<grid_for(n), kThreads, 0, stream>>>(p, n, seed, outlier_prob, outlier_stddev);
    } else {
        fill_outliers_kernel<false><<<grid_for(n), kThreads, 0, stream>>>(p, n, seed, outlier_prob, outlier_stddev);
    }
    return cudaGetLastError();
}

cudaError_t quantize_e4m3_per_tensor(const void* x, size_t n, hattn_dtype dtype, uint8_t* out, float* descales,
                                     size_t n_descales, float* scratch, cudaStream_t stream) {
    if (!is_16bit(dtype) || n == 0) return cudaErrorInvalidValue;
    cudaError_t rc = cudaMemsetAsync(scratch, 0, sizeof(float), stream);
    if (rc != cudaSuccess) return rc;
    auto* bits = reinterpret_cast<unsigned*>(scratch);
    const auto* in = static_cast<const uint16_t*>(x);
    const int grid = grid_for(n > n_descales ? n : n_descales);
    if (dtype == HATTN_DTYPE_BF16) {
        amax_kernel<true><<<grid_for(n), kThreads, 0, stream>>>(in, n, bits);
        quantize_kernel<true><<<grid, kThreads, 0, stream>>>(in, n, bits, out, descales, n_descales);
    } else {
        amax_kernel<false><<<grid_for(n), kThreads, 0, stream>>>(in, n, bits);
        quantize_kernel<false><<<grid, kThreads, 0, stream>>>(in, n, bits, out, descales, n_descales);
    }
    return cudaGetLastError();
}

cudaError_t apply_rope_16bit(void* x, int batch, int seqlen, int heads, int head_dim, hattn_dtype dtype,
                             hattn_rope rope, const float* cos, const float* sin, int table_offset,
                             cudaStream_t stream) {
    if (!is_16bit(dtype) || head_dim % 2 != 0) return cudaErrorInvalidValue;
    if (rope == HATTN_ROPE_NONE) return cudaSuccess;
    const size_t pairs = static_cast<size_t>(batch) * seqlen * heads * (head_dim / 2);
    if (pairs == 0) return cudaSuccess;
    auto* p = static_cast<uint16_t*>(x);
    if (dtype == HATTN_DTYPE_BF16) {
        rope_kernel<true><<<grid_for(pairs), kThreads, 0, stream>>>(p, pairs, seqlen, heads, head_dim, rope, cos, sin,
                                                                      table_offset);
    } else {
        rope_kernel<false><<<grid_for(pairs), kThreads, 0, stream>>>(p, pairs, seqlen, heads, head_dim, rope, cos,
                                                                       sin, table_offset);
    }
    return cudaGetLastError();
}

cudaError_t reference_fwd_fp64_rows(const hattn_fwd_params& params, int rows, double* o, double* lse,
                                    cudaStream_t stream) {
    if (!is_16bit(params.dtype) || rows <= 0 || rows > params.seqlen_q || o == nullptr) return cudaErrorInvalidValue;
    RowsArgs a;
    a.p = params;
    a.rows = rows;
    a.scale = params.softmax_scale != 0.f ? static_cast<double>(params.softmax_scale)
                                          : 1.0 / std::sqrt(static_cast<double>(params.head_dim));
    a.o = o;
    a.lse = lse;
    switch (params.head_dim) {
        case 64: return launch_rows<64>(a, stream);
        case 128: return launch_rows<128>(a, stream);
        case 256: return launch_rows<256>(a, stream);
        default: return cudaErrorInvalidValue;
    }
}

// ---- The measurement ---------------------------------------------------------------------------

namespace {

// A device allocation freed on scope exit.
class Buffer {
public:
    Buffer() = default;
    ~Buffer() {
        if (ptr_ != nullptr) cudaFree(ptr_);
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    cudaError_t allocate(size_t bytes) { return cudaMalloc(&ptr_, bytes < 1 ? 1 : bytes); }
    template <class T = void>
    T* get() const {
        return static_cast<T*>(ptr_);
    }

private:
    void* ptr_ = nullptr;
};

// RMSE of o_dev ([b, s, h, d], 16-bit) at the reference rows against ref ([b, h, rows, d]).
double rmse_at_rows(const std::vector<uint16_t>& o, const std::vector<double>& ref, const Fp8AccuracyConfig& c,
                    int rows, hattn_dtype dtype) {
    double err_sq = 0.0;
    size_t count = 0;
    for (int b = 0; b < c.batch; ++b) {
        for (int h = 0; h < c.heads; ++h) {
            for (int r = 0; r < rows; ++r) {
                const int i = reference_row(r, rows, c.seqlen);
                const size_t got0 = ((static_cast<size_t>(b) * c.seqlen + i) * c.heads + h) * c.head_dim;
                const size_t ref0 = ((static_cast<size_t>(b) * c.heads + h) * rows + r) * c.head_dim;
                for (int e = 0; e < c.head_dim; ++e) {
                    const double d = static_cast<double>(numerics::half_to_float(o[got0 + e], dtype)) - ref[ref0 + e];
                    err_sq += d * d;
                    ++count;
                }
            }
        }
    }
    return std::sqrt(err_sq / static_cast<double>(count));
}

double rmse_between(const std::vector<double>& a, const std::vector<double>& b) {
    double err_sq = 0.0;
    for (size_t i = 0; i < a.size(); ++i) err_sq += (a[i] - b[i]) * (a[i] - b[i]);
    return std::sqrt(err_sq / static_cast<double>(a.size()));
}

}  // namespace

bool measure_fp8_accuracy(const Fp8AccuracyConfig& c, Fp8AccuracyResult* result, std::string* error) {
    auto fail = [&](const char* what, const std::string& why) {
        *error = common::format("%s: %s", what, why.c_str());
        return false;
    };
#define HATTN_ACC_CUDA(expr)                                                  \
    do {                                                                      \
        const cudaError_t rc_ = (expr);                                       \
        if (rc_ != cudaSuccess) return fail(#expr, cudaGetErrorString(rc_)); \
    } while (0)
#define HATTN_ACC_CALL(expr)                                                    \
    do {                                                                        \
        const hattn_status st_ = (expr);                                        \
        if (st_ != HATTN_SUCCESS) return fail(#expr, hattn_status_string(st_)); \
    } while (0)

    const hattn_dtype dtype = HATTN_DTYPE_BF16;
    const int rows = c.rows_per_head < c.seqlen ? c.rows_per_head : c.seqlen;
    if (rows <= 0 || c.batch <= 0 || c.heads <= 0) return fail("configuration", "sizes must be positive");
    const size_t n = static_cast<size_t>(c.batch) * c.seqlen * c.heads * c.head_dim;
    const size_t n_blocks = static_cast<size_t>(c.batch) * c.heads * ((c.seqlen + HATTN_FP8_BLOCK_ROWS - 1) / HATTN_FP8_BLOCK_ROWS);
    const size_t n_ref = static_cast<size_t>(c.batch) * c.heads * rows * c.head_dim;
    Buffer q, k, v, q8, k8, v8, qs, ks, vs, o, ws, ref, scratch, q_deq, k_deq, v_deq, ref_deq;
    const size_t ws_bytes = hattn_fwd_fp8_workspace_size(c.batch, c.heads, c.seqlen, c.head_dim);
    HATTN_ACC_CUDA(q.allocate(n * 2));
    HATTN_ACC_CUDA(k.allocate(n * 2));
    HATTN_ACC_CUDA(v.allocate(n * 2));
    HATTN_ACC_CUDA(q8.allocate(n));
    HATTN_ACC_CUDA(k8.allocate(n));
    HATTN_ACC_CUDA(v8.allocate(n));
    HATTN_ACC_CUDA(qs.allocate(n_blocks * sizeof(float)));
    HATTN_ACC_CUDA(ks.allocate(n_blocks * sizeof(float)));
    HATTN_ACC_CUDA(vs.allocate(n_blocks * sizeof(float)));
    HATTN_ACC_CUDA(o.allocate(n * 2));
    HATTN_ACC_CUDA(ws.allocate(ws_bytes));
    HATTN_ACC_CUDA(ref.allocate(n_ref * sizeof(double)));
    HATTN_ACC_CUDA(scratch.allocate(sizeof(float)));
    HATTN_ACC_CUDA(q_deq.allocate(n * 2));
    HATTN_ACC_CUDA(k_deq.allocate(n * 2));
    HATTN_ACC_CUDA(v_deq.allocate(n * 2));
    HATTN_ACC_CUDA(ref_deq.allocate(n_ref * sizeof(double)));
    // A different stream of the seed per tensor.
    HATTN_ACC_CUDA(fill_normal_outliers(q.get(), n, dtype, c.seed * 3 + 0, c.outlier_prob, c.outlier_stddev, nullptr));
    HATTN_ACC_CUDA(fill_normal_outliers(k.get(), n, dtype, c.seed * 3 + 1, c.outlier_prob, c.outlier_stddev, nullptr));
    HATTN_ACC_CUDA(fill_normal_outliers(v.get(), n, dtype, c.seed * 3 + 2, c.outlier_prob, c.outlier_stddev, nullptr));

    hattn_fwd_params bf16 = hattn_fwd_params_contiguous(q.get(), k.get(), v.get(), o.get(), c.batch, c.heads, c.heads,
                                                        c.seqlen, c.seqlen, c.head_dim, dtype);
    const auto t0 = std::chrono::steady_clock::now();
    HATTN_ACC_CUDA(reference_fwd_fp64_rows(bf16, rows, ref.get<double>(), nullptr, nullptr));
    HATTN_ACC_CUDA(cudaDeviceSynchronize());
    result->reference_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::vector<double> ref_h(n_ref);
    HATTN_ACC_CUDA(cudaMemcpy(ref_h.data(), ref.get(), n_ref * sizeof(double), cudaMemcpyDeviceToHost));
    double ref_sq = 0.0;
    for (double x : ref_h) ref_sq += x * x;
    result->rows_per_head = rows;
    result->o_rms = std::sqrt(ref_sq / static_cast<double>(n_ref));

    std::vector<uint16_t> o_h(n);
    auto measure_o = [&](double* rmse) -> bool {
        HATTN_ACC_CUDA(cudaDeviceSynchronize());
        HATTN_ACC_CUDA(cudaMemcpy(o_h.data(), o.get(), n * 2, cudaMemcpyDeviceToHost));
        *rmse = rmse_at_rows(o_h, ref_h, c, rows, dtype);
        return true;
    };

    HATTN_ACC_CALL(hattn_fwd(&bf16, nullptr));
    if (!measure_o(&result->rmse_bf16)) return false;

    hattn_fwd_fp8_params f = hattn_fwd_fp8_params_contiguous(
        q8.get(), k8.get(), v8.get(), o.get(), qs.get<float>(), ks.get<float>(), vs.get<float>(), c.batch, c.heads,
        c.heads, c.seqlen, c.seqlen, c.head_dim, dtype);
    f.workspace = ws.get();
    f.workspace_size = ws_bytes;

    // (a) one scale per tensor, no Hadamard.
    HATTN_ACC_CUDA(quantize_e4m3_per_tensor(q.get(), n, dtype, q8.get<uint8_t>(), qs.get<float>(), n_blocks,
                                            scratch.get<float>(), nullptr));
    HATTN_ACC_CUDA(quantize_e4m3_per_tensor(k.get(), n, dtype, k8.get<uint8_t>(), ks.get<float>(), n_blocks,
                                            scratch.get<float>(), nullptr));
    HATTN_ACC_CUDA(quantize_e4m3_per_tensor(v.get(), n, dtype, v8.get<uint8_t>(), vs.get<float>(), n_blocks,
                                            scratch.get<float>(), nullptr));
    // hattn_fwd_fp8 and then every extra forward on the inputs now quantized.
    // O is poisoned (all-ones bf16: NaN) before each, so a forward that writes nothing shows.
    constexpr int kPoisonByte = 0xFF;
    auto run_all = [&](double* rmse, std::vector<double>* extra) -> bool {
        HATTN_ACC_CUDA(cudaMemset(o.get(), kPoisonByte, n * 2));
        HATTN_ACC_CALL(hattn_fwd_fp8(&f, nullptr));
        if (!measure_o(rmse)) return false;
        extra->assign(c.extra_forwards.size(), 0.0);
        for (size_t i = 0; i < c.extra_forwards.size(); ++i) {
            HATTN_ACC_CUDA(cudaMemset(o.get(), kPoisonByte, n * 2));
            HATTN_ACC_CALL(c.extra_forwards[i](&f, nullptr));
            if (!measure_o(&(*extra)[i])) return false;
        }
        return true;
    };
    // The floor of the inputs as quantized now: float64 attention of their dequantized values
    // against the same reference (no kernel: P, its sums and the accumulations stay exact).
    std::vector<double> ref_deq_h(n_ref);
    auto measure_floor = [&](double* rmse) -> bool {
        const int grid = grid_for(n);
        dequantize_kernel<<<grid, kThreads>>>(q8.get<uint8_t>(), qs.get<float>(), n, c.seqlen, c.heads, c.head_dim,
                                              q_deq.get<uint16_t>());
        dequantize_kernel<<<grid, kThreads>>>(k8.get<uint8_t>(), ks.get<float>(), n, c.seqlen, c.heads, c.head_dim,
                                              k_deq.get<uint16_t>());
        dequantize_kernel<<<grid, kThreads>>>(v8.get<uint8_t>(), vs.get<float>(), n, c.seqlen, c.heads, c.head_dim,
                                              v_deq.get<uint16_t>());
        HATTN_ACC_CUDA(cudaGetLastError());
        const hattn_fwd_params deq = hattn_fwd_params_contiguous(q_deq.get(), k_deq.get(), v_deq.get(), nullptr,
                                                                 c.batch, c.heads, c.heads, c.seqlen, c.seqlen,
                                                                 c.head_dim, HATTN_DTYPE_FP16);
        HATTN_ACC_CUDA(reference_fwd_fp64_rows(deq, rows, ref_deq.get<double>(), nullptr, nullptr));
        HATTN_ACC_CUDA(cudaMemcpy(ref_deq_h.data(), ref_deq.get(), n_ref * sizeof(double), cudaMemcpyDeviceToHost));
        *rmse = rmse_between(ref_deq_h, ref_h);
        return true;
    };
    if (!measure_floor(&result->floor_per_tensor)) return false;
    if (!run_all(&result->rmse_per_tensor, &result->extra_per_tensor)) return false;

    // (b), (c): the pre-pass's block scales, without and with the Hadamard transform; then (c) with
    // one V descale per head, the pre-pass and the forward both told so.
    auto quantize = [&](int hadamard, unsigned flags) -> bool {
        hattn_fp8_prepass_params pp = hattn_fp8_prepass_params_contiguous(
            q.get(), k.get(), v.get(), q8.get(), k8.get(), v8.get(), qs.get<float>(), ks.get<float>(), vs.get<float>(),
            c.batch, c.heads, c.heads, c.seqlen, c.seqlen, c.head_dim, dtype);
        pp.hadamard = hadamard;
        pp.hadamard_seed = c.hadamard_seed;
        pp.flags = flags;
        HATTN_ACC_CALL(hattn_fp8_prepass(&pp, nullptr));
        return true;
    };
    for (int hadamard = 0; hadamard <= 1; ++hadamard) {
        if (!quantize(hadamard, 0)) return false;
        if (hadamard && !measure_floor(&result->floor_block_hadamard)) return false;
        if (!run_all(hadamard ? &result->rmse_block_hadamard : &result->rmse_block,
                     hadamard ? &result->extra_block_hadamard : &result->extra_block))
            return false;
    }
    if (!quantize(1, HATTN_FP8_PREPASS_V_PER_HEAD)) return false;
    HATTN_ACC_CUDA(cudaMemset(o.get(), kPoisonByte, n * 2));
    HATTN_ACC_CALL(hattn_fwd_fp8(&f, nullptr));
    if (!measure_o(&result->rmse_block_hadamard_v_head)) return false;
#undef HATTN_ACC_CUDA
#undef HATTN_ACC_CALL
    return true;
}

}  // namespace hattn::testing
