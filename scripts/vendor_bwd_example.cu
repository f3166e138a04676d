// hattn/scripts/vendor_bwd_example.cu -- a consumer of the vendored single-file backward kernel.
//
// It includes nothing from hattn except one amalgamated header (scripts/amalgamate.py; its host
// helpers come from vendor_example_util.h, shared with vendor_example.cu), so
// compiling it proves that header stands alone:
//   python3 scripts/amalgamate.py --kernel bwd -o /tmp/v/hattn_bwd_single.cuh && cp scripts/vendor_bwd_example.cu scripts/vendor_example_util.h /tmp/v/
//   cd /tmp/v && nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a vendor_bwd_example.cu -o vendor_bwd_example
// With -DHATTN_VENDORED_HEADER='"hattn_single.cuh"' it takes the file made with --kernel all
// (forward and backward), and then also instantiates the forward launchers and takes O and LSE
// from the vendored forward. scripts/check_vendored.sh compiles it both ways (CI).
//
// On a Hopper GPU the program runs one small causal GQA bf16 backward pass at head_dim 128
// through launch_bwd_head_dim<128> (seqlen 200: not a multiple of any tile, so tails are masked)
// and checks dQ, dK, dV against a float64 reference on the host; elsewhere it says why it did not
// run and exits 0.
#ifndef HATTN_VENDORED_HEADER
#define HATTN_VENDORED_HEADER "hattn_bwd_single.cuh"
#endif
#include HATTN_VENDORED_HEADER

#ifndef HATTN_VENDORED_BWD
#error "the vendored header holds no backward kernel: make it with scripts/amalgamate.py --kernel bwd (or all)"
#endif

#include <cuda_runtime_api.h>

#include <algorithm>
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
constexpr int kHeadsQ = 4;
constexpr int kHeadsKv = 2;      // GQA: dK and dV are summed over each group of 2 query heads
constexpr int kSeqlen = 200;     // not a multiple of any tile size: exercises the tail masking
constexpr bool kCausal = true;
// bf16 gradients: per element |got - ref| <= kAtol * max|ref| + kRtol * |ref|, and a relative L2
// error below kRelL2 per tensor.
constexpr double kAtol = 2e-2;
constexpr double kRtol = 2e-2;
constexpr double kRelL2 = 2e-2;
constexpr uint64_t kSeed = 0x2545f4914f6cdd1dull;

using vendor_example::bf16_to_float;
using vendor_example::float_to_bf16;
using vendor_example::next_uniform;

// Contiguous [batch, seqlen, heads, head_dim] indexing.
size_t at(int b, int s, int h, int heads, int d) { return ((size_t(b) * kSeqlen + s) * heads + h) * kHeadDim + d; }

// float64 forward (O and LSE, natural log) on bf16 inputs; causal with seqlen_q == seqlen_k: key j
// is visible to query i iff j <= i.
void reference_forward(const std::vector<uint16_t>& q, const std::vector<uint16_t>& k, const std::vector<uint16_t>& v,
                       double scale, std::vector<double>* o, std::vector<double>* lse) {
    std::vector<double> p(kSeqlen);
    for (int b = 0; b < kBatch; ++b)
        for (int h = 0; h < kHeadsQ; ++h) {
            const int g = h / (kHeadsQ / kHeadsKv);
            for (int i = 0; i < kSeqlen; ++i) {
                const int visible = kCausal ? i + 1 : kSeqlen;
                double row_max = -INFINITY;
                for (int j = 0; j < visible; ++j) {
                    double dot = 0.0;
                    for (int c = 0; c < kHeadDim; ++c)
                        dot += double(bf16_to_float(q[at(b, i, h, kHeadsQ, c)])) * bf16_to_float(k[at(b, j, g, kHeadsKv, c)]);
                    p[j] = dot * scale;
                    row_max = std::max(row_max, p[j]);
                }
                double sum = 0.0;
                for (int j = 0; j < visible; ++j) sum += std::exp(p[j] - row_max);
                (*lse)[(size_t(b) * kHeadsQ + h) * kSeqlen + i] = row_max + std::log(sum);
                for (int c = 0; c < kHeadDim; ++c) {
                    double acc = 0.0;
                    for (int j = 0; j < visible; ++j)
                        acc += std::exp(p[j] - row_max) / sum * bf16_to_float(v[at(b, j, g, kHeadsKv, c)]);
                    (*o)[at(b, i, h, kHeadsQ, c)] = acc;
                }
            }
        }
}

