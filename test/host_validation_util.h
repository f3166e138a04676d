// hattn/test/host_validation_util.h -- what the CPU validation tests of hattn_fwd and hattn_bwd share:
// sentinel-filled host buffers standing in for tensors, stand-in addresses, and the three-way check
// of a rejected input (status, a message naming the argument, no side effects).
//
// "No side effects": every tensor points at a HOST buffer filled with a sentinel pattern
// (validation must reject before touching it, so the pattern stays intact), and the entry point
// must return the validation status without making a CUDA call (on a machine without a GPU any
// CUDA call fails, so reaching one would turn the status into HATTN_ERROR_CUDA; with a GPU, the
// CUDA error state must be unchanged).
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "hattn.h"
#include "host/device_info.h"

namespace hattn::test {

constexpr size_t kMsgLen = 512;
constexpr uint8_t kSentinel = 0xA5;
constexpr size_t kBufferAlign = 256;  // more than TMA's 16 (and the backward workspace's 256)

// A host buffer filled with the sentinel byte.
class SentinelBuffer {
public:
    explicit SentinelBuffer(size_t bytes) : bytes_(bytes) {
        const size_t rounded = (bytes + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
        data_.reset(static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, rounded)));
        std::memset(data_.get(), kSentinel, bytes_);
    }
    uint8_t* data() const { return data_.get(); }
    size_t bytes() const { return bytes_; }
    bool intact() const {
        for (size_t i = 0; i < bytes_; ++i) {
            if (data_[i] != kSentinel) return false;
        }
        return true;
    }

private:
    struct Free {
        void operator()(uint8_t* p) const { std::free(p); }
    };
    size_t bytes_;
    std::unique_ptr<uint8_t[], Free> data_;
};

// Whether every buffer still holds only the sentinel (nothing wrote through its pointer).
inline bool all_intact(std::initializer_list<const SentinelBuffer*> buffers) {
    for (const SentinelBuffer* b : buffers) {
        if (!b->intact()) return false;
    }
    return true;
}

// A pointer value that is never dereferenced: validation only does arithmetic on it.
template <class T>
T* fake_pointer(uintptr_t value) {
    return reinterpret_cast<T*>(value);
}

// An enum field holding an int no enumerator names, as a C caller can store it (a C++ cast to the
// enum type would be undefined for such a value).
template <class Enum>
Enum enum_from_int(int value) {
    static_assert(sizeof(Enum) == sizeof(int), "hattn's C enums are int-sized");
    Enum e;
    std::memcpy(&e, &value, sizeof(e));
    return e;
}

// Shapes are checked without data: any 256-byte aligned address stands in for a device pointer.
constexpr uintptr_t kFakeDeviceBase = 0x7f0000000000ull;
constexpr uintptr_t kFakeTensorGap = uintptr_t{1} << 36;  // 64 GB apart: no two tensors overlap
// Stride limits (TMA: a byte stride below 2^40, i.e. 2^39 16-bit or 2^40 8-bit elements) and an
// address whose tensor would run past the end of the address space.
constexpr int64_t kTwoPow39 = int64_t{1} << 39;
constexpr int64_t kTwoPow40 = int64_t{1} << 40;
constexpr uintptr_t kTopOfAddressSpace = std::numeric_limits<uintptr_t>::max() & ~uintptr_t{0xFF};

// Any stream handle will do for a rejected call: it must never be used (a bogus one would make a
// CUDA call fail).
inline cudaStream_t never_used_stream() { return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(0xDEAD0)); }

