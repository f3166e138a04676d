// hattn/scripts/vendor_fp8_example.cu -- a consumer of the vendored FP8 single file
// (scripts/amalgamate.py --kernel fp8: the FP8 pre-pass and the FP8 forward).
//
// It includes nothing from hattn except the amalgamated header (and the examples' host helpers in
// vendor_example_util.h), so compiling it proves that header stands alone; scripts/check_vendored.sh
// does that in CI. On a Hopper GPU it also runs one small problem end to end: bf16 Q, K, V ->
// launch_fp8_prepass_head_dim<128> (random-sign Hadamard on Q and K, 128-row block e4m3
// quantization) -> launch_fwd_fp8_head_dim<128> (V^T into a workspace, then the attention), and
// checks O against a float64 attention of the unquantized bf16 inputs on the host (the Hadamard
// rotation leaves Q K^T unchanged). Elsewhere it says why it did not run and exits 0.
#include "hattn_fp8_single.cuh"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "vendor_example_util.h"

namespace {

constexpr int kHeadDim = 128;
constexpr int kBatch = 1;
constexpr int kHeads = 2;
constexpr int kSeqlen = 300;  // three quantization blocks, the last one partial
constexpr uint64_t kHadamardSeed = 0x5eed;
constexpr uint64_t kSeed = 0x243f6a8885a308d3ull;
// e4m3 keeps 3 mantissa bits: O of N(0,1)-like inputs lands within a few percent (hattn's FP8
// tests bound the relative L2 error by 8e-2 for the pre-pass + forward path).
constexpr double kRelL2Limit = 8e-2;

using vendor_example::bf16_to_float;
using vendor_example::float_to_bf16;
using vendor_example::next_uniform;

// [batch, seqlen, heads, head_dim] element (b, s, h, 0), contiguous.
constexpr int64_t kHeadStride = kHeadDim;
constexpr int64_t kSeqStride = int64_t(kHeads) * kHeadDim;
constexpr int64_t kBatchStride = kSeqlen * kSeqStride;

hattn::fp8::Fp8Tensor prepass_tensor(const void* in, void* out, float* descale) {
    hattn::fp8::Fp8Tensor t;
    t.in = in;
    t.out = out;
    t.descale = descale;
    t.seqlen = kSeqlen;
    t.heads = kHeads;
    t.in_batch_stride = t.out_batch_stride = kBatchStride;  // bf16 elements in, e4m3 bytes out
    t.in_seq_stride = t.out_seq_stride = kSeqStride;
    t.in_head_stride = t.out_head_stride = kHeadStride;
    return t;
}

}  // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("vendor_fp8_example: compiled and linked; no CUDA device, so not run\n");
        return 0;
    }
    int major = 0, minor = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    if (major != 9 || minor != 0) {
        std::printf("vendor_fp8_example: device is sm_%d%d, the kernels need sm_90a; not run\n", major, minor);
        return 0;
    }

    const size_t elements = size_t(kBatch) * kSeqlen * kHeads * kHeadDim;
    const int blocks = (kSeqlen + hattn::fp8::kBlockRows - 1) / hattn::fp8::kBlockRows;
    const size_t descales = size_t(kBatch) * kHeads * blocks;
    std::vector<uint16_t> host_q(elements), host_k(elements), host_v(elements), host_o(elements);
    uint64_t state = kSeed;
    for (auto* tensor : {&host_q, &host_k, &host_v}) {
        for (auto& x : *tensor) x = float_to_bf16(2.0f * next_uniform(&state));
    }

    void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *q8 = nullptr, *k8 = nullptr, *v8 = nullptr,
         *vt = nullptr;
    float *q_descale = nullptr, *k_descale = nullptr, *v_descale = nullptr;
    const size_t bytes16 = elements * sizeof(uint16_t);
    const int64_t vt_bytes = hattn::fwd_fp8::vt_bytes(kBatch, kHeads, kSeqlen, kHeadDim);
    for (void** p : {&q, &k, &v, &o}) CHECK_CUDA(cudaMalloc(p, bytes16));
    for (void** p : {&q8, &k8, &v8}) CHECK_CUDA(cudaMalloc(p, elements));  // one byte per e4m3 element
    for (float** p : {&q_descale, &k_descale, &v_descale}) CHECK_CUDA(cudaMalloc(p, descales * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&vt, size_t(vt_bytes)));  // cudaMalloc's 256-byte alignment is what V^T needs
    CHECK_CUDA(cudaMemcpy(q, host_q.data(), bytes16, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(k, host_k.data(), bytes16, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(v, host_v.data(), bytes16, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemset(o, 0xff, bytes16));  // poison: bf16 0xffff is a NaN

    hattn::fp8::Fp8PrepassArgs pre;
    pre.q = prepass_tensor(q, q8, q_descale);
    pre.k = prepass_tensor(k, k8, k_descale);
    pre.v = prepass_tensor(v, v8, v_descale);
    pre.batch = kBatch;
    pre.head_dim = kHeadDim;
    pre.dtype = hattn::fwd::Dtype::kBf16;
    pre.hadamard = true;  // V is quantized only: rotating it would change O
    pre.hadamard_seed = kHadamardSeed;

    hattn::fwd_fp8::Fp8FwdArgs args;
    args.q = q8;
    args.k = k8;
    args.v = v8;
    args.o = o;
    args.q_descale = q_descale;
    args.k_descale = k_descale;
    args.v_descale = v_descale;
    args.vt = vt;
    args.batch = kBatch;
    args.heads_q = args.heads_kv = kHeads;
    args.seqlen_q = args.seqlen_k = kSeqlen;
    args.head_dim = kHeadDim;
    args.q_batch_stride = args.k_batch_stride = args.v_batch_stride = args.o_batch_stride = kBatchStride;
    args.q_seq_stride = args.k_seq_stride = args.v_seq_stride = args.o_seq_stride = kSeqStride;
    args.q_head_stride = args.k_head_stride = args.v_head_stride = args.o_head_stride = kHeadStride;
    args.o_dtype = hattn::fwd::Dtype::kBf16;
    args.softmax_scale = 1.0f / std::sqrt(float(kHeadDim));

    // Every head dim of both launchers is instantiated (only kHeadDim runs), so the vendored file
    // must carry every wgmma shape the FP8 kernel uses.
    std::string error;
    auto prepass = [&](int head_dim) {
        switch (head_dim) {
            case 64: return hattn::fp8::launch_fp8_prepass_head_dim<64>(pre, nullptr, &error);
            case 128: return hattn::fp8::launch_fp8_prepass_head_dim<128>(pre, nullptr, &error);
            default: return hattn::fp8::launch_fp8_prepass_head_dim<256>(pre, nullptr, &error);
        }
    };
    auto forward = [&](int head_dim) {
        switch (head_dim) {
            case 64: return hattn::fwd_fp8::launch_fwd_fp8_head_dim<64>(args, nullptr, &error);
            case 128: return hattn::fwd_fp8::launch_fwd_fp8_head_dim<128>(args, nullptr, &error);
            default: return hattn::fwd_fp8::launch_fwd_fp8_head_dim<256>(args, nullptr, &error);
        }
    };
    cudaError_t launched = prepass(kHeadDim);
    if (launched == cudaSuccess) launched = forward(kHeadDim);
    if (launched != cudaSuccess) {
        std::fprintf(stderr, "vendor_fp8_example: launch failed: %s (%s)\n", cudaGetErrorString(launched),
                     error.c_str());
        return 1;
    }
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpy(host_o.data(), o, bytes16, cudaMemcpyDeviceToHost));

    // float64 attention of the bf16 inputs (no mask).
    auto at = [](const std::vector<uint16_t>& t, int s, int h, int d) {
        return double(bf16_to_float(t[(size_t(s) * kHeads + h) * kHeadDim + d]));
    };
    double err2 = 0.0, ref2 = 0.0;
    int non_finite = 0;
    std::vector<double> p(kSeqlen);
    for (int h = 0; h < kHeads; ++h) {
        for (int i = 0; i < kSeqlen; ++i) {
            double row_max = -INFINITY;
            for (int j = 0; j < kSeqlen; ++j) {
                double dot = 0.0;
                for (int d = 0; d < kHeadDim; ++d) dot += at(host_q, i, h, d) * at(host_k, j, h, d);
                p[j] = dot * args.softmax_scale;
                row_max = std::fmax(row_max, p[j]);
            }
            double sum = 0.0;
            for (int j = 0; j < kSeqlen; ++j) sum += (p[j] = std::exp(p[j] - row_max));
            for (int d = 0; d < kHeadDim; ++d) {
                double ref = 0.0;
                for (int j = 0; j < kSeqlen; ++j) ref += p[j] * at(host_v, j, h, d);
                ref /= sum;
                const double got = at(host_o, i, h, d);
                if (!std::isfinite(got)) ++non_finite;  // also the poison left in place
                err2 += (got - ref) * (got - ref);
                ref2 += ref * ref;
            }
        }
    }
    const double rel_l2 = std::sqrt(err2 / ref2);
    std::printf("vendor_fp8_example: d%d bf16 -> e4m3 (Hadamard) b%d h%d s%d: %d non-finite elements, relative L2 "
                "error %.3g against float64 of the bf16 inputs (limit %.0e)\n",
                kHeadDim, kBatch, kHeads, kSeqlen, non_finite, rel_l2, kRelL2Limit);
    for (void* ptr : {q, k, v, o, q8, k8, v8, vt}) cudaFree(ptr);
    for (float* ptr : {q_descale, k_descale, v_descale}) cudaFree(ptr);
    return non_finite == 0 && rel_l2 < kRelL2Limit ? 0 : 1;
}
