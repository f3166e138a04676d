// hattn/src/host/fwd_api.cpp -- the public C API (include/hattn.h): validation, device check,
// normalization into FwdArgs, and dispatch to the per-head-dim launchers.
//
// NOTES:
//   * Validation runs first and touches nothing: no CUDA call, no read or write through the
//     tensor pointers. A rejected call therefore behaves the same on a machine without a GPU.
//   * Checks run in a fixed order (see hattn_fwd_validate) so that an input with several
//     problems always reports the same, most basic one first.
//   * Offsets and extents are computed in 128-bit integers: with int sizes (< 2^31) and int64
//     strides (< 2^63) every product and sum fits, so the overflow checks cannot overflow.
//   * Messages are built with common::format (vsnprintf), never with iostreams: see the NOTES in
//     src/common/format.h for the crash that iostreams' locale facets cause inside other processes.
#include "hattn.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "common/format.h"
#include "host/fwd_launch.h"
#include "kernels/fwd_args.h"

namespace {

using hattn::common::format;

// 128-bit intermediates for offset arithmetic (GCC/Clang extension; __extension__ keeps
// -Wpedantic quiet).
__extension__ typedef __int128 Int128;

// ---- Limits, each with its hardware reason ------------------------------------------------

// TMA (cp.async.bulk.tensor) needs the global base address and every global stride to be a
// multiple of 16 bytes.
constexpr int64_t kTmaAlignBytes = 16;
// cuTensorMapEncodeTiled: every global dimension is at most 2^32 elements and every stride is
// below 2^40 bytes.
constexpr int64_t kTmaMaxDim = int64_t{1} << 32;
constexpr int64_t kTmaMaxStrideBytes = int64_t{1} << 40;
// The kernel walks ceil(seqlen_q / 128) * heads_q * batch work tiles, numbered in int32 and
// launched on a 1-D grid (gridDim.x <= 2^31 - 1).
constexpr int64_t kRowsPerTile = 128;
// The kernel linearizes (batch, head) into an int, so the product must stay a valid int.
constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();
constexpr Int128 kMaxInt64 = std::numeric_limits<int64_t>::max();
// LSE is fp32, written with ordinary 4-byte stores.
constexpr uintptr_t kLseAlignBytes = alignof(float);

constexpr int64_t kElemBytes = 2;  // bf16 and fp16 are both 2 bytes

constexpr unsigned kAblationFlags = HATTN_FWD_NO_PINGPONG | HATTN_FWD_NO_INTRA_WG_OVERLAP;
constexpr unsigned kKnownFlags = kAblationFlags;
// The ablation variants are only instantiated for this shape (see src/host/fwd_launch_d128.cu).
constexpr int kAblationHeadDim = 128;
constexpr hattn_dtype kAblationDtype = HATTN_DTYPE_BF16;

// Hopper: the sm_90a kernels (wgmma, setmaxnreg, TMA multicast) run on CC 9.0 only.
constexpr int kRequiredCcMajor = 9;
constexpr int kRequiredCcMinor = 0;

#define HATTN_STRINGIFY_(x) #x
#define HATTN_STRINGIFY(x) HATTN_STRINGIFY_(x)
constexpr const char* kVersionString = HATTN_STRINGIFY(HATTN_VERSION_MAJOR) "." HATTN_STRINGIFY(
    HATTN_VERSION_MINOR) "." HATTN_STRINGIFY(HATTN_VERSION_PATCH);

// Set to a non-zero value to have hattn_fwd print launcher errors to stderr.
constexpr const char* kLogErrorsEnv = "HATTN_LOG_ERRORS";

// ---- A uniform view of the four [batch, seqlen, heads, head_dim] tensors --------------------

struct TensorView {
    const char* name;  // "q", "k", "v", "o": prefix of the params field names
    const void* ptr;
    int seqlen;
    int heads;
    int64_t batch_stride, seq_stride, head_stride;
};

struct StrideRef {
    const char* suffix;  // "_batch_stride", ...
    int64_t stride;
    int size;  // the extent of the dimension the stride steps through
};

void make_views(const hattn_fwd_params& p, TensorView out[4]) {
    out[0] = {"q", p.q, p.seqlen_q, p.heads_q, p.q_batch_stride, p.q_seq_stride, p.q_head_stride};
    out[1] = {"k", p.k, p.seqlen_k, p.heads_kv, p.k_batch_stride, p.k_seq_stride, p.k_head_stride};
    out[2] = {"v", p.v, p.seqlen_k, p.heads_kv, p.v_batch_stride, p.v_seq_stride, p.v_head_stride};
    out[3] = {"o", p.o, p.seqlen_q, p.heads_q, p.o_batch_stride, p.o_seq_stride, p.o_head_stride};
}

void strides_of(const TensorView& t, int batch, StrideRef out[3]) {
    out[0] = {"_batch_stride", t.batch_stride, batch};
    out[1] = {"_seq_stride", t.seq_stride, t.seqlen};
    out[2] = {"_head_stride", t.head_stride, t.heads};
}

// A failed check: the status plus a message that names the offending field.
struct Failure {
    hattn_status status = HATTN_SUCCESS;
    std::string message;
};

Failure fail(hattn_status status, const std::string& message) { return Failure{status, message}; }

// ---- The checks, in the order hattn_fwd_validate runs them ---------------------------------

Failure check_pointers(const hattn_fwd_params& p) {
    TensorView views[4];
    make_views(p, views);
    for (const TensorView& t : views) {
        if (t.ptr == nullptr) return fail(HATTN_ERROR_NULL_POINTER, format("%s is NULL", t.name));
    }
    return {};
}

Failure check_dtype_and_head_dim(const hattn_fwd_params& p) {
    if (p.dtype != HATTN_DTYPE_BF16 && p.dtype != HATTN_DTYPE_FP16) {
        return fail(HATTN_ERROR_UNSUPPORTED_DTYPE,
                    format("dtype = %d is not HATTN_DTYPE_BF16 (0) or HATTN_DTYPE_FP16 (1)",
                           static_cast<int>(p.dtype)));
    }
    if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) {
        return fail(HATTN_ERROR_UNSUPPORTED_HEAD_DIM,
                    format("head_dim = %d is not one of the built sizes 64, 128, 256", p.head_dim));
    }
    return {};
}

