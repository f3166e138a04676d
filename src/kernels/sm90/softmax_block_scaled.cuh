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
//
// Every exponential is on the MUFU: moving 1-3 of every 8 of a row's weights to the FMA pipe
// (sm90/exp2_poly.cuh, degree 3) measured 3-9% slower on the H200 (bench/RESULTS.md run 26):
// each one moved costs ~7 issue slots, and issue, not the MUFU, bounds this softmax. Tried again
// on the row-sum and early-exp kernels, whose SASS counts looked MUFU-bound (~800 issue against
// 1024 MUFU cycles per scheduler and block at d128), with degree 2: 1 group of 16 -0.3 to -1.7%,
// 1 of 8 -2 to -6% at d128, 1 of 8 / 1 of 4 -1 to -5% / -4 to -8% at d64 (run 62c, H100).
//
// LazyBlockScaledSoftmax (below) is the variant that rarely rescales O; see there.
#pragma once

#include <cmath>

#include "kernels/sm90/fragment.cuh"
#include "kernels/sm90/softmax.cuh"
#include "ptx/mufu.cuh"

namespace hattn::sm90 {

// Both softmaxes' last step from each row's whole sum: inv_sum is what O is multiplied by (0 for a
// row that saw no key), lse the natural-log LSE (-inf for such a row), from each row's exponent
// offset in log2 units (with the gain still in it).
__device__ __forceinline__ void finalize_log2_row_sums(const float (&sum)[kAccRowsPerThread],
                                                       const float (&offset_log2)[kAccRowsPerThread], float gain_log2,
                                                       float (&inv_sum)[kAccRowsPerThread],
                                                       float (&lse)[kAccRowsPerThread]) {
    constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
    for (int r = 0; r < kAccRowsPerThread; ++r) {
        inv_sum[r] = sum[r] == 0.f ? 0.f : 1.f / sum[r];
        lse[r] = sum[r] == 0.f ? -INFINITY : (offset_log2[r] - gain_log2) * kLn2 + logf(sum[r]);
    }
}
// The same from per-thread partial sums (reduced over the quad first).
__device__ __forceinline__ void finalize_log2_rows(const float (&row_sum)[kAccRowsPerThread],
                                                   const float (&offset_log2)[kAccRowsPerThread], float gain_log2,
                                                   float (&inv_sum)[kAccRowsPerThread], float (&lse)[kAccRowsPerThread]) {
    float sum[kAccRowsPerThread];
#pragma unroll
    for (int r = 0; r < kAccRowsPerThread; ++r) sum[r] = quad_sum(row_sum[r]);
    finalize_log2_row_sums(sum, offset_log2, gain_log2, inv_sum, lse);
}

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
            float m = row_max_of(s, r);
            m = fmaxf(max_log2[r], quad_max(m) * scale_log2);
            // A row with no visible key so far keeps m = -inf: exponentiate against 0 instead
            // (exp2(-inf - (-inf)) would be NaN).
            const float offset = (m == -INFINITY ? 0.f : m) - kGainLog2f;
            o_scale[r] = ptx::ex2_approx_f32(max_log2[r] - (m == -INFINITY ? 0.f : m));
            max_log2[r] = m;
#pragma unroll
            for (int i = 0; i < kN / 2; ++i)
                if (acc_row_half(i) == r) s[i] = ptx::ex2_approx_f32(fmaf(s[i], scale_log2, -offset));
            const float sum = row_sum_of(s, r);
            row_sum[r] = row_sum[r] * o_scale[r] + sum;
        }
    }

    // inv_sum: what O is multiplied by (0 for a row that saw no key); lse: natural-log LSE (-inf
    // for such a row).
    __device__ __forceinline__ void finalize(float (&inv_sum)[kAccRowsPerThread], float (&lse)[kAccRowsPerThread]) const {
        finalize_log2_rows(row_sum, max_log2, kGainLog2f, inv_sum, lse);
    }
};

