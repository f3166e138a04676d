// hattn/bench/micro_harness.cuh -- what every microbenchmark in bench/*_bench.cu shares:
// Hopper detection, CUDA error checks, in-kernel clock measurement and event-timed launches.
//
// How a microbenchmark reports a rate (the "per SM per clock" numbers are the ones to compare
// with the hardware's documented peaks; per-second numbers move with the clock):
//   * wall time of each launch      -- cudaEvents around it (UseManualTime / SetIterationTime);
//   * SM cycles of each launch      -- every warpgroup (or warp role) of every CTA records its
//     clock64() span from one lane into its own slot; the launch's span is the max over all
//     slots (timing only thread 0 would time only thread 0's role);
//   * measured SM clock             -- each slot also records its %globaltimer span, so the
//     clock is (sum of cycles) / (sum of nanoseconds) over the slots: the clock the kernel
//     actually ran at, which falls under heavy tensor-core load (700 W power limit);
//   * per_SM_per_clk = work / (SMs * launch cycles);  rates per second = work / event time.
//
// NOTE: every kernel here runs one wave (grid <= resident CTAs), so all CTAs start together
//       and the max of the per-slot spans is the launch's span in SM cycles.
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "host/device_info.h"
#include "ptx/mbarrier.cuh"  // read_globaltimer

// Abort the benchmark binary on any CUDA error: a microbenchmark that keeps running after a
// failed launch would report the speed of doing nothing.
#define HATTN_BENCH_CHECK(expr)                                                               \
    do {                                                                                      \
        const cudaError_t hattn_rc_ = (expr);                                                 \
        if (hattn_rc_ != cudaSuccess) {                                                       \
            std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,         \
                         cudaGetErrorString(hattn_rc_));                                      \
            std::exit(EXIT_FAILURE);                                                          \
        }                                                                                     \
    } while (0)

namespace hattn::bench {

// Hopper's documented per-SM peaks the microbenchmarks are held against.
constexpr double kMufuEx2PerClkPerSm = 16.0;        // SFU: 16 ex2 per SM per clock
constexpr double kBf16FlopPerClkPerSm = 4096.0;     // dense bf16/fp16 wgmma
constexpr double kFp8FlopPerClkPerSm = 8192.0;      // dense e4m3/e5m2 wgmma

constexpr int kWarpgroupThreads = 128;
constexpr int kMaxSlotsPerCta = 8;  // timing slots (warpgroups or warp roles) per CTA

// ---- Device side: one timing record per (CTA, role) slot -------------------------------------
struct SpanRecord {
    unsigned long long cycles;  // clock64() ticks between span_begin and span_end
    unsigned long long ns;      // %globaltimer nanoseconds over the same span
};

struct SpanStart {
    long long clk;
    uint64_t ns;
};

__device__ __forceinline__ SpanStart span_begin() {
    SpanStart s;
    s.ns = ptx::read_globaltimer();
    s.clk = clock64();
    return s;
}

// Called by one lane per role; `slot` is this role's index inside the CTA.
__device__ __forceinline__ void span_end(const SpanStart& s, SpanRecord* records, int slot) {
    const long long clk = clock64();
    const uint64_t ns = ptx::read_globaltimer();
    SpanRecord r;
    r.cycles = static_cast<unsigned long long>(clk - s.clk);
    r.ns = ns - s.ns;
    records[blockIdx.x * kMaxSlotsPerCta + slot] = r;
}

// ---- Host side ----------------------------------------------------------------------------
struct DeviceInfo {
    int sm_count = 0;
    int spec_clock_khz = 0;  // the attribute's clock (not what the SMs run at under load)
    std::string name;
};

// Empty when device 0 is a compute-capability-9.0 GPU; otherwise why the benchmarks can't run.
using hattn::host::hopper_unavailable_reason;

inline DeviceInfo query_device() {
    DeviceInfo info;
    HATTN_BENCH_CHECK(cudaDeviceGetAttribute(&info.sm_count, cudaDevAttrMultiProcessorCount, 0));
    // NOTE: CUDA 13 removed cudaDeviceProp::clockRate; the attribute still exists.
    HATTN_BENCH_CHECK(cudaDeviceGetAttribute(&info.spec_clock_khz, cudaDevAttrClockRate, 0));
    cudaDeviceProp prop{};
    HATTN_BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
    info.name = prop.name;
    return info;
}

// Timing slots for a grid of `ctas` CTAs, reset before every launch.
class DeviceSpans {
public:
    explicit DeviceSpans(int ctas) : ctas_(ctas), host_(size_t(ctas) * kMaxSlotsPerCta) {
        HATTN_BENCH_CHECK(cudaMalloc(&records_, bytes()));
    }
    ~DeviceSpans() { cudaFree(records_); }
    DeviceSpans(const DeviceSpans&) = delete;
    DeviceSpans& operator=(const DeviceSpans&) = delete;

    SpanRecord* data() { return records_; }
    void reset(cudaStream_t stream) { HATTN_BENCH_CHECK(cudaMemsetAsync(records_, 0, bytes(), stream)); }

