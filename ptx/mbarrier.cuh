// hattn/ptx/mbarrier.cuh -- asynchronous transaction barriers in shared memory.
//
// Phase convention used everywhere in hattn: a waiter passes the parity of the phase it
// waits for, computed by the caller as (iteration / stages) & 1. A producer waiting for a
// slot to become free waits with the opposite parity, which a freshly initialised barrier
// reports as already complete (the "previous" phase counts as done).
//
// Debug builds (HATTN_DEBUG_HANG defined, on in CMake Debug) bound every wait: after
// kMbarrierTimeoutNs of wall time the thread executes `trap`, so a broken pipeline fails the
// launch loudly instead of hanging the GPU.
#pragma once

#include "common.cuh"

namespace hattn::ptx {

// Wall-clock budget for one debug-build wait (2 s is ~1000x the longest legitimate wait; it must
// stay below 2^32 ns, the debug waits time themselves with the timer's low 32 bits).
constexpr uint64_t kMbarrierTimeoutNs = 2000000000ull;
static_assert(kMbarrierTimeoutNs < (1ull << 32), "the debug waits use 32-bit timer differences");

// PTX ISA 9.7.13.15.11 mbarrier.init
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrival_count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(arrival_count)
                 : "memory");
}

// PTX ISA 9.7.13.15.12 mbarrier.inval
__device__ __forceinline__ void mbarrier_inval(uint64_t* bar) {
    asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// PTX ISA 9.7.13.15.13 mbarrier.arrive (release at CTA scope, one arrival)
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
    asm volatile(
        "{\n\t.reg .b64 state;\n\t"
        "mbarrier.arrive.shared::cta.b64 state, [%0];\n\t}" ::"r"(smem_u32(bar))
        : "memory");
}

// PTX ISA 9.7.13.15.13 mbarrier.arrive on a barrier of another CTA of the cluster (or our own
// through its shared::cluster address); used to release a slot from a remote consumer.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, uint32_t cta_rank) {
    asm volatile(
        "{\n\t.reg .b32 remote;\n\t"
        "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
        "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n\t}" ::"r"(smem_u32(bar)),
        "r"(cta_rank)
        : "memory");
}

// PTX ISA 9.7.13.15.13 mbarrier.arrive.expect_tx: one arrival plus `bytes` of expected
// transactions, which the TMA engine will complete as its data lands.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile(
        "{\n\t.reg .b64 state;\n\t"
        "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n\t}" ::"r"(smem_u32(bar)),
        "r"(bytes)
        : "memory");
}

// PTX ISA 9.7.13.15.11 mbarrier.expect_tx (no arrival)
__device__ __forceinline__ void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
}

// PTX ISA 9.7.13.15.16 mbarrier.try_wait.parity: one bounded probe (the hardware suspends the
// thread for a system-dependent time before returning false). Returns true once the phase
// with the given parity has completed.
__device__ __forceinline__ bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
    return done != 0;
}

// PTX ISA 9.7.13.15.16 mbarrier.try_wait.parity in a scoped PTX loop: blocks until the phase
// with `parity` completes. Release builds spin in PTX (no compiler-visible loop to unroll).
__device__ __forceinline__ void mbarrier_wait_parity_spin(uint64_t* bar, uint32_t parity) {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "WAIT_%=:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
        "@!p bra WAIT_%=;\n\t}" ::"r"(smem_u32(bar)),
        "r"(parity)
        : "memory");
}

// PTX ISA 9.7.16.3 %globaltimer (nanoseconds), for the debug wait's deadline.
__device__ __forceinline__ uint64_t read_globaltimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}


// Debug variant: the same wait with a wall-clock deadline, then a trap. The launch then fails
// with cudaErrorLaunchFailure instead of hanging; compute-sanitizer or cuda-gdb names the wait.
// The loop is PTX too: a compiler-visible loop in the middle of a wgmma pipeline costs registers
// (the backward kernel spilled with one). (No printf here: a call inside the wgmma pipeline would
// make ptxas serialize it, C7510.)
__device__ __forceinline__ void mbarrier_wait_parity_timeout(uint64_t* bar, uint32_t parity) {
    // The low 32 bits of the timer suffice (they wrap every 4.3 s; unsigned differences survive
    // one wrap) and cost half the registers of the 64-bit timer.
    asm volatile(
        "{\n\t.reg .pred p;\n\t.reg .u32 t0, t1;\n\t"
        "mov.u32 t0, %%globaltimer_lo;\n\t"
        "WAIT_%=:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
        "@p bra DONE_%=;\n\t"
        "mov.u32 t1, %%globaltimer_lo;\n\t"
        "sub.u32 t1, t1, t0;\n\t"
        "setp.gt.u32 p, t1, %2;\n\t"
        "@p trap;\n\t"
        "bra WAIT_%=;\n\t"
        "DONE_%=:\n\t}" ::"r"(smem_u32(bar)),
        "r"(parity), "n"(static_cast<uint32_t>(kMbarrierTimeoutNs))
        : "memory");
}

// The wait every kernel calls: bounded in debug builds, a pure PTX spin otherwise.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#ifdef HATTN_DEBUG_HANG
    mbarrier_wait_parity_timeout(bar, parity);
#else
    mbarrier_wait_parity_spin(bar, parity);
#endif
}

}  // namespace hattn::ptx
