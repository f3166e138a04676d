// hattn/bench/exp_vs_mma_bench.cu -- THE experiment: how long do a softmax's exponentials take
// next to the matmuls around them, and do the two overlap when different warpgroups issue them?
//
// For one attention step on a 64-row warpgroup tile and kBlockN keys:
//   S = Q K^T   wgmma SS, m64 n=kBlockN k=d          2 * 64 * kBlockN * d FLOPs
//   O += P V    wgmma RS (P in registers), m64 n=d k=kBlockN     the same again
// i.e. 4d matmul FLOPs per score, and one exponential per score. Per SM per clock the tensor
// cores do 4096 (bf16) / 8192 (fp8) FLOPs and the MUFU 16 ex2, so the exponentials take
//   theory exp/mma time = peak FLOP per clk / (16 * 4d)
//   (bf16: d64 100%, d128 50%, d256 25%;  fp8: d64 200%, d128 100%, d256 50%)
// of the matmul time -- the "512:1" of d128 bf16 (4096 FLOP/clk / 16 exp/clk / 512 FLOP/exp).
//
// Cases, each on all SMs (one CTA per SM) with the same total work per CTA (~2^33 FLOPs of tiles):
//   a  mma      2 warpgroups do the wgmma work of the tiles (P held constant in registers)
//   b  exp      2 warpgroups do ex2.approx.ftz.f32 of the same number of scores
//   b1 exp      the same exps on 1 warpgroup (the exp warpgroup of c, alone)
//   c  both     2 mma warpgroups + 1 exp warpgroup at once, 384 threads: FA3's warp
//               specialization, with the third warpgroup doing exps instead of TMA
// The table printed after the benchmarks (also in the counters) gives per case: 4d, theory,
// measured b/a, and c beside max(a, b) (perfect overlap) and a + b (no overlap), in SM cycles
// (clock-independent; the clock drops under tensor load) and in ms.
//
// Hardware expectation: b/a close to theory when both units run at peak; c close to max(a, b)
// if MUFU and tensor cores overlap freely (they are separate units, and wgmma issue is cheap).
//
// NOTES:
//  - The exp role's per-score work is one FFMA (scale and subtract the max, as softmax does),
//    one MUFU.EX2 and one FADD (the row sum). Each thread runs kExpChains independent chains
//    x <- 2^(bias - x) (converges near 0.64), so the compiler can hoist nothing.
//  - kBlockN = 128 (64 at d = 256, where O's accumulator alone takes 128 registers), the
//    tile shapes FA3 uses or smaller.
//  - Why not 2 mma + 2 exp warpgroups: at 512 threads ptxas (CUDA 13.0) failed (C7602) to fit
//    the d = 256 wgmma into the 128-register entry budget even under setmaxnreg.inc; with 384
//    threads and setmaxnreg (240 mma / 24 exp) every case compiles without spills.
//  - One P fragment (4 x b32) feeds every k-step of O += P V: the tensor-core work is the
//    same as with kBlockN / k distinct fragments, with fewer registers held.
//  - S accumulates across tiles (scale-d 1): ptxas deletes a zero-initialised S = Q K^T that
//    the next tile overwrites unread. The tensor cores do the same work either way.
//  - Operands are random non-zero smem tiles laid out as TMA with 128B swizzle would leave
//    them: Q and K K-major; V MN-major for bf16 (trans-b), V^T K-major for fp8 (e4m3 wgmma
//    takes K-major operands only).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "micro_harness.cuh"
#include "ptx/mufu.cuh"
#include "ptx/warp.cuh"
#include "ptx/wgmma.cuh"
#include "wgmma_operands.cuh"

