// hattn/src/testing/cpu_reference.h -- the float64 CPU references for forward and backward attention
// (small shapes), plus the 16-bit conversions and the comparison helper the tests use (from
// testing/numerics.h, shared with the CLI so both judge results the same way).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
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

// The softmax scale hattn uses for these params (0 selects 1/sqrt(head_dim)); hattn_fwd_params or
// hattn_bwd_params.
template <class Params>
double resolved_scale(const Params& p) {
    return p.softmax_scale != 0.f ? static_cast<double>(p.softmax_scale) : 1.0 / std::sqrt(static_cast<double>(p.head_dim));
}

// q, k, v are host float copies laid out exactly as the params' strides describe (the params'
// own pointers are ignored: they are usually device pointers); `p` is hattn_fwd_params or
// hattn_bwd_params. O(batch*heads*sq*sk*d): keep the shapes small (a few hundred rows and keys).
template <class Params>
ReferenceResult reference_attention_fp64(const Params& p, const float* q, const float* k, const float* v) {
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

// Exact backward attention in float64, with the recomputed forward and the error weights the
// gradient tolerance needs (numerics::bwd_gradient_tolerance):
//   dq, dq_weight:         [batch, seqlen_q, heads_q, head_dim], packed
//   dk, dv, *_weight:      [batch, seqlen_k, heads_kv, head_dim], packed (dK, dV summed over each
//                          GQA group)
//   o, lse:                the forward, as reference_attention_fp64 returns it
// The weights are, per element, the sums of the magnitudes of the terms a kernel rounds:
//   dv_weight[j, c] = sum_(h, i) P_ij |dO_i[c]|
//   dk_weight[j, c] = scale * sum_(h, i) (|dS_ij| + P_ij Dabs_i) |q_i[c]|
//   dq_weight[i, c] = scale * sum_j (|dS_ij| + P_ij Dabs_i) |k_j[c]|,  Dabs_i = sum_c |dO_i[c] O_i[c]|
struct BackwardReferenceResult {
    std::vector<double> o, lse;
    std::vector<double> dq, dk, dv;
    std::vector<double> dq_weight, dk_weight, dv_weight;
};

// q, k, v, dout: host float copies laid out as the params' strides describe (as above). D_i =
// dO_i . O_i uses the exact recomputed O, or, when `o_for_d` is given (laid out as the params' o
// strides), that O instead: the 16-bit O a kernel actually received, to judge an implementation
// that reads it (the GPU reference). Rows that see no key get dq = 0; keys no row sees get
// dk = dv = 0. About four times the forward's cost: keep the shapes small.
inline BackwardReferenceResult reference_attention_backward_fp64(const hattn_bwd_params& p, const float* q,
                                                                 const float* k, const float* v, const float* dout,
                                                                 const float* o_for_d = nullptr) {
    const int d = p.head_dim;
    const int group = p.heads_q / p.heads_kv;
    const double scale = resolved_scale(p);
    ReferenceResult fwd = reference_attention_fp64(p, q, k, v);
    BackwardReferenceResult r;
    const size_t q_elems = static_cast<size_t>(p.batch) * p.seqlen_q * p.heads_q * d;
    const size_t kv_elems = static_cast<size_t>(p.batch) * p.seqlen_k * p.heads_kv * d;
    for (std::vector<double>* t : {&r.dq, &r.dq_weight}) t->assign(q_elems, 0.0);
    for (std::vector<double>* t : {&r.dk, &r.dv, &r.dk_weight, &r.dv_weight}) t->assign(kv_elems, 0.0);
    for (int b = 0; b < p.batch; ++b) {
        for (int h = 0; h < p.heads_q; ++h) {
            const int hk = h / group;
            for (int i = 0; i < p.seqlen_q; ++i) {
                const int n = visible_keys(i, p.seqlen_q, p.seqlen_k, p.causal != 0);
                if (n == 0) continue;  // dQ row stays 0, and the row adds nothing to dK, dV
                const float* qi = q + b * p.q_batch_stride + i * p.q_seq_stride + h * p.q_head_stride;
                const float* doi = dout + b * p.do_batch_stride + i * p.do_seq_stride + h * p.do_head_stride;
                const size_t q_row = ((static_cast<size_t>(b) * p.seqlen_q + i) * p.heads_q + h) * d;
                double row_d = 0, row_d_abs = 0;
                for (int c = 0; c < d; ++c) {
                    const double oc = o_for_d != nullptr
                                          ? o_for_d[b * p.o_batch_stride + i * p.o_seq_stride + h * p.o_head_stride + c]
                                          : fwd.o[q_row + c];
                    row_d += doi[c] * oc;
                    row_d_abs += std::fabs(doi[c] * oc);
                }
                const double lse = fwd.lse[(static_cast<size_t>(b) * p.heads_q + h) * p.seqlen_q + i];
                for (int j = 0; j < n; ++j) {
                    const float* kj = k + b * p.k_batch_stride + j * p.k_seq_stride + hk * p.k_head_stride;
                    const float* vj = v + b * p.v_batch_stride + j * p.v_seq_stride + hk * p.v_head_stride;
                    double dot = 0, dp = 0;
                    for (int c = 0; c < d; ++c) {
                        dot += static_cast<double>(qi[c]) * kj[c];
                        dp += static_cast<double>(doi[c]) * vj[c];
                    }
                    const double pij = std::exp(scale * dot - lse);
                    const double ds = pij * (dp - row_d);
                    const double ds_weight = std::fabs(ds) + pij * row_d_abs;
                    const size_t kv_row = ((static_cast<size_t>(b) * p.seqlen_k + j) * p.heads_kv + hk) * d;
                    for (int c = 0; c < d; ++c) {
                        r.dq[q_row + c] += scale * ds * kj[c];
                        r.dq_weight[q_row + c] += scale * ds_weight * std::fabs(kj[c]);
                        r.dk[kv_row + c] += scale * ds * qi[c];
                        r.dk_weight[kv_row + c] += scale * ds_weight * std::fabs(qi[c]);
                        r.dv[kv_row + c] += pij * doi[c];
                        r.dv_weight[kv_row + c] += pij * std::fabs(doi[c]);
                    }
                }
            }
        }
    }
    r.o = std::move(fwd.o);
    r.lse = std::move(fwd.lse);
    return r;
}

}  // namespace hattn::test
