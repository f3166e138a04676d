// hattn/src/host/validate.h -- the checks, the device check and the error logging that the forward
// and backward entry points (fwd_api.cpp, bwd_api.cpp) share.
//
// NOTES:
//   * Every check is pure arithmetic on the params: no CUDA call, no read or write through a tensor
//     pointer. A rejected call therefore behaves the same on a machine without a GPU.
//   * Each check returns the first Failure it finds; the entry points run them in a fixed order so
//     that an input with several problems always reports the same, most basic one first.
//   * Offsets and extents are computed in 128-bit integers: with int sizes (< 2^31) and int64
//     strides (< 2^63) every product and sum fits, so the overflow checks cannot overflow.
//   * Messages name the params field at fault and are built with common::format (vsnprintf), never
//     with iostreams: see the NOTES in src/common/format.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "hattn.h"

namespace hattn::host {

// 128-bit intermediates for offset arithmetic (GCC/Clang extension; __extension__ keeps
// -Wpedantic quiet).
__extension__ typedef __int128 Int128;

// bf16 and fp16 are both 2 bytes.
constexpr int64_t kElemBytes = 2;

// A failed check: the status plus a message that names the offending field.
struct Failure {
    hattn_status status = HATTN_SUCCESS;
    std::string message;

    bool failed() const { return status != HATTN_SUCCESS; }
};

Failure fail(hattn_status status, std::string message);

// The integer a C enum field holds. A C caller may store any int in it, but in C++ reading a value
// outside the enumerators' range through the enum type is undefined: read the bits instead.
template <class Enum>
int enum_value(const Enum& e) {
    static_assert(sizeof(Enum) == sizeof(int), "hattn's C enums are int-sized");
    int value;
    std::memcpy(&value, &e, sizeof(value));
    return value;
}

// The sizes both params structs carry.
struct Shape {
    int batch = 0, heads_q = 0, heads_kv = 0, seqlen_q = 0, seqlen_k = 0, head_dim = 0;
    int dtype = HATTN_DTYPE_BF16;  // enum_value(params.dtype): not necessarily a hattn_dtype
};

// One [batch, seqlen, heads, head_dim] tensor as the params describe it.
struct TensorView {
    const char* name;           // its pointer field: "q", "dout", ...
    const char* stride_prefix;  // the prefix of its stride fields: "q", "do", ...
    const void* ptr;
    int seqlen;
    int heads;
    int64_t batch_stride, seq_stride, head_stride;
};

// A run of TensorViews (the params' tensors, in the order their checks report them).
struct Tensors {
    const TensorView* first;
    size_t count;

    const TensorView* begin() const { return first; }
    const TensorView* end() const { return first + count; }
};

template <size_t N>
Tensors tensors(const TensorView (&views)[N]) {
    return Tensors{views, N};
}

// ---- The checks (each returns a default Failure when the input passes) -------------------------

// "<name> is NULL" for the first NULL tensor pointer.
Failure check_not_null(Tensors views);
Failure check_dtype_and_head_dim(const Shape& s);
// Positive sizes, then heads_q a multiple of heads_kv.
Failure check_sizes(const Shape& s);
// Positive strides (all tensors first: a zero or negative stride is a layout error, not an
// alignment one), then 16-byte aligned base addresses and stride bytes (TMA).
Failure check_strides_and_alignment(const Shape& s, Tensors views);
// An e4m3 tensor (one byte per element, strides in bytes): its strides positive; then its base
// address and strides 16-byte aligned (TMA, 16-byte vectors). Callers order them across tensors.
Failure check_positive_strides(const TensorView& t);
Failure check_e4m3_alignment(const TensorView& t);
// An fp32 array read or written with plain 4-byte accesses (NULL passes: optional arrays).
Failure check_fp32_alignment(const char* name, const float* ptr);
// batch * heads_q fits in int32 (the kernels linearize (batch, head) into an int).
Failure check_head_count(const Shape& s);
// ceil(seqlen / rows_per_block) * heads_q * batch blocks fit in int32 (the grid is 1-D);
// `seqlen_name` names the length ("seqlen_q"), `what` the unit ("work tiles").
Failure check_block_count(const Shape& s, const char* seqlen_name, int seqlen, int rows_per_block, const char* what);
// Every stride below TMA's 2^40 bytes, and every tensor's addressed range inside int64 and the
// address space.
Failure check_tma_limits_and_extents(const Shape& s, Tensors views);
// [batch, heads_q, seqlen_q] fp32 (NULL passes).
Failure check_lse_extent(const Shape& s, const char* name, const float* lse);
// `extent_bytes` bytes from `base` stay inside int64 and the address space.
Failure check_byte_extent(const char* name, const void* base, Int128 extent_bytes);
// The forwards' optional scheduler workspace (hattn_fwd_workspace_size() bytes): NULL, or aligned and
// large enough (its contents are not read here).
Failure check_schedule_workspace(const char* name, const void* workspace, size_t size);
// An output written by many thread blocks at once: no two (b, s, h) rows may share memory.
Failure check_rows_do_not_overlap(const Shape& s, const TensorView& out);
Failure check_scale(float softmax_scale);
Failure check_unknown_flags(unsigned flags, unsigned known);

// Runs the checks (callables returning Failure) in order; returns the first failure.
template <class... Checks>
Failure first_failure(const Checks&... checks) {
    Failure f;
    // Left to right, stopping at the first failure (|| short-circuits).
    (void)((f = checks(), f.failed()) || ...);
    return f;
}

// "ok" or the failure's message into msg (if msg != NULL and msg_len > 0), always NUL-terminated.
void write_message(const Failure& f, char* msg, size_t msg_len);

// What a hattn_*_validate entry point returns: the failure's status, its message written to msg.
inline hattn_status reported(const Failure& f, char* msg, size_t msg_len) {
    write_message(f, msg, msg_len);
    return f.status;
}

// ---- After validation -----------------------------------------------------------------------------

// HATTN_SUCCESS when the current device is compute capability 9.0 (Hopper); otherwise
// HATTN_ERROR_UNSUPPORTED_DEVICE, or HATTN_ERROR_CUDA when the device cannot be queried.
hattn_status check_device();

// Before a launch: the validation status if validation failed, else the device check's.
inline hattn_status ready_to_launch(const Failure& validation) {
    return validation.failed() ? validation.status : check_device();
}

// The status for a launcher's result: HATTN_SUCCESS, or HATTN_ERROR_CUDA after printing
// "<api>: <error> (<CUDA error>)" to stderr when HATTN_LOG_ERRORS is set to a non-zero value.
hattn_status launch_status(const char* api, cudaError_t rc, const std::string& error);

}  // namespace hattn::host
