// hattn/test/fwd_test.cu -- hattn_fwd on a Hopper GPU against exact references.
//
// Small problems are checked against the float64 CPU reference (src/testing/cpu_reference.h), large ones
// against the plain fp32 GPU reference (src/testing/gpu_reference.cu), which is itself checked against
// float64 here first (GpuReference.*). Every run uses fresh seeded inputs, poisons O and LSE with
// NaN beforehand, fills input padding with NaN (a kernel that reads past head_dim or uses a wrong
// stride produces NaN), and checks O's padding is still poison afterwards.
//
// Tolerances: numerics::fwd_output_tolerance (O) and fwd_lse_tolerance (LSE), derived in
// src/testing/numerics.h from the kernel's roundings. In short, for O per element
//     |got - ref| <= u * max|v| (P rounded to 16 bits) + u * |ref| (O rounded to 16 bits) + slack
// with u = 2^-8 (bf16) or 2^-11 (fp16), plus a whole-tensor relative L2 error <= 2u; LSE (fp32)
// within 2e-4 + 1e-5 * |ref|. Skipped (never passed) without a Hopper GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "testing/gpu_reference.h"
#include "gpu_test_util.h"
#include "hattn.h"
#include "testing/cpu_reference.h"

namespace {

namespace nm = hattn::numerics;

// Problems up to this many multiply-adds (batch * heads * sq * sk * d) use the float64 CPU
// reference (~0.1 s each); larger ones the GPU reference.
constexpr double kCpuReferenceMaxMacs = 64.0 * 1024 * 1024;

using hattn::test::kBatchPad;
using hattn::test::kRowPad;

enum class Layout {
    kContiguous,       // [b, s, h, d], each tensor in its own buffer
    kPackedQkv,        // q, k, v sliced from one [b, s, 3, h, d] buffer; O rows padded
    kHeadMajorPadded,  // [b, h, s, d + pad] with a padded batch stride, O included
};

enum class Distribution {
    kNormal,    // N(0, 1)
    kOutliers,  // N(0, 1) + N(0, 100) * Bernoulli(0.001): FA3's accuracy test
};

struct Case {
    std::string name;
    int batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1, seqlen_k = 1, head_dim = 128;
    hattn_dtype dtype = HATTN_DTYPE_BF16;
    bool causal = false;
    float scale = 0.f;  // 0: the default 1/sqrt(d)
    unsigned flags = 0;
    bool with_lse = true;
    Layout layout = Layout::kContiguous;
    Distribution distribution = Distribution::kNormal;
    // > 0: a row's scores rise toward lower keys by about this much (log2 units) per 128 keys, so
    // the kernel, which visits KV blocks last to first, sees each row's max grow block by block:
    // small steps keep the lazy softmax's reference max (P grows up to 2^8), large ones move it.
    float rise_log2_per_block = 0.f;
    // Pass the forward's workspace (zero-filled): causal problems then take the dynamic tile walk,
    // and the workspace must be zero-filled again after the call (the next call's counter).
    bool workspace = false;
    uint64_t seed = 1;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

using hattn::test::DeviceMemory;
using hattn::test::extent;
using hattn::test::Placement;

struct Layouts {
    Placement q, k, v, o;
    int num_buffers = 0;
};

Layouts make_layouts(const Case& c) {
    const int64_t d = c.head_dim;
    Layouts l;
    auto bshd = [&](int buffer, int seqlen, int heads, int64_t seq_pad) {
        return hattn::test::bshd_placement(buffer, d, seqlen, heads, seq_pad);
    };
    auto bhsd = [&](int buffer, int seqlen, int heads) { return hattn::test::bhsd_placement(buffer, d, seqlen, heads); };
    switch (c.layout) {
        case Layout::kContiguous:
            l.q = bshd(0, c.seqlen_q, c.heads_q, 0);
            l.k = bshd(1, c.seqlen_k, c.heads_kv, 0);
            l.v = bshd(2, c.seqlen_k, c.heads_kv, 0);
            l.o = bshd(3, c.seqlen_q, c.heads_q, 0);
            l.num_buffers = 4;
            break;
        case Layout::kPackedQkv: {
            // Needs sq == sk and heads_q == heads_kv (checked by the case builders).
            const int64_t row = 3 * c.heads_q * d;
            for (int t = 0; t < 3; ++t) {
                Placement p;
                p.buffer = 0;
                p.offset = t * c.heads_q * d;
                p.head_stride = d;
                p.seq_stride = row;
                p.batch_stride = c.seqlen_q * row;
                (t == 0 ? l.q : t == 1 ? l.k : l.v) = p;
            }
            l.o = bshd(1, c.seqlen_q, c.heads_q, kRowPad);
            l.num_buffers = 2;
            break;
        }
        case Layout::kHeadMajorPadded:
            l.q = bhsd(0, c.seqlen_q, c.heads_q);
            l.k = bhsd(1, c.seqlen_k, c.heads_kv);
            l.v = bhsd(2, c.seqlen_k, c.heads_kv);
            l.o = bhsd(3, c.seqlen_q, c.heads_q);
            l.num_buffers = 4;
            break;
    }
    return l;
}

// Fills every element of one tensor (not the padding) with the case's distribution.
void fill_tensor(std::vector<uint16_t>& buf, const Placement& p, int batch, int seqlen, int heads, int d,
                 const Case& c, std::mt19937_64& rng) {
    std::normal_distribution<float> normal(0.f, 1.f);
    constexpr float kOutlierStddev = 10.f;  // N(0, 100): variance 100
    constexpr double kOutlierProbability = 0.001;
    std::normal_distribution<float> outlier(0.f, kOutlierStddev);
    std::bernoulli_distribution is_outlier(kOutlierProbability);
    for (int b = 0; b < batch; ++b)
        for (int s = 0; s < seqlen; ++s)
            for (int h = 0; h < heads; ++h)
                for (int e = 0; e < d; ++e) {
                    float x = normal(rng);
                    if (c.distribution == Distribution::kOutliers && is_outlier(rng)) x += outlier(rng);
                    buf[p.index(b, s, h, e)] = nm::float_to_half(x, c.dtype);
                }
}

struct RunResult {
    std::vector<uint16_t> o_buffer;  // the whole O buffer, padding included
    std::vector<float> lse;          // [b, hq, sq] (empty without LSE)
};

// Everything a case needs on the host: the buffers, the layouts, the params (device pointers
// filled in by the caller).
struct Problem {
    Case c;
    Layouts layouts;
    std::vector<std::vector<uint16_t>> host;  // inputs + poisoned O, per buffer

