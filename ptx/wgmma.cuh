// hattn/ptx/wgmma.cuh -- warpgroup matrix multiply-accumulate (Hopper tensor cores).
//
// Life cycle of one batch of wgmma in a warpgroup:
//   wgmma_fence()            -- order earlier register/smem writes before the async MMAs read them
//   wgmma_*_ss / _rs(...)    -- issue (ptx/wgmma_instr.cuh), any number of k-steps
//   wgmma_commit_group()     -- close the batch
//   wgmma_wait_group<N>()    -- wait until at most N batches are in flight
//   wgmma_fence_operand(acc) -- keep the compiler from touching accumulators across the wait
#pragma once

#include "common.cuh"
#include "wgmma_instr.cuh"

namespace hattn::ptx {

// PTX ISA 9.7.15.5.1 wgmma.fence.sync.aligned
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

// PTX ISA 9.7.15.5.3 wgmma.commit_group.sync.aligned
__device__ __forceinline__ void wgmma_commit_group() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// PTX ISA 9.7.15.5.4 wgmma.wait_group.sync.aligned N
template <int kPending>
__device__ __forceinline__ void wgmma_wait_group() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Not an instruction: an empty asm that "reads and writes" each accumulator register, so the
// compiler cannot hoist a use of the accumulator above wgmma_wait_group or sink a write below
// the next issue (it otherwise sees wgmma's outputs as ready the moment the asm is issued).
template <int kN>
__device__ __forceinline__ void wgmma_fence_operand(float (&acc)[kN]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}

template <int kN>
__device__ __forceinline__ void wgmma_fence_operand(uint32_t (&reg)[kN]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) asm volatile("" : "+r"(reg[i])::"memory");
}

// ---------------------------------------------------------------------------------------
// Shared-memory matrix descriptor (PTX ISA 9.7.15.5.1.2 "Matrix Descriptor Format").
//
//   bits  0-13  start address >> 4
//   bits 16-29  leading-dimension byte offset (LBO) >> 4
//   bits 32-45  stride-dimension byte offset (SBO) >> 4
//   bits 49-51  base offset (0: every tile here starts 1024-byte aligned)
//   bits 62-63  swizzle: 0 none (interleave), 1 = 128B, 2 = 64B, 3 = 32B
//
// Canonical layouts, in 16-byte units, T = 16 bytes / element size, swizzle span W bytes:
//   K-major, swizzled:  rows of W bytes along K; 8 rows form a W x 8 "atom" of 8*W bytes.
//                       SBO = byte stride between consecutive 8-row groups (8*W when packed).
//                       LBO is unused (only matters when K per instruction exceeds the span).
//                       Advance along K inside the span by adding k_bytes to the start
//                       address (32 bytes per k16 step of 16-bit data).
//   MN-major, swizzled: rows of W bytes along M/N, consecutive rows are consecutive K.
//                       LBO = byte stride between consecutive W-byte column blocks of M/N,
//                       SBO = byte stride between consecutive 8-row groups of K (8*W packed).
//                       Advance along K by whole rows: 16 rows * W bytes per k16 step.
// NOTE: swizzled tiles must be 1024-byte aligned: the hardware XORs address bits 4-6 with
//       bits 7-9, so the pattern repeats every 8 rows of 128 bytes.
// ---------------------------------------------------------------------------------------
enum class Swizzle : uint32_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

// Bytes in one swizzle row (the span a K-major row or an MN-major column block occupies).
__host__ __device__ constexpr uint32_t swizzle_span_bytes(Swizzle s) {
    return s == Swizzle::k128B ? 128u : s == Swizzle::k64B ? 64u : s == Swizzle::k32B ? 32u : 16u;
}

__host__ __device__ constexpr uint64_t make_smem_desc(uint32_t smem_addr, uint32_t lbo_bytes,
                                                      uint32_t sbo_bytes, Swizzle swizzle) {
    constexpr uint64_t kField14 = 0x3FFF;  // start/LBO/SBO are 14-bit fields of 16-byte units
    return ((static_cast<uint64_t>(smem_addr) >> 4) & kField14) |
           (((static_cast<uint64_t>(lbo_bytes) >> 4) & kField14) << 16) |
           (((static_cast<uint64_t>(sbo_bytes) >> 4) & kField14) << 32) |
           (static_cast<uint64_t>(swizzle) << 62);
}

// The descriptor of base + offset_bytes, from base's: one 32-bit add instead of re-packing every
// field. Shared-memory addresses stay below 2^18 bytes, so address >> 4 fits the 14-bit start
// field and adding offset >> 4 to it never carries into the LBO field above (offset_bytes: a
// multiple of 16 that keeps the address inside the CTA's shared memory).
__host__ __device__ constexpr uint64_t smem_desc_advance(uint64_t desc, uint32_t offset_bytes) {
    constexpr uint64_t kHighWord = 0xFFFFFFFF00000000ull;
    return (desc & kHighWord) | static_cast<uint32_t>(static_cast<uint32_t>(desc) + (offset_bytes >> 4));
}

// Descriptor for a tile whose rows along K are packed at the swizzle span (the layout a TMA
// load with the same swizzle and an inner box of span bytes produces).
__host__ __device__ constexpr uint64_t make_smem_desc_k_major(uint32_t smem_addr, Swizzle swizzle) {
    return make_smem_desc(smem_addr, /*lbo (unused)=*/16, /*sbo=*/8 * swizzle_span_bytes(swizzle), swizzle);
}

// Descriptor for an MN-major tile: rows are K, each row holds span bytes of M/N; column blocks
// of span bytes along M/N lie mn_block_stride_bytes apart (for a TMA box of R rows: R * span).
__host__ __device__ constexpr uint64_t make_smem_desc_mn_major(uint32_t smem_addr, Swizzle swizzle,
                                                               uint32_t mn_block_stride_bytes) {
    return make_smem_desc(smem_addr, mn_block_stride_bytes, 8 * swizzle_span_bytes(swizzle), swizzle);
}

}  // namespace hattn::ptx
