// hattn/src/kernels/sm90/pipeline.cuh -- a ring of shared-memory slots between a TMA producer and
// wgmma consumers, and the named barriers warpgroups use to take turns.
//
// A slot is guarded by two mbarriers. "full" completes when the producer's TMA bytes have landed
// (one arrival, the producer's arrive.expect_tx, plus the transaction count); "empty" completes
// when every consumer warp has finished reading the slot. Each use of a slot is one phase of
// both barriers, so a waiter needs the parity of the pass it is on: PipelineState carries it
// and advances by one increment per use (no division per wait).
#pragma once

#include <cstdint>

#include "ptx/barrier.cuh"
#include "ptx/fence.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "ptx/warp.cuh"
#include "ptx/wgmma.cuh"

namespace hattn::sm90 {

// Which slot, and which pass over the ring (its parity), the next use falls on.
template <int kStages>
struct PipelineState {
    int stage = 0;
    uint32_t phase = 0;

    __device__ __forceinline__ void advance() {
        if (++stage == kStages) {
            stage = 0;
            phase ^= 1u;
        }
    }
    __device__ __forceinline__ void advance(int n) {
        for (int i = 0; i < n; ++i) advance();
    }
};

template <int kStages_>
struct Ring {
    static constexpr int kStages = kStages_;
    using State = PipelineState<kStages>;
    uint64_t full[kStages];
    uint64_t empty[kStages];

    // By one thread, before the CTA-wide barrier that publishes every mbarrier. producer_arrivals:
    // 1 for a TMA producer (its arrive.expect_tx); the number of writing warps for a slot that
    // threads fill (each arrives once, producer_commit).
    __device__ __forceinline__ void init(uint32_t consumer_arrivals, uint32_t producer_arrivals = 1) {
        for (int s = 0; s < kStages; ++s) {
            ptx::mbarrier_init(&full[s], producer_arrivals);
            ptx::mbarrier_init(&empty[s], consumer_arrivals);
        }
    }

    // Producer: wait until the consumers have emptied the slot, then announce the bytes the TMA
    // copies will deliver. On the first pass every slot starts empty: waiting on the parity of
    // the phase *before* the current one returns at once.
    __device__ __forceinline__ uint64_t* producer_acquire(const State& st, uint32_t tx_bytes) {
        ptx::mbarrier_wait(&empty[st.stage], st.phase ^ 1u);
        ptx::mbarrier_arrive_expect_tx(&full[st.stage], tx_bytes);
        return &full[st.stage];
    }

    // As producer_acquire, writing `value` to `word` (a value that travels with the slot) once the
    // slot is free: the arrival's release makes it visible to every consumer thread whose wait
    // observes the phase. Each consumer warp must read the word with the lane that releases the
    // slot, so the read is ordered before the next write. With tx_bytes 0 the phase carries the
    // word alone. `announce` (optional: an mbarrier of one arrival per use of the slot, phases in
    // step with the slot's) gets its own arrival right after the write, so consumers may read the
    // word there without waiting for the slot's bytes. (st.async would put the word on the
    // barrier's transaction count instead, but it needs a cluster launch: in a plain one it is an
    // illegal instruction.)
    template <class T>
    __device__ __forceinline__ uint64_t* producer_acquire_with(const State& st, uint32_t tx_bytes, T* word, const T& value,
                                                               uint64_t* announce = nullptr) {
        producer_wait_empty(st);
        *word = value;
        if (announce != nullptr) ptx::mbarrier_arrive(announce);
        ptx::mbarrier_arrive_expect_tx(&full[st.stage], tx_bytes);
        return &full[st.stage];
    }

    // A producer that writes the slot with its own threads: wait until it is empty, write it, then
    // (after the writes are fenced for their readers) one arrival per writing warp.
    __device__ __forceinline__ void producer_wait_empty(const State& st) { ptx::mbarrier_wait(&empty[st.stage], st.phase ^ 1u); }
    __device__ __forceinline__ void producer_commit(const State& st) { ptx::mbarrier_arrive(&full[st.stage]); }

