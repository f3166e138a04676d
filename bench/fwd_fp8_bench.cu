// hattn/bench/fwd_fp8_bench.cu -- the FP8 forward (hattn_fwd_fp8) beside the bf16 forward (hattn_fwd)
// on the same shapes: head_dim 128, batch * seqlen = 16k tokens, 16 heads, seqlen 2k .. 16k, full
// and causal (the FlashAttention-3 paper's FP8 sweep at d128); plus d64 and d256 at 8k, full.
//
//   fwd/bf16/...      hattn_fwd on bf16 Q, K, V
//   fwd_fp8/e4m3/...  hattn_fwd_fp8 on the e4m3 Q, K, V and descales hattn_fp8_prepass made from
//                     the same bf16 tensors (with the Hadamard transform); the timed call includes
//                     its V -> V^T transpose (~2 bytes moved per V element, a few percent at 2k)
//   transpose/e4m3/... that transpose alone (what an in-kernel transpose would save); its TFLOPS
//                     counter is the forward's FLOPs over the transpose's time, so 1 / (1/fwd_fp8
//                     - 1/transpose) is what fwd_fp8 would reach without it
// Both forwards get the scheduler workspace users are told to pass (include/hattn.h: the dynamic
// tile walk of causal problems). Counters as bench/fwd_bench.cu: TFLOPS = 4 b h s^2 d / seconds (half for causal), and
// pct_of_989 (the bf16 peak; the e4m3 dense peak is twice that, 1979).
//
// NOTES: one input set per dtype (fwd_bench rotates two to keep K/V out of L2 between launches;
// at 16k tokens a K or V tensor of e4m3 is 32 MB, so some of it may stay in the 50 MB L2).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "attention_harness.cuh"
#include "hattn.h"
#include "kernels/fwd_fp8.cuh"  // the V transpose alone (transpose/...)

namespace {

using hattn::bench::cuda_error;
using hattn::bench::kTensorElements;
using hattn::bench::Shape;
using hattn::bench::shape_name;

constexpr int kHeadDim = 128;
constexpr int kMinHeadDim = 64;  // sizes the descale buffers (the most (batch, head) pairs)
constexpr int kSeqlens[] = {2048, 4096, 8192, 16384};
// Beside the d128 sweep: the other head dims at 8k, full (d64: the exps cost twice the FP8
// GEMMs; d256: half).
constexpr int kOtherHeadDims[] = {64, 256};
constexpr int kOtherSeqlen = 8192;
constexpr uint32_t kSeed = 0xf8f8u;
constexpr uint64_t kHadamardSeed = 0x5eedull;

class Buffers {
public:
    const std::string& prepare() { return arena_.prepare(); }
    cudaStream_t stream() const { return arena_.stream(); }

