// hattn/test/host_bwd_validation_test.cpp -- hattn_bwd_validate, hattn_bwd's rejection path,
// hattn_bwd_workspace_size and hattn_bwd_params_contiguous, on the CPU (runs in CI without a GPU).
//
// Every rejected input is checked three ways (test/host_validation_util.h): the status, a message
// that names the bad argument, and that nothing happened: all nine tensors and the workspace are
// sentinel-filled HOST buffers that must stay intact, and hattn_bwd must return the validation
// status without a CUDA call (so it behaves the same on a machine without a GPU).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "hattn.h"
#include "host_validation_util.h"
#include "kernels/bwd_args.h"

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
    static constexpr size_t kQBytes = kBatch * kSeqQ * kHeadsQ * kDim * kElem;
    static constexpr size_t kKvBytes = kBatch * kSeqK * kHeadsKv * kDim * kElem;
    SentinelBuffer q{kQBytes}, k{kKvBytes}, v{kKvBytes}, o{kQBytes}, dout{kQBytes};
    SentinelBuffer lse{kBatch * kHeadsQ * kSeqQ * sizeof(float)};
    SentinelBuffer dq{kQBytes}, dk{kKvBytes}, dv{kKvBytes};
    SentinelBuffer workspace{hattn_bwd_workspace_size(kBatch, kHeadsQ, kSeqQ, kDim)};

    hattn_bwd_params params() const {
        hattn_bwd_params p = hattn_bwd_params_contiguous(
            q.data(), k.data(), v.data(), o.data(), dout.data(), reinterpret_cast<const float*>(lse.data()),
            dq.data(), dk.data(), dv.data(), kBatch, kHeadsQ, kHeadsKv, kSeqQ, kSeqK, kDim, HATTN_DTYPE_BF16);
        p.workspace = workspace.data();
        p.workspace_size = workspace.bytes();
        return p;
    }
    bool untouched() const {
        return hattn::test::all_intact({&q, &k, &v, &o, &dout, &lse, &dq, &dk, &dv, &workspace});
    }
};

// ---- Rejections, one class at a time ---------------------------------------------------------

using RejectCase = hattn::test::RejectCase<hattn_bwd_params, Problem>;

using Mutation = std::function<void(hattn_bwd_params&, const Problem&)>;

// The eight [b, s, h, d] tensors by name: their pointer field and their strides.
struct TensorFields {
    const char* name;           // the pointer field
    const char* stride_prefix;  // "do" for dout
    int64_t hattn_bwd_params::*batch_stride;
    int64_t hattn_bwd_params::*seq_stride;
    int64_t hattn_bwd_params::*head_stride;
    bool kv;  // seqlen_k / heads_kv shaped
};

const TensorFields kTensors[] = {
    {"q", "q", &hattn_bwd_params::q_batch_stride, &hattn_bwd_params::q_seq_stride, &hattn_bwd_params::q_head_stride, false},
    {"k", "k", &hattn_bwd_params::k_batch_stride, &hattn_bwd_params::k_seq_stride, &hattn_bwd_params::k_head_stride, true},
    {"v", "v", &hattn_bwd_params::v_batch_stride, &hattn_bwd_params::v_seq_stride, &hattn_bwd_params::v_head_stride, true},
    {"o", "o", &hattn_bwd_params::o_batch_stride, &hattn_bwd_params::o_seq_stride, &hattn_bwd_params::o_head_stride, false},
    {"dout", "do", &hattn_bwd_params::do_batch_stride, &hattn_bwd_params::do_seq_stride, &hattn_bwd_params::do_head_stride, false},
    {"dq", "dq", &hattn_bwd_params::dq_batch_stride, &hattn_bwd_params::dq_seq_stride, &hattn_bwd_params::dq_head_stride, false},
    {"dk", "dk", &hattn_bwd_params::dk_batch_stride, &hattn_bwd_params::dk_seq_stride, &hattn_bwd_params::dk_head_stride, true},
    {"dv", "dv", &hattn_bwd_params::dv_batch_stride, &hattn_bwd_params::dv_seq_stride, &hattn_bwd_params::dv_head_stride, true},
};

