// hattn/src/host/fwd_launch_d256.cu -- instantiates the forward kernel for head_dim 256.
#include "host/fwd_launch.h"
#include "kernels/fwd.cuh"

namespace hattn::host {

cudaError_t launch_fwd_d256(const fwd::FwdArgs& args, cudaStream_t stream, std::string* error) {
    return fwd::launch_fwd_head_dim<256>(args, stream, error);
}

}  // namespace hattn::host