namespace {

using namespace hattn;
using namespace hattn::bench;

constexpr int kMmaWarpgroups = 2;   // FA3's consumer warpgroups
constexpr int kExpChains = 8;       // independent exp chains per thread (registers held: 8)
constexpr double kTargetFlopPerCta = double(1ull << 33);  // ~1.1 ms of bf16 peak per launch
constexpr float kNeverValue = 1234567.0f;
constexpr uint64_t kSeed = 0x6578705f6d6d61ull;

// Concurrent case: 384 threads start with 168 registers each; the exp warpgroup gives most of
// its share to the two mma warpgroups (2 x 240 + 24 <= 512 per-thread units of 128 lanes), as
// FA3 does with its producer. ptxas compiles each role's branch to its setmaxnreg count.
constexpr uint32_t kMmaRoleRegs = 240;
constexpr uint32_t kExpRoleRegs = 24;
static_assert(kMmaWarpgroups * kMmaRoleRegs + kExpRoleRegs <= 65536 / kWarpgroupThreads, "register file");

template <int kHeadDim>
constexpr int block_n() {
    return kHeadDim == 256 ? 64 : 128;
}

// Shared-memory layout of one CTA (byte offsets from the 1024-aligned base). Every operand is
// split into blocks of 128-byte rows, as 128B-swizzled TMA boxes would land.
template <Dtype kType, int kHeadDim>
struct TileLayout {
    static constexpr int kBlockN = block_n<kHeadDim>();
    static constexpr int kRowBytes = kHeadDim * elem_bytes<kType>();             // a Q / K row
    static constexpr int kKBlocks = (kRowBytes + kSwizzleRowBytes - 1) / kSwizzleRowBytes;
    static constexpr int kStepsPerKBlock = (kRowBytes < kSwizzleRowBytes ? kRowBytes : kSwizzleRowBytes) / kKStepBytes;
    static constexpr int kQBlockStride = kWgmmaM * kSwizzleRowBytes;                // Q: 64 rows per block
    static constexpr int kQBytes = kKBlocks * kQBlockStride;                        // per mma warpgroup
    static constexpr int kKBlockStride = kBlockN * kSwizzleRowBytes;               // K: kBlockN rows per block
    static constexpr int kKBytes = kKBlocks * kKBlockStride;
    // bf16 V [kBlockN keys][d] MN-major: d / 64 column blocks of kBlockN rows x 128 B.
    // fp8 V^T [d][kBlockN keys] K-major: ceil(kBlockN / 128) blocks of d rows x 128 B.
    static constexpr bool kVIsMnMajor = kType != Dtype::kE4m3;
    static constexpr int kVBlockStride =
        kVIsMnMajor ? kBlockN * kSwizzleRowBytes : kHeadDim * kSwizzleRowBytes;
    static constexpr int kVBlocks = kVIsMnMajor ? kHeadDim * 2 / kSwizzleRowBytes
                                                : (kBlockN + kSwizzleRowBytes - 1) / kSwizzleRowBytes;
    static constexpr int kVBytes = kVBlocks * kVBlockStride;

    static constexpr int kQOffset = 0;
    static constexpr int kKOffset = kMmaWarpgroups * kQBytes;
    static constexpr int kVOffset = kKOffset + kKBytes;
    static constexpr int kOperandBytes = kVOffset + kVBytes;
    static constexpr int kSmemBytes = kOperandBytes + kSmemAlign;  // + alignment slack

    static constexpr int kPvSteps = kBlockN / k_per_instruction<kType>();
    static constexpr int kScoresPerTile = kWgmmaM * kBlockN;
    static constexpr double kFlopPerTile = 4.0 * kHeadDim * kScoresPerTile;

