// hattn/bench/host_overhead_bench.cu -- what one call costs the host: the time a thread spends
// inside each entry point (validation, tensor maps, attribute set-up, the launch) on problems so
// small that the GPU work is a few microseconds, and the CUDA runtime calls that set-up is made of.
//
// Why: at short sequence lengths a layer's attention is a few microseconds of GPU work, so a caller
// that launches back to back is bound by the host once a call costs that much; every per-call
// query the answer of which never changes (a driver entry point, a kernel's shared-memory
// attribute, an occupancy) belongs in a cache, not in the call (issue 7).
//
// What it measures (time per call on the calling thread, std::chrono around the call alone; the
// stream is synchronized every kSyncEvery calls outside the timed span so the launch queue never
// fills):
//   runtime/<call>        the CUDA runtime calls a launch can make: cudaGetDevice +
//                         cudaDeviceGetAttribute, cudaFuncSetAttribute, an occupancy query,
//                         cudaGetDriverEntryPointByVersion, an empty kernel launch (the floor)
//   api/<entry>/<shape>   hattn_fwd (bf16, d 64 / 128), hattn_bwd (d 128), hattn_fp8_prepass
//                         (Hadamard), hattn_fwd_fp8 (d 128, V^T from the pre-pass): b1 h2 s128
//
// NOTE: the inputs are zeros (cudaMemset): the kernels' speed is not what is measured here.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "hattn.h"
#include "micro_harness.cuh"

namespace {

using namespace hattn::bench;

constexpr int kSyncEvery = 64;  // calls between two stream synchronizations (outside the timing)
constexpr int kBatch = 1, kHeads = 2, kSeqlen = 128;
constexpr int kEmptySmemBytes = 100 * 1024;

__global__ void empty_kernel() {}

// Times fn() alone per iteration; every kSyncEvery calls the device catches up, untimed.
void time_calls(benchmark::State& state, const std::function<void()>& fn) {
    int since_sync = 0;
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        const auto t1 = std::chrono::steady_clock::now();
        state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
        if (++since_sync == kSyncEvery) {
            HATTN_BENCH_CHECK(cudaDeviceSynchronize());
            since_sync = 0;
        }
    }
    HATTN_BENCH_CHECK(cudaDeviceSynchronize());
}

void require(hattn_status st, const char* what) {
    if (st != HATTN_SUCCESS) {
        std::fprintf(stderr, "%s: %s\n", what, hattn_status_string(st));
        std::exit(EXIT_FAILURE);
    }
}

// Device buffers for every entry point's tiny problem (zeros; sizes for the largest head dim used).
struct Buffers {
    static constexpr int kMaxHeadDim = 128;
    static constexpr size_t kElems = size_t{kBatch} * kSeqlen * kHeads * kMaxHeadDim;
    std::vector<void*> owned;
    void* alloc(size_t bytes) {
        void* p = nullptr;
        HATTN_BENCH_CHECK(cudaMalloc(&p, bytes));
        HATTN_BENCH_CHECK(cudaMemset(p, 0, bytes));
        owned.push_back(p);
        return p;
    }
    void* q = alloc(kElems * 2);
    void* k = alloc(kElems * 2);
    void* v = alloc(kElems * 2);
    void* o = alloc(kElems * 2);
    void* dout = alloc(kElems * 2);
    void* dq = alloc(kElems * 2);
    void* dk = alloc(kElems * 2);
    void* dv = alloc(kElems * 2);
    float* lse = static_cast<float*>(alloc(size_t{kBatch} * kHeads * kSeqlen * 4));
    void* q8 = alloc(kElems);
    void* k8 = alloc(kElems);
    void* vt8 = alloc(kElems);
    float* descale = static_cast<float*>(alloc(3 * 64 * sizeof(float)));
    void* workspace = alloc(hattn_bwd_workspace_size(kBatch, kHeads, kSeqlen, kMaxHeadDim));
    ~Buffers() {
        for (void* p : owned) cudaFree(p);
    }
};

