// hattn/bench/mufu_bench.cu -- exponential throughput: the MUFU (SFU) and the FMA pipe.
//
// What it measures (elements of 2^x per second and per SM per clock, clock measured in-kernel):
//   mufu/ex2.approx.ftz.f32      one MUFU.EX2 per element
//   mufu/ex2.approx.f16x2        two elements per instruction
//   mufu/ex2.approx.ftz.bf16x2   two elements per instruction
//   fma/exp2_poly5_f32           2^x on the FMA pipe only (kernels/sm90/exp2_poly.cuh, degree 5), plus its max
//                                relative error against double exp2 over [-125, 127] (counter
//                                poly_max_rel_err; ex2.approx.ftz.f32's beside it for scale)
//   mixed/poly_K_of_8            K of every 8 elements on the FMA pipe, the rest on MUFU
//   cvt/e4m3x2.f32, cvt/bf16x2.f32   the softmax's packing conversion alone (cvt per SM per clock;
//                                two FFMAs feed each), and beside MUFU as in a softmax:
//   mixed/ex2_cvt_e4m3x2, mixed/ex2_cvt_bf16x2   8 ex2 chains, each pair of results packed (4 cvts
//                                per 8 ex2): ex2 per SM per clock stays 16 if the conversion has a
//                                pipe of its own, and falls to 16 * 8 / (8 + 4c) if it shares
//                                MUFU's (c = MUFU slots per conversion)
//
// Hardware expectation (H100/H200, sm_90): MUFU retires 16 ex2 per SM per clock. f32 should
// read ~15.9 /SM/clk (4.17 T/s at 1.98 GHz on 132 SMs). The packed f16x2/bf16x2 forms issue
// half the instructions but each is two MUFU operations on sm_90: expect the SAME element rate,
// not 2x. The polynomial costs ~13 issue slots per element (12 + the chain's sign flip), so
// alone it reaches ~128/13 ~ 10 /SM/clk; mixing 2-3 of 8 elements onto it should give
// ~20-21 /SM/clk, i.e. above MUFU alone (where MUFU and issue bandwidth both saturate).
//
// NOTES:
//  - Each thread runs kChains independent chains x <- -2^x (the sign flip is an XOR with a
//    runtime mask, one LOP3, so the compiler can neither fold it into the MUFU operand nor
//    drop the chain). x <- -2^x converges to x ~ -0.64, a normal, non-zero value.
//  - 512 threads x (up to) 4 blocks per SM = 64 warps per SM: enough warps and independent
//    chains to hide MUFU latency. The grid is exactly one wave (occupancy x SMs).
//  - The result is written only when it equals a runtime value it never takes, so the work
//    cannot be eliminated and no memory traffic is timed.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/sm90/exp2_poly.cuh"
#include "micro_harness.cuh"
#include "ptx/convert.cuh"
#include "ptx/mufu.cuh"

