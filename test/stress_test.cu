// hattn/test/stress_test.cu -- hattn_fwd under stress and with hostile inputs, on a Hopper GPU.
//
//   Stress.ConcurrentThreads    8 host threads, each with its own stream and outputs, calling
//                               hattn_fwd on shared inputs over mixed shapes and variants: every
//                               result bit-identical to a serial run made first.
//   Stress.ManyCallsNoLeak      100,000 back-to-back calls: host RSS and device memory in use
//                               must not grow (measured after a 1,000-call warm-up).
//   Stress.Over2Pow31Elements   tensors of more than 2^31 elements (64-bit offsets): batch
//                               entries on both sides of element 2^31 against the GPU reference.
//   NonFinite/NonFiniteInputs.* NaN and +-Inf in one element of Q, K or V: exactly the rows
//                               include/hattn.h says are affected change, in the way it says.
//   PartialGpu.*                both forwards' split tail (CTAs that wait for other CTAs' partial
//                               tiles) and the backward's deterministic dQ (CTAs that wait for the
//                               previous KV block's) on the 1 or 5 SMs a blocker kernel leaves
//                               free: each call finishes while the blocker holds the rest,
//                               bit-identical to a run on the whole GPU.
//
// Every test skips (never passes silently) without a Hopper GPU; every CUDA call is checked.
// Expected runtimes on an H200: a few seconds each (ManyCallsNoLeak stops itself at 50 s).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"
#include "hattn.h"
#include "ptx/mbarrier.cuh"
#include "testing/device_random.cuh"
#include "testing/fp8_accuracy.h"
#include "testing/gpu_reference.h"
#include "testing/numerics.h"

namespace {

namespace nm = hattn::numerics;

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int kPoisonByte = 0xFF;  // NaN in 16 and 32 bits

// A device allocation freed on scope exit; ptr stays null if cudaMalloc failed (rc says why).
struct DeviceBuffer {
    void* ptr = nullptr;
    size_t bytes = 0;
    cudaError_t rc = cudaSuccess;
    explicit DeviceBuffer(size_t n) : bytes(n) { rc = cudaMalloc(&ptr, n); if (rc != cudaSuccess) ptr = nullptr; }
    ~DeviceBuffer() { if (ptr != nullptr) cudaFree(ptr); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    template <class T> T* as() const { return static_cast<T*>(ptr); }
};

std::string cuda_error(cudaError_t rc, const char* what) {
    return std::string(what) + ": " + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")";
}

// A problem shape plus variant; contiguous [b, s, h, d] tensors.
struct Shape {
    std::string name;
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    hattn_dtype dtype;
    bool causal;
    unsigned flags;

    size_t q_elems() const { return static_cast<size_t>(batch) * seqlen_q * heads_q * head_dim; }
    size_t kv_elems() const { return static_cast<size_t>(batch) * seqlen_k * heads_kv * head_dim; }
    size_t lse_elems() const { return static_cast<size_t>(batch) * heads_q * seqlen_q; }

    hattn_fwd_params params(const void* q, const void* k, const void* v, void* o, float* lse) const {
        hattn_fwd_params p = hattn_fwd_params_contiguous(q, k, v, o, batch, heads_q, heads_kv, seqlen_q, seqlen_k,
                                                         head_dim, dtype);
        p.lse = lse;
        p.causal = causal ? 1 : 0;
        p.flags = flags;
        return p;
    }
};

// =============================================================================================
// ConcurrentThreads
// =============================================================================================

// Every head dim, both dtypes, both masks, GQA / MQA, an ablation variant, a persistent grid with
// more tiles than SMs (non-causal, seqlen_k <= 2048: 4 * 24 * 3 = 288 tiles) and causal rows that
// see no key.
std::vector<Shape> concurrent_shapes() {
    return {
        {"d64_bf16_full_b2_h8_s256", 2, 8, 8, 256, 256, 64, HATTN_DTYPE_BF16, false, 0},
        {"d128_bf16_causal_b2_h8x2_s300", 2, 8, 2, 300, 300, 128, HATTN_DTYPE_BF16, true, 0},
        {"d256_fp16_full_b1_h4x1_q200_k333", 1, 4, 1, 200, 333, 256, HATTN_DTYPE_FP16, false, 0},
        {"d128_fp16_full_persistent_b4_h24x8_s300", 4, 24, 8, 300, 300, 128, HATTN_DTYPE_FP16, false, 0},
        {"d128_bf16_causal_nopingpong_b1_h4_s513", 1, 4, 4, 513, 513, 128, HATTN_DTYPE_BF16, true,
         HATTN_FWD_NO_PINGPONG},
        {"d64_fp16_causal_b2_h4x2_q700_k300", 2, 4, 2, 700, 300, 64, HATTN_DTYPE_FP16, true, 0},
    };
}

struct HostResult {
    std::vector<uint16_t> o;
    std::vector<uint32_t> lse;
};

// "" if equal, else where the first difference is.
std::string first_difference(const HostResult& got, const HostResult& want) {
    for (size_t i = 0; i < want.o.size(); ++i) {
        if (got.o[i] != want.o[i]) {
            size_t n = 0;
            for (size_t j = i; j < want.o.size(); ++j) n += got.o[j] != want.o[j];
            std::ostringstream s;
            s << n << " O elements differ, first at flat index " << i << " (0x" << std::hex << got.o[i] << " vs 0x"
              << want.o[i] << ")";
            return s.str();
        }
    }
    for (size_t i = 0; i < want.lse.size(); ++i) {
        if (got.lse[i] != want.lse[i]) {
            std::ostringstream s;
            s << "LSE differs, first at flat index " << i << " (0x" << std::hex << got.lse[i] << " vs 0x" << want.lse[i]
              << ")";
            return s.str();
        }
    }
    return {};
}

TEST(Stress, ConcurrentThreads) {
    HATTN_REQUIRE_HOPPER();
    constexpr int kThreads = 8;
    const std::vector<Shape> shapes = concurrent_shapes();
    const int num_shapes = static_cast<int>(shapes.size());
    constexpr int kRounds = 10;  // each thread: kRounds x every shape = 60 calls
    int device = 0;
    HATTN_CUDA_CHECK(cudaGetDevice(&device));

    // Shared inputs, one set per dtype, big enough for every shape (each reads a prefix).
    size_t max_q = 0, max_kv = 0;
    for (const Shape& s : shapes) {
        max_q = std::max(max_q, s.q_elems());
        max_kv = std::max(max_kv, s.kv_elems());
    }
    std::map<hattn_dtype, std::unique_ptr<DeviceBuffer>> q_in, k_in, v_in;
    uint64_t seed = 1;
    for (hattn_dtype t : {HATTN_DTYPE_BF16, HATTN_DTYPE_FP16}) {
        q_in[t] = std::make_unique<DeviceBuffer>(max_q * 2);
        k_in[t] = std::make_unique<DeviceBuffer>(max_kv * 2);
        v_in[t] = std::make_unique<DeviceBuffer>(max_kv * 2);
        for (auto* buf : {q_in[t].get(), k_in[t].get(), v_in[t].get()}) {
            ASSERT_NE(buf->ptr, nullptr) << cuda_error(buf->rc, "cudaMalloc (inputs)");
            HATTN_CUDA_CHECK(hattn::testing::fill_normal(buf->ptr, buf->bytes / 2, t, seed++, 1.0f, nullptr));
        }
    }

    // Outputs: one O / LSE pair per (thread, shape), plus the serial reference's.
    auto make_outputs = [&](std::vector<std::unique_ptr<DeviceBuffer>>* o, std::vector<std::unique_ptr<DeviceBuffer>>* l) {
        for (const Shape& s : shapes) {
            o->push_back(std::make_unique<DeviceBuffer>(s.q_elems() * 2));
            l->push_back(std::make_unique<DeviceBuffer>(s.lse_elems() * 4));
        }
    };
    std::vector<std::vector<std::unique_ptr<DeviceBuffer>>> o_out(kThreads + 1), lse_out(kThreads + 1);
    for (int t = 0; t <= kThreads; ++t) {
        make_outputs(&o_out[t], &lse_out[t]);
        for (int s = 0; s < num_shapes; ++s) {
            ASSERT_NE(o_out[t][s]->ptr, nullptr) << cuda_error(o_out[t][s]->rc, "cudaMalloc (O)");
            ASSERT_NE(lse_out[t][s]->ptr, nullptr) << cuda_error(lse_out[t][s]->rc, "cudaMalloc (LSE)");
        }
    }
    auto params_for = [&](int slot, int s) {
        const Shape& sh = shapes[s];
        return sh.params(q_in.at(sh.dtype)->ptr, k_in.at(sh.dtype)->ptr, v_in.at(sh.dtype)->ptr, o_out[slot][s]->ptr,
                         lse_out[slot][s]->as<float>());
    };
    auto download = [&](int slot, int s, cudaStream_t stream, HostResult* r) -> cudaError_t {
        r->o.resize(shapes[s].q_elems());
        r->lse.resize(shapes[s].lse_elems());
        cudaError_t rc = cudaMemcpyAsync(r->o.data(), o_out[slot][s]->ptr, r->o.size() * 2, cudaMemcpyDeviceToHost, stream);
        if (rc == cudaSuccess)
            rc = cudaMemcpyAsync(r->lse.data(), lse_out[slot][s]->ptr, r->lse.size() * 4, cudaMemcpyDeviceToHost, stream);
        if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
        return rc;
    };

    // The serial run: one shape at a time on the legacy stream.
    const int serial = kThreads;
    std::vector<HostResult> reference(num_shapes);
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    for (int s = 0; s < num_shapes; ++s) {
        const hattn_fwd_params p = params_for(serial, s);
        HATTN_CUDA_CHECK(cudaMemset(o_out[serial][s]->ptr, kPoisonByte, o_out[serial][s]->bytes));
        HATTN_CUDA_CHECK(cudaMemset(lse_out[serial][s]->ptr, kPoisonByte, lse_out[serial][s]->bytes));
        const hattn_status st = hattn_fwd(&p, nullptr);
        ASSERT_EQ(st, HATTN_SUCCESS) << shapes[s].name << ": " << hattn_status_string(st);
        HATTN_CUDA_CHECK(cudaDeviceSynchronize());
        HATTN_CUDA_CHECK(download(serial, s, nullptr, &reference[s]));
        size_t nan_count = 0;
        for (uint16_t x : reference[s].o) nan_count += std::isnan(nm::half_to_float(x, shapes[s].dtype));
        ASSERT_EQ(nan_count, 0u) << shapes[s].name << ": the serial run left NaN (unwritten poison?) in O";
    }

    // The concurrent run. Each thread poisons its outputs before every call, so a compared result
    // is always the one its call wrote, and compares after every round of shapes.
    std::vector<std::vector<std::string>> errors(kThreads);
    std::vector<int> compared(kThreads, 0);
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            auto fail = [&](const std::string& e) { errors[t].push_back("thread " + std::to_string(t) + ": " + e); };
            cudaError_t rc = cudaSetDevice(device);
            cudaStream_t stream = nullptr;
            if (rc == cudaSuccess) rc = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
            if (rc != cudaSuccess) return fail(cuda_error(rc, "stream setup"));
            HostResult got;
            for (int round = 0; round < kRounds && errors[t].size() < 5; ++round) {
                for (int i = 0; i < num_shapes; ++i) {
                    const int s = (i + t + round) % num_shapes;  // threads run different shapes at once
                    const hattn_fwd_params p = params_for(t, s);
                    rc = cudaMemsetAsync(o_out[t][s]->ptr, kPoisonByte, o_out[t][s]->bytes, stream);
                    if (rc == cudaSuccess) rc = cudaMemsetAsync(lse_out[t][s]->ptr, kPoisonByte, lse_out[t][s]->bytes, stream);
                    if (rc != cudaSuccess) return fail(cuda_error(rc, "cudaMemsetAsync"));
                    const hattn_status st = hattn_fwd(&p, stream);
                    if (st != HATTN_SUCCESS) fail(shapes[s].name + ": hattn_fwd: " + hattn_status_string(st));
                }
                for (int s = 0; s < num_shapes; ++s) {
                    rc = download(t, s, stream, &got);
                    if (rc != cudaSuccess) return fail(cuda_error(rc, "download / stream sync"));
                    const std::string diff = first_difference(got, reference[s]);
                    if (!diff.empty()) fail(shapes[s].name + ", round " + std::to_string(round) + ": " + diff);
                    ++compared[t];
                }
            }
            rc = cudaStreamDestroy(stream);
            if (rc != cudaSuccess) fail(cuda_error(rc, "cudaStreamDestroy"));
        });
    }
    for (std::thread& th : threads) th.join();
    const double elapsed = seconds_since(t0);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());

    int total_compared = 0;
    for (int t = 0; t < kThreads; ++t) total_compared += compared[t];
    std::printf("ConcurrentThreads: %d threads x %d calls (%d shapes x %d rounds) in %.2f s; %d results compared "
                "bit for bit with the serial run\n",
                kThreads, kRounds * num_shapes, num_shapes, kRounds, elapsed, total_compared);
    for (int t = 0; t < kThreads; ++t) {
        for (const std::string& e : errors[t]) ADD_FAILURE() << e;
    }
    EXPECT_EQ(total_compared, kThreads * kRounds * num_shapes) << "some rounds did not run (see the errors above)";
}

