// hattn/ptx/grid.cuh -- grid dependency control: programmatic dependent launch (sm_90).
#pragma once

#include "common.cuh"

namespace hattn::ptx {

// PTX ISA 9.7.13 griddepcontrol.wait (parallel synchronization: grid dependency control)
// Blocks until every grid this one depends on (launched before it with programmatic stream
// serialization) has completed and its memory is visible. Without that launch attribute there
// is no such grid and it returns at once; a kernel reads or writes no global memory before it.
__device__ __forceinline__ void griddepcontrol_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// PTX ISA 9.7.13 griddepcontrol.launch_dependents
// Lets the next grid in the stream start its CTAs (up to its own griddepcontrol.wait) once every
// CTA of this grid has executed this or exited: its start-up overlaps this grid's tail.
__device__ __forceinline__ void griddepcontrol_launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

}  // namespace hattn::ptx
