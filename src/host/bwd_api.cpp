// hattn/src/host/bwd_api.cpp -- the backward half of the public C API (include/hattn.h): the
// workspace size, validation, device check, normalization into BwdArgs, and dispatch to the
// per-head-dim launchers (src/host/bwd_launch.h).
//
// NOTES:
//   * The checks are the forward's (src/host/validate.h) over eight tensors instead of four, in the
//     same order, plus LSE (required here) and the workspace, checked last: a call with a wrong
//     shape reports the shape, not the workspace sized for it.
//   * Validation touches nothing: no CUDA call, no access through any pointer, the workspace's
//     included. A rejected call behaves the same on a machine without a GPU.
#include "hattn.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <limits>
#include <string>

#include "common/format.h"
#include "host/api_fields.h"
#include "host/bwd_launch.h"
#include "host/validate.h"
#include "kernels/bwd_args.h"

namespace {

using hattn::common::format;
using namespace hattn::host;

// The backward walks the queries in blocks of kQueryBlockRows rows (the workspace's dQ
// accumulator and semaphores are laid out per query block) and the keys in blocks of at least as
// many rows, each numbered in int32 per (batch, query head): bounding both counts by query-block
// rows bounds every grid the kernels launch.
constexpr int kBlockRows = hattn::bwd::kQueryBlockRows;

constexpr unsigned kKnownFlags = HATTN_BWD_DETERMINISTIC;

TensorView dout_view(const hattn_bwd_params& p) {
    return {"dout", "do", p.dout, p.seqlen_q, p.heads_q, p.do_batch_stride, p.do_seq_stride, p.do_head_stride};
}
TensorView dq_view(const hattn_bwd_params& p) {
    return {"dq", "dq", p.dq, p.seqlen_q, p.heads_q, p.dq_batch_stride, p.dq_seq_stride, p.dq_head_stride};
}
TensorView dk_view(const hattn_bwd_params& p) {
    return {"dk", "dk", p.dk, p.seqlen_k, p.heads_kv, p.dk_batch_stride, p.dk_seq_stride, p.dk_head_stride};
}
TensorView dv_view(const hattn_bwd_params& p) {
    return {"dv", "dv", p.dv, p.seqlen_k, p.heads_kv, p.dv_batch_stride, p.dv_seq_stride, p.dv_head_stride};
}

Failure check_lse_not_null(const hattn_bwd_params& p) {
    if (p.lse != nullptr) return {};
    return fail(HATTN_ERROR_NULL_POINTER, "lse is NULL (the backward needs the forward's LSE)");
}

size_t workspace_bytes(int batch, int heads_q, int seqlen_q, int head_dim) {
    // workspace_layout sizes each row at head_dim + 3 floats in int arithmetic: keep that sum
    // inside int (such a head dim is rejected by validation anyway).
    constexpr int kLayoutRowExtra = 3;
    if (head_dim > std::numeric_limits<int>::max() - kLayoutRowExtra) return 0;
    return hattn::bwd::workspace_layout(batch, heads_q, seqlen_q, head_dim).bytes;
}

Failure check_workspace(const hattn_bwd_params& p) {
    // The sizes passed every earlier check, so the layout exists (a block count within int32
    // keeps the total far below workspace_layout's 2^62 limit).
    const size_t needed = workspace_bytes(p.batch, p.heads_q, p.seqlen_q, p.head_dim);
    if (p.workspace == nullptr) {
        return fail(HATTN_ERROR_WORKSPACE,
                    format("workspace is NULL (hattn_bwd needs hattn_bwd_workspace_size(batch, heads_q, seqlen_q, "
                           "head_dim) = %zu bytes of device memory)",
                           needed));
    }
    if (reinterpret_cast<uintptr_t>(p.workspace) % hattn::bwd::kWorkspaceAlign != 0) {
        return fail(HATTN_ERROR_WORKSPACE, format("workspace = %p is not %zu-byte aligned", p.workspace,
                                                  static_cast<size_t>(hattn::bwd::kWorkspaceAlign)));
    }
    if (p.workspace_size < needed) {
        return fail(HATTN_ERROR_WORKSPACE,
                    format("workspace_size = %zu bytes is less than hattn_bwd_workspace_size(batch, heads_q, "
                           "seqlen_q, head_dim) = %zu",
                           p.workspace_size, needed));
    }
    return check_byte_extent("workspace", p.workspace, static_cast<Int128>(needed));
}

Failure validate(const hattn_bwd_params* params) {
    if (params == nullptr) return fail(HATTN_ERROR_NULL_PARAMS, "params is NULL");
    const hattn_bwd_params& p = *params;
    const Shape s = shape_of(p);
    const TensorView inputs[] = {q_view(p), k_view(p), v_view(p), o_view(p), dout_view(p)};
    const TensorView outputs[] = {dq_view(p), dk_view(p), dv_view(p)};
    const TensorView all[] = {inputs[0], inputs[1], inputs[2], inputs[3], inputs[4], outputs[0], outputs[1], outputs[2]};
    return first_failure([&] { return check_not_null(tensors(inputs)); },
                         [&] { return check_lse_not_null(p); },
                         [&] { return check_not_null(tensors(outputs)); },
                         [&] { return check_dtype_and_head_dim(s); },
                         [&] { return check_sizes(s); },
                         [&] { return check_strides_and_alignment(s, tensors(all)); },
                         [&] { return check_fp32_alignment("lse", p.lse); },
                         [&] { return check_head_count(s); },
                         [&] { return check_block_count(s, "seqlen_q", p.seqlen_q, kBlockRows, "query blocks"); },
                         [&] { return check_block_count(s, "seqlen_k", p.seqlen_k, kBlockRows, "key blocks"); },
                         [&] { return check_tma_limits_and_extents(s, tensors(all)); },
                         [&] { return check_lse_extent(s, "lse", p.lse); },
                         // dQ, dK and dV are written by many thread blocks at once.
                         [&] { return check_rows_do_not_overlap(s, outputs[0]); },
                         [&] { return check_rows_do_not_overlap(s, outputs[1]); },
                         [&] { return check_rows_do_not_overlap(s, outputs[2]); },
                         [&] { return check_scale(p.softmax_scale); },
                         [&] { return check_unknown_flags(p.flags, kKnownFlags); },
                         [&] { return check_workspace(p); });
}

hattn::bwd::BwdArgs make_args(const hattn_bwd_params& p) {
    hattn::bwd::BwdArgs a;
    copy_common_args(p, a);
    a.dout = p.dout;
    a.lse = p.lse;
    a.dq = p.dq;
    a.dk = p.dk;
    a.dv = p.dv;
    a.workspace = p.workspace;
    a.workspace_size = p.workspace_size;
    a.do_batch_stride = p.do_batch_stride;
    a.do_seq_stride = p.do_seq_stride;
    a.do_head_stride = p.do_head_stride;
    a.dq_batch_stride = p.dq_batch_stride;
    a.dq_seq_stride = p.dq_seq_stride;
    a.dq_head_stride = p.dq_head_stride;
    a.dk_batch_stride = p.dk_batch_stride;
    a.dk_seq_stride = p.dk_seq_stride;
    a.dk_head_stride = p.dk_head_stride;
    a.dv_batch_stride = p.dv_batch_stride;
    a.dv_seq_stride = p.dv_seq_stride;
    a.dv_head_stride = p.dv_head_stride;
    a.deterministic = (p.flags & HATTN_BWD_DETERMINISTIC) != 0;
    return a;
}

}  // namespace

