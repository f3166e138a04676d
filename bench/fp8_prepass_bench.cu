// hattn/bench/fp8_prepass_bench.cu -- the FP8 pre-pass (hattn_fp8_prepass) against a device-to-device
// copy of the same bytes, in the same process.
//
// What it measures, per shape (tokens = batch x seqlen, heads = 2048 / d, MHA: Q, K and V alike):
//   copy/<shape>            cudaMemcpyAsync of (bytes read + bytes written by the pre-pass) / 2, so
//                           that it moves the same traffic; counter GBps = read + written bytes
//   prepass/<mode>/<shape>  hattn_fp8_prepass on bf16 Q, K, V; GBps counts 2 bytes read and 1
//                           written per element plus the descales (the rotary tables, read from L2
//                           by every head, are not counted); pct_of_copy = GBps / copy's GBps
//   modes: quant (plain block quantizer), hadamard, rope_half+hadamard, rope_interleaved+hadamard
// Shapes: 16k tokens (the attention grid's size; 288 MB of traffic) and 64k tokens (1.2 GB).
//
// NOTES:
//   * kCallsPerIteration calls are enqueued between the two events, so the host's validation and
//     launch overhead overlaps the GPU's work (the GPU time of a call is ~0.1 ms at 16k tokens).
//   * The working set is >= 5x the 50 MB L2: every call streams from HBM.
//   * Goal (issue 10): the pre-pass at >= 80% of the copy's GBps.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "hattn.h"
#include "micro_harness.cuh"
#include "testing/device_random.cuh"
#include "testing/fp8_reference.h"