    // K-major operand with rows of kRowBytes split into 128-byte blocks: k-step s lies in
    // block (32 s) / 128 at byte (32 s) % 128 of each row.
    static constexpr uint32_t k_major_step_offset(int s, int block_stride) {
        return uint32_t((s * kKStepBytes) / kSwizzleRowBytes * block_stride + (s * kKStepBytes) % kSwizzleRowBytes);
    }
    // V for the k-step s of O += P V (K = keys).
    static constexpr uint32_t v_step_offset(int s) {
        // MN-major: one k16 step is 16 key rows of 128 bytes. K-major V^T: as above.
        return kVIsMnMajor ? uint32_t(s * 16 * kSwizzleRowBytes) : k_major_step_offset(s, kVBlockStride);
    }
    static_assert(kOperandBytes <= 227 * 1024 - kSmemAlign, "operands exceed shared memory");
};

// A descriptor plus a byte offset: the start-address field is the low 14 bits in 16-byte
// units and every address here is < 256 KB, so adding offset >> 4 never carries out of it.
__device__ __forceinline__ uint64_t desc_add(uint64_t desc, uint32_t byte_offset) { return desc + (byte_offset >> 4); }

// Not an instruction: hides a value's origin from the compiler for one loop iteration, so the
// per-k-step descriptors derived from it are computed next to their wgmma instead of all being
// hoisted out of the loop (they would then crowd out the accumulators at d = 256).
__device__ __forceinline__ void launder(uint64_t& v) { asm volatile("" : "+l"(v)); }

// ---- Role a: the wgmma work of kTiles attention steps -------------------------------------
template <Dtype kType, int kHeadDim>
__device__ __forceinline__ float mma_role(const uint8_t* smem, int wg, int tiles, uint64_t seed) {
    using L = TileLayout<kType, kHeadDim>;
    constexpr int kBlockN = L::kBlockN;
    uint64_t q0 = ptx::make_smem_desc_k_major(ptx::smem_u32(smem + L::kQOffset + wg * L::kQBytes),
                                                    ptx::Swizzle::k128B);
    uint64_t k0 = ptx::make_smem_desc_k_major(ptx::smem_u32(smem + L::kKOffset), ptx::Swizzle::k128B);
    uint64_t v0 = L::kVIsMnMajor
                            ? ptx::make_smem_desc_mn_major(ptx::smem_u32(smem + L::kVOffset), ptx::Swizzle::k128B,
                                                           L::kVBlockStride)
                            : ptx::make_smem_desc_k_major(ptx::smem_u32(smem + L::kVOffset), ptx::Swizzle::k128B);
    constexpr int kTransV = L::kVIsMnMajor ? 1 : 0;

    // P: a random, constant A fragment -- in FA3 it would be exp(S) converted in registers;
    // here the tensor-core work is isolated from the softmax.
    uint32_t p[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) p[r] = random_operand_word<kType>(mix64(seed + threadIdx.x * 4 + r));

    float s_acc[kBlockN / 2];
    float o_acc[kHeadDim / 2];
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) s_acc[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) o_acc[i] = 0.0f;

    // NOTE: S accumulates across tiles (scale-d 1) instead of restarting at each tile: ptxas
    //       knows wgmma, sees that a zero-initialised S is overwritten unread by the next
    //       tile and deletes those QK^T instructions. The tensor-core work is identical.
    for (int t = 0; t < tiles; ++t) {
        launder(v0);
        // S += Q K^T, one 128-byte block of K (4 k-steps) per pass of a rolled loop: fully
        // unrolled, ptxas would precompute all 2 * d / 16 descriptors and run out of uniform
        // registers at d = 256.
#pragma unroll 1
        for (int kb = 0; kb < L::kKBlocks; ++kb) {
            ptx::wgmma_fence();  // at every loop entry, or ptxas injects one (C7519)
            uint64_t q = desc_add(q0, kb * L::kQBlockStride);
            uint64_t k = desc_add(k0, kb * L::kKBlockStride);
            launder(q);
            launder(k);
#pragma unroll
            for (int s = 0; s < L::kStepsPerKBlock; ++s) {
                mma_ss<kType, kBlockN>(s_acc, desc_add(q, s * kKStepBytes), desc_add(k, s * kKStepBytes), 1u);
            }
        }
        ptx::wgmma_fence();  // P and O enter wgmma after the loop's control flow
#pragma unroll
        for (int s = 0; s < L::kPvSteps; ++s) {  // O += P V
            mma_rs<kType, kHeadDim, kTransV>(o_acc, p, desc_add(v0, L::v_step_offset(s)), 1u);
        }
        ptx::wgmma_commit_group();
        ptx::wgmma_wait_group<1>();  // one tile queued behind the executing one
    }
    ptx::wgmma_wait_group<0>();
    ptx::wgmma_fence_operand(s_acc);
    ptx::wgmma_fence_operand(o_acc);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) sum += s_acc[i];
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) sum += o_acc[i];
    return sum;
}