namespace {

using namespace hattn;
using namespace hattn::bench;

constexpr int kThreads = 512;
constexpr int kBlocksPerSm = 4;                 // 2048 threads: the SM's maximum
constexpr int kChains = 8;                      // independent dependency chains per thread
constexpr int kElementsPerThread = 32768;       // ~2 ms per launch at 16 /SM/clk on 132 SMs
constexpr uint32_t kSignMaskF32 = 0x80000000u;
constexpr uint32_t kSignMaskX2 = 0x80008000u;   // both halves of a packed pair
constexpr float kNeverValue = 1234567.0f;       // chains converge near -0.64, never here
constexpr uint64_t kSeed = 0x6d75667562656e63ull;

enum class ExpKind { kF32, kF16x2, kBf16x2 };

// Elements per chain step: packed forms compute two.
template <ExpKind kKind>
constexpr int elements_per_step() {
    return kKind == ExpKind::kF32 ? 1 : 2;
}

// One step of a chain: x <- -2^x, on MUFU (chain index >= kPolyChains) or the FMA pipe.
// on_fma_pipe is a compile-time constant after the chain loop is unrolled.
template <ExpKind kKind>
__device__ __forceinline__ uint32_t chain_step(uint32_t x, uint32_t sign_mask, bool on_fma_pipe) {
    if constexpr (kKind == ExpKind::kF32) {
        const float y = on_fma_pipe ? sm90::exp2_poly_clamped<5>(__uint_as_float(x)) : ptx::ex2_approx_f32(__uint_as_float(x));
        return __float_as_uint(y) ^ sign_mask;
    } else if constexpr (kKind == ExpKind::kF16x2) {
        return ptx::ex2_approx_f16x2(x) ^ sign_mask;
    } else {
        return ptx::ex2_approx_ftz_bf16x2(x) ^ sign_mask;
    }
}

template <ExpKind kKind>
__device__ __forceinline__ uint32_t initial_value(uint64_t h) {
    const float a = hash_to_unit_nonzero(h);
    const float b = hash_to_unit_nonzero(mix64(h));
    if constexpr (kKind == ExpKind::kF32) return __float_as_uint(a);
    else if constexpr (kKind == ExpKind::kF16x2) return ptx::cvt_rn_f16x2_f32(a, b);
    else return ptx::cvt_rn_bf16x2_f32(a, b);
}

// kPolyChains of the kChains chains run on the FMA pipe (f32 only), the rest on MUFU.
template <ExpKind kKind, int kPolyChains>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    exp_throughput_kernel(int iterations, uint32_t sign_mask, float never_value, uint64_t seed, float* sink,
                          SpanRecord* spans) {
    static_assert(kKind == ExpKind::kF32 || kPolyChains == 0, "the FMA-pipe exp2 is f32 only");
    const SpanStart t0 = span_begin();
    const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;

    uint32_t x[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c) x[c] = initial_value<kKind>(mix64(seed ^ (uint64_t(tid) * kChains + c)));

#pragma unroll 2
    for (int it = 0; it < iterations; ++it) {
#pragma unroll
        for (int c = 0; c < kChains; ++c) x[c] = chain_step<kKind>(x[c], sign_mask, c < kPolyChains);
    }

    uint32_t folded = 0;
#pragma unroll
    for (int c = 0; c < kChains; ++c) folded += x[c];
    if (__uint_as_float(folded) == never_value) sink[tid] = __uint_as_float(folded);

    if (threadIdx.x % kWarpgroupThreads == 0) span_end(t0, spans, threadIdx.x / kWarpgroupThreads);
}

// ---- The packing conversion, alone and beside MUFU ------------------------------------------
enum class CvtKind { kE4m3x2, kBf16x2 };

template <CvtKind kKind>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
    if constexpr (kKind == CvtKind::kE4m3x2) return ptx::cvt_rn_satfinite_e4m3x2_f32(lo, hi);
    else return ptx::cvt_rn_bf16x2_f32(lo, hi);
}

// kWithExp false: x <- a * x + b (one FFMA per element; a, b at run time, |a| < 1 so x stays
// bounded), each pair of x packed and folded into an XOR accumulator. true: x <- -2^x on MUFU
// (as in exp_throughput_kernel), each pair of results packed the same way.
template <CvtKind kKind, bool kWithExp>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    convert_throughput_kernel(int iterations, float a, float b, uint32_t sign_mask, uint32_t never_value,
                              uint64_t seed, uint32_t* sink, SpanRecord* spans) {
    const SpanStart t0 = span_begin();
    const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
    float x[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c)
        x[c] = __uint_as_float(initial_value<ExpKind::kF32>(mix64(seed ^ (uint64_t(tid) * kChains + c))));
    uint32_t folded[kChains / 2] = {};

#pragma unroll 2
    for (int it = 0; it < iterations; ++it) {
#pragma unroll
        for (int c = 0; c < kChains; ++c) {
            if constexpr (kWithExp) x[c] = __uint_as_float(chain_step<ExpKind::kF32>(__float_as_uint(x[c]), sign_mask, false));
            else x[c] = fmaf(a, x[c], b);
        }
#pragma unroll
        for (int c = 0; c < kChains; c += 2) folded[c / 2] ^= pack_pair<kKind>(x[c], x[c + 1]);
    }

    uint32_t all = 0;
#pragma unroll
    for (int c = 0; c < kChains / 2; ++c) all += folded[c] + __float_as_uint(x[2 * c]);
    if (all == never_value) sink[tid] = all;
    if (threadIdx.x % kWarpgroupThreads == 0) span_end(t0, spans, threadIdx.x / kWarpgroupThreads);
}

// ---- Accuracy of the FMA-pipe exp2 (and of MUFU's, for scale) ---------------------------------
constexpr int kAccuracySamples = 1 << 20;
constexpr int kAccuracyThreads = 256;
constexpr double kAccuracyLo = -125.0;  // exp2_poly is accurate on [-125, 128); below, results are not normal floats
constexpr double kAccuracyHi = 127.0;

__global__ void exp2_accuracy_kernel(const float* x, float* poly, float* mufu, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        poly[i] = sm90::exp2_poly_clamped<5>(x[i]);
        mufu[i] = ptx::ex2_approx_f32(x[i]);
    }
}

