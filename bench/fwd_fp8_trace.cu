// hattn/bench/fwd_fp8_trace.cu -- where the FP8 forward's steady-state step spends its time: the
// default d128 kernel, built in this file with clock stamps at seven points of every step
// (src/kernels/fwd_fp8.cuh's HATTN_FP8_TRACE_POINT), run on one shape; lane 0 of every consumer
// warp of the first trace::kCtas CTAs records its first tile's first trace::kSteps steps.
//
//   fwd_fp8_trace [--seqlen N] [--causal]      (head_dim 128, 16k tokens, 16 heads)
//
// Points of step `it`: 0 top, 1 K and V slots full, 2 P_{it-2} V_{it-2} done, 3 P_{it-1} in e4m3
// (O rescaled when due), 4 S_it and P_{it-1} V_{it-1} issued, 5 S_it done, 6 its softmax done.
// (No stamp between the two GEMMs' wgmmas: one there makes ptxas inject warpgroup.arrives.)
// Prints, averaged over the traced warps and steps kFirstStep..kSteps-2: each segment's cycles
// and the step's period per consumer; how much of one consumer's softmax overlaps the other's on
// the same SM sub-partition (warp w of each warpgroup shares scheduler w); the spread of a
// warpgroup's four warps after the issue; and the traced kernel's time beside the library's (the
// stamps' own cost: within 1% on an H200). Then each tile's phases (HATTN_FP8_TRACE_TILE, seven
// points of passes 0 .. kTilePasses - 1 of the walk; passes 1 .. kTilePasses - 2 averaged): the
// wait for the tile, Q and K and the first QK^T, the first softmax, the steady steps, the drain's
// P V, the epilogue, the gap to the next tile; without a mask, the tile's cost beyond its blocks
// at the steady state's rate (what a persistent walk pays per tile). Built with
// HATTN_FP8_VARIANTS (bench/CMakeLists.txt).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace trace {
constexpr int kCtas = 8;
constexpr int kConsumers = 2;
constexpr int kWarps = 4;
constexpr int kSteps = 64;
constexpr int kPoints = 7;
constexpr int kTilePasses = 8;  // tiles stamped per consumer warp (a CTA's first passes of its walk)
constexpr int kTilePoints = 7;
}  // namespace trace

__device__ long long hattn_fp8_trace_clock[trace::kCtas][trace::kConsumers][trace::kWarps][trace::kSteps][trace::kPoints];

#define HATTN_FP8_TRACE_POINT(consumer, warp, pass, step, point)                                               \
    do {                                                                                                       \
        if (blockIdx.x < trace::kCtas && (consumer) < trace::kConsumers && (pass) == 0 && (step) < trace::kSteps && \
            threadIdx.x % 32 == 0)                                                                             \
            hattn_fp8_trace_clock[blockIdx.x][consumer][warp][step][point] = clock64();                         \
    } while (0)

// Tile points of pass `pass`: 0 top of the pass, 1 the tile known (handed over by the producer), 2 the first QK^T done, 3 the
// first softmax done (P ready), 4 the steady steps done, 5 the drain's P V done, 6 O's store issued.
__device__ long long hattn_fp8_trace_tile[trace::kCtas][trace::kConsumers][trace::kWarps][trace::kTilePasses][trace::kTilePoints];

#define HATTN_FP8_TRACE_TILE(consumer, warp, pass, point)                                                      \
    do {                                                                                                       \
        if (blockIdx.x < trace::kCtas && (consumer) < trace::kConsumers && (pass) < trace::kTilePasses &&       \
            threadIdx.x % 32 == 0)                                                                             \
            hattn_fp8_trace_tile[blockIdx.x][consumer][warp][pass][point] = clock64();                          \
    } while (0)

#include "hattn.h"
#include "host/fwd_fp8_launch.h"
#include "kernels/fwd_fp8.cuh"
#include "testing/device_random.cuh"

