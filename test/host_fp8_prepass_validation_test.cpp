// hattn/test/host_fp8_prepass_validation_test.cpp -- hattn_fp8_prepass_validate and
// hattn_fp8_prepass's rejection path, on the CPU (runs in CI without a GPU).
//
// Every rejected input is checked three ways (test/host_validation_util.h): the status, a message
// that names the bad argument, and that nothing happened (every tensor, descale and table is a
// sentinel-filled HOST buffer that must stay intact, and no CUDA call is made).
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
#include "kernels/fp8_prepass_args.h"

namespace {

using hattn::test::enum_from_int;
using hattn::test::expect_accepted;
using hattn::test::expect_rejected;
using hattn::test::fake_pointer;
using hattn::test::kFakeDeviceBase;
using hattn::test::kFakeTensorGap;
using hattn::test::kTopOfAddressSpace;
using hattn::test::kTwoPow39;
using hattn::test::SentinelBuffer;

// A small valid problem: batch 2, 8 query heads on 2 KV heads, sq 33, sk 47 (blocks: 1 each),
// d 64, bf16, with half-split RoPE and the Hadamard transform.
struct Problem {
    static constexpr int kBatch = 2, kHeadsQ = 8, kHeadsKv = 2, kSeqQ = 33, kSeqK = 47, kDim = 64;
    static constexpr int kRopeRows = 64;
    static constexpr size_t kElem = 2;
    SentinelBuffer q{kBatch * kSeqQ * kHeadsQ * kDim * kElem};
    SentinelBuffer k{kBatch * kSeqK * kHeadsKv * kDim * kElem};
    SentinelBuffer v{kBatch * kSeqK * kHeadsKv * kDim * kElem};
    SentinelBuffer q8{kBatch * kSeqQ * kHeadsQ * kDim};
    SentinelBuffer k8{kBatch * kSeqK * kHeadsKv * kDim};
    SentinelBuffer v8{kBatch * kSeqK * kHeadsKv * kDim};
    SentinelBuffer qs{kBatch * kHeadsQ * sizeof(float)};
    SentinelBuffer ks{kBatch * kHeadsKv * sizeof(float)};
    SentinelBuffer vs{kBatch * kHeadsKv * sizeof(float)};
    SentinelBuffer cos{kRopeRows * kDim / 2 * sizeof(float)};
    SentinelBuffer sin{kRopeRows * kDim / 2 * sizeof(float)};

