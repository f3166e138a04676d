// hattn/bench/fwd_bench.cu -- forward-attention throughput through the public C API.
//
// The sweep is the FlashAttention-3 paper's: bf16, batch * seqlen = 16k tokens, heads * head_dim
// = 2048, head_dim in {64, 128, 256}, seqlen 512 .. 16k, full and causal; plus the schedule
// ablation at head_dim 128, seqlen 8k (HATTN_FWD_* flags). Every benchmark reports
//   TFLOPS      = forward FLOPs / measured seconds (4 * b * h * s * s * d, half of it for causal)
//   pct_of_989  = TFLOPS as a percentage of the dense bf16 tensor peak of an H100/H200 SXM.
//
// NOTES (why the timing loop looks the way it does):
//  - Time comes from CUDA events around the launches (UseManualTime), never from the host clock:
//    the host returns from hattn_fwd long before the GPU finishes.
//  - Inputs are random, non-zero and rotated between two independent sets: tensor cores run
//    faster on zeros, and the tail of one launch's K/V would otherwise still sit in L2 for the
//    next launch (the 50 MB L2 is as large as a whole K tensor of small shapes).
//  - The host-side cost of each call (validation, tensor-map encoding) must not count as kernel
//    time: a short GPU spin is queued before the start event so the host gets ahead of the GPU,
//    and short kernels (~100 us at seqlen 512) are timed in batches of back-to-back launches, so
//    every call is enqueued while the previous launch still runs.
//  - All shapes in the sweep hold the same number of elements (16k tokens x 2048 features), so one
//    set of buffers, allocated and filled on first use, serves every benchmark.
#include <benchmark/benchmark.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "testing/device_random.cuh"
#include "hattn.h"
#include "host/device_info.h"

