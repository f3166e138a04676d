// hattn/src/host/fwd_fp8_launch.h -- the seam between the FP8 forward's C API (fwd_fp8_api.cpp)
// and its kernel launcher (one translation unit per head dim).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/fwd_fp8_args.h"

namespace hattn::host {

// cudaSuccess or the failing CUDA error; *error gets a readable message on failure.
cudaError_t launch_fwd_fp8_d64(const fwd_fp8::Fp8FwdArgs& args, cudaStream_t stream, std::string* error);
cudaError_t launch_fwd_fp8_d128(const fwd_fp8::Fp8FwdArgs& args, cudaStream_t stream, std::string* error);
cudaError_t launch_fwd_fp8_d256(const fwd_fp8::Fp8FwdArgs& args, cudaStream_t stream, std::string* error);

}  // namespace hattn::host