    // Launch span in cycles (max over slots) and the measured clock in MHz (cycles / ns).
    void summarize(double* max_cycles, double* clock_mhz) {
        HATTN_BENCH_CHECK(cudaMemcpy(host_.data(), records_, bytes(), cudaMemcpyDeviceToHost));
        unsigned long long max_c = 0;
        double sum_c = 0, sum_ns = 0;
        for (const SpanRecord& r : host_) {
            if (r.cycles == 0) continue;  // slot unused by this kernel
            max_c = std::max(max_c, r.cycles);
            sum_c += double(r.cycles);
            sum_ns += double(r.ns);
        }
        *max_cycles = double(max_c);
        *clock_mhz = sum_ns > 0 ? 1e3 * sum_c / sum_ns : 0.0;
    }

private:
    size_t bytes() const { return host_.size() * sizeof(SpanRecord); }
    int ctas_;
    std::vector<SpanRecord> host_;
    SpanRecord* records_ = nullptr;
};

// What one benchmark measured, averaged over its timed iterations.
struct Measurement {
    double seconds = 0;     // event time of one launch
    double cycles = 0;      // SM cycles of one launch (max over roles)
    double clock_mhz = 0;   // SM clock measured inside the kernel
};

constexpr int kWarmupLaunches = 2;  // module load, first-touch, clocks ramping up

// Runs the benchmark loop: each iteration resets the timing slots, launches once between two
// events, and hands the event time to Google Benchmark (UseManualTime). `launch` enqueues one
// launch on the given stream and must not synchronize.
inline Measurement run_timed(benchmark::State& state, DeviceSpans& spans,
                             const std::function<void(cudaStream_t)>& launch) {
    cudaStream_t stream = nullptr;  // legacy default stream: memsets and launches in order
    cudaEvent_t start, stop;
    HATTN_BENCH_CHECK(cudaEventCreate(&start));
    HATTN_BENCH_CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < kWarmupLaunches; ++i) {
        launch(stream);
        HATTN_BENCH_CHECK(cudaGetLastError());
    }
    HATTN_BENCH_CHECK(cudaDeviceSynchronize());

    Measurement sum;
    int64_t n = 0;
    for (auto _ : state) {
        spans.reset(stream);
        HATTN_BENCH_CHECK(cudaEventRecord(start, stream));
        launch(stream);
        HATTN_BENCH_CHECK(cudaGetLastError());
        HATTN_BENCH_CHECK(cudaEventRecord(stop, stream));
        HATTN_BENCH_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        HATTN_BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
        state.SetIterationTime(ms * 1e-3);
        double cycles = 0, mhz = 0;
        spans.summarize(&cycles, &mhz);
        sum.seconds += ms * 1e-3;
        sum.cycles += cycles;
        sum.clock_mhz += mhz;
        ++n;
    }
    HATTN_BENCH_CHECK(cudaEventDestroy(start));
    HATTN_BENCH_CHECK(cudaEventDestroy(stop));
    if (n > 0) {
        sum.seconds /= double(n);
        sum.cycles /= double(n);
        sum.clock_mhz /= double(n);
    }
    return sum;
}

// The counters every microbenchmark reports, given `work` units per launch (exps, FLOPs or
// bytes) and the hardware peak in the same units per SM per clock (0: no peak to compare).
inline void report_rates(benchmark::State& state, const DeviceInfo& dev, const Measurement& m, double work,
                         double peak_per_clk_per_sm) {
    const double per_clk = m.cycles > 0 ? work / (double(dev.sm_count) * m.cycles) : 0.0;
    state.counters["per_SM_per_clk"] = per_clk;
    state.counters["clock_MHz"] = m.clock_mhz;
    state.counters["kernel_cycles"] = m.cycles;
    state.counters["kernel_ms"] = m.seconds * 1e3;
    state.counters["work_per_s"] = m.seconds > 0 ? work / m.seconds : 0.0;
    if (peak_per_clk_per_sm > 0) state.counters["pct_of_peak"] = 100.0 * per_clk / peak_per_clk_per_sm;
}

// main() of every microbenchmark: parse flags, skip cleanly without a Hopper GPU (CPU-only
// CI builds these binaries but cannot run them), then register and run.
inline int benchmark_main(int argc, char** argv, const std::function<void(const DeviceInfo&)>& register_all,
                          const std::function<void()>& after_run = nullptr) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    const std::string reason = hopper_unavailable_reason();
    if (!reason.empty()) {
        std::printf("skipped: %s\n", reason.c_str());
        return 0;
    }
    const DeviceInfo dev = query_device();
    std::printf("device: %s, %d SMs, attribute clock %.0f MHz\n", dev.name.c_str(), dev.sm_count,
                dev.spec_clock_khz / 1e3);
    register_all(dev);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    if (after_run) after_run();
    return 0;
}

// splitmix64's finalizer: a cheap, well-mixed hash for random-looking, non-zero fill values.
__host__ __device__ __forceinline__ uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

// Uniform in [-1, -1/8] U [1/8, 1]: random-looking and never (near) zero -- tensor cores and
// some units run faster on zeros, and the benchmarks must time real data.
__host__ __device__ __forceinline__ float hash_to_unit_nonzero(uint64_t h) {
    constexpr float kTwoPowMinus23 = 1.0f / 8388608.0f;
    constexpr float kMinMagnitude = 0.125f;
    const float u = float(h & 0x7FFFFF) * kTwoPowMinus23;              // [0, 1)
    const float mag = kMinMagnitude + (1.0f - kMinMagnitude) * u;     // [1/8, 1)
    return (h >> 63) ? -mag : mag;
}

}  // namespace hattn::bench
