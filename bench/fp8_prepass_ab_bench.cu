// hattn/bench/fp8_prepass_ab_bench.cu -- the FP8 pre-pass's kernel layouts side by side, against a
// device-to-device copy of the same bytes, in one process.
//
//   fp8_prepass_ab_bench [rounds]
//
// Per head dim (64, 128, 256) and token count (16k and 64k tokens, heads = 2048 / d, MHA, bf16):
// the copy and every (mode, variant) pair run once per round, interleaved, and each keeps its best
// round (the rounds share the GPU's clock and temperature drift; the best is the least disturbed).
//   copy      cudaMemcpyAsync of half the pre-pass's traffic; GB/s counts read + written bytes
//   modes     quant, hadamard, rope_half+hadamard, rope_interleaved+hadamard, and quant and
//             rope_half+hadamard writing V as V^T for the FP8 forward (+vt)
//   variants  <chunks>x<blocks per CTA> (kernels/fp8_prepass.cuh: Layout, kStagedBlocks): 2x1,
//             4x1, 8x1 (round 2's layout), 2x4, 4x4, 8x4, 16x1 (the tensor-core Hadamard,
//             kFp8MmaChunks: Q and K with the Hadamard, RoPE or not), 16x1x2 (the same with each block
//             split over a cluster of two thread blocks, built at d 256), 16x1x1x1 and 16x1x2x1 (the
//             same two with V's launch overlapped with Q's and K's: Fp8PrepassVariant::v_overlap); a
//             variant that is not built (it would spill at d 256) runs its fallback (fp8_variant_run),
//             marked "*".
// GB/s of the pre-pass counts 2 bytes read and 1 written per element plus the descales (the rotary
// tables, read from L2 by every head, are not counted), as bench/fp8_prepass_bench.cu does.
// Prints one table per shape, then a last table of the percentages of the copy (the summary).
//
// NOTES:
//   * kCalls calls are enqueued between two events (host validation and launch overlap the GPU).
//   * The working set (>= 288 MB) is several times the 50 MB L2: every call streams from HBM.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hattn.h"
#include "host/fp8_prepass_launch.h"
#include "micro_harness.cuh"  // HATTN_BENCH_CHECK
#include "testing/device_random.cuh"
#include "testing/fp8_reference.h"

