// hattn/src/testing/gpu_reference.h -- a plain GPU attention for checking hattn_fwd at sizes the float64
// CPU reference (src/testing/cpu_reference.h) cannot reach. Used by the CLI and the large-shape GPU tests.
//
// Deliberately simple: CUDA cores only (no tensor cores, no TMA), fp32 scores and O accumulation,
// an online softmax with the row sum in fp64. Its error is ~1e-5 relative, two orders below a
// 16-bit kernel's, so it can judge one.
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

}  // namespace hattn::reference
