// hattn/test/gpu_test_util.h -- shared helpers for GPU tests.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hattn.h"
#include "host/device_info.h"

namespace hattn::test {

using hattn::host::hopper_unavailable_reason;

// A device allocation freed on scope exit (ptr is NULL if cudaMalloc failed).
struct DeviceMemory {
    void* ptr = nullptr;
    explicit DeviceMemory(size_t bytes) {
        if (cudaMalloc(&ptr, bytes) != cudaSuccess) ptr = nullptr;
    }
    ~DeviceMemory() {
        if (ptr != nullptr) cudaFree(ptr);
    }
    DeviceMemory(const DeviceMemory&) = delete;
    DeviceMemory& operator=(const DeviceMemory&) = delete;
};

// Where one [b, s, h, d] tensor lives: a buffer, an element offset into it, and strides.
struct Placement {
    int buffer = 0;
    int64_t offset = 0;
    int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;

    int64_t index(int b, int s, int h, int c) const {
        return offset + b * batch_stride + s * seq_stride + h * head_stride + c;
    }
};

// Padding the strided test layouts use: 8 elements = 16 bytes keeps every stride TMA-legal.
constexpr int64_t kRowPad = 8;
constexpr int64_t kBatchPad = 64;

// A [b, s, h, d] tensor in buffer `buffer`, each row of heads padded by seq_pad elements.
inline Placement bshd_placement(int buffer, int64_t d, int seqlen, int heads, int64_t seq_pad) {
    Placement p;
    p.buffer = buffer;
    p.head_stride = d;
    p.seq_stride = heads * d + seq_pad;
    p.batch_stride = seqlen * p.seq_stride;
    return p;
}

// A head-major [b, h, s, d + kRowPad] tensor with a batch stride padded by kBatchPad.
inline Placement bhsd_placement(int buffer, int64_t d, int seqlen, int heads) {
    Placement p;
    p.buffer = buffer;
    p.seq_stride = d + kRowPad;
    p.head_stride = seqlen * p.seq_stride;
    p.batch_stride = heads * p.head_stride + kBatchPad;
    return p;
}

// A test case's shape fields, for the Case structs of the forward and backward tests.
template <class Case>
Case attention_case(int b, int hq, int hkv, int sq, int sk, int d, hattn_dtype dtype, bool causal) {
    Case c;
    c.batch = b;
    c.heads_q = hq;
    c.heads_kv = hkv;
    c.seqlen_q = sq;
    c.seqlen_k = sk;
    c.head_dim = d;
    c.dtype = dtype;
    c.causal = causal;
    return c;
}

inline const char* dtype_name(hattn_dtype t) { return t == HATTN_DTYPE_BF16 ? "bf16" : "fp16"; }

// One past the last element a placement addresses.
inline int64_t extent(const Placement& p, int batch, int seqlen, int heads, int d) {
    return p.index(batch - 1, seqlen - 1, heads - 1, d - 1) + 1;
}

// ---- The shape grids the forward and backward tests both cover ----------------------------------

struct GridShape {
    int seqlen_q, seqlen_k, head_dim;
    hattn_dtype dtype;
    bool causal;
};

// Every head dim x dtype x mask at one (seqlen_q, seqlen_k).
inline std::vector<GridShape> head_dim_dtype_mask_grid(int seqlen_q, int seqlen_k) {
    std::vector<GridShape> grid;
    for (int d : {64, 128, 256})
        for (hattn_dtype t : {HATTN_DTYPE_BF16, HATTN_DTYPE_FP16})
            for (bool causal : {false, true}) grid.push_back({seqlen_q, seqlen_k, d, t, causal});
    return grid;
}

// Lengths 1, 17, 1000, 4097 for seqlen_q and seqlen_k, each pair full and causal (causal with
// sq > sk has rows that see no key); head dims and dtypes spread across the pairs.
inline std::vector<GridShape> odd_length_grid() {
    std::vector<GridShape> grid;
    const int lengths[] = {1, 17, 1000, 4097};
    int i = 0;
    for (int sq : lengths) {
        for (int sk : lengths) {
            const int d = (i % 3 == 0) ? 64 : (i % 3 == 1) ? 128 : 256;
            const hattn_dtype t = (i % 2 == 0) ? HATTN_DTYPE_BF16 : HATTN_DTYPE_FP16;
            for (bool causal : {false, true}) grid.push_back({sq, sk, d, t, causal});
            ++i;
        }
    }
    return grid;
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

namespace hattn::test {

// The forwards' scheduler workspace as users pass it (hattn_fwd_params.workspace,
// hattn_fwd_fp8_params.schedule_workspace): hattn_fwd_workspace_size() bytes at `ws`, zero-filled.
inline void zero_schedule_workspace(void* ws) {
    ASSERT_NE(ws, nullptr) << "cudaMalloc of the scheduler workspace failed";
    HATTN_CUDA_CHECK(cudaMemset(ws, 0, hattn_fwd_workspace_size()));
}

// After a call: the workspace's state bytes are zero again (the last thread block to finish zeroes
// the counters for the next call, a split tile's merger its partners' flags); the rest is scratch.
inline void expect_schedule_workspace_reset(const void* ws) {
    std::vector<uint8_t> bytes(HATTN_FWD_WORKSPACE_STATE_BYTES, 0xAB);
    HATTN_CUDA_CHECK(cudaMemcpy(bytes.data(), ws, bytes.size(), cudaMemcpyDeviceToHost));
    for (uint8_t b : bytes) ASSERT_EQ(b, 0) << "the workspace is not zero-filled after the call";
}

}  // namespace hattn::test
