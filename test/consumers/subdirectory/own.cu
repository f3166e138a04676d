// The consumer's own CUDA code, compiled with the consumer's settings only (sm_80). Each check
// fails the build if one of hattn's private settings reached this file.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ != 800
#error "own.cu is being compiled for another architecture than the consumer's sm_80: hattn's -gencode leaked"
#endif
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
#error "own.cu is being compiled for sm_90a: hattn's -gencode leaked"
#endif
#ifdef __CUDACC_RELAXED_CONSTEXPR__
#error "hattn's --expt-relaxed-constexpr leaked into the consumer"
#endif
#ifdef HATTN_DEBUG_HANG
#error "hattn's HATTN_DEBUG_HANG definition leaked into the consumer"
#endif
#if __has_include("ptx/common.cuh") || __has_include("host/fwd_launch.h")
#error "hattn's source tree is on the consumer's include path"
#endif

#include <hattn.h>  // the public header must still be found

__global__ void consumer_scale(float* x, float a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

// Launches nothing: the check is that this file compiled as it did. Returns the version hattn's
// header announced to this translation unit.
int consumer_cuda_part() { return HATTN_VERSION; }
