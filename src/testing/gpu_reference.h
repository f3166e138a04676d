// hattn/src/testing/gpu_reference.h -- plain GPU attention, forward and backward, for checking hattn_fwd
// and hattn_bwd at sizes the float64 CPU references (src/testing/cpu_reference.h) cannot reach. Used
// by the CLI and the large-shape GPU tests.
//
// Deliberately simple: CUDA cores only (no tensor cores, no TMA), fp32 scores and accumulation (the
// forward's row sum in fp64). Their error is ~1e-5 relative, two orders below a 16-bit kernel's, so
// they can judge one.
#pragma once

#include <cuda_runtime_api.h>

#include "hattn.h"

namespace hattn::reference {

// Relative error of reference_fwd's O with respect to max|v| (a bound with ~10x margin over what
// fp32 accumulation over 16k keys gives); fed to numerics::fwd_output_tolerance.
constexpr double kGpuReferenceRelError = 1e-5;

// Reads q, k, v through `params` (any strides, GQA/MQA, bottom-right causal mask, the params'
// softmax scale with 0 meaning 1/sqrt(head_dim); params.o, params.lse and params.flags are
// ignored) and writes
//   o:   [batch, seqlen_q, heads_q, head_dim] fp32, packed
//   lse: [batch, heads_q, seqlen_q] fp32, natural log, -inf for a row that sees no key (may be NULL)
// Rows that see no key get O = 0. Asynchronous on `stream`; returns the launch status
// (cudaErrorInvalidValue for a head_dim other than 64/128/256 or an unknown dtype).
cudaError_t reference_fwd(const hattn_fwd_params& params, float* o, float* lse, cudaStream_t stream);

// Relative error of reference_bwd's gradients with respect to their error weights (below): the
// same fp32-accumulation bound as the forward's; fed to numerics::bwd_gradient_tolerance.
constexpr double kGpuReferenceBwdRelError = 1e-5;

// Where reference_bwd writes, all fp32 and packed: dq* as [batch, seqlen_q, heads_q, head_dim], the
// others as [batch, seqlen_k, heads_kv, head_dim]. The weights are optional (NULL: not computed);
// they are those of hattn::test::reference_attention_backward_fp64 (src/testing/cpu_reference.h),
// which numerics::bwd_gradient_tolerance explains:
//   dv_weight[j, c] = sum_(h, i) P_ij |dO_i[c]|
//   dk_weight[j, c] = scale * sum_(h, i) |dS_ij| |q_i[c]|
//   dq_weight[i, c] = scale * sum_j |dS_ij| |k_j[c]|
//   dk_cancel[j, c] = scale * sum_(h, i) P_ij (|dO_i| . |v_j| + |dO_i| . |O_i|) |q_i[c]|
//   dq_cancel[i, c] = scale * sum_j P_ij (|dO_i| . |v_j| + |dO_i| . |O_i|) |k_j[c]|
// with (h, i) running over the query heads of the KV head's group and the rows that see key j.
struct BwdReferenceOutputs {
    float* dq = nullptr;
    float* dk = nullptr;
    float* dv = nullptr;
    float* dq_weight = nullptr;
    float* dk_weight = nullptr;
    float* dv_weight = nullptr;
    float* dq_cancel = nullptr;
    float* dk_cancel = nullptr;
};

// The backward for the forward that produced params.o and params.lse: reads q, k, v, o, dout and
// lse through `params` (any strides, GQA/MQA, the causal mask, the scale; dq/dk/dv/workspace/flags
// are ignored) and computes in fp32 on CUDA cores
//   D_i = rowsum(dO_i * O_i);  P_ij = exp(scale * q_i . k_j - lse_i);  dP_ij = dO_i . v_j;
//   dS_ij = P_ij (dP_ij - D_i);  dQ_i = scale sum_j dS_ij k_j;  dK_j = scale sum_(h,i) dS_ij q_i;
//   dV_j = sum_(h,i) P_ij dO_i
// (dQ: each query row loops over its keys; dK and dV: each key loops over its group's query heads
// and their rows). Rows that see no key get dQ = 0, keys no row sees get
// dK = dV = 0. Asynchronous on `stream` (its scratch is stream-ordered); returns the launch status
// (cudaErrorInvalidValue for an unsupported head_dim or dtype, or a NULL dq/dk/dv).
cudaError_t reference_bwd(const hattn_bwd_params& params, const BwdReferenceOutputs& out, cudaStream_t stream);

}  // namespace hattn::reference
