// hattn/ptx/warp.cuh -- warp / warpgroup control: register reallocation, leader election.
#pragma once

#include "common.cuh"

namespace hattn::ptx {

// PTX ISA 9.7.19.5 setmaxnreg.inc: this warpgroup grows its per-thread register budget to
// kRegs (a multiple of 8 in [24, 256]). Takes effect only under a launch-bounds register cap
// with each warpgroup role in its own branch; otherwise ptxas ignores it (warning C7508).
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
    static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg range");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// PTX ISA 9.7.19.5 setmaxnreg.dec: this warpgroup gives registers back to the SM pool.
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
    static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg range");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// PTX ISA 9.7.13.8 elect.sync: true in exactly one active lane of the warp (the leader).
__device__ __forceinline__ bool elect_one_sync() {
    uint32_t is_leader;
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "elect.sync _|p, 0xffffffff;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(is_leader));
    return is_leader != 0;
}

// PTX ISA 10.3 %laneid: this thread's lane. Volatile, so it is read where it is used: a kernel
// whose registers are all taken (the FP8 forward's 192-key blocks) then recomputes a lane test
// in its epilogue instead of keeping it in a register, or spilling it, across the mainloop.
__device__ __forceinline__ uint32_t lane_id() {
    uint32_t lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

// Warpgroup index of this thread, made warp-uniform for the compiler (a warpgroup is 4
// consecutive warps starting at a warp index divisible by 4).
__device__ __forceinline__ uint32_t warpgroup_index() {
    return __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
}

}  // namespace hattn::ptx