// =============================================================================================
// ManyCallsNoLeak
// =============================================================================================

// Resident set size from /proc/self/statm (second field, in pages).
double host_rss_mib() {
    std::ifstream statm("/proc/self/statm");
    long long size_pages = 0, resident_pages = 0;
    statm >> size_pages >> resident_pages;
    return static_cast<double>(resident_pages) * static_cast<double>(sysconf(_SC_PAGESIZE)) / kMiB;
}

TEST(Stress, ManyCallsNoLeak) {
    HATTN_REQUIRE_HOPPER();
    constexpr int kWarmupCalls = 1000;
    constexpr int kCalls = 100000;
    constexpr int kSyncEvery = 1000;
    constexpr double kMaxSeconds = 50.0;        // stop (and fail) rather than run past this
    constexpr double kMaxHostGrowthMiB = 4.0;
    constexpr double kMaxDeviceGrowthMiB = 2.0;
    const Shape sh{"d64_bf16_full_b1_h2_s128", 1, 2, 2, 128, 128, 64, HATTN_DTYPE_BF16, false, 0};

    DeviceBuffer q(sh.q_elems() * 2), k(sh.kv_elems() * 2), v(sh.kv_elems() * 2), o(sh.q_elems() * 2),
        lse(sh.lse_elems() * 4);
    for (DeviceBuffer* b : {&q, &k, &v, &o, &lse}) ASSERT_NE(b->ptr, nullptr) << cuda_error(b->rc, "cudaMalloc");
    HATTN_CUDA_CHECK(hattn::testing::fill_normal(q.ptr, sh.q_elems(), sh.dtype, 11, 1.0f, nullptr));
    HATTN_CUDA_CHECK(hattn::testing::fill_normal(k.ptr, sh.kv_elems(), sh.dtype, 12, 1.0f, nullptr));
    HATTN_CUDA_CHECK(hattn::testing::fill_normal(v.ptr, sh.kv_elems(), sh.dtype, 13, 1.0f, nullptr));
    cudaStream_t stream = nullptr;
    HATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::unique_ptr<CUstream_st, void (*)(cudaStream_t)> stream_guard(stream, [](cudaStream_t s) { cudaStreamDestroy(s); });
    const hattn_fwd_params p = sh.params(q.ptr, k.ptr, v.ptr, o.ptr, lse.as<float>());

    // Runs n calls with a sync every kSyncEvery; returns the calls made (< n: error or out of time).
    std::string error;
    auto run_calls = [&](int n, Clock::time_point deadline_from, double max_s) {
        int done = 0;
        while (done < n) {
            const int batch = std::min(kSyncEvery, n - done);
            for (int i = 0; i < batch; ++i) {
                const hattn_status st = hattn_fwd(&p, stream);
                if (st != HATTN_SUCCESS) {
                    error = "call " + std::to_string(done + i) + ": " + hattn_status_string(st);
                    return done + i;
                }
            }
            const cudaError_t rc = cudaStreamSynchronize(stream);
            if (rc != cudaSuccess) {
                error = cuda_error(rc, "cudaStreamSynchronize");
                return done;
            }
            done += batch;
            if (seconds_since(deadline_from) > max_s) {
                error = "stopped after " + std::to_string(done) + " calls: over the " + std::to_string(int(max_s)) +
                        " s budget";
                return done;
            }
        }
        return done;
    };
    auto download_o = [&](std::vector<uint16_t>* out) {
        out->resize(sh.q_elems());
        return cudaMemcpy(out->data(), o.ptr, out->size() * 2, cudaMemcpyDeviceToHost);
    };

    const auto t_start = Clock::now();
    ASSERT_EQ(run_calls(kWarmupCalls, t_start, kMaxSeconds), kWarmupCalls) << error;
    std::vector<uint16_t> first_o, last_o;
    HATTN_CUDA_CHECK(download_o(&first_o));
    size_t free_before = 0, free_after = 0, total = 0;
    HATTN_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
    const double rss_before = host_rss_mib();

    const auto t0 = Clock::now();
    const int done = run_calls(kCalls, t_start, kMaxSeconds);
    const double elapsed = seconds_since(t0);
    HATTN_CUDA_CHECK(cudaGetLastError());
    HATTN_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
    const double rss_after = host_rss_mib();
    HATTN_CUDA_CHECK(download_o(&last_o));

    const double host_growth = rss_after - rss_before;
    const double device_growth = (static_cast<double>(free_before) - static_cast<double>(free_after)) / kMiB;
    std::printf("ManyCallsNoLeak: %d calls (%s) in %.2f s = %.0f calls/s; host RSS %.1f -> %.1f MiB (%+.2f MiB); "
                "device memory in use %+.2f MiB (free %.1f -> %.1f MiB)\n",
                done, sh.name.c_str(), elapsed, done / std::max(elapsed, 1e-9), rss_before, rss_after, host_growth,
                device_growth, free_before / kMiB, free_after / kMiB);
    ASSERT_EQ(done, kCalls) << error;
    EXPECT_LT(host_growth, kMaxHostGrowthMiB) << "host RSS grew over " << kCalls << " calls";
    EXPECT_LT(device_growth, kMaxDeviceGrowthMiB) << "device memory in use grew over " << kCalls << " calls";
    EXPECT_TRUE(first_o == last_o) << "O after the last call differs from O after the warm-up (same inputs)";
}

