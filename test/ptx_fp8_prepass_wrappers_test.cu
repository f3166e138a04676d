// hattn/test/ptx_fp8_prepass_wrappers_test.cu -- the PTX wrappers the FP8 pre-pass is built on:
// cvt_rn_satfinite_e4m3x2_f32 (ptx/convert.cuh) against the float64 e4m3 encoder of
// src/testing/fp8_reference.h, bit for bit, and the vector loads / stores of ptx/global.cuh.
//
// The e4m3 inputs are every e4m3 value, every midpoint between neighbours (ties: round to even),
// a hair on either side of each midpoint, values past 448 (satfinite), +-inf, NaN and random
// floats over the whole range; each is converted once as the low and once as the high half, so a
// swapped byte order fails. cp.async + ld.shared.v4: a rotated copy through shared memory (each
// thread reads back another thread's chunk after a barrier, so the wait must cover the copies);
// two cp.async groups in flight, cp_async_wait_group<1> then <0> (a double buffer), with
// st.shared.v4 and st.global.v4 carrying the chunks on.
#include "gpu_test_util.h"
#include "ptx_test_util.cuh"

#include "ptx/hattn_ptx.cuh"
#include "testing/fp8_reference.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

using hattn::test::DeviceBuffer;
namespace ht = hattn::testing;

constexpr int kThreads = 256;
constexpr int kRandomValues = 1 << 16;
constexpr int kCopyWords = 4096;  // uint32 words copied by the load/store test

__global__ void __launch_bounds__(kThreads) e4m3_kernel(const float* in, uint16_t* lo_first, uint16_t* hi_first, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float other = in[(i + 1) % n];
        lo_first[i] = hattn::ptx::cvt_rn_satfinite_e4m3x2_f32(in[i], other);
        hi_first[i] = hattn::ptx::cvt_rn_satfinite_e4m3x2_f32(other, in[i]);
    }
}

// Each thread copies 16 bytes through the load wrappers and the two store wrappers (the fp32 load
// plain in even threads, under an evict_last L2 policy in odd ones).
__global__ void __launch_bounds__(kThreads) copy_kernel(const uint32_t* in, uint32_t* out_b32, float* out_f32, int n) {
    const int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i >= n) return;
    const uint4 v = hattn::ptx::ld_global_nc_na_v4_b32(in + i);
    hattn::ptx::st_global_v2_b32(out_b32 + i, v.x, v.y);
    hattn::ptx::st_global_v2_b32(out_b32 + i + 2, v.z, v.w);
    const float* in_f32 = reinterpret_cast<const float*>(in) + i;
    const float4 f = (i / 4) % 2 == 0 ? hattn::ptx::ld_global_nc_v4_f32(in_f32)
                                      : hattn::ptx::ld_global_nc_l2_hint_v4_f32(
                                            in_f32, hattn::ptx::createpolicy_fractional_l2_evict_last());
    hattn::ptx::st_global_f32(out_f32 + i + 0, f.x);
    hattn::ptx::st_global_f32(out_f32 + i + 1, f.y);
    hattn::ptx::st_global_f32(out_f32 + i + 2, f.z);
    hattn::ptx::st_global_f32(out_f32 + i + 3, f.w);
}

// Each thread cp.asyncs one 16-byte chunk into shared memory, waits, and after a barrier reads its
// neighbour's chunk with ld.shared.v4 and stores it.
__global__ void __launch_bounds__(kThreads) cp_async_kernel(const uint32_t* in, uint32_t* out) {
    __shared__ uint4 staged[kThreads];
    const int t = static_cast<int>(threadIdx.x);
    const int base = static_cast<int>(blockIdx.x) * kThreads * 4;
    hattn::ptx::cp_async_cg_16(&staged[t], in + base + 4 * t);
    hattn::ptx::cp_async_commit_group();
    hattn::ptx::cp_async_wait_all();
    __syncthreads();
    const int from = (t + 1) % kThreads;
    const uint4 v = hattn::ptx::ld_shared_v4_b32(&staged[from]);
    hattn::ptx::st_global_v2_b32(out + base + 4 * t, v.x, v.y);
    hattn::ptx::st_global_v2_b32(out + base + 4 * t + 2, v.z, v.w);
}