// The pointer field of tensor `name`, as a writable const void*& (dq/dk/dv are void*).
void set_pointer(hattn_bwd_params& p, const std::string& name, const void* value) {
    void* writable = const_cast<void*>(value);
    if (name == "q") p.q = value;
    if (name == "k") p.k = value;
    if (name == "v") p.v = value;
    if (name == "o") p.o = value;
    if (name == "dout") p.dout = value;
    if (name == "dq") p.dq = writable;
    if (name == "dk") p.dk = writable;
    if (name == "dv") p.dv = writable;
}

const SentinelBuffer& buffer_of(const Problem& s, const std::string& name) {
    if (name == "q") return s.q;
    if (name == "k") return s.k;
    if (name == "v") return s.v;
    if (name == "o") return s.o;
    if (name == "dout") return s.dout;
    if (name == "dq") return s.dq;
    if (name == "dk") return s.dk;
    return s.dv;
}

std::string stride_name(const TensorFields& t, const char* which) {
    return std::string(t.stride_prefix) + "_" + which + "_stride";
}


// Per tensor: NULL, a misaligned base, a non-positive stride and a stride that is not a multiple
// of 16 bytes (the stride kind rotates so that every kind is covered several times).
std::vector<RejectCase> per_tensor_cases() {
    std::vector<RejectCase> cases;
    const int64_t d = Problem::kDim;
    int index = 0;
    for (const TensorFields& t : kTensors) {
        const std::string name = t.name;
        cases.push_back({"Null_" + name, [name](hattn_bwd_params& p, const Problem&) { set_pointer(p, name, nullptr); },
                         HATTN_ERROR_NULL_POINTER, {name + " is NULL"}});
        const int offset = 2 + 4 * (index % 4);  // 2, 6, 10, 14 bytes
        cases.push_back({"Misaligned_" + name,
                         [name, offset](hattn_bwd_params& p, const Problem& s) {
                             set_pointer(p, name, buffer_of(s, name).data() + offset);
                         },
                         HATTN_ERROR_MISALIGNED, {name + " =", "16-byte"}});
        int64_t hattn_bwd_params::*strides[3] = {t.batch_stride, t.seq_stride, t.head_stride};
        const char* which[3] = {"batch", "seq", "head"};
        const int kind = index % 3;
        const int64_t bad_value = index % 2 == 0 ? 0 : -d;
        auto member = strides[kind];
        cases.push_back({"NonPositiveStride_" + name,
                         [member, bad_value](hattn_bwd_params& p, const Problem&) { p.*member = bad_value; },
                         HATTN_ERROR_INVALID_STRIDE, {stride_name(t, which[kind]), "positive"}});
        auto odd = strides[(kind + 1) % 3];
        const int64_t add = 1 + 2 * (index % 4);  // 2 to 14 bytes off
        cases.push_back({"StrideNot16Bytes_" + name,
                         [odd, add](hattn_bwd_params& p, const Problem&) { p.*odd += add; }, HATTN_ERROR_MISALIGNED,
                         {stride_name(t, which[(kind + 1) % 3]), "multiple of 16 bytes"}});
        ++index;
    }
    return cases;
}

// Sets head_dim of the contiguous base problem, scaling its strides to match (the buffers are
// never touched, so they need not grow).
void set_head_dim(hattn_bwd_params& p, int head_dim) {
    const int64_t factor = head_dim / p.head_dim;
    for (const TensorFields& t : kTensors) {
        p.*t.batch_stride *= factor;
        p.*t.seq_stride *= factor;
        p.*t.head_stride *= factor;
    }
    p.head_dim = head_dim;
}