// =============================================================================================
// Over2Pow31Elements
// =============================================================================================

TEST(Stress, Over2Pow31Elements) {
    HATTN_REQUIRE_HOPPER();
    // 1040 x 1024 x 16 x 128 = 2,181,038,080 elements (4.36 GB) per tensor; batch entry 1024
    // starts exactly at element 2^31.
    constexpr int64_t kTwoPow31 = int64_t{1} << 31;
    Shape sh{"d128_bf16_b1040_h16_s1024", 1040, 16, 16, 1024, 1024, 128, HATTN_DTYPE_BF16, false, 0};
    ASSERT_GT(static_cast<int64_t>(sh.q_elems()), kTwoPow31);
    const int64_t batch_stride = static_cast<int64_t>(sh.seqlen_q) * sh.heads_q * sh.head_dim;
    const std::vector<int> entries = {0, 1023, 1024, sh.batch - 1};  // 1023 ends just below 2^31, 1024 starts on it
    ASSERT_EQ(1024 * batch_stride, kTwoPow31);

    const size_t tensor_bytes = sh.q_elems() * 2;
    const size_t entry_o_ref_bytes = static_cast<size_t>(batch_stride) * 4;
    constexpr size_t kSlackBytes = size_t{1} << 30;
    const size_t needed = 4 * tensor_bytes + sh.lse_elems() * 4 + entry_o_ref_bytes + kSlackBytes;
    size_t free_bytes = 0, total_bytes = 0;
    HATTN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (free_bytes < needed) {
        GTEST_SKIP() << "needs " << needed / 1e9 << " GB of device memory (4 tensors of " << tensor_bytes / 1e9
                     << " GB + LSE + reference + 1 GB slack), " << free_bytes / 1e9 << " GB free";
    }
    DeviceBuffer q(tensor_bytes), k(tensor_bytes), v(tensor_bytes), o(tensor_bytes), lse(sh.lse_elems() * 4);
    DeviceBuffer o_ref(entry_o_ref_bytes), lse_ref(static_cast<size_t>(sh.heads_q) * sh.seqlen_q * 4);
    for (DeviceBuffer* b : {&q, &k, &v, &o, &lse, &o_ref, &lse_ref})
        ASSERT_NE(b->ptr, nullptr) << cuda_error(b->rc, "cudaMalloc") << " (" << b->bytes << " bytes)";

    auto t0 = Clock::now();
    HATTN_CUDA_CHECK(hattn::testing::fill_normal(q.ptr, sh.q_elems(), sh.dtype, 2031, 1.0f, nullptr));
    HATTN_CUDA_CHECK(hattn::testing::fill_normal(k.ptr, sh.kv_elems(), sh.dtype, 2032, 1.0f, nullptr));
    HATTN_CUDA_CHECK(hattn::testing::fill_normal(v.ptr, sh.kv_elems(), sh.dtype, 2033, 1.0f, nullptr));
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::printf("Over2Pow31Elements: %s, %zu elements (%.2f GB) per tensor; fill %.2f s\n", sh.name.c_str(),
                sh.q_elems(), tensor_bytes / 1e9, seconds_since(t0));

    cudaEvent_t start, stop;
    HATTN_CUDA_CHECK(cudaEventCreate(&start));
    HATTN_CUDA_CHECK(cudaEventCreate(&stop));
    for (bool causal : {false, true}) {  // non-causal: persistent grid; causal: one CTA per tile
        sh.causal = causal;
        SCOPED_TRACE(causal ? "causal" : "full");
        HATTN_CUDA_CHECK(cudaMemset(o.ptr, kPoisonByte, o.bytes));
        HATTN_CUDA_CHECK(cudaMemset(lse.ptr, kPoisonByte, lse.bytes));
        const hattn_fwd_params p = sh.params(q.ptr, k.ptr, v.ptr, o.ptr, lse.as<float>());
        HATTN_CUDA_CHECK(cudaEventRecord(start, nullptr));
        const hattn_status st = hattn_fwd(&p, nullptr);
        HATTN_CUDA_CHECK(cudaEventRecord(stop, nullptr));
        ASSERT_EQ(st, HATTN_SUCCESS) << hattn_status_string(st);
        HATTN_CUDA_CHECK(cudaEventSynchronize(stop));
        HATTN_CUDA_CHECK(cudaGetLastError());
        float ms = 0;
        HATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        const double flops = 4.0 * sh.batch * sh.heads_q * double(sh.seqlen_q) * sh.seqlen_k * sh.head_dim *
                             (causal ? 0.5 : 1.0);
        std::printf("  %s: hattn_fwd %.2f ms (%.0f TFLOPS)\n", causal ? "causal" : "full", ms, flops / (ms * 1e-3) / 1e12);

        for (int e : entries) {
            SCOPED_TRACE("batch entry " + std::to_string(e));
            const int64_t offset = e * batch_stride;  // elements; > 2^31 for the last entries
            auto at = [&](const DeviceBuffer& b) { return static_cast<void*>(b.as<uint16_t>() + offset); };
            hattn_fwd_params pe = sh.params(at(q), at(k), at(v), at(o), nullptr);
            pe.batch = 1;
            t0 = Clock::now();
            HATTN_CUDA_CHECK(hattn::reference::reference_fwd(pe, o_ref.as<float>(), lse_ref.as<float>(), nullptr));
            HATTN_CUDA_CHECK(cudaDeviceSynchronize());
            const double ref_s = seconds_since(t0);

            std::vector<uint16_t> got(static_cast<size_t>(batch_stride)), v_host(got.size());
            std::vector<float> want(got.size()), lse_got(static_cast<size_t>(sh.heads_q) * sh.seqlen_q),
                lse_want(lse_got.size());
            HATTN_CUDA_CHECK(cudaMemcpy(got.data(), at(o), got.size() * 2, cudaMemcpyDeviceToHost));
            HATTN_CUDA_CHECK(cudaMemcpy(v_host.data(), at(v), v_host.size() * 2, cudaMemcpyDeviceToHost));
            HATTN_CUDA_CHECK(cudaMemcpy(want.data(), o_ref.ptr, want.size() * 4, cudaMemcpyDeviceToHost));
            HATTN_CUDA_CHECK(cudaMemcpy(lse_got.data(), lse.as<float>() + static_cast<size_t>(e) * lse_got.size(),
                                        lse_got.size() * 4, cudaMemcpyDeviceToHost));
            HATTN_CUDA_CHECK(cudaMemcpy(lse_want.data(), lse_ref.ptr, lse_want.size() * 4, cudaMemcpyDeviceToHost));
            double max_abs_v = 0;
            for (uint16_t x : v_host) max_abs_v = std::max(max_abs_v, std::fabs(double(nm::half_to_float(x, sh.dtype))));

            const nm::Tolerance o_tol = nm::fwd_output_tolerance(sh.dtype, max_abs_v, sh.seqlen_k,
                                                                 hattn::reference::kGpuReferenceRelError);
            const nm::CompareResult oc = nm::compare(
                got.size(), [&](size_t i) { return double(nm::half_to_float(got[i], sh.dtype)); },
                [&](size_t i) { return double(want[i]); }, o_tol);
            const nm::CompareResult lc = nm::compare(
                lse_got.size(), [&](size_t i) { return double(lse_got[i]); },
                [&](size_t i) { return double(lse_want[i]); }, nm::fwd_lse_tolerance());
            const int64_t o_dims[4] = {1, sh.seqlen_q, sh.heads_q, sh.head_dim};
            const int64_t lse_dims[4] = {1, 1, sh.heads_q, sh.seqlen_q};
            std::printf("  %s, batch entry %d (elements %lld .. %lld): O max abs err %.2e, rel L2 %.2e; LSE max abs err "
                        "%.2e; reference %.2f s\n",
                        causal ? "causal" : "full", e, static_cast<long long>(offset),
                        static_cast<long long>(offset + batch_stride - 1), oc.max_abs_err, oc.rel_l2, lc.max_abs_err,
                        ref_s);
            EXPECT_TRUE(oc.ok) << "O vs GPU reference: " << oc.summary() << "; worst [-, s, h, d] = "
                               << nm::describe_index(oc.worst_index, o_dims);
            EXPECT_TRUE(lc.ok) << "LSE vs GPU reference: " << lc.summary() << "; worst [-, -, h, s] = "
                               << nm::describe_index(lc.worst_index, lse_dims);
        }
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
}

// =============================================================================================
// NonFiniteInputs
// =============================================================================================
//
// One element of Q, K or V is set to NaN, +Inf or -Inf and the result is compared with a clean
// run on the same inputs (bit for bit: the forward pass is deterministic). The expectations are
// the contract in include/hattn.h ("Non-finite inputs"). The poisoned element sits in the last
// batch entry and the last KV head g; its query row / key is one that some rows of the causal
// shapes see and others do not, and its column is in the upper half of head_dim.
//
// For +-Inf in Q (K) the scores' signs are made deterministic first: column c of K (Q) is
// replaced by |x| (at least 1/64) for the poisoned batch entry and group, in the clean run too.

enum class Poison { kQNan, kKNan, kVNan, kQPosInf, kQNegInf, kKPosInf, kKNegInf, kVPosInf, kVNegInf };

const char* poison_name(Poison p) {
    switch (p) {
        case Poison::kQNan: return "NaN in Q";
        case Poison::kKNan: return "NaN in K";
        case Poison::kVNan: return "NaN in V";
        case Poison::kQPosInf: return "+Inf in Q (K column > 0)";
        case Poison::kQNegInf: return "-Inf in Q (K column > 0)";
        case Poison::kKPosInf: return "+Inf in K (Q column > 0)";
        case Poison::kKNegInf: return "-Inf in K (Q column > 0)";
        case Poison::kVPosInf: return "+Inf in V";
        case Poison::kVNegInf: return "-Inf in V";
    }
    return "?";
}

// What a row (b, i, h) of O and its LSE must look like in the poisoned run.
enum class RowExpect {
    kSame,              // O row and LSE bit-identical to the clean run
    kAllNan,            // every O element NaN, LSE NaN
    kNoKey,             // O = 0 everywhere, LSE = -inf (as a row that sees no key)
    kFinite,            // O and LSE finite (a -Inf score removed a key)
    kMatchAlt,          // bit-identical to the run with seqlen_k - 1 (the key removed)
    kColNan,            // column c NaN; other columns and LSE bit-identical
    kColNonFinite,      // column c +-Inf or NaN; other columns and LSE bit-identical
    kColNanOrSame,      // column c NaN or unchanged; other columns and LSE bit-identical
};

const char* expect_name(RowExpect e) {
    switch (e) {
        case RowExpect::kSame: return "unchanged (does not depend on the poisoned element)";
        case RowExpect::kAllNan: return "all NaN with NaN LSE";
        case RowExpect::kNoKey: return "O = 0 and LSE = -inf (every score -inf: no key)";
        case RowExpect::kFinite: return "finite O and LSE (the -inf score removes one key)";
        case RowExpect::kMatchAlt: return "bit-identical to the run without the key (seqlen_k - 1)";
        case RowExpect::kColNan: return "column c NaN, the rest unchanged";
        case RowExpect::kColNonFinite: return "column c +-Inf or NaN, the rest unchanged";
        case RowExpect::kColNanOrSame: return "column c NaN or unchanged, the rest unchanged";
    }
    return "?";
}

struct NonFiniteCase {
    std::string name;
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    hattn_dtype dtype;
    bool causal;
};

void PrintTo(const NonFiniteCase& c, std::ostream* os) { *os << c.name; }

std::vector<NonFiniteCase> non_finite_cases() {
    return {
        {"d64_bf16_full_b2_h4x2_q200_k333", 2, 4, 2, 200, 333, 64, HATTN_DTYPE_BF16, false},
        {"d128_fp16_causal_b2_h4x2_q200_k333", 2, 4, 2, 200, 333, 128, HATTN_DTYPE_FP16, true},
        {"d128_bf16_causal_b2_h4x2_q333_k200", 2, 4, 2, 333, 200, 128, HATTN_DTYPE_BF16, true},  // rows with no key
        {"d256_bf16_causal_b2_h4x2_q200_k333", 2, 4, 2, 200, 333, 256, HATTN_DTYPE_BF16, true},
        // Persistent grid: non-causal, seqlen_k <= 2048, 4 * 24 * 3 = 288 tiles > SMs.
        {"d128_bf16_full_persistent_b4_h24x8_s300", 4, 24, 8, 300, 300, 128, HATTN_DTYPE_BF16, false},
    };
}

class NonFiniteInputs : public ::testing::TestWithParam<NonFiniteCase> {};

// Host copies of the inputs plus the device buffers they are uploaded to for each run.
struct NonFiniteProblem {
    NonFiniteCase c;
    Shape shape;
    std::vector<uint16_t> q, k, v;
    int pb, pg, ph, pi, pj, pc;  // poisoned batch entry, KV head, query head, query row, key, column
    int group;

    explicit NonFiniteProblem(const NonFiniteCase& cs)
        : c(cs),
          shape{cs.name, cs.batch, cs.heads_q, cs.heads_kv, cs.seqlen_q, cs.seqlen_k, cs.head_dim, cs.dtype, cs.causal, 0} {
        std::mt19937_64 rng(std::hash<std::string>{}(cs.name));
        std::normal_distribution<float> normal(0.f, 1.f);
        auto fill = [&](std::vector<uint16_t>& t, size_t n) {
            t.resize(n);
            for (uint16_t& x : t) x = nm::float_to_half(normal(rng), cs.dtype);
        };
        fill(q, shape.q_elems());
        fill(k, shape.kv_elems());
        fill(v, shape.kv_elems());
        group = cs.heads_q / cs.heads_kv;
        pb = cs.batch - 1;
        pg = cs.heads_kv - 1;
        ph = cs.heads_q - 1;  // in group pg
        constexpr int kRowFromEnd = 38, kKeyFromEnd = 22;
        pi = cs.seqlen_q - kRowFromEnd;
        pj = cs.seqlen_k - kKeyFromEnd;
        pc = cs.head_dim / 2 + 3;
    }

    size_t q_index(int b, int i, int h, int c0) const {
        return ((static_cast<size_t>(b) * c.seqlen_q + i) * c.heads_q + h) * c.head_dim + c0;
    }
    size_t kv_index(int b, int j, int g, int c0) const {
        return ((static_cast<size_t>(b) * c.seqlen_k + j) * c.heads_kv + g) * c.head_dim + c0;
    }
    size_t lse_index(int b, int i, int h) const { return (static_cast<size_t>(b) * c.heads_q + h) * c.seqlen_q + i; }
    bool in_group(int b, int h) const { return b == pb && h / group == pg; }
    bool sees(int i, int key) const { return nm::visible_keys(i, c.seqlen_q, c.seqlen_k, c.causal) > key; }

    // Makes column pc of K (fix_k) or Q (!fix_k) positive for the poisoned batch entry and group.
    void make_column_positive(std::vector<uint16_t>* qq, std::vector<uint16_t>* kk, bool fix_k) const {
        constexpr float kMinMagnitude = 1.f / 64.f;  // no (sub)normal that a multiplier might flush to 0
        auto fix = [&](uint16_t& x) {
            x = nm::float_to_half(std::max(std::fabs(nm::half_to_float(x, c.dtype)), kMinMagnitude), c.dtype);
        };
        if (fix_k) {
            for (int j = 0; j < c.seqlen_k; ++j) fix((*kk)[kv_index(pb, j, pg, pc)]);
        } else {
            for (int i = 0; i < c.seqlen_q; ++i)
                for (int h = pg * group; h < (pg + 1) * group; ++h) fix((*qq)[q_index(pb, i, h, pc)]);
        }
    }

    // The key poisoned for kind p: the last key for -Inf in K without a mask (so that removing it
    // is the run with seqlen_k - 1), else pj.
    int key_for(Poison p) const { return (p == Poison::kKNegInf && !c.causal) ? c.seqlen_k - 1 : pj; }

    RowExpect expect(Poison p, int b, int i, int h) const {
        const bool group_row = in_group(b, h);
        const bool sees_key = group_row && sees(i, key_for(p));
        const bool the_row = b == pb && i == pi && h == ph;
        switch (p) {
            case Poison::kQNan:
            case Poison::kQPosInf: return the_row ? RowExpect::kAllNan : RowExpect::kSame;
            case Poison::kQNegInf: return the_row ? RowExpect::kNoKey : RowExpect::kSame;
            case Poison::kKNan:
            case Poison::kKPosInf: return sees_key ? RowExpect::kAllNan : RowExpect::kSame;
            case Poison::kKNegInf:
                if (!sees_key) return RowExpect::kSame;
                return c.causal ? RowExpect::kFinite : RowExpect::kMatchAlt;
            case Poison::kVNan:
                if (sees_key) return RowExpect::kColNan;
                return group_row ? RowExpect::kColNanOrSame : RowExpect::kSame;
            case Poison::kVPosInf:
            case Poison::kVNegInf:
                if (sees_key) return RowExpect::kColNonFinite;
                return group_row ? RowExpect::kColNanOrSame : RowExpect::kSame;
        }
        return RowExpect::kSame;
    }
};

struct RunOutput {
    std::vector<uint16_t> o;
    std::vector<float> lse;
};

std::string describe_half(uint16_t bits, hattn_dtype dtype) {
    std::ostringstream s;
    s << "0x" << std::hex << bits << std::dec << " (" << nm::half_to_float(bits, dtype) << ")";
    return s.str();
}

std::string describe_float(float x) {
    std::ostringstream s;
    s << "0x" << std::hex << nm::float_bits(x) << std::dec << " (" << x << ")";
    return s.str();
}

TEST_P(NonFiniteInputs, OnlyTheDocumentedRowsChange) {
    HATTN_REQUIRE_HOPPER();
    const NonFiniteProblem pb(GetParam());
    const NonFiniteCase& c = pb.c;
    ASSERT_GT(nm::visible_keys(pb.pi, c.seqlen_q, c.seqlen_k, c.causal), 0) << "the poisoned query row must see keys";

    DeviceBuffer q(pb.q.size() * 2), k(pb.k.size() * 2), v(pb.v.size() * 2), o(pb.shape.q_elems() * 2),
        lse(pb.shape.lse_elems() * 4);
    for (DeviceBuffer* b : {&q, &k, &v, &o, &lse}) ASSERT_NE(b->ptr, nullptr) << cuda_error(b->rc, "cudaMalloc");

    // One run: upload, poison the outputs, run, download.
    auto run = [&](const std::vector<uint16_t>& hq, const std::vector<uint16_t>& hk, const std::vector<uint16_t>& hv,
                   int seqlen_k, RunOutput* out) {
        HATTN_CUDA_CHECK(cudaMemcpy(q.ptr, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice));
        HATTN_CUDA_CHECK(cudaMemcpy(k.ptr, hk.data(), hk.size() * 2, cudaMemcpyHostToDevice));
        HATTN_CUDA_CHECK(cudaMemcpy(v.ptr, hv.data(), hv.size() * 2, cudaMemcpyHostToDevice));
        HATTN_CUDA_CHECK(cudaMemset(o.ptr, kPoisonByte, o.bytes));
        HATTN_CUDA_CHECK(cudaMemset(lse.ptr, kPoisonByte, lse.bytes));
        hattn_fwd_params p = pb.shape.params(q.ptr, k.ptr, v.ptr, o.ptr, lse.as<float>());
        if (seqlen_k != c.seqlen_k) {  // fewer keys, same memory layout (strides of the full tensor)
            p.seqlen_k = seqlen_k;
        }
        const hattn_status st = hattn_fwd(&p, nullptr);
        ASSERT_EQ(st, HATTN_SUCCESS) << hattn_status_string(st);
        HATTN_CUDA_CHECK(cudaDeviceSynchronize());
        out->o.resize(pb.shape.q_elems());
        out->lse.resize(pb.shape.lse_elems());
        HATTN_CUDA_CHECK(cudaMemcpy(out->o.data(), o.ptr, out->o.size() * 2, cudaMemcpyDeviceToHost));
        HATTN_CUDA_CHECK(cudaMemcpy(out->lse.data(), lse.ptr, out->lse.size() * 4, cudaMemcpyDeviceToHost));
    };

    // Clean runs: as generated, with K's column c positive, with Q's column c positive.
    enum Fix { kNoFix, kFixK, kFixQ };
    std::vector<uint16_t> inputs[3][2];  // [fix][q, k]
    RunOutput clean[3];
    for (int f = 0; f < 3; ++f) {
        inputs[f][0] = pb.q;
        inputs[f][1] = pb.k;
        if (f != kNoFix) pb.make_column_positive(&inputs[f][0], &inputs[f][1], f == kFixK);
        run(inputs[f][0], inputs[f][1], pb.v, c.seqlen_k, &clean[f]);
        ASSERT_FALSE(HasFatalFailure());
        size_t bad = 0;
        for (uint16_t x : clean[f].o) bad += !std::isfinite(nm::half_to_float(x, c.dtype));
        ASSERT_EQ(bad, 0u) << "the clean run (fix-up " << f << ") has non-finite O elements";
    }

    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const Poison kinds[] = {Poison::kQNan,    Poison::kKNan,    Poison::kVNan,    Poison::kQPosInf, Poison::kQNegInf,
                            Poison::kKPosInf, Poison::kKNegInf, Poison::kVPosInf, Poison::kVNegInf};
    std::printf("%s: poisoned element: batch %d, query row %d / key %d, query head %d (KV head %d, group of %d), "
                "column %d\n",
                c.name.c_str(), pb.pb, pb.pi, pb.pj, pb.ph, pb.pg, pb.group, pb.pc);
    for (Poison kind : kinds) {
        SCOPED_TRACE(poison_name(kind));
        const Fix fix = (kind == Poison::kQPosInf || kind == Poison::kQNegInf)   ? kFixK
                        : (kind == Poison::kKPosInf || kind == Poison::kKNegInf) ? kFixQ
                                                                                 : kNoFix;
        std::vector<uint16_t> hq = inputs[fix][0], hk = inputs[fix][1], hv = pb.v;
        const int key = pb.key_for(kind);
        switch (kind) {
            case Poison::kQNan: hq[pb.q_index(pb.pb, pb.pi, pb.ph, pb.pc)] = nm::float_to_half(nan, c.dtype); break;
            case Poison::kQPosInf: hq[pb.q_index(pb.pb, pb.pi, pb.ph, pb.pc)] = nm::float_to_half(inf, c.dtype); break;
            case Poison::kQNegInf: hq[pb.q_index(pb.pb, pb.pi, pb.ph, pb.pc)] = nm::float_to_half(-inf, c.dtype); break;
            case Poison::kKNan: hk[pb.kv_index(pb.pb, key, pb.pg, pb.pc)] = nm::float_to_half(nan, c.dtype); break;
            case Poison::kKPosInf: hk[pb.kv_index(pb.pb, key, pb.pg, pb.pc)] = nm::float_to_half(inf, c.dtype); break;
            case Poison::kKNegInf: hk[pb.kv_index(pb.pb, key, pb.pg, pb.pc)] = nm::float_to_half(-inf, c.dtype); break;
            case Poison::kVNan: hv[pb.kv_index(pb.pb, key, pb.pg, pb.pc)] = nm::float_to_half(nan, c.dtype); break;
            case Poison::kVPosInf: hv[pb.kv_index(pb.pb, key, pb.pg, pb.pc)] = nm::float_to_half(inf, c.dtype); break;
            case Poison::kVNegInf: hv[pb.kv_index(pb.pb, key, pb.pg, pb.pc)] = nm::float_to_half(-inf, c.dtype); break;
        }
        RunOutput got, alt;
        run(hq, hk, hv, c.seqlen_k, &got);
        ASSERT_FALSE(HasFatalFailure());
        const bool needs_alt = kind == Poison::kKNegInf && !c.causal;
        if (needs_alt) {  // the clean inputs without the last key
            run(inputs[fix][0], inputs[fix][1], pb.v, c.seqlen_k - 1, &alt);
            ASSERT_FALSE(HasFatalFailure());
        }
        const RunOutput& ref = clean[fix];

        // Check every row; report the first few bad elements of each kind of expectation.
        std::map<RowExpect, int> rows_per_expect, bad_rows_per_expect;
        std::vector<std::string> messages;
        constexpr size_t kMaxMessages = 8;
        const int d = c.head_dim;
        for (int b = 0; b < c.batch; ++b) {
            for (int i = 0; i < c.seqlen_q; ++i) {
                for (int h = 0; h < c.heads_q; ++h) {
                    const RowExpect e = pb.expect(kind, b, i, h);
                    ++rows_per_expect[e];
                    const size_t o0 = pb.q_index(b, i, h, 0);
                    const size_t li = pb.lse_index(b, i, h);
                    const float lse_got = got.lse[li];
                    std::string problem;
                    auto o_val = [&](int col) { return nm::half_to_float(got.o[o0 + col], c.dtype); };
                    auto same_o = [&](int col) { return got.o[o0 + col] == ref.o[o0 + col]; };
                    auto same_lse = [&] { return nm::float_bits(lse_got) == nm::float_bits(ref.lse[li]); };
                    auto col_problem = [&](int col, const char* want) {
                        return "O[d=" + std::to_string(col) + "] = " + describe_half(got.o[o0 + col], c.dtype) + ", " +
                               want + " (clean: " + describe_half(ref.o[o0 + col], c.dtype) + ")";
                    };
                    auto others_same = [&](int except) {
                        for (int col = 0; col < d; ++col)
                            if (col != except && !same_o(col)) return col_problem(col, "expected unchanged");
                        if (!same_lse())
                            return "LSE = " + describe_float(lse_got) + ", expected unchanged " + describe_float(ref.lse[li]);
                        return std::string();
                    };
                    switch (e) {
                        case RowExpect::kSame: problem = others_same(-1); break;
                        case RowExpect::kAllNan:
                            for (int col = 0; col < d && problem.empty(); ++col)
                                if (!std::isnan(o_val(col))) problem = col_problem(col, "expected NaN");
                            if (problem.empty() && !std::isnan(lse_got))
                                problem = "O all NaN as expected, but LSE = " + describe_float(lse_got) +
                                          ", expected NaN" +
                                          (std::isinf(lse_got) && lse_got < 0
                                               ? " (-inf: a NaN row sum taken for a row that sees no key?)"
                                               : "");
                            break;
                        case RowExpect::kNoKey:
                            for (int col = 0; col < d && problem.empty(); ++col)
                                if (o_val(col) != 0.f) problem = col_problem(col, "expected 0");
                            if (problem.empty() && !(std::isinf(lse_got) && lse_got < 0))
                                problem = "LSE = " + describe_float(lse_got) + ", expected -inf";
                            break;
                        case RowExpect::kFinite:
                            for (int col = 0; col < d && problem.empty(); ++col)
                                if (!std::isfinite(o_val(col))) problem = col_problem(col, "expected finite");
                            if (problem.empty() && !std::isfinite(lse_got))
                                problem = "LSE = " + describe_float(lse_got) + ", expected finite";
                            break;
                        case RowExpect::kMatchAlt:
                            for (int col = 0; col < d && problem.empty(); ++col)
                                if (got.o[o0 + col] != alt.o[o0 + col])
                                    problem = "O[d=" + std::to_string(col) + "] = " + describe_half(got.o[o0 + col], c.dtype) +
                                              ", expected the seqlen_k - 1 run's " + describe_half(alt.o[o0 + col], c.dtype);
                            if (problem.empty() && nm::float_bits(lse_got) != nm::float_bits(alt.lse[li]))
                                problem = "LSE = " + describe_float(lse_got) + ", expected the seqlen_k - 1 run's " +
                                          describe_float(alt.lse[li]);
                            break;
                        case RowExpect::kColNan:
                            if (!std::isnan(o_val(pb.pc))) problem = col_problem(pb.pc, "expected NaN");
                            if (problem.empty()) problem = others_same(pb.pc);
                            break;
                        case RowExpect::kColNonFinite:
                            if (std::isfinite(o_val(pb.pc))) problem = col_problem(pb.pc, "expected +-Inf or NaN");
                            if (problem.empty()) problem = others_same(pb.pc);
                            break;
                        case RowExpect::kColNanOrSame:
                            if (!std::isnan(o_val(pb.pc)) && !same_o(pb.pc))
                                problem = col_problem(pb.pc, "expected NaN or unchanged");
                            if (problem.empty()) problem = others_same(pb.pc);
                            break;
                    }
                    if (!problem.empty()) {
                        ++bad_rows_per_expect[e];
                        if (messages.size() < kMaxMessages) {
                            messages.push_back("row [b=" + std::to_string(b) + ", s=" + std::to_string(i) +
                                               ", h=" + std::to_string(h) + "], expected " + expect_name(e) + ": " +
                                               problem);
                        }
                    }
                }
            }
        }
        std::ostringstream summary;
        int bad_total = 0;
        for (const auto& [e, n] : rows_per_expect) {
            const int bad = bad_rows_per_expect[e];
            bad_total += bad;
            summary << "\n    " << n << " rows expected " << expect_name(e) << ": " << bad << " wrong";
        }
        std::printf("  %-26s key %d: %s\n", poison_name(kind), key, bad_total == 0 ? "ok" : "WRONG");
        if (bad_total > 0) {
            std::ostringstream m;
            m << c.name << ", " << poison_name(kind) << " at batch " << pb.pb << ", query row " << pb.pi << " / key "
              << key << ", query head " << pb.ph << " / KV head " << pb.pg << ", column " << pb.pc << ":"
              << summary.str() << "\n  first bad rows:";
            for (const std::string& s : messages) m << "\n    " << s;
            ADD_FAILURE() << m.str();
        }
    }
}

std::string non_finite_name(const ::testing::TestParamInfo<NonFiniteCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(NonFinite, NonFiniteInputs, ::testing::ValuesIn(non_finite_cases()), non_finite_name);

// =============================================================================================
// PartialGpu: kernels whose CTAs wait for each other, on the few SMs other work leaves
// =============================================================================================

// A full-mask d128 problem past one pass of the grid splits its last pass (the workspace's split
// tail, sm90/split_tail.cuh): a merger CTA spins until its partner CTAs have written their partial
// tiles. A GPU shared with other work (MPS, a green context, a kernel on another stream) may run
// only a few of the grid's CTAs at a time, so those waits must only ever be on CTAs that started
// first (TileScheduler::tail_run). Here a blocker kernel holds every SM but 1 or 5 (one CTA per
// SM, pinned there by its shared memory) until the host releases it; the forward runs on the SMs
// left and must finish before the release, with the same bits as on the whole GPU.
//
// The shape, b1 hq84 hkv12 256 x 8192 d128: 168 query tiles of 128 rows, on 132 SMs one whole pass
// and 36 tiles of 64 KV blocks cut into runs of 18 blocks (a split on 85 to 134 SMs: runs of at
// least 16 blocks; host_sm90_blocks_test checks that both forwards' rules split it on 132). On one
// free SM of an H100 the call takes 55-65 ms, the backward's case up to 0.7 s (bench/RESULTS.md
// run 60); the wait allows kCallTimeoutS.
constexpr int kPartialBatch = 1, kPartialHeadsQ = 84, kPartialHeadsKv = 12, kPartialSeqQ = 256, kPartialSeqK = 8192;
constexpr int kPartialHeadDim = 128;
constexpr double kBlockerStartTimeoutS = 10.0;
constexpr double kCallTimeoutS = 20.0;
constexpr uint64_t kBlockerMaxNs = 120ull * 1000 * 1000 * 1000;  // a blocker never outlives a broken test
// Between a blocker's reads of the release flag: every read crosses PCIe to host memory, and 130
// SMs polling every microsecond slowed the calls beside them (bench/RESULTS.md runs 59-60: 50 us
// between reads took 18-70% off their times); the release waits at most this long.
constexpr unsigned kBlockerSleepNs = 50000;

// One CTA per SM (its dynamic shared memory is the most a CTA may have): announces itself in
// started[blockIdx.x] (host memory), then holds the SM until *release (host memory) is set.
__global__ void hold_sm_until_released(volatile int* started, const volatile int* release) {
    if (threadIdx.x == 0) {
        started[blockIdx.x] = 1;
        __threadfence_system();
        const uint64_t t0 = hattn::ptx::read_globaltimer();
        while (*release == 0 && hattn::ptx::read_globaltimer() - t0 < kBlockerMaxNs) __nanosleep(kBlockerSleepNs);
    }
    __syncthreads();
}

// Host memory the GPU reads and writes (cudaHostAllocMapped).
struct MappedInts {
    int* host = nullptr;
    int* device = nullptr;
    cudaError_t rc;
    explicit MappedInts(int n) {
        rc = cudaHostAlloc(reinterpret_cast<void**>(&host), n * sizeof(int), cudaHostAllocMapped);
        if (rc == cudaSuccess) {
            std::memset(host, 0, n * sizeof(int));
            rc = cudaHostGetDevicePointer(reinterpret_cast<void**>(&device), host, 0);
        }
    }
    ~MappedInts() { if (host != nullptr) cudaFreeHost(host); }
    MappedInts(const MappedInts&) = delete;
    MappedInts& operator=(const MappedInts&) = delete;
};

struct OwnedStream {
    cudaStream_t s = nullptr;
    ~OwnedStream() { if (s != nullptr) cudaStreamDestroy(s); }
};
struct OwnedEvent {
    cudaEvent_t e = nullptr;
    ~OwnedEvent() { if (e != nullptr) cudaEventDestroy(e); }
};

// A call on a stream (returns its status).
using StreamCall = std::function<hattn_status(cudaStream_t)>;

// An output of a call: `bytes` at `ptr`, poisoned before each run and compared bit for bit.
struct OutputRegion {
    const char* name;
    void* ptr;
    size_t bytes;
};

// "" if equal, else how many bytes differ and where the first is.
std::string first_byte_difference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
    const auto mismatch = std::mismatch(want.begin(), want.end(), got.begin());
    if (mismatch.first == want.end()) return {};
    size_t n = 0;
    for (size_t i = 0; i < want.size(); ++i) n += got[i] != want[i];
    std::ostringstream s;
    s << n << " bytes differ, the first at byte " << (mismatch.first - want.begin());
    return s.str();
}

// Runs `call` once on the whole GPU, then once per free-SM count beside the blocker: each run must
// finish while the blocker holds the other SMs, and leave every output bit-identical to the
// whole-GPU run's.
void expect_finishes_on_a_partial_gpu(const StreamCall& call, const std::vector<OutputRegion>& outputs) {
    int device = 0, sms = 0, smem_optin = 0;
    HATTN_CUDA_CHECK(cudaGetDevice(&device));
    HATTN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    HATTN_CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    HATTN_CUDA_CHECK(cudaFuncSetAttribute(hold_sm_until_released, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          smem_optin));
    OwnedStream blocker_stream, call_stream;
    OwnedEvent done;
    HATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&blocker_stream.s, cudaStreamNonBlocking));
    HATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&call_stream.s, cudaStreamNonBlocking));
    HATTN_CUDA_CHECK(cudaEventCreateWithFlags(&done.e, cudaEventDisableTiming));

    auto poison = [&] {
        for (const OutputRegion& r : outputs) HATTN_CUDA_CHECK(cudaMemsetAsync(r.ptr, kPoisonByte, r.bytes, call_stream.s));
        HATTN_CUDA_CHECK(cudaStreamSynchronize(call_stream.s));
    };
    auto download = [&](std::vector<std::vector<uint8_t>>* got) {
        got->resize(outputs.size());
        for (size_t i = 0; i < outputs.size(); ++i) {
            (*got)[i].resize(outputs[i].bytes);
            HATTN_CUDA_CHECK(cudaMemcpy((*got)[i].data(), outputs[i].ptr, outputs[i].bytes, cudaMemcpyDeviceToHost));
        }
    };
    ASSERT_NO_FATAL_FAILURE(poison());
    const Clock::time_point t_whole = Clock::now();
    ASSERT_EQ(call(call_stream.s), HATTN_SUCCESS) << "the whole-GPU run";
    HATTN_CUDA_CHECK(cudaStreamSynchronize(call_stream.s));
    std::printf("  all %d SMs: the call took %.2f ms (the first call: with its set-up)\n", sms,
                seconds_since(t_whole) * 1e3);
    std::vector<std::vector<uint8_t>> whole;
    ASSERT_NO_FATAL_FAILURE(download(&whole));

    for (int free_sms : {1, 5}) {
        SCOPED_TRACE("free SMs: " + std::to_string(free_sms));
        const int held = sms - free_sms;
        MappedInts started(held), release(1);
        ASSERT_EQ(started.rc, cudaSuccess) << cuda_error(started.rc, "cudaHostAlloc (started)");
        ASSERT_EQ(release.rc, cudaSuccess) << cuda_error(release.rc, "cudaHostAlloc (release)");
        ASSERT_NO_FATAL_FAILURE(poison());
        hold_sm_until_released<<<held, 32, smem_optin, blocker_stream.s>>>(started.device, release.device);
        HATTN_CUDA_CHECK(cudaGetLastError());
        // Every blocker CTA resident before the call is launched.
        const Clock::time_point t0 = Clock::now();
        auto count_started = [&] {
            int n = 0;
            for (int i = 0; i < held; ++i) n += reinterpret_cast<volatile int*>(started.host)[i];
            return n;
        };
        while (count_started() < held && seconds_since(t0) < kBlockerStartTimeoutS) std::this_thread::yield();
        const bool all_held = count_started() == held;
        hattn_status st = HATTN_SUCCESS;
        bool finished = false;
        double call_s = 0;
        if (all_held) {
            const Clock::time_point t1 = Clock::now();
            st = call(call_stream.s);
            if (st == HATTN_SUCCESS && cudaEventRecord(done.e, call_stream.s) == cudaSuccess) {
                cudaError_t q;
                while ((q = cudaEventQuery(done.e)) == cudaErrorNotReady && seconds_since(t1) < kCallTimeoutS)
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                finished = q == cudaSuccess;
            }
            call_s = seconds_since(t1);
        }
        // Release the blocker whatever happened (a stuck call then finishes on the freed SMs).
        reinterpret_cast<volatile int*>(release.host)[0] = 1;
        HATTN_CUDA_CHECK(cudaStreamSynchronize(blocker_stream.s));
        HATTN_CUDA_CHECK(cudaStreamSynchronize(call_stream.s));
        ASSERT_TRUE(all_held) << "only " << count_started() << " of " << held << " blocker CTAs started in "
                              << kBlockerStartTimeoutS << " s";
        ASSERT_EQ(st, HATTN_SUCCESS);
        EXPECT_TRUE(finished) << "the call did not finish in " << kCallTimeoutS << " s on " << free_sms
                              << " free SMs (it waits on CTAs that cannot start)";
        std::printf("  %d free SMs: the call took %.1f ms\n", free_sms, call_s * 1e3);
        std::vector<std::vector<uint8_t>> partial;
        ASSERT_NO_FATAL_FAILURE(download(&partial));
        for (size_t i = 0; i < outputs.size(); ++i) {
            const std::string diff = first_byte_difference(partial[i], whole[i]);
            EXPECT_TRUE(diff.empty()) << outputs[i].name << " against the whole-GPU run: " << diff;
        }
    }
}

