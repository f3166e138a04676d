// hattn/src/kernels/fwd_args.h -- what the forward launcher needs, independent of the C API
// (so the vendorable single-file kernel does not depend on include/hattn.h).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/sm90/schedule_workspace.h"

// For the small functions both a launcher (host) and its kernel (device) call. Compiled as plain
// C++ (the host-only files of the C API) it is empty. Marked explicitly rather than relying on
// nvcc's --expt-relaxed-constexpr, so the vendored single files compile with no extra flags.
#if defined(__CUDACC__)
#define HATTN_HOST_DEVICE __host__ __device__
#else
#define HATTN_HOST_DEVICE
#endif

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
    int section_heads = 0;         // (head, batch) pairs per tile-order section (sm90::TileScheduler):
                                   // 0 = the launcher's rule (kCausalSections), N > 0 = N
    void* workspace = nullptr;     // optional: kWorkspaceBytes of device memory (aligned to
                                   // kWorkspaceAlign) whose first sm90::kScheduleStateBytes are zero
                                   // and are left so by every call; with it causal problems take
                                   // their tiles from a counter and full masks split their last
                                   // pass over KV blocks (kernels/fwd_rules.h)
};

// The forward's optional workspace: the dynamic tile scheduler's counters and the split tail's
// flags and partial tiles (kernels/sm90/schedule_workspace.h).
constexpr size_t kWorkspaceBytes = sm90::kScheduleWorkspaceBytes;
constexpr size_t kWorkspaceAlign = 16;
// Whether `workspace` (NULL included) is aligned as the scheduler's counters need.
inline bool workspace_aligned(const void* workspace) { return reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlign == 0; }

// The shape, dtype and scale checks both launchers make for a vendoring user (who has no C API in
// front of them); resolves softmax_scale 0 to 1/sqrt(head_dim). Returns nullptr or what is wrong.
template <class Args>
inline const char* check_shape_dtype_scale(Args& a) {
    if (a.batch <= 0 || a.heads_q <= 0 || a.heads_kv <= 0 || a.seqlen_q <= 0 || a.seqlen_k <= 0)
        return "batch, heads_q, heads_kv, seqlen_q and seqlen_k must be positive";
    if (a.heads_q % a.heads_kv != 0) return "heads_q must be a multiple of heads_kv";
    if (a.dtype != Dtype::kBf16 && a.dtype != Dtype::kFp16) return "dtype must be kBf16 or kFp16";
    if (!(a.softmax_scale >= 0.f) || std::isinf(a.softmax_scale))
        return "softmax_scale must be finite and >= 0 (0 selects 1/sqrt(head_dim))";
    if (a.softmax_scale == 0.f) a.softmax_scale = 1.f / std::sqrt(static_cast<float>(a.head_dim));
    return nullptr;
}

}  // namespace hattn::fwd