namespace {

using namespace hattn;
using namespace hattn::bench;

constexpr int kModelWidth = 2048;  // heads x head_dim
constexpr int kCallsPerIteration = 10;
constexpr uint64_t kSeed = 0x5EED;

struct Shape {
    int batch, seqlen, head_dim;
    int heads() const { return kModelWidth / head_dim; }
    int64_t elements() const { return int64_t{batch} * seqlen * kModelWidth; }  // per tensor
    int64_t blocks() const { return int64_t{batch} * heads() * ((seqlen + HATTN_FP8_BLOCK_ROWS - 1) / HATTN_FP8_BLOCK_ROWS); }
    // Q, K and V: 2 bytes read and 1 written per element, one fp32 descale written per block.
    double traffic_bytes() const { return 3.0 * (3.0 * double(elements()) + 4.0 * double(blocks())); }
    std::string name() const {
        return "b" + std::to_string(batch) + "_s" + std::to_string(seqlen) + "_d" + std::to_string(head_dim);
    }
};

struct Mode {
    const char* name;
    hattn_rope rope;
    bool hadamard;
};

constexpr Mode kModes[] = {{"quant", HATTN_ROPE_NONE, false},
                           {"hadamard", HATTN_ROPE_NONE, true},
                           {"rope_half+hadamard", HATTN_ROPE_HALF, true},
                           {"rope_interleaved+hadamard", HATTN_ROPE_INTERLEAVED, true}};

// Device buffers for one shape: inputs, outputs, descales, tables.
struct Buffers {
    void* in[3] = {};
    void* out[3] = {};
    float* descale[3] = {};
    float* cos = nullptr;
    float* sin = nullptr;
    void* copy_src = nullptr;
    void* copy_dst = nullptr;
    double copy_bytes_per_s = 0;  // filled by copy/<shape>
};

void allocate(const Shape& s, Buffers& b) {
    for (int i = 0; i < 3; ++i) {
        HATTN_BENCH_CHECK(cudaMalloc(&b.in[i], size_t(s.elements()) * 2));
        HATTN_BENCH_CHECK(cudaMalloc(&b.out[i], size_t(s.elements())));
        HATTN_BENCH_CHECK(cudaMalloc(&b.descale[i], size_t(s.blocks()) * 4));
        HATTN_BENCH_CHECK(hattn::testing::fill_normal(b.in[i], size_t(s.elements()), HATTN_DTYPE_BF16, kSeed + i, 1.f, nullptr));
    }
    std::vector<float> cos, sin;
    hattn::testing::rope_tables(s.seqlen, s.head_dim, &cos, &sin);
    HATTN_BENCH_CHECK(cudaMalloc(&b.cos, cos.size() * 4));
    HATTN_BENCH_CHECK(cudaMalloc(&b.sin, sin.size() * 4));
    HATTN_BENCH_CHECK(cudaMemcpy(b.cos, cos.data(), cos.size() * 4, cudaMemcpyHostToDevice));
    HATTN_BENCH_CHECK(cudaMemcpy(b.sin, sin.data(), sin.size() * 4, cudaMemcpyHostToDevice));
    const size_t copy = size_t(s.traffic_bytes() / 2);
    HATTN_BENCH_CHECK(cudaMalloc(&b.copy_src, copy));
    HATTN_BENCH_CHECK(cudaMalloc(&b.copy_dst, copy));
    HATTN_BENCH_CHECK(cudaMemset(b.copy_src, 0x3C, copy));
    HATTN_BENCH_CHECK(cudaDeviceSynchronize());
}

void release(Buffers& b) {
    for (int i = 0; i < 3; ++i) {
        cudaFree(b.in[i]);
        cudaFree(b.out[i]);
        cudaFree(b.descale[i]);
    }
    cudaFree(b.cos);
    cudaFree(b.sin);
    cudaFree(b.copy_src);
    cudaFree(b.copy_dst);
}

hattn_fp8_prepass_params params_for(const Shape& s, const Buffers& b, const Mode& m) {
    hattn_fp8_prepass_params p = hattn_fp8_prepass_params_contiguous(
        b.in[0], b.in[1], b.in[2], b.out[0], b.out[1], b.out[2], b.descale[0], b.descale[1], b.descale[2], s.batch,
        s.heads(), s.heads(), s.seqlen, s.seqlen, s.head_dim, HATTN_DTYPE_BF16);
    p.rope = m.rope;
    p.rope_cos = b.cos;
    p.rope_sin = b.sin;
    p.rope_rows = s.seqlen;
    p.hadamard = m.hadamard ? 1 : 0;
    p.hadamard_seed = kSeed;
    return p;
}

std::vector<Shape> shapes() {
    std::vector<Shape> all;
    for (int d : {64, 128, 256}) all.push_back({1, 16384, d});
    for (int d : {64, 128, 256}) all.push_back({4, 16384, d});
    return all;
}

// `all` holds one set of buffers per shape (std::map: references stay valid as it grows).
void register_all(std::map<std::string, Buffers>& all) {
    for (const Shape& s : shapes()) {
        Buffers& b = all[s.name()];
        allocate(s, b);
        benchmark::RegisterBenchmark(("copy/" + s.name()).c_str(), [s, &b](benchmark::State& state) {
            DeviceSpans unused(1);
            const size_t copy = size_t(s.traffic_bytes() / 2);
            const Measurement m = run_timed(state, unused, [&](cudaStream_t stream) {
                for (int i = 0; i < kCallsPerIteration; ++i) {
                    HATTN_BENCH_CHECK(cudaMemcpyAsync(b.copy_dst, b.copy_src, copy, cudaMemcpyDeviceToDevice, stream));
                }
            });
            const double seconds = m.seconds / kCallsPerIteration;
            b.copy_bytes_per_s = 2.0 * double(copy) / seconds;
            state.counters["us_per_call"] = seconds * 1e6;
            state.counters["GBps"] = b.copy_bytes_per_s * 1e-9;
        })->UseManualTime()->Unit(benchmark::kMillisecond);
        for (const Mode& mode : kModes) {
            benchmark::RegisterBenchmark(
                ("prepass/" + std::string(mode.name) + "/" + s.name()).c_str(), [s, &b, mode](benchmark::State& state) {
                    const hattn_fp8_prepass_params p = params_for(s, b, mode);
                    char msg[512];
                    if (hattn_fp8_prepass_validate(&p, msg, sizeof msg) != HATTN_SUCCESS) {
                        state.SkipWithError(msg);
                        return;
                    }
                    DeviceSpans unused(1);
                    const Measurement m = run_timed(state, unused, [&](cudaStream_t stream) {
                        for (int i = 0; i < kCallsPerIteration; ++i) {
                            const hattn_status st = hattn_fp8_prepass(&p, stream);
                            if (st != HATTN_SUCCESS) {
                                std::fprintf(stderr, "hattn_fp8_prepass: %s\n", hattn_status_string(st));
                                std::exit(EXIT_FAILURE);
                            }
                        }
                    });
                    const double seconds = m.seconds / kCallsPerIteration;
                    const double bytes_per_s = s.traffic_bytes() / seconds;
                    state.counters["us_per_call"] = seconds * 1e6;
                    state.counters["GBps"] = bytes_per_s * 1e-9;
                    if (b.copy_bytes_per_s > 0) state.counters["pct_of_copy"] = 100.0 * bytes_per_s / b.copy_bytes_per_s;
                })
                ->UseManualTime()
                ->Unit(benchmark::kMillisecond);
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::map<std::string, Buffers> all;
    const int rc = benchmark_main(argc, argv, [&all](const DeviceInfo&) { register_all(all); });
    for (auto& [name, b] : all) release(b);
    return rc;
}
