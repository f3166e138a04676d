// hattn/test/ptx_test_util.cuh -- helpers shared by the PTX wrapper tests (test/ptx_*_test.cu):
// the shared-memory swizzle formula, host-side element encoders/decoders and a tolerance check.
//
// The swizzle formula (PTX ISA 9.7.15.5.1.2 "Shared Memory Matrix Layout", canonical layouts
// Swizzle<B,4,3>; the TMA unit writes the same pattern, CUDA driver API CUtensorMapSwizzle):
//   A swizzled tile is built from rows of `span` bytes (128, 64 or 32). Inside each row the
//   16-byte chunks are permuted: byte-address bits [4, 4+B) (the chunk index, B = log2(span/16))
//   are XORed with bits [7, 7+B). With the tile 1024-byte aligned the address bits equal the
//   offset bits, and the pattern repeats every 8 rows:
//     128B: chunk (bits 4-6) ^= bits 7-9  = row % 8        (rows of 128 B; atom 8 x 128 B = 1024 B)
//      64B: chunk (bits 4-5) ^= bits 7-8  = (row / 2) % 4  (rows of  64 B; atom 8 x  64 B =  512 B)
//      32B: chunk (bit 4)    ^= bit 7     = (row / 4) % 2  (rows of  32 B; atom 8 x  32 B =  256 B)
//   Bytes inside a 16-byte chunk never move.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "testing/numerics.h"
#include "kernels/sm90/tensor_map.h"

namespace hattn::test {

constexpr uint32_t kSwizzleChunkBytes = 16;   // the unit the swizzle permutes
constexpr uint32_t kSwizzleRowShift = 7;      // address bit where the XOR source starts
constexpr uint32_t kSwizzleAtomRows = 8;      // the pattern repeats every 8 rows
constexpr uint32_t kSmemTileAlign = 1024;     // 128B-swizzle atom: 8 rows x 128 bytes
constexpr int kWarpSize = 32;
constexpr int kWarpgroupThreads = 128;

// Swizzled byte offset of the unswizzled byte offset `linear` inside a tile made of rows of
// `span_bytes` (128, 64 or 32); the tile must start on a 1024-byte boundary.
__host__ __device__ constexpr uint32_t swizzle_byte_offset(uint32_t linear, uint32_t span_bytes) {
    // chunk-index bits of this span: 128 B -> 0x70, 64 B -> 0x30, 32 B -> 0x10
    const uint32_t chunk_bits = (span_bytes - 1u) & ~(kSwizzleChunkBytes - 1u);
    // bits 7.. shifted down by 3 land on bits 4..
    return linear ^ ((linear >> (kSwizzleRowShift - 4u)) & chunk_bits);
}

// Byte offset of element (row, col) in a swizzled tile of `rows` rows whose columns are cut
// into blocks of one span each (span / elem_bytes columns); block b lies b * rows * span bytes
// from the tile start. This is what TMA writes for a box of {span/elem_bytes, rows} issued once
// per column block, and what wgmma reads for
//   K-major operands  (row = M or N index, col = K index), and
//   MN-major operands (row = K index,      col = M or N index).
__host__ __device__ constexpr uint32_t swizzled_tile_offset(uint32_t row, uint32_t col, uint32_t rows,
                                                            uint32_t elem_bytes, uint32_t span_bytes) {
    const uint32_t cols_per_block = span_bytes / elem_bytes;
    const uint32_t block = col / cols_per_block;
    const uint32_t linear = block * rows * span_bytes + row * span_bytes + (col % cols_per_block) * elem_bytes;
    return swizzle_byte_offset(linear, span_bytes);
}

// Rounds a dynamic shared-memory pointer up to the 1024-byte boundary swizzled tiles need
// (dynamic smem itself is only guaranteed 16-byte alignment); allocate kSmemTileAlign extra.
__device__ __forceinline__ uint8_t* align_smem_for_swizzle(uint8_t* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    return reinterpret_cast<uint8_t*>((a + kSmemTileAlign - 1) & ~uintptr_t{kSmemTileAlign - 1});
}

// Hand-checked anchors of the formula (see the header comment).
static_assert(swizzle_byte_offset(0, 128) == 0, "row 0 is not permuted");
static_assert(swizzle_byte_offset(1 * 128 + 0, 128) == 128 + 16, "128B: row 1 chunk 0 -> chunk 1");
static_assert(swizzle_byte_offset(7 * 128 + 2 * 16 + 6, 128) == 7 * 128 + 5 * 16 + 6, "128B: 2 ^ 7 = 5");
static_assert(swizzle_byte_offset(8 * 128, 128) == 8 * 128, "128B: repeats every 8 rows");
static_assert(swizzle_byte_offset(2 * 64 + 16, 64) == 2 * 64 + 0, "64B: row 2 -> xor 1, chunk 1 -> 0");
static_assert(swizzle_byte_offset(1 * 64 + 16, 64) == 1 * 64 + 16, "64B: rows 0-1 are not permuted");
static_assert(swizzle_byte_offset(4 * 32 + 0, 32) == 4 * 32 + 16, "32B: rows 4-7 swap the chunks");
static_assert(swizzle_byte_offset(3 * 32 + 16, 32) == 3 * 32 + 16, "32B: rows 0-3 are not permuted");

// ---- tensor maps -----------------------------------------------------------------------------

// A row-major 2-D tensor of `cols` x `rows` elements (rows packed, no padding), read in boxes of
// box_cols x box_rows with the 128-byte swizzle -- the layout every 2-D TMA test here uses.
inline hattn::sm90::TensorMapSpec swizzled_2d_spec(const void* base, CUtensorMapDataType dtype, uint64_t cols,
                                                   uint64_t rows, uint32_t box_cols, uint32_t box_rows) {
    hattn::sm90::TensorMapSpec spec;
    spec.base = base;
    spec.dtype = dtype;
    spec.rank = 2;
    spec.dims[0] = cols;
    spec.dims[1] = rows;
    spec.strides_bytes[0] = cols * hattn::sm90::tensor_map_elem_bytes(dtype);
    spec.box[0] = box_cols;
    spec.box[1] = box_rows;
    spec.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    return spec;
}

// ---- host-side element encoding (round to nearest even) and exact decoding ----------------

// 16-bit types: the project's one host implementation (src/testing/numerics.h, exhaustively tested
// by test/reference_test.cpp).
inline uint16_t bf16_bits_from_float(float f) { return numerics::float_to_bf16(f); }
inline float float_from_bf16_bits(uint16_t bits) { return numerics::bf16_to_float(bits); }
inline uint16_t f16_bits_from_float(float f) { return numerics::float_to_fp16(f); }
inline float float_from_f16_bits(uint16_t bits) { return numerics::fp16_to_float(bits); }

inline uint8_t e4m3_bits_from_float(float f) {
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3));
}