std::vector<RejectCase> reject_cases() {
    const int d = Problem::kDim;
    std::vector<RejectCase> cases = per_tensor_cases();
    const std::vector<RejectCase> shared = hattn::test::shared_reject_cases<hattn_bwd_params, Problem>();
    cases.insert(cases.end(), shared.begin(), shared.end());
    const std::vector<RejectCase> more = {
        // LSE: required, fp32-aligned.
        {"NullLse", [](hattn_bwd_params& p, const Problem&) { p.lse = nullptr; }, HATTN_ERROR_NULL_POINTER,
         {"lse is NULL"}},
        {"LseMisaligned", [](hattn_bwd_params& p, const Problem& s) { p.lse = reinterpret_cast<const float*>(s.lse.data() + 2); },
         HATTN_ERROR_MISALIGNED, {"lse =", "4-byte"}},
        // Grid and index limits (blocks of 64 rows).
        {"QueryBlocksOverInt32", [](hattn_bwd_params& p, const Problem&) { p.batch = 1024; p.heads_q = 1024; p.heads_kv = 1; p.seqlen_q = 64 * 2048; },
         HATTN_ERROR_SIZE_OVERFLOW, {"seqlen_q", "query blocks"}},
        {"KeyBlocksOverInt32", [](hattn_bwd_params& p, const Problem&) { p.batch = 1024; p.heads_q = 1024; p.heads_kv = 1; p.seqlen_k = 64 * 2048; },
         HATTN_ERROR_SIZE_OVERFLOW, {"seqlen_k", "key blocks"}},
        // TMA: strides below 2^40 bytes, for an input and an output.
        {"DoBatchStride2Pow40Bytes", [](hattn_bwd_params& p, const Problem&) { p.do_batch_stride = kTwoPow39; },
         HATTN_ERROR_SIZE_OVERFLOW, {"do_batch_stride", "2^40"}},
        {"DkSeqStride2Pow40Bytes", [](hattn_bwd_params& p, const Problem&) { p.dk_seq_stride = kTwoPow39 * 4; },
         HATTN_ERROR_SIZE_OVERFLOW, {"dk_seq_stride", "2^40"}},
        // Offsets past int64, byte ranges past the address space.
        {"DoutOffsetOverInt64", [](hattn_bwd_params& p, const Problem&) { p.seqlen_q = 1 << 30; p.do_seq_stride = kTwoPow39 - 8; },
         HATTN_ERROR_SIZE_OVERFLOW, {"dout:", "int64"}},
        {"DvByteExtentOverflow", [](hattn_bwd_params& p, const Problem&) { p.seqlen_k = 1 << 24; p.dv_seq_stride = kTwoPow39 - 8; },
         HATTN_ERROR_SIZE_OVERFLOW, {"dv:", "byte range"}},
        {"DqAddressWraps", [](hattn_bwd_params& p, const Problem&) { p.dq = fake_pointer<void>(kTopOfAddressSpace); },
         HATTN_ERROR_SIZE_OVERFLOW, {"dq:", "byte range"}},
        {"LseAddressWraps", [](hattn_bwd_params& p, const Problem&) { p.lse = fake_pointer<const float>(kTopOfAddressSpace); },
         HATTN_ERROR_SIZE_OVERFLOW, {"lse:"}},
        // Output rows that overlap would be written by several CTAs at once.
        {"DqHeadsOverlap", [](hattn_bwd_params& p, const Problem&) { p.dq_head_stride = 32; },
         HATTN_ERROR_INVALID_STRIDE, {"dq_head_stride", "rows of dq overlap"}},
        {"DkSeqOverlapsHeads", [d](hattn_bwd_params& p, const Problem&) { p.dk_seq_stride = Problem::kHeadsKv * d - 8; },
         HATTN_ERROR_INVALID_STRIDE, {"dk_seq_stride", "rows of dk overlap"}},
        {"DvBatchOverlapsSeq", [](hattn_bwd_params& p, const Problem&) { p.dv_batch_stride = p.dv_seq_stride * 8; },
         HATTN_ERROR_INVALID_STRIDE, {"dv_batch_stride", "rows of dv overlap"}},
        // Flags: only HATTN_BWD_DETERMINISTIC exists.
        {"FlagsUnknownBit", [](hattn_bwd_params& p, const Problem&) { p.flags = 1u << 1; }, HATTN_ERROR_INVALID_FLAGS,
         {"flags = 0x2", "unknown bits 0x2"}},
        {"FlagsHighBit", [](hattn_bwd_params& p, const Problem&) { p.flags = HATTN_BWD_DETERMINISTIC | 0x80000000u; },
         HATTN_ERROR_INVALID_FLAGS, {"flags = 0x80000001", "0x80000000"}},
        // Workspace: NULL, not 256-byte aligned, too small; its range past the address space.
        {"WorkspaceNull", [](hattn_bwd_params& p, const Problem&) { p.workspace = nullptr; }, HATTN_ERROR_WORKSPACE,
         {"workspace is NULL", "hattn_bwd_workspace_size"}},
        {"WorkspaceMisaligned16", [](hattn_bwd_params& p, const Problem& s) { p.workspace = s.workspace.data() + 16; p.workspace_size -= 256; },
         HATTN_ERROR_WORKSPACE, {"workspace =", "256-byte"}},
        {"WorkspaceMisaligned128", [](hattn_bwd_params& p, const Problem& s) { p.workspace = s.workspace.data() + 128; p.workspace_size -= 256; },
         HATTN_ERROR_WORKSPACE, {"workspace =", "256-byte"}},
        {"WorkspaceOneByteShort", [](hattn_bwd_params& p, const Problem&) { p.workspace_size -= 1; },
         HATTN_ERROR_WORKSPACE, {"workspace_size", "hattn_bwd_workspace_size"}},
        {"WorkspaceSizeZero", [](hattn_bwd_params& p, const Problem&) { p.workspace_size = 0; },
         HATTN_ERROR_WORKSPACE, {"workspace_size = 0"}},
        {"WorkspaceSizedForAnotherShape",  // enough for d 64, not for d 128
         [](hattn_bwd_params& p, const Problem&) { set_head_dim(p, 128); }, HATTN_ERROR_WORKSPACE, {"workspace_size"}},
        {"WorkspaceAddressWraps",
         [](hattn_bwd_params& p, const Problem&) { p.workspace = fake_pointer<void>(kTopOfAddressSpace & ~uintptr_t{0xFFF}); },
         HATTN_ERROR_SIZE_OVERFLOW, {"workspace:", "byte range"}},
        // Order: with several problems, the most basic one is reported.
        {"OrderNullBeforeDtype", [](hattn_bwd_params& p, const Problem&) { p.dv = nullptr; p.dtype = hattn::test::enum_from_int<hattn_dtype>(9); },
         HATTN_ERROR_NULL_POINTER, {"dv is NULL"}},
        {"OrderInputsBeforeLseBeforeOutputs", [](hattn_bwd_params& p, const Problem&) { p.dq = nullptr; p.lse = nullptr; p.dout = nullptr; },
         HATTN_ERROR_NULL_POINTER, {"dout is NULL"}},
        {"OrderStrideBeforeScale", [](hattn_bwd_params& p, const Problem&) { p.dq_seq_stride = -1; p.softmax_scale = -1.f; },
         HATTN_ERROR_INVALID_STRIDE, {"dq_seq_stride"}},
        {"OrderShapeBeforeWorkspace", [](hattn_bwd_params& p, const Problem&) { p.seqlen_q = 0; p.workspace = nullptr; },
         HATTN_ERROR_INVALID_SIZE, {"seqlen_q"}},
        {"OrderFlagsBeforeWorkspace", [](hattn_bwd_params& p, const Problem&) { p.flags = 4; p.workspace_size = 0; },
         HATTN_ERROR_INVALID_FLAGS, {"flags"}},
    };
    cases.insert(cases.end(), more.begin(), more.end());
    return cases;
}