// Two groups per thread (buffer 0 from the first half of `in`, buffer 1 from the second): after
// wait_group<1> and a barrier buffer 0 is complete and is passed on through st.shared.v4; after
// wait_group<0> buffer 1 too. out0[t] = first half's chunk (t + 1 + 3) % n through `passed`,
// out1[t] = second half's chunk (t + 2) % n, both written with st.global.v4.
__global__ void __launch_bounds__(kThreads) cp_async_groups_kernel(const uint32_t* in, uint32_t* out0, uint32_t* out1) {
    __shared__ uint4 staged[2][kThreads];
    __shared__ uint4 passed[kThreads];
    const int t = static_cast<int>(threadIdx.x);
    hattn::ptx::cp_async_cg_16(&staged[0][t], in + 4 * t);
    hattn::ptx::cp_async_commit_group();
    hattn::ptx::cp_async_cg_16(&staged[1][t], in + 4 * (kThreads + t));
    hattn::ptx::cp_async_commit_group();
    hattn::ptx::cp_async_wait_group<1>();
    __syncthreads();
    hattn::ptx::st_shared_v4_b32(&passed[t], hattn::ptx::ld_shared_v4_b32(&staged[0][(t + 1) % kThreads]));
    hattn::ptx::cp_async_wait_group<0>();
    __syncthreads();
    hattn::ptx::st_global_v4_b32(out0 + 4 * t, hattn::ptx::ld_shared_v4_b32(&passed[(t + 3) % kThreads]));
    hattn::ptx::st_global_v4_b32(out1 + 4 * t, hattn::ptx::ld_shared_v4_b32(&staged[1][(t + 2) % kThreads]));
}

std::vector<float> e4m3_inputs() {
    std::vector<float> v;
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7F) == ht::kE4m3NaN) continue;
        v.push_back(static_cast<float>(ht::e4m3_to_double(static_cast<uint8_t>(c))));
    }
    for (int c = 0; c < 0x7E; ++c) {
        const double lo = ht::e4m3_to_double(static_cast<uint8_t>(c)), hi = ht::e4m3_to_double(static_cast<uint8_t>(c + 1));
        const float mid = static_cast<float>(0.5 * (lo + hi));  // exact in fp32
        for (float sign : {1.f, -1.f}) {
            v.push_back(sign * mid);
            v.push_back(sign * std::nextafter(mid, 0.f));
            v.push_back(sign * std::nextafter(mid, std::numeric_limits<float>::infinity()));
        }
    }
    for (float x : {448.f, 449.f, 463.99f, 464.f, 464.01f, 480.f, 1e9f, std::numeric_limits<float>::max(),
                    std::numeric_limits<float>::infinity(), 1e-30f, std::ldexp(1.f, -10), std::ldexp(1.f, -11)}) {
        v.push_back(x);
        v.push_back(-x);
    }
    v.push_back(std::numeric_limits<float>::quiet_NaN());
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> exponent(-14.f, 10.f);
    for (int i = 0; i < kRandomValues; ++i) {
        v.push_back((i % 2 ? -1.f : 1.f) * std::exp2(exponent(rng)));
    }
    return v;
}

