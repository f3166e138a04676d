// hattn/test/gpu_test_util.h -- shared helpers for GPU tests.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

namespace hattn::test {

// Empty when a compute-capability-9.0 GPU is usable; otherwise why not.
inline std::string hopper_unavailable_reason() {
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess || count == 0) {
        cudaGetLastError();  // clear the sticky "no device" error for later calls
        return std::string("no CUDA device (") + cudaGetErrorString(rc) + ")";
    }
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    if (major != 9 || minor != 0) {
        return "device is sm_" + std::to_string(major) + std::to_string(minor) + ", these kernels need sm_90a (Hopper)";
    }
    return {};
}

}  // namespace hattn::test

// Skip (never silently pass) when there is no Hopper GPU.
#define HATTN_REQUIRE_HOPPER()                                                          \
    do {                                                                                \
        const std::string hattn_reason_ = ::hattn::test::hopper_unavailable_reason();   \
        if (!hattn_reason_.empty()) GTEST_SKIP() << "GPU test skipped: " << hattn_reason_; \
    } while (0)

// Fail the test (not just the statement) on any CUDA error.
#define HATTN_CUDA_CHECK(expr)                                                              \
    do {                                                                                    \
        cudaError_t hattn_rc_ = (expr);                                                     \
        ASSERT_EQ(hattn_rc_, cudaSuccess) << #expr << ": " << cudaGetErrorString(hattn_rc_); \
    } while (0)
