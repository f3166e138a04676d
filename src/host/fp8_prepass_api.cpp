// hattn/src/host/fp8_prepass_api.cpp -- the FP8 pre-pass of the public C API (include/hattn.h):
// validation, device check, normalization into Fp8PrepassArgs, dispatch per head dim.
//
// NOTES:
//   * The inputs follow the forward's rules (16-byte aligned bases and strides: the kernel reads
//     16-byte vectors). The e4m3 outputs are one byte per element and follow the same 16-byte
//     rule in bytes, which is what the FP8 attention kernel's TMA loads of them will need.
//   * Checks run in a fixed order (see validate() below), the most basic first, as in the forward.
#include "hattn.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <limits>
#include <string>

#include "common/format.h"
#include "host/api_fields.h"
#include "host/fp8_prepass_launch.h"
#include "host/validate.h"
#include "kernels/fp8_prepass_args.h"
#include "kernels/fwd_fp8_args.h"  // vt_keys: V^T's layout (HATTN_FP8_PREPASS_V_TRANSPOSED)

namespace {

using hattn::common::format;
using namespace hattn::host;

static_assert(HATTN_FP8_BLOCK_ROWS == hattn::fp8::kBlockRows, "the header's block size is the kernel's");
static_assert(HATTN_FP8_E4M3_MAX == hattn::fp8::kE4m3Max, "the header's e4m3 maximum is the kernel's");

constexpr unsigned kKnownFlags = HATTN_FP8_PREPASS_V_TRANSPOSED | HATTN_FP8_PREPASS_V_PER_HEAD;
// Base addresses and strides of the e4m3 outputs and the rotary tables: 16 bytes (vector access
// here, TMA in the FP8 kernel).
constexpr int64_t kAlignBytes = 16;
constexpr int64_t kFp8ElemBytes = 1;
constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

// The three inputs, in the views the shared checks walk (2-byte elements). With
// HATTN_FP8_PREPASS_V_TRANSPOSED, v_fp8 is V^T (its strides ignored): the row checks walk
// q_fp8 and k_fp8 only, check_vt_output the rest.
struct Views {
    TensorView in[3];
    TensorView out[3];
    float* descale[3];
    const char* descale_name[3];
    int row_outputs;  // 3, or 2 with V^T
};

bool v_transposed(const hattn_fp8_prepass_params& p) { return (p.flags & HATTN_FP8_PREPASS_V_TRANSPOSED) != 0; }

Views views_of(const hattn_fp8_prepass_params& p) {
    Views v{{{"q", "q", p.q, p.seqlen_q, p.heads_q, p.q_batch_stride, p.q_seq_stride, p.q_head_stride},
             {"k", "k", p.k, p.seqlen_k, p.heads_kv, p.k_batch_stride, p.k_seq_stride, p.k_head_stride},
             {"v", "v", p.v, p.seqlen_k, p.heads_kv, p.v_batch_stride, p.v_seq_stride, p.v_head_stride}},
            {{"q_fp8", "q_fp8", p.q_fp8, p.seqlen_q, p.heads_q, p.q_fp8_batch_stride, p.q_fp8_seq_stride,
              p.q_fp8_head_stride},
             {"k_fp8", "k_fp8", p.k_fp8, p.seqlen_k, p.heads_kv, p.k_fp8_batch_stride, p.k_fp8_seq_stride,
              p.k_fp8_head_stride},
             {"v_fp8", "v_fp8", p.v_fp8, p.seqlen_k, p.heads_kv, p.v_fp8_batch_stride, p.v_fp8_seq_stride,
              p.v_fp8_head_stride}},
            {p.q_descale, p.k_descale, p.v_descale},
            {"q_descale", "k_descale", "v_descale"},
            v_transposed(p) ? 2 : 3};
    return v;
}

Failure check_rope_and_flags(const hattn_fp8_prepass_params& p) {
    const int rope = enum_value(p.rope);
    if (rope != HATTN_ROPE_NONE && rope != HATTN_ROPE_INTERLEAVED && rope != HATTN_ROPE_HALF) {
        return fail(HATTN_ERROR_INVALID_FLAGS,
                    format("rope = %d is not HATTN_ROPE_NONE (0), HATTN_ROPE_INTERLEAVED (1) or HATTN_ROPE_HALF (2)",
                           rope));
    }
    return check_unknown_flags(p.flags, kKnownFlags);
}

// Positive strides, then 16-byte aligned bases and strides, of the 1-byte outputs (tensor by tensor).
Failure check_output_strides_and_alignment(const Views& v) {
    for (const TensorView& t : Tensors{v.out, static_cast<size_t>(v.row_outputs)}) {
        Failure f = check_positive_strides(t);
        if (f.failed()) return f;
        f = check_e4m3_alignment(t);
        if (f.failed()) return f;
    }
    return {};
}

// The rotary tables, when a rotation is asked for.
Failure check_rope_tables(const hattn_fp8_prepass_params& p) {
    if (enum_value(p.rope) == HATTN_ROPE_NONE) return {};
    const struct {
        const char* name;
        const float* ptr;
    } tables[] = {{"rope_cos", p.rope_cos}, {"rope_sin", p.rope_sin}};
    for (const auto& t : tables) {
        if (t.ptr == nullptr) return fail(HATTN_ERROR_NULL_POINTER, format("%s is NULL (rope is not HATTN_ROPE_NONE)", t.name));
    }
    for (const auto& t : tables) {
        if (reinterpret_cast<uintptr_t>(t.ptr) % kAlignBytes != 0) {
            return fail(HATTN_ERROR_MISALIGNED, format("%s = %p is not 16-byte aligned", t.name,
                                                       static_cast<const void*>(t.ptr)));
        }
    }
    if (p.rope_q_offset < 0) {
        return fail(HATTN_ERROR_INVALID_SIZE, format("rope_q_offset = %d must be >= 0", p.rope_q_offset));
    }
    const int64_t q_rows = static_cast<int64_t>(p.rope_q_offset) + p.seqlen_q;
    if (p.rope_rows < p.seqlen_k || p.rope_rows < q_rows) {
        return fail(HATTN_ERROR_INVALID_SIZE,
                    format("rope_rows = %d must be >= seqlen_k = %d and >= rope_q_offset + seqlen_q = %lld",
                           p.rope_rows, p.seqlen_k, static_cast<long long>(q_rows)));
    }
    const Int128 bytes = static_cast<Int128>(p.rope_rows) * (p.head_dim / 2) * static_cast<int64_t>(sizeof(float));
    for (const auto& t : tables) {
        Failure f = check_byte_extent(t.name, t.ptr, bytes);
        if (f.failed()) return f;
    }
    return {};
}

// One thread block per (batch, head, block of rows) of each tensor, on a 1-D grid.
Failure check_grid(const hattn_fp8_prepass_params& p, const Views& v) {
    for (const TensorView& t : v.in) {
        const Int128 blocks = static_cast<Int128>(fp8_blocks_of(t.seqlen)) * t.heads * p.batch;
        if (blocks > kMaxInt32) {
            return fail(HATTN_ERROR_SIZE_OVERFLOW,
                        format("%s: ceil(seqlen / %d) * heads * batch = %lld thread blocks does not fit in int32 (the "
                               "grid's limit)",
                               t.name, HATTN_FP8_BLOCK_ROWS, static_cast<long long>(blocks)));
        }
    }
    return {};
}

Failure check_output_extents(const Shape& s, const Views& v) {
    for (const TensorView& t : Tensors{v.out, static_cast<size_t>(v.row_outputs)}) {
        const Int128 last = static_cast<Int128>(s.batch - 1) * t.batch_stride +
                            static_cast<Int128>(t.seqlen - 1) * t.seq_stride +
                            static_cast<Int128>(t.heads - 1) * t.head_stride + s.head_dim;
        if (last > std::numeric_limits<int64_t>::max()) {
            return fail(HATTN_ERROR_SIZE_OVERFLOW,
                        format("%s: the largest byte offset does not fit in int64 (check its sizes and strides)", t.name));
        }
        Failure f = check_byte_extent(t.name, t.ptr, last * kFp8ElemBytes);
        if (f.failed()) return f;
    }
    for (int i = 0; i < 3; ++i) {
        const Int128 bytes =
            static_cast<Int128>(fp8_blocks_of(v.in[i].seqlen)) * v.in[i].heads * s.batch * static_cast<int64_t>(sizeof(float));
        Failure f = check_byte_extent(v.descale_name[i], v.descale[i], bytes);
        if (f.failed()) return f;
    }
    return {};
}

Failure check_outputs_do_not_overlap(const Shape& s, const Views& v) {
    for (const TensorView& t : Tensors{v.out, static_cast<size_t>(v.row_outputs)}) {
        Failure f = check_rows_do_not_overlap(s, t);
        if (f.failed()) return f;
    }
    return {};
}

// With HATTN_FP8_PREPASS_V_TRANSPOSED, v_fp8 is V^T.
Failure check_vt_output(const hattn_fp8_prepass_params& p) {
    if (!v_transposed(p)) return {};
    return check_vt_tensor("v_fp8", p.v_fp8, fp8_vt_bytes(p.batch, p.heads_kv, p.seqlen_k, p.head_dim),
                           "HATTN_FP8_PREPASS_V_TRANSPOSED");
}

Failure validate(const hattn_fp8_prepass_params* params) {
    if (params == nullptr) return fail(HATTN_ERROR_NULL_PARAMS, "params is NULL");
    const hattn_fp8_prepass_params& p = *params;
    const Shape s = shape_of(p);
    const Views v = views_of(p);
    return first_failure([&] { return check_not_null(tensors(v.in)); },
                         [&] { return check_not_null(tensors(v.out)); },
                         [&] { return check_descales_not_null(v); },
                         [&] { return check_dtype_and_head_dim(s); },
                         [&] { return check_sizes(s); },
                         [&] { return check_rope_and_flags(p); },
                         [&] { return check_strides_and_alignment(s, tensors(v.in)); },
                         [&] { return check_output_strides_and_alignment(v); },
                         [&] { return check_vt_output(p); },
                         [&] { return check_descale_alignment(v); },
                         [&] { return check_rope_tables(p); },
                         [&] { return check_head_count(s); },
                         [&] { return check_grid(p, v); },
                         [&] { return check_tma_limits_and_extents(s, tensors(v.in)); },
                         [&] { return check_output_extents(s, v); },
                         // Outputs are written by many thread blocks at once.
                         [&] { return check_outputs_do_not_overlap(s, v); });
}

hattn::fp8::Fp8Tensor tensor_args(const TensorView& in, const TensorView& out, float* descale, int rope_offset) {
    hattn::fp8::Fp8Tensor t;
    t.in = in.ptr;
    t.out = const_cast<void*>(out.ptr);
    t.descale = descale;
    t.seqlen = in.seqlen;
    t.heads = in.heads;
    t.in_batch_stride = in.batch_stride;
    t.in_seq_stride = in.seq_stride;
    t.in_head_stride = in.head_stride;
    t.out_batch_stride = out.batch_stride;
    t.out_seq_stride = out.seq_stride;
    t.out_head_stride = out.head_stride;
    t.rope_offset = rope_offset;
    return t;
}

hattn::fp8::Fp8PrepassArgs make_args(const hattn_fp8_prepass_params& p) {
    const Views v = views_of(p);
    hattn::fp8::Fp8PrepassArgs a;
    a.q = tensor_args(v.in[0], v.out[0], p.q_descale, p.rope_q_offset);
    a.k = tensor_args(v.in[1], v.out[1], p.k_descale, 0);
    a.v = tensor_args(v.in[2], v.out[2], p.v_descale, 0);
    a.v.amax_given = (p.flags & HATTN_FP8_PREPASS_V_PER_HEAD) != 0;
    if (v_transposed(p)) {
        a.v.vt_keys = hattn::fwd_fp8::vt_keys(p.seqlen_k);
        a.v.out_head_stride = static_cast<int64_t>(p.head_dim) * a.v.vt_keys;
        a.v.out_batch_stride = static_cast<int64_t>(p.heads_kv) * a.v.out_head_stride;
        a.v.out_seq_stride = 0;  // not used: V^T's rows are head dims
    }
    a.batch = p.batch;
    a.head_dim = p.head_dim;
    a.dtype = p.dtype == HATTN_DTYPE_BF16 ? hattn::fwd::Dtype::kBf16 : hattn::fwd::Dtype::kFp16;
    a.rope = static_cast<hattn::fp8::Rope>(enum_value(p.rope));
    a.hadamard = p.hadamard != 0;
    a.hadamard_seed = p.hadamard_seed;
    a.rope_cos = p.rope_cos;
    a.rope_sin = p.rope_sin;
    return a;
}

}  // namespace