namespace {

using hattn::fp8::Fp8PrepassVariant;
using hattn::fp8::Rope;

constexpr int kModelWidth = 2048;  // heads x head_dim
constexpr int kCalls = 10;
constexpr int kDefaultRounds = 8;
constexpr uint64_t kSeed = 0x5EED;
constexpr int kHeadDims[] = {64, 128, 256};
constexpr int kBatches[] = {1, 4};  // x 16384 rows: 16k and 64k tokens
constexpr int kSeqlen = 16384;

struct Mode {
    const char* name;
    hattn_rope rope;
    bool hadamard;
    bool vt = false;  // V written as V^T for the FP8 forward (HATTN_FP8_PREPASS_V_TRANSPOSED)
};
constexpr Mode kModes[] = {{"quant", HATTN_ROPE_NONE, false},
                           {"hadamard", HATTN_ROPE_NONE, true},
                           {"rope_half+hadamard", HATTN_ROPE_HALF, true},
                           {"rope_interleaved+hadamard", HATTN_ROPE_INTERLEAVED, true},
                           {"quant+vt", HATTN_ROPE_NONE, false, true},
                           {"rope_half+hadamard+vt", HATTN_ROPE_HALF, true, true}};
constexpr int kNumModes = sizeof(kModes) / sizeof(kModes[0]);
constexpr Fp8PrepassVariant kVariants[] = {{2, 1},
                                           {4, 1},
                                           {8, 1},
                                           {2, 4},
                                           {4, 4},
                                           {8, 4},
                                           {hattn::fp8::kFp8MmaChunks, 1, 1},  // one thread block per block
                                           {hattn::fp8::kFp8MmaChunks, 1, hattn::fp8::kFp8MmaPairCtas},
                                           // V's launch overlapped with the Q / K launch (v_overlap)
                                           {hattn::fp8::kFp8MmaChunks, 1, 1, 1},
                                           {hattn::fp8::kFp8MmaChunks, 1, hattn::fp8::kFp8MmaPairCtas, 1}};
constexpr int kNumVariants = sizeof(kVariants) / sizeof(kVariants[0]);

Rope rope_of(hattn_rope r) {
    return r == HATTN_ROPE_NONE ? Rope::kNone : r == HATTN_ROPE_HALF ? Rope::kHalf : Rope::kInterleaved;
}

// "*": not built, the fallback ran (fp8_variant_run).
const char* variant_mark(int d, const Mode& m, const Fp8PrepassVariant& v) {
    const Fp8PrepassVariant run =
        hattn::fp8::fp8_variant_run(d, v.chunks, v.blocks_per_cta, rope_of(m.rope), m.hadamard, v.ctas_per_block);
    const auto ctas = [](int n) { return n > 1 ? n : 1; };  // 0 and 1 both name one thread block
    const bool same = run.chunks == v.chunks && run.blocks_per_cta == v.blocks_per_cta &&
                      ctas(run.ctas_per_block) == ctas(v.ctas_per_block);
    return same ? "" : "*";
}

// "<chunks>x<blocks per CTA>[x<CTAs per block>[x1]]", as HATTN_FP8_PREPASS_VARIANT spells it (x1:
// V's launch overlapped, Fp8PrepassVariant::v_overlap).
std::string variant_name(const Fp8PrepassVariant& v) {
    std::string name = std::to_string(v.chunks) + "x" + std::to_string(v.blocks_per_cta);
    if (v.ctas_per_block > 1 || v.v_overlap != 0) name += "x" + std::to_string(v.ctas_per_block);
    if (v.v_overlap != 0) name += "x1";
    return name;
}

struct Shape {
    int batch, head_dim;
    int heads() const { return kModelWidth / head_dim; }
    int64_t elements() const { return int64_t{batch} * kSeqlen * kModelWidth; }  // per tensor
    int64_t blocks() const { return int64_t{batch} * heads() * ((kSeqlen + HATTN_FP8_BLOCK_ROWS - 1) / HATTN_FP8_BLOCK_ROWS); }
    // Q, K and V: 2 bytes read and 1 written per element, one fp32 descale written per block.
    double traffic_bytes() const { return 3.0 * (3.0 * double(elements()) + 4.0 * double(blocks())); }
};

struct Buffers {
    void* in[3] = {};
    void* out[3] = {};
    float* descale[3] = {};
    float* cos = nullptr;
    float* sin = nullptr;
    void* copy_src = nullptr;
    void* copy_dst = nullptr;
    size_t copy_bytes = 0;
};

void allocate(const Shape& s, Buffers& b) {
    for (int i = 0; i < 3; ++i) {
        HATTN_BENCH_CHECK(cudaMalloc(&b.in[i], size_t(s.elements()) * 2));
        HATTN_BENCH_CHECK(cudaMalloc(&b.out[i], size_t(s.elements())));
        HATTN_BENCH_CHECK(cudaMalloc(&b.descale[i], size_t(s.blocks()) * 4));
        HATTN_BENCH_CHECK(
            hattn::testing::fill_normal(b.in[i], size_t(s.elements()), HATTN_DTYPE_BF16, kSeed + i, 1.f, nullptr));
    }
    std::vector<float> cos, sin;
    hattn::testing::rope_tables(kSeqlen, s.head_dim, &cos, &sin);
    HATTN_BENCH_CHECK(cudaMalloc(&b.cos, cos.size() * 4));
    HATTN_BENCH_CHECK(cudaMalloc(&b.sin, sin.size() * 4));
    HATTN_BENCH_CHECK(cudaMemcpy(b.cos, cos.data(), cos.size() * 4, cudaMemcpyHostToDevice));
    HATTN_BENCH_CHECK(cudaMemcpy(b.sin, sin.data(), sin.size() * 4, cudaMemcpyHostToDevice));
    b.copy_bytes = size_t(s.traffic_bytes() / 2);
    HATTN_BENCH_CHECK(cudaMalloc(&b.copy_src, b.copy_bytes));
    HATTN_BENCH_CHECK(cudaMalloc(&b.copy_dst, b.copy_bytes));
    HATTN_BENCH_CHECK(cudaMemset(b.copy_src, 0x3C, b.copy_bytes));
    HATTN_BENCH_CHECK(cudaDeviceSynchronize());
}

void release(Buffers& b) {
    for (int i = 0; i < 3; ++i) {
        HATTN_BENCH_CHECK(cudaFree(b.in[i]));
        HATTN_BENCH_CHECK(cudaFree(b.out[i]));
        HATTN_BENCH_CHECK(cudaFree(b.descale[i]));
    }
    HATTN_BENCH_CHECK(cudaFree(b.cos));
    HATTN_BENCH_CHECK(cudaFree(b.sin));
    HATTN_BENCH_CHECK(cudaFree(b.copy_src));
    HATTN_BENCH_CHECK(cudaFree(b.copy_dst));
}

hattn_fp8_prepass_params params_for(const Shape& s, const Buffers& b, const Mode& m) {
    hattn_fp8_prepass_params p = hattn_fp8_prepass_params_contiguous(
        b.in[0], b.in[1], b.in[2], b.out[0], b.out[1], b.out[2], b.descale[0], b.descale[1], b.descale[2], s.batch,
        s.heads(), s.heads(), kSeqlen, kSeqlen, s.head_dim, HATTN_DTYPE_BF16);
    p.rope = m.rope;
    p.rope_cos = b.cos;
    p.rope_sin = b.sin;
    p.rope_rows = kSeqlen;
    p.hadamard = m.hadamard ? 1 : 0;
    p.hadamard_seed = kSeed;
    // V^T has the rows' byte count here (kSeqlen is a multiple of 32: no padding keys).
    if (m.vt) p.flags = HATTN_FP8_PREPASS_V_TRANSPOSED;
    return p;
}

// Seconds per call of `enqueue` (kCalls calls between two events).
template <typename F>
double time_calls(cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop, F enqueue) {
    HATTN_BENCH_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < kCalls; ++i) enqueue();
    HATTN_BENCH_CHECK(cudaEventRecord(stop, stream));
    HATTN_BENCH_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    HATTN_BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms * 1e-3 / kCalls;
}

