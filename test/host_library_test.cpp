// hattn/test/host_library_test.cpp -- libhattn.so as its users see it, on the CPU (runs in CI).
//
// This test links the shared library (hattn::hattn) and includes nothing but include/hattn.h, so
// it also proves that the exported C API and the public include path are enough. It checks the
// version macros against hattn_version(), and the exact text of the messages that used to be
// built with iostreams (a NaN scale, unknown flag bits, a misaligned o): inside a process that had
// loaded another libstdc++ copy those crashed, so their formatting is pinned down here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "hattn.h"

namespace {

constexpr size_t kMsgLen = 512;

// Stand-in device addresses: validation only does arithmetic on them.
constexpr uintptr_t kQ = 0x7f0000000000, kK = 0x7f1000000000, kV = 0x7f2000000000, kO = 0x7f3000000000;

hattn_fwd_params valid_params() {
    return hattn_fwd_params_contiguous(reinterpret_cast<const void*>(kQ), reinterpret_cast<const void*>(kK),
                                       reinterpret_cast<const void*>(kV), reinterpret_cast<void*>(kO), 2, 8, 2, 33,
                                       47, 128, HATTN_DTYPE_BF16);
}

std::string validate(const hattn_fwd_params& p, hattn_status expected) {
    char msg[kMsgLen];
    std::memset(msg, 'X', sizeof(msg));
    const hattn_status status = hattn_fwd_validate(&p, msg, sizeof(msg));
    EXPECT_EQ(status, expected) << hattn_status_string(status) << ": " << msg;
    EXPECT_NE(std::memchr(msg, '\0', sizeof(msg)), nullptr) << "message is not NUL-terminated";
    return msg;
}

// "0x" and lowercase hex digits, as glibc's %p prints a non-null pointer; written out by hand
// so the expected text does not come from the formatter under test.
std::string hex_address(uintptr_t value) {
    std::string digits;
    do {
        digits.insert(digits.begin(), "0123456789abcdef"[value % 16]);
        value /= 16;
    } while (value != 0);
    return "0x" + digits;
}

TEST(Library, VersionMacrosMatchTheLibrary) {
    static_assert(HATTN_VERSION == HATTN_VERSION_MAJOR * 10000 + HATTN_VERSION_MINOR * 100 + HATTN_VERSION_PATCH,
                  "HATTN_VERSION packs major, minor and patch");
    const std::string expected = std::to_string(HATTN_VERSION_MAJOR) + "." + std::to_string(HATTN_VERSION_MINOR) +
                                 "." + std::to_string(HATTN_VERSION_PATCH);
    ASSERT_NE(hattn_version(), nullptr);
    EXPECT_EQ(std::string(hattn_version()), expected);
}

TEST(Library, ValidParamsPass) {
    EXPECT_EQ(validate(valid_params(), HATTN_SUCCESS), "ok");
}

TEST(Library, NanScaleMessage) {
    hattn_fwd_params p = valid_params();
    p.softmax_scale = std::nanf("");
    EXPECT_EQ(validate(p, HATTN_ERROR_INVALID_SCALE),
              "softmax_scale = nan must be finite and >= 0 (0 selects 1/sqrt(head_dim))");
    EXPECT_EQ(hattn_fwd(&p, nullptr), HATTN_ERROR_INVALID_SCALE);
}

TEST(Library, NegativeAndInfiniteScaleMessages) {
    hattn_fwd_params p = valid_params();
    p.softmax_scale = -0.125f;
    EXPECT_EQ(validate(p, HATTN_ERROR_INVALID_SCALE),
              "softmax_scale = -0.125 must be finite and >= 0 (0 selects 1/sqrt(head_dim))");
    p.softmax_scale = INFINITY;
    EXPECT_EQ(validate(p, HATTN_ERROR_INVALID_SCALE),
              "softmax_scale = inf must be finite and >= 0 (0 selects 1/sqrt(head_dim))");
}

TEST(Library, UnknownFlagBitsMessage) {
    hattn_fwd_params p = valid_params();
    p.flags = HATTN_FWD_NO_PINGPONG | (1u << 5) | 0x80000000u;
    EXPECT_EQ(validate(p, HATTN_ERROR_INVALID_FLAGS), "flags = 0x80000021 has unknown bits 0x80000020");
    EXPECT_EQ(hattn_fwd(&p, nullptr), HATTN_ERROR_INVALID_FLAGS);
}

TEST(Library, OutputMisalignedBy2Message) {
    hattn_fwd_params p = valid_params();
    p.o = reinterpret_cast<void*>(kO + 2);
    EXPECT_EQ(validate(p, HATTN_ERROR_MISALIGNED),
              "o = " + hex_address(kO + 2) + " is not 16-byte aligned (TMA needs 16-byte aligned base addresses)");
    EXPECT_EQ(hattn_fwd(&p, nullptr), HATTN_ERROR_MISALIGNED);
}

TEST(Library, LseMisalignedMessage) {
    hattn_fwd_params p = valid_params();
    const uintptr_t lse = 0x7f4000000002;
    p.lse = reinterpret_cast<float*>(lse);
    EXPECT_EQ(validate(p, HATTN_ERROR_MISALIGNED), "lse = " + hex_address(lse) + " is not 4-byte aligned (fp32)");
}

TEST(Library, IntegerMessages) {
    hattn_fwd_params p = valid_params();
    p.o_head_stride = 64;  // rows of o overlap: 128 elements per head
    EXPECT_EQ(validate(p, HATTN_ERROR_INVALID_STRIDE),
              "o_head_stride = 64 makes rows of o overlap (it must be at least 128 elements, the span of the inner "
              "dimensions)");
    p = valid_params();
    p.k_seq_stride = (int64_t{1} << 39) + 8;  // 2^40 + 16 bytes
    EXPECT_EQ(validate(p, HATTN_ERROR_SIZE_OVERFLOW),
              "k_seq_stride = 549755813896 elements is 2^40 bytes or more (the TMA stride limit)");
}

}  // namespace