class BwdRejectTest : public ::testing::TestWithParam<RejectCase> {};

TEST_P(BwdRejectTest, StatusMessageAndNoSideEffects) {
    const Problem problem;
    hattn_bwd_params p = problem.params();
    char msg[hattn::test::kMsgLen];
    ASSERT_EQ(hattn_bwd_validate(&p, msg, sizeof(msg)), HATTN_SUCCESS) << "the unmodified problem must be valid: " << msg;
    GetParam().mutate(p, problem);
    expect_rejected(problem, p, GetParam().expected, GetParam().message_names);
}

INSTANTIATE_TEST_SUITE_P(BwdValidation, BwdRejectTest, ::testing::ValuesIn(reject_cases()),
                         [](const ::testing::TestParamInfo<RejectCase>& info) { return info.param.name; });

TEST(BwdValidation, NullParams) { hattn::test::expect_null_params_rejected<hattn_bwd_params>(); }

// ---- Accepted inputs --------------------------------------------------------------------------

// Nine tensors and a workspace at stand-in addresses, far apart.
hattn_bwd_params fake_contiguous(int b, int hq, int hkv, int sq, int sk, int d, hattn_dtype dtype) {
    auto at = [](int slot) { return kFakeDeviceBase + static_cast<uintptr_t>(slot) * kFakeTensorGap; };
    hattn_bwd_params p = hattn_bwd_params_contiguous(
        fake_pointer<const void>(at(0)), fake_pointer<const void>(at(1)), fake_pointer<const void>(at(2)),
        fake_pointer<const void>(at(3)), fake_pointer<const void>(at(4)), fake_pointer<const float>(at(5)),
        fake_pointer<void>(at(6)), fake_pointer<void>(at(7)), fake_pointer<void>(at(8)), b, hq, hkv, sq, sk, d, dtype);
    p.workspace = fake_pointer<void>(at(9));
    p.workspace_size = hattn_bwd_workspace_size(b, hq, sq, d);
    return p;
}