struct Result {
    int batch, head_dim;
    double copy_gbps;
    double gbps[kNumModes][kNumVariants];
};

}  // namespace

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : kDefaultRounds;
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess || major != 9) {
        std::fprintf(stderr, "fp8_prepass_ab_bench: needs a Hopper (sm_90) GPU\n");
        return EXIT_FAILURE;
    }
    cudaStream_t stream;
    cudaEvent_t start, stop;
    HATTN_BENCH_CHECK(cudaStreamCreate(&stream));
    HATTN_BENCH_CHECK(cudaEventCreate(&start));
    HATTN_BENCH_CHECK(cudaEventCreate(&stop));

    std::vector<Result> results;
    for (int batch : kBatches) {
        for (int d : kHeadDims) {
            const Shape s{batch, d};
            Buffers b;
            allocate(s, b);
            hattn_fp8_prepass_params params[kNumModes];
            for (int m = 0; m < kNumModes; ++m) params[m] = params_for(s, b, kModes[m]);
            auto copy = [&] {
                HATTN_BENCH_CHECK(cudaMemcpyAsync(b.copy_dst, b.copy_src, b.copy_bytes, cudaMemcpyDeviceToDevice, stream));
            };
            auto prepass = [&](int m, int v) {
                const hattn_status st = hattn::host::fp8_prepass_variant(&params[m], kVariants[v], stream);
                if (st != HATTN_SUCCESS) {
                    std::fprintf(stderr, "fp8_prepass_variant %s %s d%d: %s\n", variant_name(kVariants[v]).c_str(),
                                 kModes[m].name, d, hattn_status_string(st));
                    std::exit(EXIT_FAILURE);
                }
            };
            // Warm-up (module loading, the shared-memory opt-ins) outside the timed rounds.
            copy();
            for (int m = 0; m < kNumModes; ++m)
                for (int v = 0; v < kNumVariants; ++v) prepass(m, v);
            HATTN_BENCH_CHECK(cudaStreamSynchronize(stream));

            double best_copy = 1e30, best[kNumModes][kNumVariants];
            for (auto& row : best) std::fill(row, row + kNumVariants, 1e30);
            for (int r = 0; r < rounds; ++r) {
                best_copy = std::min(best_copy, time_calls(stream, start, stop, copy));
                for (int m = 0; m < kNumModes; ++m)
                    for (int v = 0; v < kNumVariants; ++v) {
                        best[m][v] = std::min(best[m][v], time_calls(stream, start, stop, [&] { prepass(m, v); }));
                    }
            }
            Result res{batch, d, 2.0 * double(b.copy_bytes) / best_copy * 1e-9, {}};
            for (int m = 0; m < kNumModes; ++m)
                for (int v = 0; v < kNumVariants; ++v) res.gbps[m][v] = s.traffic_bytes() / best[m][v] * 1e-9;
            results.push_back(res);
            std::printf("tokens %6d d%-3d heads %2d: %.0f MB per call, copy %.0f GB/s (%.1f us), pre-pass GB/s:\n",
                        batch * kSeqlen, d, s.heads(), s.traffic_bytes() * 1e-6, res.copy_gbps, best_copy * 1e6);
            for (int m = 0; m < kNumModes; ++m) {
                std::printf("  %-27s", kModes[m].name);
                for (int v = 0; v < kNumVariants; ++v) {
                    std::printf("  %s %5.0f%-1s", variant_name(kVariants[v]).c_str(), res.gbps[m][v],
                                variant_mark(d, kModes[m], kVariants[v]));
                }
                std::printf("\n");
            }
            std::fflush(stdout);
            release(b);
        }
    }

    std::printf("\n== %% of the same-bytes copy (best of %d rounds of %d calls; * : not built, its fallback ran; "
                "the C API's default per head dim and mode: fp8_default_variant)\n",
                rounds, kCalls);
    std::printf("%-8s %-4s %-27s", "tokens", "d", "mode");
    for (const Fp8PrepassVariant& v : kVariants) std::printf("  %8s", variant_name(v).c_str());
    std::printf("  best\n");
    for (const Result& res : results) {
        for (int m = 0; m < kNumModes; ++m) {
            std::printf("%-8d %-4d %-27s", res.batch * kSeqlen, res.head_dim, kModes[m].name);
            int best_v = 0;
            for (int v = 0; v < kNumVariants; ++v) {
                std::printf("  %7.1f%-1s", 100.0 * res.gbps[m][v] / res.copy_gbps,
                            variant_mark(res.head_dim, kModes[m], kVariants[v]));
                if (res.gbps[m][v] > res.gbps[m][best_v]) best_v = v;
            }
            std::printf("  %s\n", variant_name(kVariants[best_v]).c_str());
        }
    }
    HATTN_BENCH_CHECK(cudaEventDestroy(start));
    HATTN_BENCH_CHECK(cudaEventDestroy(stop));
    HATTN_BENCH_CHECK(cudaStreamDestroy(stream));
    return EXIT_SUCCESS;
}
