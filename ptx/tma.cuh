// hattn/ptx/tma.cuh -- the Tensor Memory Accelerator: bulk tensor copies between global and
// shared memory described by a CUtensorMap (built on the host, see src/kernels/sm90/tensor_map.h).
//
// NOTE: the tensor map must live in parameter/constant/global memory: kernels take it as
//       `const __grid_constant__ CUtensorMap`, and pass its address here.
// NOTE: loads complete on an mbarrier (complete_tx::bytes): the consumer arms the barrier
//       with mbarrier_arrive_expect_tx(total bytes) and waits on its phase.
// NOTE: coordinates are element indices, innermost dimension first; boxes that reach past
//       the tensor's bounds are zero-filled on load and clipped on store.
#pragma once

#include "common.cuh"

#include <cuda.h>

namespace hattn::ptx {

__device__ __forceinline__ uint64_t tmap_u64(const CUtensorMap* tmap) {
    return reinterpret_cast<uint64_t>(tmap);
}

// PTX ISA 9.7.9.27 prefetch.tensormap: pull the descriptor into the TMA unit's cache early.
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* tmap) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(tmap_u64(tmap)) : "memory");
}

// PTX ISA 9.7.9.25.5.1 cp.async.bulk.tensor (global -> shared, 1D .. 5D, mbarrier completion)
__device__ __forceinline__ void tma_load_1d(void* smem_dst, const CUtensorMap* tmap, uint64_t* bar,
                                            int32_t c0) {
    asm volatile(
        "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3}], [%2];" ::"r"(smem_u32(smem_dst)),
        "l"(tmap_u64(tmap)), "r"(smem_u32(bar)), "r"(c0)
        : "memory");
}

__device__ __forceinline__ void tma_load_2d(void* smem_dst, const CUtensorMap* tmap, uint64_t* bar,
                                            int32_t c0, int32_t c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_u32(smem_dst)),
        "l"(tmap_u64(tmap)), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
        : "memory");
}

__device__ __forceinline__ void tma_load_3d(void* smem_dst, const CUtensorMap* tmap, uint64_t* bar,
                                            int32_t c0, int32_t c1, int32_t c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(smem_u32(smem_dst)),
        "l"(tmap_u64(tmap)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}

__device__ __forceinline__ void tma_load_4d(void* smem_dst, const CUtensorMap* tmap, uint64_t* bar,
                                            int32_t c0, int32_t c1, int32_t c2, int32_t c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(smem_u32(smem_dst)),
        "l"(tmap_u64(tmap)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}

__device__ __forceinline__ void tma_load_5d(void* smem_dst, const CUtensorMap* tmap, uint64_t* bar,
                                            int32_t c0, int32_t c1, int32_t c2, int32_t c3,
                                            int32_t c4) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];" ::"r"(smem_u32(smem_dst)),
        "l"(tmap_u64(tmap)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
        : "memory");
}

// PTX ISA 9.7.9.25.4.1 cp.async.bulk (global -> shared, no tensor map): `bytes` contiguous bytes,
// a multiple of 16 with both addresses 16-byte aligned, completing on an mbarrier like a TMA load.
__device__ __forceinline__ void bulk_load(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_u32(smem_dst)),
        "l"(gmem_src), "r"(bytes), "r"(smem_u32(bar))
        : "memory");
}

// PTX ISA 9.7.9.25.4.2 cp.reduce.async.bulk .add.f32 (shared -> global, bulk-group completion):
// adds `bytes` of floats to global memory, performed in L2 in whole lines. Same alignment rules
// and proxy fence as a TMA store.
__device__ __forceinline__ void bulk_reduce_add_f32(float* gmem_dst, const float* smem_src, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(gmem_dst),
                 "r"(smem_u32(smem_src)), "r"(bytes)
                 : "memory");
}

// PTX ISA 9.7.9.25.5.1 cp.async.bulk.tensor (shared -> global, bulk-group completion).
// The smem source must have been made visible to the async proxy first
// (fence_proxy_async_shared_cta in every writing thread, then a barrier).
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* tmap, const void* smem_src, int32_t c0,
                                             int32_t c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                     tmap_u64(tmap)),
                 "r"(smem_u32(smem_src)), "r"(c0), "r"(c1)
                 : "memory");
}

__device__ __forceinline__ void tma_store_3d(const CUtensorMap* tmap, const void* smem_src, int32_t c0,
                                             int32_t c1, int32_t c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
            tmap_u64(tmap)),
        "r"(smem_u32(smem_src)), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}

__device__ __forceinline__ void tma_store_4d(const CUtensorMap* tmap, const void* smem_src, int32_t c0,
                                             int32_t c1, int32_t c2, int32_t c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
            tmap_u64(tmap)),
        "r"(smem_u32(smem_src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}

// PTX ISA 9.7.9.25.5.4 cp.async.bulk.commit_group: close the group of bulk stores issued so far.
__device__ __forceinline__ void bulk_commit_group() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// PTX ISA 9.7.9.25.5.5 cp.async.bulk.wait_group.read: wait until at most kPending groups
// still read their shared-memory source (the smem may then be reused).
template <int kPending>
__device__ __forceinline__ void bulk_wait_group_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}

// PTX ISA 9.7.9.25.5.5 cp.async.bulk.wait_group: wait until at most kPending groups are
// complete, writes to global memory included.
template <int kPending>
__device__ __forceinline__ void bulk_wait_group() {
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}

}  // namespace hattn::ptx
