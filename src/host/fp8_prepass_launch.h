// hattn/src/host/fp8_prepass_launch.h -- the seam between the C API (fp8_prepass_api.cpp) and the
// pre-pass launchers (one translation unit per head dim, so they compile in parallel).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "hattn.h"
#include "kernels/fp8_prepass_args.h"

namespace hattn::host {

// Each returns cudaSuccess or the failing CUDA error; *error gets a message on failure.
cudaError_t launch_fp8_prepass_d64(const fp8::Fp8PrepassArgs& args, cudaStream_t stream, std::string* error);
cudaError_t launch_fp8_prepass_d128(const fp8::Fp8PrepassArgs& args, cudaStream_t stream, std::string* error);
cudaError_t launch_fp8_prepass_d256(const fp8::Fp8PrepassArgs& args, cudaStream_t stream, std::string* error);

// hattn_fp8_prepass with the kernel's layout chosen by the caller (tests of every variant, the A/B
// benchmark); the same validation and status. A variant that is not built (see
// kernels/fp8_prepass.cuh: variant_built) runs the round-2 layout; an unknown one is
// HATTN_ERROR_CUDA with nothing launched.
hattn_status fp8_prepass_variant(const hattn_fp8_prepass_params* params, fp8::Fp8PrepassVariant variant,
                                 cudaStream_t stream);

}  // namespace hattn::host
