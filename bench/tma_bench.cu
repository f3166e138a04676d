// hattn/bench/tma_bench.cu -- HBM read bandwidth through TMA, beside cudaMemcpy's, same run.
//
// What it measures:
//   memcpy/d2d             cudaMemcpyAsync device-to-device of kBytes; counters count BOTH the
//                          bytes read and the bytes written (read_plus_write_TBps), the way
//                          copy bandwidth is usually quoted, and the read half alone.
//   tma/load_ring          one CTA per SM streams a kBytes tensor (bf16 [rows, 64], 128B swizzle,
//                          boxes of 256 rows = 32 KB) through a kStages-deep TMA ring; the
//                          consumer warp only touches one word per stage and releases it.
//                          Counter read_TBps counts bytes read (nothing is written), plus
//                          bytes/clk/SM and the ratio to the memcpy's read+write rate.
//
// Hardware expectation (H200): HBM3e 4.8 TB/s datasheet; a d2d copy measured ~4.1 TB/s
// (read + write). A pure read stream usually gets a little more than a copy, so TMA reads
// should land around 4-4.5 TB/s: about 1 to 1.1x the memcpy's read+write figure.
//
// NOTES:
//  - kBytes (4 GiB) is 80x the 50 MB L2: every launch streams from HBM, no flush needed.
//  - Little's law: ~35 GB/s per SM x ~1 us latency ~ 35 KB in flight per SM; the ring keeps
//    kStages x 32 KB = 192 KB in flight, far more than enough.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "kernels/sm90/tensor_map.h"
#include "micro_harness.cuh"
#include "ptx/fence.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "ptx/warp.cuh"

