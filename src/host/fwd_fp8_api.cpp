// hattn/src/host/fwd_fp8_api.cpp -- the FP8 forward of the public C API (include/hattn.h):
// validation, device check, normalization into Fp8FwdArgs, dispatch per head dim.
//
// NOTES:
//   * A params struct of its own rather than a dtype on hattn_fwd_params: the FP8 call has three
//     descale arrays and a workspace the 16-bit forward does not, and q/k/v strides in bytes.
//   * The e4m3 inputs follow the 16-byte rule in bytes (TMA); o follows the forward's rules.
//   * Checks run in a fixed order (see validate() below), the most basic first, as in the forward.
#include "hattn.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <limits>
#include <string>

#include "common/format.h"
#include "host/api_fields.h"
#include "host/fwd_fp8_launch.h"
#include "host/validate.h"
#include "kernels/fwd_fp8_args.h"

namespace {

using hattn::common::format;
using namespace hattn::host;
namespace fp8 = hattn::fwd_fp8;

static_assert(HATTN_FP8_BLOCK_ROWS == fp8::kDescaleRows, "the header's block size is the kernel's");

constexpr unsigned kKnownFlags = HATTN_FWD_FP8_V_TRANSPOSED;
constexpr int kRowsPerTile = 128;  // the kernel's query tile
constexpr uintptr_t kWorkspaceAlign = 256;
constexpr int kMaxGridYZ = 65535;  // the V transpose's grid: (key tiles, heads_kv, batch)
constexpr Int128 kTmaMaxStrideBytes = Int128{1} << 40;

bool v_transposed(const hattn_fwd_fp8_params& p) { return (p.flags & HATTN_FWD_FP8_V_TRANSPOSED) != 0; }

// With HATTN_FWD_FP8_V_TRANSPOSED, v is V^T (its strides ignored): the row checks walk q and k
// only (row_inputs), check_vt_input the rest.
struct Views {
    TensorView in[3];  // e4m3 q, k, v (strides in bytes)
    TensorView out;    // o
    const float* descale[3];
    const char* descale_name[3];
    int descale_heads[3];
    int descale_seqlen[3];
    size_t row_inputs;  // 3, or 2 with V^T
};

Views views_of(const hattn_fwd_fp8_params& p) {
    return Views{{q_view(p), k_view(p), v_view(p)},
                 o_view(p),
                 {p.q_descale, p.k_descale, p.v_descale},
                 {"q_descale", "k_descale", "v_descale"},
                 {p.heads_q, p.heads_kv, p.heads_kv},
                 {p.seqlen_q, p.seqlen_k, p.seqlen_k},
                 static_cast<size_t>(v_transposed(p) ? 2 : 3)};
}

// o_dtype, then head_dim (64, 128, 256).
Failure check_o_dtype_and_head_dim(const Shape& s) {
    if (s.dtype != HATTN_DTYPE_BF16 && s.dtype != HATTN_DTYPE_FP16) {
        return fail(HATTN_ERROR_UNSUPPORTED_DTYPE,
                    format("o_dtype = %d is not HATTN_DTYPE_BF16 (0) or HATTN_DTYPE_FP16 (1)", s.dtype));
    }
    if (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256) {
        return fail(HATTN_ERROR_UNSUPPORTED_HEAD_DIM,
                    format("head_dim = %d is not one of the built head dims (64, 128, 256)", s.head_dim));
    }
    return {};
}

struct StrideField {
    const char* suffix;
    int64_t stride;
};

// Positive strides (all inputs first), then 16-byte aligned bases and byte strides, of the e4m3 inputs.
Failure check_fp8_strides_and_alignment(const Views& v) {
    const Tensors rows{v.in, v.row_inputs};
    for (const TensorView& t : rows) {
        Failure f = check_positive_strides(t);
        if (f.failed()) return f;
    }
    for (const TensorView& t : rows) {
        Failure f = check_e4m3_alignment(t);
        if (f.failed()) return f;
    }
    return {};
}

Failure check_transpose_grid(const Shape& s, bool v_transposed) {
    if (!v_transposed && (s.heads_kv > kMaxGridYZ || s.batch > kMaxGridYZ)) {
        return fail(HATTN_ERROR_SIZE_OVERFLOW,
                    format("heads_kv = %d and batch = %d must be <= %d (the V transpose's grid)", s.heads_kv, s.batch,
                           kMaxGridYZ));
    }
    return {};
}

// TMA's stride limit and the addressed byte ranges of the e4m3 inputs and the descales.
Failure check_fp8_extents(const Shape& s, const Views& v) {
    for (const TensorView& t : Tensors{v.in, v.row_inputs}) {
        const StrideField strides[] = {{"_batch_stride", t.batch_stride}, {"_seq_stride", t.seq_stride}, {"_head_stride", t.head_stride}};
        for (const auto& f : strides) {
            if (static_cast<Int128>(f.stride) >= kTmaMaxStrideBytes) {
                return fail(HATTN_ERROR_SIZE_OVERFLOW, format("%s%s = %lld bytes is 2^40 bytes or more (the TMA stride limit)",
                                                              t.stride_prefix, f.suffix, static_cast<long long>(f.stride)));
            }
        }
        const Int128 last = static_cast<Int128>(s.batch - 1) * t.batch_stride + static_cast<Int128>(t.seqlen - 1) * t.seq_stride +
                            static_cast<Int128>(t.heads - 1) * t.head_stride + s.head_dim;
        Failure f = check_byte_extent(t.name, t.ptr, last);
        if (f.failed()) return f;
    }
    for (int i = 0; i < 3; ++i) {
        const Int128 bytes = static_cast<Int128>(fp8_blocks_of(v.descale_seqlen[i])) * v.descale_heads[i] * s.batch *
                             static_cast<int64_t>(sizeof(float));
        Failure f = check_byte_extent(v.descale_name[i], v.descale[i], bytes);
        if (f.failed()) return f;
    }
    return {};
}

// With HATTN_FWD_FP8_V_TRANSPOSED, v is V^T.
Failure check_vt_input(const hattn_fwd_fp8_params& p) {
    if (!v_transposed(p)) return {};
    return check_vt_tensor("v", p.v, fp8_vt_bytes(p.batch, p.heads_kv, p.seqlen_k, p.head_dim),
                           "HATTN_FWD_FP8_V_TRANSPOSED");
}

// V^T's batch stride (heads_kv * head_dim * keys bytes) is a TMA stride; then, unless the caller
// passes V^T, the workspace V^T is written to.
Failure check_workspace(const hattn_fwd_fp8_params& p) {
    const Int128 need = fp8_vt_bytes(p.batch, p.heads_kv, p.seqlen_k, p.head_dim);
    if (need / p.batch >= kTmaMaxStrideBytes) {
        return fail(HATTN_ERROR_SIZE_OVERFLOW, "V^T's batch stride (heads_kv * head_dim * keys bytes) is 2^40 bytes or more");
    }
    if (v_transposed(p)) return {};  // the workspace is not used
    if (p.workspace == nullptr) return fail(HATTN_ERROR_WORKSPACE, "workspace is NULL");
    if (reinterpret_cast<uintptr_t>(p.workspace) % kWorkspaceAlign != 0) {
        return fail(HATTN_ERROR_WORKSPACE, format("workspace = %p is not 256-byte aligned", p.workspace));
    }
    if (static_cast<Int128>(p.workspace_size) < need) {
        return fail(HATTN_ERROR_WORKSPACE, format("workspace_size = %llu bytes is less than the %lld bytes needed "
                                                  "(hattn_fwd_fp8_workspace_size)",
                                                  static_cast<unsigned long long>(p.workspace_size),
                                                  static_cast<long long>(need)));
    }
    return check_byte_extent("workspace", p.workspace, need);
}

Failure validate(const hattn_fwd_fp8_params* params) {
    if (params == nullptr) return fail(HATTN_ERROR_NULL_PARAMS, "params is NULL");
    const hattn_fwd_fp8_params& p = *params;
    const Shape s = shape_of(p, enum_value(p.o_dtype));
    const Views v = views_of(p);
    const TensorView out[] = {v.out};
    const TensorView all[] = {v.in[0], v.in[1], v.in[2], v.out};
    return first_failure([&] { return check_not_null(tensors(all)); },
                         [&] { return check_descales_not_null(v); },
                         [&] { return check_o_dtype_and_head_dim(s); },
                         [&] { return check_sizes(s); },
                         [&] { return check_fp8_strides_and_alignment(v); },
                         [&] { return check_strides_and_alignment(s, tensors(out)); },
                         [&] { return check_fp32_alignment("lse", p.lse); },
                         [&] { return check_descale_alignment(v); },
                         [&] { return check_head_count(s); },
                         [&] { return check_block_count(s, "seqlen_q", p.seqlen_q, kRowsPerTile, "work tiles"); },
                         [&] { return check_transpose_grid(s, v_transposed(p)); },
                         [&] { return check_fp8_extents(s, v); },
                         [&] { return check_vt_input(p); },
                         [&] { return check_tma_limits_and_extents(s, tensors(out)); },
                         [&] { return check_lse_extent(s, "lse", p.lse); },
                         [&] { return check_rows_do_not_overlap(s, v.out); },
                         [&] { return check_scale(p.softmax_scale); },
                         [&] { return check_unknown_flags(p.flags, kKnownFlags); },
                         [&] { return check_workspace(p); },
                         [&] { return check_schedule_workspace("schedule_workspace", p.schedule_workspace,
                                                               p.schedule_workspace_size); });
}

fp8::Fp8FwdArgs make_args(const hattn_fwd_fp8_params& p) {
    fp8::Fp8FwdArgs a;
    a.q = p.q;
    a.k = p.k;
    a.v = p.v;
    a.o = p.o;
    a.lse = p.lse;
    a.q_descale = p.q_descale;
    a.k_descale = p.k_descale;
    a.v_descale = p.v_descale;
    a.v_transposed = v_transposed(p);
    a.vt = a.v_transposed ? const_cast<void*>(p.v) : p.workspace;
    copy_sizes_and_strides(p, a);
    a.o_dtype = p.o_dtype == HATTN_DTYPE_BF16 ? hattn::fwd::Dtype::kBf16 : hattn::fwd::Dtype::kFp16;
    a.softmax_scale = resolved_scale(p.softmax_scale, p.head_dim);
    a.causal = p.causal != 0;
    a.schedule_workspace = p.schedule_workspace;
    return a;
}

}  // namespace