Failure check_sizes(const hattn_fwd_params& p) {
    const struct {
        const char* name;
        int value;
    } sizes[] = {{"batch", p.batch},       {"heads_q", p.heads_q},   {"heads_kv", p.heads_kv},
                 {"seqlen_q", p.seqlen_q}, {"seqlen_k", p.seqlen_k}};
    for (const auto& s : sizes) {
        if (s.value <= 0) {
            return fail(HATTN_ERROR_INVALID_SIZE, format("%s = %d must be positive", s.name, s.value));
        }
    }
    if (p.heads_q % p.heads_kv != 0) {
        return fail(HATTN_ERROR_HEADS_NOT_DIVISIBLE,
                    format("heads_q = %d is not a multiple of heads_kv = %d (each KV head must serve a whole group "
                           "of query heads)",
                           p.heads_q, p.heads_kv));
    }
    return {};
}

Failure check_alignment(const hattn_fwd_params& p) {
    TensorView views[4];
    make_views(p, views);
    // Positive strides first: a zero or negative stride is a layout error, not an alignment one.
    for (const TensorView& t : views) {
        StrideRef strides[3];
        strides_of(t, p.batch, strides);
        for (const StrideRef& s : strides) {
            if (s.stride <= 0) {
                return fail(HATTN_ERROR_INVALID_STRIDE, format("%s%s = %lld must be positive", t.name, s.suffix,
                                                               static_cast<long long>(s.stride)));
            }
        }
    }
    for (const TensorView& t : views) {
        const uintptr_t address = reinterpret_cast<uintptr_t>(t.ptr);
        if (address % kTmaAlignBytes != 0) {
            return fail(HATTN_ERROR_MISALIGNED,
                        format("%s = %p is not %lld-byte aligned (TMA needs 16-byte aligned base addresses)", t.name,
                               t.ptr, static_cast<long long>(kTmaAlignBytes)));
        }
        StrideRef strides[3];
        strides_of(t, p.batch, strides);
        for (const StrideRef& s : strides) {
            // The stride is positive and bounded by int64, so the product fits in 128 bits.
            const Int128 bytes = static_cast<Int128>(s.stride) * kElemBytes;
            if (bytes % kTmaAlignBytes != 0) {
                return fail(HATTN_ERROR_MISALIGNED,
                            format("%s%s = %lld elements (%lld bytes) is not a multiple of 16 bytes (TMA needs "
                                   "16-byte aligned strides)",
                                   t.name, s.suffix, static_cast<long long>(s.stride),
                                   static_cast<long long>(bytes)));
            }
        }
    }
    if (p.lse != nullptr && reinterpret_cast<uintptr_t>(p.lse) % kLseAlignBytes != 0) {
        return fail(HATTN_ERROR_MISALIGNED,
                    format("lse = %p is not %zu-byte aligned (fp32)", static_cast<const void*>(p.lse),
                           static_cast<size_t>(kLseAlignBytes)));
    }
    return {};
}

