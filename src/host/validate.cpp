// hattn/src/host/validate.cpp -- the shared checks of src/host/validate.h.
#include "host/validate.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include "common/format.h"
#include "kernels/fwd_args.h"

namespace hattn::host {
namespace {

using common::format;

// ---- Limits, each with its hardware reason ------------------------------------------------

// TMA (cp.async.bulk.tensor) needs the global base address and every global stride to be a
// multiple of 16 bytes.
constexpr int64_t kTmaAlignBytes = 16;
// cuTensorMapEncodeTiled: every global dimension is at most 2^32 elements and every stride is
// below 2^40 bytes.
constexpr int64_t kTmaMaxDim = int64_t{1} << 32;
constexpr int64_t kTmaMaxStrideBytes = int64_t{1} << 40;
// Block and (batch, head) counts are numbered in int32 and launched on a 1-D grid
// (gridDim.x <= 2^31 - 1).
constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();
constexpr Int128 kMaxInt64 = std::numeric_limits<int64_t>::max();
// fp32 arrays (LSE) are accessed with ordinary 4-byte loads and stores.
constexpr uintptr_t kFp32AlignBytes = alignof(float);

// Hopper: the sm_90a kernels (wgmma, setmaxnreg, TMA multicast) run on CC 9.0 only.
constexpr int kRequiredCcMajor = 9;
constexpr int kRequiredCcMinor = 0;

// Set to a non-zero value to have the entry points print launcher errors to stderr.
constexpr const char* kLogErrorsEnv = "HATTN_LOG_ERRORS";

struct StrideRef {
    const char* suffix;  // "_batch_stride", ...
    int64_t stride;
    int size;  // the extent of the dimension the stride steps through
};

void strides_of(const TensorView& t, int batch, StrideRef out[3]) {
    out[0] = {"_batch_stride", t.batch_stride, batch};
    out[1] = {"_seq_stride", t.seq_stride, t.seqlen};
    out[2] = {"_head_stride", t.head_stride, t.heads};
}

// Runs `check(stride)` over the three strides of one tensor; returns the first failure.
template <class Check>
Failure first_stride_failure(const TensorView& t, int batch, Check check) {
    StrideRef strides[3];
    strides_of(t, batch, strides);
    for (const StrideRef& r : strides) {
        Failure f = check(r);
        if (f.failed()) return f;
    }
    return {};
}

// The element offset one past the last element a tensor addresses, from its base.
Int128 extent_elements(const TensorView& t, int batch, int head_dim) {
    return static_cast<Int128>(batch - 1) * t.batch_stride + static_cast<Int128>(t.seqlen - 1) * t.seq_stride +
           static_cast<Int128>(t.heads - 1) * t.head_stride + head_dim;
}

Failure check_element_extent(const char* name, const void* base, Int128 extent_elems, int64_t elem_bytes) {
    if (extent_elems - 1 > kMaxInt64) {
        return fail(HATTN_ERROR_SIZE_OVERFLOW,
                    format("%s: the largest element offset does not fit in int64 (check its sizes and strides)", name));
    }
    return check_byte_extent(name, base, extent_elems * elem_bytes);
}

}  // namespace

Failure fail(hattn_status status, std::string message) { return Failure{status, std::move(message)}; }

Failure check_not_null(Tensors views) {
    for (const TensorView& t : views) {
        if (t.ptr == nullptr) return fail(HATTN_ERROR_NULL_POINTER, format("%s is NULL", t.name));
    }
    return {};
}

Failure check_dtype_and_head_dim(const Shape& s) {
    if (s.dtype != HATTN_DTYPE_BF16 && s.dtype != HATTN_DTYPE_FP16) {
        return fail(HATTN_ERROR_UNSUPPORTED_DTYPE,
                    format("dtype = %d is not HATTN_DTYPE_BF16 (0) or HATTN_DTYPE_FP16 (1)", s.dtype));
    }
    if (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256) {
        return fail(HATTN_ERROR_UNSUPPORTED_HEAD_DIM,
                    format("head_dim = %d is not one of the built sizes 64, 128, 256", s.head_dim));
    }
    return {};
}

Failure check_sizes(const Shape& s) {
    const struct {
        const char* name;
        int value;
    } sizes[] = {{"batch", s.batch},       {"heads_q", s.heads_q},   {"heads_kv", s.heads_kv},
                 {"seqlen_q", s.seqlen_q}, {"seqlen_k", s.seqlen_k}};
    for (const auto& size : sizes) {
        if (size.value <= 0) {
            return fail(HATTN_ERROR_INVALID_SIZE, format("%s = %d must be positive", size.name, size.value));
        }
    }
    if (s.heads_q % s.heads_kv != 0) {
        return fail(HATTN_ERROR_HEADS_NOT_DIVISIBLE,
                    format("heads_q = %d is not a multiple of heads_kv = %d (each KV head must serve a whole group "
                           "of query heads)",
                           s.heads_q, s.heads_kv));
    }
    return {};
}

Failure check_strides_and_alignment(const Shape& s, Tensors views) {
    for (const TensorView& t : views) {
        Failure f = first_stride_failure(t, s.batch, [&t](const StrideRef& r) {
            if (r.stride > 0) return Failure{};
            return fail(HATTN_ERROR_INVALID_STRIDE, format("%s%s = %lld must be positive", t.stride_prefix, r.suffix,
                                                           static_cast<long long>(r.stride)));
        });
        if (f.failed()) return f;
    }
    for (const TensorView& t : views) {
        if (reinterpret_cast<uintptr_t>(t.ptr) % kTmaAlignBytes != 0) {
            return fail(HATTN_ERROR_MISALIGNED,
                        format("%s = %p is not %lld-byte aligned (TMA needs 16-byte aligned base addresses)", t.name,
                               t.ptr, static_cast<long long>(kTmaAlignBytes)));
        }
        Failure f = first_stride_failure(t, s.batch, [&t](const StrideRef& r) {
            // The stride is positive and bounded by int64, so the product fits in 128 bits.
            const Int128 bytes = static_cast<Int128>(r.stride) * kElemBytes;
            if (bytes % kTmaAlignBytes == 0) return Failure{};
            return fail(HATTN_ERROR_MISALIGNED,
                        format("%s%s = %lld elements (%lld bytes) is not a multiple of 16 bytes (TMA needs 16-byte "
                               "aligned strides)",
                               t.stride_prefix, r.suffix, static_cast<long long>(r.stride),
                               static_cast<long long>(bytes)));
        });
        if (f.failed()) return f;
    }
    return {};
}

namespace {
struct StrideField {
    const char* suffix;
    int64_t stride;
};
}  // namespace

Failure check_positive_strides(const TensorView& t) {
    const StrideField strides[] = {{"_batch_stride", t.batch_stride}, {"_seq_stride", t.seq_stride}, {"_head_stride", t.head_stride}};
    for (const auto& s : strides) {
        if (s.stride <= 0) {
            return fail(HATTN_ERROR_INVALID_STRIDE, format("%s%s = %lld must be positive", t.stride_prefix, s.suffix,
                                                           static_cast<long long>(s.stride)));
        }
    }
    return {};
}

Failure check_e4m3_alignment(const TensorView& t) {
    if (reinterpret_cast<uintptr_t>(t.ptr) % kTmaAlignBytes != 0) {
        return fail(HATTN_ERROR_MISALIGNED, format("%s = %p is not 16-byte aligned", t.name, t.ptr));
    }
    const StrideField strides[] = {{"_batch_stride", t.batch_stride}, {"_seq_stride", t.seq_stride}, {"_head_stride", t.head_stride}};
    for (const auto& s : strides) {
        if (s.stride % kTmaAlignBytes != 0) {
            return fail(HATTN_ERROR_MISALIGNED,
                        format("%s%s = %lld bytes is not a multiple of 16 bytes (e4m3: one byte per element)",
                               t.stride_prefix, s.suffix, static_cast<long long>(s.stride)));
        }
    }
    return {};
}

Failure check_fp32_alignment(const char* name, const float* ptr) {
    if (ptr != nullptr && reinterpret_cast<uintptr_t>(ptr) % kFp32AlignBytes != 0) {
        return fail(HATTN_ERROR_MISALIGNED, format("%s = %p is not %zu-byte aligned (fp32)", name,
                                                   static_cast<const void*>(ptr), static_cast<size_t>(kFp32AlignBytes)));
    }
    return {};
}

Failure check_head_count(const Shape& s) {
    const int64_t heads = static_cast<int64_t>(s.batch) * s.heads_q;
    if (heads > kMaxInt32) {
        return fail(HATTN_ERROR_SIZE_OVERFLOW,
                    format("batch * heads_q = %lld does not fit in int32", static_cast<long long>(heads)));
    }
    return {};
}

Failure check_block_count(const Shape& s, const char* seqlen_name, int seqlen, int rows_per_block, const char* what) {
    // Sizes are positive ints here: the product is below 2^31 * 2^31 * 2^31 = 2^93.
    const Int128 blocks = static_cast<Int128>((static_cast<int64_t>(seqlen) + rows_per_block - 1) / rows_per_block) *
                          s.heads_q * s.batch;
    if (blocks > kMaxInt32) {
        const bool fits_64 = blocks <= kMaxInt64;
        return fail(HATTN_ERROR_SIZE_OVERFLOW,
                    format("ceil(%s / %d) * heads_q * batch = %lld %s does not fit in int32 (the grid's limit)",
                           seqlen_name, rows_per_block,
                           static_cast<long long>(fits_64 ? blocks : kMaxInt64), what));
    }
    return {};
}

Failure check_tma_limits_and_extents(const Shape& s, Tensors views) {
    // Sizes are ints, so every TMA dimension (head_dim, seqlen, heads, batch) is below 2^31 <= 2^32.
    static_assert(static_cast<int64_t>(std::numeric_limits<int>::max()) < kTmaMaxDim,
                  "int sizes always fit a TMA dimension");
    for (const TensorView& t : views) {
        Failure f = first_stride_failure(t, s.batch, [&t](const StrideRef& r) {
            if (static_cast<Int128>(r.stride) * kElemBytes < kTmaMaxStrideBytes) return Failure{};
            return fail(HATTN_ERROR_SIZE_OVERFLOW,
                        format("%s%s = %lld elements is 2^40 bytes or more (the TMA stride limit)", t.stride_prefix,
                               r.suffix, static_cast<long long>(r.stride)));
        });
        if (f.failed()) return f;
        f = check_element_extent(t.name, t.ptr, extent_elements(t, s.batch, s.head_dim), kElemBytes);
        if (f.failed()) return f;
    }
    return {};
}

Failure check_lse_extent(const Shape& s, const char* name, const float* lse) {
    if (lse == nullptr) return {};
    const Int128 elems = static_cast<Int128>(s.batch) * s.heads_q * s.seqlen_q;
    return check_element_extent(name, lse, elems, static_cast<int64_t>(sizeof(float)));
}

Failure check_byte_extent(const char* name, const void* base, Int128 extent_bytes) {
    const Int128 last_address = static_cast<Int128>(reinterpret_cast<uintptr_t>(base)) + extent_bytes;
    if (extent_bytes > kMaxInt64 || last_address > static_cast<Int128>(std::numeric_limits<uintptr_t>::max())) {
        return fail(HATTN_ERROR_SIZE_OVERFLOW,
                    format("%s: the addressed byte range overflows the address space (check its sizes and strides)",
                           name));
    }
    return {};
}

Failure check_schedule_workspace(const char* name, const void* workspace, size_t size) {
    if (workspace == nullptr) return {};
    if (!fwd::workspace_aligned(workspace)) {
        return fail(HATTN_ERROR_WORKSPACE, format("%s = %p is not %zu-byte aligned", name, workspace, fwd::kWorkspaceAlign));
    }
    if (size < fwd::kWorkspaceBytes) {
        return fail(HATTN_ERROR_WORKSPACE,
                    format("%s_size = %zu bytes is less than hattn_fwd_workspace_size() = %zu", name, size, fwd::kWorkspaceBytes));
    }
    return check_byte_extent(name, workspace, static_cast<Int128>(fwd::kWorkspaceBytes));
}

// Sufficient condition: with the dimensions ordered by stride, each stride is at least the span
// of everything nested inside it (head_dim contiguous at the bottom). Dimensions of size 1 are
// never stepped through, so their stride does not matter here.
Failure check_rows_do_not_overlap(const Shape& s, const TensorView& out) {
    StrideRef dims[3];
    strides_of(out, s.batch, dims);
    // Three elements: a tiny insertion sort by stride keeps the order readable.
    for (int i = 1; i < 3; ++i) {
        for (int j = i; j > 0 && dims[j].stride < dims[j - 1].stride; --j) std::swap(dims[j], dims[j - 1]);
    }
    Int128 span = s.head_dim;  // elements covered by everything inside the current dimension
    for (const StrideRef& d : dims) {
        if (d.size == 1) continue;
        if (d.stride < span) {
            return fail(HATTN_ERROR_INVALID_STRIDE,
                        format("%s%s = %lld makes rows of %s overlap (it must be at least %lld elements, the span of "
                               "the inner dimensions)",
                               out.stride_prefix, d.suffix, static_cast<long long>(d.stride), out.name,
                               static_cast<long long>(span)));
        }
        span = static_cast<Int128>(d.stride) * (d.size - 1) + span;
    }
    return {};
}

Failure check_scale(float softmax_scale) {
    if (!std::isfinite(softmax_scale) || softmax_scale < 0.f) {
        return fail(HATTN_ERROR_INVALID_SCALE,
                    format("softmax_scale = %g must be finite and >= 0 (0 selects 1/sqrt(head_dim))",
                           static_cast<double>(softmax_scale)));
    }
    return {};
}

Failure check_unknown_flags(unsigned flags, unsigned known) {
    if ((flags & ~known) != 0) {
        return fail(HATTN_ERROR_INVALID_FLAGS, format("flags = 0x%x has unknown bits 0x%x", flags, flags & ~known));
    }
    return {};
}

void write_message(const Failure& f, char* msg, size_t msg_len) {
    if (msg == nullptr || msg_len == 0) return;
    const std::string& text = f.failed() ? f.message : std::string("ok");
    const size_t n = text.size() < msg_len - 1 ? text.size() : msg_len - 1;
    std::memcpy(msg, text.data(), n);
    msg[n] = '\0';
}

// Queried on every call: the library keeps no state, and the attribute query is a cheap host-side
// lookup.
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

// The C API has no error-string channel (the library keeps no per-call state to hold one), so the launcher's
// message goes to stderr only when the caller asks for it through the environment
// (HATTN_LOG_ERRORS=1), e.g. while debugging a kernel.
hattn_status launch_status(const char* api, cudaError_t rc, const std::string& error) {
    if (rc == cudaSuccess) return HATTN_SUCCESS;
    const char* log = std::getenv(kLogErrorsEnv);
    if (log != nullptr && log[0] != '\0' && log[0] != '0') {
        std::fprintf(stderr, "%s: %s (%s)\n", api, error.empty() ? "launch failed" : error.c_str(),
                     cudaGetErrorString(rc));
    }
    return HATTN_ERROR_CUDA;
}

}  // namespace hattn::host