// The lazy variant: O is rescaled only when some row of the warp needs it, and V's per-block
// descale goes into P's exponent instead of into O's unit.
//
// BlockScaledSoftmax moves the running max every block and rescales O by the change (64 FMUL per
// thread and block at head_dim 128, plus O's unit change when V's descale changes, which it does
// from block to block with per-block quantization). Here each row keeps a reference R (scaled
// log2 units) that moves only when a block's max exceeds it by more than its headroom: P is
// computed as 2^(x + log2 v_ds - R + gain) with x the scaled score, so the largest weight is at
// most gain * 2^headroom = 2^kLazyWeightCapLog2, still inside e4m3's range (448). V's descale
// v_ds in P's exponent makes P_j V_j codes = p v_j / 2^(R - gain): O accumulates in one unit for
// the whole row, while the row sum adds the block's sum of P times 1 / v_ds (one FFMA per row and
// block). A warp skips O's rescale when none of its 16 rows moved (a warp vote).
//
// The gain is a runtime value here (gain_log2, set by init): it trades the weights' precision at
// the small end for fewer rescales, each power of two taken from it one more unit of headroom
// (headroom = 8.75 - gain: 0.75 at gain 2^8, 2.75 at 2^6). With N(0, 1) scores a 128-key block's
// max grows past a warp's 16 references by more than 0.75 in about half the blocks of a 2k-key
// row (a quarter at 8k), by more than 2.75 in 2-3%; the cost is the smallest weights: e4m3's
// subnormals start at 2^-6 / gain of the reference, and weights below 2^-10 / gain round to 0.
// A V block of all zeros (descale 0) takes v_ds = 1 here: its codes are 0, P V adds nothing.
constexpr float kLazyWeightCapLog2 = 8.75f;  // 2^8.75 = 430.5 <= 448, e4m3's largest finite value
constexpr float kLazyMaxGainLog2 = 8.f;      // gains from 0 to this (and so headroom >= 0.75)
static_assert(kLazyWeightCapLog2 < 8.8073549f, "the largest weight must stay below e4m3's 448 = 2^8.807");
// online_update_early's reach: weights taken against a reference up to this far below a block's
// max (log2 units) are at most 2^(kEarlyExpReachLog2 + gain), finite in fp32 (static_assert below).
constexpr float kEarlyExpReachLog2 = 100.f;
//
// Descale groups: a KV block of kN columns may span several descale blocks of K and V (the FP8
// forward's 192-key blocks against 128-row descale blocks). Its columns are then kGroups equal
// slices, each inside one descale block, each with its own score scale and V shift: the row max
// is taken per slice (the same FMNMX count), each slice's max scaled before the maxima meet (one
// FFMA per slice and row), each exponent's FFMA reads its slice's scale and offset (free: an FFMA
// takes its multiplier from a register either way), and each slice's sum enters the row sum with
// its own 1 / v_ds. kGroups = 1 is the one-scale-per-block case.
//
// kRowSums = false: no row sums here (no FADD per weight); the caller has them from elsewhere (the
// FP8 forward's 64 x 8 GEMM of P against a tile of ones, each block's sum times its 1 / v_ds) and
// hands them to finalize_with_sums.

template <int kN, int kGroups = 1, bool kRowSums = true>
struct LazyBlockScaledSoftmax {
    static constexpr int kRegs = kN / 2;                 // accumulator registers per thread
    static constexpr int kGroupRegs = kRegs / kGroups;   // registers of one descale group
    static_assert(kRegs % kGroups == 0 && kGroupRegs % 4 == 0, "descale groups of whole n8 column groups");
    static_assert(kEarlyExpReachLog2 + kLazyMaxGainLog2 < 127.f, "online_update_early's weights must stay finite in fp32");
    float gain_log2;                    // P's gain, 0 .. kLazyMaxGainLog2 (the caller's, per tile)
    float ref_log2[kAccRowsPerThread];  // R per row: scaled log2 score + log2 v_ds (-inf: no key yet)
    float row_sum[kAccRowsPerThread];   // sum of 2^(x - R + gain) over the keys so far, per thread