    // Consumer: wait for the slot's data; release it once the last wgmma reading it completed.
    __device__ __forceinline__ void consumer_wait(const State& st) { ptx::mbarrier_wait(&full[st.stage], st.phase); }
    __device__ __forceinline__ void consumer_release(const State& st) { ptx::mbarrier_arrive(&empty[st.stage]); }
};

// A consumer's waits for two slots at once (K_it and V_{it-1}): both probed first, so the two
// probes' latencies overlap when the data has long landed (the steady state's case); a slot not
// yet full is then waited for as usual.
template <class RingA, class RingB>
__device__ __forceinline__ void consumer_wait_both(RingA& a, const typename RingA::State& sa, RingB& b,
                                                   const typename RingB::State& sb) {
    const bool full_a = ptx::mbarrier_try_wait_parity(&a.full[sa.stage], sa.phase);
    const bool full_b = ptx::mbarrier_try_wait_parity(&b.full[sb.stage], sb.phase);
    if (full_a && full_b) return;
    a.consumer_wait(sa);
    b.consumer_wait(sb);
}

// Blocks a consumer computes nothing for (none of its rows sees them): each one's K and V slots
// waited for, so the rings' phases stay in step, and released at once (by `releaser`, one lane per
// warp), with `turns(it)` between them for the ping-pong turns that computing block it would take.
template <class KRing, class VRing, class Turns>
__device__ __forceinline__ void pass_over_blocks(int count, KRing& k, typename KRing::State& ks, VRing& v,
                                                 typename VRing::State& vs, bool releaser, Turns&& turns) {
    for (int it = 0; it < count; ++it) {
        consumer_wait_both(k, ks, v, vs);
        turns(it);
        if (releaser) {
            k.consumer_release(ks);
            v.consumer_release(vs);
        }
        ks.advance();
        vs.advance();
    }
}

// setmaxnreg's split of the SM's 64K registers between one producer warpgroup, which only
// computes coordinates, and `consumers` (2 or 3) consumer warpgroups, which hold O, S and P:
// 2 consumers 128 x 24 + 256 x 240 = 64512; 3 consumers 128 x 32 + 384 x 160 = 65536.
constexpr uint32_t producer_regs(int consumers) { return consumers == 2 ? 24 : 32; }
constexpr uint32_t consumer_regs(int consumers) { return consumers == 2 ? 240 : 160; }

// The kernel's tensor maps into the descriptor cache before their first TMA use (one thread).
template <class... Maps>
__device__ __forceinline__ void prefetch_tensormaps(const Maps*... tmaps) {
    (ptx::prefetch_tensormap(tmaps), ...);
}

// Barrier setup by one thread (`init` runs in thread 0), published to the async proxy (TMA
// completes on these barriers) and to every thread of the CTA before anyone touches them.
template <class Init>
__device__ __forceinline__ void init_barriers(Init init) {
    if (threadIdx.x == 0) {
        init();
        ptx::fence_mbarrier_init();
    }
    __syncthreads();
}

// The one thread of a producer warpgroup that issues its TMA loads: an elected lane of warp 0.
__device__ __forceinline__ bool is_tma_issuer() { return threadIdx.x / 32 == 0 && ptx::elect_one_sync(); }

// A producer's K and V loads for a tile's KV block iterations [it_begin, it_end), K one block
// ahead of V: the consumers need K_it and V_{it-1} together (S_it and P_{it-1} V_{it-1} are
// issued back to back).
template <class LoadK, class LoadV>
__device__ __forceinline__ void load_kv_blocks(int it_begin, int it_end, LoadK&& load_k, LoadV&& load_v) {
    if (it_end <= it_begin) return;
    load_k(it_begin);
    for (int it = it_begin + 1; it < it_end; ++it) {
        load_k(it);
        load_v(it - 1);
    }
    load_v(it_end - 1);
}

// The consumers' side of that order: S_it = Q K_it^T and P_{it-1} V_{it-1} issued back to back
// as two wgmma groups within one turn of the tensor cores, so the caller can wait for S alone
// (wgmma_wait_group<1>) and run its softmax while the PV GEMM still runs.
template <class TakeTurn, class GemmQk, class GemmPv, class PassTurn>
__device__ __forceinline__ void issue_qk_then_pv(TakeTurn&& take_turn, GemmQk&& gemm_qk, GemmPv&& gemm_pv,
                                                 PassTurn&& pass_turn) {
    take_turn();
    ptx::wgmma_fence();
    gemm_qk();
    ptx::wgmma_commit_group();
    ptx::wgmma_fence();
    gemm_pv();
    ptx::wgmma_commit_group();
    pass_turn();
}

// A named barrier (bar.sync / bar.arrive id, count) whose thread count is part of its type, so
// every use of one barrier agrees on it. Ids come from one enum per kernel; 0 is __syncthreads.
template <uint32_t kThreads>
struct NamedBarrier {
    static_assert(kThreads % 32 == 0, "named barriers count whole warps");
    uint32_t id;
    __device__ __forceinline__ void sync() const { ptx::bar_sync(id, kThreads); }
    __device__ __forceinline__ void arrive() const { ptx::bar_arrive(id, kThreads); }
};

}  // namespace hattn::sm90
