// hattn/ptx/common.cuh -- conventions shared by every PTX wrapper in this folder.
//
// One __device__ __forceinline__ function per PTX instruction, named after it, with the
// PTX ISA section it implements in a one-line comment above it.
//
// "memory"-clobber policy (stated once, followed everywhere):
//   * An instruction that orders, publishes or waits for memory traffic carries "memory":
//     fences, mbarrier arrive / wait, TMA issue and bulk-group commit / wait, wgmma
//     fence / commit / wait, named barriers. The compiler must not move ordinary loads
//     and stores across them.
//   * Pure register arithmetic (ex2, conversions, elect, setmaxnreg's register count)
//     carries no "memory" clobber, so the compiler can schedule around it freely.
//   * wgmma.mma_async itself carries "memory" (it reads shared memory asynchronously);
//     its accumulator registers are pinned separately with wgmma_fence_operand().
//
// Shared-memory addresses: wrappers take generic pointers and convert them to 32-bit
// shared-window addresses themselves, so callers never juggle address spaces.
#pragma once

#include <cstdint>

// wgmma, setmaxnreg and TMA multicast exist only in the arch-specific target sm_90a: a device pass
// for any other target (plain sm_90 included, where __CUDA_ARCH__ is also 900) stops here with
// this message instead of a page of ptxas errors. Host passes are unaffected.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "hattn's kernels need the arch-specific Hopper target sm_90a (wgmma, setmaxnreg): compile with -gencode=arch=compute_90a,code=sm_90a (plain sm_90 or another architecture cannot run them)"
#endif

namespace hattn::ptx {

// Generic -> shared-window address (cvta.to.shared), as the 32-bit operand PTX expects.
__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

}  // namespace hattn::ptx