// The element offset one past the last element a tensor addresses, from its base.
Int128 extent_elements(const TensorView& t, int batch, int head_dim) {
    return static_cast<Int128>(batch - 1) * t.batch_stride + static_cast<Int128>(t.seqlen - 1) * t.seq_stride +
           static_cast<Int128>(t.heads - 1) * t.head_stride + head_dim;
}

Failure check_extent(const char* name, const void* base, Int128 extent_elems, int64_t elem_bytes) {
    if (extent_elems - 1 > kMaxInt64) {
        return fail(HATTN_ERROR_SIZE_OVERFLOW,
                    format("%s: the largest element offset does not fit in int64 (check its sizes and strides)", name));
    }
    const Int128 extent_bytes = extent_elems * elem_bytes;
    const Int128 last_address = static_cast<Int128>(reinterpret_cast<uintptr_t>(base)) + extent_bytes;
    if (extent_bytes > kMaxInt64 || last_address > static_cast<Int128>(std::numeric_limits<uintptr_t>::max())) {
        return fail(HATTN_ERROR_SIZE_OVERFLOW,
                    format("%s: the addressed byte range overflows the address space (check its sizes and strides)",
                           name));
    }
    return {};
}

Failure check_overflow(const hattn_fwd_params& p) {
    if (static_cast<int64_t>(p.batch) * p.heads_q > kMaxInt32) {
        return fail(HATTN_ERROR_SIZE_OVERFLOW, format("batch * heads_q = %lld does not fit in int32",
                                                      static_cast<long long>(p.batch) * p.heads_q));
    }
    const int64_t tiles = (p.seqlen_q + kRowsPerTile - 1) / kRowsPerTile * p.heads_q * p.batch;
    if (tiles > kMaxInt32) {
        return fail(HATTN_ERROR_SIZE_OVERFLOW,
                    format("ceil(seqlen_q / 128) * heads_q * batch = %lld work tiles does not fit in int32 (the "
                           "grid's limit)",
                           static_cast<long long>(tiles)));
    }
    // Sizes are ints, so every TMA dimension (head_dim, seqlen, heads, batch) is below 2^31 <= 2^32.
    static_assert(static_cast<int64_t>(std::numeric_limits<int>::max()) < kTmaMaxDim,
                  "int sizes always fit a TMA dimension");
    TensorView views[4];
    make_views(p, views);
    for (const TensorView& t : views) {
        StrideRef strides[3];
        strides_of(t, p.batch, strides);
        for (const StrideRef& s : strides) {
            const Int128 bytes = static_cast<Int128>(s.stride) * kElemBytes;
            if (bytes >= kTmaMaxStrideBytes) {
                return fail(HATTN_ERROR_SIZE_OVERFLOW,
                            format("%s%s = %lld elements is 2^40 bytes or more (the TMA stride limit)", t.name,
                                   s.suffix, static_cast<long long>(s.stride)));
            }
        }
        Failure f = check_extent(t.name, t.ptr, extent_elements(t, p.batch, p.head_dim), kElemBytes);
        if (f.status != HATTN_SUCCESS) return f;
    }
    if (p.lse != nullptr) {
        const Int128 lse_elems = static_cast<Int128>(p.batch) * p.heads_q * p.seqlen_q;
        Failure f = check_extent("lse", p.lse, lse_elems, static_cast<int64_t>(sizeof(float)));
        if (f.status != HATTN_SUCCESS) return f;
    }
    return {};
}

// O is written by many thread blocks at once, so two (b, s, h) rows must never share memory.
// Sufficient condition: with the dimensions ordered by stride, each stride is at least the span
// of everything nested inside it (head_dim contiguous at the bottom). Dimensions of size 1 are
// never stepped through, so their stride does not matter here.
Failure check_output_overlap(const hattn_fwd_params& p) {
    StrideRef dims[3] = {{"o_batch_stride", p.o_batch_stride, p.batch},
                         {"o_seq_stride", p.o_seq_stride, p.seqlen_q},
                         {"o_head_stride", p.o_head_stride, p.heads_q}};
    // Three elements: a tiny insertion sort by stride keeps the order readable.
    for (int i = 1; i < 3; ++i) {
        for (int j = i; j > 0 && dims[j].stride < dims[j - 1].stride; --j) {
            const StrideRef tmp = dims[j];
            dims[j] = dims[j - 1];
            dims[j - 1] = tmp;
        }
    }
    Int128 span = p.head_dim;  // elements covered by everything inside the current dimension
    for (const StrideRef& d : dims) {
        if (d.size == 1) continue;
        if (d.stride < span) {
            return fail(HATTN_ERROR_INVALID_STRIDE,
                        format("%s = %lld makes rows of o overlap (it must be at least %lld elements, the span of "
                               "the inner dimensions)",
                               d.suffix, static_cast<long long>(d.stride), static_cast<long long>(span)));
        }
        span = static_cast<Int128>(d.stride) * (d.size - 1) + span;
    }
    return {};
}

