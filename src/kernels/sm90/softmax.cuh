// hattn/src/kernels/sm90/softmax.cuh -- the online softmax of one warpgroup's score fragments,
// split into its steps so a mainloop can place each one where it overlaps best, and a backward
// pass can reuse the exponentiation against a stored LSE.
//
//   1. update_max:   new running row max; the factor exp(old max - new max) by which O and the
//                    running sum must be rescaled;
//   2. exponentiate: s <- exp(scale * s - scale * max) in place, accumulated into the row sum;
//   3. finalize:     1 / row sum for O, and LSE = scale * max + log(sum).
// exp(x) is computed as exp2(x * log2 e) with log2 e folded into the scale once (one FFMA and one
// MUFU.EX2 per score).
//
// kLazy (compile time): a row's exponent offset (its reference max) moves only when a block's max
//     exceeds it by more than kLazyMaxLagLog2 (log2 units), and a warp skips O's rescale when none
//     of its 16 rows moved (a warp vote). P then reaches up to 2^kLazyMaxLagLog2 instead of 1, which 16-bit
//     P and fp32 O and sums hold as exactly as before; once a row has seen its first blocks its
//     max rarely grows that much, so O's d/2 FMULs and the rescale's two exps per block go away.
// Every exp is on the MUFU: at d = 64, where the MUFU is as busy as the tensor cores, moving 1 of
// every 8 to the FMA pipe (sm90/exp2_poly.cuh) measured 5% slower (bench/RESULTS.md run 33): the
// ~9 issue slots each costs matter more there than the MUFU's time.
#pragma once

#include <cmath>

#include "kernels/sm90/fragment.cuh"
#include "ptx/mufu.cuh"

namespace hattn::sm90 {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLazyMaxLagLog2 = 8.0f;  // P <= 256: far inside bf16/fp16, exact in fp32 sums

template <int kN, bool kLazy = false>  // the score fragment is m64 x kN
struct OnlineSoftmax {
    float row_max[kAccRowsPerThread];     // running max of raw scores (-inf: nothing seen yet);
                                          // with kLazy the reference max, which may lag behind
    float row_sum[kAccRowsPerThread];     // running sum of exps, per thread until finalize
    float max_scaled[kAccRowsPerThread];  // row_max * scale_log2, the exponent's offset

    __device__ __forceinline__ void init() {
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
            row_max[r] = -INFINITY;
            row_sum[r] = 0.f;
            max_scaled[r] = 0.f;  // the lazy update leaves it alone until a row of the warp moves
        }
    }

    // Returns whether O must be rescaled by o_scale before the next P V (always, unless kLazy;
    // then the same value in every lane of the warp, and o_scale is only set when true).
    __device__ __forceinline__ bool update_max(const float (&s)[kN / 2], float scale_log2,
                                               float (&o_scale)[kAccRowsPerThread]) {
        if constexpr (!kLazy) {
#pragma unroll
            for (int r = 0; r < kAccRowsPerThread; ++r) {
                float m = fmaxf(row_max[r], row_max_of(s, r));
                m = quad_max(m);
                // A row whose keys were all masked so far keeps max = -inf; exponentiate against 0
                // instead, so that exp2(-inf - (-inf)) never produces a NaN.
                max_scaled[r] = (m == -INFINITY) ? 0.f : m * scale_log2;
                o_scale[r] = ptx::ex2_approx_f32(row_max[r] * scale_log2 - max_scaled[r]);
                row_max[r] = m;
            }
            return true;
        } else {
            float block_max[kAccRowsPerThread];
            bool need[kAccRowsPerThread];
            bool any = false;
#pragma unroll
            for (int r = 0; r < kAccRowsPerThread; ++r) {
                block_max[r] = quad_max(row_max_of(s, r));
                // -inf reference (no key yet) and a finite block max: +inf > limit, moves. Both
                // -inf: NaN, stays (the row has still nothing to attend to).
                need[r] = (block_max[r] - row_max[r]) * scale_log2 > kLazyMaxLagLog2;
                any |= need[r];
            }
            const bool rescale = __any_sync(0xffffffffu, any);
            if (rescale) {
#pragma unroll
                for (int r = 0; r < kAccRowsPerThread; ++r) {
                    const float ref = need[r] ? block_max[r] : row_max[r];
                    const float ref_scaled = (ref == -INFINITY) ? 0.f : ref * scale_log2;
                    o_scale[r] = ptx::ex2_approx_f32(row_max[r] * scale_log2 - ref_scaled);  // 1 if it stays
                    row_sum[r] *= o_scale[r];
                    row_max[r] = ref;
                    max_scaled[r] = ref_scaled;
                }
            }
            return rescale;
        }
    }

    __device__ __forceinline__ void exponentiate(float (&s)[kN / 2], float scale_log2,
                                                 const float (&o_scale)[kAccRowsPerThread]) {
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
#pragma unroll
            for (int i = 0; i < kN / 2; ++i)
                if (acc_row_half(i) == r) s[i] = ptx::ex2_approx_f32(fmaf(s[i], scale_log2, -max_scaled[r]));
            const float sum = row_sum_of(s, r);
            if constexpr (kLazy) row_sum[r] += sum;  // rescaled in update_max, when it moved
            else row_sum[r] = row_sum[r] * o_scale[r] + sum;
        }
    }

    // Steps 1 and 2 back to back, the forward's usual order.
    __device__ __forceinline__ bool online_update(float (&s)[kN / 2], float scale_log2,
                                                  float (&o_scale)[kAccRowsPerThread]) {
        const bool rescale = update_max(s, scale_log2, o_scale);
        exponentiate(s, scale_log2, o_scale);
        return rescale;
    }

    // inv_sum: what O is multiplied by (0 for a row that saw no key); lse: natural-log LSE
    // (-inf for such a row). Reduces the per-thread sums over the quad.
    __device__ __forceinline__ void finalize(float scale, float (&inv_sum)[kAccRowsPerThread],
                                             float (&lse)[kAccRowsPerThread]) const {
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
            const float sum = quad_sum(row_sum[r]);
            // sum == 0: the row saw no key. A NaN sum (a NaN input) stays NaN in O and in LSE.
            inv_sum[r] = sum == 0.f ? 0.f : 1.f / sum;
            lse[r] = sum == 0.f ? -INFINITY : row_max[r] * scale + logf(sum);
        }
    }
};

}  // namespace hattn::sm90