TEST(PartialGpu, SplitTailFinishes16Bit) {
    HATTN_REQUIRE_HOPPER();
    const Shape sh{"split", kPartialBatch, kPartialHeadsQ, kPartialHeadsKv, kPartialSeqQ, kPartialSeqK,
                   kPartialHeadDim, HATTN_DTYPE_BF16, false, 0};
    DeviceBuffer q(sh.q_elems() * 2), k(sh.kv_elems() * 2), v(sh.kv_elems() * 2), o(sh.q_elems() * 2),
        lse(sh.lse_elems() * 4), ws(hattn_fwd_workspace_size());
    uint64_t seed = 31;
    for (DeviceBuffer* b : {&q, &k, &v}) {
        ASSERT_NE(b->ptr, nullptr) << cuda_error(b->rc, "cudaMalloc (inputs)");
        HATTN_CUDA_CHECK(hattn::testing::fill_normal(b->ptr, b->bytes / 2, sh.dtype, seed++, 1.0f, nullptr));
    }
    for (DeviceBuffer* b : {&o, &lse, &ws}) ASSERT_NE(b->ptr, nullptr) << cuda_error(b->rc, "cudaMalloc (outputs)");
    ASSERT_NO_FATAL_FAILURE(hattn::test::zero_schedule_workspace(ws.ptr));
    hattn_fwd_params p = sh.params(q.ptr, k.ptr, v.ptr, o.ptr, lse.as<float>());
    p.workspace = ws.ptr;
    p.workspace_size = ws.bytes;
    expect_finishes_on_a_partial_gpu([&](cudaStream_t s) { return hattn_fwd(&p, s); },
                                     {{"O", o.ptr, o.bytes}, {"LSE", lse.ptr, lse.bytes}});
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_NO_FATAL_FAILURE(hattn::test::expect_schedule_workspace_reset(ws.ptr));
}

