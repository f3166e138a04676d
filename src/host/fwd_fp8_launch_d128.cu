// hattn/src/host/fwd_fp8_launch_d128.cu -- instantiates the FP8 forward kernel for head_dim 128.
#include "host/fwd_fp8_launch.h"
#include "kernels/fwd_fp8.cuh"

namespace hattn::host {

cudaError_t launch_fwd_fp8_d128(const fwd_fp8::Fp8FwdArgs& args, cudaStream_t stream, std::string* error) {
    return fwd_fp8::launch_fwd_fp8_head_dim<128>(args, stream, error);
}

}  // namespace hattn::host