namespace hattn::host {

hattn_status fp8_prepass_variant(const hattn_fp8_prepass_params* params, fp8::Fp8PrepassVariant variant,
                                 cudaStream_t stream) {
    // Validation before any CUDA call: a bad call launches and writes nothing.
    const hattn_status ready = ready_to_launch(validate(params));
    if (ready != HATTN_SUCCESS) return ready;

    fp8::Fp8PrepassArgs args = make_args(*params);
    args.variant = variant;
    std::string error;
    cudaError_t rc = cudaErrorInvalidValue;
    switch (args.head_dim) {
        case 64: rc = launch_fp8_prepass_d64(args, stream, &error); break;
        case 128: rc = launch_fp8_prepass_d128(args, stream, &error); break;
        case 256: rc = launch_fp8_prepass_d256(args, stream, &error); break;
        default: return HATTN_ERROR_UNSUPPORTED_HEAD_DIM;  // unreachable after validation
    }
    return launch_status("hattn_fp8_prepass", rc, error);
}

}  // namespace hattn::host

extern "C" {

hattn_fp8_prepass_params hattn_fp8_prepass_params_contiguous(const void* q, const void* k, const void* v, void* q_fp8,
                                                             void* k_fp8, void* v_fp8, float* q_descale,
                                                             float* k_descale, float* v_descale, int batch,
                                                             int heads_q, int heads_kv, int seqlen_q, int seqlen_k,
                                                             int head_dim, hattn_dtype dtype) {
    hattn_fp8_prepass_params p;
    std::memset(&p, 0, sizeof(p));  // no RoPE, no Hadamard, no flags
    p.q = q;
    p.k = k;
    p.v = v;
    p.q_fp8 = q_fp8;
    p.k_fp8 = k_fp8;
    p.v_fp8 = v_fp8;
    p.q_descale = q_descale;
    p.k_descale = k_descale;
    p.v_descale = v_descale;
    std::memcpy(&p.dtype, &dtype, sizeof(p.dtype));  // as given, even a value no enumerator names
    const ContiguousLayout l =
        set_contiguous_sizes_and_qkv_strides(p, batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim);
    // The e4m3 outputs have the inputs' element strides (one byte per element).
    set_strides(l.q_like, p.q_fp8_batch_stride, p.q_fp8_seq_stride, p.q_fp8_head_stride);
    set_strides(l.kv_like, p.k_fp8_batch_stride, p.k_fp8_seq_stride, p.k_fp8_head_stride);
    set_strides(l.kv_like, p.v_fp8_batch_stride, p.v_fp8_seq_stride, p.v_fp8_head_stride);
    return p;
}

hattn_status hattn_fp8_prepass_validate(const hattn_fp8_prepass_params* params, char* msg, size_t msg_len) {
    return reported(validate(params), msg, msg_len);
}

hattn_status hattn_fp8_prepass(const hattn_fp8_prepass_params* params, cudaStream_t stream) {
    return fp8_prepass_variant(params, hattn::fp8::Fp8PrepassVariant{}, stream);
}

}  // extern "C"