// One overload per params struct, so the helpers below serve both passes.
inline hattn_status validate_params(const hattn_fwd_params* p, char* msg, size_t len) {
    return hattn_fwd_validate(p, msg, len);
}
inline hattn_status validate_params(const hattn_bwd_params* p, char* msg, size_t len) {
    return hattn_bwd_validate(p, msg, len);
}
inline hattn_status validate_params(const hattn_fp8_prepass_params* p, char* msg, size_t len) {
    return hattn_fp8_prepass_validate(p, msg, len);
}
inline hattn_status validate_params(const hattn_fwd_fp8_params* p, char* msg, size_t len) {
    return hattn_fwd_fp8_validate(p, msg, len);
}
inline hattn_status run_params(const hattn_fwd_params* p, cudaStream_t stream) { return hattn_fwd(p, stream); }
inline hattn_status run_params(const hattn_fwd_fp8_params* p, cudaStream_t stream) { return hattn_fwd_fp8(p, stream); }
inline hattn_status run_params(const hattn_bwd_params* p, cudaStream_t stream) { return hattn_bwd(p, stream); }
inline hattn_status run_params(const hattn_fp8_prepass_params* p, cudaStream_t stream) {
    return hattn_fp8_prepass(p, stream);
}

template <class Params>
std::string validate_message(const Params* p, hattn_status* status) {
    char msg[kMsgLen];
    std::memset(msg, 'X', sizeof(msg));
    *status = validate_params(p, msg, sizeof(msg));
    EXPECT_NE(std::memchr(msg, '\0', sizeof(msg)), nullptr) << "message is not NUL-terminated";
    return std::string(msg);
}

// A rejected input: validate's status and message, then the entry point's status, and no side
// effects (`problem.untouched()` says whether every sentinel buffer is intact).
template <class Problem, class Params>
void expect_rejected(const Problem& problem, const Params& p, hattn_status expected,
                     const std::vector<std::string>& message_must_contain) {
    const cudaError_t cuda_state_before = cudaPeekAtLastError();

    hattn_status status = HATTN_SUCCESS;
    const std::string msg = validate_message(&p, &status);
    EXPECT_EQ(status, expected) << "validate: got " << hattn_status_string(status) << " (" << msg << "), expected "
                                << hattn_status_string(expected);
    for (const std::string& needle : message_must_contain) {
        EXPECT_NE(msg.find(needle), std::string::npos) << "message \"" << msg << "\" does not name \"" << needle << "\"";
    }

    EXPECT_EQ(run_params(&p, never_used_stream()), expected) << "the entry point must return the validation status";

    EXPECT_TRUE(problem.untouched()) << "a rejected call wrote through a tensor pointer";
    EXPECT_EQ(cudaPeekAtLastError(), cuda_state_before) << "a rejected call changed the CUDA error state";
}

template <class Params>
void expect_accepted(const Params& p) {
    hattn_status status = HATTN_ERROR_CUDA;
    const std::string msg = validate_message(&p, &status);
    EXPECT_EQ(status, HATTN_SUCCESS) << hattn_status_string(status) << ": " << msg;
}

// The NULL params pointer: HATTN_ERROR_NULL_PARAMS from validate and the entry point alike.
template <class Params>
void expect_null_params_rejected() {
    hattn_status status = HATTN_SUCCESS;
    const std::string msg = validate_message(static_cast<const Params*>(nullptr), &status);
    EXPECT_EQ(status, HATTN_ERROR_NULL_PARAMS);
    EXPECT_NE(msg.find("params"), std::string::npos) << msg;
    const cudaError_t before = cudaPeekAtLastError();
    EXPECT_EQ(run_params(static_cast<const Params*>(nullptr), nullptr), HATTN_ERROR_NULL_PARAMS);
    EXPECT_EQ(cudaPeekAtLastError(), before);
}

// ---- Rejections -----------------------------------------------------------------------------------

// One class of rejected input: how to break a valid problem's params, the status, and what the
// message must name.
template <class Params, class Problem>
struct RejectCase {
    std::string name;
    std::function<void(Params&, const Problem&)> mutate;
    hattn_status expected;
    std::vector<std::string> message_names;
};

// gtest prints parameters on failure: the case name, not the struct's bytes.
template <class Params, class Problem>
void PrintTo(const RejectCase<Params, Problem>& c, std::ostream* os) {
    *os << c.name;
}