struct Exp2Accuracy {
    double poly_max_rel_err = 0;
    double mufu_max_rel_err = 0;
    double poly_worst_x = 0;
};

Exp2Accuracy measure_exp2_accuracy() {
    // A dense sweep of the whole range, each point jittered so every fraction f is exercised.
    std::mt19937_64 rng(kSeed);
    std::uniform_real_distribution<double> jitter(0.0, 1.0);
    std::vector<float> x(kAccuracySamples);
    const double step = (kAccuracyHi - kAccuracyLo) / kAccuracySamples;
    for (int i = 0; i < kAccuracySamples; ++i) x[i] = float(kAccuracyLo + (i + jitter(rng)) * step);
    x[0] = float(kAccuracyLo);
    x[kAccuracySamples - 1] = float(kAccuracyHi);

    float *d_x, *d_poly, *d_mufu;
    const size_t bytes = x.size() * sizeof(float);
    HATTN_BENCH_CHECK(cudaMalloc(&d_x, bytes));
    HATTN_BENCH_CHECK(cudaMalloc(&d_poly, bytes));
    HATTN_BENCH_CHECK(cudaMalloc(&d_mufu, bytes));
    HATTN_BENCH_CHECK(cudaMemcpy(d_x, x.data(), bytes, cudaMemcpyHostToDevice));
    HATTN_BENCH_CHECK(cudaMemset(d_poly, 0xFF, bytes));  // poison: NaN if a thread never writes
    HATTN_BENCH_CHECK(cudaMemset(d_mufu, 0xFF, bytes));
    exp2_accuracy_kernel<<<(kAccuracySamples + kAccuracyThreads - 1) / kAccuracyThreads, kAccuracyThreads>>>(
        d_x, d_poly, d_mufu, kAccuracySamples);
    HATTN_BENCH_CHECK(cudaGetLastError());
    std::vector<float> poly(x.size()), mufu(x.size());
    HATTN_BENCH_CHECK(cudaMemcpy(poly.data(), d_poly, bytes, cudaMemcpyDeviceToHost));
    HATTN_BENCH_CHECK(cudaMemcpy(mufu.data(), d_mufu, bytes, cudaMemcpyDeviceToHost));
    HATTN_BENCH_CHECK(cudaFree(d_x));
    HATTN_BENCH_CHECK(cudaFree(d_poly));
    HATTN_BENCH_CHECK(cudaFree(d_mufu));

    Exp2Accuracy acc;
    for (int i = 0; i < kAccuracySamples; ++i) {
        const double ref = std::exp2(double(x[i]));
        const double ep = std::fabs(double(poly[i]) - ref) / ref;
        const double em = std::fabs(double(mufu[i]) - ref) / ref;
        // NaN compares false: make a NaN (unwritten / broken) result the worst error.
        if (!(ep <= acc.poly_max_rel_err)) {
            acc.poly_max_rel_err = std::isnan(ep) ? INFINITY : ep;
            acc.poly_worst_x = x[i];
        }
        if (!(em <= acc.mufu_max_rel_err)) acc.mufu_max_rel_err = std::isnan(em) ? INFINITY : em;
    }
    return acc;
}

// ---- Registration -------------------------------------------------------------------------
template <ExpKind kKind, int kPolyChains>
void register_case(const std::string& name, const DeviceInfo& dev, const Exp2Accuracy& accuracy) {
    benchmark::RegisterBenchmark(name.c_str(), [dev, accuracy](benchmark::State& state) {
        auto kernel = exp_throughput_kernel<kKind, kPolyChains>;
        int blocks_per_sm = 0;
        HATTN_BENCH_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, kThreads, 0));
        const int grid = blocks_per_sm * dev.sm_count;  // one wave
        constexpr int kElementsPerIteration = kChains * elements_per_step<kKind>();
        const int iterations = kElementsPerThread / kElementsPerIteration;
        const uint32_t mask = kKind == ExpKind::kF32 ? kSignMaskF32 : kSignMaskX2;

        float* sink = nullptr;
        HATTN_BENCH_CHECK(cudaMalloc(&sink, size_t(grid) * kThreads * sizeof(float)));
        DeviceSpans spans(grid);
        const Measurement m = run_timed(state, spans, [&](cudaStream_t stream) {
            kernel<<<grid, kThreads, 0, stream>>>(iterations, mask, kNeverValue, kSeed, sink, spans.data());
        });
        HATTN_BENCH_CHECK(cudaFree(sink));

        const double elements = double(grid) * kThreads * iterations * kElementsPerIteration;
        report_rates(state, dev, m, elements, kMufuEx2PerClkPerSm);
        state.counters["elements_per_s"] = state.counters["work_per_s"];
        state.counters["blocks_per_SM"] = blocks_per_sm;
        state.counters["fma_pipe_fraction"] = double(kPolyChains) / kChains;
        if (kPolyChains > 0) {
            state.counters["poly_max_rel_err"] = accuracy.poly_max_rel_err;
            state.counters["mufu_max_rel_err"] = accuracy.mufu_max_rel_err;
        }
    })->UseManualTime()->Unit(benchmark::kMillisecond);
}

