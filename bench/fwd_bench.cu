// hattn/bench/fwd_bench.cu -- forward-attention throughput through the public C API.
//
// The sweep is the FlashAttention-3 paper's (attention_harness.cuh): bf16, batch * seqlen = 16k
// tokens, heads * head_dim = 2048, head_dim in {64, 128, 256}, seqlen 512 .. 16k, full and causal;
// plus the schedule ablation at head_dim 128, seqlen 8k (HATTN_FWD_* flags). Every benchmark reports
//   TFLOPS      = forward FLOPs / measured seconds (4 * b * h * s * s * d, half of it for causal)
//   pct_of_989  = TFLOPS as a percentage of the dense bf16 tensor peak of an H100/H200 SXM.
//
// NOTES (the timing policy itself is in attention_harness.cuh):
//  - Inputs are random, non-zero and rotated between two independent sets: tensor cores run
//    faster on zeros, and the tail of one launch's K/V would otherwise still sit in L2 for the
//    next launch (the 50 MB L2 is as large as a whole K tensor of small shapes).
//  - All shapes in the sweep hold the same number of elements (16k tokens x 2048 features), so one
//    set of buffers, allocated and filled on first use, serves every benchmark.
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

// The schedule ablation.
constexpr int kAblationHeadDim = 128;
constexpr int kAblationSeqlen = 8192;

constexpr int kInputSets = 2;  // rotate Q/K/V between launches (L2 reuse across launches)
constexpr uint32_t kSeed = 0x5eed1234u;

// The sweep's buffers: kInputSets sets of Q, K, V and one O.
class Workspace {
public:
    Workspace() = default;
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;

    // Empty on success; otherwise the reason every benchmark should be skipped.
    const std::string& prepare() { return arena_.prepare(); }

    const void* q(int set) const { return q_[set]; }
    const void* k(int set) const { return k_[set]; }
    const void* v(int set) const { return v_[set]; }
    void* o() const { return o_; }
    void* counters() const { return counters_; }
    cudaStream_t stream() const { return arena_.stream(); }

private:
    std::string fill(hattn::bench::DeviceArena& arena) {
        uint32_t seed = kSeed;
        for (int set = 0; set < kInputSets; ++set) {
            for (void** slot : {&q_[set], &k_[set], &v_[set]}) {
                if (std::string e = arena.random_tensor(slot, seed++); !e.empty()) return e;
            }
        }
        if (std::string e = arena.allocate(&o_, size_t(hattn::bench::kTensorElements) * sizeof(__nv_bfloat16)); !e.empty())
            return e;
        // The forward's workspace (causal problems and d64's partial full tiles take the dynamic tile
        // walk, d128 full masks split their last pass through it), zero-filled once.
        if (std::string e = arena.allocate(&counters_, hattn_fwd_workspace_size()); !e.empty()) return e;
        const cudaError_t rc = cudaMemset(counters_, 0, hattn_fwd_workspace_size());
        return rc == cudaSuccess ? std::string() : cuda_error("cudaMemset", rc);
    }

    void* q_[kInputSets] = {};
    void* k_[kInputSets] = {};
    void* v_[kInputSets] = {};
    void* o_ = nullptr;
    void* counters_ = nullptr;
    hattn::bench::DeviceArena arena_{[this](hattn::bench::DeviceArena& a) { return fill(a); }};
};

void bench_forward(benchmark::State& state, Workspace& workspace, Shape shape) {
    if (const std::string& reason = workspace.prepare(); !reason.empty()) {
        state.SkipWithError(reason.c_str());
        return;
    }
    hattn_fwd_params params[kInputSets];
    for (int set = 0; set < kInputSets; ++set) {
        params[set] = hattn_fwd_params_contiguous(workspace.q(set), workspace.k(set), workspace.v(set),
                                                  workspace.o(), shape.batch(), shape.heads(), shape.heads(),
                                                  shape.seqlen, shape.seqlen, shape.head_dim, HATTN_DTYPE_BF16);
        params[set].causal = shape.causal ? 1 : 0;
        params[set].flags = shape.flags;
        params[set].workspace = workspace.counters();
        params[set].workspace_size = hattn_fwd_workspace_size();
    }
    cudaStream_t stream = workspace.stream();
    int next_set = 0;
    hattn::bench::run_timed(state, stream, shape.forward_flops(), [&](std::string* error) {
        const hattn_fwd_params& p = params[next_set];
        next_set = (next_set + 1) % kInputSets;
        const hattn_status status = hattn_fwd(&p, stream);
        if (status != HATTN_SUCCESS) {
            *error = hattn::bench::launch_error("hattn_fwd", p, status, hattn_fwd_validate);
            return false;
        }
        if (const cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) {
            *error = cuda_error("after hattn_fwd", rc);
            return false;
        }
        return true;
    });
}

std::string flags_name(unsigned flags) {
    if (flags == 0) return "default";
    std::string name;
    if (flags & HATTN_FWD_NO_PINGPONG) name += "no_pingpong";
    if (flags & HATTN_FWD_NO_INTRA_WG_OVERLAP) name += std::string(name.empty() ? "" : "_and_") + "no_intra_wg_overlap";
    return name;
}

void register_benchmark(const std::string& name, Workspace& workspace, const Shape& shape) {
    hattn::bench::register_timed(name, [&workspace, shape](benchmark::State& state) {
        bench_forward(state, workspace, shape);
    });
}

}  // namespace

int main(int argc, char** argv) {
    Workspace workspace;
    hattn::bench::for_each_sweep_shape(
        [&](const Shape& shape) { register_benchmark(shape_name("fwd", shape), workspace, shape); });
    const unsigned kAblationFlags[] = {0u, HATTN_FWD_NO_PINGPONG, HATTN_FWD_NO_INTRA_WG_OVERLAP,
                                       HATTN_FWD_NO_PINGPONG | HATTN_FWD_NO_INTRA_WG_OVERLAP};
    for (unsigned flags : kAblationFlags) {
        const Shape shape{kAblationHeadDim, kAblationSeqlen, false, flags};
        register_benchmark(shape_name("fwd_ablation", shape) + "/" + flags_name(flags), workspace, shape);
    }

    return hattn::bench::run_benchmarks(argc, argv);
}