void register_runtime() {
    benchmark::RegisterBenchmark("runtime/get_device+attribute", [](benchmark::State& state) {
        time_calls(state, [] {
            int device = 0, sms = 0;
            HATTN_BENCH_CHECK(cudaGetDevice(&device));
            HATTN_BENCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        });
    })->UseManualTime()->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("runtime/func_set_attribute", [](benchmark::State& state) {
        time_calls(state, [] {
            HATTN_BENCH_CHECK(
                cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kEmptySmemBytes));
        });
    })->UseManualTime()->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("runtime/occupancy_query", [](benchmark::State& state) {
        time_calls(state, [] {
            int per_sm = 0;
            HATTN_BENCH_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, empty_kernel, 128, 0));
        });
    })->UseManualTime()->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("runtime/driver_entry_point", [](benchmark::State& state) {
        time_calls(state, [] {
            void* fn = nullptr;
            cudaDriverEntryPointQueryResult query;
            HATTN_BENCH_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &query));
        });
    })->UseManualTime()->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("runtime/empty_launch", [](benchmark::State& state) {
        time_calls(state, [] {
            empty_kernel<<<1, 32>>>();
            HATTN_BENCH_CHECK(cudaGetLastError());
        });
    })->UseManualTime()->Unit(benchmark::kMicrosecond);
}

void register_api(Buffers& b) {
    const std::string shape = "b" + std::to_string(kBatch) + "_h" + std::to_string(kHeads) + "_s" + std::to_string(kSeqlen);
    for (int d : {64, 128}) {
        benchmark::RegisterBenchmark(("api/fwd/" + shape + "_d" + std::to_string(d)).c_str(), [&b, d](benchmark::State& state) {
            const hattn_fwd_params p = hattn_fwd_params_contiguous(b.q, b.k, b.v, b.o, kBatch, kHeads, kHeads, kSeqlen,
                                                                   kSeqlen, d, HATTN_DTYPE_BF16);
            time_calls(state, [&p] { require(hattn_fwd(&p, nullptr), "hattn_fwd"); });
        })->UseManualTime()->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark(("api/bwd/" + shape + "_d128").c_str(), [&b](benchmark::State& state) {
        hattn_bwd_params p = hattn_bwd_params_contiguous(b.q, b.k, b.v, b.o, b.dout, b.lse, b.dq, b.dk, b.dv, kBatch,
                                                         kHeads, kHeads, kSeqlen, kSeqlen, 128, HATTN_DTYPE_BF16);
        p.workspace = b.workspace;
        p.workspace_size = hattn_bwd_workspace_size(kBatch, kHeads, kSeqlen, 128);
        time_calls(state, [&p] { require(hattn_bwd(&p, nullptr), "hattn_bwd"); });
    })->UseManualTime()->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("api/fp8_prepass_hadamard/" + shape + "_d128").c_str(), [&b](benchmark::State& state) {
        hattn_fp8_prepass_params p = hattn_fp8_prepass_params_contiguous(
            b.q, b.k, b.v, b.q8, b.k8, b.vt8, b.descale, b.descale + 64, b.descale + 128, kBatch, kHeads, kHeads,
            kSeqlen, kSeqlen, 128, HATTN_DTYPE_BF16);
        p.hadamard = 1;
        p.flags = HATTN_FP8_PREPASS_V_TRANSPOSED;  // V^T for api/fwd_fp8
        time_calls(state, [&p] { require(hattn_fp8_prepass(&p, nullptr), "hattn_fp8_prepass"); });
    })->UseManualTime()->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("api/fwd_fp8/" + shape + "_d128").c_str(), [&b](benchmark::State& state) {
        hattn_fwd_fp8_params p =
            hattn_fwd_fp8_params_contiguous(b.q8, b.k8, b.vt8, b.o, b.descale, b.descale + 64, b.descale + 128, kBatch,
                                            kHeads, kHeads, kSeqlen, kSeqlen, 128, HATTN_DTYPE_BF16);
        p.flags = HATTN_FWD_FP8_V_TRANSPOSED;
        time_calls(state, [&p] { require(hattn_fwd_fp8(&p, nullptr), "hattn_fwd_fp8"); });
    })->UseManualTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace

int main(int argc, char** argv) {
    Buffers* buffers = nullptr;
    const int rc = benchmark_main(
        argc, argv,
        [&buffers](const DeviceInfo&) {
            buffers = new Buffers;
            register_runtime();
            register_api(*buffers);
        },
        [&buffers] { delete buffers; });
    return rc;
}
