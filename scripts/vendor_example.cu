// hattn/scripts/vendor_example.cu -- a consumer of the vendored single-file kernel.
//
// It includes nothing from hattn except the amalgamated header (scripts/amalgamate.py; the
// examples' own host helpers come from vendor_example_util.h), so
// compiling it proves that header stands alone:
//   python3 scripts/amalgamate.py -o /tmp/v/hattn_fwd_single.cuh && cp scripts/vendor_example.cu scripts/vendor_example_util.h /tmp/v/
//   cd /tmp/v && nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a vendor_example.cu -o vendor_example
// scripts/check_vendored.sh does exactly that (CI). On a Hopper GPU the program also runs one
// small causal bf16 forward pass at head_dim 128 through launch_fwd_head_dim<128> and checks it
// against a float64 reference on the host; elsewhere it says why it did not run and exits 0.
#include "hattn_fwd_single.cuh"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "vendor_example_util.h"

namespace {

constexpr int kHeadDim = 128;
constexpr int kBatch = 1;
constexpr int kHeads = 2;
constexpr int kSeqlen = 300;      // not a multiple of any tile size: exercises the tail masking
constexpr bool kCausal = true;
constexpr double kAtol = 1e-2;    // bf16 output: 8 mantissa bits, |O| < 1
constexpr double kRtol = 2e-2;
constexpr uint64_t kSeed = 0x9e3779b97f4a7c15ull;

using vendor_example::bf16_to_float;
using vendor_example::float_to_bf16;
using vendor_example::next_uniform;

}  // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("vendor_example: compiled and linked; no CUDA device, so not run\n");
        return 0;
    }
    int major = 0, minor = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    if (major != 9 || minor != 0) {
        std::printf("vendor_example: device is sm_%d%d, the kernel needs sm_90a; not run\n", major, minor);
        return 0;
    }

    // Contiguous [batch, seqlen, heads, head_dim] tensors.
    const size_t elements = size_t(kBatch) * kSeqlen * kHeads * kHeadDim;
    std::vector<uint16_t> host_q(elements), host_k(elements), host_v(elements), host_o(elements);
    uint64_t state = kSeed;
    for (auto* tensor : {&host_q, &host_k, &host_v}) {
        for (auto& x : *tensor) x = float_to_bf16(next_uniform(&state));
    }
    void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
    const size_t bytes = elements * sizeof(uint16_t);
    CHECK_CUDA(cudaMalloc(&q, bytes));
    CHECK_CUDA(cudaMalloc(&k, bytes));
    CHECK_CUDA(cudaMalloc(&v, bytes));
    CHECK_CUDA(cudaMalloc(&o, bytes));
    CHECK_CUDA(cudaMemcpy(q, host_q.data(), bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(k, host_k.data(), bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(v, host_v.data(), bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemset(o, 0xff, bytes));  // poison: bf16 0xffff is a NaN

    hattn::fwd::FwdArgs args;
    args.q = q;
    args.k = k;
    args.v = v;
    args.o = o;
    args.batch = kBatch;
    args.heads_q = args.heads_kv = kHeads;
    args.seqlen_q = args.seqlen_k = kSeqlen;
    args.head_dim = kHeadDim;
    const int64_t seq_stride = int64_t(kHeads) * kHeadDim, batch_stride = kSeqlen * seq_stride;
    args.q_batch_stride = args.k_batch_stride = args.v_batch_stride = args.o_batch_stride = batch_stride;
    args.q_seq_stride = args.k_seq_stride = args.v_seq_stride = args.o_seq_stride = seq_stride;
    args.q_head_stride = args.k_head_stride = args.v_head_stride = args.o_head_stride = kHeadDim;
    args.dtype = hattn::fwd::Dtype::kBf16;
    args.softmax_scale = 1.0f / std::sqrt(float(kHeadDim));
    args.causal = kCausal;

    std::string error;
    // Every head dim is instantiated (only kHeadDim runs), so the vendored file must carry every
    // wgmma shape the kernel uses.
    auto launch = [&](int head_dim) {
        switch (head_dim) {
            case 64: return hattn::fwd::launch_fwd_head_dim<64>(args, nullptr, &error);
            case 128: return hattn::fwd::launch_fwd_head_dim<128>(args, nullptr, &error);
            default: return hattn::fwd::launch_fwd_head_dim<256>(args, nullptr, &error);
        }
    };
    const cudaError_t launched = launch(kHeadDim);
    if (launched != cudaSuccess) {
        std::fprintf(stderr, "vendor_example: launch failed: %s (%s)\n", cudaGetErrorString(launched), error.c_str());
        return 1;
    }
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpy(host_o.data(), o, bytes, cudaMemcpyDeviceToHost));

    // float64 reference; causal with seqlen_q == seqlen_k: key j is visible to query i iff j <= i.
    int bad = 0;
    double err2 = 0.0, ref2 = 0.0;
    std::vector<double> p(kSeqlen);
    for (int h = 0; h < kHeads; ++h) {
        for (int i = 0; i < kSeqlen; ++i) {
            const int visible = kCausal ? i + 1 : kSeqlen;
            double row_max = -INFINITY;
            for (int j = 0; j < visible; ++j) {
                double dot = 0.0;
                for (int d = 0; d < kHeadDim; ++d) {
                    dot += double(bf16_to_float(host_q[(size_t(i) * kHeads + h) * kHeadDim + d])) *
                           double(bf16_to_float(host_k[(size_t(j) * kHeads + h) * kHeadDim + d]));
                }
                p[j] = dot * args.softmax_scale;
                row_max = std::fmax(row_max, p[j]);
            }
            double sum = 0.0;
            for (int j = 0; j < visible; ++j) sum += (p[j] = std::exp(p[j] - row_max));
            for (int d = 0; d < kHeadDim; ++d) {
                double ref = 0.0;
                for (int j = 0; j < visible; ++j) ref += p[j] * double(bf16_to_float(host_v[(size_t(j) * kHeads + h) * kHeadDim + d]));
                ref /= sum;
                const double got = bf16_to_float(host_o[(size_t(i) * kHeads + h) * kHeadDim + d]);
                const double diff = std::fabs(got - ref);
                if (!(diff <= kAtol + kRtol * std::fabs(ref))) {  // also catches NaN (poison left in place)
                    if (bad++ < 5) std::fprintf(stderr, "mismatch at head %d row %d col %d: got %g, want %g\n", h, i, d, got, ref);
                }
                err2 += (got - ref) * (got - ref);
                ref2 += ref * ref;
            }
        }
    }
    const double rel_l2 = std::sqrt(err2 / ref2);
    std::printf("vendor_example: d%d causal bf16 b%d h%d s%d: %d bad elements, relative L2 error %.3g\n", kHeadDim, kBatch,
                kHeads, kSeqlen, bad, rel_l2);
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(o);
    return bad == 0 && rel_l2 < 1e-2 ? 0 : 1;
}