namespace {

using namespace hattn;
using namespace hattn::bench;

constexpr uint64_t kBytes = 4ull << 30;
constexpr int kRowElems = 64;                      // bf16: one 128-byte swizzle row
constexpr int kRowBytes = kRowElems * 2;
constexpr int kBoxRows = 256;                      // TMA's largest box dimension
constexpr uint32_t kBoxBytes = kBoxRows * kRowBytes;  // 32 KB per stage
constexpr int kStages = 6;
constexpr uint64_t kRows = kBytes / kRowBytes;
constexpr int kBoxes = int(kRows / kBoxRows);
constexpr int kThreads = 64;                       // warp 0: producer, warp 1: consumer
constexpr int kSmemAlign = 1024;                   // 128B-swizzled TMA destinations
constexpr uint8_t kFillByte = 0x3C;                // non-zero data (a bf16 ~ 0.0115 pattern)

struct alignas(kSmemAlign) RingSmem {
    uint8_t stage[kStages][kBoxBytes];
    uint64_t full[kStages];   // TMA landed (transaction count)
    uint64_t empty[kStages];  // consumer released
};
constexpr int kSmemBytes = int(sizeof(RingSmem)) + kSmemAlign;  // + alignment slack

__global__ void __launch_bounds__(kThreads, 1)
    tma_stream_kernel(const __grid_constant__ CUtensorMap tmap, int boxes, uint32_t never_value, uint32_t* sink,
                      SpanRecord* spans) {
    extern __shared__ uint8_t smem_raw[];
    RingSmem& s = *reinterpret_cast<RingSmem*>(
        smem_raw + ((kSmemAlign - (ptx::smem_u32(smem_raw) % kSmemAlign)) % kSmemAlign));
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (threadIdx.x == 0) {
        ptx::prefetch_tensormap(&tmap);
        for (int i = 0; i < kStages; ++i) {
            ptx::mbarrier_init(&s.full[i], 1);
            ptx::mbarrier_init(&s.empty[i], 1);
        }
        ptx::fence_mbarrier_init();  // barriers visible to the TMA unit and the other warp
    }
    __syncthreads();

    const SpanStart t0 = span_begin();
    uint32_t touched = 0;
    if (warp == 0) {
        if (ptx::elect_one_sync()) {  // producer: one lane issues every load
            int i = 0;
            for (int box = blockIdx.x; box < boxes; box += gridDim.x, ++i) {
                const int stage = i % kStages;
                ptx::mbarrier_wait(&s.empty[stage], ((i / kStages) & 1) ^ 1);
                ptx::mbarrier_arrive_expect_tx(&s.full[stage], kBoxBytes);
                ptx::tma_load_2d(s.stage[stage], &tmap, &s.full[stage], 0, box * kBoxRows);
            }
        }
    } else if (lane == 0) {  // consumer: wait, touch one word, release
        int i = 0;
        for (int box = blockIdx.x; box < boxes; box += gridDim.x, ++i) {
            const int stage = i % kStages;
            ptx::mbarrier_wait(&s.full[stage], (i / kStages) & 1);
            touched += reinterpret_cast<const uint32_t*>(s.stage[stage])[i % (kBoxBytes / 4)];
            ptx::mbarrier_arrive(&s.empty[stage]);
        }
    }
    __syncwarp();
    if (lane == 0) span_end(t0, spans, warp);
    if (touched == never_value) sink[blockIdx.x] = touched;
}

struct Buffers {
    void* src = nullptr;
    void* dst = nullptr;
    double memcpy_rw_bytes_per_s = 0;  // filled by memcpy/d2d for tma/load_ring's ratio
};

void register_all(const DeviceInfo& dev, Buffers& buf) {
    HATTN_BENCH_CHECK(cudaMalloc(&buf.src, kBytes));
    HATTN_BENCH_CHECK(cudaMalloc(&buf.dst, kBytes));
    HATTN_BENCH_CHECK(cudaMemset(buf.src, kFillByte, kBytes));
    HATTN_BENCH_CHECK(cudaDeviceSynchronize());

    benchmark::RegisterBenchmark("memcpy/d2d", [&buf](benchmark::State& state) {
        DeviceSpans unused(1);  // no kernel of ours: cycles stay 0
        const Measurement m = run_timed(state, unused, [&](cudaStream_t stream) {
            HATTN_BENCH_CHECK(cudaMemcpyAsync(buf.dst, buf.src, kBytes, cudaMemcpyDeviceToDevice, stream));
        });
        buf.memcpy_rw_bytes_per_s = 2.0 * kBytes / m.seconds;
        state.counters["kernel_ms"] = m.seconds * 1e3;
        state.counters["read_plus_write_TBps"] = buf.memcpy_rw_bytes_per_s * 1e-12;
        state.counters["read_TBps"] = 0.5 * buf.memcpy_rw_bytes_per_s * 1e-12;
        state.counters["bytes_copied"] = double(kBytes);
    })->UseManualTime()->Unit(benchmark::kMillisecond);

    benchmark::RegisterBenchmark("tma/load_ring", [dev, &buf](benchmark::State& state) {
        sm90::TensorMapSpec spec;
        spec.base = buf.src;
        spec.dtype = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
        spec.rank = 2;
        spec.dims[0] = kRowElems;
        spec.dims[1] = kRows;
        spec.strides_bytes[0] = kRowBytes;
        spec.box[0] = kRowElems;
        spec.box[1] = kBoxRows;
        spec.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
        CUtensorMap tmap;
        std::string error;
        if (!sm90::encode_tensor_map(&tmap, spec, &error)) {
            state.SkipWithError(error.c_str());
            return;
        }
        HATTN_BENCH_CHECK(cudaFuncSetAttribute(tma_stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               kSmemBytes));
        const int grid = dev.sm_count;
        uint32_t* sink = nullptr;
        HATTN_BENCH_CHECK(cudaMalloc(&sink, grid * sizeof(uint32_t)));
        DeviceSpans spans(grid);
        constexpr uint32_t kNever = 0xFFFFFFFFu;  // a sum of 0x3C3C3C3C words lands here (almost) never
        const Measurement m = run_timed(state, spans, [&](cudaStream_t stream) {
            tma_stream_kernel<<<grid, kThreads, kSmemBytes, stream>>>(tmap, kBoxes, kNever, sink, spans.data());
        });
        HATTN_BENCH_CHECK(cudaFree(sink));

        const double bytes = double(kBoxes) * kBoxBytes;
        report_rates(state, dev, m, bytes, 0.0);
        state.counters["bytes_per_clk_per_SM"] = state.counters["per_SM_per_clk"];
        state.counters["read_TBps"] = m.seconds > 0 ? bytes / m.seconds * 1e-12 : 0.0;
        if (buf.memcpy_rw_bytes_per_s > 0) {
            state.counters["tma_read_over_memcpy_rw"] = bytes / m.seconds / buf.memcpy_rw_bytes_per_s;
        }
    })->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
    Buffers buf;
    const int rc = benchmark_main(argc, argv, [&](const DeviceInfo& dev) { register_all(dev, buf); });
    if (buf.src) cudaFree(buf.src);
    if (buf.dst) cudaFree(buf.dst);
    return rc;
}
