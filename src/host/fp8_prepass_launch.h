// hattn/src/host/fp8_prepass_launch.h -- the seam between the C API (fp8_prepass_api.cpp) and the
// pre-pass launchers (one translation unit per head dim, so they compile in parallel).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/fp8_prepass_args.h"

namespace hattn::host {

// Each returns cudaSuccess or the failing CUDA error; *error gets a message on failure.
cudaError_t launch_fp8_prepass_d64(const fp8::Fp8PrepassArgs& args, cudaStream_t stream, std::string* error);
cudaError_t launch_fp8_prepass_d128(const fp8::Fp8PrepassArgs& args, cudaStream_t stream, std::string* error);
cudaError_t launch_fp8_prepass_d256(const fp8::Fp8PrepassArgs& args, cudaStream_t stream, std::string* error);

}  // namespace hattn::host