Failure check_scale_and_flags(const hattn_fwd_params& p) {
    if (!std::isfinite(p.softmax_scale) || p.softmax_scale < 0.f) {
        return fail(HATTN_ERROR_INVALID_SCALE,
                    format("softmax_scale = %g must be finite and >= 0 (0 selects 1/sqrt(head_dim))",
                           static_cast<double>(p.softmax_scale)));
    }
    if ((p.flags & ~kKnownFlags) != 0) {
        return fail(HATTN_ERROR_INVALID_FLAGS,
                    format("flags = 0x%x has unknown bits 0x%x", p.flags, p.flags & ~kKnownFlags));
    }
    if ((p.flags & kAblationFlags) != 0 && (p.head_dim != kAblationHeadDim || p.dtype != kAblationDtype)) {
        return fail(HATTN_ERROR_INVALID_FLAGS,
                    format("flags: the ablation variants (HATTN_FWD_NO_PINGPONG, HATTN_FWD_NO_INTRA_WG_OVERLAP) are "
                           "built only for head_dim 128 with bf16, got head_dim = %d %s",
                           p.head_dim, p.dtype == HATTN_DTYPE_BF16 ? "bf16" : "fp16"));
    }
    return {};
}

Failure validate(const hattn_fwd_params* params) {
    if (params == nullptr) return fail(HATTN_ERROR_NULL_PARAMS, "params is NULL");
    const hattn_fwd_params& p = *params;
    using Check = Failure (*)(const hattn_fwd_params&);
    const Check checks[] = {check_pointers, check_dtype_and_head_dim, check_sizes,           check_alignment,
                            check_overflow, check_output_overlap,     check_scale_and_flags};
    for (Check check : checks) {
        Failure f = check(p);
        if (f.status != HATTN_SUCCESS) return f;
    }
    return {};
}

void write_message(const std::string& text, char* msg, size_t msg_len) {
    if (msg == nullptr || msg_len == 0) return;
    const size_t n = text.size() < msg_len - 1 ? text.size() : msg_len - 1;
    std::memcpy(msg, text.data(), n);
    msg[n] = '\0';
}

hattn::fwd::FwdArgs make_args(const hattn_fwd_params& p) {
    hattn::fwd::FwdArgs a;
    a.q = p.q;
    a.k = p.k;
    a.v = p.v;
    a.o = p.o;
    a.lse = p.lse;
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
    a.dtype = p.dtype == HATTN_DTYPE_BF16 ? hattn::fwd::Dtype::kBf16 : hattn::fwd::Dtype::kFp16;
    a.softmax_scale = p.softmax_scale != 0.f ? p.softmax_scale : 1.f / std::sqrt(static_cast<float>(p.head_dim));
    a.causal = p.causal != 0;
    a.pingpong = (p.flags & HATTN_FWD_NO_PINGPONG) == 0;
    a.intra_wg_overlap = (p.flags & HATTN_FWD_NO_INTRA_WG_OVERLAP) == 0;
    return a;
}

// The current device must be Hopper. Queried on every call: the library keeps no state, and
// the attribute query is a cheap host-side lookup.
hattn_status check_device() {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return HATTN_ERROR_CUDA;
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        return HATTN_ERROR_CUDA;
    }
    if (major != kRequiredCcMajor || minor != kRequiredCcMinor) return HATTN_ERROR_UNSUPPORTED_DEVICE;
    return HATTN_SUCCESS;
}

}  // namespace