TEST(PtxFp8, CvtE4m3x2MatchesTheReferenceEncoder) {
    HATTN_REQUIRE_HOPPER();
    const std::vector<float> in = e4m3_inputs();
    const int n = static_cast<int>(in.size());
    DeviceBuffer<float> d_in(in.size());
    DeviceBuffer<uint16_t> d_lo(in.size()), d_hi(in.size());
    HATTN_CUDA_CHECK(d_in.status);
    HATTN_CUDA_CHECK(d_lo.status);
    HATTN_CUDA_CHECK(d_hi.status);
    HATTN_CUDA_CHECK(cudaMemcpy(d_in.ptr, in.data(), d_in.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemset(d_lo.ptr, 0xAB, d_lo.bytes()));
    HATTN_CUDA_CHECK(cudaMemset(d_hi.ptr, 0xAB, d_hi.bytes()));
    e4m3_kernel<<<(n + kThreads - 1) / kThreads, kThreads>>>(d_in.ptr, d_lo.ptr, d_hi.ptr, n);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> lo(in.size()), hi(in.size());
    HATTN_CUDA_CHECK(cudaMemcpy(lo.data(), d_lo.ptr, d_lo.bytes(), cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(cudaMemcpy(hi.data(), d_hi.ptr, d_hi.bytes(), cudaMemcpyDeviceToHost));
    int bad = 0;
    auto same = [](uint8_t got, uint8_t want) {
        if ((want & 0x7F) == ht::kE4m3NaN) return (got & 0x7F) == ht::kE4m3NaN;  // NaN's sign is not promised
        return got == want;
    };
    for (int i = 0; i < n; ++i) {
        const uint8_t want = ht::double_to_e4m3(in[i]);
        const uint8_t want_other = ht::double_to_e4m3(in[(i + 1) % n]);
        const uint8_t got_lo = lo[i] & 0xFF, got_hi_of_lo = lo[i] >> 8;
        const uint8_t got_hi = hi[i] >> 8, got_lo_of_hi = hi[i] & 0xFF;
        const bool ok = same(got_lo, want) && same(got_hi, want) && same(got_hi_of_lo, want_other) &&
                        same(got_lo_of_hi, want_other);
        if (!ok && ++bad <= 10) {
            ADD_FAILURE() << "x = " << in[i] << ": low-half 0x" << std::hex << int(got_lo) << ", high-half 0x"
                          << int(got_hi) << ", reference 0x" << int(want) << std::dec;
        }
    }
    EXPECT_EQ(bad, 0);
}

TEST(PtxFp8, GlobalVectorLoadsAndStoresCopy) {
    HATTN_REQUIRE_HOPPER();
    std::vector<uint32_t> in(kCopyWords);
    for (int i = 0; i < kCopyWords; ++i) in[i] = 0x3F800000u + static_cast<uint32_t>(i) * 2654435761u % 0x00800000u;
    DeviceBuffer<uint32_t> d_in(in.size()), d_b32(in.size());
    DeviceBuffer<float> d_f32(in.size());
    HATTN_CUDA_CHECK(d_in.status);
    HATTN_CUDA_CHECK(d_b32.status);
    HATTN_CUDA_CHECK(d_f32.status);
    HATTN_CUDA_CHECK(cudaMemcpy(d_in.ptr, in.data(), d_in.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemset(d_b32.ptr, 0, d_b32.bytes()));
    HATTN_CUDA_CHECK(cudaMemset(d_f32.ptr, 0, d_f32.bytes()));
    const int threads = kCopyWords / 4;
    copy_kernel<<<(threads + kThreads - 1) / kThreads, kThreads>>>(d_in.ptr, d_b32.ptr, d_f32.ptr, kCopyWords);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint32_t> b32(in.size()), f32(in.size());
    HATTN_CUDA_CHECK(cudaMemcpy(b32.data(), d_b32.ptr, d_b32.bytes(), cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(cudaMemcpy(f32.data(), d_f32.ptr, d_f32.bytes(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(b32, in);
    EXPECT_EQ(f32, in);
}

TEST(PtxFp8, CpAsyncThroughSharedMemory) {
    HATTN_REQUIRE_HOPPER();
    std::vector<uint32_t> in(kCopyWords);
    for (int i = 0; i < kCopyWords; ++i) in[i] = static_cast<uint32_t>(i) * 2654435761u;
    DeviceBuffer<uint32_t> d_in(in.size()), d_out(in.size());
    HATTN_CUDA_CHECK(d_in.status);
    HATTN_CUDA_CHECK(d_out.status);
    HATTN_CUDA_CHECK(cudaMemcpy(d_in.ptr, in.data(), d_in.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemset(d_out.ptr, 0, d_out.bytes()));
    constexpr int kBlockWords = kThreads * 4;
    cp_async_kernel<<<kCopyWords / kBlockWords, kThreads>>>(d_in.ptr, d_out.ptr);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint32_t> out(in.size());
    HATTN_CUDA_CHECK(cudaMemcpy(out.data(), d_out.ptr, d_out.bytes(), cudaMemcpyDeviceToHost));
    std::vector<uint32_t> want(in.size());
    for (int b = 0; b < kCopyWords / kBlockWords; ++b)
        for (int t = 0; t < kThreads; ++t)
            for (int w = 0; w < 4; ++w) want[b * kBlockWords + 4 * t + w] = in[b * kBlockWords + 4 * ((t + 1) % kThreads) + w];
    EXPECT_EQ(out, want);
}

TEST(PtxFp8, CpAsyncTwoGroupsAndVectorStores) {
    HATTN_REQUIRE_HOPPER();
    constexpr int kWords = 2 * kThreads * 4;
    std::vector<uint32_t> in(kWords);
    for (int i = 0; i < kWords; ++i) in[i] = 0x9E3779B9u * static_cast<uint32_t>(i + 1);
    DeviceBuffer<uint32_t> d_in(in.size()), d_out0(kWords / 2), d_out1(kWords / 2);
    HATTN_CUDA_CHECK(d_in.status);
    HATTN_CUDA_CHECK(d_out0.status);
    HATTN_CUDA_CHECK(d_out1.status);
    HATTN_CUDA_CHECK(cudaMemcpy(d_in.ptr, in.data(), d_in.bytes(), cudaMemcpyHostToDevice));
    HATTN_CUDA_CHECK(cudaMemset(d_out0.ptr, 0, d_out0.bytes()));
    HATTN_CUDA_CHECK(cudaMemset(d_out1.ptr, 0, d_out1.bytes()));
    cp_async_groups_kernel<<<1, kThreads>>>(d_in.ptr, d_out0.ptr, d_out1.ptr);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint32_t> out0(kWords / 2), out1(kWords / 2), want0(kWords / 2), want1(kWords / 2);
    HATTN_CUDA_CHECK(cudaMemcpy(out0.data(), d_out0.ptr, d_out0.bytes(), cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(cudaMemcpy(out1.data(), d_out1.ptr, d_out1.bytes(), cudaMemcpyDeviceToHost));
    for (int t = 0; t < kThreads; ++t)
        for (int w = 0; w < 4; ++w) {
            want0[4 * t + w] = in[4 * ((t + 4) % kThreads) + w];
            want1[4 * t + w] = in[4 * (kThreads + (t + 2) % kThreads) + w];
        }
    EXPECT_EQ(out0, want0);
    EXPECT_EQ(out1, want1);
}

}  // namespace
