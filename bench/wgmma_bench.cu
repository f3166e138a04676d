// hattn/bench/wgmma_bench.cu -- dense wgmma (tensor-core) throughput with operands resident in
// shared memory: the ceiling every GEMM in the attention kernels works under.
//
// What it measures: FLOP per SM per clock (clock64 spans inside the kernel, every warpgroup
// timed), TFLOPS from event time, % of the documented peak, for
//   bf16 and e4m3 (plus fp16 at N=256) x {SS: A and B from smem, RS: A from registers}
//   x N in {64, 128, 256} x 1..3 warpgroups per SM (each warpgroup its own 64 x N accumulator).
// The loop issues only wgmma: batches of kKStepsPerBatch k-steps, one commit per batch,
// wait<1> so one batch is always queued behind the one executing. No loads in the loop.
// chain/...: the attention's P V pattern instead -- each RS batch waited for (wait<0>) before the
// next, as a warpgroup waits for its P V before rescaling O, its first k-step either adding to the
// accumulator (accumulate: O += P V) or starting from zero (fresh: the FP8 forward's two-level
// accumulation, which measured +20% over accumulating at d64, RESULTS run 37a); e4m3 and bf16, N =
// 64 and 128, 1 and 2 warpgroups. Same FLOPs: a difference is what reading the accumulator in costs.
// Each chain's result is used after its wait as the attention uses it (accumulate: O *= a
// runtime 1.0, the rescale; fresh: O_total += partial, the promotion): one FP32 op per register
// either way. Without that use ptxas drops the fresh chains whose results are overwritten
// unread (the first version measured 240-300% of peak).
//
// Hardware expectation (H100/H200 SXM): 4096 dense bf16/fp16 FLOP/clk/SM, 8192 for fp8. Large
// N with 2+ warpgroups should come close (target: bf16 SS N=256 >= 90%, fp8 >= 85%). SS at
// small N reads A and B from smem for every instruction; smem bandwidth (128 B/clk/SM) can
// then cap the rate -- RS removes A's share, which is why FA3 feeds P from registers.
//
// NOTES:
//  - smem holds random, non-zero values (tensor cores run faster on zeros).
//  - Operand tiles are K-major, 128B-swizzled, 1024-byte aligned: 64-element (bf16) or
//    128-element (fp8) rows of 128 bytes, 8-row groups 1024 bytes apart (SBO), the layout a
//    TMA box with 128B swizzle produces. k-steps advance the start address by 32 bytes.
//  - The accumulators are summed and written only when the sum equals a value it cannot
//    take, so the compiler must keep every wgmma.
#include <cuda_runtime_api.h>

#include <string>

#include "micro_harness.cuh"
#include "ptx/warp.cuh"
#include "ptx/wgmma.cuh"
#include "wgmma_operands.cuh"

namespace {

using namespace hattn;
using namespace hattn::bench;

constexpr int kKStepsPerBatch = kSwizzleRowBytes / kKStepBytes;  // 4: one swizzle row of K
constexpr int kATileBytes = kWgmmaM * kSwizzleRowBytes;          // 8 KB per warpgroup
constexpr double kTargetFlopPerSm = 2.0 * (1ull << 34);  // ~4.6 ms of bf16 peak per launch
constexpr float kNeverValue = 1234567.0f;
constexpr uint64_t kSeed = 0x7767656d6d61ull;

template <int kN, int kWarpgroups>
constexpr int smem_bytes() {
    return kWarpgroups * kATileBytes + kN * kSwizzleRowBytes + kSmemAlign;  // + alignment slack
}

// kQueued: one batch always queued behind the executing one (throughput). kChain*: each batch
// waited for before the next; kChainFresh: its first k-step ignores the accumulator (scale-d 0).
enum class Loop { kQueued, kChainAccumulate, kChainFresh };

template <Dtype kType, int kN, bool kRS, int kWarpgroups, Loop kLoop = Loop::kQueued>
__global__ void __launch_bounds__(kWarpgroups * kWarpgroupThreads, 1)
    wgmma_throughput_kernel(int batches, float unit_scale, float never_value, uint64_t seed, float* sink,
                            SpanRecord* spans) {
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = align_smem(smem_raw);
    uint8_t* b_tile = smem + kWarpgroups * kATileBytes;
    fill_smem_random<kType>(smem, kWarpgroups * kATileBytes + kN * kSwizzleRowBytes, seed);

    const uint32_t wg = ptx::warpgroup_index();
    const uint8_t* a_tile = smem + wg * kATileBytes;
    uint64_t desc_a[kKStepsPerBatch], desc_b[kKStepsPerBatch];
#pragma unroll
    for (int k = 0; k < kKStepsPerBatch; ++k) {
        desc_a[k] = ptx::make_smem_desc_k_major(ptx::smem_u32(a_tile + k * kKStepBytes), ptx::Swizzle::k128B);
        desc_b[k] = ptx::make_smem_desc_k_major(ptx::smem_u32(b_tile + k * kKStepBytes), ptx::Swizzle::k128B);
    }
    // RS: this thread's A fragment (4 x 32-bit), random and constant, reused by every k-step.
    // NOTE: one fragment rather than one per k-step keeps RS at N=256 with 3 warpgroups inside
    //       the 168-register cap (128 accumulator registers); the tensor core's work is the same.
    uint32_t a_frag[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) a_frag[r] = random_operand_word<kType>(mix64(seed + threadIdx.x * 4 + r));

    float acc[kN / 2], total[kN / 2];
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) acc[i] = total[i] = 0.0f;

