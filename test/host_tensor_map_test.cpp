// hattn/test/host_tensor_map_test.cpp -- validate_tensor_map / encode_tensor_map
// (src/kernels/sm90/tensor_map.h) on the CPU: each bad argument is rejected with a message that names it,
// good specs pass, and encoding fails cleanly (false + message, no crash) where no GPU driver is
// present. Runs in CPU-only CI; the encode-success path runs only where a GPU is present.
#include "kernels/sm90/tensor_map.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace {

using hattn::sm90::encode_tensor_map;
using hattn::sm90::TensorMapSpec;
using hattn::sm90::validate_tensor_map;

// A stand-in base address: validation only looks at its value (16-byte aligned here).
alignas(16) unsigned char g_fake_tensor[16];
const void* aligned_base() { return g_fake_tensor; }

// The spec of a K tile load: bf16 [seq 1000][head_dim 128], box 64 x 64, 128B swizzle.
TensorMapSpec good_2d() {
    TensorMapSpec s;
    s.base = aligned_base();
    s.dtype = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    s.rank = 2;
    s.dims[0] = 128;
    s.dims[1] = 1000;
    s.strides_bytes[0] = 128 * 2;
    s.box[0] = 64;
    s.box[1] = 64;
    s.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    return s;
}

// Expects rejection with a message containing every fragment in `names`.
void expect_rejected(const TensorMapSpec& spec, std::initializer_list<const char*> names) {
    const std::string msg = validate_tensor_map(spec);
    ASSERT_FALSE(msg.empty()) << "accepted a bad spec";
    for (const char* name : names) EXPECT_NE(msg.find(name), std::string::npos) << "message: " << msg;
}

bool gpu_present() {
    int count = 0;
    const bool present = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
    cudaGetLastError();  // clear a sticky "no device" error
    return present;
}

}  // namespace

TEST(HostTensorMap, AcceptsGoodSpecs) {
    EXPECT_EQ(validate_tensor_map(good_2d()), "");

    // The attention layout [batch][seq][heads][head_dim] as 4D, one head per box.
    TensorMapSpec s4;
    s4.base = aligned_base();
    s4.rank = 4;
    const uint64_t dims[] = {256, 4096, 16, 2};
    for (int i = 0; i < 4; ++i) s4.dims[i] = dims[i];
    s4.strides_bytes[0] = 16 * 256 * 2;         // next sequence position
    s4.strides_bytes[1] = 256 * 2;              // next head
    s4.strides_bytes[2] = 4096ull * 16 * 256 * 2;  // next batch
    s4.box[0] = 64;
    s4.box[1] = 176;
    s4.box[2] = 1;
    s4.box[3] = 1;
    EXPECT_EQ(validate_tensor_map(s4), "");

    // fp8 data as bytes: 128 elements fill the 128-byte swizzle span exactly.
    TensorMapSpec s8 = good_2d();
    s8.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    s8.strides_bytes[0] = 128;
    s8.box[0] = 128;
    EXPECT_EQ(validate_tensor_map(s8), "");

    // Rank 5, 1D, box 256 (the maximum), no swizzle with a wide inner box, 64B/32B spans.
    TensorMapSpec s5 = good_2d();
    s5.rank = 5;
    for (int i = 2; i < 5; ++i) {
        s5.dims[i] = 3;
        s5.strides_bytes[i - 1] = s5.strides_bytes[i - 2] * s5.dims[i - 1];
        s5.box[i] = 1;
    }
    EXPECT_EQ(validate_tensor_map(s5), "");
    TensorMapSpec s1 = good_2d();
    s1.rank = 1;
    s1.box[0] = 64;
    EXPECT_EQ(validate_tensor_map(s1), "");
    TensorMapSpec big_box = good_2d();
    big_box.box[1] = 256;
    EXPECT_EQ(validate_tensor_map(big_box), "");
    TensorMapSpec no_swizzle = good_2d();
    no_swizzle.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
    no_swizzle.box[0] = 128;  // 256 bytes: fine without a swizzle span
    EXPECT_EQ(validate_tensor_map(no_swizzle), "");
    TensorMapSpec s64 = good_2d();
    s64.swizzle = CU_TENSOR_MAP_SWIZZLE_64B;
    s64.box[0] = 32;
    EXPECT_EQ(validate_tensor_map(s64), "");
    TensorMapSpec s32 = good_2d();
    s32.swizzle = CU_TENSOR_MAP_SWIZZLE_32B;
    s32.box[0] = 16;
    EXPECT_EQ(validate_tensor_map(s32), "");
}

TEST(HostTensorMap, RejectsNullBase) {
    TensorMapSpec s = good_2d();
    s.base = nullptr;
    expect_rejected(s, {"base", "null"});
}

