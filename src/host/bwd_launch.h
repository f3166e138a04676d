// hattn/src/host/bwd_launch.h -- the seam between the C API (bwd_api.cpp: validation) and the
// backward launchers (one translation unit per head dim, so they compile in parallel).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/bwd_args.h"

namespace hattn::host {

// Each returns cudaSuccess or the failing CUDA error; *error gets a readable message on failure.
// The args are already validated (workspace included).
cudaError_t launch_bwd_d64(const bwd::BwdArgs& args, cudaStream_t stream, std::string* error);
cudaError_t launch_bwd_d128(const bwd::BwdArgs& args, cudaStream_t stream, std::string* error);
cudaError_t launch_bwd_d256(const bwd::BwdArgs& args, cudaStream_t stream, std::string* error);

}  // namespace hattn::host