TEST(BwdValidation, AcceptsTheBaseProblemWithAndWithoutDeterminism) {
    const Problem problem;
    hattn_bwd_params p = problem.params();
    expect_accepted(p);
    p.flags = HATTN_BWD_DETERMINISTIC;
    expect_accepted(p);
    EXPECT_TRUE(problem.untouched()) << "validate wrote through a pointer";
}

TEST(BwdValidation, AcceptsEveryBuiltHeadDimAndDtype) {
    for (int d : {64, 128, 256}) {
        for (hattn_dtype dtype : {HATTN_DTYPE_BF16, HATTN_DTYPE_FP16}) {
            SCOPED_TRACE("d = " + std::to_string(d) + ", dtype = " + std::to_string(dtype));
            expect_accepted(fake_contiguous(2, 16, 16, 4096, 4096, d, dtype));
        }
    }
}

TEST(BwdValidation, AcceptsGqaMqaAndUnequalCausalLengths) {
    expect_accepted(fake_contiguous(2, 64, 8, 1024, 1024, 128, HATTN_DTYPE_BF16));  // GQA 8:1
    expect_accepted(fake_contiguous(3, 32, 1, 100, 300, 64, HATTN_DTYPE_FP16));     // MQA
    expect_accepted(fake_contiguous(1, 65536, 1, 1, 1, 64, HATTN_DTYPE_BF16));      // many heads, 1-D grid
    for (auto [sq, sk] : {std::pair{1, 4097}, std::pair{4097, 1}, std::pair{17, 1000}, std::pair{1000, 17}}) {
        hattn_bwd_params p = fake_contiguous(1, 4, 2, sq, sk, 128, HATTN_DTYPE_BF16);
        p.causal = 1;
        SCOPED_TRACE("sq = " + std::to_string(sq) + ", sk = " + std::to_string(sk));
        expect_accepted(p);
    }
}

TEST(BwdValidation, AcceptsNonContiguousLayouts) {
    const int b = 2, h = 8, s = 333, d = 128;
    hattn_bwd_params p = fake_contiguous(b, h, h, s, s, d, HATTN_DTYPE_BF16);
    // dq, dk, dv sliced from one packed [b, s, 3, h, d] buffer (what a fused QKV projection wants).
    const int64_t row = 3LL * h * d;
    const uintptr_t dqkv = kFakeDeviceBase + 12 * kFakeTensorGap;
    const uintptr_t bytes_per_slot = static_cast<uintptr_t>(h) * d * 2;
    p.dq = fake_pointer<void>(dqkv);
    p.dk = fake_pointer<void>(dqkv + bytes_per_slot);
    p.dv = fake_pointer<void>(dqkv + 2 * bytes_per_slot);
    p.dq_seq_stride = p.dk_seq_stride = p.dv_seq_stride = row;
    p.dq_batch_stride = p.dk_batch_stride = p.dv_batch_stride = row * s;
    expect_accepted(p);
    // Head-major [b, h, s, d] O and dO with padded rows and a padded batch stride.
    p.o_seq_stride = p.do_seq_stride = d + 64;
    p.o_head_stride = p.do_head_stride = (d + 64) * s;
    p.o_batch_stride = p.do_batch_stride = p.o_head_stride * h + 1024;
    expect_accepted(p);
    // Inputs may alias (they are only read); LSE needs only 4-byte alignment.
    p.v = p.k;
    p.lse = fake_pointer<const float>(kFakeDeviceBase + 5 * kFakeTensorGap + 4);
    expect_accepted(p);
}

