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
//   dq, dq_weight, dq_cancel:        [batch, seqlen_q, heads_q, head_dim], packed
//   dk, dv, dk/dv_weight, dk_cancel: [batch, seqlen_k, heads_kv, head_dim], packed (dK, dV summed
//                                    over each GQA group)
//   o, lse:                          the forward, as reference_attention_fp64 returns it
// Per element, the weights are the sums of the magnitudes of the terms a kernel rounds to 16 bits,
//   dv_weight[j, c] = sum_(h, i) P_ij |dO_i[c]|
//   dk_weight[j, c] = scale * sum_(h, i) |dS_ij| |q_i[c]|
//   dq_weight[i, c] = scale * sum_j |dS_ij| |k_j[c]|,
// and the cancel weights those of the fp32 quantities whose difference makes dS = P (dP - D),
//   dk_cancel[j, c] = scale * sum_(h, i) P_ij (|dO_i| . |v_j| + |dO_i| . |O_i|) |q_i[c]|
//   dq_cancel[i, c] = scale * sum_j P_ij (|dO_i| . |v_j| + |dO_i| . |O_i|) |k_j[c]|.
struct BackwardReferenceResult {
    std::vector<double> o, lse;
    std::vector<double> dq, dk, dv;
    std::vector<double> dq_weight, dk_weight, dv_weight;
    std::vector<double> dq_cancel, dk_cancel;
};

// q, k, v, dout: host float copies laid out as the params' strides describe (as above). D_i =
// dO_i . O_i uses `o_for_d` (laid out as the params' o strides) when given -- the 16-bit O a
// kernel received from the forward, so that its rounding is common to the kernel and the
// reference -- and the exact recomputed O otherwise. Rows that see no key get dq = 0; keys no row
// sees get dk = dv = 0. About four times the forward's cost: keep the shapes small.
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
    for (std::vector<double>* t : {&r.dq, &r.dq_weight, &r.dq_cancel}) t->assign(q_elems, 0.0);
    for (std::vector<double>* t : {&r.dk, &r.dv, &r.dk_weight, &r.dv_weight, &r.dk_cancel}) t->assign(kv_elems, 0.0);
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
                    double dot = 0, dp = 0, dp_abs = 0;
                    for (int c = 0; c < d; ++c) {
                        dot += static_cast<double>(qi[c]) * kj[c];
                        dp += static_cast<double>(doi[c]) * vj[c];
                        dp_abs += std::fabs(static_cast<double>(doi[c]) * vj[c]);
                    }
                    const double pij = std::exp(scale * dot - lse);
                    const double ds = pij * (dp - row_d);
                    const double ds_abs = scale * std::fabs(ds);
                    const double ds_cancel = scale * pij * (dp_abs + row_d_abs);
                    const size_t kv_row = ((static_cast<size_t>(b) * p.seqlen_k + j) * p.heads_kv + hk) * d;
                    for (int c = 0; c < d; ++c) {
                        r.dq[q_row + c] += scale * ds * kj[c];
                        r.dq_weight[q_row + c] += ds_abs * std::fabs(kj[c]);
                        r.dq_cancel[q_row + c] += ds_cancel * std::fabs(kj[c]);
                        r.dk[kv_row + c] += scale * ds * qi[c];
                        r.dk_weight[kv_row + c] += ds_abs * std::fabs(qi[c]);
                        r.dk_cancel[kv_row + c] += ds_cancel * std::fabs(qi[c]);
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