// The rejections of the fields both params structs share (dtype, head_dim, the sizes, GQA, the
// (batch, head) count, the scale), for a Problem of 8 query heads on fewer KV heads.
template <class Params, class Problem>
std::vector<RejectCase<Params, Problem>> shared_reject_cases() {
    using P = Params;
    using S = const Problem&;
    return {
        // dtype and head_dim.
        {"DtypeUnknown", [](P& p, S) { p.dtype = enum_from_int<hattn_dtype>(7); }, HATTN_ERROR_UNSUPPORTED_DTYPE,
         {"dtype = 7"}},
        {"HeadDim96", [](P& p, S) { p.head_dim = 96; }, HATTN_ERROR_UNSUPPORTED_HEAD_DIM, {"head_dim = 96"}},
        {"HeadDim0", [](P& p, S) { p.head_dim = 0; }, HATTN_ERROR_UNSUPPORTED_HEAD_DIM, {"head_dim = 0"}},
        {"HeadDim512", [](P& p, S) { p.head_dim = 512; }, HATTN_ERROR_UNSUPPORTED_HEAD_DIM, {"head_dim = 512"}},
        // Sizes and GQA.
        {"BatchZero", [](P& p, S) { p.batch = 0; }, HATTN_ERROR_INVALID_SIZE, {"batch = 0"}},
        {"HeadsQNegative", [](P& p, S) { p.heads_q = -8; }, HATTN_ERROR_INVALID_SIZE, {"heads_q = -8"}},
        {"HeadsKvZero", [](P& p, S) { p.heads_kv = 0; }, HATTN_ERROR_INVALID_SIZE, {"heads_kv = 0"}},
        {"SeqlenQZero", [](P& p, S) { p.seqlen_q = 0; }, HATTN_ERROR_INVALID_SIZE, {"seqlen_q = 0"}},
        {"SeqlenKNegative", [](P& p, S) { p.seqlen_k = -5; }, HATTN_ERROR_INVALID_SIZE, {"seqlen_k = -5"}},
        {"HeadsNotDivisible", [](P& p, S) { p.heads_kv = 3; }, HATTN_ERROR_HEADS_NOT_DIVISIBLE,
         {"heads_q = 8", "heads_kv = 3"}},
        {"MoreKvHeadsThanQHeads", [](P& p, S) { p.heads_kv = 16; }, HATTN_ERROR_HEADS_NOT_DIVISIBLE,
         {"heads_kv = 16"}},
        {"BatchTimesHeadsOverInt32",
         [](P& p, S) {
             p.batch = 65535;
             p.heads_q = 65535;
             p.heads_kv = 1;
         },
         HATTN_ERROR_SIZE_OVERFLOW, {"batch * heads_q"}},
        // Scale.
        {"ScaleNegative", [](P& p, S) { p.softmax_scale = -0.125f; }, HATTN_ERROR_INVALID_SCALE,
         {"softmax_scale = -0.125"}},
        {"ScaleNaN", [](P& p, S) { p.softmax_scale = std::nanf(""); }, HATTN_ERROR_INVALID_SCALE,
         {"softmax_scale = nan"}},
        {"ScaleInfinite", [](P& p, S) { p.softmax_scale = INFINITY; }, HATTN_ERROR_INVALID_SCALE,
         {"softmax_scale = inf"}},
        // Order: with several problems, the most basic one is reported.
        {"OrderHeadDimBeforeSize",
         [](P& p, S) {
             p.head_dim = 80;
             p.batch = 0;
         },
         HATTN_ERROR_UNSUPPORTED_HEAD_DIM, {"head_dim = 80"}},
    };
}

// Positive control for the "no CUDA call" checks: a VALID call does reach the device check, and on
// a machine without Hopper it fails there. (Skipped on Hopper, where it would launch on host
// pointers.)
template <class Problem>
void expect_valid_input_reaches_the_device_check() {
    if (hattn::host::hopper_unavailable_reason().empty()) {
        GTEST_SKIP() << "a Hopper GPU is present: this control only runs where the entry point cannot launch";
    }
    const Problem problem;
    const auto p = problem.params();
    const hattn_status status = run_params(&p, nullptr);
    EXPECT_TRUE(status == HATTN_ERROR_CUDA || status == HATTN_ERROR_UNSUPPORTED_DEVICE)
        << "got " << hattn_status_string(status);
    EXPECT_TRUE(problem.untouched());
}

}  // namespace hattn::test