extern "C" {

size_t hattn_bwd_workspace_size(int batch, int heads_q, int seqlen_q, int head_dim) {
    return workspace_bytes(batch, heads_q, seqlen_q, head_dim);
}

hattn_bwd_params hattn_bwd_params_contiguous(const void* q, const void* k, const void* v, const void* o,
                                             const void* dout, const float* lse, void* dq, void* dk, void* dv,
                                             int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k,
                                             int head_dim, hattn_dtype dtype) {
    hattn_bwd_params p;
    std::memset(&p, 0, sizeof(p));  // no workspace, default scale, no mask, no flags
    set_contiguous_qkvo(p, q, k, v, o, batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, dtype);
    p.dout = dout;
    p.lse = lse;
    p.dq = dq;
    p.dk = dk;
    p.dv = dv;
    const Strides q_like = contiguous_strides(seqlen_q, heads_q, head_dim);
    const Strides kv_like = contiguous_strides(seqlen_k, heads_kv, head_dim);
    set_strides(q_like, p.do_batch_stride, p.do_seq_stride, p.do_head_stride);
    set_strides(q_like, p.dq_batch_stride, p.dq_seq_stride, p.dq_head_stride);
    set_strides(kv_like, p.dk_batch_stride, p.dk_seq_stride, p.dk_head_stride);
    set_strides(kv_like, p.dv_batch_stride, p.dv_seq_stride, p.dv_head_stride);
    return p;
}

hattn_status hattn_bwd_validate(const hattn_bwd_params* params, char* msg, size_t msg_len) {
    return reported(validate(params), msg, msg_len);
}

hattn_status hattn_bwd(const hattn_bwd_params* params, cudaStream_t stream) {
    // Validation before any CUDA call: a bad call returns its validation status even where
    // there is no GPU, and launches nothing.
    const hattn_status ready = ready_to_launch(validate(params));
    if (ready != HATTN_SUCCESS) return ready;

    const hattn::bwd::BwdArgs args = make_args(*params);
    std::string error;
    cudaError_t rc = cudaErrorInvalidValue;
    switch (args.head_dim) {
        case 64: rc = launch_bwd_d64(args, stream, &error); break;
        case 128: rc = launch_bwd_d128(args, stream, &error); break;
        case 256: rc = launch_bwd_d256(args, stream, &error); break;
        default: return HATTN_ERROR_UNSUPPORTED_HEAD_DIM;  // unreachable after validation
    }
    return launch_status("hattn_bwd", rc, error);
}

}  // extern "C"