// float64 backward given the O the kernel sees (for D_i = dO_i . O_i):
//   P = softmax(scale Q K^T), dP = dO V^T, dS = P * (dP - D), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO.
void reference_backward(const std::vector<uint16_t>& q, const std::vector<uint16_t>& k, const std::vector<uint16_t>& v,
                        const std::vector<uint16_t>& o, const std::vector<uint16_t>& dout, double scale,
                        std::vector<double>* dq, std::vector<double>* dk, std::vector<double>* dv) {
    std::vector<double> p(kSeqlen);
    for (int b = 0; b < kBatch; ++b)
        for (int h = 0; h < kHeadsQ; ++h) {
            const int g = h / (kHeadsQ / kHeadsKv);
            for (int i = 0; i < kSeqlen; ++i) {
                const int visible = kCausal ? i + 1 : kSeqlen;
                double row_max = -INFINITY;
                for (int j = 0; j < visible; ++j) {
                    double dot = 0.0;
                    for (int c = 0; c < kHeadDim; ++c)
                        dot += double(bf16_to_float(q[at(b, i, h, kHeadsQ, c)])) * bf16_to_float(k[at(b, j, g, kHeadsKv, c)]);
                    p[j] = dot * scale;
                    row_max = std::max(row_max, p[j]);
                }
                double sum = 0.0;
                for (int j = 0; j < visible; ++j) sum += (p[j] = std::exp(p[j] - row_max));
                double d_i = 0.0;
                for (int c = 0; c < kHeadDim; ++c)
                    d_i += double(bf16_to_float(dout[at(b, i, h, kHeadsQ, c)])) * bf16_to_float(o[at(b, i, h, kHeadsQ, c)]);
                for (int j = 0; j < visible; ++j) {
                    const double pij = p[j] / sum;
                    double dp = 0.0;
                    for (int c = 0; c < kHeadDim; ++c)
                        dp += double(bf16_to_float(dout[at(b, i, h, kHeadsQ, c)])) * bf16_to_float(v[at(b, j, g, kHeadsKv, c)]);
                    const double ds = pij * (dp - d_i);
                    for (int c = 0; c < kHeadDim; ++c) {
                        (*dq)[at(b, i, h, kHeadsQ, c)] += scale * ds * bf16_to_float(k[at(b, j, g, kHeadsKv, c)]);
                        (*dk)[at(b, j, g, kHeadsKv, c)] += scale * ds * bf16_to_float(q[at(b, i, h, kHeadsQ, c)]);
                        (*dv)[at(b, j, g, kHeadsKv, c)] += pij * bf16_to_float(dout[at(b, i, h, kHeadsQ, c)]);
                    }
                }
            }
        }
}

