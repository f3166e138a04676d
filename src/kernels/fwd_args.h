// hattn/src/kernels/fwd_args.h -- what the forward launcher needs, independent of the C API
// (so the vendorable single-file kernel does not depend on include/hattn.h).
#pragma once

#include <cstdint>

namespace hattn::fwd {

enum class Dtype : int { kBf16 = 0, kFp16 = 1 };

struct FwdArgs {
    const void* q = nullptr;  // [batch, seqlen_q, heads_q, head_dim]
    const void* k = nullptr;  // [batch, seqlen_k, heads_kv, head_dim]
    const void* v = nullptr;  // [batch, seqlen_k, heads_kv, head_dim]
    void* o = nullptr;        // [batch, seqlen_q, heads_q, head_dim]
    float* lse = nullptr;     // optional [batch, heads_q, seqlen_q]
    int batch = 0, heads_q = 0, heads_kv = 0, seqlen_q = 0, seqlen_k = 0, head_dim = 0;
    // Strides in elements; head_dim is contiguous.
    int64_t q_batch_stride = 0, q_seq_stride = 0, q_head_stride = 0;
    int64_t k_batch_stride = 0, k_seq_stride = 0, k_head_stride = 0;
    int64_t v_batch_stride = 0, v_seq_stride = 0, v_head_stride = 0;
    int64_t o_batch_stride = 0, o_seq_stride = 0, o_head_stride = 0;
    Dtype dtype = Dtype::kBf16;
    float softmax_scale = 0.f;  // resolved (never 0 here)
    bool causal = false;
    bool pingpong = true;          // consumer warpgroups take turns on the tensor cores
    bool intra_wg_overlap = true;  // S(j+1) GEMM issued before softmax(j)
    int grid_ctas = 0;             // CTAs to launch: 0 = automatic (one per tile, or one per SM
                                   // when tiles are short); N > 0 = at most N, walking the tiles
};

}  // namespace hattn::fwd
