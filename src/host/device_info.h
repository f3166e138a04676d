// hattn/src/host/device_info.h -- is a Hopper GPU usable here? Shared by tests and benchmarks
// so that all of them skip (never silently pass) for the same, clearly stated reason.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace hattn::host {

// Empty when a compute-capability-9.0 GPU is usable; otherwise why not.
inline std::string hopper_unavailable_reason() {
    int count = 0;
    const cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess || count == 0) {
        cudaGetLastError();  // clear the sticky "no device" error for later calls
        return std::string("no CUDA device (") + cudaGetErrorString(rc) + ")";
    }
    int device = 0, major = 0, minor = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (major != 9 || minor != 0) {
        return "device is sm_" + std::to_string(major) + std::to_string(minor) + ", these kernels need sm_90a (Hopper)";
    }
    return {};
}

}  // namespace hattn::host
