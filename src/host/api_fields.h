// hattn/src/host/api_fields.h -- the fields hattn_fwd_params and hattn_bwd_params share (q, k, v, o,
// the sizes, the dtype, the scale and the mask), handled once for both entry points: contiguous
// strides, the views the checks walk, and the copy into the launchers' argument structs.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/format.h"
#include "hattn.h"
#include "host/validate.h"
#include "kernels/fwd_args.h"
#include "kernels/fwd_fp8_args.h"  // kVtKeyAlign: V^T's layout

namespace hattn::host {

// ---- Contiguous strides -----------------------------------------------------------------------

struct Strides {
    int64_t batch, seq, head;
};

// A contiguous stride too large for int64 saturates here: a multiple of 8 elements (so it passes
// the 16-byte stride check) far beyond TMA's 2^40-byte stride limit, so validation reports
// HATTN_ERROR_SIZE_OVERFLOW for it.
constexpr int64_t kSaturatedStride = std::numeric_limits<int64_t>::max() & ~int64_t{7};

inline int64_t saturated(Int128 x) {
    if (x > kSaturatedStride) return kSaturatedStride;
    if (x < -kSaturatedStride) return -kSaturatedStride;
    return static_cast<int64_t>(x);
}

// [b, s, h, d] contiguous: a head step is head_dim, a seq step a full row of heads, a batch step a
// full sequence. The products of int sizes are exact in 128 bits (< 2^93), so any int input,
// negative or huge, is well defined.
inline Strides contiguous_strides(int seqlen, int heads, int head_dim) {
    const Int128 head = head_dim;
    const Int128 seq = head * heads;
    const Int128 batch = seq * seqlen;
    return {saturated(batch), saturated(seq), saturated(head)};
}

inline void set_strides(const Strides& s, int64_t& batch_stride, int64_t& seq_stride, int64_t& head_stride) {
    batch_stride = s.batch;
    seq_stride = s.seq;
    head_stride = s.head;
}

// The q and k/v strides of a contiguous layout: outputs shaped like an input take the same ones.
struct ContiguousLayout {
    Strides q_like, kv_like;
};

// Sizes and contiguous q, k, v strides of a zeroed params struct (every entry point's params
// name them alike); returns the strides for the caller's outputs.
template <class Params>
ContiguousLayout set_contiguous_sizes_and_qkv_strides(Params& p, int batch, int heads_q, int heads_kv, int seqlen_q,
                                                      int seqlen_k, int head_dim) {
    p.batch = batch;
    p.heads_q = heads_q;
    p.heads_kv = heads_kv;
    p.seqlen_q = seqlen_q;
    p.seqlen_k = seqlen_k;
    p.head_dim = head_dim;
    const ContiguousLayout l{contiguous_strides(seqlen_q, heads_q, head_dim),
                             contiguous_strides(seqlen_k, heads_kv, head_dim)};
    set_strides(l.q_like, p.q_batch_stride, p.q_seq_stride, p.q_head_stride);
    set_strides(l.kv_like, p.k_batch_stride, p.k_seq_stride, p.k_head_stride);
    set_strides(l.kv_like, p.v_batch_stride, p.v_seq_stride, p.v_head_stride);
    return l;
}

// Sizes, dtype and contiguous q, k, v, o of a zeroed params struct (default scale, no mask).
template <class Params, class OutPtr>
void set_contiguous_qkvo(Params& p, const void* q, const void* k, const void* v, OutPtr o, int batch, int heads_q,
                         int heads_kv, int seqlen_q, int seqlen_k, int head_dim, hattn_dtype dtype) {
    p.q = q;
    p.k = k;
    p.v = v;
    p.o = o;
    std::memcpy(&p.dtype, &dtype, sizeof(p.dtype));  // as given, even a value no enumerator names
    const ContiguousLayout l =
        set_contiguous_sizes_and_qkv_strides(p, batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim);
    set_strides(l.q_like, p.o_batch_stride, p.o_seq_stride, p.o_head_stride);
}

// ---- What the checks walk -----------------------------------------------------------------------

// `dtype`: the dtype the shared 16-bit checks see (the FP8 forward's is its o_dtype).
template <class Params>
Shape shape_of(const Params& p, int dtype) {
    Shape s;
    s.batch = p.batch;
    s.heads_q = p.heads_q;
    s.heads_kv = p.heads_kv;
    s.seqlen_q = p.seqlen_q;
    s.seqlen_k = p.seqlen_k;
    s.head_dim = p.head_dim;
    s.dtype = dtype;
    return s;
}
template <class Params>
Shape shape_of(const Params& p) {
    return shape_of(p, enum_value(p.dtype));
}

template <class Params>
TensorView q_view(const Params& p) {
    return {"q", "q", p.q, p.seqlen_q, p.heads_q, p.q_batch_stride, p.q_seq_stride, p.q_head_stride};
}
template <class Params>
TensorView k_view(const Params& p) {
    return {"k", "k", p.k, p.seqlen_k, p.heads_kv, p.k_batch_stride, p.k_seq_stride, p.k_head_stride};
}
template <class Params>
TensorView v_view(const Params& p) {
    return {"v", "v", p.v, p.seqlen_k, p.heads_kv, p.v_batch_stride, p.v_seq_stride, p.v_head_stride};
}
template <class Params>
TensorView o_view(const Params& p) {
    return {"o", "o", p.o, p.seqlen_q, p.heads_q, p.o_batch_stride, p.o_seq_stride, p.o_head_stride};
}

// ---- The FP8 entry points' per-block descales ------------------------------------------------------

// Descale blocks along a sequence: one fp32 per HATTN_FP8_BLOCK_ROWS rows.
inline int64_t fp8_blocks_of(int seqlen) {
    return (static_cast<int64_t>(seqlen) + HATTN_FP8_BLOCK_ROWS - 1) / HATTN_FP8_BLOCK_ROWS;
}

// V^T's bytes, the FP8 forward's layout: [batch, heads_kv, head_dim, seqlen_k rounded up to
// fwd_fp8::kVtKeyAlign] e4m3 (the workspace hattn_fwd_fp8 transposes V into, or the caller's V^T
// with HATTN_FP8_PREPASS_V_TRANSPOSED / HATTN_FWD_FP8_V_TRANSPOSED).
inline Int128 fp8_vt_bytes(int batch, int heads_kv, int seqlen_k, int head_dim) {
    constexpr int kAlign = fwd_fp8::kVtKeyAlign;
    const Int128 keys = (static_cast<Int128>(seqlen_k) + kAlign - 1) / kAlign * kAlign;
    return static_cast<Int128>(batch) * heads_kv * head_dim * keys;
}

// A caller's V^T (`name`, given with flag `flag`): 16-byte aligned (the FP8 forward's TMA) and
// all its fp8_vt_bytes addressable.
inline Failure check_vt_tensor(const char* name, const void* ptr, Int128 bytes, const char* flag) {
    constexpr uintptr_t kTmaAlignBytes = 16;
    if (reinterpret_cast<uintptr_t>(ptr) % kTmaAlignBytes != 0) {
        return fail(HATTN_ERROR_MISALIGNED, common::format("%s = %p is not 16-byte aligned (%s)", name, ptr, flag));
    }
    return check_byte_extent(name, ptr, bytes);
}

// `v.descale[3]` and `v.descale_name[3]` of q, k, v.
template <class Views>
Failure check_descales_not_null(const Views& v) {
    for (int i = 0; i < 3; ++i) {
        if (v.descale[i] == nullptr) return fail(HATTN_ERROR_NULL_POINTER, common::format("%s is NULL", v.descale_name[i]));
    }
    return {};
}
template <class Views>
Failure check_descale_alignment(const Views& v) {
    for (int i = 0; i < 3; ++i) {
        Failure f = check_fp32_alignment(v.descale_name[i], v.descale[i]);
        if (f.failed()) return f;
    }
    return {};
}

// ---- Into the launchers' argument structs ---------------------------------------------------------

inline float resolved_scale(float softmax_scale, int head_dim) {
    return softmax_scale != 0.f ? softmax_scale : 1.f / std::sqrt(static_cast<float>(head_dim));
}

// The sizes and q, k, v, o strides of validated params into a launcher's argument struct (the
// bf16/fp16 and the FP8 forward's, the backward's).
template <class Params, class Args>
void copy_sizes_and_strides(const Params& p, Args& a) {
    a.batch = p.batch;
    a.heads_q = p.heads_q;
    a.heads_kv = p.heads_kv;
    a.seqlen_q = p.seqlen_q;
    a.seqlen_k = p.seqlen_k;
    a.head_dim = p.head_dim;
    a.q_batch_stride = p.q_batch_stride;
    a.q_seq_stride = p.q_seq_stride;
    a.q_head_stride = p.q_head_stride;
    a.k_batch_stride = p.k_batch_stride;
    a.k_seq_stride = p.k_seq_stride;
    a.k_head_stride = p.k_head_stride;
    a.v_batch_stride = p.v_batch_stride;
    a.v_seq_stride = p.v_seq_stride;
    a.v_head_stride = p.v_head_stride;
    a.o_batch_stride = p.o_batch_stride;
    a.o_seq_stride = p.o_seq_stride;
    a.o_head_stride = p.o_head_stride;
}

// The shared fields of FwdArgs / BwdArgs from validated params; the scale is resolved here.
template <class Params, class Args>
void copy_common_args(const Params& p, Args& a) {
    a.q = p.q;
    a.k = p.k;
    a.v = p.v;
    a.o = p.o;
    copy_sizes_and_strides(p, a);
    a.dtype = p.dtype == HATTN_DTYPE_BF16 ? fwd::Dtype::kBf16 : fwd::Dtype::kFp16;
    a.softmax_scale = resolved_scale(p.softmax_scale, p.head_dim);
    a.causal = p.causal != 0;
}

}  // namespace hattn::host