    explicit Problem(const Case& cs) : c(cs), layouts(make_layouts(cs)), host(layouts.num_buffers) {
        const int d = c.head_dim;
        std::vector<int64_t> size(layouts.num_buffers, 0);
        auto grow = [&](const Placement& p, int seqlen, int heads) {
            size[p.buffer] = std::max(size[p.buffer], extent(p, c.batch, seqlen, heads, d) + kBatchPad);
        };
        grow(layouts.q, c.seqlen_q, c.heads_q);
        grow(layouts.k, c.seqlen_k, c.heads_kv);
        grow(layouts.v, c.seqlen_k, c.heads_kv);
        grow(layouts.o, c.seqlen_q, c.heads_q);
        // NaN everywhere first: input padding stays NaN (reading it would poison the result),
        // and O starts as NaN (an element the kernel does not write fails the comparison).
        for (int i = 0; i < layouts.num_buffers; ++i) host[i].assign(static_cast<size_t>(size[i]), nm::kPoison16);
        std::mt19937_64 rng(c.seed);
        fill_tensor(host[layouts.q.buffer], layouts.q, c.batch, c.seqlen_q, c.heads_q, d, c, rng);
        fill_tensor(host[layouts.k.buffer], layouts.k, c.batch, c.seqlen_k, c.heads_kv, d, c, rng);
        fill_tensor(host[layouts.v.buffer], layouts.v, c.batch, c.seqlen_k, c.heads_kv, d, c, rng);
        if (c.rise_log2_per_block > 0.f) add_rising_scores();
    }

    // Q's channel 0 := kRiseQ and K's channel 0 += a ramp over the keys, so score(i, j) carries
    // kRiseQ * ramp(j), ramp falling with j by rise_log2_per_block per kRiseBlockKeys keys once
    // scaled (scale * log2 e).
    void add_rising_scores() {
        constexpr float kRiseQ = 4.f;
        constexpr int kRiseBlockKeys = 128;
        constexpr float kLog2e = 1.4426950408889634f;
        const float scale = c.scale != 0.f ? c.scale : 1.f / std::sqrt(static_cast<float>(c.head_dim));
        const float per_key = c.rise_log2_per_block / kRiseBlockKeys / (scale * kLog2e) / kRiseQ;
        for (int b = 0; b < c.batch; ++b) {
            for (int i = 0; i < c.seqlen_q; ++i)
                for (int h = 0; h < c.heads_q; ++h)
                    host[layouts.q.buffer][layouts.q.index(b, i, h, 0)] = nm::float_to_half(kRiseQ, c.dtype);
            for (int j = 0; j < c.seqlen_k; ++j)
                for (int h = 0; h < c.heads_kv; ++h) {
                    uint16_t& x = host[layouts.k.buffer][layouts.k.index(b, j, h, 0)];
                    x = nm::float_to_half(nm::half_to_float(x, c.dtype) + per_key * (c.seqlen_k - 1 - j), c.dtype);
                }
        }
    }

    hattn_fwd_params params(const std::vector<void*>& dev, float* lse) const {
        auto at = [&](const Placement& p) {
            return static_cast<void*>(static_cast<uint16_t*>(dev[p.buffer]) + p.offset);
        };
        hattn_fwd_params p = hattn_fwd_params_contiguous(at(layouts.q), at(layouts.k), at(layouts.v), at(layouts.o),
                                                         c.batch, c.heads_q, c.heads_kv, c.seqlen_q, c.seqlen_k,
                                                         c.head_dim, c.dtype);
        const Placement* pl[4] = {&layouts.q, &layouts.k, &layouts.v, &layouts.o};
        int64_t* strides[4][3] = {{&p.q_batch_stride, &p.q_seq_stride, &p.q_head_stride},
                                  {&p.k_batch_stride, &p.k_seq_stride, &p.k_head_stride},
                                  {&p.v_batch_stride, &p.v_seq_stride, &p.v_head_stride},
                                  {&p.o_batch_stride, &p.o_seq_stride, &p.o_head_stride}};
        for (int t = 0; t < 4; ++t) {
            *strides[t][0] = pl[t]->batch_stride;
            *strides[t][1] = pl[t]->seq_stride;
            *strides[t][2] = pl[t]->head_stride;
        }
        p.lse = lse;
        p.causal = c.causal ? 1 : 0;
        p.softmax_scale = c.scale;
        p.flags = c.flags;
        return p;
    }

