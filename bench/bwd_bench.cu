// hattn/bench/bwd_bench.cu -- backward-attention throughput through the public C API.
//
// The sweep is the forward's (attention_harness.cuh): bf16, batch * seqlen = 16k tokens, heads *
// head_dim = 2048, head_dim in {64, 128, 256}, seqlen 512 .. 16k, full and causal; plus
// HATTN_BWD_DETERMINISTIC at head_dim 128, seqlen 2k and 8k. Every benchmark reports
//   TFLOPS      = backward FLOPs / measured seconds, backward FLOPs = 2.5 x the forward's
//                 (5 GEMMs against 2: 10 * b * h * s * s * d, half of it for causal)
//   pct_of_989  = TFLOPS as a percentage of the dense bf16 tensor peak of an H100/H200 SXM.
//
// NOTES (the timing policy itself is in attention_harness.cuh):
//  - Q, K, V and dO are random and non-zero, O and LSE come from hattn_fwd on them (the backward's
//    exponentials depend on LSE being the real one), and all of it is rotated between two
//    independent sets, as in fwd_bench.
//  - Every shape holds the same number of elements, so one set of buffers serves every benchmark;
//    O and LSE are recomputed for each shape before its timing starts, and the workspace grows to
//    the largest hattn_bwd_workspace_size seen.
#include <benchmark/benchmark.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attention_harness.cuh"
#include "hattn.h"

namespace {

using hattn::bench::cuda_error;
using hattn::bench::Shape;
using hattn::bench::shape_name;

// The deterministic mode (dQ reduced across KV blocks in a fixed order).
constexpr int kDeterministicHeadDim = 128;
constexpr int kDeterministicSeqlens[] = {2048, 8192};

constexpr int kInputSets = 2;  // rotate the inputs between launches (L2 reuse across launches)
constexpr uint32_t kSeed = 0xb3d51234u;
// Backward FLOPs per forward FLOP: S, dP, dV, dK and dQ against the forward's S and O.
constexpr double kBackwardFlopsPerForwardFlop = 2.5;

// The sweep's buffers: kInputSets sets of Q, K, V, dO, O and LSE; one dQ, dK, dV; the workspace.
class Workspace {
public:
    static constexpr int64_t kElements = hattn::bench::kTensorElements;
    static constexpr int64_t kMaxLseElements = hattn::bench::kTokens * hattn::bench::kModelWidth / 64;  // d >= 64

    struct InputSet {
        void *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr, *o = nullptr;
        float* lse = nullptr;
    };

    Workspace() = default;
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;
    ~Workspace() {
        if (workspace_ != nullptr) cudaFree(workspace_);
    }

    // Empty on success; otherwise the reason every benchmark should be skipped.
    const std::string& prepare() { return arena_.prepare(); }

    // At least `bytes` of workspace (256-byte aligned: cudaMalloc); NULL on failure (*error set).
    // Grown between benchmarks only, when no launch is in flight.
    void* workspace(size_t bytes, std::string* error) {
        if (bytes > workspace_bytes_) {
            if (workspace_ != nullptr) cudaFree(workspace_);
            workspace_ = nullptr;
            workspace_bytes_ = 0;
            const cudaError_t rc = cudaMalloc(&workspace_, bytes);
            if (rc != cudaSuccess) {
                workspace_ = nullptr;
                *error = cuda_error("cudaMalloc (workspace)", rc);
                return nullptr;
            }
            workspace_bytes_ = bytes;
        }
        return workspace_;
    }

    const InputSet& set(int i) const { return sets_[i]; }
    void* dq() const { return dq_; }
    void* dk() const { return dk_; }
    void* dv() const { return dv_; }
    cudaStream_t stream() const { return arena_.stream(); }

private:
    std::string fill(hattn::bench::DeviceArena& arena) {
        uint32_t seed = kSeed;
        for (InputSet& s : sets_) {
            for (void** slot : {&s.q, &s.k, &s.v, &s.dout}) {
                if (std::string e = arena.random_tensor(slot, seed++); !e.empty()) return e;
            }
            if (std::string e = arena.allocate(&s.o, kElements * sizeof(__nv_bfloat16)); !e.empty()) return e;
            void* lse = nullptr;
            if (std::string e = arena.allocate(&lse, kMaxLseElements * sizeof(float)); !e.empty()) return e;
            s.lse = static_cast<float*>(lse);
        }
        for (void** slot : {&dq_, &dk_, &dv_}) {
            if (std::string e = arena.allocate(slot, kElements * sizeof(__nv_bfloat16)); !e.empty()) return e;
        }
        return {};
    }