TEST(BwdValidation, SizeOneDimensionsIgnoreTheirStrideForOverlap) {
    hattn_bwd_params p = fake_contiguous(1, 1, 1, 64, 64, 64, HATTN_DTYPE_BF16);
    p.dq_batch_stride = 8;  // batch == 1: never stepped through
    p.dk_head_stride = 8;   // heads == 1: never stepped through
    expect_accepted(p);
}

TEST(BwdValidation, AcceptsScalesAndALargerWorkspace) {
    hattn_bwd_params p = fake_contiguous(2, 16, 16, 1000, 1000, 128, HATTN_DTYPE_FP16);
    p.softmax_scale = 0.3f;
    p.workspace_size += 12345;
    expect_accepted(p);
    p.softmax_scale = 0.f;  // the default
    p.workspace_size = ~size_t{0};
    expect_accepted(p);
}

// ---- Messages, the workspace size, contiguous params ------------------------------------------------

TEST(BwdValidation, WorkspaceMessagesGiveTheSize) {
    hattn_bwd_params p = fake_contiguous(2, 8, 2, 1000, 500, 128, HATTN_DTYPE_BF16);
    const size_t needed = hattn_bwd_workspace_size(2, 8, 1000, 128);
    const std::string needed_text = std::to_string(needed);
    hattn_status status = HATTN_SUCCESS;
    p.workspace = nullptr;
    EXPECT_NE(validate_message(&p, &status).find(needed_text), std::string::npos);
    EXPECT_EQ(status, HATTN_ERROR_WORKSPACE);
    p = fake_contiguous(2, 8, 2, 1000, 500, 128, HATTN_DTYPE_BF16);
    p.workspace_size = needed - 256;
    const std::string msg = validate_message(&p, &status);
    EXPECT_EQ(status, HATTN_ERROR_WORKSPACE);
    EXPECT_EQ(msg, "workspace_size = " + std::to_string(needed - 256) +
                       " bytes is less than hattn_bwd_workspace_size(batch, heads_q, seqlen_q, head_dim) = " +
                       needed_text);
}

TEST(BwdWorkspaceSize, ZeroForNonPositiveOrOverflowingSizes) {
    constexpr int kMax = std::numeric_limits<int>::max();
    for (int bad : {0, -1, -1000, std::numeric_limits<int>::min()}) {
        SCOPED_TRACE("bad = " + std::to_string(bad));
        EXPECT_EQ(hattn_bwd_workspace_size(bad, 8, 100, 64), 0u);
        EXPECT_EQ(hattn_bwd_workspace_size(2, bad, 100, 64), 0u);
        EXPECT_EQ(hattn_bwd_workspace_size(2, 8, bad, 64), 0u);
        EXPECT_EQ(hattn_bwd_workspace_size(2, 8, 100, bad), 0u);
    }
    EXPECT_EQ(hattn_bwd_workspace_size(kMax, kMax, kMax, 256), 0u);  // ~2^101 bytes
    EXPECT_EQ(hattn_bwd_workspace_size(1, 1, 1, kMax), 0u);          // the layout's int row width
    EXPECT_GT(hattn_bwd_workspace_size(1, 1, 1, 1), 0u);
}

TEST(BwdWorkspaceSize, MatchesTheKernelsLayout) {
    for (int b : {1, 3}) {
        for (int h : {1, 7, 16}) {
            for (int s : {1, 63, 64, 65, 1000, 4097}) {
                for (int d : {64, 128, 256}) {
                    const hattn::bwd::WorkspaceLayout w = hattn::bwd::workspace_layout(b, h, s, d);
                    const size_t bytes = hattn_bwd_workspace_size(b, h, s, d);
                    ASSERT_EQ(bytes, w.bytes) << b << " " << h << " " << s << " " << d;
                    ASSERT_EQ(bytes % hattn::bwd::kWorkspaceAlign, 0u);
                    // At least LSE and D (one float each) and the dQ accumulator (d floats) per
                    // padded row, and the padded rows cover the sequence.
                    ASSERT_GE(w.seqlen_q_padded, s);
                    ASSERT_GE(bytes, static_cast<size_t>(b) * h * w.seqlen_q_padded * (d + 2) * sizeof(float));
                }
            }
        }
    }
}

