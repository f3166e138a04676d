// hattn/ptx/griddep.cuh -- programmatic dependent launch: the grid scheduler's dependency control.
#pragma once

#include "common.cuh"

namespace hattn::ptx {

// PTX ISA 9.7.13 griddepcontrol: griddepcontrol.launch_dependents
// This CTA no longer holds back a grid launched after it with programmatic stream serialization:
// once every CTA has issued it (or exited), the dependent grid's CTAs may take the SMs this grid
// frees, so the two grids' tails overlap. No memory ordering is implied.
__device__ __forceinline__ void griddepcontrol_launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// PTX ISA 9.7.13 griddepcontrol: griddepcontrol.wait
// Blocks the thread until the grids this one depends on have completed and their memory
// operations are visible (a no-op when the grid was launched without a programmatic dependency).
__device__ __forceinline__ void griddepcontrol_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

}  // namespace hattn::ptx
