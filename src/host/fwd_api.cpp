// hattn/src/host/fwd_api.cpp -- the forward half of the public C API (include/hattn.h): validation,
// device check, normalization into FwdArgs, and dispatch to the per-head-dim launchers; plus the
// entry points that belong to neither pass (status strings, version).
//
// NOTES:
//   * Validation runs first and touches nothing (src/host/validate.h): a rejected call behaves the
//     same on a machine without a GPU.
//   * Checks run in a fixed order (see validate() below) so that an input with several problems
//     always reports the same, most basic one first.
#include "hattn.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "common/format.h"
#include "host/api_fields.h"
#include "host/fwd_launch.h"
#include "host/validate.h"
#include "kernels/fwd_args.h"

namespace {

using hattn::common::format;
using namespace hattn::host;

// The forward kernel walks ceil(seqlen_q / 128) * heads_q * batch work tiles.
constexpr int kRowsPerTile = 128;

constexpr unsigned kAblationFlags = HATTN_FWD_NO_PINGPONG | HATTN_FWD_NO_INTRA_WG_OVERLAP;
constexpr unsigned kKnownFlags = kAblationFlags;
// The ablation variants are only instantiated for this shape (see src/host/fwd_launch_d128.cu).
constexpr int kAblationHeadDim = 128;
constexpr int kAblationDtype = HATTN_DTYPE_BF16;

#define HATTN_STRINGIFY_(x) #x
#define HATTN_STRINGIFY(x) HATTN_STRINGIFY_(x)
constexpr const char* kVersionString = HATTN_STRINGIFY(HATTN_VERSION_MAJOR) "." HATTN_STRINGIFY(
    HATTN_VERSION_MINOR) "." HATTN_STRINGIFY(HATTN_VERSION_PATCH);

// Runs after the dtype check: s.dtype is bf16 or fp16 here.
Failure check_ablation_flags(unsigned flags, const Shape& s) {
    if ((flags & kAblationFlags) != 0 && (s.head_dim != kAblationHeadDim || s.dtype != kAblationDtype)) {
        return fail(HATTN_ERROR_INVALID_FLAGS,
                    format("flags: the ablation variants (HATTN_FWD_NO_PINGPONG, HATTN_FWD_NO_INTRA_WG_OVERLAP) are "
                           "built only for head_dim 128 with bf16, got head_dim = %d %s",
                           s.head_dim, s.dtype == HATTN_DTYPE_BF16 ? "bf16" : "fp16"));
    }
    return {};
}

Failure validate(const hattn_fwd_params* params) {
    if (params == nullptr) return fail(HATTN_ERROR_NULL_PARAMS, "params is NULL");
    const hattn_fwd_params& p = *params;
    const Shape s = shape_of(p);
    const TensorView views[] = {q_view(p), k_view(p), v_view(p), o_view(p)};
    return first_failure([&] { return check_not_null(tensors(views)); },
                         [&] { return check_dtype_and_head_dim(s); },
                         [&] { return check_sizes(s); },
                         [&] { return check_strides_and_alignment(s, tensors(views)); },
                         [&] { return check_fp32_alignment("lse", p.lse); },
                         [&] { return check_head_count(s); },
                         [&] { return check_block_count(s, "seqlen_q", p.seqlen_q, kRowsPerTile, "work tiles"); },
                         [&] { return check_tma_limits_and_extents(s, tensors(views)); },
                         [&] { return check_lse_extent(s, "lse", p.lse); },
                         // O is written by many thread blocks at once.
                         [&] { return check_rows_do_not_overlap(s, views[3]); },
                         [&] { return check_scale(p.softmax_scale); },
                         [&] { return check_unknown_flags(p.flags, kKnownFlags); },
                         [&] { return check_ablation_flags(p.flags, s); },
                         [&] { return check_schedule_workspace("workspace", p.workspace, p.workspace_size); });
}

hattn::fwd::FwdArgs make_args(const hattn_fwd_params& p) {
    hattn::fwd::FwdArgs a;
    copy_common_args(p, a);
    a.lse = p.lse;
    a.pingpong = (p.flags & HATTN_FWD_NO_PINGPONG) == 0;
    a.intra_wg_overlap = (p.flags & HATTN_FWD_NO_INTRA_WG_OVERLAP) == 0;
    a.workspace = p.workspace;
    return a;
}

}  // namespace

