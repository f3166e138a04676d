// hattn/src/host/fwd_launch.h -- the seam between the C API (fwd_api.cpp: validation) and the
// kernel launchers (one translation unit per head dim, so they compile in parallel).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/fwd_args.h"

namespace hattn::host {

// Each returns cudaSuccess or the failing CUDA error; *error gets a readable message on failure.
// The args are already validated; `variant` holds the HATTN_FWD_* flag bits.
cudaError_t launch_fwd_d64(const fwd::FwdArgs& args, cudaStream_t stream, std::string* error);
cudaError_t launch_fwd_d128(const fwd::FwdArgs& args, cudaStream_t stream, std::string* error);
cudaError_t launch_fwd_d256(const fwd::FwdArgs& args, cudaStream_t stream, std::string* error);

}  // namespace hattn::host