template <CvtKind kKind, bool kWithExp>
void register_convert_case(const std::string& name, const DeviceInfo& dev) {
    benchmark::RegisterBenchmark(name.c_str(), [dev](benchmark::State& state) {
        auto kernel = convert_throughput_kernel<kKind, kWithExp>;
        int blocks_per_sm = 0;
        HATTN_BENCH_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, kThreads, 0));
        const int grid = blocks_per_sm * dev.sm_count;  // one wave
        const int iterations = kElementsPerThread / kChains;
        constexpr float kContraction = -0.5f;  // x <- -x / 2 + b converges to 2b / 3
        constexpr float kOffset = 0.75f;
        constexpr uint32_t kNeverBits = 0xFFFFFFFFu;  // a sum of packed bytes and floats near 0.5 .. 1

        uint32_t* sink = nullptr;
        HATTN_BENCH_CHECK(cudaMalloc(&sink, size_t(grid) * kThreads * sizeof(uint32_t)));
        DeviceSpans spans(grid);
        const Measurement m = run_timed(state, spans, [&](cudaStream_t stream) {
            kernel<<<grid, kThreads, 0, stream>>>(iterations, kContraction, kOffset, kSignMaskF32, kNeverBits, kSeed,
                                                   sink, spans.data());
        });
        HATTN_BENCH_CHECK(cudaFree(sink));

        const double elements = double(grid) * kThreads * iterations * kChains;
        const double conversions = elements / 2;
        // With exps the rate is of ex2 (against MUFU's 16); alone, of conversions (no documented peak).
        report_rates(state, dev, m, kWithExp ? elements : conversions, kWithExp ? kMufuEx2PerClkPerSm : 0.0);
        state.counters["cvt_per_SM_per_clk"] = m.cycles > 0 ? conversions / (double(dev.sm_count) * m.cycles) : 0.0;
        state.counters["blocks_per_SM"] = blocks_per_sm;
    })->UseManualTime()->Unit(benchmark::kMillisecond);
}

void register_all(const DeviceInfo& dev, const Exp2Accuracy& accuracy) {
    register_case<ExpKind::kF32, 0>("mufu/ex2.approx.ftz.f32", dev, accuracy);
    register_case<ExpKind::kF16x2, 0>("mufu/ex2.approx.f16x2", dev, accuracy);
    register_case<ExpKind::kBf16x2, 0>("mufu/ex2.approx.ftz.bf16x2", dev, accuracy);
    register_case<ExpKind::kF32, kChains>("fma/exp2_poly5_f32", dev, accuracy);
    register_case<ExpKind::kF32, 2>("mixed/poly_2_of_8", dev, accuracy);
    register_case<ExpKind::kF32, 3>("mixed/poly_3_of_8", dev, accuracy);
    register_convert_case<CvtKind::kE4m3x2, false>("cvt/e4m3x2.f32", dev);
    register_convert_case<CvtKind::kBf16x2, false>("cvt/bf16x2.f32", dev);
    register_convert_case<CvtKind::kE4m3x2, true>("mixed/ex2_cvt_e4m3x2", dev);
    register_convert_case<CvtKind::kBf16x2, true>("mixed/ex2_cvt_bf16x2", dev);
}

}  // namespace

int main(int argc, char** argv) {
    Exp2Accuracy accuracy;
    return benchmark_main(
        argc, argv,
        [&](const DeviceInfo& dev) {
            accuracy = measure_exp2_accuracy();
            register_all(dev, accuracy);
        },
        [&] {
            std::printf("exp2 accuracy over [%.0f, %.0f] vs double exp2: FMA-pipe poly5 max rel err %.3g (at x = %.6g), "
                        "ex2.approx.ftz.f32 max rel err %.3g\n",
                        kAccuracyLo, kAccuracyHi, accuracy.poly_max_rel_err, accuracy.poly_worst_x,
                        accuracy.mufu_max_rel_err);
        });
}
