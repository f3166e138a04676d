// hattn/src/kernels/sm90/softmax.cuh -- the online softmax of one warpgroup's score fragments,
// split into its steps so a mainloop can place each one where it overlaps best, and a backward
// pass can reuse the exponentiation against a stored LSE.
//
//   1. update_max:   new running row max; the factor exp(old max - new max) by which O and the
//                    running sum must be rescaled;
//   2. exponentiate: s <- exp(scale * s - scale * max) in place, accumulated into the row sum;
//   3. finalize:     1 / row sum for O, and LSE = scale * max + log(sum).
// With kLazy, online_update_speculative runs step 2 before step 1: the exps against the rows'
// current references, and a row max only in the rare step where a row's sum shows that its
// reference must move (the forward's unmasked steady state).
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
// ~9 issue slots each costs matter more there than the MUFU's time; on the speculative step too,
// 1 in 8 / 16 lost 2.4% (run 49a).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/sm90/exp2_poly.cuh"
#include "kernels/sm90/fragment.cuh"
#include "ptx/mufu.cuh"

namespace hattn::sm90 {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLazyMaxLagLog2 = 8.0f;  // P <= 256: far inside bf16/fp16, exact in fp32 sums
// online_update_speculative: a thread's share of a row's block sum up to this leaves the reference
// (every weight is then <= 2^12: exact in bf16 and below fp16's 65504).
constexpr float kSpeculativeSumLimit = 4096.f;
// Its reach: weights up to 2^100 are rescaled in place (2^-k stays a normal float); beyond, the
// scores are recomputed.
constexpr float kSpeculativeReach = 0x1p100f;
constexpr int kFloatExponentBias = 127;  // (kFloatMantissaBits: exp2_poly.cuh)

template <class To, class From>  // the same bits as another type (a register move on the device)
__host__ __device__ inline To same_bits(From x) {
    static_assert(sizeof(To) == sizeof(From), "same size");
    To y;
    std::memcpy(&y, &x, sizeof y);
    return y;
}
// The speculative step's move of a row's reference: for its largest weight top in (1, 2^126], the k
// with top * 2^-k in [1/2, 1) (top in [2^e, 2^(e+1)): k = e + 1), read off top's exponent field;
// 0 for top <= 1 (the reference stays). exp2_int(-k) is the exact factor 2^-k.
__host__ __device__ inline int reference_step_log2(float top) {
    return top > 1.f ? static_cast<int>(same_bits<uint32_t>(top) >> kFloatMantissaBits) - (kFloatExponentBias - 1) : 0;
}
__host__ __device__ inline float exp2_int(int k) {  // k in [-126, 127]
    return same_bits<float>(static_cast<uint32_t>(kFloatExponentBias + k) << kFloatMantissaBits);
}

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

    // kLazy only. The exps first, against the rows' current references, with no row max ahead of
    // them: the max's FMNMX tree and shuffles are ~15% of a d64 step's instructions, and every exp
    // waits for its whole dependency chain. A thread's share of a row's sum above
    // kSpeculativeSumLimit (or not finite) means some weight may have grown past it; then, a rare
    // step, each row of the warp moves its reference up by the power of two 2^k just above its
    // largest weight (exact: the weights, the sum and O are multiplied by 2^-k). Weights overflow
    // fp32 for scores 128 log2 units above the reference: when a row's largest weight is past
    // kSpeculativeReach (or infinite), `recompute` restores the warp's scores (from the tiles
    // in shared memory) and the step is online_update's. A warp with a row that has no reference
    // yet takes online_update directly. Returns as online_update.
    template <class Recompute>
    __device__ __forceinline__ bool online_update_speculative(float (&s)[kN / 2], float scale_log2,
                                                              float (&o_scale)[kAccRowsPerThread], Recompute&& recompute) {
        static_assert(kLazy, "the speculative step keeps the lazy reference");
        bool unset = false;
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) unset |= row_max[r] == -INFINITY;
        if (__any_sync(0xffffffffu, unset)) return online_update(s, scale_log2, o_scale);
        float part[kAccRowsPerThread];
        bool moved = false;
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
#pragma unroll
            for (int i = 0; i < kN / 2; ++i) {
                if (acc_row_half(i) != r) continue;
                s[i] = ptx::ex2_approx_f32(fmaf(s[i], scale_log2, -max_scaled[r]));
            }
            part[r] = row_sum_of(s, r);
            moved |= !(part[r] <= kSpeculativeSumLimit);
        }
        if (!__any_sync(0xffffffffu, moved)) {
#pragma unroll
            for (int r = 0; r < kAccRowsPerThread; ++r) row_sum[r] += part[r];
            return false;
        }
        float top[kAccRowsPerThread];
        bool far = false;
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
            top[r] = quad_max(row_max_of(s, r));  // >= every weight of the row
            far |= !(top[r] <= kSpeculativeReach);
        }
        if (__any_sync(0xffffffffu, far)) {
            recompute(s);
            return online_update(s, scale_log2, o_scale);
        }
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
            const int k = reference_step_log2(top[r]);  // the weights times 2^-k are below 1
            const float f = exp2_int(-k);
#pragma unroll
            for (int i = 0; i < kN / 2; ++i)
                if (acc_row_half(i) == r) s[i] *= f;
            o_scale[r] = f;
            row_sum[r] = (row_sum[r] + part[r]) * f;
            max_scaled[r] += static_cast<float>(k);
            row_max[r] = max_scaled[r] / scale_log2;
        }
        return true;
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
