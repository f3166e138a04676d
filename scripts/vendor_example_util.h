// hattn/scripts/vendor_example_util.h -- host helpers of the two vendoring examples
// (vendor_example.cu, vendor_bwd_example.cu): bf16 conversions, a seeded generator and a CUDA
// return-code check. Not part of what a vendoring user copies; only the examples include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace vendor_example {

// bf16 <-> float on the host, round-to-nearest-even (inputs are finite).
inline uint16_t float_to_bf16(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>(bits >> 16);
}
inline float bf16_to_float(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float x;
    std::memcpy(&x, &bits, sizeof(x));
    return x;
}

// Uniform in [-1, 1) from a 64-bit LCG; good enough for a smoke test.
inline float next_uniform(uint64_t* state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((*state >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
}

}  // namespace vendor_example

// Returns 1 from the enclosing function when a CUDA call fails.
#define CHECK_CUDA(expr)                                                                           \
    do {                                                                                           \
        const cudaError_t rc_ = (expr);                                                            \
        if (rc_ != cudaSuccess) {                                                                  \
            std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(rc_));               \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
