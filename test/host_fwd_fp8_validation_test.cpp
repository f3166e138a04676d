// hattn/test/host_fwd_fp8_validation_test.cpp -- hattn_fwd_fp8_validate and hattn_fwd_fp8's
// rejection path, on the CPU (runs in CI without a GPU).
//
// Every rejected input is checked three ways (test/host_validation_util.h): the status, a message
// that names the bad argument, and that nothing happened (every tensor, descale and the workspace
// is a sentinel-filled HOST buffer that must stay intact, and no CUDA call is made).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "hattn.h"
#include "host_validation_util.h"

namespace {

using hattn::test::enum_from_int;
using hattn::test::expect_accepted;
using hattn::test::expect_rejected;
using hattn::test::fake_pointer;
using hattn::test::kFakeDeviceBase;
using hattn::test::kFakeTensorGap;
using hattn::test::kTopOfAddressSpace;
using hattn::test::kTwoPow40;
using hattn::test::kTwoPow39;
using hattn::test::SentinelBuffer;

// A small valid problem: batch 2, 8 query heads on 2 KV heads, sq 33, sk 47, d 128, bf16 O.
struct Problem {
    static constexpr int kBatch = 2, kHeadsQ = 8, kHeadsKv = 2, kSeqQ = 33, kSeqK = 47, kDim = 128;
    SentinelBuffer q{kBatch * kSeqQ * kHeadsQ * kDim};
    SentinelBuffer k{kBatch * kSeqK * kHeadsKv * kDim};
    SentinelBuffer v{kBatch * kSeqK * kHeadsKv * kDim};
    SentinelBuffer o{kBatch * kSeqQ * kHeadsQ * kDim * 2};
    SentinelBuffer lse{kBatch * kHeadsQ * kSeqQ * sizeof(float)};
    SentinelBuffer qs{kBatch * kHeadsQ * sizeof(float)};
    SentinelBuffer ks{kBatch * kHeadsKv * sizeof(float)};
    SentinelBuffer vs{kBatch * kHeadsKv * sizeof(float)};
    SentinelBuffer ws{hattn_fwd_fp8_workspace_size(kBatch, kHeadsKv, kSeqK, kDim)};
    SentinelBuffer schedule{hattn_fwd_workspace_size()};

