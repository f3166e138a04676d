// hattn/src/host/fwd_fp8_launch.h -- the seam between the FP8 forward's C API (fwd_fp8_api.cpp)
// and its kernel launcher (one translation unit per head dim).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "hattn.h"
#include "kernels/fwd_fp8_args.h"

namespace hattn::host {

// A kernel launch for any supported head dim (the default: launch_fwd_fp8_any below).
using Fp8Launch = cudaError_t (*)(const fwd_fp8::Fp8FwdArgs& args, cudaStream_t stream, std::string* error);

// hattn_fwd_fp8 with the given launch after the same checks: A/B builds of kernel variants
// (src/host/fwd_fp8_variants.h) run through exactly the public call's validation and set-up.
// grid_ctas is Fp8FwdArgs::grid_ctas (0: the launcher's rule; N > 0: at most N CTAs walking the
// tiles), which the C API leaves at 0: tests force multi-tile walks with it, A/B runs compare grids.
// section_heads is Fp8FwdArgs::section_heads (0: the scheduler's rule; N > 0: sections of N heads).
hattn_status fwd_fp8_with_launch(const hattn_fwd_fp8_params* params, cudaStream_t stream, Fp8Launch launch,
                                 int grid_ctas = 0, int section_heads = 0);
cudaError_t launch_fwd_fp8_any(const fwd_fp8::Fp8FwdArgs& args, cudaStream_t stream, std::string* error);

// cudaSuccess or the failing CUDA error; *error gets a readable message on failure.
cudaError_t launch_fwd_fp8_d64(const fwd_fp8::Fp8FwdArgs& args, cudaStream_t stream, std::string* error);
cudaError_t launch_fwd_fp8_d128(const fwd_fp8::Fp8FwdArgs& args, cudaStream_t stream, std::string* error);
cudaError_t launch_fwd_fp8_d256(const fwd_fp8::Fp8FwdArgs& args, cudaStream_t stream, std::string* error);

}  // namespace hattn::host
