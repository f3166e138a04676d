// hattn/test/host_fwd_validation_test.cpp -- hattn_fwd_validate and hattn_fwd's rejection path,
// on the CPU (runs in CI without a GPU).
//
// Every rejected input is checked three ways (test/host_validation_util.h): the status, a message
// that names the bad argument, and that nothing happened (q/k/v/o/lse are sentinel-filled HOST
// buffers that must stay intact, and hattn_fwd returns the validation status without a CUDA call).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "hattn.h"
#include "host_validation_util.h"

namespace {

using hattn::test::expect_accepted;
using hattn::test::expect_rejected;
using hattn::test::fake_pointer;
using hattn::test::kFakeDeviceBase;
using hattn::test::kFakeTensorGap;
using hattn::test::kTopOfAddressSpace;
using hattn::test::kTwoPow39;
using hattn::test::SentinelBuffer;
using hattn::test::validate_message;

// A small valid problem: batch 2, 8 query heads on 2 KV heads (GQA 4:1), sq 33, sk 47, d 64.
struct Problem {
    static constexpr int kBatch = 2, kHeadsQ = 8, kHeadsKv = 2, kSeqQ = 33, kSeqK = 47, kDim = 64;
    static constexpr size_t kElem = 2;
    SentinelBuffer q{kBatch * kSeqQ * kHeadsQ * kDim * kElem};
    SentinelBuffer k{kBatch * kSeqK * kHeadsKv * kDim * kElem};
    SentinelBuffer v{kBatch * kSeqK * kHeadsKv * kDim * kElem};
    SentinelBuffer o{kBatch * kSeqQ * kHeadsQ * kDim * kElem};
    SentinelBuffer lse{kBatch * kHeadsQ * kSeqQ * sizeof(float)};