// Prints and returns the number of bad elements of one gradient.
int compare(const char* name, const std::vector<uint16_t>& got, const std::vector<double>& ref) {
    double ref_max = 0.0, err2 = 0.0, ref2 = 0.0;
    for (double r : ref) ref_max = std::max(ref_max, std::fabs(r));
    int bad = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double g = bf16_to_float(got[i]);
        const double diff = std::fabs(g - ref[i]);
        if (!(diff <= kAtol * ref_max + kRtol * std::fabs(ref[i]))) {  // also catches NaN (poison left in place)
            if (bad++ < 3) std::fprintf(stderr, "%s mismatch at element %zu: got %g, want %g\n", name, i, g, ref[i]);
        }
        err2 += (g - ref[i]) * (g - ref[i]);
        ref2 += ref[i] * ref[i];
    }
    const double rel_l2 = std::sqrt(err2 / ref2);
    std::printf("vendor_bwd_example: %s: %d bad elements, relative L2 error %.3g\n", name, bad, rel_l2);
    return bad + (rel_l2 < kRelL2 ? 0 : 1);
}

}  // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("vendor_bwd_example: compiled and linked; no CUDA device, so not run\n");
        return 0;
    }
    int major = 0, minor = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    if (major != 9 || minor != 0) {
        std::printf("vendor_bwd_example: device is sm_%d%d, the kernel needs sm_90a; not run\n", major, minor);
        return 0;
    }

    const size_t q_elems = size_t(kBatch) * kSeqlen * kHeadsQ * kHeadDim;
    const size_t kv_elems = size_t(kBatch) * kSeqlen * kHeadsKv * kHeadDim;
    const size_t lse_elems = size_t(kBatch) * kHeadsQ * kSeqlen;
    const double scale = 1.0 / std::sqrt(double(kHeadDim));
    std::vector<uint16_t> host_q(q_elems), host_k(kv_elems), host_v(kv_elems), host_o(q_elems), host_dout(q_elems);
    uint64_t state = kSeed;
    for (auto* tensor : {&host_q, &host_k, &host_v, &host_dout}) {
        for (auto& x : *tensor) x = float_to_bf16(next_uniform(&state));
    }
    std::vector<double> ref_o(q_elems), ref_lse(lse_elems);
    reference_forward(host_q, host_k, host_v, scale, &ref_o, &ref_lse);
    std::vector<float> host_lse(lse_elems);
    for (size_t i = 0; i < q_elems; ++i) host_o[i] = float_to_bf16(static_cast<float>(ref_o[i]));
    for (size_t i = 0; i < lse_elems; ++i) host_lse[i] = static_cast<float>(ref_lse[i]);

    void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *dout = nullptr, *dq = nullptr, *dk = nullptr,
         *dv = nullptr, *workspace = nullptr;
    float* lse = nullptr;
    const size_t q_bytes = q_elems * sizeof(uint16_t), kv_bytes = kv_elems * sizeof(uint16_t);
    CHECK_CUDA(cudaMalloc(&q, q_bytes));
    CHECK_CUDA(cudaMalloc(&k, kv_bytes));
    CHECK_CUDA(cudaMalloc(&v, kv_bytes));
    CHECK_CUDA(cudaMalloc(&o, q_bytes));
    CHECK_CUDA(cudaMalloc(&dout, q_bytes));
    CHECK_CUDA(cudaMalloc(&dq, q_bytes));
    CHECK_CUDA(cudaMalloc(&dk, kv_bytes));
    CHECK_CUDA(cudaMalloc(&dv, kv_bytes));
    CHECK_CUDA(cudaMalloc(&lse, lse_elems * sizeof(float)));
    CHECK_CUDA(cudaMemcpy(q, host_q.data(), q_bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(k, host_k.data(), kv_bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(v, host_v.data(), kv_bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dout, host_dout.data(), q_bytes, cudaMemcpyHostToDevice));
    for (void* grad : {dq, dk, dv}) CHECK_CUDA(cudaMemset(grad, 0xff, grad == dq ? q_bytes : kv_bytes));  // bf16 NaN
    // The backward's workspace: cudaMalloc returns 256-byte-aligned memory (kWorkspaceAlign).
    const hattn::bwd::WorkspaceLayout layout = hattn::bwd::workspace_layout(kBatch, kHeadsQ, kSeqlen, kHeadDim);
    CHECK_CUDA(cudaMalloc(&workspace, layout.bytes));

    const int64_t q_seq = int64_t(kHeadsQ) * kHeadDim, kv_seq = int64_t(kHeadsKv) * kHeadDim;
    std::string error;
#ifdef HATTN_VENDORED_FWD
    // O and LSE from the vendored forward (every head dim instantiated; only kHeadDim runs).
    {
        hattn::fwd::FwdArgs f;
        f.q = q;
        f.k = k;
        f.v = v;
        f.o = o;
        f.lse = lse;
        f.batch = kBatch;
        f.heads_q = kHeadsQ;
        f.heads_kv = kHeadsKv;
        f.seqlen_q = f.seqlen_k = kSeqlen;
        f.head_dim = kHeadDim;
        f.q_batch_stride = f.o_batch_stride = kSeqlen * q_seq;
        f.k_batch_stride = f.v_batch_stride = kSeqlen * kv_seq;
        f.q_seq_stride = f.o_seq_stride = q_seq;
        f.k_seq_stride = f.v_seq_stride = kv_seq;
        f.q_head_stride = f.k_head_stride = f.v_head_stride = f.o_head_stride = kHeadDim;
        f.dtype = hattn::fwd::Dtype::kBf16;
        f.softmax_scale = static_cast<float>(scale);
        f.causal = kCausal;
        auto launch_fwd = [&](int head_dim) {
            switch (head_dim) {
                case 64: return hattn::fwd::launch_fwd_head_dim<64>(f, nullptr, &error);
                case 128: return hattn::fwd::launch_fwd_head_dim<128>(f, nullptr, &error);
                default: return hattn::fwd::launch_fwd_head_dim<256>(f, nullptr, &error);
            }
        };
        const cudaError_t launched = launch_fwd(kHeadDim);
        if (launched != cudaSuccess) {
            std::fprintf(stderr, "vendor_bwd_example: forward launch failed: %s (%s)\n", cudaGetErrorString(launched),
                         error.c_str());
            return 1;
        }
        CHECK_CUDA(cudaDeviceSynchronize());
        std::vector<uint16_t> fwd_o(q_elems);
        CHECK_CUDA(cudaMemcpy(fwd_o.data(), o, q_bytes, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(host_lse.data(), lse, lse_elems * sizeof(float), cudaMemcpyDeviceToHost));
        double worst = 0.0;
        for (size_t i = 0; i < q_elems; ++i) worst = std::max(worst, std::fabs(bf16_to_float(fwd_o[i]) - ref_o[i]));
        for (size_t i = 0; i < lse_elems; ++i) worst = std::max(worst, std::fabs(host_lse[i] - ref_lse[i]));
        std::printf("vendor_bwd_example: vendored forward for O and LSE, max |error| %.3g\n", worst);
        if (!(worst < 2e-2)) return 1;
        host_o = fwd_o;  // the backward's reference uses the O the kernel gets
    }
#else
    // O and LSE from the float64 reference (O rounded to bf16, as a forward would store it).
    CHECK_CUDA(cudaMemcpy(o, host_o.data(), q_bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(lse, host_lse.data(), lse_elems * sizeof(float), cudaMemcpyHostToDevice));
#endif

    hattn::bwd::BwdArgs args;
    args.q = q;
    args.k = k;
    args.v = v;
    args.o = o;
    args.dout = dout;
    args.lse = lse;
    args.dq = dq;
    args.dk = dk;
    args.dv = dv;
    args.workspace = workspace;
    args.workspace_size = layout.bytes;
    args.batch = kBatch;
    args.heads_q = kHeadsQ;
    args.heads_kv = kHeadsKv;
    args.seqlen_q = args.seqlen_k = kSeqlen;
    args.head_dim = kHeadDim;
    args.q_batch_stride = args.o_batch_stride = args.do_batch_stride = args.dq_batch_stride = kSeqlen * q_seq;
    args.k_batch_stride = args.v_batch_stride = args.dk_batch_stride = args.dv_batch_stride = kSeqlen * kv_seq;
    args.q_seq_stride = args.o_seq_stride = args.do_seq_stride = args.dq_seq_stride = q_seq;
    args.k_seq_stride = args.v_seq_stride = args.dk_seq_stride = args.dv_seq_stride = kv_seq;
    args.q_head_stride = args.k_head_stride = args.v_head_stride = args.o_head_stride = kHeadDim;
    args.do_head_stride = args.dq_head_stride = args.dk_head_stride = args.dv_head_stride = kHeadDim;
    args.dtype = hattn::bwd::Dtype::kBf16;
    args.softmax_scale = static_cast<float>(scale);
    args.causal = kCausal;
    args.deterministic = false;

    // Every head dim is instantiated (only kHeadDim runs), so the vendored file must carry every
    // wgmma shape the backward uses.
    auto launch = [&](int head_dim) {
        switch (head_dim) {
            case 64: return hattn::bwd::launch_bwd_head_dim<64>(args, nullptr, &error);
            case 128: return hattn::bwd::launch_bwd_head_dim<128>(args, nullptr, &error);
            default: return hattn::bwd::launch_bwd_head_dim<256>(args, nullptr, &error);
        }
    };
    const cudaError_t launched = launch(kHeadDim);
    if (launched != cudaSuccess) {
        std::fprintf(stderr, "vendor_bwd_example: launch failed: %s (%s)\n", cudaGetErrorString(launched), error.c_str());
        return 1;
    }
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<uint16_t> got_dq(q_elems), got_dk(kv_elems), got_dv(kv_elems);
    CHECK_CUDA(cudaMemcpy(got_dq.data(), dq, q_bytes, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(got_dk.data(), dk, kv_bytes, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(got_dv.data(), dv, kv_bytes, cudaMemcpyDeviceToHost));

    std::vector<double> ref_dq(q_elems, 0.0), ref_dk(kv_elems, 0.0), ref_dv(kv_elems, 0.0);
    reference_backward(host_q, host_k, host_v, host_o, host_dout, scale, &ref_dq, &ref_dk, &ref_dv);
    const int bad = compare("dq", got_dq, ref_dq) + compare("dk", got_dk, ref_dk) + compare("dv", got_dv, ref_dv);
    std::printf("vendor_bwd_example: d%d causal bf16 b%d hq%d hkv%d s%d: %s\n", kHeadDim, kBatch, kHeadsQ, kHeadsKv,
                kSeqlen, bad == 0 ? "dq, dk, dv match the float64 reference" : "MISMATCH");
    for (void* ptr : {q, k, v, o, dout, dq, dk, dv, workspace}) cudaFree(ptr);
    cudaFree(lse);
    return bad == 0 ? 0 : 1;
}