    hattn_fwd_fp8_params params() const {
        hattn_fwd_fp8_params p = hattn_fwd_fp8_params_contiguous(
            q.data(), k.data(), v.data(), o.data(), reinterpret_cast<const float*>(qs.data()),
            reinterpret_cast<const float*>(ks.data()), reinterpret_cast<const float*>(vs.data()), kBatch, kHeadsQ,
            kHeadsKv, kSeqQ, kSeqK, kDim, HATTN_DTYPE_BF16);
        p.lse = reinterpret_cast<float*>(lse.data());
        p.workspace = ws.data();
        p.workspace_size = ws.bytes();
        p.schedule_workspace = schedule.data();
        p.schedule_workspace_size = schedule.bytes();
        p.causal = 1;
        return p;
    }
    bool untouched() const { return hattn::test::all_intact({&q, &k, &v, &o, &lse, &qs, &ks, &vs, &ws, &schedule}); }
};

using P = hattn_fwd_fp8_params;
using S = const Problem&;
using RejectCase = hattn::test::RejectCase<P, Problem>;


std::vector<RejectCase> reject_cases() {
    const int d = Problem::kDim;
    return {
        // Null pointers.
        {"NullQ", [](P& p, S) { p.q = nullptr; }, HATTN_ERROR_NULL_POINTER, {"q is NULL"}},
        {"NullK", [](P& p, S) { p.k = nullptr; }, HATTN_ERROR_NULL_POINTER, {"k is NULL"}},
        {"NullV", [](P& p, S) { p.v = nullptr; }, HATTN_ERROR_NULL_POINTER, {"v is NULL"}},
        {"NullO", [](P& p, S) { p.o = nullptr; }, HATTN_ERROR_NULL_POINTER, {"o is NULL"}},
        {"NullQDescale", [](P& p, S) { p.q_descale = nullptr; }, HATTN_ERROR_NULL_POINTER, {"q_descale is NULL"}},
        {"NullKDescale", [](P& p, S) { p.k_descale = nullptr; }, HATTN_ERROR_NULL_POINTER, {"k_descale is NULL"}},
        {"NullVDescale", [](P& p, S) { p.v_descale = nullptr; }, HATTN_ERROR_NULL_POINTER, {"v_descale is NULL"}},
        // o_dtype and head_dim (only 128 is built).
        {"ODtypeUnknown", [](P& p, S) { p.o_dtype = enum_from_int<hattn_dtype>(7); }, HATTN_ERROR_UNSUPPORTED_DTYPE,
         {"o_dtype = 7"}},
        {"HeadDim96", [](P& p, S) { p.head_dim = 96; }, HATTN_ERROR_UNSUPPORTED_HEAD_DIM, {"head_dim = 96"}},
        {"HeadDim32", [](P& p, S) { p.head_dim = 32; }, HATTN_ERROR_UNSUPPORTED_HEAD_DIM, {"head_dim = 32"}},
        {"HeadDim512", [](P& p, S) { p.head_dim = 512; }, HATTN_ERROR_UNSUPPORTED_HEAD_DIM, {"head_dim = 512"}},
        // Sizes and GQA.
        {"BatchZero", [](P& p, S) { p.batch = 0; }, HATTN_ERROR_INVALID_SIZE, {"batch = 0"}},
        {"HeadsQNegative", [](P& p, S) { p.heads_q = -8; }, HATTN_ERROR_INVALID_SIZE, {"heads_q = -8"}},
        {"SeqlenKZero", [](P& p, S) { p.seqlen_k = 0; }, HATTN_ERROR_INVALID_SIZE, {"seqlen_k = 0"}},
        {"HeadsNotDivisible", [](P& p, S) { p.heads_kv = 3; }, HATTN_ERROR_HEADS_NOT_DIVISIBLE, {"heads_kv = 3"}},
        // e4m3 strides and alignment (bytes).
        {"QSeqStrideZero", [](P& p, S) { p.q_seq_stride = 0; }, HATTN_ERROR_INVALID_STRIDE, {"q_seq_stride"}},
        {"VHeadStrideNegative", [d](P& p, S) { p.v_head_stride = -d; }, HATTN_ERROR_INVALID_STRIDE, {"v_head_stride"}},
        {"QMisaligned", [](P& p, S s) { p.q = s.q.data() + 8; }, HATTN_ERROR_MISALIGNED, {"q =", "16-byte"}},
        {"KMisaligned", [](P& p, S s) { p.k = s.k.data() + 1; }, HATTN_ERROR_MISALIGNED, {"k ="}},
        {"KSeqStride8Bytes", [d](P& p, S) { p.k_seq_stride = Problem::kHeadsKv * d + 8; }, HATTN_ERROR_MISALIGNED,
         {"k_seq_stride", "16 bytes"}},
        {"VBatchStrideNot16B", [](P& p, S) { p.v_batch_stride += 4; }, HATTN_ERROR_MISALIGNED, {"v_batch_stride"}},
        // O: 16-bit elements.
        {"OSeqStrideZero", [](P& p, S) { p.o_seq_stride = 0; }, HATTN_ERROR_INVALID_STRIDE, {"o_seq_stride"}},
        {"OMisaligned", [](P& p, S s) { p.o = s.o.data() + 2; }, HATTN_ERROR_MISALIGNED, {"o ="}},
        {"OHeadStrideOdd", [d](P& p, S) { p.o_head_stride = d + 1; }, HATTN_ERROR_MISALIGNED, {"o_head_stride"}},
        // fp32 arrays.
        {"LseMisaligned", [](P& p, S s) { p.lse = reinterpret_cast<float*>(s.lse.data() + 2); }, HATTN_ERROR_MISALIGNED,
         {"lse"}},
        {"KDescaleMisaligned", [](P& p, S s) { p.k_descale = reinterpret_cast<const float*>(s.ks.data() + 2); },
         HATTN_ERROR_MISALIGNED, {"k_descale"}},
        // Limits.
        {"BatchTimesHeadsOverInt32",
         [](P& p, S) {
             p.batch = 65535;
             p.heads_q = 65535;
             p.heads_kv = 1;
         },
         HATTN_ERROR_SIZE_OVERFLOW, {"batch * heads_q"}},
        {"HeadsKvOverTransposeGrid",
         [](P& p, S) {
             p.heads_q = 65536;
             p.heads_kv = 65536;
         },
         HATTN_ERROR_SIZE_OVERFLOW, {"heads_kv = 65536"}},
        {"KSeqStride2Pow40Bytes", [](P& p, S) { p.k_seq_stride = kTwoPow40; }, HATTN_ERROR_SIZE_OVERFLOW,
         {"k_seq_stride", "2^40"}},
        {"QAddressWraps", [](P& p, S) { p.q = fake_pointer<const void>(kTopOfAddressSpace); }, HATTN_ERROR_SIZE_OVERFLOW,
         {"q:", "byte range"}},
        {"VDescaleAddressWraps",
         [](P& p, S) { p.v_descale = fake_pointer<const float>(std::numeric_limits<uintptr_t>::max() & ~uintptr_t{3}); },
         HATTN_ERROR_SIZE_OVERFLOW, {"v_descale:"}},
        {"OBatchStride2Pow40Bytes", [](P& p, S) { p.o_batch_stride = kTwoPow39; }, HATTN_ERROR_SIZE_OVERFLOW,
         {"o_batch_stride", "2^40"}},
        // O is written by many thread blocks: its rows must not overlap.
        {"OHeadsOverlap", [](P& p, S) { p.o_head_stride = 64; }, HATTN_ERROR_INVALID_STRIDE, {"o_head_stride", "overlap"}},
        // Scale and flags.
        {"ScaleNegative", [](P& p, S) { p.softmax_scale = -0.125f; }, HATTN_ERROR_INVALID_SCALE, {"softmax_scale"}},
        {"ScaleNaN", [](P& p, S) { p.softmax_scale = std::nanf(""); }, HATTN_ERROR_INVALID_SCALE, {"softmax_scale"}},
        {"FlagsUnknown", [](P& p, S) { p.flags = 4; }, HATTN_ERROR_INVALID_FLAGS, {"flags"}},
        {"FlagsUnknownBesideVt", [](P& p, S) { p.flags = HATTN_FWD_FP8_V_TRANSPOSED | 2u; },
         HATTN_ERROR_INVALID_FLAGS, {"flags", "0x2"}},
        // V^T given: 16-byte aligned (TMA); the workspace is then not needed.
        {"VtInputMisaligned",
         [](P& p, S s) {
             p.flags = HATTN_FWD_FP8_V_TRANSPOSED;
             p.v = s.v.data() + 8;
         },
         HATTN_ERROR_MISALIGNED, {"v =", "16-byte", "V_TRANSPOSED"}},
        // Workspace: checked last.
        {"WorkspaceNull", [](P& p, S) { p.workspace = nullptr; }, HATTN_ERROR_WORKSPACE, {"workspace is NULL"}},
        {"WorkspaceMisaligned", [](P& p, S s) { p.workspace = s.ws.data() + 16; }, HATTN_ERROR_WORKSPACE,
         {"256-byte"}},
        {"WorkspaceTooSmall", [](P& p, S) { p.workspace_size -= 1; }, HATTN_ERROR_WORKSPACE, {"workspace_size"}},
        // The optional schedule workspace, after the V^T workspace: aligned, large enough, inside
        // the address space.
        {"ScheduleWorkspaceMisaligned", [](P& p, S s) { p.schedule_workspace = s.schedule.data() + 8; },
         HATTN_ERROR_WORKSPACE, {"schedule_workspace", "16-byte aligned"}},
        {"ScheduleWorkspaceTooSmall", [](P& p, S) { p.schedule_workspace_size = hattn_fwd_workspace_size() - 1; },
         HATTN_ERROR_WORKSPACE, {"schedule_workspace_size", "hattn_fwd_workspace_size()"}},
        {"ScheduleWorkspaceAddressWraps",
         [](P& p, S) { p.schedule_workspace = fake_pointer<void>(hattn::test::kTopOfAddressSpace + 0xF0); },
         HATTN_ERROR_SIZE_OVERFLOW, {"schedule_workspace"}},
        {"OrderWorkspaceBeforeScheduleWorkspace",
         [](P& p, S s) {
             p.workspace = nullptr;
             p.schedule_workspace = s.schedule.data() + 8;
         },
         HATTN_ERROR_WORKSPACE, {"workspace is NULL"}},
        // Order: with several problems, the most basic one is reported.
        {"OrderNullBeforeHeadDim",
         [](P& p, S) {
             p.k_descale = nullptr;
             p.head_dim = 96;
         },
         HATTN_ERROR_NULL_POINTER, {"k_descale is NULL"}},
        {"OrderStrideBeforeWorkspace",
         [](P& p, S) {
             p.q_seq_stride = -1;
             p.workspace = nullptr;
         },
         HATTN_ERROR_INVALID_STRIDE, {"q_seq_stride"}},
    };
}

class Fp8FwdRejectTest : public ::testing::TestWithParam<RejectCase> {};

TEST_P(Fp8FwdRejectTest, StatusMessageAndNoSideEffects) {
    const Problem problem;
    P p = problem.params();
    char msg[hattn::test::kMsgLen];
    ASSERT_EQ(hattn_fwd_fp8_validate(&p, msg, sizeof msg), HATTN_SUCCESS) << "the unmodified problem must be valid: " << msg;
    GetParam().mutate(p, problem);
    expect_rejected(problem, p, GetParam().expected, GetParam().message_names);
}

INSTANTIATE_TEST_SUITE_P(Validation, Fp8FwdRejectTest, ::testing::ValuesIn(reject_cases()),
                         [](const ::testing::TestParamInfo<RejectCase>& info) { return info.param.name; });

TEST(Fp8FwdValidation, NullParams) { hattn::test::expect_null_params_rejected<P>(); }

TEST(Fp8FwdValidation, AcceptsTheBaseProblemAndStridedLayouts) {
    const Problem problem;
    P p = problem.params();
    expect_accepted(p);
    p.lse = nullptr;
    p.causal = 0;
    p.o_dtype = HATTN_DTYPE_FP16;
    expect_accepted(p);
    // Large strided problem on stand-in addresses: e4m3 rows padded by 16 bytes.
    auto at = [](int i) { return kFakeDeviceBase + i * kFakeTensorGap; };
    const int b = 2, h = 16, s = 4097;
    P big = hattn_fwd_fp8_params_contiguous(fake_pointer<const void>(at(0)), fake_pointer<const void>(at(1)),
                                            fake_pointer<const void>(at(2)), fake_pointer<void>(at(3)),
                                            fake_pointer<const float>(at(4)), fake_pointer<const float>(at(5)),
                                            fake_pointer<const float>(at(6)), b, h, h / 4, s, s, 128, HATTN_DTYPE_BF16);
    big.q_seq_stride = int64_t{h} * 128 + 16;
    big.q_batch_stride = big.q_seq_stride * s;
    big.workspace = fake_pointer<void>(at(7));
    big.workspace_size = hattn_fwd_fp8_workspace_size(b, h / 4, s, 128);
    expect_accepted(big);
    EXPECT_TRUE(problem.untouched());
}

TEST(Fp8FwdValidation, AcceptsEveryHeadDim) {
    auto at = [](int i) { return kFakeDeviceBase + i * kFakeTensorGap; };
    for (int d : {64, 128, 256}) {
        SCOPED_TRACE("d = " + std::to_string(d));
        P p = hattn_fwd_fp8_params_contiguous(fake_pointer<const void>(at(0)), fake_pointer<const void>(at(1)),
                                              fake_pointer<const void>(at(2)), fake_pointer<void>(at(3)),
                                              fake_pointer<const float>(at(4)), fake_pointer<const float>(at(5)),
                                              fake_pointer<const float>(at(6)), 2, 8, 2, 1000, 4097, d, HATTN_DTYPE_FP16);
        p.workspace = fake_pointer<void>(at(7));
        p.workspace_size = hattn_fwd_fp8_workspace_size(2, 2, 4097, d);
        expect_accepted(p);
    }
}

TEST(Fp8FwdValidation, AcceptsVTransposedWithoutWorkspace) {
    const Problem problem;
    P p = problem.params();
    p.flags = HATTN_FWD_FP8_V_TRANSPOSED;
    p.workspace = nullptr;
    p.workspace_size = 0;
    p.v_batch_stride = p.v_seq_stride = p.v_head_stride = 0;  // ignored: V^T's layout is fixed
    expect_accepted(p);
    // heads_kv beyond the transpose pass's grid limit is fine when there is no transpose pass.
    auto at = [](int i) { return kFakeDeviceBase + i * kFakeTensorGap; };
    P mqa = hattn_fwd_fp8_params_contiguous(fake_pointer<const void>(at(0)), fake_pointer<const void>(at(1)),
                                            fake_pointer<const void>(at(2)), fake_pointer<void>(at(3)),
                                            fake_pointer<const float>(at(4)), fake_pointer<const float>(at(5)),
                                            fake_pointer<const float>(at(6)), 70000, 1, 1, 128, 128, 64, HATTN_DTYPE_BF16);
    mqa.flags = HATTN_FWD_FP8_V_TRANSPOSED;
    expect_accepted(mqa);
    mqa.flags = 0;
    mqa.workspace = fake_pointer<void>(at(7));
    mqa.workspace_size = hattn_fwd_fp8_workspace_size(70000, 1, 128, 64);
    char msg[hattn::test::kMsgLen];
    EXPECT_EQ(hattn_fwd_fp8_validate(&mqa, msg, sizeof msg), HATTN_ERROR_SIZE_OVERFLOW) << msg;
    EXPECT_TRUE(problem.untouched());
}

TEST(Fp8FwdValidation, WorkspaceSize) {
    // V^T: keys rounded up to 32.
    EXPECT_EQ(hattn_fwd_fp8_workspace_size(2, 3, 33, 128), size_t{2} * 3 * 128 * 64);
    EXPECT_EQ(hattn_fwd_fp8_workspace_size(1, 1, 32, 128), size_t{128} * 32);
    EXPECT_EQ(hattn_fwd_fp8_workspace_size(0, 1, 32, 128), 0u);
    EXPECT_EQ(hattn_fwd_fp8_workspace_size(1, 1, -1, 128), 0u);
}

}  // namespace
