// hattn/src/testing/device_random.cuh -- filling device tensors with seeded N(0, 1) 16-bit values and
// poison patterns, without a host round trip (the CLI's tensors run to gigabytes).
//
// The generator is counter-based (a splitmix64 hash of seed and element index), so the values do
// not depend on the launch shape and any element can be regenerated on its own.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "hattn.h"

namespace hattn::testing {

namespace detail {

__host__ __device__ inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Box-Muller on two 24-bit uniforms from one hash. u1 in (0, 1] so log(u1) is finite.
__device__ inline float normal_from_hash(uint64_t h) {
    constexpr float kTwoPi = 6.2831853071795864f;
    constexpr float kInv2Pow24 = 1.0f / 16777216.0f;
    const float u1 = (static_cast<float>(h & 0xFFFFFFu) + 1.0f) * kInv2Pow24;
    const float u2 = static_cast<float>((h >> 24) & 0xFFFFFFu) * kInv2Pow24;
    return sqrtf(-2.0f * logf(u1)) * cosf(kTwoPi * u2);
}

template <bool kIsBf16>
__global__ void fill_normal_kernel(uint16_t* out, size_t n, uint64_t seed, float stddev) {
    const uint64_t salt = splitmix64(seed);
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const float x = stddev * normal_from_hash(splitmix64(salt ^ i));
        if constexpr (kIsBf16) {
            out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x));
        } else {
            out[i] = __half_as_ushort(__float2half_rn(x));
        }
    }
}

constexpr int kFillThreads = 256;
constexpr int kFillMaxBlocks = 4096;  // grid-stride loop beyond this

}  // namespace detail

// n values ~ N(0, stddev^2), rounded to the 16-bit dtype; asynchronous on `stream`.
inline cudaError_t fill_normal(void* out, size_t n, hattn_dtype dtype, uint64_t seed, float stddev,
                               cudaStream_t stream) {
    const size_t blocks_needed = (n + detail::kFillThreads - 1) / detail::kFillThreads;
    const int blocks = static_cast<int>(blocks_needed < detail::kFillMaxBlocks ? blocks_needed : detail::kFillMaxBlocks);
    if (blocks == 0) return cudaSuccess;
    auto* p = static_cast<uint16_t*>(out);
    if (dtype == HATTN_DTYPE_BF16) {
        detail::fill_normal_kernel<true><<<blocks, detail::kFillThreads, 0, stream>>>(p, n, seed, stddev);
    } else {
        detail::fill_normal_kernel<false><<<blocks, detail::kFillThreads, 0, stream>>>(p, n, seed, stddev);
    }
    return cudaGetLastError();
}

}  // namespace hattn::testing
