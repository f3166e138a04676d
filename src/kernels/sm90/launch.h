// hattn/src/kernels/sm90/launch.h -- host side of a kernel launch: the shared-memory opt-in and
// the launch itself, optionally as a programmatic dependent launch.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#ifndef HATTN_CACHE_LAUNCH_SETUP
#define HATTN_CACHE_LAUNCH_SETUP 0
#endif
#ifndef HATTN_PROGRAMMATIC_LAUNCH
#define HATTN_PROGRAMMATIC_LAUNCH 0
#endif

namespace hattn::sm90 {

// Kernels built for programmatic dependent launch call griddepcontrol.wait before their first
// global access and griddepcontrol.launch_dependents on their last tile; their launches then
// let them start while the previous grid in the stream drains.
constexpr bool kProgrammaticLaunch = HATTN_PROGRAMMATIC_LAUNCH != 0;

// Opts `kernel` into `bytes` of dynamic shared memory on the current device (above 48 KB a
// kernel must ask). With HATTN_CACHE_LAUNCH_SETUP each kernel (one `Tag` per instantiation)
// remembers in a function-local atomic, one bit per device, where it has asked, so later launches
// make no driver call; a launch that then fails asks again (launch_with_opt_in), which covers a
// device reset that dropped the attribute. Devices from the 64th on always ask.
template <class Tag, class Kernel>
cudaError_t opt_in_shared(Kernel kernel, int bytes, int device, bool force) {
    constexpr int kCachedDevices = 64;
    const uint64_t bit = HATTN_CACHE_LAUNCH_SETUP && device >= 0 && device < kCachedDevices ? uint64_t{1} << device : 0;
    static std::atomic<uint64_t> done{0};
    if (!force && (done.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
    const cudaError_t rc = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (rc == cudaSuccess) done.fetch_or(bit, std::memory_order_acq_rel);
    return rc;
}

template <class Tag, class Kernel, class... Args>
cudaError_t launch_with_opt_in(Kernel kernel, int ctas, int threads, int smem, cudaStream_t stream, int device,
                               const char** what, Args... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(ctas));
    cfg.blockDim = dim3(static_cast<unsigned>(threads));
    cfg.dynamicSmemBytes = static_cast<size_t>(smem);
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = kProgrammaticLaunch ? 1 : 0;
    for (int attempt = 0; attempt < 2; ++attempt) {
        *what = "cudaFuncSetAttribute";
        cudaError_t rc = opt_in_shared<Tag>(kernel, smem, device, attempt > 0);
        if (rc != cudaSuccess) return rc;
        *what = "kernel launch";
        rc = cudaLaunchKernelEx(&cfg, kernel, args...);
        if (rc == cudaSuccess) return rc;
        (void)cudaGetLastError();  // a failed launch configuration is not sticky: clear it
        if (!HATTN_CACHE_LAUNCH_SETUP || attempt > 0) return rc;
    }
    return cudaErrorUnknown;  // unreachable: the second attempt returns
}

}  // namespace hattn::sm90
