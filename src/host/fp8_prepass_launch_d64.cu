// hattn/src/host/fp8_prepass_launch_d64.cu -- instantiates the FP8 pre-pass for head_dim 64.
#include "host/fp8_prepass_launch.h"
#include "kernels/fp8_prepass.cuh"

namespace hattn::host {

cudaError_t launch_fp8_prepass_d64(const fp8::Fp8PrepassArgs& args, cudaStream_t stream, std::string* error) {
    return fp8::launch_fp8_prepass_head_dim<64>(args, stream, error);
}

}  // namespace hattn::host