    // The inputs as floats in the same layout, for the CPU reference.
    std::vector<float> as_float(int buffer) const {
        std::vector<float> f(host[buffer].size());
        for (size_t i = 0; i < f.size(); ++i) f[i] = nm::half_to_float(host[buffer][i], c.dtype);
        return f;
    }

    double max_abs_v() const {
        double m = 0;
        const Placement& v = layouts.v;
        for (int b = 0; b < c.batch; ++b)
            for (int s = 0; s < c.seqlen_k; ++s)
                for (int h = 0; h < c.heads_kv; ++h)
                    for (int e = 0; e < c.head_dim; ++e)
                        m = std::max(m, std::fabs(static_cast<double>(
                                            nm::half_to_float(host[v.buffer][v.index(b, s, h, e)], c.dtype))));
        return m;
    }

    double macs() const {
        return static_cast<double>(c.batch) * c.heads_q * c.seqlen_q * c.seqlen_k * c.head_dim;
    }
};

// The reference O (packed [b, sq, hq, d]) and LSE ([b, hq, sq]) in double, with its own error.
struct Expected {
    std::vector<double> o, lse;
    double reference_rel_err = 0;
    const char* source = "";
};

// The problem on the device: its buffers (inputs uploaded, O poisoned) and a poisoned LSE.
struct DeviceProblem {
    std::vector<std::unique_ptr<DeviceMemory>> mem;
    std::vector<void*> dev;
    std::unique_ptr<DeviceMemory> lse;
    std::unique_ptr<DeviceMemory> workspace;
    size_t lse_elems = 0;
    hattn_fwd_params params{};
};

void upload(const Problem& pb, DeviceProblem* d) {
    const Case& c = pb.c;
    for (const auto& h : pb.host) {
        d->mem.push_back(std::make_unique<DeviceMemory>(h.size() * sizeof(uint16_t)));
        ASSERT_NE(d->mem.back()->ptr, nullptr) << "cudaMalloc failed";
        HATTN_CUDA_CHECK(cudaMemcpy(d->mem.back()->ptr, h.data(), h.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
        d->dev.push_back(d->mem.back()->ptr);
    }
    d->lse_elems = static_cast<size_t>(c.batch) * c.heads_q * c.seqlen_q;
    d->lse = std::make_unique<DeviceMemory>(d->lse_elems * sizeof(float));
    ASSERT_NE(d->lse->ptr, nullptr);
    constexpr int kPoisonByte = 0xFF;  // NaN in fp32, as in 16 bits
    HATTN_CUDA_CHECK(cudaMemset(d->lse->ptr, kPoisonByte, d->lse_elems * sizeof(float)));
    d->params = pb.params(d->dev, c.with_lse ? static_cast<float*>(d->lse->ptr) : nullptr);
    if (c.workspace) {
        d->workspace = std::make_unique<DeviceMemory>(hattn_fwd_workspace_size());
        ASSERT_NO_FATAL_FAILURE(hattn::test::zero_schedule_workspace(d->workspace->ptr));
        d->params.workspace = d->workspace->ptr;
        d->params.workspace_size = hattn_fwd_workspace_size();
    }
}

// Runs hattn_fwd on the uploaded problem and downloads O's whole buffer and LSE.
void run_kernel(const Problem& pb, const DeviceProblem& d, RunResult* out) {
    char msg[512];
    ASSERT_EQ(hattn_fwd_validate(&d.params, msg, sizeof(msg)), HATTN_SUCCESS) << msg;
    const hattn_status st = hattn_fwd(&d.params, nullptr);
    ASSERT_EQ(st, HATTN_SUCCESS) << hattn_status_string(st);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    if (d.workspace) EXPECT_NO_FATAL_FAILURE(hattn::test::expect_schedule_workspace_reset(d.workspace->ptr));
    const int ob = pb.layouts.o.buffer;
    out->o_buffer.resize(pb.host[ob].size());
    HATTN_CUDA_CHECK(cudaMemcpy(out->o_buffer.data(), d.dev[ob], out->o_buffer.size() * sizeof(uint16_t),
                                cudaMemcpyDeviceToHost));
    if (pb.c.with_lse) {
        out->lse.resize(d.lse_elems);
        HATTN_CUDA_CHECK(cudaMemcpy(out->lse.data(), d.lse->ptr, d.lse_elems * sizeof(float), cudaMemcpyDeviceToHost));
    }
}

// Uploads, poisons and runs hattn_fwd in one go.
void run_on_device(const Problem& pb, RunResult* out) {
    DeviceProblem d;
    upload(pb, &d);
    if (::testing::Test::HasFatalFailure()) return;
    run_kernel(pb, d, out);
}

void run_gpu_reference(const Problem& pb, const DeviceProblem& d, Expected* e) {
    const Case& c = pb.c;
    const size_t o_elems = static_cast<size_t>(c.batch) * c.seqlen_q * c.heads_q * c.head_dim;
    DeviceMemory o_ref(o_elems * sizeof(float)), lse_ref(d.lse_elems * sizeof(float));
    ASSERT_NE(o_ref.ptr, nullptr);
    ASSERT_NE(lse_ref.ptr, nullptr);
    HATTN_CUDA_CHECK(hattn::reference::reference_fwd(d.params, static_cast<float*>(o_ref.ptr),
                                                     static_cast<float*>(lse_ref.ptr), nullptr));
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> o_host(o_elems), lse_host(d.lse_elems);
    HATTN_CUDA_CHECK(cudaMemcpy(o_host.data(), o_ref.ptr, o_elems * sizeof(float), cudaMemcpyDeviceToHost));
    HATTN_CUDA_CHECK(cudaMemcpy(lse_host.data(), lse_ref.ptr, d.lse_elems * sizeof(float), cudaMemcpyDeviceToHost));
    e->o.assign(o_host.begin(), o_host.end());
    e->lse.assign(lse_host.begin(), lse_host.end());
    e->reference_rel_err = hattn::reference::kGpuReferenceRelError;
    e->source = "GPU fp32 reference";
}

Expected cpu_reference(const Problem& pb) {
    std::vector<float> q = pb.as_float(pb.layouts.q.buffer);
    std::vector<float> k = pb.as_float(pb.layouts.k.buffer);
    std::vector<float> v = pb.as_float(pb.layouts.v.buffer);
    const std::vector<void*> no_device(pb.layouts.num_buffers, nullptr);
    const hattn_fwd_params p = pb.params(no_device, nullptr);  // shapes and strides only
    hattn::test::ReferenceResult r = hattn::test::reference_attention_fp64(
        p, q.data() + pb.layouts.q.offset, k.data() + pb.layouts.k.offset, v.data() + pb.layouts.v.offset);
    Expected e;
    e.o = std::move(r.o);
    e.lse = std::move(r.lse);
    e.reference_rel_err = 0;
    e.source = "CPU fp64 reference";
    return e;
}

// O as a double read from its strided buffer; flat index over packed [b, sq, hq, d].
double o_at(const Problem& pb, const RunResult& run, size_t flat) {
    const Case& c = pb.c;
    const int e = static_cast<int>(flat % c.head_dim);
    size_t rest = flat / c.head_dim;
    const int h = static_cast<int>(rest % c.heads_q);
    rest /= c.heads_q;
    const int s = static_cast<int>(rest % c.seqlen_q);
    const int b = static_cast<int>(rest / c.seqlen_q);
    return nm::half_to_float(run.o_buffer[pb.layouts.o.index(b, s, h, e)], c.dtype);
}

// Elements of O's buffer outside the tensor (row padding) must still hold the poison.
size_t count_written_padding(const Problem& pb, const RunResult& run) {
    const Case& c = pb.c;
    std::vector<bool> inside(run.o_buffer.size(), false);
    for (int b = 0; b < c.batch; ++b)
        for (int s = 0; s < c.seqlen_q; ++s)
            for (int h = 0; h < c.heads_q; ++h)
                for (int e = 0; e < c.head_dim; ++e) inside[pb.layouts.o.index(b, s, h, e)] = true;
    size_t written = 0;
    for (size_t i = 0; i < inside.size(); ++i) written += (!inside[i] && run.o_buffer[i] != nm::kPoison16);
    return written;
}

struct CheckOptions {
    bool force_cpu_reference = false;
    double max_rmse = -1;  // > 0: also bound the absolute RMSE of O
};

// The whole check for one case.
void check_case(const Case& c, const CheckOptions& opt = {}) {
    SCOPED_TRACE(c.name);
    const Problem pb(c);
    const bool use_cpu = opt.force_cpu_reference || pb.macs() <= kCpuReferenceMaxMacs;
    DeviceProblem d;
    upload(pb, &d);
    if (::testing::Test::HasFatalFailure()) return;
    RunResult run;
    run_kernel(pb, d, &run);
    if (::testing::Test::HasFatalFailure()) return;
    Expected expected;
    if (use_cpu) {
        expected = cpu_reference(pb);
    } else {
        run_gpu_reference(pb, d, &expected);
        if (::testing::Test::HasFatalFailure()) return;
    }

    const nm::Tolerance o_tol =
        nm::fwd_output_tolerance(c.dtype, pb.max_abs_v(), c.seqlen_k, expected.reference_rel_err);
    const size_t o_elems = expected.o.size();
    const nm::CompareResult oc = nm::compare(
        o_elems, [&](size_t i) { return o_at(pb, run, i); }, [&](size_t i) { return expected.o[i]; }, o_tol);
    const int64_t o_dims[4] = {c.batch, c.seqlen_q, c.heads_q, c.head_dim};
    EXPECT_TRUE(oc.ok) << "O vs " << expected.source << ": " << oc.summary() << "\n  worst element [b, s, h, d] = "
                       << nm::describe_index(oc.worst_index, o_dims) << ", atol " << o_tol.atol << ", rtol "
                       << o_tol.rtol << ", max rel L2 " << o_tol.max_rel_l2;
    if (opt.max_rmse > 0) {
        EXPECT_LE(oc.rmse, opt.max_rmse) << "O RMSE vs " << expected.source;
        ::testing::Test::RecordProperty("o_rmse", std::to_string(oc.rmse));
        std::printf("%s: O RMSE vs %s = %.3e (bound %.1e)\n", c.name.c_str(), expected.source, oc.rmse,
                    opt.max_rmse);
    }
    EXPECT_EQ(count_written_padding(pb, run), 0u) << "the kernel wrote into O's row padding";

    if (c.with_lse) {
        const nm::Tolerance l_tol = nm::fwd_lse_tolerance();
        const nm::CompareResult lc = nm::compare(
            run.lse.size(), [&](size_t i) { return static_cast<double>(run.lse[i]); },
            [&](size_t i) { return expected.lse[i]; }, l_tol);
        const int64_t lse_dims[4] = {1, c.batch, c.heads_q, c.seqlen_q};
        EXPECT_TRUE(lc.ok) << "LSE vs " << expected.source << ": " << lc.summary()
                           << "\n  worst element [-, b, h, s] = " << nm::describe_index(lc.worst_index, lse_dims);
    }
}

// ---- Case builders ------------------------------------------------------------------------------

using hattn::test::dtype_name;
const char* layout_name(Layout l) {
    switch (l) {
        case Layout::kContiguous: return "bshd";
        case Layout::kPackedQkv: return "qkvpacked";
        case Layout::kHeadMajorPadded: return "bhsdpadded";
    }
    return "?";
}

std::string flags_name(unsigned f) {
    std::string s;
    if (f & HATTN_FWD_NO_PINGPONG) s += "_nopingpong";
    if (f & HATTN_FWD_NO_INTRA_WG_OVERLAP) s += "_nooverlap";
    return s;
}

Case make_case(int b, int hq, int hkv, int sq, int sk, int d, hattn_dtype dtype, bool causal,
               Layout layout = Layout::kContiguous) {
    Case c = hattn::test::attention_case<Case>(b, hq, hkv, sq, sk, d, dtype, causal);
    c.layout = layout;
    return c;
}

// Names are built last so that every field that matters shows, and seeds differ per case.
std::vector<Case> finish(std::vector<Case> cases, uint64_t seed_base) {
    for (size_t i = 0; i < cases.size(); ++i) {
        Case& c = cases[i];
        c.seed = seed_base * 1000003ull + i;
        c.name = "d" + std::to_string(c.head_dim) + "_" + dtype_name(c.dtype) + (c.causal ? "_causal" : "_full") + "_b" +
                 std::to_string(c.batch) + "_h" + std::to_string(c.heads_q) + "x" + std::to_string(c.heads_kv) + "_q" +
                 std::to_string(c.seqlen_q) + "_k" + std::to_string(c.seqlen_k) + "_" + layout_name(c.layout) +
                 flags_name(c.flags) + (c.with_lse ? "" : "_nolse") + (c.scale != 0.f ? "_scaled" : "") +
                 (c.workspace ? "_ws" : "") +
                 (c.rise_log2_per_block > 0.f ? "_rise" + std::to_string(static_cast<int>(c.rise_log2_per_block)) : "") + "_" +
                 std::to_string(i);
    }
    return cases;
}

// Every head dim x dtype x mask on a moderate odd shape (CPU fp64 reference).
std::vector<Case> matrix_cases() {
    std::vector<Case> cases;
    for (const hattn::test::GridShape& g : hattn::test::head_dim_dtype_mask_grid(197, 211)) {
        cases.push_back(make_case(2, 3, 3, g.seqlen_q, g.seqlen_k, g.head_dim, g.dtype, g.causal));
    }
    return finish(cases, 1);
}

// Lengths 1, 17, 1000, 4097 for sq and sk, causal with sq > sk (rows with no key) and sq < sk.
std::vector<Case> odd_length_cases() {
    std::vector<Case> cases;
    for (const hattn::test::GridShape& g : hattn::test::odd_length_grid()) {
        cases.push_back(make_case(1, 2, 1, g.seqlen_q, g.seqlen_k, g.head_dim, g.dtype, g.causal));
    }
    return finish(cases, 2);
}

// GQA 8:1, MQA, non-contiguous layouts, custom scales, no LSE.
std::vector<Case> feature_cases() {
    std::vector<Case> cases;
    cases.push_back(make_case(2, 16, 2, 300, 300, 128, HATTN_DTYPE_BF16, false));  // GQA 8:1
    cases.push_back(make_case(2, 16, 2, 300, 257, 128, HATTN_DTYPE_BF16, true));
    cases.push_back(make_case(1, 8, 1, 250, 333, 64, HATTN_DTYPE_FP16, false));  // MQA
    cases.push_back(make_case(1, 8, 1, 333, 250, 256, HATTN_DTYPE_BF16, true));
    cases.push_back(make_case(2, 4, 4, 277, 277, 128, HATTN_DTYPE_BF16, false, Layout::kPackedQkv));
    cases.push_back(make_case(1, 4, 4, 1500, 1500, 64, HATTN_DTYPE_FP16, true, Layout::kPackedQkv));
    cases.push_back(make_case(2, 4, 2, 190, 260, 128, HATTN_DTYPE_FP16, true, Layout::kHeadMajorPadded));
    cases.push_back(make_case(1, 4, 4, 2049, 1999, 256, HATTN_DTYPE_BF16, false, Layout::kHeadMajorPadded));
    for (float scale : {0.3f, 1.0f, 0.01f}) {  // sharper and flatter than 1/sqrt(d)
        Case c = make_case(1, 4, 2, 230, 230, 128, HATTN_DTYPE_BF16, scale == 0.3f);
        c.scale = scale;
        cases.push_back(c);
    }
    for (bool causal : {false, true}) {
        Case c = make_case(2, 4, 4, 200, 170, 64, HATTN_DTYPE_BF16, causal);
        c.with_lse = false;
        cases.push_back(c);
    }
    // Many more tiles than SMs, so each persistent CTA walks several tiles and the Q slots, the
    // O staging (and its deferred read wait), the ping-pong turn carried from tile to tile and
    // every barrier phase run on across tiles: d256 stages O in two column halves through a
    // half-width buffer (one Q slot), d64 and d128 in a buffer of O's size, with two Q slots.
    cases.push_back(make_case(4, 24, 8, 333, 390, 64, HATTN_DTYPE_BF16, false));
    cases.push_back(make_case(4, 24, 24, 300, 517, 128, HATTN_DTYPE_FP16, false));
    cases.push_back(make_case(3, 32, 4, 260, 300, 256, HATTN_DTYPE_BF16, false));
    cases.push_back(make_case(4, 24, 24, 517, 300, 128, HATTN_DTYPE_BF16, true));  // rows with no key
    cases.push_back(make_case(4, 24, 8, 333, 390, 64, HATTN_DTYPE_BF16, true));  // d64 causal short: 128-row tiles
    cases.push_back(make_case(2, 24, 8, 1100, 1300, 64, HATTN_DTYPE_FP16, true));  // d64 causal: 192-row tiles
    cases.push_back(make_case(3, 32, 4, 300, 260, 256, HATTN_DTYPE_BF16, true));  // rows with no key
    cases.push_back(make_case(2, 72, 8, 130, 4096, 128, HATTN_DTYPE_BF16, false));  // 4096 keys, short rows
    // Long sequences (GPU reference).
    cases.push_back(make_case(1, 2, 1, 8192, 8192, 256, HATTN_DTYPE_BF16, true));
    // Causal past the persistent limit: 6 (head, batch) pairs in tile sections of 4 and 2
    // (sm90::TileScheduler: 16 MB over 4 MB of K and V per head at d256).
    cases.push_back(make_case(2, 3, 1, 300, 4097, 256, HATTN_DTYPE_BF16, true));
    cases.push_back(make_case(1, 2, 2, 16384, 16384, 128, HATTN_DTYPE_FP16, false));
    return finish(cases, 3);
}

// The ablation variants exist only at d128 bf16. The 288-tile shapes walk several tiles per
// persistent CTA: the turn carried across tiles (one turn per GEMM batch without the overlap)
// and the Q release and O store wait of each schedule must hold there too.
std::vector<Case> ablation_cases() {
    std::vector<Case> cases;
    for (unsigned flags : {unsigned{HATTN_FWD_NO_PINGPONG}, unsigned{HATTN_FWD_NO_INTRA_WG_OVERLAP},
                           unsigned{HATTN_FWD_NO_PINGPONG | HATTN_FWD_NO_INTRA_WG_OVERLAP}}) {
        for (Case c : {make_case(2, 4, 2, 259, 301, 128, HATTN_DTYPE_BF16, false),
                       make_case(2, 4, 2, 301, 259, 128, HATTN_DTYPE_BF16, true),
                       make_case(4, 24, 8, 300, 200, 128, HATTN_DTYPE_BF16, false),
                       make_case(4, 24, 24, 300, 333, 128, HATTN_DTYPE_BF16, true),
                       make_case(1, 4, 4, 4097, 4097, 128, HATTN_DTYPE_BF16, true)}) {
            c.flags = flags;
            cases.push_back(c);
        }
    }
    return finish(cases, 4);
}

// ~20 seeded random shapes across every axis.
std::vector<Case> sweep_cases() {
    constexpr int kSweepShapes = 20;
    constexpr uint64_t kSweepSeed = 20261129;
    std::mt19937_64 rng(kSweepSeed);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
    std::vector<Case> cases;
    for (int i = 0; i < kSweepShapes; ++i) {
        const int d = std::vector<int>{64, 128, 256}[pick(0, 2)];
        const int hkv = pick(1, 3);
        const int group = std::vector<int>{1, 2, 4, 8}[pick(0, 3)];
        const int max_len = chance(0.5) ? 300 : 2500;
        const int sq = pick(1, max_len);
        const int sk = chance(0.3) ? sq : pick(1, max_len);
        Case c = make_case(pick(1, 3), hkv * group, hkv, sq, sk, d, chance(0.5) ? HATTN_DTYPE_BF16 : HATTN_DTYPE_FP16,
                           chance(0.5));
        const int layout = pick(0, 2);
        if (layout == 1 && sq == sk && group == 1) c.layout = Layout::kPackedQkv;
        if (layout == 2) c.layout = Layout::kHeadMajorPadded;
        if (chance(0.25)) c.scale = std::uniform_real_distribution<float>(0.02f, 0.5f)(rng);
        c.with_lse = chance(0.8);
        if (d == 128 && c.dtype == HATTN_DTYPE_BF16 && chance(0.4)) c.flags = static_cast<unsigned>(pick(1, 3));
        cases.push_back(c);
    }
    return finish(cases, 5);
}

// Row maxima that grow from block to block (the lazy rescale's two paths, P up to 2^8), every head
// dim, both masks and dtypes, odd lengths, GQA, a persistent multi-tile walk (seqlen_k <= 4096).
std::vector<Case> rising_max_cases() {
    std::vector<Case> cases;
    for (float rise : {3.f, 12.f})
        for (int d : {64, 128, 256})
            for (bool causal : {false, true}) {
                Case c = make_case(2, 4, 2, 1000, 1017, d, (d == 128 && causal) ? HATTN_DTYPE_FP16 : HATTN_DTYPE_BF16, causal);
                c.rise_log2_per_block = rise;
                cases.push_back(c);
            }
    Case long_keys = make_case(1, 2, 1, 300, 4097, 128, HATTN_DTYPE_BF16, false);  // a 1-key last block
    long_keys.rise_log2_per_block = 6.f;
    cases.push_back(long_keys);
    // Jumps past the speculative step's reach (softmax.cuh: weights above 2^100 against the old
    // reference, and at 200 infinite ones): the warp recomputes its scores from shared memory.
    for (float rise : {110.f, 200.f})
        for (int d : {64, 128, 256}) {
            Case c = make_case(1, 2, 1, 300, 1000, d, d == 128 ? HATTN_DTYPE_FP16 : HATTN_DTYPE_BF16, rise > 150.f);
            c.rise_log2_per_block = rise;
            cases.push_back(c);
        }
    return finish(cases, 7);
}

// With the workspace: causal problems of at least 1k keys (d64: those on its 192-row tile, over
// 256; fwd_rules.h) on the dynamic walk (a persistent grid whose thread blocks take tiles from a
// counter), each head dim and dtype, odd lengths, rows with no key, GQA, the causal sections
// (several heads' tiles longest first), and many tiles per thread block; shorter causal problems
// (d64's 128-row tile up to 256 keys among them) ignore the workspace (and must leave its state
// zero-filled too); full masks take it as below.
std::vector<Case> workspace_cases() {
    std::vector<Case> cases;
    for (const hattn::test::GridShape& g : hattn::test::head_dim_dtype_mask_grid(1031, 1100))
        cases.push_back(make_case(2, 3, 3, g.seqlen_q, g.seqlen_k, g.head_dim, g.dtype, g.causal));
    cases.push_back(make_case(1, 2, 1, 1, 1, 128, HATTN_DTYPE_BF16, true));
    cases.push_back(make_case(1, 2, 1, 17, 4097, 64, HATTN_DTYPE_FP16, true));
    cases.push_back(make_case(1, 2, 1, 4097, 1000, 256, HATTN_DTYPE_BF16, true));  // rows with no key
    cases.push_back(make_case(4, 24, 8, 333, 390, 64, HATTN_DTYPE_BF16, true));    // d64 192-row tiles, dynamic
    cases.push_back(make_case(4, 24, 8, 200, 256, 64, HATTN_DTYPE_FP16, true));    // d64 128-row tiles
    cases.push_back(make_case(2, 8, 4, 600, 200, 64, HATTN_DTYPE_BF16, true));     // ... 192-row, rows with no key
    cases.push_back(make_case(2, 24, 8, 1100, 1300, 64, HATTN_DTYPE_FP16, true));  // d64 192-row tiles
    cases.push_back(make_case(3, 8, 4, 700, 1000, 64, HATTN_DTYPE_BF16, true));
    cases.push_back(make_case(2, 8, 2, 1000, 641, 64, HATTN_DTYPE_FP16, true));
    cases.push_back(make_case(2, 8, 8, 640, 640, 64, HATTN_DTYPE_BF16, true));     // (the narrow tile's last length without one)
    cases.push_back(make_case(4, 24, 24, 517, 300, 128, HATTN_DTYPE_BF16, true));
    cases.push_back(make_case(2, 16, 2, 2049, 2049, 128, HATTN_DTYPE_BF16, true));  // many tiles
    cases.push_back(make_case(2, 3, 1, 300, 4097, 256, HATTN_DTYPE_BF16, true));    // sections of 4 and 2 pairs
    cases.push_back(make_case(1, 4, 4, 8192, 8192, 64, HATTN_DTYPE_BF16, true));
    cases.push_back(make_case(2, 4, 2, 190, 260, 128, HATTN_DTYPE_FP16, true, Layout::kHeadMajorPadded));
    // Full masks whose last d64 tile is partial (the dynamic walk with HATTN_FWD_DYNAMIC_FULL).
    cases.push_back(make_case(4, 24, 8, 333, 390, 64, HATTN_DTYPE_BF16, false));
    cases.push_back(make_case(2, 24, 8, 1100, 1300, 64, HATTN_DTYPE_FP16, false));
    // Full masks of whole d128 query tiles past one pass of the grid: the split tail
    // (HATTN_FWD_SPLIT_TAIL; on 132 SMs 192, 216 and 168 tiles in runs of 17, 16 and 18 blocks:
    // tiles of 36 blocks cut in three with the seqlen_k tail in a merger's piece, of 24 in two, of
    // 64 in four), the ablation variants too; d256 keeps whole tiles.
    cases.push_back(make_case(1, 24, 8, 1024, 4500, 128, HATTN_DTYPE_BF16, false));
    cases.push_back(make_case(1, 24, 24, 1024, 1100, 256, HATTN_DTYPE_BF16, false));
    cases.push_back(make_case(2, 12, 4, 1152, 3000, 128, HATTN_DTYPE_FP16, false));
    cases.push_back(make_case(1, 84, 12, 256, 8192, 128, HATTN_DTYPE_BF16, false));
    for (unsigned flags : {unsigned{HATTN_FWD_NO_PINGPONG}, unsigned{HATTN_FWD_NO_INTRA_WG_OVERLAP}}) {
        Case c = make_case(1, 24, 8, 1024, 4500, 128, HATTN_DTYPE_BF16, false);
        c.flags = flags;
        cases.push_back(c);
    }
    for (Case& c : cases) c.workspace = true;
    return finish(cases, 8);
}

class FwdTest : public ::testing::TestWithParam<Case> {};

TEST_P(FwdTest, MatchesReference) {
    HATTN_REQUIRE_HOPPER();
    check_case(GetParam());
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Matrix, FwdTest, ::testing::ValuesIn(matrix_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(OddLengths, FwdTest, ::testing::ValuesIn(odd_length_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Features, FwdTest, ::testing::ValuesIn(feature_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Ablation, FwdTest, ::testing::ValuesIn(ablation_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Sweep, FwdTest, ::testing::ValuesIn(sweep_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(RisingMax, FwdTest, ::testing::ValuesIn(rising_max_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Workspace, FwdTest, ::testing::ValuesIn(workspace_cases()), case_name);

// FA3's accuracy test: Q, K, V ~ N(0,1) + N(0,100) * Bernoulli(0.001), fp16, RMSE of O against
// float64. FA3 reports 1.9e-4 for its fp16 kernel; we require <= 3e-4.
TEST(FwdAccuracy, OutliersFp16RmseAgainstFp64) {
    HATTN_REQUIRE_HOPPER();
    constexpr double kMaxRmse = 3e-4;
    Case c = make_case(1, 4, 4, 512, 512, 128, HATTN_DTYPE_FP16, false);
    c.distribution = Distribution::kOutliers;
    c.seed = 0xFA3;
    c.name = "outliers_fp16_d128_q512_k512";
    CheckOptions opt;
    opt.force_cpu_reference = true;
    opt.max_rmse = kMaxRmse;
    check_case(c, opt);
}

// Runs c twice: O and LSE must be bit-identical.
void expect_repeatable(const Case& c) {
    const Problem pb(c);
    RunResult first, second;
    run_on_device(pb, &first);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    run_on_device(pb, &second);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    EXPECT_TRUE(first.o_buffer == second.o_buffer) << "O differs between two runs";
    EXPECT_TRUE(std::equal(first.lse.begin(), first.lse.end(), second.lse.begin(), [](float a, float b) {
        return std::memcmp(&a, &b, sizeof(float)) == 0;
    })) << "LSE differs between two runs";
}

// The forward pass is deterministic: the same inputs give bit-identical O and LSE.
TEST(FwdDeterminism, RepeatedRunsAreBitIdentical) {
    HATTN_REQUIRE_HOPPER();
    Case c = make_case(2, 8, 2, 1031, 1031, 128, HATTN_DTYPE_BF16, true);
    c.seed = 77;
    expect_repeatable(c);
}

// The dynamic walk hands tiles to whichever thread block frees up first, but each tile's result
// does not depend on which one computes it: bit-identical too, and the same as the fixed walk's.
TEST(FwdDeterminism, DynamicWalkMatchesFixedWalkBitForBit) {
    HATTN_REQUIRE_HOPPER();
    Case c = make_case(2, 8, 2, 3001, 3001, 64, HATTN_DTYPE_BF16, true);
    c.seed = 78;
    const Problem fixed_pb(c);
    c.workspace = true;
    const Problem dynamic_pb(c);
    RunResult fixed, first, second;
    run_on_device(fixed_pb, &fixed);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    run_on_device(dynamic_pb, &first);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    run_on_device(dynamic_pb, &second);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    EXPECT_TRUE(first.o_buffer == second.o_buffer) << "O differs between two dynamic runs";
    EXPECT_TRUE(first.o_buffer == fixed.o_buffer) << "O differs between the dynamic and the fixed walk";
}

// The split tail cuts the same tiles into the same pieces and merges them in the same order on
// every call: bit-identical too (though not with whole tiles, whose sums run in another order;
// the Workspace cases check both against the reference).
TEST(FwdDeterminism, SplitTailRunsAreBitIdentical) {
    HATTN_REQUIRE_HOPPER();
    Case c = make_case(1, 84, 12, 256, 8192, 128, HATTN_DTYPE_BF16, false);
    c.seed = 79;
    c.workspace = true;
    expect_repeatable(c);
}

// The GPU reference judges the large cases: check it against float64 first (independent of the
// kernel under test). Its bound: kGpuReferenceRelError * max|v| absolute on O, LSE as for hattn.
TEST(GpuReference, MatchesFp64) {
    HATTN_REQUIRE_HOPPER();
    std::vector<Case> cases = {make_case(2, 4, 2, 100, 300, 64, HATTN_DTYPE_BF16, true),
                               make_case(1, 4, 4, 300, 100, 256, HATTN_DTYPE_FP16, true),
                               make_case(2, 2, 2, 129, 129, 128, HATTN_DTYPE_BF16, false, Layout::kPackedQkv),
                               make_case(1, 8, 1, 33, 700, 128, HATTN_DTYPE_FP16, false, Layout::kHeadMajorPadded)};
    cases[0].scale = 0.4f;
    cases = finish(cases, 6);
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        const Problem pb(c);
        DeviceProblem d;  // hattn_fwd is not run: this test does not depend on the kernel
        upload(pb, &d);
        if (::testing::Test::HasFatalFailure()) return;
        Expected gpu;
        run_gpu_reference(pb, d, &gpu);
        if (::testing::Test::HasFatalFailure()) return;
        const Expected cpu = cpu_reference(pb);
        nm::Tolerance t;
        t.atol = hattn::reference::kGpuReferenceRelError * pb.max_abs_v();
        t.rtol = hattn::reference::kGpuReferenceRelError;
        t.max_rel_l2 = hattn::reference::kGpuReferenceRelError;
        const nm::CompareResult oc = nm::compare(
            cpu.o.size(), [&](size_t i) { return gpu.o[i]; }, [&](size_t i) { return cpu.o[i]; }, t);
        EXPECT_TRUE(oc.ok) << "GPU reference O: " << oc.summary();
        const nm::CompareResult lc = nm::compare(
            cpu.lse.size(), [&](size_t i) { return gpu.lse[i]; }, [&](size_t i) { return cpu.lse[i]; },
            nm::fwd_lse_tolerance());
        EXPECT_TRUE(lc.ok) << "GPU reference LSE: " << lc.summary();
    }
}

}  // namespace
