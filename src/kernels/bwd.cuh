// hattn/src/kernels/bwd.cuh -- backward attention (placeholder until the kernel lands).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/bwd_args.h"

namespace hattn::bwd {

template <int kHeadDim>
cudaError_t launch_bwd_head_dim(const BwdArgs&, cudaStream_t, std::string* error) {
    if (error) *error = "the backward kernel is not built yet";
    return cudaErrorNotSupported;
}

}  // namespace hattn::bwd