extern "C" {

hattn_fwd_params hattn_fwd_params_contiguous(const void* q, const void* k, const void* v, void* o, int batch,
                                             int heads_q, int heads_kv, int seqlen_q, int seqlen_k, int head_dim,
                                             hattn_dtype dtype) {
    hattn_fwd_params p;
    std::memset(&p, 0, sizeof(p));
    p.q = q;
    p.k = k;
    p.v = v;
    p.o = o;
    p.lse = nullptr;
    p.batch = batch;
    p.heads_q = heads_q;
    p.heads_kv = heads_kv;
    p.seqlen_q = seqlen_q;
    p.seqlen_k = seqlen_k;
    p.head_dim = head_dim;
    // [b, s, h, d] contiguous: a head step is head_dim, a seq step is a full row of heads,
    // a batch step is a full sequence. int64 throughout so large shapes do not wrap.
    const int64_t d = head_dim;
    p.q_head_stride = d;
    p.q_seq_stride = static_cast<int64_t>(heads_q) * d;
    p.q_batch_stride = static_cast<int64_t>(seqlen_q) * heads_q * d;
    p.k_head_stride = d;
    p.k_seq_stride = static_cast<int64_t>(heads_kv) * d;
    p.k_batch_stride = static_cast<int64_t>(seqlen_k) * heads_kv * d;
    p.v_head_stride = p.k_head_stride;
    p.v_seq_stride = p.k_seq_stride;
    p.v_batch_stride = p.k_batch_stride;
    p.o_head_stride = p.q_head_stride;
    p.o_seq_stride = p.q_seq_stride;
    p.o_batch_stride = p.q_batch_stride;
    p.dtype = dtype;
    p.softmax_scale = 0.f;
    p.causal = 0;
    p.flags = 0;
    return p;
}

hattn_status hattn_fwd_validate(const hattn_fwd_params* params, char* msg, size_t msg_len) {
    const Failure f = validate(params);
    write_message(f.status == HATTN_SUCCESS ? std::string("ok") : f.message, msg, msg_len);
    return f.status;
}

hattn_status hattn_fwd(const hattn_fwd_params* params, cudaStream_t stream) {
    // Validation before any CUDA call: a bad call returns its validation status even where
    // there is no GPU, and launches nothing.
    const Failure f = validate(params);
    if (f.status != HATTN_SUCCESS) return f.status;

    const hattn_status device_status = check_device();
    if (device_status != HATTN_SUCCESS) return device_status;

    const hattn::fwd::FwdArgs args = make_args(*params);
    // The C API has no error-string channel (the library keeps no global state), so the
    // launcher's message goes to stderr only when the caller asks for it through the
    // environment (HATTN_LOG_ERRORS=1), e.g. while debugging a kernel.
    std::string error;
    cudaError_t rc = cudaErrorInvalidValue;
    switch (args.head_dim) {
        case 64: rc = hattn::host::launch_fwd_d64(args, stream, &error); break;
        case 128: rc = hattn::host::launch_fwd_d128(args, stream, &error); break;
        case 256: rc = hattn::host::launch_fwd_d256(args, stream, &error); break;
        default: return HATTN_ERROR_UNSUPPORTED_HEAD_DIM;  // unreachable after validation
    }
    if (rc == cudaSuccess) return HATTN_SUCCESS;
    const char* log = std::getenv(kLogErrorsEnv);
    if (log != nullptr && log[0] != '\0' && log[0] != '0') {
        std::fprintf(stderr, "hattn_fwd: %s (%s)\n", error.empty() ? "launch failed" : error.c_str(),
                     cudaGetErrorString(rc));
    }
    return HATTN_ERROR_CUDA;
}

const char* hattn_status_string(hattn_status status) {
    switch (status) {
        case HATTN_SUCCESS: return "success";
        case HATTN_ERROR_NULL_PARAMS: return "the params pointer is NULL";
        case HATTN_ERROR_NULL_POINTER: return "a tensor pointer (q, k, v or o) is NULL";
        case HATTN_ERROR_MISALIGNED: return "a pointer or stride is misaligned (TMA needs 16-byte alignment)";
        case HATTN_ERROR_UNSUPPORTED_HEAD_DIM: return "unsupported head_dim (built: 64, 128, 256)";
        case HATTN_ERROR_UNSUPPORTED_DTYPE: return "unsupported dtype (bf16 or fp16)";
        case HATTN_ERROR_INVALID_SIZE: return "a batch, heads or seqlen size is not positive";
        case HATTN_ERROR_INVALID_STRIDE: return "a stride is non-positive or makes the output overlap";
        case HATTN_ERROR_HEADS_NOT_DIVISIBLE: return "heads_q is not a multiple of heads_kv";
        case HATTN_ERROR_SIZE_OVERFLOW: return "a size, stride or offset exceeds the grid, TMA or 64-bit limits";
        case HATTN_ERROR_INVALID_SCALE: return "softmax_scale is negative, NaN or infinite";
        case HATTN_ERROR_INVALID_FLAGS: return "unknown flag bits, or a variant not built for this shape";
        case HATTN_ERROR_UNSUPPORTED_DEVICE: return "the current device is not compute capability 9.0 (Hopper)";
        case HATTN_ERROR_CUDA: return "a CUDA call or kernel launch failed (set HATTN_LOG_ERRORS=1 for details)";
    }
    return "unknown hattn_status value";
}

const char* hattn_version(void) { return kVersionString; }

}  // extern "C"
