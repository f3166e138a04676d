// hattn/bench/attention_harness.cuh -- what the attention benchmarks (fwd_bench, bwd_bench) share: the
// FlashAttention-3 paper's shape sweep, CUDA-event timing of batches of back-to-back launches
// behind a GPU spin, and the TFLOPS counters.
//
// NOTES (why the timing loop looks the way it does):
//  - Time comes from CUDA events around the launches (UseManualTime), never from the host clock:
//    the host returns from hattn_fwd / hattn_bwd long before the GPU finishes.
//  - The host-side cost of each call (validation, tensor-map encoding) must not count as kernel
//    time: a short GPU spin is queued before the start event so the host gets ahead of the GPU,
//    and short kernels (~100 us at seqlen 512) are timed in batches of back-to-back launches, so
//    every call is enqueued while the previous launch still runs.
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include "hattn.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "host/device_info.h"
#include "testing/device_random.cuh"

namespace hattn::bench {

// ---- The sweep ------------------------------------------------------------------------------
// bf16, batch * seqlen = 16k tokens, heads * head_dim = 2048, so every shape holds the same number
// of elements and one set of buffers serves every benchmark.
constexpr int64_t kTokens = 16384;     // batch * seqlen, constant across the sweep
constexpr int64_t kModelWidth = 2048;  // heads * head_dim, constant across the sweep
constexpr int64_t kTensorElements = kTokens * kModelWidth;  // one [b, s, h, d] tensor
constexpr int kHeadDims[] = {64, 128, 256};
constexpr int kSeqlens[] = {512, 1024, 2048, 4096, 8192, 16384};

struct Shape {
    int head_dim;
    int seqlen;
    bool causal;
    unsigned flags;  // HATTN_FWD_* or HATTN_BWD_* bits