    const SpanStart t0 = span_begin();
    for (int it = 0; it < batches; ++it) {
        ptx::wgmma_fence();
#pragma unroll
        for (int k = 0; k < kKStepsPerBatch; ++k) {
            const uint32_t accumulate = kLoop == Loop::kChainFresh && k == 0 ? 0u : 1u;
            if constexpr (kRS) mma_rs<kType, kN>(acc, a_frag, desc_b[k], accumulate);
            else mma_ss<kType, kN>(acc, desc_a[k], desc_b[k], accumulate);
        }
        ptx::wgmma_commit_group();
        if constexpr (kLoop == Loop::kQueued) {
            ptx::wgmma_wait_group<1>();  // keep one batch queued behind the executing one
        } else {
            ptx::wgmma_wait_group<0>();  // the chain is done before the next is issued
            ptx::wgmma_fence_operand(acc);
#pragma unroll
            for (int i = 0; i < kN / 2; ++i) {
                if constexpr (kLoop == Loop::kChainFresh) total[i] += acc[i];
                else acc[i] *= unit_scale;
            }
        }
    }
    ptx::wgmma_wait_group<0>();
    ptx::wgmma_fence_operand(acc);
    if (threadIdx.x % kWarpgroupThreads == 0) span_end(t0, spans, wg);

    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) sum += acc[i] + total[i];
    if (sum == never_value) sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

template <Dtype kType, int kN, bool kRS, int kWarpgroups, Loop kLoop = Loop::kQueued>
void register_case(const DeviceInfo& dev) {
    const char* loop = kLoop == Loop::kQueued ? "" : kLoop == Loop::kChainFresh ? "/fresh" : "/accumulate";
    const std::string name = std::string(kLoop == Loop::kQueued ? "wgmma/" : "chain/") + dtype_name(kType) +
                             (kRS ? "/RS" : "/SS") + "/N" + std::to_string(kN) + loop + "/wg" + std::to_string(kWarpgroups);
    benchmark::RegisterBenchmark(name.c_str(), [dev](benchmark::State& state) {
        auto kernel = wgmma_throughput_kernel<kType, kN, kRS, kWarpgroups, kLoop>;
        constexpr int kThreads = kWarpgroups * kWarpgroupThreads;
        constexpr int kSmem = smem_bytes<kN, kWarpgroups>();
        HATTN_BENCH_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
        constexpr double kFlopPerInstruction = 2.0 * kWgmmaM * kN * k_per_instruction<kType>();
        constexpr double kFlopPerBatch = kFlopPerInstruction * kKStepsPerBatch;
        // The same FLOPs per SM for every warpgroup count (fp8 gets twice bf16's, its peak).
        const double target = kTargetFlopPerSm * (peak_flop_per_clk<kType>() / kBf16FlopPerClkPerSm);
        const int batches = int(target / (kFlopPerBatch * kWarpgroups));
        const int grid = dev.sm_count;  // one CTA per SM: all warpgroups share its tensor cores

        float* sink = nullptr;
        HATTN_BENCH_CHECK(cudaMalloc(&sink, size_t(grid) * kThreads * sizeof(float)));
        DeviceSpans spans(grid);
        const Measurement m = run_timed(state, spans, [&](cudaStream_t stream) {
            kernel<<<grid, kThreads, kSmem, stream>>>(batches, 1.0f, kNeverValue, kSeed, sink, spans.data());
        });
        HATTN_BENCH_CHECK(cudaFree(sink));

        const double flops = double(grid) * kWarpgroups * batches * kFlopPerBatch;
        report_rates(state, dev, m, flops, peak_flop_per_clk<kType>());
        state.counters["FLOP_per_clk_per_SM"] = state.counters["per_SM_per_clk"];
        state.counters["TFLOPS"] = m.seconds > 0 ? flops / m.seconds * 1e-12 : 0.0;
        state.counters["peak_FLOP_per_clk_per_SM"] = peak_flop_per_clk<kType>();
        state.counters["cycles_per_batch"] = batches > 0 ? m.cycles / batches : 0.0;
    })->UseManualTime()->Unit(benchmark::kMillisecond);
}

