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

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 900)
#error "hattn's PTX layer targets Hopper (sm_90a): build with -gencode=arch=compute_90a,code=sm_90a"
#endif

namespace hattn::ptx {

// Generic -> shared-window address (cvta.to.shared), as the 32-bit operand PTX expects.
__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

}  // namespace hattn::ptx