// ---- Role b: one ex2 per score of kTiles tiles ---------------------------------------------
// Per score: FFMA (x * scale + bias, softmax's scale-and-subtract-max), MUFU.EX2, FADD (row sum).
template <int kBlockN>
__device__ __forceinline__ float exp_role(int tiles, float scale, float bias, uint64_t seed) {
    constexpr int kScoresPerThreadPerTile = kWgmmaM * kBlockN / kWarpgroupThreads;
    constexpr int kStepsPerTile = kScoresPerThreadPerTile / kExpChains;
    static_assert(kScoresPerThreadPerTile % kExpChains == 0, "chains must divide a tile's scores");
    float x[kExpChains];
#pragma unroll
    for (int c = 0; c < kExpChains; ++c) x[c] = hash_to_unit_nonzero(mix64(seed ^ (threadIdx.x * kExpChains + c)));
    float sum0 = 0.0f, sum1 = 0.0f;  // two partial row sums: halves the FADD dependency chain
    for (int t = 0; t < tiles; ++t) {
#pragma unroll
        for (int step = 0; step < kStepsPerTile; ++step) {
#pragma unroll
            for (int c = 0; c < kExpChains; ++c) {
                x[c] = ptx::ex2_approx_f32(fmaf(x[c], scale, bias));
                if (c % 2 == 0) sum0 += x[c];
                else sum1 += x[c];
            }
        }
    }
    return sum0 + sum1;
}

// One CTA per SM: warpgroups [0, kMma) run the mma role, [kMma, kMma + kExp) the exp role.
// Every warpgroup's first lane records its cycles; the launch's span is the max.
template <Dtype kType, int kHeadDim, int kMma, int kExp>
__global__ void __launch_bounds__((kMma + kExp) * kWarpgroupThreads, 1)
    exp_vs_mma_kernel(int tiles_per_cta, float scale, float bias, float never_value, uint64_t seed, float* sink,
                      SpanRecord* spans) {
    using L = TileLayout<kType, kHeadDim>;
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = align_smem(smem_raw);
    if constexpr (kMma > 0) fill_smem_random<kType>(smem, L::kOperandBytes, seed);

    const int wg = int(ptx::warpgroup_index());
    const SpanStart t0 = span_begin();
    float result;
    if constexpr (kExp == 0) {
        result = mma_role<kType, kHeadDim>(smem, wg, tiles_per_cta / kMma, seed);
    } else if constexpr (kMma == 0) {
        result = exp_role<L::kBlockN>(tiles_per_cta / kExp, scale, bias, seed);
    } else if (wg < kMma) {  // the roles as one visible branch (warp-uniform: whole warpgroups)
        ptx::setmaxnreg_inc<kMmaRoleRegs>();
        result = mma_role<kType, kHeadDim>(smem, wg, tiles_per_cta / kMma, seed);
    } else {
        ptx::setmaxnreg_dec<kExpRoleRegs>();
        result = exp_role<L::kBlockN>(tiles_per_cta / kExp, scale, bias, seed);
    }
    if (threadIdx.x % kWarpgroupThreads == 0) span_end(t0, spans, wg);
    if (result == never_value) sink[blockIdx.x * blockDim.x + threadIdx.x] = result;
}