template <Dtype kType, bool kRS, int kWarpgroups>
void register_n_sweep(const DeviceInfo& dev) {
    register_case<kType, 64, kRS, kWarpgroups>(dev);
    register_case<kType, 128, kRS, kWarpgroups>(dev);
    register_case<kType, 256, kRS, kWarpgroups>(dev);
}

template <Dtype kType>
void register_dtype(const DeviceInfo& dev) {
    register_n_sweep<kType, false, 1>(dev);
    register_n_sweep<kType, false, 2>(dev);
    register_n_sweep<kType, false, 3>(dev);
    register_n_sweep<kType, true, 1>(dev);
    register_n_sweep<kType, true, 2>(dev);
    register_n_sweep<kType, true, 3>(dev);
}

// chain/ cases (accumulate and fresh) for each N with kWarpgroups warpgroups; register_rs: queued RS
// cases at each N.
template <Dtype kType, int kWarpgroups, int... kN>
void register_chains(const DeviceInfo& dev) {
    ((register_case<kType, kN, true, kWarpgroups, Loop::kChainAccumulate>(dev),
      register_case<kType, kN, true, kWarpgroups, Loop::kChainFresh>(dev)),
     ...);
}
template <Dtype kType, int kWarpgroups, int... kN>
void register_rs(const DeviceInfo& dev) {
    (register_case<kType, kN, true, kWarpgroups>(dev), ...);
}

void register_all(const DeviceInfo& dev) {
    register_dtype<Dtype::kBf16>(dev);
    register_dtype<Dtype::kE4m3>(dev);
    // fp16 runs on the same datapath as bf16: one spot check at the largest N.
    register_case<Dtype::kF16, 256, false, 2>(dev);
    register_case<Dtype::kF16, 256, true, 2>(dev);
    // The P V pattern: accumulate vs fresh first k-step, with one warpgroup (the chain's latency
    // exposed) and two (one fills the other's gaps, as the ping-pong does). Run 38 found
    // accumulating chains at 76-77% for N = 64 and 128 but 94-100% for 80 and 144; 8 is the FP8
    // forward's row sums (P times a tile of ones); 256 would need 256 registers for the two
    // accumulators; bf16 at the 16-bit forward's P V widths.
    register_chains<Dtype::kE4m3, 1, 64, 128>(dev);
    register_chains<Dtype::kE4m3, 2, 8, 64, 80, 96, 112, 128, 144, 192>(dev);
    register_chains<Dtype::kBf16, 1, 64>(dev);
    register_chains<Dtype::kBf16, 2, 64, 128, 144>(dev);
    // Queued, at the widths the sweep lacks: what a narrow wgmma costs (8, 16: the row sums) and
    // head dim + 16.
    register_rs<Dtype::kE4m3, 2, 8, 16, 80, 144>(dev);
}

}  // namespace

int main(int argc, char** argv) { return hattn::bench::benchmark_main(argc, argv, register_all); }
