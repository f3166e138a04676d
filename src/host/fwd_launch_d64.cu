// hattn/src/host/fwd_launch_d64.cu -- instantiates the forward kernel for head_dim 64.
#include "host/fwd_launch.h"
#include "kernels/fwd.cuh"

namespace hattn::host {

cudaError_t launch_fwd_d64(const fwd::FwdArgs& args, cudaStream_t stream, std::string* error) {
    return fwd::launch_fwd_head_dim<64>(args, stream, error);
}

}  // namespace hattn::host
