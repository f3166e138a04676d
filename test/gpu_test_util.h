// hattn/test/gpu_test_util.h -- shared helpers for GPU tests.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

#include "host/device_info.h"

namespace hattn::test {

using hattn::host::hopper_unavailable_reason;

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