// ---- Host: cases, results, the table --------------------------------------------------------
enum class Case { kMma, kExp, kExp1, kBoth };
constexpr int kCases = 4;
constexpr const char* kCaseNames[kCases] = {"a_mma_2wg", "b_exp_2wg", "b1_exp_1wg", "c_2mma_1exp"};

struct Result {
    bool ran = false;
    double cycles = 0, ms = 0;
};

struct Experiment {
    std::string label;  // "bf16/d128"
    int head_dim = 0;
    double flop_per_exp = 0;
    double theory = 0;  // exp time / mma time at the documented peaks
    Result r[kCases];
};

using Results = std::map<std::string, Experiment>;

template <Dtype kType, int kHeadDim, int kMma, int kExp>
void register_case(const DeviceInfo& dev, Results& results, Case which) {
    using L = TileLayout<kType, kHeadDim>;
    const std::string label = std::string(dtype_name(kType)) + "/d" + std::to_string(kHeadDim);
    Experiment& e = results[label];
    e.label = label;
    e.head_dim = kHeadDim;
    e.flop_per_exp = 4.0 * kHeadDim;
    e.theory = peak_flop_per_clk<kType>() / (kMufuEx2PerClkPerSm * e.flop_per_exp);

    const std::string name = "exp_vs_mma/" + label + "/" + kCaseNames[int(which)];
    benchmark::RegisterBenchmark(name.c_str(), [dev, &e, which](benchmark::State& state) {
        auto kernel = exp_vs_mma_kernel<kType, kHeadDim, kMma, kExp>;
        constexpr int kThreads = (kMma + kExp) * kWarpgroupThreads;
        constexpr int kSmem = kMma > 0 ? L::kSmemBytes : 0;
        HATTN_BENCH_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
        // Same work for every case; a multiple of 2 so both roles split it evenly.
        const int tiles = std::max(2, int(kTargetFlopPerCta / L::kFlopPerTile) / 2 * 2);
        const int grid = dev.sm_count;
        constexpr float kScale = -1.0f, kBias = 0.0f;  // x <- 2^(-x): stays near 0.64, never 0

        float* sink = nullptr;
        HATTN_BENCH_CHECK(cudaMalloc(&sink, size_t(grid) * kThreads * sizeof(float)));
        DeviceSpans spans(grid);
        const Measurement m = run_timed(state, spans, [&](cudaStream_t stream) {
            kernel<<<grid, kThreads, kSmem, stream>>>(tiles, kScale, kBias, kNeverValue, kSeed, sink, spans.data());
        });
        HATTN_BENCH_CHECK(cudaFree(sink));

        const double flops = double(grid) * tiles * L::kFlopPerTile;
        const double exps = double(grid) * tiles * L::kScoresPerTile;
        e.r[int(which)] = Result{true, m.cycles, m.seconds * 1e3};
        report_rates(state, dev, m, kMma > 0 ? flops : exps, kMma > 0 ? peak_flop_per_clk<kType>() : kMufuEx2PerClkPerSm);
        state.counters["tiles_per_CTA"] = tiles;
        state.counters["scores_per_s"] = m.seconds > 0 ? exps / m.seconds : 0.0;
        state.counters["exp_per_clk_per_SM"] = m.cycles > 0 ? exps / (dev.sm_count * m.cycles) : 0.0;
        if (kMma > 0) {
            state.counters["TFLOPS"] = m.seconds > 0 ? flops / m.seconds * 1e-12 : 0.0;
            state.counters["FLOP_per_clk_per_SM"] = m.cycles > 0 ? flops / (dev.sm_count * m.cycles) : 0.0;
        }
        state.counters["flop_per_exp"] = e.flop_per_exp;
        state.counters["theory_exp_over_mma"] = e.theory;
        const Result& a = e.r[int(Case::kMma)];
        const Result& b = e.r[int(Case::kExp)];
        if (which == Case::kExp && a.ran) state.counters["measured_exp_over_mma"] = m.cycles / a.cycles;
        if (which == Case::kBoth && a.ran && b.ran) {
            state.counters["c_over_max_ab"] = m.cycles / std::max(a.cycles, b.cycles);
            state.counters["c_over_sum_ab"] = m.cycles / (a.cycles + b.cycles);
        }
    })->UseManualTime()->Unit(benchmark::kMillisecond);
}