    // How far a block's max may lie above a reference before the reference moves.
    __device__ __forceinline__ float headroom_log2() const { return kLazyWeightCapLog2 - gain_log2; }

    __device__ __forceinline__ void init(float gain) {
        gain_log2 = gain;
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
            ref_log2[r] = -INFINITY;
            row_sum[r] = 0.f;
        }
    }

    // V's descale of a group as it enters P: log2 and reciprocal of v_ds (1 for v_ds = 0).
    struct VShift {
        float log2, inv;
    };
    static __device__ __forceinline__ VShift v_shift(float v_ds) {
        const float v = v_ds > 0.f ? v_ds : 1.f;
        return {__log2f(v), __fdividef(1.f, v)};
    }

    // Row r's (r = 0, 1: the thread's two rows) block max in scaled log2 units with V's shift,
    // over the quad (-inf: no visible key in this block).
    static __device__ __forceinline__ float block_max_of(const float (&s)[kRegs], const float (&scale_log2)[kGroups],
                                                         const VShift (&v)[kGroups], int r) {
        float m = -INFINITY;
        static_for<kGroups>([&](auto group) {
            constexpr int g = decltype(group)::value, kFirst = g * kGroupRegs;
            m = fmaxf(m, fmaf(row_max_of<kRegs, kFirst, kGroupRegs>(s, r), scale_log2[g], v[g].log2));
        });
        return quad_max(m);
    }
    // Row r's scores -> 2^(x + log2 v_ds - against + gain) in place; its sum over this thread's
    // columns (each group's times 1 / v_ds) added to `sum` (kRowSums).
    __device__ __forceinline__ void exponentiate_row(float (&s)[kRegs], const float (&scale_log2)[kGroups],
                                                     const VShift (&v)[kGroups], int r, float against, float& sum) const {
        static_for<kGroups>([&](auto group) {
            constexpr int g = decltype(group)::value, kFirst = g * kGroupRegs;
            const float offset = against - v[g].log2 - gain_log2;
#pragma unroll
            for (int i = kFirst; i < kFirst + kGroupRegs; ++i)
                if (acc_row_half(i) == r) s[i] = ptx::ex2_approx_f32(fmaf(s[i], scale_log2[g], -offset));
            if constexpr (kRowSums) sum = fmaf(row_sum_of<kRegs, kFirst, kGroupRegs>(s, r), v[g].inv, sum);
        });
    }

    // s: raw scores (masked ones -inf); scale_log2[g] = the K descale group g's score scale * log2 e,
    // > 0. Replaces s by P. Returns true (the same in every lane of the warp) when O must be rescaled
    // by o_scale before P V; o_scale is left untouched otherwise.
    __device__ __forceinline__ bool online_update(float (&s)[kRegs], const float (&scale_log2)[kGroups],
                                                  const VShift (&v)[kGroups], float (&o_scale)[kAccRowsPerThread]) {
        float block_max[kAccRowsPerThread];
        bool need[kAccRowsPerThread];
        bool any = false;
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
            block_max[r] = block_max_of(s, scale_log2, v, r);
            need[r] = block_max[r] > ref_log2[r] + headroom_log2();
            any |= need[r];
        }
        const bool rescale = __any_sync(0xffffffffu, any);
        if (rescale) {
#pragma unroll
            for (int r = 0; r < kAccRowsPerThread; ++r) {
                const float ref = need[r] ? block_max[r] : ref_log2[r];
                o_scale[r] = need[r] ? ptx::ex2_approx_f32(ref_log2[r] - ref) : 1.f;  // 0 from -inf
                if constexpr (kRowSums) row_sum[r] *= o_scale[r];
                ref_log2[r] = ref;
            }
        }
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
            // A row with no visible key so far keeps R = -inf: exponentiate against 0 (its scores
            // are all -inf) instead of NaN.
            exponentiate_row(s, scale_log2, v, r, ref_log2[r] == -INFINITY ? 0.f : ref_log2[r], row_sum[r]);
        }
        return rescale;
    }

    // The speculative form of online_update (the FP8 forward's Tuning::kEarlyExp): the weights are
    // exponentiated against the rows' current references R before the block's max is known, so
    // the max's FMNMX tree and its shuffles run beside the exps instead of ahead of them (they
    // were a fifth of the d128 step's warp time, a chain of dependent ops the exps waited for).
    // When no row of the warp grew by more than its headroom -- what online_update would
    // have found too -- the weights are already right. A row that did takes its new R as before,
    // and its weights, computed against the old R (or 0 while R was -inf), are multiplied by
    // 2^(old - new): one FMUL each, in the rare steps that rescale O anyway. Weights overflow fp32
    // once a score lies 128 - gain above the R they were taken against; when some row of the warp
    // lies more than kEarlyExpReachLog2 above it, nothing is changed and false is returned: the
    // caller recomputes the scores and calls online_update. Otherwise returns true, with
    // `rescale` as online_update's return value.
    __device__ __forceinline__ bool online_update_early(float (&s)[kRegs], const float (&scale_log2)[kGroups],
                                                        const VShift (&v)[kGroups], float (&o_scale)[kAccRowsPerThread],
                                                        bool& rescale) {
        float block_max[kAccRowsPerThread], against[kAccRowsPerThread], part[kAccRowsPerThread];
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
            block_max[r] = block_max_of(s, scale_log2, v, r);
            against[r] = ref_log2[r] == -INFINITY ? 0.f : ref_log2[r];
        }
        // (The weights overwrite the scores: the max above reads them first, and nothing below
        // depends on it, so the scheduler is free to interleave the two.)
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
            part[r] = 0.f;
            exponentiate_row(s, scale_log2, v, r, against[r], part[r]);
        }
        bool need[kAccRowsPerThread];
        bool any = false, far = false;
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
            need[r] = block_max[r] > ref_log2[r] + headroom_log2();
            any |= need[r];
            far |= block_max[r] - against[r] > kEarlyExpReachLog2;  // (+inf scores too)
        }
        rescale = __any_sync(0xffffffffu, any);
        if (rescale) {
            if (__any_sync(0xffffffffu, far)) return false;
            float fix[kAccRowsPerThread];
#pragma unroll
            for (int r = 0; r < kAccRowsPerThread; ++r) {
                const float ref = need[r] ? block_max[r] : ref_log2[r];
                o_scale[r] = need[r] ? ptx::ex2_approx_f32(ref_log2[r] - ref) : 1.f;  // 0 from -inf
                fix[r] = need[r] ? ptx::ex2_approx_f32(against[r] - ref) : 1.f;
                if constexpr (kRowSums) row_sum[r] *= o_scale[r];
                part[r] *= fix[r];
                ref_log2[r] = ref;
            }
            rescale_rows(s, fix);
        }
        if constexpr (kRowSums) {
#pragma unroll
            for (int r = 0; r < kAccRowsPerThread; ++r) row_sum[r] += part[r];
        }
        return true;
    }

    // As BlockScaledSoftmax::finalize; O needs no unit (V's descales are in P).
    __device__ __forceinline__ void finalize(float (&inv_sum)[kAccRowsPerThread], float (&lse)[kAccRowsPerThread]) const {
        static_assert(kRowSums, "without its own row sums: finalize_with_sums");
        finalize_log2_rows(row_sum, ref_log2, gain_log2, inv_sum, lse);
    }
    // kRowSums = false: each row's whole sum of the weights (in the same units, gain included).
    __device__ __forceinline__ void finalize_with_sums(const float (&sum)[kAccRowsPerThread],
                                                       float (&inv_sum)[kAccRowsPerThread],
                                                       float (&lse)[kAccRowsPerThread]) const {
        finalize_log2_row_sums(sum, ref_log2, gain_log2, inv_sum, lse);
    }
};

}  // namespace hattn::sm90
