// hattn/src/testing/cpu_reference.h -- the float64 CPU reference for forward attention (small shapes),
// plus the 16-bit conversions and the comparison helper the tests use (from testing/numerics.h,
// shared with the CLI so both judge results the same way).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "testing/numerics.h"
#include "hattn.h"

namespace hattn::test {

using numerics::bf16_to_float;
using numerics::compare;
using numerics::CompareResult;
using numerics::float_to_bf16;
using numerics::float_to_fp16;
using numerics::float_to_half;
using numerics::fp16_to_float;
using numerics::half_to_float;
using numerics::Tolerance;
using numerics::visible_keys;

// Exact attention in float64.
//   o:   [batch, seqlen_q, heads_q, head_dim], packed
//   lse: [batch, heads_q, seqlen_q], natural log; -inf for a row that sees no key
struct ReferenceResult {
    std::vector<double> o;
    std::vector<double> lse;
};

// The softmax scale hattn uses for these params (0 selects 1/sqrt(head_dim)).
inline double resolved_scale(const hattn_fwd_params& p) {
    return p.softmax_scale != 0.f ? static_cast<double>(p.softmax_scale) : 1.0 / std::sqrt(static_cast<double>(p.head_dim));
}

// q, k, v are host float copies laid out exactly as the params' strides describe (the params'
// own pointers are ignored: they are usually device pointers). O(batch*heads*sq*sk*d): keep
// the shapes small (a few hundred rows and keys).
inline ReferenceResult reference_attention_fp64(const hattn_fwd_params& p, const float* q, const float* k,
                                                const float* v) {
    const int d = p.head_dim;
    const int group = p.heads_q / p.heads_kv;  // query heads per KV head (GQA / MQA)
    const double scale = resolved_scale(p);
    ReferenceResult r;
    r.o.assign(static_cast<size_t>(p.batch) * p.seqlen_q * p.heads_q * d, 0.0);
    r.lse.assign(static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q, 0.0);
    std::vector<double> scores(static_cast<size_t>(p.seqlen_k));
    std::vector<double> acc(static_cast<size_t>(d));
    for (int b = 0; b < p.batch; ++b) {
        for (int h = 0; h < p.heads_q; ++h) {
            const int hk = h / group;
            for (int i = 0; i < p.seqlen_q; ++i) {
                const float* qi = q + b * p.q_batch_stride + i * p.q_seq_stride + h * p.q_head_stride;
                const int n = visible_keys(i, p.seqlen_q, p.seqlen_k, p.causal != 0);
                const size_t lse_index = (static_cast<size_t>(b) * p.heads_q + h) * p.seqlen_q + i;
                double* oi = &r.o[((static_cast<size_t>(b) * p.seqlen_q + i) * p.heads_q + h) * d];
                if (n == 0) {  // nothing to attend to: O = 0 (already), LSE = log(0)
                    r.lse[lse_index] = -std::numeric_limits<double>::infinity();
                    continue;
                }
                double row_max = -std::numeric_limits<double>::infinity();
                for (int j = 0; j < n; ++j) {
                    const float* kj = k + b * p.k_batch_stride + j * p.k_seq_stride + hk * p.k_head_stride;
                    double dot = 0;
                    for (int c = 0; c < d; ++c) dot += static_cast<double>(qi[c]) * kj[c];
                    scores[j] = scale * dot;
                    row_max = std::fmax(row_max, scores[j]);
                }
                double row_sum = 0;
                std::fill(acc.begin(), acc.end(), 0.0);
                for (int j = 0; j < n; ++j) {
                    const double pj = std::exp(scores[j] - row_max);
                    row_sum += pj;
                    const float* vj = v + b * p.v_batch_stride + j * p.v_seq_stride + hk * p.v_head_stride;
                    for (int c = 0; c < d; ++c) acc[c] += pj * vj[c];
                }
                for (int c = 0; c < d; ++c) oi[c] = acc[c] / row_sum;
                r.lse[lse_index] = row_max + std::log(row_sum);
            }
        }
    }
    return r;
}

}  // namespace hattn::test