    hattn_fp8_prepass_params params() const {
        hattn_fp8_prepass_params p = hattn_fp8_prepass_params_contiguous(
            q.data(), k.data(), v.data(), q8.data(), k8.data(), v8.data(), reinterpret_cast<float*>(qs.data()),
            reinterpret_cast<float*>(ks.data()), reinterpret_cast<float*>(vs.data()), kBatch, kHeadsQ, kHeadsKv,
            kSeqQ, kSeqK, kDim, HATTN_DTYPE_BF16);
        p.rope = HATTN_ROPE_HALF;
        p.rope_cos = reinterpret_cast<const float*>(cos.data());
        p.rope_sin = reinterpret_cast<const float*>(sin.data());
        p.rope_rows = kRopeRows;
        p.rope_q_offset = kSeqK - kSeqQ;
        p.hadamard = 1;
        p.hadamard_seed = 42;
        return p;
    }
    bool untouched() const {
        return hattn::test::all_intact({&q, &k, &v, &q8, &k8, &v8, &qs, &ks, &vs, &cos, &sin});
    }
};

using P = hattn_fp8_prepass_params;
using S = const Problem&;
using RejectCase = hattn::test::RejectCase<P, Problem>;


std::vector<RejectCase> reject_cases() {
    const int d = Problem::kDim;
    return {
        // Null pointers: inputs, outputs, descales, tables (only when RoPE is on).
        {"NullQ", [](P& p, S) { p.q = nullptr; }, HATTN_ERROR_NULL_POINTER, {"q is NULL"}},
        {"NullK", [](P& p, S) { p.k = nullptr; }, HATTN_ERROR_NULL_POINTER, {"k is NULL"}},
        {"NullV", [](P& p, S) { p.v = nullptr; }, HATTN_ERROR_NULL_POINTER, {"v is NULL"}},
        {"NullQFp8", [](P& p, S) { p.q_fp8 = nullptr; }, HATTN_ERROR_NULL_POINTER, {"q_fp8 is NULL"}},
        {"NullKFp8", [](P& p, S) { p.k_fp8 = nullptr; }, HATTN_ERROR_NULL_POINTER, {"k_fp8 is NULL"}},
        {"NullVFp8", [](P& p, S) { p.v_fp8 = nullptr; }, HATTN_ERROR_NULL_POINTER, {"v_fp8 is NULL"}},
        {"NullQDescale", [](P& p, S) { p.q_descale = nullptr; }, HATTN_ERROR_NULL_POINTER, {"q_descale is NULL"}},
        {"NullKDescale", [](P& p, S) { p.k_descale = nullptr; }, HATTN_ERROR_NULL_POINTER, {"k_descale is NULL"}},
        {"NullVDescale", [](P& p, S) { p.v_descale = nullptr; }, HATTN_ERROR_NULL_POINTER, {"v_descale is NULL"}},
        {"NullRopeCos", [](P& p, S) { p.rope_cos = nullptr; }, HATTN_ERROR_NULL_POINTER, {"rope_cos is NULL"}},
        {"NullRopeSin", [](P& p, S) { p.rope = HATTN_ROPE_INTERLEAVED; p.rope_sin = nullptr; },
         HATTN_ERROR_NULL_POINTER, {"rope_sin is NULL"}},
        // dtype and head_dim.
        {"DtypeUnknown", [](P& p, S) { p.dtype = enum_from_int<hattn_dtype>(7); }, HATTN_ERROR_UNSUPPORTED_DTYPE,
         {"dtype = 7"}},
        {"HeadDim96", [](P& p, S) { p.head_dim = 96; }, HATTN_ERROR_UNSUPPORTED_HEAD_DIM, {"head_dim = 96"}},
        {"HeadDim32", [](P& p, S) { p.head_dim = 32; }, HATTN_ERROR_UNSUPPORTED_HEAD_DIM, {"head_dim = 32"}},
        // Sizes and GQA.
        {"BatchZero", [](P& p, S) { p.batch = 0; }, HATTN_ERROR_INVALID_SIZE, {"batch = 0"}},
        {"HeadsQNegative", [](P& p, S) { p.heads_q = -8; }, HATTN_ERROR_INVALID_SIZE, {"heads_q = -8"}},
        {"HeadsKvZero", [](P& p, S) { p.heads_kv = 0; }, HATTN_ERROR_INVALID_SIZE, {"heads_kv = 0"}},
        {"SeqlenQZero", [](P& p, S) { p.seqlen_q = 0; }, HATTN_ERROR_INVALID_SIZE, {"seqlen_q = 0"}},
        {"SeqlenKNegative", [](P& p, S) { p.seqlen_k = -5; }, HATTN_ERROR_INVALID_SIZE, {"seqlen_k = -5"}},
        {"HeadsNotDivisible", [](P& p, S) { p.heads_kv = 3; }, HATTN_ERROR_HEADS_NOT_DIVISIBLE, {"heads_kv = 3"}},
        // RoPE mode and flags.
        {"RopeUnknown", [](P& p, S) { p.rope = enum_from_int<hattn_rope>(3); }, HATTN_ERROR_INVALID_FLAGS,
         {"rope = 3"}},
        {"RopeNegative", [](P& p, S) { p.rope = enum_from_int<hattn_rope>(-1); }, HATTN_ERROR_INVALID_FLAGS,
         {"rope = -1"}},
        {"FlagsUnknown", [](P& p, S) { p.flags = 4; }, HATTN_ERROR_INVALID_FLAGS, {"flags", "0x4"}},
        {"FlagsUnknownBesideVt", [](P& p, S) { p.flags = HATTN_FP8_PREPASS_V_TRANSPOSED | 8u; },
         HATTN_ERROR_INVALID_FLAGS, {"flags", "0x8"}},
        // V^T output: its own alignment rule (the FP8 forward's TMA); v_fp8's strides are ignored.
        {"VtOutputMisaligned",
         [](P& p, S s) {
             p.flags = HATTN_FP8_PREPASS_V_TRANSPOSED;
             p.v_fp8 = s.v8.data() + 8;
         },
         HATTN_ERROR_MISALIGNED, {"v_fp8 =", "16-byte", "V_TRANSPOSED"}},
        // Input strides and alignment (16 bytes: the kernel's vector loads).
        {"QSeqStrideZero", [](P& p, S) { p.q_seq_stride = 0; }, HATTN_ERROR_INVALID_STRIDE, {"q_seq_stride"}},
        {"KHeadStrideNegative", [d](P& p, S) { p.k_head_stride = -d; }, HATTN_ERROR_INVALID_STRIDE,
         {"k_head_stride"}},
        {"VBatchStrideZero", [](P& p, S) { p.v_batch_stride = 0; }, HATTN_ERROR_INVALID_STRIDE, {"v_batch_stride"}},
        {"QMisaligned", [](P& p, S s) { p.q = s.q.data() + 2; }, HATTN_ERROR_MISALIGNED, {"q =", "16-byte"}},
        {"VMisaligned8", [](P& p, S s) { p.v = s.v.data() + 8; }, HATTN_ERROR_MISALIGNED, {"v ="}},
        {"KSeqStrideOdd", [d](P& p, S) { p.k_seq_stride = Problem::kHeadsKv * d + 1; }, HATTN_ERROR_MISALIGNED,
         {"k_seq_stride"}},
        {"QHeadStride8BytesOff", [d](P& p, S) { p.q_head_stride = d + 4; }, HATTN_ERROR_MISALIGNED,
         {"q_head_stride"}},
        // Output strides and alignment (bytes: one per e4m3 element).
        {"QFp8SeqStrideZero", [](P& p, S) { p.q_fp8_seq_stride = 0; }, HATTN_ERROR_INVALID_STRIDE,
         {"q_fp8_seq_stride"}},
        {"VFp8HeadStrideNegative", [](P& p, S) { p.v_fp8_head_stride = -64; }, HATTN_ERROR_INVALID_STRIDE,
         {"v_fp8_head_stride"}},
        {"KFp8Misaligned", [](P& p, S s) { p.k_fp8 = s.k8.data() + 8; }, HATTN_ERROR_MISALIGNED, {"k_fp8 ="}},
        {"QFp8HeadStride72Bytes", [](P& p, S) { p.q_fp8_head_stride = 72; }, HATTN_ERROR_MISALIGNED,
         {"q_fp8_head_stride", "72 bytes"}},
        {"VFp8BatchStrideNot16B", [](P& p, S) { p.v_fp8_batch_stride += 8; }, HATTN_ERROR_MISALIGNED,
         {"v_fp8_batch_stride"}},
        // Descales: fp32.
        {"KDescaleMisaligned", [](P& p, S s) { p.k_descale = reinterpret_cast<float*>(s.ks.data() + 2); },
         HATTN_ERROR_MISALIGNED, {"k_descale"}},
        // Tables.
        {"RopeCosMisaligned", [](P& p, S s) { p.rope_cos = reinterpret_cast<const float*>(s.cos.data() + 4); },
         HATTN_ERROR_MISALIGNED, {"rope_cos"}},
        {"RopeQOffsetNegative", [](P& p, S) { p.rope_q_offset = -1; }, HATTN_ERROR_INVALID_SIZE,
         {"rope_q_offset = -1"}},
        {"RopeRowsBelowSeqlenK", [](P& p, S) { p.rope_rows = Problem::kSeqK - 1; }, HATTN_ERROR_INVALID_SIZE,
         {"rope_rows = 46"}},
        {"RopeRowsBelowQueryRows", [](P& p, S) { p.rope_q_offset = 40; }, HATTN_ERROR_INVALID_SIZE,
         {"rope_rows", "rope_q_offset + seqlen_q = 73"}},
        {"RopeTableAddressWraps",
         [](P& p, S) { p.rope_sin = fake_pointer<const float>(kTopOfAddressSpace); }, HATTN_ERROR_SIZE_OVERFLOW,
         {"rope_sin:"}},
        // Grid and index limits.
        {"BatchTimesHeadsOverInt32",
         [](P& p, S) {
             p.batch = 65535;
             p.heads_q = 65535;
             p.heads_kv = 1;
         },
         HATTN_ERROR_SIZE_OVERFLOW, {"batch * heads_q"}},
        {"BlocksOverInt32",
         [](P& p, S) {
             p.batch = 1024;
             p.heads_q = 1024;
             p.heads_kv = 1;
             p.seqlen_q = 128 * 2048;
             p.rope = HATTN_ROPE_NONE;
         },
         HATTN_ERROR_SIZE_OVERFLOW, {"q:", "thread blocks"}},
        {"QBatchStride2Pow40Bytes", [](P& p, S) { p.q_batch_stride = kTwoPow39; }, HATTN_ERROR_SIZE_OVERFLOW,
         {"q_batch_stride", "2^40"}},
        {"KOffsetOverInt64",
         [](P& p, S) {
             p.seqlen_k = 1 << 30;
             p.k_seq_stride = kTwoPow39 - 8;
             p.rope = HATTN_ROPE_NONE;
         },
         HATTN_ERROR_SIZE_OVERFLOW, {"k:", "int64"}},
        {"VFp8OffsetOverInt64",
         [](P& p, S) {
             p.seqlen_k = 1 << 30;
             p.v_fp8_seq_stride = int64_t{1} << 40;
             p.rope = HATTN_ROPE_NONE;
         },
         HATTN_ERROR_SIZE_OVERFLOW, {"v_fp8:", "int64"}},
        {"QFp8AddressWraps", [](P& p, S) { p.q_fp8 = fake_pointer<void>(kTopOfAddressSpace); },
         HATTN_ERROR_SIZE_OVERFLOW, {"q_fp8:", "byte range"}},
        {"VDescaleAddressWraps", [](P& p, S) { p.v_descale = fake_pointer<float>(std::numeric_limits<uintptr_t>::max() & ~uintptr_t{3}); },
         HATTN_ERROR_SIZE_OVERFLOW, {"v_descale:"}},
        // Outputs written by many thread blocks: rows must not overlap.
        {"QFp8HeadsOverlap", [](P& p, S) { p.q_fp8_head_stride = 32; }, HATTN_ERROR_INVALID_STRIDE,
         {"q_fp8_head_stride", "overlap"}},
        {"KFp8SeqOverlapsHeads", [d](P& p, S) { p.k_fp8_seq_stride = (Problem::kHeadsKv - 1) * d; },
         HATTN_ERROR_INVALID_STRIDE, {"k_fp8_", "overlap"}},
        {"VFp8BatchOverlapsSeq", [](P& p, S) { p.v_fp8_batch_stride = p.v_fp8_seq_stride * 16; },
         HATTN_ERROR_INVALID_STRIDE, {"v_fp8_batch_stride", "overlap"}},
        // Order: with several problems, the most basic one is reported.
        {"OrderNullBeforeDtype",
         [](P& p, S) {
             p.v_descale = nullptr;
             p.dtype = enum_from_int<hattn_dtype>(9);
         },
         HATTN_ERROR_NULL_POINTER, {"v_descale is NULL"}},
        {"OrderHeadDimBeforeSize",
         [](P& p, S) {
             p.head_dim = 80;
             p.batch = 0;
         },
         HATTN_ERROR_UNSUPPORTED_HEAD_DIM, {"head_dim = 80"}},
        {"OrderStrideBeforeTables",
         [](P& p, S) {
             p.q_seq_stride = -1;
             p.rope_rows = 0;
         },
         HATTN_ERROR_INVALID_STRIDE, {"q_seq_stride"}},
    };
}

class Fp8RejectTest : public ::testing::TestWithParam<RejectCase> {};

TEST_P(Fp8RejectTest, StatusMessageAndNoSideEffects) {
    const Problem problem;
    P p = problem.params();
    char msg[hattn::test::kMsgLen];
    ASSERT_EQ(hattn_fp8_prepass_validate(&p, msg, sizeof msg), HATTN_SUCCESS)
        << "the unmodified problem must be valid: " << msg;
    GetParam().mutate(p, problem);
    expect_rejected(problem, p, GetParam().expected, GetParam().message_names);
}

INSTANTIATE_TEST_SUITE_P(Validation, Fp8RejectTest, ::testing::ValuesIn(reject_cases()),
                         [](const ::testing::TestParamInfo<RejectCase>& info) { return info.param.name; });

TEST(Fp8Validation, NullParams) { hattn::test::expect_null_params_rejected<P>(); }

// ---- Accepted inputs --------------------------------------------------------------------------

P fake_contiguous(int b, int hq, int hkv, int sq, int sk, int d, hattn_dtype dtype) {
    auto at = [](int i) { return kFakeDeviceBase + i * kFakeTensorGap; };
    return hattn_fp8_prepass_params_contiguous(
        fake_pointer<const void>(at(0)), fake_pointer<const void>(at(1)), fake_pointer<const void>(at(2)),
        fake_pointer<void>(at(3)), fake_pointer<void>(at(4)), fake_pointer<void>(at(5)), fake_pointer<float>(at(6)),
        fake_pointer<float>(at(7)), fake_pointer<float>(at(8)), b, hq, hkv, sq, sk, d, dtype);
}

TEST(Fp8Validation, AcceptsTheBaseProblemAndTheBlockQuantizer) {
    const Problem problem;
    P p = problem.params();
    expect_accepted(p);
    p.rope = HATTN_ROPE_NONE;  // tables are ignored without RoPE
    p.rope_cos = p.rope_sin = nullptr;
    p.rope_rows = 0;
    p.hadamard = 0;
    expect_accepted(p);
    EXPECT_TRUE(problem.untouched());
}

TEST(Fp8Validation, AcceptsEveryHeadDimDtypeAndRope) {
    for (int d : {64, 128, 256}) {
        for (hattn_dtype t : {HATTN_DTYPE_BF16, HATTN_DTYPE_FP16}) {
            for (hattn_rope rope : {HATTN_ROPE_NONE, HATTN_ROPE_INTERLEAVED, HATTN_ROPE_HALF}) {
                SCOPED_TRACE("d = " + std::to_string(d) + ", rope = " + std::to_string(rope));
                P p = fake_contiguous(2, 16, 4, 4097, 4097, d, t);
                p.rope = rope;
                p.rope_cos = fake_pointer<const float>(kFakeDeviceBase + 9 * kFakeTensorGap);
                p.rope_sin = fake_pointer<const float>(kFakeDeviceBase + 10 * kFakeTensorGap);
                p.rope_rows = 4097;
                p.hadamard = 1;
                expect_accepted(p);
            }
        }
    }
}

TEST(Fp8Validation, AcceptsStridedInputsAndOutputs) {
    const int b = 2, h = 8, s = 333, d = 128;
    P p = fake_contiguous(b, h, h, s, s, d, HATTN_DTYPE_BF16);
    // q, k, v sliced from one packed [b, s, 3, h, d] buffer.
    const int64_t row = 3LL * h * d;
    p.q_seq_stride = p.k_seq_stride = p.v_seq_stride = row;
    p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = row * s;
    // Head-major e4m3 outputs with padded rows.
    p.q_fp8_seq_stride = d + 16;
    p.q_fp8_head_stride = (d + 16) * s;
    p.q_fp8_batch_stride = p.q_fp8_head_stride * h + 1024;
    expect_accepted(p);
}

TEST(Fp8Validation, AcceptsVTransposedOutputWithAnyVStrides) {
    P p = fake_contiguous(2, 8, 2, 1000, 4097, 128, HATTN_DTYPE_BF16);
    p.flags = HATTN_FP8_PREPASS_V_TRANSPOSED;
    p.v_fp8_batch_stride = p.v_fp8_seq_stride = p.v_fp8_head_stride = 0;  // ignored: V^T's layout is fixed
    expect_accepted(p);
    p.v_fp8_seq_stride = -3;
    expect_accepted(p);
    p.flags = 0;  // the same strides without the flag are an error
    char msg[hattn::test::kMsgLen];
    EXPECT_EQ(hattn_fp8_prepass_validate(&p, msg, sizeof msg), HATTN_ERROR_INVALID_STRIDE) << msg;
}

TEST(Fp8Validation, ContiguousParams) {
    const P p = fake_contiguous(3, 12, 4, 100, 77, 64, HATTN_DTYPE_FP16);
    EXPECT_EQ(p.q_fp8_head_stride, 64);
    EXPECT_EQ(p.q_fp8_seq_stride, 12 * 64);
    EXPECT_EQ(p.k_fp8_batch_stride, 77LL * 4 * 64);
    EXPECT_EQ(p.v_seq_stride, 4 * 64);
    EXPECT_EQ(p.rope, HATTN_ROPE_NONE);
    EXPECT_EQ(p.hadamard, 0);
    EXPECT_EQ(p.flags, 0u);
    expect_accepted(p);
}

// The C API's layout (a variant of all 0s): with the Hadamard, Q and K take the tensor-core kernel
// and V's quantizer a second launch overlapped with theirs (bench/RESULTS.md run 71a); without it
// nothing overlaps (one launch for all three, or with RoPE and V^T out a plain second one, not
// measured overlapped). A named variant overlaps only when its fourth field says so ("16x1x1" is
// the plain launch the A/B compares with).
TEST(Fp8PrepassDefaults, VOverlappedBehindTheTensorCoreHadamard) {
    namespace f8 = hattn::fp8;
    for (int d : {64, 128, 256}) {
        for (f8::Rope rope : {f8::Rope::kNone, f8::Rope::kInterleaved, f8::Rope::kHalf}) {
            const f8::Fp8PrepassVariant with = f8::fp8_default_variant(d, rope, true);
            EXPECT_EQ(with.chunks, f8::kFp8MmaChunks) << "d " << d;
            EXPECT_EQ(with.v_overlap, 1) << "d " << d;
            EXPECT_EQ(f8::fp8_default_variant(d, rope, false).v_overlap, 0) << "d " << d;
        }
    }
    EXPECT_EQ(f8::Fp8PrepassVariant{}.v_overlap, 0);
}

// Positive control for the "no CUDA call" checks (see host_validation_util.h).
TEST(Fp8Validation, ValidInputReachesTheDeviceCheck) {
    hattn::test::expect_valid_input_reaches_the_device_check<Problem>();
}

}  // namespace