namespace {

constexpr int kHeadDim = 128;
constexpr int kTokens = 16384;
constexpr int kWidth = 2048;
constexpr int kFirstStep = 8;  // the pipeline's start left out
constexpr int kTimedCalls = 10;
// Untimed calls first, as the A/B benches do: without them this program's figures read ~10% below
// bench/fwd_fp8_ab's on the same shape (an idle GPU's clocks ramping, presumably; not yet re-run).
constexpr int kWarmupCalls = 40;
constexpr uint64_t kSeed = 0x7ace;

#define TR_CHECK(x)                                                                                   \
    do {                                                                                              \
        cudaError_t e_ = (x);                                                                         \
        if (e_ != cudaSuccess) {                                                                      \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
            std::exit(1);                                                                             \
        }                                                                                             \
    } while (0)

// The library's default d128 kernel on V^T (the only one this program runs: its calls pass V^T).
cudaError_t traced_launch(const hattn::fwd_fp8::Fp8FwdArgs& args, cudaStream_t stream, std::string* error) {
    namespace f = hattn::fwd_fp8;
    using Cfg = f::Config<kHeadDim, hattn::sm90::Bf16, f::default_consumers(kHeadDim), f::default_block_n(kHeadDim),
                          f::default_stages(kHeadDim), f::DefaultTuning<kHeadDim>>;
    return f::launch_fwd_fp8<Cfg>(args, stream, error);
}

float median_ms(const hattn_fwd_fp8_params& p, bool traced) {
    cudaEvent_t a, b;
    TR_CHECK(cudaEventCreate(&a));
    TR_CHECK(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int i = 0; i < kWarmupCalls + kTimedCalls; ++i) {
        TR_CHECK(cudaEventRecord(a));
        const hattn_status st = traced ? hattn::host::fwd_fp8_with_launch(&p, nullptr, traced_launch) : hattn_fwd_fp8(&p, nullptr);
        if (st != HATTN_SUCCESS) {
            std::fprintf(stderr, "forward: %s\n", hattn_status_string(st));
            std::exit(1);
        }
        TR_CHECK(cudaEventRecord(b));
        TR_CHECK(cudaEventSynchronize(b));
        float t = 0.f;
        TR_CHECK(cudaEventElapsedTime(&t, a, b));
        if (i >= kWarmupCalls) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    int seqlen = 16384;
    bool causal = false;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--seqlen") && i + 1 < argc) seqlen = std::atoi(argv[++i]);
        else if (!std::strcmp(argv[i], "--causal")) causal = true;
        else {
            std::fprintf(stderr, "usage: %s [--seqlen N] [--causal]\n", argv[0]);
            return 2;
        }
    }
    const int b = std::max(1, kTokens / seqlen), h = kWidth / kHeadDim, s = seqlen, d = kHeadDim;
    const size_t elems = static_cast<size_t>(b) * s * h * d;
    const size_t blocks = static_cast<size_t>(b) * h * ((s + HATTN_FP8_BLOCK_ROWS - 1) / HATTN_FP8_BLOCK_ROWS);
    void *bf16, *fp8[3], *vt, *o;
    float* ds[3];
    TR_CHECK(cudaMalloc(&bf16, 3 * elems * 2));
    for (int t = 0; t < 3; ++t) {
        TR_CHECK(hattn::testing::fill_normal(static_cast<char*>(bf16) + t * elems * 2, elems, HATTN_DTYPE_BF16, kSeed + t, 1.f, nullptr));
        TR_CHECK(cudaMalloc(&fp8[t], elems));
        TR_CHECK(cudaMalloc(&ds[t], blocks * sizeof(float)));
    }
    const size_t vt_bytes = hattn_fwd_fp8_workspace_size(b, h, s, d);
    TR_CHECK(cudaMalloc(&vt, vt_bytes));
    TR_CHECK(cudaMalloc(&o, elems * 2));
    char* in = static_cast<char*>(bf16);
    hattn_fp8_prepass_params pp = hattn_fp8_prepass_params_contiguous(in, in + elems * 2, in + 2 * elems * 2, fp8[0], fp8[1], vt,
                                                                      ds[0], ds[1], ds[2], b, h, h, s, s, d, HATTN_DTYPE_BF16);
    pp.hadamard = 1;
    pp.flags = HATTN_FP8_PREPASS_V_TRANSPOSED;
    if (hattn_fp8_prepass(&pp, nullptr) != HATTN_SUCCESS) {
        std::fprintf(stderr, "pre-pass failed\n");
        return 1;
    }
    hattn_fwd_fp8_params p = hattn_fwd_fp8_params_contiguous(fp8[0], fp8[1], vt, o, ds[0], ds[1], ds[2], b, h, h, s, s, d,
                                                             HATTN_DTYPE_BF16);
    p.causal = causal ? 1 : 0;
    p.flags = HATTN_FWD_FP8_V_TRANSPOSED;

    const float lib_ms = median_ms(p, false);
    const float traced_ms = median_ms(p, true);
    const double flops = 4.0 * b * h * static_cast<double>(s) * s * d * (causal ? 0.5 : 1.0);
    std::printf("d%d s%d b%d h%d %s: library %.3f ms (%.0f TFLOPS), traced %.3f ms (%.0f TFLOPS)\n", d, s, b, h,
                causal ? "causal" : "full", lib_ms, flops / lib_ms * 1e-9, traced_ms, flops / traced_ms * 1e-9);

    using Clocks = long long[trace::kCtas][trace::kConsumers][trace::kWarps][trace::kSteps][trace::kPoints];
    std::vector<long long> host(sizeof(Clocks) / sizeof(long long));
    TR_CHECK(cudaMemcpyFromSymbol(host.data(), hattn_fp8_trace_clock, sizeof(Clocks)));
    const auto& c = *reinterpret_cast<const Clocks*>(host.data());
    const int last = std::min(trace::kSteps - 1, s / 128 - 1);  // steps with a next step traced
    const char* seg[] = {"K/V waits", "PV(it-2) wait", "rescale+P", "issue", "S wait", "softmax", "to next top"};
    for (int cw = 0; cw < trace::kConsumers; ++cw) {
        double sum[trace::kPoints] = {}, period = 0;
        int n = 0;
        for (int cta = 0; cta < trace::kCtas; ++cta)
            for (int w = 0; w < trace::kWarps; ++w)
                for (int it = kFirstStep; it < last; ++it) {
                    const long long* q = c[cta][cw][w][it];
                    for (int k = 0; k + 1 < trace::kPoints; ++k) sum[k] += q[k + 1] - q[k];
                    sum[trace::kPoints - 1] += c[cta][cw][w][it + 1][0] - q[trace::kPoints - 1];
                    period += c[cta][cw][w][it + 1][0] - q[0];
                    ++n;
                }
        std::printf("consumer %d: step %.0f cycles =", cw, period / n);
        for (int k = 0; k < trace::kPoints; ++k) std::printf(" %s %.0f%s", seg[k], sum[k] / n, k + 1 < trace::kPoints ? " +" : "\n");
    }
    // Softmax overlap between the two consumers' warps on one scheduler, and the issue spread.
    double both = 0, soft0 = 0, spread = 0, offset = 0;
    int spreads = 0, offsets = 0;
    for (int cta = 0; cta < trace::kCtas; ++cta) {
        for (int w = 0; w < trace::kWarps; ++w)
            for (int i = kFirstStep; i < last; ++i) {
                const long long a0 = c[cta][0][w][i][5], a1 = c[cta][0][w][i][6];
                soft0 += a1 - a0;
                for (int j = kFirstStep - 2; j < last + 1; ++j) {
                    const long long b0 = c[cta][1][w][j][5], b1 = c[cta][1][w][j][6];
                    both += std::max(0LL, std::min(a1, b1) - std::max(a0, b0));
                }
                // Where consumer 1's step starts inside consumer 0's (0..1 of its period).
                const long long t0 = c[cta][0][w][i][0], t1 = c[cta][0][w][i + 1][0];
                for (int j = kFirstStep - 2; j < last + 1; ++j) {
                    const long long u = c[cta][1][w][j][0];
                    if (u >= t0 && u < t1) {
                        offset += static_cast<double>(u - t0) / (t1 - t0);
                        ++offsets;
                    }
                }
            }
        for (int cw = 0; cw < trace::kConsumers; ++cw)
            for (int i = kFirstStep; i < last; ++i) {
                long long lo = c[cta][cw][0][i][4], hi = lo;
                for (int w = 1; w < trace::kWarps; ++w) {
                    lo = std::min(lo, c[cta][cw][w][i][4]);
                    hi = std::max(hi, c[cta][cw][w][i][4]);
                }
                spread += hi - lo;
                ++spreads;
            }
    }
    std::printf("consumer 0's softmax overlapped by consumer 1's on the same scheduler: %.0f%%\n", 100.0 * both / soft0);
    std::printf("consumer 1's step starts at %.2f of consumer 0's (mean phase)\n", offsets ? offset / offsets : -1.0);
    std::printf("spread of a warpgroup's four warps after the issue: %.0f cycles\n", spread / spreads);

    // Each tile's phases on the persistent walk (passes 1 .. kTilePasses - 2 of each traced CTA),
    // and, without a mask, what a tile costs beyond its blocks at the steady state's rate.
    using TileClocks = long long[trace::kCtas][trace::kConsumers][trace::kWarps][trace::kTilePasses][trace::kTilePoints];
    std::vector<long long> tile_host(sizeof(TileClocks) / sizeof(long long));
    TR_CHECK(cudaMemcpyFromSymbol(tile_host.data(), hattn_fp8_trace_tile, sizeof(TileClocks)));
    const auto& tc = *reinterpret_cast<const TileClocks*>(tile_host.data());
    const char* phase[] = {"tile known", "Q, K, first QK^T", "first softmax", "steady steps", "drain P V",
                           "epilogue", "to next tile"};
    constexpr int kBlockN = hattn::fwd_fp8::default_block_n(kHeadDim);
    const int n_blocks = (s + kBlockN - 1) / kBlockN;
    for (int cw = 0; cw < trace::kConsumers; ++cw) {
        double sum[trace::kTilePoints] = {}, period = 0;
        int n = 0;
        for (int cta = 0; cta < trace::kCtas; ++cta)
            for (int w = 0; w < trace::kWarps; ++w)
                for (int pass = 1; pass + 1 < trace::kTilePasses; ++pass) {
                    const long long* q = tc[cta][cw][w][pass];
                    const long long next = tc[cta][cw][w][pass + 1][0];
                    bool complete = next > q[trace::kTilePoints - 1];
                    for (int k = 0; k + 1 < trace::kTilePoints; ++k) complete = complete && q[k + 1] >= q[k] && q[k] > 0;
                    if (!complete) continue;  // a walk shorter than the traced passes
                    for (int k = 0; k + 1 < trace::kTilePoints; ++k) sum[k] += q[k + 1] - q[k];
                    sum[trace::kTilePoints - 1] += next - q[trace::kTilePoints - 1];
                    period += next - q[0];
                    ++n;
                }
        if (n == 0) {
            std::printf("consumer %d: no complete tile traced\n", cw);
            continue;
        }
        std::printf("consumer %d: tile %.0f cycles over %d tiles =", cw, period / n, n);
        for (int k = 0; k < trace::kTilePoints; ++k)
            std::printf(" %s %.0f%s", phase[k], sum[k] / n, k + 1 < trace::kTilePoints ? " +" : "\n");
        if (!causal && n_blocks > 1) {
            const double per_block = sum[3] / n / (n_blocks - 1);
            std::printf("consumer %d: %d blocks a tile, %.0f cycles a steady block; the tile beyond n x that: %.0f "
                        "cycles (%.1f blocks)\n",
                        cw, n_blocks, per_block, period / n - n_blocks * per_block,
                        (period / n - n_blocks * per_block) / per_block);
        }
    }
    // One CTA's raw stamps of warp 0, relative to consumer 0's first traced top, for a look by eye.
    const long long base = c[0][0][0][kFirstStep][0];
    std::printf("CTA 0 warp 0, steps %d..%d (cycles from consumer 0's step %d top; points 0..6):\n", kFirstStep,
                kFirstStep + 5, kFirstStep);
    for (int it = kFirstStep; it < kFirstStep + 6 && it < last; ++it)
        for (int cw = 0; cw < trace::kConsumers; ++cw) {
            std::printf("  step %2d consumer %d:", it, cw);
            for (int k = 0; k < trace::kPoints; ++k) std::printf(" %7lld", c[0][cw][0][it][k] - base);
            std::printf("\n");
        }
    return 0;
}
