// hattn/src/kernels/sm90/tensor_map.h -- building CUtensorMap descriptors for TMA, validated first.
// Header-only so the vendorable single-file kernel can carry it.
//
// cuTensorMapEncodeTiled is a driver API entry point; we fetch it at run time through
// cudaGetDriverEntryPointByVersion so that nothing links against libcuda directly.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/format.h"

// cudaGetDriverEntryPointByVersion first shipped in CUDA 12.5; hattn is built and tested with
// CUDA 12.8 and newer.
#if CUDART_VERSION < 12080
#error "hattn needs the CUDA Toolkit 12.8 or newer (it calls cudaGetDriverEntryPointByVersion)"
#endif

namespace hattn::sm90 {

constexpr int kTensorMapMaxRank = 5;
constexpr uint32_t kTmaMaxBoxDim = 256;        // per dimension, by the driver's contract
constexpr uint64_t kTmaAlignBytes = 16;        // base address and every stride
constexpr uint64_t kTmaMaxStrideBytes = 1ull << 40;
constexpr uint64_t kTmaMaxDim = 1ull << 32;

// A tiled tensor map request: dims and box innermost first, strides in bytes for dims 1..rank-1
// (dim 0 is contiguous).
struct TensorMapSpec {
    const void* base = nullptr;
    CUtensorMapDataType dtype = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    int rank = 0;
    uint64_t dims[kTensorMapMaxRank] = {};
    uint64_t strides_bytes[kTensorMapMaxRank - 1] = {};
    uint32_t box[kTensorMapMaxRank] = {};
    CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
};


inline size_t tensor_map_elem_bytes(CUtensorMapDataType dtype) {
    switch (dtype) {
        case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
        case CU_TENSOR_MAP_DATA_TYPE_UINT16:
        case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
        case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 2;
        case CU_TENSOR_MAP_DATA_TYPE_UINT32:
        case CU_TENSOR_MAP_DATA_TYPE_INT32:
        case CU_TENSOR_MAP_DATA_TYPE_FLOAT32: return 4;
        default: return 0;
    }
}

inline uint32_t tensor_map_swizzle_bytes(CUtensorMapSwizzle swizzle) {
    switch (swizzle) {
        case CU_TENSOR_MAP_SWIZZLE_32B: return 32;
        case CU_TENSOR_MAP_SWIZZLE_64B: return 64;
        case CU_TENSOR_MAP_SWIZZLE_128B: return 128;
        default: return 0;
    }
}

inline std::string validate_tensor_map(const TensorMapSpec& spec) {
    using common::format;
    if (spec.rank < 1 || spec.rank > kTensorMapMaxRank) {
        return format("rank %d is outside [1, %d]", spec.rank, kTensorMapMaxRank);
    }
    const size_t elem = tensor_map_elem_bytes(spec.dtype);
    if (elem == 0) return "dtype is not one of the element types hattn encodes";
    if (spec.base == nullptr) return "base address is null";
    if (reinterpret_cast<uintptr_t>(spec.base) % kTmaAlignBytes != 0) {
        return format("base address %p is not %llu-byte aligned", spec.base,
                      static_cast<unsigned long long>(kTmaAlignBytes));
    }
    for (int i = 0; i < spec.rank; ++i) {
        if (spec.dims[i] == 0 || spec.dims[i] > kTmaMaxDim) {
            return format("dims[%d] = %llu is outside [1, 2^32]", i, static_cast<unsigned long long>(spec.dims[i]));
        }
        if (spec.box[i] == 0 || spec.box[i] > kTmaMaxBoxDim) {
            return format("box[%d] = %u is outside [1, %u]", i, spec.box[i], kTmaMaxBoxDim);
        }
    }
    for (int i = 0; i + 1 < spec.rank; ++i) {
        const unsigned long long s = spec.strides_bytes[i];
        if (s % kTmaAlignBytes != 0) {
            return format("strides_bytes[%d] = %llu is not a multiple of %llu", i, s,
                          static_cast<unsigned long long>(kTmaAlignBytes));
        }
        if (s == 0 || s >= kTmaMaxStrideBytes) {
            return format("strides_bytes[%d] = %llu is outside (0, 2^40)", i, s);
        }
    }
    const uint64_t inner_box_bytes = static_cast<uint64_t>(spec.box[0]) * elem;
    if (inner_box_bytes % kTmaAlignBytes != 0) {
        return format("inner box %u x %zu bytes is not a multiple of %llu bytes", spec.box[0], elem,
                      static_cast<unsigned long long>(kTmaAlignBytes));
    }
    const uint32_t span = tensor_map_swizzle_bytes(spec.swizzle);
    if (span != 0 && inner_box_bytes > span) {
        return format("inner box of %llu bytes exceeds the %u-byte swizzle span",
                      static_cast<unsigned long long>(inner_box_bytes), span);
    }
    return {};
}

namespace detail {

// The driver's cuTensorMapEncodeTiled, looked up once per process (the lookup is a string search in
// the driver, ~0.15 us, and a launch encodes 4-8 maps; the entry point never changes): a
// function-local static, initialized thread-safely on first use. A failed lookup is remembered
// too, with its status, and reported on every call.
struct EncodeEntry {
    void* fn = nullptr;
    cudaError_t rc = cudaErrorUnknown;
    cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSymbolNotFound;
};

inline EncodeEntry lookup_encode_fn() {
    EncodeEntry e;
    constexpr int kDriverApiVersion = 12000;  // the ABI version of cuTensorMapEncodeTiled we call
    e.rc = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &e.fn, kDriverApiVersion, cudaEnableDefault,
                                            &e.query);
    return e;
}

inline PFN_cuTensorMapEncodeTiled_v12000 get_encode_fn(std::string* error) {
    static const EncodeEntry entry = lookup_encode_fn();
    if (entry.rc != cudaSuccess || entry.query != cudaDriverEntryPointSuccess || entry.fn == nullptr) {
        if (error) {
            *error = std::string("cuTensorMapEncodeTiled unavailable from the driver: ") + cudaGetErrorString(entry.rc);
        }
        return nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry.fn);
}

}  // namespace detail