    int batch() const { return int(kTokens / seqlen); }
    int heads() const { return int(kModelWidth / head_dim); }
    // The forward's two GEMMs (Q K^T and P V) of 2 * s * s * d FLOPs each per (batch, head);
    // causal skips half. The backward's five GEMMs count 2.5 times this.
    double forward_flops() const {
        const double full = 4.0 * batch() * heads() * double(seqlen) * seqlen * head_dim;
        return causal ? full / 2 : full;
    }
};

// The sweep's shapes (no flags): head dim, then mask, then seqlen.
template <class F>
void for_each_sweep_shape(F f) {
    for (int head_dim : kHeadDims) {
        for (bool causal : {false, true}) {
            for (int seqlen : kSeqlens) f(Shape{head_dim, seqlen, causal, 0u});
        }
    }
}

// "<family>/bf16/d128/s4096/b4/h16/causal"
inline std::string shape_name(const char* family, const Shape& shape) {
    return std::string(family) + "/bf16/d" + std::to_string(shape.head_dim) + "/s" + std::to_string(shape.seqlen) +
           "/b" + std::to_string(shape.batch()) + "/h" + std::to_string(shape.heads()) +
           (shape.causal ? "/causal" : "/full");
}

// ---- Measurement policy ---------------------------------------------------------------------
constexpr double kPeakTflops = 989.0;        // dense bf16, 4096 FLOP/clk/SM x 132 SMs x 1.83 GHz
constexpr int kWarmupLaunches = 3;           // module load, smem opt-in, clocks ramping up
constexpr double kMinTimeSeconds = 0.1;      // per benchmark, in measured GPU time
constexpr double kTargetBatchSeconds = 1e-3; // a timed batch of launches should cover about 1 ms
constexpr int kMaxLaunchesPerBatch = 16;
constexpr long long kQueueAheadCycles = 200000;  // ~100 us at ~2 GHz: time for the host to enqueue a launch

// Keeps one thread busy for `cycles` SM clocks: queued before a timed batch so that the launches
// behind it are already enqueued when the start event fires.
__global__ void spin_kernel(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

inline std::string cuda_error(const char* what, cudaError_t rc) {
    return std::string(what) + ": " + cudaGetErrorString(rc);
}

// Device memory and a stream shared by every benchmark of one executable, set up on first use (so
// listing the benchmarks touches no GPU) and released when main returns.
class DeviceArena {
public:
    // `setup` allocates and fills through the arena; it runs once, after the GPU check and the
    // stream, and returns an error message or "".
    explicit DeviceArena(std::function<std::string(DeviceArena&)> setup) : setup_(std::move(setup)) {}
    DeviceArena(const DeviceArena&) = delete;
    DeviceArena& operator=(const DeviceArena&) = delete;
    ~DeviceArena() {
        for (void* p : allocations_) cudaFree(p);
        if (stream_ != nullptr) cudaStreamDestroy(stream_);
    }

    // Empty on success; otherwise the reason every benchmark should be skipped.
    const std::string& prepare() {
        if (!prepared_) {
            prepared_ = true;
            error_ = set_up();
        }
        return error_;
    }

    // `bytes` of device memory, freed with the arena; "" or the error.
    std::string allocate(void** slot, size_t bytes) {
        const cudaError_t rc = cudaMalloc(slot, bytes);
        if (rc != cudaSuccess) return cuda_error("cudaMalloc", rc);
        allocations_.push_back(*slot);
        return {};
    }

    // One bf16 [b, s, h, d] tensor of the sweep filled with N(0, 1) values generated on the GPU
    // (never zeros: they run faster than real data); "" or the error.
    std::string random_tensor(void** slot, uint32_t seed) {
        if (std::string e = allocate(slot, size_t(kTensorElements) * 2); !e.empty()) return e;
        const cudaError_t rc = hattn::testing::fill_normal(*slot, kTensorElements, HATTN_DTYPE_BF16, seed, 1.0f, stream_);
        return rc == cudaSuccess ? std::string() : cuda_error("fill_normal", rc);
    }

    cudaStream_t stream() const { return stream_; }

private:
    std::string set_up() {
        std::string reason = hattn::host::hopper_unavailable_reason();
        if (!reason.empty()) return reason;
        cudaError_t rc = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
        if (rc != cudaSuccess) return cuda_error("cudaStreamCreateWithFlags", rc);
        if (std::string e = setup_(*this); !e.empty()) return e;
        if ((rc = cudaStreamSynchronize(stream_)) != cudaSuccess) return cuda_error("input fill", rc);
        return {};
    }

    std::function<std::string(DeviceArena&)> setup_;
    bool prepared_ = false;
    std::string error_;
    cudaStream_t stream_ = nullptr;
    std::vector<void*> allocations_;
};

// "<api> failed: <status> (<validation message>) [<CUDA error>]"
template <class Params>
std::string launch_error(const char* api, const Params& params, hattn_status status,
                         hattn_status (*validate)(const Params*, char*, size_t)) {
    std::string message = std::string(api) + " failed: " + hattn_status_string(status);
    char detail[256] = {};
    if (validate(&params, detail, sizeof(detail)) != HATTN_SUCCESS) message += std::string(" (") + detail + ")";
    if (status == HATTN_ERROR_CUDA) message += std::string(" [") + cudaGetErrorString(cudaGetLastError()) + "]";
    return message;
}

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

// One launch on `stream`; false (with *error set) on failure.
using Launch = std::function<bool(std::string* error)>;

// Times `launch` under the policy above and reports per-launch time and the counters TFLOPS
// (flops_per_launch / measured seconds) and pct_of_989; skips the benchmark with the error on
// failure.
inline void run_timed(benchmark::State& state, cudaStream_t stream, double flops_per_launch, const Launch& launch) {
    std::string error;
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
            if (!launch(&error)) return -1.0;
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
    const double tflops = flops_per_launch * double(total_launches) / total_seconds * 1e-12;
    state.counters["TFLOPS"] = tflops;
    state.counters["pct_of_989"] = 100.0 * tflops / kPeakTflops;
    state.counters["launches_per_timing"] = per_batch;
}

// Registers `body` with manual (event) timing, in microseconds, for at least kMinTimeSeconds.
inline void register_timed(const std::string& name, std::function<void(benchmark::State&)> body) {
    benchmark::RegisterBenchmark(name.c_str(), [body](benchmark::State& state) { body(state); })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(kMinTimeSeconds);
}

inline std::string device_description() {
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

// Google Benchmark's main with the device and the peak in the context.
inline int run_benchmarks(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::AddCustomContext("device", device_description());
    benchmark::AddCustomContext("peak_tflops_for_pct", std::to_string(kPeakTflops));
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}

}  // namespace hattn::bench