TEST(PartialGpu, SplitTailFinishesFp8) {
    HATTN_REQUIRE_HOPPER();
    const Shape sh{"split", kPartialBatch, kPartialHeadsQ, kPartialHeadsKv, kPartialSeqQ, kPartialSeqK,
                   kPartialHeadDim, HATTN_DTYPE_BF16, false, 0};
    const auto descales = [](int heads, int seqlen) {
        return static_cast<size_t>(kPartialBatch) * heads * ((seqlen + HATTN_FP8_BLOCK_ROWS - 1) / HATTN_FP8_BLOCK_ROWS);
    };
    const size_t q_desc = descales(kPartialHeadsQ, kPartialSeqQ), kv_desc = descales(kPartialHeadsKv, kPartialSeqK);
    DeviceBuffer q(sh.q_elems()), k(sh.kv_elems()), v(sh.kv_elems()), o(sh.q_elems() * 2), lse(sh.lse_elems() * 4),
        qd(q_desc * 4), kd(kv_desc * 4), vd(kv_desc * 4),
        vt(hattn_fwd_fp8_workspace_size(kPartialBatch, kPartialHeadsKv, kPartialSeqK, kPartialHeadDim)),
        ws(hattn_fwd_workspace_size()), source(std::max(sh.q_elems(), sh.kv_elems()) * 2), amax(sizeof(float));
    // e4m3 inputs: N(0, 1) bf16 values quantized with one scale per tensor.
    ASSERT_NE(source.ptr, nullptr) << cuda_error(source.rc, "cudaMalloc (bf16 source)");
    ASSERT_NE(amax.ptr, nullptr) << cuda_error(amax.rc, "cudaMalloc (amax)");
    uint64_t seed = 41;
    for (auto [e4m3, descale, n_descales] : {std::tuple{&q, &qd, q_desc}, {&k, &kd, kv_desc}, {&v, &vd, kv_desc}}) {
        ASSERT_NE(e4m3->ptr, nullptr) << cuda_error(e4m3->rc, "cudaMalloc (inputs)");
        ASSERT_NE(descale->ptr, nullptr) << cuda_error(descale->rc, "cudaMalloc (descales)");
        HATTN_CUDA_CHECK(hattn::testing::fill_normal(source.ptr, e4m3->bytes, HATTN_DTYPE_BF16, seed++, 1.0f, nullptr));
        HATTN_CUDA_CHECK(hattn::testing::quantize_e4m3_per_tensor(source.ptr, e4m3->bytes, HATTN_DTYPE_BF16,
                                                                  e4m3->as<uint8_t>(), descale->as<float>(),
                                                                  n_descales, amax.as<float>(), nullptr));
    }
    for (DeviceBuffer* b : {&o, &lse, &vt, &ws}) ASSERT_NE(b->ptr, nullptr) << cuda_error(b->rc, "cudaMalloc (outputs)");
    ASSERT_NO_FATAL_FAILURE(hattn::test::zero_schedule_workspace(ws.ptr));
    hattn_fwd_fp8_params p = hattn_fwd_fp8_params_contiguous(
        q.ptr, k.ptr, v.ptr, o.ptr, qd.as<float>(), kd.as<float>(), vd.as<float>(), kPartialBatch, kPartialHeadsQ,
        kPartialHeadsKv, kPartialSeqQ, kPartialSeqK, kPartialHeadDim, HATTN_DTYPE_BF16);
    p.lse = lse.as<float>();
    p.workspace = vt.ptr;
    p.workspace_size = vt.bytes;
    p.schedule_workspace = ws.ptr;
    p.schedule_workspace_size = ws.bytes;
    expect_finishes_on_a_partial_gpu([&](cudaStream_t s) { return hattn_fwd_fp8(&p, s); },
                                     {{"O", o.ptr, o.bytes}, {"LSE", lse.ptr, lse.bytes}});
    HATTN_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_NO_FATAL_FAILURE(hattn::test::expect_schedule_workspace_reset(ws.ptr));
}