TEST(HostTensorMap, RejectsMisalignedBase) {
    TensorMapSpec s = good_2d();
    s.base = g_fake_tensor + 8;  // 8-byte aligned only
    expect_rejected(s, {"base", "aligned"});
}

TEST(HostTensorMap, RejectsStrideNotMultipleOf16) {
    TensorMapSpec s = good_2d();
    s.strides_bytes[0] = 200;  // e.g. a head_dim of 100 bf16
    expect_rejected(s, {"strides_bytes[0]", "16"});

    TensorMapSpec s3 = good_2d();
    s3.rank = 3;
    s3.dims[2] = 4;
    s3.box[2] = 1;
    s3.strides_bytes[1] = 128 * 2 * 1000 + 8;
    expect_rejected(s3, {"strides_bytes[1]"});
}

TEST(HostTensorMap, RejectsZeroStride) {
    TensorMapSpec s = good_2d();
    s.strides_bytes[0] = 0;
    expect_rejected(s, {"strides_bytes[0]"});
}

TEST(HostTensorMap, RejectsBoxOver256) {
    TensorMapSpec s = good_2d();
    s.box[1] = 257;
    expect_rejected(s, {"box[1]", "256"});
}

TEST(HostTensorMap, RejectsBoxZero) {
    TensorMapSpec s = good_2d();
    s.box[0] = 0;
    expect_rejected(s, {"box[0]"});
}

TEST(HostTensorMap, RejectsInnerBoxWiderThanSwizzleSpan) {
    TensorMapSpec s = good_2d();
    s.box[0] = 128;  // 256 bytes of bf16 > 128-byte span
    expect_rejected(s, {"inner box", "128-byte swizzle"});

    TensorMapSpec s64 = good_2d();
    s64.swizzle = CU_TENSOR_MAP_SWIZZLE_64B;  // 64 bf16 = 128 bytes > 64
    expect_rejected(s64, {"inner box", "64-byte swizzle"});
}

TEST(HostTensorMap, RejectsInnerBoxNotMultipleOf16Bytes) {
    TensorMapSpec s = good_2d();
    s.box[0] = 12;  // 24 bytes
    expect_rejected(s, {"inner box"});
}

TEST(HostTensorMap, RejectsRank0And6) {
    TensorMapSpec s0 = good_2d();
    s0.rank = 0;
    expect_rejected(s0, {"rank 0"});
    TensorMapSpec s6 = good_2d();
    s6.rank = 6;
    expect_rejected(s6, {"rank 6"});
    TensorMapSpec negative = good_2d();
    negative.rank = -1;
    expect_rejected(negative, {"rank -1"});
}

TEST(HostTensorMap, RejectsZeroDims) {
    TensorMapSpec s = good_2d();
    s.dims[1] = 0;
    expect_rejected(s, {"dims[1]"});
    TensorMapSpec s0 = good_2d();
    s0.dims[0] = 0;
    expect_rejected(s0, {"dims[0]"});
}

TEST(HostTensorMap, RejectsDimOver2To32) {
    TensorMapSpec s = good_2d();
    s.dims[1] = (1ull << 32) + 1;
    expect_rejected(s, {"dims[1]"});
}

TEST(HostTensorMap, RejectsUnsupportedDtype) {
    TensorMapSpec s = good_2d();
    s.dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
    expect_rejected(s, {"dtype"});
}

TEST(HostTensorMap, EncodeRejectsNullOutput) {
    std::string error;
    EXPECT_FALSE(encode_tensor_map(nullptr, good_2d(), &error));
    EXPECT_NE(error.find("null"), std::string::npos) << error;
}

TEST(HostTensorMap, EncodeRejectsInvalidSpecBeforeTouchingTheDriver) {
    TensorMapSpec s = good_2d();
    s.box[0] = 0;
    CUtensorMap map;
    std::string error;
    EXPECT_FALSE(encode_tensor_map(&map, s, &error));
    EXPECT_NE(error.find("box[0]"), std::string::npos) << error;
    EXPECT_FALSE(encode_tensor_map(&map, s, nullptr)) << "a null error string is allowed";
}

TEST(HostTensorMap, EncodeWithoutGpuFailsCleanlyOrSucceedsWithGpu) {
    CUtensorMap map;
    std::string error;
    if (!gpu_present()) {
        // No driver / device: the entry point is unavailable and encode must say so, not crash.
        EXPECT_FALSE(encode_tensor_map(&map, good_2d(), &error));
        EXPECT_FALSE(error.empty()) << "failure without a message";
        return;
    }
    void* device = nullptr;
    ASSERT_EQ(cudaMalloc(&device, 1000 * 128 * 2), cudaSuccess);
    TensorMapSpec s = good_2d();
    s.base = device;
    const bool ok = encode_tensor_map(&map, s, &error);
    cudaFree(device);
    EXPECT_TRUE(ok) << error;
}
