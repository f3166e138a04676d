// hattn/src/kernels/bwd_args.h -- what the backward launcher needs, independent of the C API (so a
// vendored single file does not depend on include/hattn.h), and the layout of its fp32 workspace.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/fwd_args.h"

namespace hattn::bwd {

using fwd::Dtype;

struct BwdArgs {
    const void* q = nullptr;     // [batch, seqlen_q, heads_q, head_dim]
    const void* k = nullptr;     // [batch, seqlen_k, heads_kv, head_dim]
    const void* v = nullptr;     // [batch, seqlen_k, heads_kv, head_dim]
    const void* o = nullptr;     // [batch, seqlen_q, heads_q, head_dim]
    const void* dout = nullptr;  // [batch, seqlen_q, heads_q, head_dim]
    const float* lse = nullptr;  // [batch, heads_q, seqlen_q], natural log (the forward's)
    void* dq = nullptr;          // [batch, seqlen_q, heads_q, head_dim]
    void* dk = nullptr;          // [batch, seqlen_k, heads_kv, head_dim]
    void* dv = nullptr;          // [batch, seqlen_k, heads_kv, head_dim]
    void* workspace = nullptr;   // workspace_bytes(...) bytes, kWorkspaceAlign-aligned
    size_t workspace_size = 0;
    int batch = 0, heads_q = 0, heads_kv = 0, seqlen_q = 0, seqlen_k = 0, head_dim = 0;
    // Strides in elements; head_dim is contiguous.
    int64_t q_batch_stride = 0, q_seq_stride = 0, q_head_stride = 0;
    int64_t k_batch_stride = 0, k_seq_stride = 0, k_head_stride = 0;
    int64_t v_batch_stride = 0, v_seq_stride = 0, v_head_stride = 0;
    int64_t o_batch_stride = 0, o_seq_stride = 0, o_head_stride = 0;
    int64_t do_batch_stride = 0, do_seq_stride = 0, do_head_stride = 0;
    int64_t dq_batch_stride = 0, dq_seq_stride = 0, dq_head_stride = 0;
    int64_t dk_batch_stride = 0, dk_seq_stride = 0, dk_head_stride = 0;
    int64_t dv_batch_stride = 0, dv_seq_stride = 0, dv_head_stride = 0;
    Dtype dtype = Dtype::kBf16;
    float softmax_scale = 0.f;  // 0 selects 1/sqrt(head_dim)
    bool causal = false;
    bool deterministic = false;  // dQ reduced across KV blocks in a fixed order
};

// ---- The workspace -------------------------------------------------------------------------
// Four regions, each kWorkspaceAlign-aligned, for every (batch, query head):
//   lse_log2  [seqlen_q_padded] fp32  the forward's LSE in log2 units; +inf on padded rows and on
//                                     rows that see no key (their probabilities become 0)
//   dpsum     [seqlen_q_padded] fp32  D_i = sum_c dO[i, c] * O[i, c]
//   dq_accum  [seqlen_q_padded * head_dim] fp32, dQ / softmax_scale summed over KV blocks, in
//                                     blocks of kQueryBlockRows rows, each as head_dim / 64
//                                     slices in wgmma's fragment order (bwd.cuh: dq_accum_index)
//   semaphores[seqlen_q_padded / kQueryBlockRows] int32: per query block, how many KV blocks
//                                     have added their dQ (deterministic mode)
constexpr size_t kWorkspaceAlign = 256;
constexpr int kQueryBlockRows = 64;  // the backward kernel's query block, for every head dim

struct WorkspaceLayout {
    int64_t seqlen_q_padded = 0;
    size_t lse_offset = 0, dpsum_offset = 0, dq_accum_offset = 0, semaphore_offset = 0, bytes = 0;
};

inline constexpr size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Returns bytes == 0 when a size is non-positive or the total overflows 2^62.
inline WorkspaceLayout workspace_layout(int batch, int heads_q, int seqlen_q, int head_dim) {
    WorkspaceLayout w;
    if (batch <= 0 || heads_q <= 0 || seqlen_q <= 0 || head_dim <= 0) return w;
    const int64_t rows = (static_cast<int64_t>(seqlen_q) + kQueryBlockRows - 1) / kQueryBlockRows * kQueryBlockRows;
    const int64_t heads = static_cast<int64_t>(batch) * heads_q;
    constexpr int64_t kLimit = int64_t{1} << 62;
    if (heads > kLimit / rows / (static_cast<int64_t>(head_dim) + 3)) return w;
    w.seqlen_q_padded = rows;
    const size_t row_floats = static_cast<size_t>(heads * rows);
    w.lse_offset = 0;
    w.dpsum_offset = align_up(w.lse_offset + row_floats * sizeof(float), kWorkspaceAlign);
    w.dq_accum_offset = align_up(w.dpsum_offset + row_floats * sizeof(float), kWorkspaceAlign);
    w.semaphore_offset = align_up(w.dq_accum_offset + row_floats * head_dim * sizeof(float), kWorkspaceAlign);
    w.bytes = align_up(w.semaphore_offset + static_cast<size_t>(heads * (rows / kQueryBlockRows)) * sizeof(int32_t),
                       kWorkspaceAlign);
    return w;
}

}  // namespace hattn::bwd