// The backward's deterministic mode adds dQ in KV-block order: the CTA of block j waits for block
// j - 1's (bwd.cuh). Both of its grid orders -- the 1-D one (full masks) and the causal one that
// starts the longest KV blocks first -- launch block j - 1 of a head before block j, so on a
// partial GPU the wait is always for a CTA that has started. d128, 1000 x 1200, GQA 8:2.
TEST(PartialGpu, DeterministicBackwardFinishes) {
    HATTN_REQUIRE_HOPPER();
    for (bool causal : {false, true}) {
        SCOPED_TRACE(causal ? "causal" : "full");
        const Shape sh{"bwd", 2, 8, 2, 1000, 1200, 128, HATTN_DTYPE_BF16, causal, 0};
        DeviceBuffer q(sh.q_elems() * 2), k(sh.kv_elems() * 2), v(sh.kv_elems() * 2), o(sh.q_elems() * 2),
            dout(sh.q_elems() * 2), lse(sh.lse_elems() * 4), dq(sh.q_elems() * 2), dk(sh.kv_elems() * 2),
            dv(sh.kv_elems() * 2),
            ws(hattn_bwd_workspace_size(sh.batch, sh.heads_q, sh.seqlen_q, sh.head_dim));
        uint64_t seed = 51;
        for (DeviceBuffer* b : {&q, &k, &v, &dout}) {
            ASSERT_NE(b->ptr, nullptr) << cuda_error(b->rc, "cudaMalloc (inputs)");
            HATTN_CUDA_CHECK(hattn::testing::fill_normal(b->ptr, b->bytes / 2, sh.dtype, seed++, 1.0f, nullptr));
        }
        for (DeviceBuffer* b : {&o, &lse, &dq, &dk, &dv, &ws})
            ASSERT_NE(b->ptr, nullptr) << cuda_error(b->rc, "cudaMalloc (outputs)");
        const hattn_fwd_params fp = sh.params(q.ptr, k.ptr, v.ptr, o.ptr, lse.as<float>());
        ASSERT_EQ(hattn_fwd(&fp, nullptr), HATTN_SUCCESS);
        HATTN_CUDA_CHECK(cudaDeviceSynchronize());
        hattn_bwd_params bp = hattn_bwd_params_contiguous(q.ptr, k.ptr, v.ptr, o.ptr, dout.ptr, lse.as<float>(),
                                                          dq.ptr, dk.ptr, dv.ptr, sh.batch, sh.heads_q, sh.heads_kv,
                                                          sh.seqlen_q, sh.seqlen_k, sh.head_dim, sh.dtype);
        bp.causal = causal ? 1 : 0;
        bp.flags = HATTN_BWD_DETERMINISTIC;
        bp.workspace = ws.ptr;
        bp.workspace_size = ws.bytes;
        expect_finishes_on_a_partial_gpu([&](cudaStream_t s) { return hattn_bwd(&bp, s); },
                                         {{"dQ", dq.ptr, dq.bytes}, {"dK", dk.ptr, dk.bytes}, {"dV", dv.ptr, dv.bytes}});
    }
}

}  // namespace