extern "C" {

hattn_fwd_params hattn_fwd_params_contiguous(const void* q, const void* k, const void* v, void* o, int batch,
                                             int heads_q, int heads_kv, int seqlen_q, int seqlen_k, int head_dim,
                                             hattn_dtype dtype) {
    hattn_fwd_params p;
    std::memset(&p, 0, sizeof(p));  // no LSE, default scale, no mask, no flags
    set_contiguous_qkvo(p, q, k, v, o, batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, dtype);
    return p;
}

size_t hattn_fwd_workspace_size(void) { return hattn::fwd::kWorkspaceBytes; }
static_assert(HATTN_FWD_WORKSPACE_STATE_BYTES == hattn::sm90::kScheduleStateBytes, "hattn.h states the layout's state bytes");

hattn_status hattn_fwd_validate(const hattn_fwd_params* params, char* msg, size_t msg_len) {
    return reported(validate(params), msg, msg_len);
}

hattn_status hattn_fwd(const hattn_fwd_params* params, cudaStream_t stream) {
    // Validation before any CUDA call: a bad call returns its validation status even where
    // there is no GPU, and launches nothing.
    const hattn_status ready = ready_to_launch(validate(params));
    if (ready != HATTN_SUCCESS) return ready;

    const hattn::fwd::FwdArgs args = make_args(*params);
    std::string error;
    cudaError_t rc = cudaErrorInvalidValue;
    switch (args.head_dim) {
        case 64: rc = launch_fwd_d64(args, stream, &error); break;
        case 128: rc = launch_fwd_d128(args, stream, &error); break;
        case 256: rc = launch_fwd_d256(args, stream, &error); break;
        default: return HATTN_ERROR_UNSUPPORTED_HEAD_DIM;  // unreachable after validation
    }
    return launch_status("hattn_fwd", rc, error);
}

const char* hattn_status_string(hattn_status status) {
    switch (enum_value(status)) {  // any int: callers may pass a value no enumerator names
        case HATTN_SUCCESS: return "success";
        case HATTN_ERROR_NULL_PARAMS: return "the params pointer is NULL";
        case HATTN_ERROR_NULL_POINTER: return "a required tensor pointer (q, k, v, o; backward: dout, lse, dq, dk, dv) is NULL";
        case HATTN_ERROR_MISALIGNED: return "a pointer or stride is misaligned (TMA needs 16-byte alignment)";
        case HATTN_ERROR_UNSUPPORTED_HEAD_DIM: return "unsupported head_dim (built: 64, 128, 256)";
        case HATTN_ERROR_UNSUPPORTED_DTYPE: return "unsupported dtype (bf16 or fp16)";
        case HATTN_ERROR_INVALID_SIZE: return "a batch, heads or seqlen size is not positive";
        case HATTN_ERROR_INVALID_STRIDE: return "a stride is non-positive or makes an output overlap";
        case HATTN_ERROR_HEADS_NOT_DIVISIBLE: return "heads_q is not a multiple of heads_kv";
        case HATTN_ERROR_SIZE_OVERFLOW: return "a size, stride or offset exceeds the grid, TMA or 64-bit limits";
        case HATTN_ERROR_INVALID_SCALE: return "softmax_scale is negative, NaN or infinite";
        case HATTN_ERROR_INVALID_FLAGS: return "unknown flag bits, or a variant not built for this shape";
        case HATTN_ERROR_UNSUPPORTED_DEVICE: return "the current device is not compute capability 9.0 (Hopper)";
        case HATTN_ERROR_CUDA: return "a CUDA call or kernel launch failed (set HATTN_LOG_ERRORS=1 for details)";
        case HATTN_ERROR_WORKSPACE:
            return "a workspace is NULL where required, misaligned, or smaller than its hattn_*_workspace_size()";
    }
    return "unknown hattn_status value";
}

const char* hattn_version(void) { return kVersionString; }

}  // extern "C"