    InputSet sets_[kInputSets];
    void *dq_ = nullptr, *dk_ = nullptr, *dv_ = nullptr;
    void* workspace_ = nullptr;  // not the arena's: it is replaced when it grows
    size_t workspace_bytes_ = 0;
    hattn::bench::DeviceArena arena_{[this](hattn::bench::DeviceArena& a) { return fill(a); }};
};

void bench_backward(benchmark::State& state, Workspace& workspace, Shape shape) {
    if (const std::string& reason = workspace.prepare(); !reason.empty()) {
        state.SkipWithError(reason.c_str());
        return;
    }
    const int b = shape.batch(), h = shape.heads(), s = shape.seqlen, d = shape.head_dim;
    cudaStream_t stream = workspace.stream();
    std::string error;
    const size_t workspace_bytes = hattn_bwd_workspace_size(b, h, s, d);
    void* ws = workspace.workspace(workspace_bytes, &error);
    if (ws == nullptr) {
        state.SkipWithError(error.c_str());
        return;
    }
    hattn_bwd_params params[kInputSets];
    for (int set = 0; set < kInputSets; ++set) {
        const Workspace::InputSet& in = workspace.set(set);
        // O and LSE of this shape, from the forward.
        hattn_fwd_params fwd =
            hattn_fwd_params_contiguous(in.q, in.k, in.v, in.o, b, h, h, s, s, d, HATTN_DTYPE_BF16);
        fwd.causal = shape.causal ? 1 : 0;
        fwd.lse = in.lse;
        const hattn_status fst = hattn_fwd(&fwd, stream);
        if (fst != HATTN_SUCCESS) {
            state.SkipWithError(hattn::bench::launch_error("hattn_fwd", fwd, fst, hattn_fwd_validate).c_str());
            return;
        }
        params[set] = hattn_bwd_params_contiguous(in.q, in.k, in.v, in.o, in.dout, in.lse, workspace.dq(),
                                                  workspace.dk(), workspace.dv(), b, h, h, s, s, d, HATTN_DTYPE_BF16);
        params[set].causal = fwd.causal;
        params[set].flags = shape.flags;
        params[set].workspace = ws;
        params[set].workspace_size = workspace_bytes;
    }
    if (const cudaError_t rc = cudaStreamSynchronize(stream); rc != cudaSuccess) {
        state.SkipWithError(cuda_error("forward for O and LSE", rc).c_str());
        return;
    }
    int next_set = 0;
    hattn::bench::run_timed(state, stream, kBackwardFlopsPerForwardFlop * shape.forward_flops(),
                            [&](std::string* launch_failure) {
                                const hattn_bwd_params& p = params[next_set];
                                next_set = (next_set + 1) % kInputSets;
                                const hattn_status status = hattn_bwd(&p, stream);
                                if (status != HATTN_SUCCESS) {
                                    *launch_failure = hattn::bench::launch_error("hattn_bwd", p, status, hattn_bwd_validate);
                                    return false;
                                }
                                if (const cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) {
                                    *launch_failure = cuda_error("after hattn_bwd", rc);
                                    return false;
                                }
                                return true;
                            });
}

void register_benchmark(const std::string& name, Workspace& workspace, const Shape& shape) {
    hattn::bench::register_timed(name, [&workspace, shape](benchmark::State& state) {
        bench_backward(state, workspace, shape);
    });
}

}  // namespace

int main(int argc, char** argv) {
    Workspace workspace;
    hattn::bench::for_each_sweep_shape(
        [&](const Shape& shape) { register_benchmark(shape_name("bwd", shape), workspace, shape); });
    for (int seqlen : kDeterministicSeqlens) {
        for (bool causal : {false, true}) {
            const Shape shape{kDeterministicHeadDim, seqlen, causal, unsigned{HATTN_BWD_DETERMINISTIC}};
            register_benchmark(shape_name("bwd_deterministic", shape), workspace, shape);
        }
    }
    return hattn::bench::run_benchmarks(argc, argv);
}