template <Dtype kType, int kHeadDim>
void register_head_dim(const DeviceInfo& dev, Results& results) {
    register_case<kType, kHeadDim, kMmaWarpgroups, 0>(dev, results, Case::kMma);
    register_case<kType, kHeadDim, 0, 2>(dev, results, Case::kExp);
    register_case<kType, kHeadDim, 0, 1>(dev, results, Case::kExp1);
    register_case<kType, kHeadDim, kMmaWarpgroups, 1>(dev, results, Case::kBoth);
}

void register_all(const DeviceInfo& dev, Results& results) {
    register_head_dim<Dtype::kBf16, 64>(dev, results);
    register_head_dim<Dtype::kBf16, 128>(dev, results);
    register_head_dim<Dtype::kBf16, 256>(dev, results);
    register_head_dim<Dtype::kE4m3, 64>(dev, results);
    register_head_dim<Dtype::kE4m3, 128>(dev, results);
    register_head_dim<Dtype::kE4m3, 256>(dev, results);
}

std::string fmt(bool ok, double v, const char* spec) {
    if (!ok) return "-";
    char buf[32];
    std::snprintf(buf, sizeof(buf), spec, v);
    return buf;
}

// Markdown: fractions in SM cycles (clock-independent), absolute times in ms.
void print_table(const Results& results) {
    std::printf("\nexp vs mma, all SMs (per 64 x kBlockN tile: 4d matmul FLOPs per score, one ex2 per score)\n");
    std::printf("| case | FLOP/exp | theory exp/mma | measured b/a | a mma ms | b exp ms | b1 exp 1wg ms | c both ms "
                "| max(a,b) ms | a+b ms | c / max(a,b) | c / (a+b) |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& [label, e] : results) {
        const Result& a = e.r[int(Case::kMma)];
        const Result& b = e.r[int(Case::kExp)];
        const Result& b1 = e.r[int(Case::kExp1)];
        const Result& c = e.r[int(Case::kBoth)];
        const bool ab = a.ran && b.ran;
        const bool abc = ab && c.ran;
        std::printf("| %s | %.0f | %.0f%% | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", label.c_str(),
                    e.flop_per_exp, 100.0 * e.theory, fmt(ab, ab ? 100.0 * b.cycles / a.cycles : 0, "%.0f%%").c_str(),
                    fmt(a.ran, a.ms, "%.3f").c_str(), fmt(b.ran, b.ms, "%.3f").c_str(), fmt(b1.ran, b1.ms, "%.3f").c_str(),
                    fmt(c.ran, c.ms, "%.3f").c_str(), fmt(ab, std::max(a.ms, b.ms), "%.3f").c_str(),
                    fmt(ab, a.ms + b.ms, "%.3f").c_str(),
                    fmt(abc, abc ? c.cycles / std::max(a.cycles, b.cycles) : 0, "%.2f").c_str(),
                    fmt(abc, abc ? c.cycles / (a.cycles + b.cycles) : 0, "%.2f").c_str());
    }
    std::printf("(b/a and the c ratios use in-kernel SM cycles, not ms: the clock drops under tensor load. "
                "c / max(a,b) = 1.00 is perfect overlap; c / (a+b) = 1.00 is none)\n");
}

}  // namespace

int main(int argc, char** argv) {
    Results results;
    return benchmark_main(
        argc, argv, [&](const DeviceInfo& dev) { register_all(dev, results); }, [&] { print_table(results); });
}