extern "C" {

size_t hattn_fwd_fp8_workspace_size(int batch, int heads_kv, int seqlen_k, int head_dim) {
    if (batch <= 0 || heads_kv <= 0 || seqlen_k <= 0 || head_dim <= 0) return 0;
    const Int128 bytes = fp8_vt_bytes(batch, heads_kv, seqlen_k, head_dim);
    if (bytes > static_cast<Int128>(std::numeric_limits<int64_t>::max())) return 0;
    return static_cast<size_t>(bytes);
}

hattn_fwd_fp8_params hattn_fwd_fp8_params_contiguous(const void* q, const void* k, const void* v, void* o,
                                                     const float* q_descale, const float* k_descale,
                                                     const float* v_descale, int batch, int heads_q, int heads_kv,
                                                     int seqlen_q, int seqlen_k, int head_dim, hattn_dtype o_dtype) {
    hattn_fwd_fp8_params p;
    std::memset(&p, 0, sizeof(p));  // no LSE, no workspace, default scale, no mask, no flags
    p.q = q;
    p.k = k;
    p.v = v;
    p.o = o;
    p.q_descale = q_descale;
    p.k_descale = k_descale;
    p.v_descale = v_descale;
    std::memcpy(&p.o_dtype, &o_dtype, sizeof(p.o_dtype));  // as given, even a value no enumerator names
    // One byte per e4m3 element: the element strides are the byte strides.
    const ContiguousLayout l =
        set_contiguous_sizes_and_qkv_strides(p, batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim);
    set_strides(l.q_like, p.o_batch_stride, p.o_seq_stride, p.o_head_stride);
    return p;
}

hattn_status hattn_fwd_fp8_validate(const hattn_fwd_fp8_params* params, char* msg, size_t msg_len) {
    return reported(validate(params), msg, msg_len);
}

hattn_status hattn_fwd_fp8(const hattn_fwd_fp8_params* params, cudaStream_t stream) {
    return fwd_fp8_with_launch(params, stream, launch_fwd_fp8_any);
}

}  // extern "C"

namespace hattn::host {

cudaError_t launch_fwd_fp8_any(const fp8::Fp8FwdArgs& args, cudaStream_t stream, std::string* error) {
    switch (args.head_dim) {
        case 64: return launch_fwd_fp8_d64(args, stream, error);
        case 128: return launch_fwd_fp8_d128(args, stream, error);
        case 256: return launch_fwd_fp8_d256(args, stream, error);
        default: return cudaErrorInvalidValue;  // unreachable after validation
    }
}

hattn_status fwd_fp8_with_launch(const hattn_fwd_fp8_params* params, cudaStream_t stream, Fp8Launch launch,
                                 int grid_ctas, int section_heads) {
    const hattn_status ready = ready_to_launch(validate(params));
    if (ready != HATTN_SUCCESS) return ready;
    fp8::Fp8FwdArgs args = make_args(*params);
    args.grid_ctas = grid_ctas;  // a negative count fails in the launcher's check_args
    args.section_heads = section_heads;
    std::string error;
    const cudaError_t rc = launch(args, stream, &error);
    return launch_status("hattn_fwd_fp8", rc, error);
}

}  // namespace hattn::host