inline float float_from_e4m3_bits(uint8_t bits) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(bits), __NV_E4M3);
    return __half2float(__half(h));
}

inline uint8_t e5m2_bits_from_float(float f) {
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2));
}

// ---- device memory --------------------------------------------------------------------------

// Owns one cudaMalloc allocation; check `status` (HATTN_CUDA_CHECK) before use.
template <class T>
struct DeviceBuffer {
    T* ptr = nullptr;
    size_t count = 0;
    cudaError_t status = cudaSuccess;
    explicit DeviceBuffer(size_t n) : count(n) { status = cudaMalloc(&ptr, n * sizeof(T)); }
    ~DeviceBuffer() {
        if (ptr != nullptr) cudaFree(ptr);
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    size_t bytes() const { return count * sizeof(T); }
};

// ---- result checking ------------------------------------------------------------------------

// Every element must satisfy |got - ref| <= atol + rtol * |ref| (no average can excuse a bad
// element), and the relative L2 error ||got - ref|| / ||ref|| must stay under max_rel_l2.
// NaN in `got` (e.g. an unwritten poisoned element) always fails.
inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& ref,
                                            double atol, double rtol, double max_rel_l2,
                                            int row_length = 0) {
    if (got.size() != ref.size()) {
        return ::testing::AssertionFailure() << "size mismatch " << got.size() << " vs " << ref.size();
    }
    size_t bad = 0;
    double err2 = 0.0, ref2 = 0.0, worst = 0.0;
    std::ostringstream first;
    for (size_t i = 0; i < got.size(); ++i) {
        const double g = got[i], r = ref[i];
        const double err = std::fabs(g - r);
        err2 += std::isfinite(err) ? err * err : INFINITY;
        ref2 += r * r;
        if (!(err <= atol + rtol * std::fabs(r))) {
            if (bad < 8) {
                first << "\n  [" << i;
                if (row_length > 0) first << " = row " << i / row_length << ", col " << i % row_length;
                first << "] got " << g << " want " << r;
            }
            ++bad;
        }
        if (std::isfinite(err) && err > worst) worst = err;
    }
    const double rel_l2 = std::sqrt(err2) / std::max(std::sqrt(ref2), 1e-30);
    if (bad != 0 || !(rel_l2 <= max_rel_l2)) {
        return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements out of tolerance (atol "
                                             << atol << ", rtol " << rtol << "), max |err| " << worst
                                             << ", rel L2 " << rel_l2 << " (limit " << max_rel_l2 << ")"
                                             << first.str();
    }
    return ::testing::AssertionSuccess();
}

}  // namespace hattn::test