TEST(BwdWorkspaceSize, MonotonicInEverySize) {
    const int values[] = {1, 2, 3, 31, 64, 65, 127, 128, 129, 1000, 4096, 4097, 100000};
    const int dims[] = {64, 128, 256};
    for (int base : {1, 17, 300}) {
        size_t previous[4] = {0, 0, 0, 0};
        for (int x : values) {
            const size_t sizes[4] = {hattn_bwd_workspace_size(x, base, base, 64),
                                     hattn_bwd_workspace_size(base, x, base, 64),
                                     hattn_bwd_workspace_size(base, base, x, 64),
                                     hattn_bwd_workspace_size(base, base, base, x)};
            for (int arg = 0; arg < 4; ++arg) {
                EXPECT_GE(sizes[arg], previous[arg]) << "argument " << arg << " grows to " << x << " (base " << base << ")";
                previous[arg] = sizes[arg];
            }
        }
        size_t previous_d = 0;
        for (int d : dims) {
            const size_t bytes = hattn_bwd_workspace_size(2, 4, base, d);
            EXPECT_GT(bytes, previous_d);
            previous_d = bytes;
        }
    }
}

TEST(BwdValidation, ContiguousParamsStrides) {
    const int b = 3, hq = 12, hkv = 4, sq = 100, sk = 77, d = 64;
    const hattn_bwd_params p = fake_contiguous(b, hq, hkv, sq, sk, d, HATTN_DTYPE_FP16);
    for (const TensorFields& t : kTensors) {
        SCOPED_TRACE(t.name);
        const int64_t heads = t.kv ? hkv : hq;
        const int64_t seqlen = t.kv ? sk : sq;
        EXPECT_EQ(p.*t.head_stride, d);
        EXPECT_EQ(p.*t.seq_stride, heads * d);
        EXPECT_EQ(p.*t.batch_stride, seqlen * heads * d);
    }
    const hattn_bwd_params bare = hattn_bwd_params_contiguous(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                              nullptr, nullptr, nullptr, b, hq, hkv, sq, sk, d,
                                                              HATTN_DTYPE_BF16);
    EXPECT_EQ(bare.workspace, nullptr);
    EXPECT_EQ(bare.workspace_size, 0u);
    EXPECT_EQ(bare.softmax_scale, 0.f);
    EXPECT_EQ(bare.causal, 0);
    EXPECT_EQ(bare.flags, 0u);
    EXPECT_EQ(bare.dtype, HATTN_DTYPE_BF16);
    EXPECT_EQ(bare.batch, b);
    EXPECT_EQ(bare.heads_kv, hkv);
    EXPECT_EQ(bare.seqlen_k, sk);
}

// Strides past int64 are computed without signed overflow and saturate; validation reports the
// size, never a misaligned or negative stride.
TEST(BwdValidation, ContiguousParamsSaturateHugeStrides) {
    constexpr int kMax = std::numeric_limits<int>::max();
    const hattn_bwd_params p = fake_contiguous(1, kMax, kMax, kMax, kMax, 256, HATTN_DTYPE_BF16);
    for (const TensorFields& t : kTensors) {
        SCOPED_TRACE(t.name);
        EXPECT_GT(p.*t.batch_stride, int64_t{1} << 62);
        EXPECT_EQ(p.*t.batch_stride % 8, 0);
        EXPECT_EQ(p.*t.seq_stride, int64_t{kMax} * 256);
    }
    EXPECT_EQ(hattn_bwd_validate(&p, nullptr, 0), HATTN_ERROR_SIZE_OVERFLOW);
    const hattn_bwd_params negative = fake_contiguous(1, kMax, 1, -kMax, 1, 256, HATTN_DTYPE_BF16);
    EXPECT_LT(negative.q_batch_stride, 0);
    EXPECT_EQ(hattn_bwd_validate(&negative, nullptr, 0), HATTN_ERROR_INVALID_SIZE);
}

// Positive control for the "no CUDA call" checks above (see host_validation_util.h).
TEST(BwdValidation, ValidInputReachesTheDeviceCheck) { hattn::test::expect_valid_input_reaches_the_device_check<Problem>(); }

}  // namespace