    void* bf16[3] = {};
    void* fp8[3] = {};
    float* descale[3] = {};
    void* o = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    void* schedule = nullptr;  // the scheduler's workspace (the dynamic tile walk), zero-filled once

private:
    std::string fill(hattn::bench::DeviceArena& arena) {
        uint32_t seed = kSeed;
        for (int i = 0; i < 3; ++i) {
            if (std::string e = arena.random_tensor(&bf16[i], seed++); !e.empty()) return e;
            if (std::string e = arena.allocate(&fp8[i], size_t(kTensorElements)); !e.empty()) return e;
            // Enough descales for the smallest seqlen's (batch, head, block) count: kTensorElements / d / 128.
            void* ds = nullptr;
            if (std::string e = arena.allocate(&ds, size_t(kTensorElements) / kMinHeadDim / HATTN_FP8_BLOCK_ROWS * 4 + 4096);
                !e.empty())
                return e;
            descale[i] = static_cast<float*>(ds);
        }
        // The largest V^T over the sweep: keys are a multiple of 32 for every seqlen here.
        workspace_bytes = size_t(kTensorElements);
        if (std::string e = arena.allocate(&workspace, workspace_bytes); !e.empty()) return e;
        if (std::string e = arena.allocate(&schedule, hattn_fwd_workspace_size()); !e.empty()) return e;
        if (const cudaError_t rc = cudaMemset(schedule, 0, hattn_fwd_workspace_size()); rc != cudaSuccess)
            return cuda_error("cudaMemset", rc);
        return arena.allocate(&o, size_t(kTensorElements) * 2);
    }
    hattn::bench::DeviceArena arena_{[this](hattn::bench::DeviceArena& a) { return fill(a); }};
};

// The e4m3 inputs of one shape (the pre-pass's layout depends on batch / seqlen).
std::string quantize(Buffers& b, const Shape& s) {
    hattn_fp8_prepass_params pp = hattn_fp8_prepass_params_contiguous(
        b.bf16[0], b.bf16[1], b.bf16[2], b.fp8[0], b.fp8[1], b.fp8[2], b.descale[0], b.descale[1], b.descale[2],
        s.batch(), s.heads(), s.heads(), s.seqlen, s.seqlen, s.head_dim, HATTN_DTYPE_BF16);
    pp.hadamard = 1;
    pp.hadamard_seed = kHadamardSeed;
    const hattn_status st = hattn_fp8_prepass(&pp, b.stream());
    if (st != HATTN_SUCCESS) return hattn::bench::launch_error("hattn_fp8_prepass", pp, st, hattn_fp8_prepass_validate);
    const cudaError_t rc = cudaStreamSynchronize(b.stream());
    return rc == cudaSuccess ? std::string() : cuda_error("hattn_fp8_prepass", rc);
}

void bench_bf16(benchmark::State& state, Buffers& b, Shape s) {
    if (const std::string& reason = b.prepare(); !reason.empty()) {
        state.SkipWithError(reason.c_str());
        return;
    }
    hattn_fwd_params p = hattn_fwd_params_contiguous(b.bf16[0], b.bf16[1], b.bf16[2], b.o, s.batch(), s.heads(),
                                                     s.heads(), s.seqlen, s.seqlen, s.head_dim, HATTN_DTYPE_BF16);
    p.causal = s.causal ? 1 : 0;
    p.workspace = b.schedule;  // one scheduler workspace serves both forwards on a stream
    p.workspace_size = hattn_fwd_workspace_size();
    cudaStream_t stream = b.stream();
    hattn::bench::run_timed(state, stream, s.forward_flops(), [&](std::string* error) {
        const hattn_status st = hattn_fwd(&p, stream);
        if (st != HATTN_SUCCESS) {
            *error = hattn::bench::launch_error("hattn_fwd", p, st, hattn_fwd_validate);
            return false;
        }
        return true;
    });
}

void bench_fp8(benchmark::State& state, Buffers& b, Shape s) {
    if (const std::string& reason = b.prepare(); !reason.empty()) {
        state.SkipWithError(reason.c_str());
        return;
    }
    if (std::string e = quantize(b, s); !e.empty()) {
        state.SkipWithError(e.c_str());
        return;
    }
    hattn_fwd_fp8_params p = hattn_fwd_fp8_params_contiguous(b.fp8[0], b.fp8[1], b.fp8[2], b.o, b.descale[0], b.descale[1],
                                                             b.descale[2], s.batch(), s.heads(), s.heads(), s.seqlen,
                                                             s.seqlen, s.head_dim, HATTN_DTYPE_BF16);
    p.causal = s.causal ? 1 : 0;
    p.workspace = b.workspace;
    p.workspace_size = b.workspace_bytes;
    p.schedule_workspace = b.schedule;  // as the library's users are told to (include/hattn.h)
    p.schedule_workspace_size = hattn_fwd_workspace_size();
    cudaStream_t stream = b.stream();
    hattn::bench::run_timed(state, stream, s.forward_flops(), [&](std::string* error) {
        const hattn_status st = hattn_fwd_fp8(&p, stream);
        if (st != HATTN_SUCCESS) {
            *error = hattn::bench::launch_error("hattn_fwd_fp8", p, st, hattn_fwd_fp8_validate);
            return false;
        }
        return true;
    });
}

void bench_transpose(benchmark::State& state, Buffers& b, Shape s) {
    if (const std::string& reason = b.prepare(); !reason.empty()) {
        state.SkipWithError(reason.c_str());
        return;
    }
    hattn::fwd_fp8::Fp8FwdArgs a;
    a.v = b.fp8[2];
    a.vt = b.workspace;
    a.batch = s.batch();
    a.heads_kv = s.heads();
    a.seqlen_k = s.seqlen;
    a.head_dim = kHeadDim;
    a.v_head_stride = kHeadDim;
    a.v_seq_stride = int64_t{s.heads()} * kHeadDim;
    a.v_batch_stride = a.v_seq_stride * s.seqlen;
    cudaStream_t stream = b.stream();
    hattn::bench::run_timed(state, stream, s.forward_flops(), [&](std::string* error) {
        return hattn::fwd_fp8::launch_transpose_v<kHeadDim>(a, stream, error) == cudaSuccess;
    });
}

}  // namespace

int main(int argc, char** argv) {
    Buffers buffers;
    for (bool causal : {false, true}) {
        for (int seqlen : kSeqlens) {
            const Shape s{kHeadDim, seqlen, causal, 0u};
            std::string fp8_name = shape_name("fwd_fp8", s);
            fp8_name.replace(fp8_name.find("/bf16/"), 6, "/e4m3/");
            hattn::bench::register_timed(shape_name("fwd", s),
                                         [&buffers, s](benchmark::State& st) { bench_bf16(st, buffers, s); });
            hattn::bench::register_timed(fp8_name, [&buffers, s](benchmark::State& st) { bench_fp8(st, buffers, s); });
            if (!causal) {  // (the transpose does not depend on the mask)
                std::string t_name = fp8_name;
                t_name.replace(0, std::string("fwd_fp8").size(), "transpose");
                hattn::bench::register_timed(t_name, [&buffers, s](benchmark::State& st) { bench_transpose(st, buffers, s); });
            }
        }
    }
    for (int d : kOtherHeadDims) {
        const Shape s{d, kOtherSeqlen, false, 0u};
        std::string fp8_name = shape_name("fwd_fp8", s);
        fp8_name.replace(fp8_name.find("/bf16/"), 6, "/e4m3/");
        hattn::bench::register_timed(shape_name("fwd", s), [&buffers, s](benchmark::State& st) { bench_bf16(st, buffers, s); });
        hattn::bench::register_timed(fp8_name, [&buffers, s](benchmark::State& st) { bench_fp8(st, buffers, s); });
    }
    return hattn::bench::run_benchmarks(argc, argv);
}