inline bool encode_tensor_map(CUtensorMap* out, const TensorMapSpec& spec, std::string* error) {
    if (out == nullptr) {
        if (error) *error = "output tensor map pointer is null";
        return false;
    }
    std::string msg = validate_tensor_map(spec);
    if (!msg.empty()) {
        if (error) *error = "tensor map: " + msg;
        return false;
    }
    auto encode = detail::get_encode_fn(error);
    if (encode == nullptr) return false;
    cuuint64_t dims[kTensorMapMaxRank];
    cuuint64_t strides[kTensorMapMaxRank - 1];
    cuuint32_t box[kTensorMapMaxRank];
    cuuint32_t elem_strides[kTensorMapMaxRank];
    for (int i = 0; i < spec.rank; ++i) {
        dims[i] = spec.dims[i];
        box[i] = spec.box[i];
        elem_strides[i] = 1;
        if (i + 1 < spec.rank) strides[i] = spec.strides_bytes[i];
    }
    const CUresult rc = encode(out, spec.dtype, static_cast<cuuint32_t>(spec.rank), const_cast<void*>(spec.base), dims,
                               strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, spec.swizzle,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (rc != CUDA_SUCCESS) {
        if (error) *error = common::format("cuTensorMapEncodeTiled failed with CUresult %d", static_cast<int>(rc));
        return false;
    }
    return true;
}

// A [batch, seqlen, heads, head_dim] tensor (head_dim contiguous, strides in elements) as the
// 4-D map {head_dim, seqlen, heads, batch} that attention kernels read and write in boxes of
// {box_cols, box_rows, 1, 1} with the 128-byte swizzle (64-byte for 8-bit tiles of 64-byte rows).
struct BshdTensor {
    const void* base;
    int head_dim, seqlen, heads, batch;
    int64_t seq_stride, head_stride, batch_stride;
};

inline bool make_bshd_map(CUtensorMap* map, const BshdTensor& t, CUtensorMapDataType dtype, uint32_t box_cols,
                          uint32_t box_rows, std::string* error,
                          CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
    const int64_t elem_bytes = static_cast<int64_t>(tensor_map_elem_bytes(dtype));
    TensorMapSpec spec;
    spec.base = t.base;
    spec.dtype = dtype;
    spec.rank = 4;
    spec.dims[0] = t.head_dim;
    spec.dims[1] = t.seqlen;
    spec.dims[2] = t.heads;
    spec.dims[3] = t.batch;
    spec.strides_bytes[0] = t.seq_stride * elem_bytes;
    spec.strides_bytes[1] = t.head_stride * elem_bytes;
    spec.strides_bytes[2] = t.batch_stride * elem_bytes;
    spec.box[0] = box_cols;
    spec.box[1] = box_rows;
    spec.box[2] = 1;
    spec.box[3] = 1;
    spec.swizzle = swizzle;
    return encode_tensor_map(map, spec, error);
}

}  // namespace hattn::sm90
