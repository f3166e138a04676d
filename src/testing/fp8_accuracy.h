// hattn/src/testing/fp8_accuracy.h -- how much accuracy the FP8 forward costs: the measurement of
// FlashAttention-3's Table 3, shared by `hattn accuracy-fp8` and test/fwd_fp8_accuracy_test.cu.
//
// Inputs Q, K, V ~ N(0, 1) + N(0, outlier_stddev^2) * Bernoulli(outlier_prob) (bf16), as in
// FlashAttention-3's accuracy experiment: rare large entries, as LLM activations have. O of four
// forwards is compared with the float64 attention of the UNQUANTIZED bf16 inputs:
//   bf16            hattn_fwd on the bf16 inputs (for scale);
//   per-tensor      e4m3 with ONE scale per tensor (amax of the whole tensor), no Hadamard:
//                   the plain FP8 baseline;
//   block           hattn_fp8_prepass's 128-row block scales, no Hadamard;
//   block+hadamard  the pre-pass with its random-sign Hadamard on Q and K (incoherent processing);
//                   and the same with one V descale per head (HATTN_FP8_PREPASS_V_PER_HEAD).
// For (a) and (c) also the floor: the float64 attention of the quantized inputs themselves.
// The three FP8 variants all run hattn_fwd_fp8; per-tensor fills every block's descale with the
// one tensor-wide value (hattn_fwd_fp8 takes per-block descales, and equal ones are a per-tensor
// scale).
//
// The float64 reference (reference_fwd_fp64_rows) runs on the GPU over `rows_per_head` query rows
// of every head, evenly spaced (all rows when rows_per_head >= seqlen), and the RMSE is taken over
// those rows: sqrt(mean over the rows' elements of (O - O_ref)^2).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hattn.h"

namespace hattn::testing {

// ---- Device helpers (contiguous [b, s, h, d] tensors; asynchronous on `stream`) ------------------

// n values x = N(0, 1) + (u < outlier_prob ? N(0, outlier_stddev^2) : 0), rounded to the 16-bit
// dtype; counter-based like fill_normal (device_random.cuh).
cudaError_t fill_normal_outliers(void* out, size_t n, hattn_dtype dtype, uint64_t seed, float outlier_prob,
                                 float outlier_stddev, cudaStream_t stream);

// Per-tensor e4m3 quantization of n 16-bit values: amax = max |x| over all of them,
// out = cvt.rn.satfinite.e4m3(x * 448 / amax) (zeros if amax is 0), and each of the n_descales
// entries of `descales` = amax / 448. `scratch`: 4 bytes of device memory.
cudaError_t quantize_e4m3_per_tensor(const void* x, size_t n, hattn_dtype dtype, uint8_t* out, float* descales,
                                     size_t n_descales, float* scratch, cudaStream_t stream);

// In-place RoPE of a contiguous 16-bit [batch, seqlen, heads, head_dim] tensor, in fp32 with the
// conventions and table layout of hattn_fp8_prepass (row i uses table row i + table_offset),
// rounded back to the dtype.
cudaError_t apply_rope_16bit(void* x, int batch, int seqlen, int heads, int head_dim, hattn_dtype dtype,
                             hattn_rope rope, const float* cos, const float* sin, int table_offset,
                             cudaStream_t stream);

// Which query rows reference_fwd_fp64_rows takes: row r of `rows` (rows <= seqlen_q) is
// floor(r * seqlen_q / rows). (Host and device: the reference kernel and the comparisons use it.)
#ifdef __CUDACC__
__host__ __device__
#endif
inline int reference_row(int r, int rows, int seqlen_q) {
    return static_cast<int>(static_cast<int64_t>(r) * seqlen_q / rows);
}

// Float64 attention on CUDA cores of params' 16-bit q, k, v (any strides, GQA/MQA, the causal
// mask and the scale, as reference_fwd) for `rows` query rows per (batch, head), chosen by
// reference_row. Writes o [batch, heads_q, rows, head_dim] and lse [batch, heads_q, rows]
// (natural log; may be NULL), both float64. A row that sees no key gets O = 0 and LSE = -inf.
cudaError_t reference_fwd_fp64_rows(const hattn_fwd_params& params, int rows, double* o, double* lse,
                                    cudaStream_t stream);

// ---- The measurement ---------------------------------------------------------------------------

// An FP8 forward with hattn_fwd_fp8's contract (a kernel variant, for an A/B of accuracy).
using Fp8Forward = std::function<hattn_status(const hattn_fwd_fp8_params*, cudaStream_t)>;

struct Fp8AccuracyConfig {
    int batch = 1;
    int heads = 4;
    int seqlen = 4096;
    int head_dim = 128;
    int rows_per_head = 1024;  // float64 reference rows per (batch, head); clamped to seqlen
    float outlier_prob = 0.001f;
    float outlier_stddev = 10.f;
    uint64_t seed = 0x5EEDull;
    uint64_t hadamard_seed = 42;
    // More FP8 forwards run on the same quantized inputs as hattn_fwd_fp8 in (a), (b) and (c),
    // against the same reference (Fp8AccuracyResult::extra_*, in this order).
    std::vector<Fp8Forward> extra_forwards;
};

struct Fp8AccuracyResult {
    int rows_per_head = 0;        // after clamping
    double o_rms = 0;             // RMS of the reference O over the checked rows (the error's scale)
    double rmse_bf16 = 0;         // hattn_fwd on the bf16 inputs
    double rmse_per_tensor = 0;   // (a) one scale per tensor, no Hadamard
    double rmse_block = 0;        // (b) 128-row block scales, no Hadamard
    double rmse_block_hadamard = 0;  // (c) block scales + random-sign Hadamard
    double rmse_block_hadamard_v_head = 0;  // (c) with one V descale per head (HATTN_*_V_PER_HEAD)
    // The floors: float64 attention of the dequantized e4m3 inputs of (a) and of (c), against the
    // same reference -- what e4m3's rounding of Q, K and V costs before any kernel rounds P or
    // accumulates (a kernel's RMSE minus its floor is the kernel's own share).
    double floor_per_tensor = 0;
    double floor_block_hadamard = 0;
    double reference_ms = 0;      // wall time of the float64 reference
    std::vector<double> extra_per_tensor, extra_block, extra_block_hadamard;  // per extra forward
};

// Runs the four forwards and the reference for one configuration on the current device. Returns
// false (with a message in *error) on a CUDA or hattn error.
bool measure_fp8_accuracy(const Fp8AccuracyConfig& config, Fp8AccuracyResult* result, std::string* error);

}  // namespace hattn::testing
