// STUB: replaced by the real kernel.
#pragma once
#include <cuda_runtime_api.h>
#include <string>
#include "fwd_args.h"
namespace hattn::fwd {
template <int kHeadDim>
cudaError_t launch_fwd_head_dim(const FwdArgs&, cudaStream_t, std::string* error) {
    if (error) *error = "not implemented";
    return cudaErrorNotSupported;
}
}
