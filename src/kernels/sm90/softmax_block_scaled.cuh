// hattn/src/kernels/sm90/softmax_block_scaled.cuh -- the online softmax for score blocks that each
// carry their own scale (the FP8 forward: S_j = raw_j * scale_j, scale_j = softmax scale x
// q_descale x k_descale(block j)), with an optional power-of-two gain on the exponentials.
//
// OnlineSoftmax (softmax.cuh) keeps the running max in raw score units and applies one scale to
// every block; with a scale per block the raw maxima of two blocks are not comparable. Here the
// running max is kept in scaled log2 units, m = max_j(max(raw_j) * scale_j * log2 e): the scale
// reaches the max once per row (scale_j >= 0, so max(raw * scale) = max(raw) * scale) and each
// score only through the exponent's FFMA, as before: no extra multiply per score.
//
// The gain: exponentials are computed as 2^(x - m + kGainLog2) = gain * p, p <= 1. The FP8 forward
// quantizes them to e4m3, whose normal range starts at 2^-6: the gain moves small weights out of
// the subnormals. O and the row sum carry the same gain, so O / sum is unchanged; only the LSE
// subtracts it.
#pragma once

#include <cmath>

#include "kernels/sm90/fragment.cuh"
#include "kernels/sm90/softmax.cuh"
#include "ptx/mufu.cuh"

namespace hattn::sm90 {

template <int kN, int kGainLog2 = 0>
struct BlockScaledSoftmax {
    static constexpr float kGainLog2f = static_cast<float>(kGainLog2);
    float max_log2[kAccRowsPerThread];  // running max of scaled scores, log2 units (-inf: none yet)
    float row_sum[kAccRowsPerThread];   // running sum of gain * p, per thread until finalize

    __device__ __forceinline__ void init() {
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
            max_log2[r] = -INFINITY;
            row_sum[r] = 0.f;
        }
    }

    // s holds raw scores (masked ones -inf); scale_log2 = this block's scale * log2 e, > 0.
    // Replaces s by gain * exp(scaled score - running max), sets o_scale to the factor by which O
    // and the sum must be rescaled.
    __device__ __forceinline__ void online_update(float (&s)[kN / 2], float scale_log2,
                                                  float (&o_scale)[kAccRowsPerThread]) {
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
            float m = -INFINITY;
#pragma unroll
            for (int i = 0; i < kN / 2; ++i)
                if (acc_row_half(i) == r) m = fmaxf(m, s[i]);
            m = fmaxf(max_log2[r], quad_max(m) * scale_log2);
            // A row with no visible key so far keeps m = -inf: exponentiate against 0 instead
            // (exp2(-inf - (-inf)) would be NaN).
            const float offset = (m == -INFINITY ? 0.f : m) - kGainLog2f;
            o_scale[r] = ptx::ex2_approx_f32(max_log2[r] - (m == -INFINITY ? 0.f : m));
            max_log2[r] = m;
            float sum = 0.f;
#pragma unroll
            for (int i = 0; i < kN / 2; ++i) {
                if (acc_row_half(i) == r) {
                    s[i] = ptx::ex2_approx_f32(fmaf(s[i], scale_log2, -offset));
                    sum += s[i];
                }
            }
            row_sum[r] = row_sum[r] * o_scale[r] + sum;
        }
    }

    // inv_sum: what O is multiplied by (0 for a row that saw no key); lse: natural-log LSE (-inf
    // for such a row).
    __device__ __forceinline__ void finalize(float (&inv_sum)[kAccRowsPerThread], float (&lse)[kAccRowsPerThread]) const {
        constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
            const float sum = quad_sum(row_sum[r]);
            inv_sum[r] = sum == 0.f ? 0.f : 1.f / sum;
            lse[r] = sum == 0.f ? -INFINITY : (max_log2[r] - kGainLog2f) * kLn2 + logf(sum);
        }
    }
};

}  // namespace hattn::sm90
