// hattn/src/host/bwd_launch_d64.cu -- instantiates the backward kernels for head_dim 64.
#include "host/bwd_launch.h"
#include "kernels/bwd.cuh"

namespace hattn::host {

cudaError_t launch_bwd_d64(const bwd::BwdArgs& args, cudaStream_t stream, std::string* error) {
    return bwd::launch_bwd_head_dim<64>(args, stream, error);
}

}  // namespace hattn::host