    hattn_fwd_params params() const {
        hattn_fwd_params p = hattn_fwd_params_contiguous(q.data(), k.data(), v.data(), o.data(), kBatch, kHeadsQ,
                                                         kHeadsKv, kSeqQ, kSeqK, kDim, HATTN_DTYPE_BF16);
        p.lse = reinterpret_cast<float*>(lse.data());
        return p;
    }
    bool untouched() const { return q.intact() && k.intact() && v.intact() && o.intact() && lse.intact(); }
};

// ---- Rejections, one class at a time ---------------------------------------------------------

using RejectCase = hattn::test::RejectCase<hattn_fwd_params, Problem>;

// Changes head_dim of the contiguous base problem, scaling its strides to match (the buffers are
// never touched, so they need not grow).
void set_head_dim(hattn_fwd_params& p, int head_dim) {
    const int64_t factor = head_dim / p.head_dim;
    for (int64_t* s : {&p.q_batch_stride, &p.q_seq_stride, &p.q_head_stride, &p.k_batch_stride, &p.k_seq_stride,
                       &p.k_head_stride, &p.v_batch_stride, &p.v_seq_stride, &p.v_head_stride, &p.o_batch_stride,
                       &p.o_seq_stride, &p.o_head_stride}) {
        *s *= factor;
    }
    p.head_dim = head_dim;
}


std::vector<RejectCase> reject_cases() {
    const int d = Problem::kDim;
    std::vector<RejectCase> cases = hattn::test::shared_reject_cases<hattn_fwd_params, Problem>();
    const std::vector<RejectCase> own = {
        // Null tensors.
        {"NullQ", [](hattn_fwd_params& p, const Problem&) { p.q = nullptr; }, HATTN_ERROR_NULL_POINTER, {"q is NULL"}},
        {"NullK", [](hattn_fwd_params& p, const Problem&) { p.k = nullptr; }, HATTN_ERROR_NULL_POINTER, {"k is NULL"}},
        {"NullV", [](hattn_fwd_params& p, const Problem&) { p.v = nullptr; }, HATTN_ERROR_NULL_POINTER, {"v is NULL"}},
        {"NullO", [](hattn_fwd_params& p, const Problem&) { p.o = nullptr; }, HATTN_ERROR_NULL_POINTER, {"o is NULL"}},
        // Non-positive strides.
        {"QSeqStrideZero", [](hattn_fwd_params& p, const Problem&) { p.q_seq_stride = 0; }, HATTN_ERROR_INVALID_STRIDE,
         {"q_seq_stride"}},
        {"KHeadStrideNegative", [d](hattn_fwd_params& p, const Problem&) { p.k_head_stride = -d; },
         HATTN_ERROR_INVALID_STRIDE, {"k_head_stride"}},
        {"VBatchStrideZero", [](hattn_fwd_params& p, const Problem&) { p.v_batch_stride = 0; },
         HATTN_ERROR_INVALID_STRIDE, {"v_batch_stride"}},
        {"OHeadStrideNegative", [](hattn_fwd_params& p, const Problem&) { p.o_head_stride = -1; },
         HATTN_ERROR_INVALID_STRIDE, {"o_head_stride"}},
        // Misaligned base pointers (TMA: 16 bytes) and LSE (fp32: 4 bytes).
        {"QMisaligned", [](hattn_fwd_params& p, const Problem& s) { p.q = s.q.data() + 2; }, HATTN_ERROR_MISALIGNED,
         {"q =", "16-byte"}},
        {"KMisaligned8", [](hattn_fwd_params& p, const Problem& s) { p.k = s.k.data() + 8; }, HATTN_ERROR_MISALIGNED,
         {"k ="}},
        {"VMisaligned", [](hattn_fwd_params& p, const Problem& s) { p.v = s.v.data() + 4; }, HATTN_ERROR_MISALIGNED,
         {"v ="}},
        {"OMisaligned", [](hattn_fwd_params& p, const Problem& s) { p.o = s.o.data() + 14; }, HATTN_ERROR_MISALIGNED,
         {"o ="}},
        {"LseMisaligned", [](hattn_fwd_params& p, const Problem& s) { p.lse = reinterpret_cast<float*>(s.lse.data() + 2); },
         HATTN_ERROR_MISALIGNED, {"lse"}},
        // Strides whose byte size is not a multiple of 16 (TMA).
        {"KSeqStrideOdd", [d](hattn_fwd_params& p, const Problem&) { p.k_seq_stride = Problem::kHeadsKv * d + 1; },
         HATTN_ERROR_MISALIGNED, {"k_seq_stride"}},
        {"VHeadStride136Bytes", [](hattn_fwd_params& p, const Problem&) { p.v_head_stride = 68; },
         HATTN_ERROR_MISALIGNED, {"v_head_stride", "136 bytes"}},
        {"OBatchStrideNot16B", [](hattn_fwd_params& p, const Problem&) { p.o_batch_stride += 4; },
         HATTN_ERROR_MISALIGNED, {"o_batch_stride"}},
        {"QHeadStride8BytesOff", [d](hattn_fwd_params& p, const Problem&) { p.q_head_stride = d + 4; },
         HATTN_ERROR_MISALIGNED, {"q_head_stride"}},
        // Grid and index limits.
        {"TilesOverInt32", [](hattn_fwd_params& p, const Problem&) { p.batch = 1024; p.heads_q = 1024; p.heads_kv = 1; p.seqlen_q = 128 * 2048; },
         HATTN_ERROR_SIZE_OVERFLOW, {"seqlen_q", "tiles"}},
        // TMA: strides below 2^40 bytes.
        {"QBatchStride2Pow40Bytes", [](hattn_fwd_params& p, const Problem&) { p.q_batch_stride = kTwoPow39; },
         HATTN_ERROR_SIZE_OVERFLOW, {"q_batch_stride", "2^40"}},
        {"VSeqStride2Pow40Bytes", [](hattn_fwd_params& p, const Problem&) { p.v_seq_stride = kTwoPow39 * 4; },
         HATTN_ERROR_SIZE_OVERFLOW, {"v_seq_stride"}},
        // Offsets: 2^30 rows of (2^39 - 8) elements is ~2^69 elements, past int64.
        {"QOffsetOverInt64", [](hattn_fwd_params& p, const Problem&) { p.seqlen_q = 1 << 30; p.q_seq_stride = kTwoPow39 - 8; },
         HATTN_ERROR_SIZE_OVERFLOW, {"q:", "int64"}},
        // 2^24 rows of (2^39 - 8) elements is just under 2^63 elements: fits int64, but ~2^64 bytes
        // does not.
        {"KByteExtentOverflow", [](hattn_fwd_params& p, const Problem&) { p.seqlen_k = 1 << 24; p.k_seq_stride = kTwoPow39 - 8; },
         HATTN_ERROR_SIZE_OVERFLOW, {"k:", "byte range"}},
        // A base address near the top of the address space: base + extent wraps around.
        {"VAddressWraps", [](hattn_fwd_params& p, const Problem&) { p.v = fake_pointer<const void>(kTopOfAddressSpace); },
         HATTN_ERROR_SIZE_OVERFLOW, {"v:", "byte range"}},
        {"LseAddressWraps", [](hattn_fwd_params& p, const Problem&) { p.lse = fake_pointer<float>(kTopOfAddressSpace); },
         HATTN_ERROR_SIZE_OVERFLOW, {"lse:"}},
        // O rows that overlap would be written by several CTAs at once.
        {"OHeadsOverlap", [](hattn_fwd_params& p, const Problem&) { p.o_head_stride = 32; },
         HATTN_ERROR_INVALID_STRIDE, {"o_head_stride", "overlap"}},
        {"OSeqOverlapsHeads", [d](hattn_fwd_params& p, const Problem&) { p.o_seq_stride = (Problem::kHeadsQ - 1) * d; },
         HATTN_ERROR_INVALID_STRIDE, {"o_seq_stride", "overlap"}},
        {"OBatchOverlapsSeq", [](hattn_fwd_params& p, const Problem&) { p.o_batch_stride = p.o_seq_stride * 8; },
         HATTN_ERROR_INVALID_STRIDE, {"o_batch_stride", "overlap"}},
        // Flags.
        {"FlagsUnknownBit", [](hattn_fwd_params& p, const Problem&) { p.flags = 1u << 5; }, HATTN_ERROR_INVALID_FLAGS,
         {"flags", "0x20"}},
        {"FlagsHighBit", [](hattn_fwd_params& p, const Problem&) { p.flags = HATTN_FWD_NO_PINGPONG | 0x80000000u; },
         HATTN_ERROR_INVALID_FLAGS, {"flags"}},
        {"AblationAtD64", [](hattn_fwd_params& p, const Problem&) { p.flags = HATTN_FWD_NO_PINGPONG; },
         HATTN_ERROR_INVALID_FLAGS, {"flags", "head_dim 128"}},
        {"AblationAtD128Fp16",
         [](hattn_fwd_params& p, const Problem&) {
             set_head_dim(p, 128);
             p.dtype = HATTN_DTYPE_FP16;
             p.flags = HATTN_FWD_NO_INTRA_WG_OVERLAP;
         },
         HATTN_ERROR_INVALID_FLAGS, {"flags", "fp16"}},
        {"AblationAtD256",
         [](hattn_fwd_params& p, const Problem&) {
             set_head_dim(p, 256);
             p.flags = HATTN_FWD_NO_PINGPONG | HATTN_FWD_NO_INTRA_WG_OVERLAP;
         },
         HATTN_ERROR_INVALID_FLAGS, {"flags", "256"}},
        {"AblationAtD128Bf16IsNotAFlagError",  // control: same mutation, the built variant
         [](hattn_fwd_params& p, const Problem&) {
             set_head_dim(p, 128);
             p.flags = HATTN_FWD_NO_PINGPONG | HATTN_FWD_NO_INTRA_WG_OVERLAP;
             p.softmax_scale = -1.f;  // ... so the first error is the scale, checked before flags
         },
         HATTN_ERROR_INVALID_SCALE, {"softmax_scale"}},
        // The optional workspace (checked last): aligned, large enough, inside the address space.
        {"WorkspaceMisaligned",
         [](hattn_fwd_params& p, const Problem&) {
             p.workspace = fake_pointer<void>(kFakeDeviceBase + (uintptr_t{1} << 41) + 8);
             p.workspace_size = hattn_fwd_workspace_size();
         },
         HATTN_ERROR_WORKSPACE, {"workspace", "16-byte aligned"}},
        {"WorkspaceTooSmall",
         [](hattn_fwd_params& p, const Problem&) {
             p.workspace = fake_pointer<void>(kFakeDeviceBase + (uintptr_t{1} << 41));
             p.workspace_size = hattn_fwd_workspace_size() - 1;
         },
         HATTN_ERROR_WORKSPACE, {"workspace_size", "hattn_fwd_workspace_size()"}},
        {"WorkspaceAddressWraps",
         [](hattn_fwd_params& p, const Problem&) {
             p.workspace = fake_pointer<void>(kTopOfAddressSpace + 0xF0);
             p.workspace_size = hattn_fwd_workspace_size();
         },
         HATTN_ERROR_SIZE_OVERFLOW, {"workspace"}},
        {"OrderScaleBeforeWorkspace",
         [](hattn_fwd_params& p, const Problem&) {
             p.softmax_scale = -1.f;
             p.workspace = fake_pointer<void>(kFakeDeviceBase + 3);
         },
         HATTN_ERROR_INVALID_SCALE, {"softmax_scale"}},
        // Order: with several problems, the most basic one is reported.
        {"OrderNullBeforeDtype", [](hattn_fwd_params& p, const Problem&) { p.o = nullptr; p.dtype = hattn::test::enum_from_int<hattn_dtype>(9); },
         HATTN_ERROR_NULL_POINTER, {"o is NULL"}},
        {"OrderStrideBeforeScale", [](hattn_fwd_params& p, const Problem&) { p.q_seq_stride = -1; p.softmax_scale = -1.f; },
         HATTN_ERROR_INVALID_STRIDE, {"q_seq_stride"}},
    };
    cases.insert(cases.end(), own.begin(), own.end());
    return cases;
}

class RejectTest : public ::testing::TestWithParam<RejectCase> {};

TEST_P(RejectTest, StatusMessageAndNoSideEffects) {
    const Problem problem;
    hattn_fwd_params p = problem.params();
    ASSERT_EQ(hattn_fwd_validate(&p, nullptr, 0), HATTN_SUCCESS) << "the unmodified problem must be valid";
    GetParam().mutate(p, problem);
    expect_rejected(problem, p, GetParam().expected, GetParam().message_names);
}

INSTANTIATE_TEST_SUITE_P(Validation, RejectTest, ::testing::ValuesIn(reject_cases()),
                         [](const ::testing::TestParamInfo<RejectCase>& info) { return info.param.name; });

TEST(Validation, NullParams) { hattn::test::expect_null_params_rejected<hattn_fwd_params>(); }

// ---- Accepted inputs --------------------------------------------------------------------------

TEST(Validation, AcceptsTheBaseProblem) {
    const Problem problem;
    const hattn_fwd_params p = problem.params();
    expect_accepted(p);
    hattn_fwd_params no_lse = p;
    no_lse.lse = nullptr;
    expect_accepted(no_lse);
    EXPECT_TRUE(problem.untouched()) << "validate wrote through a tensor pointer";
}

// Shapes are checked without data: validation never reads the tensors.
hattn_fwd_params fake_contiguous(int b, int hq, int hkv, int sq, int sk, int d, hattn_dtype dtype) {
    constexpr uintptr_t kGap = kFakeTensorGap;
    return hattn_fwd_params_contiguous(fake_pointer<const void>(kFakeDeviceBase), fake_pointer<const void>(kFakeDeviceBase + kGap),
                                       fake_pointer<const void>(kFakeDeviceBase + 2 * kGap),
                                       fake_pointer<void>(kFakeDeviceBase + 3 * kGap), b, hq, hkv, sq, sk, d, dtype);
}

TEST(Validation, AcceptsEveryBuiltHeadDimAndDtype) {
    for (int d : {64, 128, 256}) {
        for (hattn_dtype dtype : {HATTN_DTYPE_BF16, HATTN_DTYPE_FP16}) {
            SCOPED_TRACE("d = " + std::to_string(d) + ", dtype = " + std::to_string(dtype));
            expect_accepted(fake_contiguous(2, 16, 16, 4096, 4096, d, dtype));
        }
    }
}

TEST(Validation, AcceptsGqaAndMqa) {
    expect_accepted(fake_contiguous(2, 64, 8, 1024, 1024, 128, HATTN_DTYPE_BF16));  // GQA 8:1
    expect_accepted(fake_contiguous(3, 32, 1, 100, 300, 64, HATTN_DTYPE_FP16));     // MQA
    expect_accepted(fake_contiguous(1, 65536, 1, 1, 1, 64, HATTN_DTYPE_BF16));      // heads beyond a grid axis: tiles are 1-D
    expect_accepted(fake_contiguous(65536, 1, 1, 1, 1, 64, HATTN_DTYPE_BF16));      // batch likewise
}

TEST(Validation, AcceptsCausalWithUnequalLengths) {
    for (auto [sq, sk] : {std::pair{1, 4097}, std::pair{4097, 1}, std::pair{17, 1000}, std::pair{1000, 17}}) {
        hattn_fwd_params p = fake_contiguous(1, 4, 2, sq, sk, 128, HATTN_DTYPE_BF16);
        p.causal = 1;
        SCOPED_TRACE("sq = " + std::to_string(sq) + ", sk = " + std::to_string(sk));
        expect_accepted(p);
    }
}

TEST(Validation, AcceptsNonContiguousStrides) {
    const int b = 2, h = 8, s = 333, d = 128;
    // q, k, v sliced from one packed [b, s, 3, h, d] QKV buffer.
    const int64_t row = 3LL * h * d;
    hattn_fwd_params p = fake_contiguous(b, h, h, s, s, d, HATTN_DTYPE_BF16);
    const uintptr_t qkv = kFakeDeviceBase;
    const uintptr_t bytes_per_slot = static_cast<uintptr_t>(h) * d * 2;
    p.q = fake_pointer<const void>(qkv);
    p.k = fake_pointer<const void>(qkv + bytes_per_slot);
    p.v = fake_pointer<const void>(qkv + 2 * bytes_per_slot);
    p.q_seq_stride = p.k_seq_stride = p.v_seq_stride = row;
    p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = row * s;
    expect_accepted(p);

    // Head-major [b, h, s, d] output with padded rows and a padded batch stride.
    p.o_seq_stride = d + 64;
    p.o_head_stride = (d + 64) * s;
    p.o_batch_stride = p.o_head_stride * h + 1024;
    expect_accepted(p);

    // K and V sharing storage (inputs may alias: they are only read).
    p.v = p.k;
    expect_accepted(p);
}

TEST(Validation, SizeOneDimensionsIgnoreTheirStrideForOverlap) {
    hattn_fwd_params p = fake_contiguous(1, 1, 1, 64, 64, 64, HATTN_DTYPE_BF16);
    p.o_batch_stride = 8;  // batch == 1: never stepped through
    p.o_head_stride = 8;   // heads == 1: never stepped through
    expect_accepted(p);
}

TEST(Validation, AcceptsScalesLseAndAblationFlags) {
    hattn_fwd_params p = fake_contiguous(2, 16, 16, 1000, 1000, 128, HATTN_DTYPE_BF16);
    p.softmax_scale = 0.3f;
    p.lse = fake_pointer<float>(kFakeDeviceBase + (uintptr_t{1} << 40) + 4);  // 4-byte aligned is enough
    expect_accepted(p);
    p.softmax_scale = 0.f;  // the default
    expect_accepted(p);
    for (unsigned flags : {0u, unsigned{HATTN_FWD_NO_PINGPONG}, unsigned{HATTN_FWD_NO_INTRA_WG_OVERLAP},
                           unsigned{HATTN_FWD_NO_PINGPONG | HATTN_FWD_NO_INTRA_WG_OVERLAP}}) {
        p.flags = flags;
        SCOPED_TRACE("flags = " + std::to_string(flags));
        expect_accepted(p);
    }
}

TEST(Validation, AcceptsTheOptionalWorkspace) {
    EXPECT_GE(hattn_fwd_workspace_size(), size_t{8});  // two int counters at least
    EXPECT_EQ(hattn_fwd_workspace_size() % 16, size_t{0});
    hattn_fwd_params p = fake_contiguous(2, 16, 16, 1000, 1000, 128, HATTN_DTYPE_BF16);
    EXPECT_EQ(p.workspace, nullptr);  // the contiguous helper leaves none
    EXPECT_EQ(p.workspace_size, size_t{0});
    p.workspace_size = 1;  // ignored without a workspace
    expect_accepted(p);
    for (int causal : {0, 1}) {
        p.causal = causal;
        p.workspace = fake_pointer<void>(kFakeDeviceBase + (uintptr_t{1} << 41) + 16);
        p.workspace_size = hattn_fwd_workspace_size() + 100;  // larger is fine
        SCOPED_TRACE("causal = " + std::to_string(causal));
        expect_accepted(p);
    }
}

TEST(Validation, AcceptsLargestTmaStride) {
    hattn_fwd_params p = fake_contiguous(2, 1, 1, 1, 1, 64, HATTN_DTYPE_BF16);
    p.q_batch_stride = kTwoPow39 - 8;  // 2^40 - 16 bytes: the largest legal stride
    expect_accepted(p);
}

// ---- Messages, strings, helpers -------------------------------------------------------------------

TEST(Validation, MessageIsTruncatedAndTerminated) {
    hattn_fwd_params p = Problem().params();
    p.head_dim = 96;
    char small[8];
    std::memset(small, 'X', sizeof(small));
    EXPECT_EQ(hattn_fwd_validate(&p, small, sizeof(small)), HATTN_ERROR_UNSUPPORTED_HEAD_DIM);
    EXPECT_EQ(std::strlen(small), sizeof(small) - 1);
    EXPECT_EQ(std::string(small), "head_di");
    char one = 'X';
    EXPECT_EQ(hattn_fwd_validate(&p, &one, 1), HATTN_ERROR_UNSUPPORTED_HEAD_DIM);
    EXPECT_EQ(one, '\0');
    char untouched = 'X';
    EXPECT_EQ(hattn_fwd_validate(&p, &untouched, 0), HATTN_ERROR_UNSUPPORTED_HEAD_DIM);
    EXPECT_EQ(untouched, 'X') << "msg_len 0 must not write";
}

TEST(Validation, StatusStringsAreDistinct) {
    const hattn_status all[] = {HATTN_SUCCESS,
                                HATTN_ERROR_NULL_PARAMS,
                                HATTN_ERROR_NULL_POINTER,
                                HATTN_ERROR_MISALIGNED,
                                HATTN_ERROR_UNSUPPORTED_HEAD_DIM,
                                HATTN_ERROR_UNSUPPORTED_DTYPE,
                                HATTN_ERROR_INVALID_SIZE,
                                HATTN_ERROR_INVALID_STRIDE,
                                HATTN_ERROR_HEADS_NOT_DIVISIBLE,
                                HATTN_ERROR_SIZE_OVERFLOW,
                                HATTN_ERROR_INVALID_SCALE,
                                HATTN_ERROR_INVALID_FLAGS,
                                HATTN_ERROR_UNSUPPORTED_DEVICE,
                                HATTN_ERROR_CUDA,
                                HATTN_ERROR_WORKSPACE};
    std::set<std::string> seen;
    const std::string unknown = hattn_status_string(hattn::test::enum_from_int<hattn_status>(1000));
    for (hattn_status s : all) {
        const char* text = hattn_status_string(s);
        ASSERT_NE(text, nullptr);
        EXPECT_GT(std::strlen(text), 0u);
        EXPECT_NE(std::string(text), unknown) << "status " << s << " has no string";
        EXPECT_TRUE(seen.insert(text).second) << "duplicate string: " << text;
    }
}

TEST(Validation, ContiguousParamsStrides) {
    const int b = 3, hq = 12, hkv = 4, sq = 100, sk = 77, d = 64;
    const hattn_fwd_params p = fake_contiguous(b, hq, hkv, sq, sk, d, HATTN_DTYPE_FP16);
    EXPECT_EQ(p.q_head_stride, d);
    EXPECT_EQ(p.q_seq_stride, int64_t{hq} * d);
    EXPECT_EQ(p.q_batch_stride, int64_t{sq} * hq * d);
    EXPECT_EQ(p.k_head_stride, d);
    EXPECT_EQ(p.k_seq_stride, int64_t{hkv} * d);
    EXPECT_EQ(p.k_batch_stride, int64_t{sk} * hkv * d);
    EXPECT_EQ(p.v_seq_stride, p.k_seq_stride);
    EXPECT_EQ(p.v_batch_stride, p.k_batch_stride);
    EXPECT_EQ(p.o_seq_stride, p.q_seq_stride);
    EXPECT_EQ(p.o_batch_stride, p.q_batch_stride);
    EXPECT_EQ(p.lse, nullptr);
    EXPECT_EQ(p.softmax_scale, 0.f);
    EXPECT_EQ(p.causal, 0);
    EXPECT_EQ(p.flags, 0u);
    EXPECT_EQ(p.dtype, HATTN_DTYPE_FP16);
    // Large shapes: strides computed in 64 bits.
    const hattn_fwd_params big = fake_contiguous(1, 64, 64, 1 << 20, 1 << 20, 256, HATTN_DTYPE_BF16);
    EXPECT_EQ(big.q_batch_stride, (int64_t{1} << 20) * 64 * 256);
}

// Strides past int64 (seqlen * heads * head_dim up to ~2^93) are computed without signed
// overflow: they saturate at a positive multiple of 8 elements, which validation reports as
// HATTN_ERROR_SIZE_OVERFLOW (not as a misaligned or negative stride).
TEST(Validation, ContiguousParamsSaturateHugeStrides) {
    constexpr int kMax = std::numeric_limits<int>::max();
    const hattn_fwd_params p = fake_contiguous(kMax, kMax, kMax, kMax, kMax, 256, HATTN_DTYPE_BF16);
    for (int64_t stride : {p.q_batch_stride, p.k_batch_stride, p.v_batch_stride, p.o_batch_stride}) {
        EXPECT_GT(stride, int64_t{1} << 62);
        EXPECT_EQ(stride % 8, 0);
    }
    EXPECT_EQ(p.q_seq_stride, int64_t{kMax} * 256);  // exact where it fits
    hattn_status status = HATTN_SUCCESS;
    const std::string msg = validate_message(&p, &status);
    EXPECT_EQ(status, HATTN_ERROR_SIZE_OVERFLOW) << msg;

    // One batch (batch * heads fits int32) whose q and o batch strides alone pass int64.
    const hattn_fwd_params wide = fake_contiguous(1, kMax, kMax, kMax, 1, 256, HATTN_DTYPE_FP16);
    EXPECT_GT(wide.q_batch_stride, 0);
    EXPECT_EQ(hattn_fwd_validate(&wide, nullptr, 0), HATTN_ERROR_SIZE_OVERFLOW);
    // Negative sizes give negative (or saturated negative) strides, never undefined behaviour;
    // validation reports the size.
    const hattn_fwd_params negative = fake_contiguous(1, -kMax, 1, kMax, 1, 256, HATTN_DTYPE_BF16);
    EXPECT_LT(negative.q_batch_stride, 0);
    EXPECT_EQ(hattn_fwd_validate(&negative, nullptr, 0), HATTN_ERROR_INVALID_SIZE);
}

// Positive control for the "no CUDA call" checks above (see host_validation_util.h).
TEST(Validation, ValidInputReachesTheDeviceCheck) { hattn::test::expect_valid_input_reaches_the_device_check<Problem>(); }

}  // namespace
