// hattn/src/host/device_info.h -- is a Hopper GPU usable here? One answer, in words a user can act
// on, for the CLI, the tests and the benchmarks (so all of them skip or stop for the same reason).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "common/format.h"

namespace hattn::host {

// What running hattn takes. The driver must support the CUDA version hattn was built with
// (CUDART_VERSION: its runtime is linked in statically).
inline std::string hopper_requirements() {
    return common::format(
        "hattn needs an NVIDIA Hopper GPU (H100/H200, compute capability 9.0) and a driver that supports CUDA "
        "%d.%d or newer",
        CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
}

// Empty when CUDA sees at least one GPU; otherwise why not. Without any driver, cudaGetDeviceCount
// fails with cudaErrorInsufficientDriver ("CUDA driver version is insufficient"), which sends the
// reader looking for a driver update; cudaDriverGetVersion tells the two cases apart (it reports 0
// when no driver can be loaded).
inline std::string gpu_unavailable_reason() {
    int count = 0;
    const cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc == cudaSuccess && count > 0) return {};
    cudaGetLastError();  // clear the sticky error for later calls
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    if (rc == cudaErrorInsufficientDriver && driver == 0) {
        return "no CUDA driver or GPU (cudaGetDeviceCount: cudaErrorInsufficientDriver)";
    }
    if (rc == cudaErrorInsufficientDriver) {
        return common::format("the NVIDIA driver supports CUDA %d.%d, older than the CUDA %d.%d hattn was built with",
                              driver / 1000, driver % 1000 / 10, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    }
    if (rc == cudaSuccess || rc == cudaErrorNoDevice) {
        return "the driver sees no GPU (cudaGetDeviceCount: cudaErrorNoDevice)";
    }
    return common::format("no usable GPU (cudaGetDeviceCount: %s: %s)", cudaGetErrorName(rc), cudaGetErrorString(rc));
}

// Empty when the current device has compute capability 9.0; otherwise why not.
inline std::string hopper_unavailable_reason() {
    const std::string no_gpu = gpu_unavailable_reason();
    if (!no_gpu.empty()) return no_gpu;
    int device = 0;
    cudaDeviceProp prop;
    if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        const cudaError_t rc = cudaGetLastError();
        return common::format("cannot query the current device (%s)", cudaGetErrorName(rc));
    }
    if (prop.major != 9 || prop.minor != 0) {
        return common::format("device %d is %s (sm_%d%d); hattn's kernels need compute capability 9.0 (H100/H200)",
                              device, prop.name, prop.major, prop.minor);
    }
    return {};
}

}  // namespace hattn::host