namespace {

// ---- The sweep ------------------------------------------------------------------------------
constexpr int64_t kTokens = 16384;     // batch * seqlen, constant across the sweep
constexpr int64_t kModelWidth = 2048;  // heads * head_dim, constant across the sweep
constexpr int kHeadDims[] = {64, 128, 256};
constexpr int kSeqlens[] = {512, 1024, 2048, 4096, 8192, 16384};
constexpr int kAblationHeadDim = 128;
constexpr int kAblationSeqlen = 8192;

// ---- Measurement policy ---------------------------------------------------------------------
constexpr double kPeakTflops = 989.0;        // dense bf16, 4096 FLOP/clk/SM x 132 SMs x 1.83 GHz
constexpr int kInputSets = 2;                // rotate Q/K/V between launches (L2 reuse across launches)
constexpr int kWarmupLaunches = 3;           // module load, smem opt-in, clocks ramping up
constexpr double kMinTimeSeconds = 0.1;      // per benchmark, in measured GPU time
constexpr double kTargetBatchSeconds = 1e-3; // a timed batch of launches should cover about 1 ms
constexpr int kMaxLaunchesPerBatch = 16;
constexpr long long kQueueAheadCycles = 200000;  // ~100 us at ~2 GHz: time for the host to enqueue a launch
constexpr uint32_t kSeed = 0x5eed1234u;


// Keeps one thread busy for `cycles` SM clocks: queued before a timed batch so that the launches
// behind it are already enqueued when the start event fires.
__global__ void spin_kernel(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

std::string cuda_error(const char* what, cudaError_t rc) {
    return std::string(what) + ": " + cudaGetErrorString(rc);
}

// Empty when the current device is a Hopper GPU (compute capability 9.0); otherwise why not.
using hattn::host::hopper_unavailable_reason;

// Device memory and a stream shared by every benchmark, created on first use (so listing the
// benchmarks touches no GPU) and released when main returns.
class Workspace {
public:
    static constexpr int64_t kElements = kTokens * kModelWidth;  // one [b, s, h, d] tensor

    Workspace() = default;
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;
    ~Workspace() {
        for (void* p : allocations_) cudaFree(p);
        if (stream_ != nullptr) cudaStreamDestroy(stream_);
    }

    // Empty on success; otherwise the reason every benchmark should be skipped.
    const std::string& prepare() {
        if (!prepared_) {
            prepared_ = true;
            error_ = allocate_and_fill();
        }
        return error_;
    }

    const void* q(int set) const { return q_[set]; }
    const void* k(int set) const { return k_[set]; }
    const void* v(int set) const { return v_[set]; }
    void* o() const { return o_; }
    cudaStream_t stream() const { return stream_; }

private:
    std::string allocate_and_fill() {
        std::string reason = hopper_unavailable_reason();
        if (!reason.empty()) return reason;
        cudaError_t rc = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
        if (rc != cudaSuccess) return cuda_error("cudaStreamCreateWithFlags", rc);
        uint32_t seed = kSeed;
        for (int set = 0; set < kInputSets; ++set) {
            for (void** slot : {&q_[set], &k_[set], &v_[set]}) {
                if (std::string e = allocate(slot); !e.empty()) return e;
                // N(0, 1), generated on the GPU (never zeros: they run faster than real data).
                rc = hattn::testing::fill_normal(*slot, kElements, HATTN_DTYPE_BF16, seed++, 1.0f, stream_);
                if (rc != cudaSuccess) return cuda_error("fill_normal", rc);
            }
        }
        if (std::string e = allocate(&o_); !e.empty()) return e;
        if ((rc = cudaStreamSynchronize(stream_)) != cudaSuccess) return cuda_error("input fill", rc);
        return {};
    }

    std::string allocate(void** slot) {
        const cudaError_t rc = cudaMalloc(slot, size_t(kElements) * sizeof(__nv_bfloat16));
        if (rc != cudaSuccess) return cuda_error("cudaMalloc", rc);
        allocations_.push_back(*slot);
        return {};
    }

    bool prepared_ = false;
    std::string error_;
    cudaStream_t stream_ = nullptr;
    void* q_[kInputSets] = {};
    void* k_[kInputSets] = {};
    void* v_[kInputSets] = {};
    void* o_ = nullptr;
    std::vector<void*> allocations_;
};

// A pair of timing events, destroyed with the benchmark run that created them.
class EventPair {
public:
    EventPair() {
        rc_ = cudaEventCreate(&start_);
        if (rc_ == cudaSuccess) rc_ = cudaEventCreate(&stop_);
    }
    EventPair(const EventPair&) = delete;
    EventPair& operator=(const EventPair&) = delete;
    ~EventPair() {
        if (start_ != nullptr) cudaEventDestroy(start_);
        if (stop_ != nullptr) cudaEventDestroy(stop_);
    }
    cudaError_t status() const { return rc_; }
    cudaEvent_t start() const { return start_; }
    cudaEvent_t stop() const { return stop_; }

private:
    cudaError_t rc_ = cudaSuccess;
    cudaEvent_t start_ = nullptr;
    cudaEvent_t stop_ = nullptr;
};

struct Shape {
    int head_dim;
    int seqlen;
    bool causal;
    unsigned flags;  // HATTN_FWD_* bits

    int batch() const { return int(kTokens / seqlen); }
    int heads() const { return int(kModelWidth / head_dim); }
    // Two GEMMs (Q K^T and P V) of 2 * s * s * d FLOPs each per (batch, head); causal skips half.
    double flops() const {
        const double full = 4.0 * batch() * heads() * double(seqlen) * seqlen * head_dim;
        return causal ? full / 2 : full;
    }
};

std::string launch_error(const hattn_fwd_params& params, hattn_status status) {
    std::string message = std::string("hattn_fwd failed: ") + hattn_status_string(status);
    char detail[256] = {};
    if (hattn_fwd_validate(&params, detail, sizeof(detail)) != HATTN_SUCCESS) {
        message += std::string(" (") + detail + ")";
    }
    if (status == HATTN_ERROR_CUDA) message += std::string(" [") + cudaGetErrorString(cudaGetLastError()) + "]";
    return message;
}

void bench_forward(benchmark::State& state, Workspace& workspace, Shape shape) {
    if (const std::string& reason = workspace.prepare(); !reason.empty()) {
        state.SkipWithError(reason.c_str());
        return;
    }
    hattn_fwd_params params[kInputSets];
    for (int set = 0; set < kInputSets; ++set) {
        params[set] = hattn_fwd_params_contiguous(workspace.q(set), workspace.k(set), workspace.v(set),
                                                  workspace.o(), shape.batch(), shape.heads(), shape.heads(),
                                                  shape.seqlen, shape.seqlen, shape.head_dim, HATTN_DTYPE_BF16);
        params[set].causal = shape.causal ? 1 : 0;
        params[set].flags = shape.flags;
    }
    cudaStream_t stream = workspace.stream();
    int next_set = 0;
    std::string error;
    auto launch = [&]() {
        const hattn_fwd_params& p = params[next_set];
        next_set = (next_set + 1) % kInputSets;
        const hattn_status status = hattn_fwd(&p, stream);
        if (status != HATTN_SUCCESS) {
            error = launch_error(p, status);
            return false;
        }
        if (const cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) {
            error = cuda_error("after hattn_fwd", rc);
            return false;
        }
        return true;
    };

    EventPair events;
    if (events.status() != cudaSuccess) {
        state.SkipWithError(cuda_error("cudaEventCreate", events.status()).c_str());
        return;
    }
    // Times `launches` back-to-back launches; negative on failure (then `error` says why).
    auto time_batch = [&](int launches) -> double {
        spin_kernel<<<1, 1, 0, stream>>>(kQueueAheadCycles);
        cudaError_t rc = cudaGetLastError();
        if (rc == cudaSuccess) rc = cudaEventRecord(events.start(), stream);
        for (int i = 0; i < launches && rc == cudaSuccess; ++i) {
            if (!launch()) return -1.0;
        }
        if (rc == cudaSuccess) rc = cudaEventRecord(events.stop(), stream);
        if (rc == cudaSuccess) rc = cudaEventSynchronize(events.stop());
        float ms = 0.f;
        if (rc == cudaSuccess) rc = cudaEventElapsedTime(&ms, events.start(), events.stop());
        if (rc != cudaSuccess) {
            error = cuda_error("timing", rc);  // also catches faults raised by the kernel itself
            return -1.0;
        }
        return double(ms) * 1e-3;
    };

    // Warm up, then size the timed batches from one measured launch.
    const double warmup_seconds = time_batch(kWarmupLaunches);
    const double one_launch = warmup_seconds < 0 ? -1.0 : time_batch(1);
    if (one_launch < 0) {
        state.SkipWithError(error.c_str());
        return;
    }
    const int per_batch =
        std::clamp(int(std::ceil(kTargetBatchSeconds / std::max(one_launch, 1e-9))), 1, kMaxLaunchesPerBatch);

    double total_seconds = 0.0;
    int64_t total_launches = 0;
    for (auto _ : state) {
        const double seconds = time_batch(per_batch);
        if (seconds < 0) {
            state.SkipWithError(error.c_str());
            break;
        }
        state.SetIterationTime(seconds / per_batch);  // reported time is per launch
        total_seconds += seconds;
        total_launches += per_batch;
    }
    if (total_launches == 0 || total_seconds <= 0) return;
    const double tflops = shape.flops() * double(total_launches) / total_seconds * 1e-12;
    state.counters["TFLOPS"] = tflops;
    state.counters["pct_of_989"] = 100.0 * tflops / kPeakTflops;
    state.counters["launches_per_timing"] = per_batch;
}

std::string flags_name(unsigned flags) {
    if (flags == 0) return "default";
    std::string name;
    if (flags & HATTN_FWD_NO_PINGPONG) name += "no_pingpong";
    if (flags & HATTN_FWD_NO_INTRA_WG_OVERLAP) name += std::string(name.empty() ? "" : "_and_") + "no_intra_wg_overlap";
    return name;
}

std::string shape_name(const char* family, const Shape& shape) {
    return std::string(family) + "/bf16/d" + std::to_string(shape.head_dim) + "/s" + std::to_string(shape.seqlen) +
           "/b" + std::to_string(shape.batch()) + "/h" + std::to_string(shape.heads()) +
           (shape.causal ? "/causal" : "/full");
}

void register_benchmark(const std::string& name, Workspace& workspace, const Shape& shape) {
    benchmark::RegisterBenchmark(name.c_str(),
                                 [&workspace, shape](benchmark::State& state) {
                                     bench_forward(state, workspace, shape);
                                 })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(kMinTimeSeconds);
}

std::string device_description() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError();
        return "none";
    }
    int device = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "unknown";
    return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
           std::to_string(prop.multiProcessorCount) + " SMs)";
}

}  // namespace

int main(int argc, char** argv) {
    Workspace workspace;
    for (int head_dim : kHeadDims) {
        for (bool causal : {false, true}) {
            for (int seqlen : kSeqlens) {
                const Shape shape{head_dim, seqlen, causal, 0u};
                register_benchmark(shape_name("fwd", shape), workspace, shape);
            }
        }
    }
    const unsigned kAblationFlags[] = {0u, HATTN_FWD_NO_PINGPONG, HATTN_FWD_NO_INTRA_WG_OVERLAP,
                                       HATTN_FWD_NO_PINGPONG | HATTN_FWD_NO_INTRA_WG_OVERLAP};
    for (unsigned flags : kAblationFlags) {
        const Shape shape{kAblationHeadDim, kAblationSeqlen, false, flags};
        register_benchmark(shape_name("fwd_ablation", shape) + "/" + flags_name(flags), workspace, shape);
    }

    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::AddCustomContext("device", device_description());
    benchmark::AddCustomContext("peak_tflops_for_pct", std::to_string(kPeakTflops));
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
