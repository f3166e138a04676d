// hattn/src/kernels/sm90/scheduler.cuh -- which work tile a CTA takes next.
//
// A tile is kBlockM query rows of one (head, batch). The (head, batch) pairs are cut into
// sections of `section_heads` consecutive pairs, numbered one section after the other, so that
// CTAs running at the same time share the K and V of a few heads in L2. Inside a section, tiles
// are numbered by query block first and head second. Under a causal mask the query blocks go
// longest first (the highest sees the most keys), across the whole section: the longest tiles
// of the last section start a section's worth of work before the end, and its short tiles fill
// the tail. (With sections of one head, a head's longest tile started only one head's work before
// the end and ran past everyone else's: +7.5% at d256 causal 8k with sections, bench/RESULTS.md
// run 40d.) Without a mask all tiles cost the same, and on a persistent walk the back-and-forth
// below balances the head-by-head order: both keep sections of one head. (The 16-bit forward
// takes the sections only with HATTN_FWD_CAUSAL_SECTIONS, kernels/fwd_rules.h.)
//
// CTA b of a grid of G walks its tiles in passes: pass p takes tile p*G + b on even passes and
// p*G + (G-1-b) on odd ones. With one CTA per tile that is simply tile b. On a persistent grid
// (G = number of SMs) the alternation balances causal costs: were the tile order to repeat with
// a period dividing G, a plain stride would hand a CTA the same query-block position, and so the
// same cost, on every pass; the back-and-forth pairs a long position with a short one.
//
// A dynamic walk (tile_counter set) replaces the fixed passes: CTA b starts on tile b and then
// takes the next unclaimed tile from a counter in global memory, so tiles are handed out in their
// numbered order to whichever CTA frees up first -- list scheduling, which in the causal sections'
// longest-first order brings a persistent grid within 0-3% of the ideal finish, where the fixed
// passes leave 3-6% (in the sections' order 6-60%: a model of n_blocks per tile, bench/RESULTS.md
// run 46). That needs the claim late in the current tile (kClaimAfterLoads). The producer thread
// claims; the tile travels to the consumers, decoded, with Q's slot (TileHandOff below). The CTA
// that finishes last zeroes the counter, so the next launch on the stream finds it as the first
// one did.
//
// A split tail (full masks on a persistent grid, plan_split_tail) walks only the whole passes'
// tiles this way. The tiles left over for a last, partly empty pass are cut over their KV blocks
// instead (stream-K): their blocks, numbered tile by tile, go to the CTAs in equal runs, so every
// CTA finishes together. A run that starts inside a tile computes a partial O for that tile's
// blocks it holds and hands it over through the workspace (a writer); the CTA whose run holds the
// tile's first block iterations merges the partials into O (the merger, sm90/split_tail.cuh). A
// run ends with the start of a tile and begins with the end of one, so a merger reaches its tile
// last in its run while its partners wrote theirs first in theirs: the merge rarely waits.
#pragma once

#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "kernels/sm90/fragment.cuh"
#include "kernels/sm90/pipeline.cuh"
#include "kernels/sm90/schedule_workspace.h"
#include "ptx/atomic.cuh"

// When the dynamic walk's producer claims its next tile: 1 (default) after the current tile's
// last K/V load, a few KV blocks before the tile ends, so the next tile goes to the CTA that
// frees up first; 0 right after the current tile's Q load, which decides each CTA's next tile by
// when it *started* its current one: in the longest-first order a CTA on a long tile then draws
// the next long one as readily as one on a short tile, and a model of the grid puts the finish
// 2-4% (d64, d128) and 10-19% (d256) above the ideal, against 0-3% for claims at the end
// (bench/RESULTS.md run 46).
#ifndef HATTN_SCHED_CLAIM_AFTER_LOADS
#define HATTN_SCHED_CLAIM_AFTER_LOADS 1
#endif

namespace hattn::sm90 {

constexpr bool kClaimAfterLoads = HATTN_SCHED_CLAIM_AFTER_LOADS != 0;

// (16-byte aligned: TileHandOff passes one through shared memory in two vector accesses.)
struct alignas(16) Tile {
    int m_block, head, batch, kv_head;
    // The tile's KV block iterations this CTA computes, [it_begin, min(it_end, n_blocks)) (it = 0 is
    // the highest block), and its part in a split tail: kWholeTile, kSplitWriter (a partial O for
    // this CTA's run's slot), or k > 0 (the merger of the partials in the next k runs' slots).
    int it_begin = 0, it_end = INT_MAX, split = 0;
    int unused = 0;
};
constexpr int kWholeTile = 0;
constexpr int kSplitWriter = -1;
// What the producer hands over after the last tile: the consumers' signal to stop.
__host__ __device__ constexpr Tile past_last_tile() { return {-1, 0, 0, 0}; }

struct TileScheduler {
    int num_m_blocks;
    int heads_q;
    int heads_per_kv;  // GQA group size
    int num_tiles;     // num_m_blocks * heads_q * batch
    bool longest_first;
    int section_heads = 1;  // (head, batch) pairs per section, >= 1
    bool sections_by_rule = false;  // make()'s causal rule chose section_heads (grid_ctas may undo it)
    // Dynamic walk: kCounterWords ints of zero-filled global memory (tickets, finished CTAs), or
    // nullptr for the fixed passes.
    int32_t* tile_counter = nullptr;
    static constexpr int kCounterWords = 2;
    // Tiles [0, walk_tiles) are walked whole (fixed passes or the counter); with a split tail
    // (plan_split_tail) the rest, split_blocks KV blocks each, split_units blocks in all, go to the
    // CTAs in runs of split_run blocks.
    int walk_tiles = 0;
    int split_blocks = 0, split_run = 0, split_units = 0;

    __host__ __device__ Tile tile_at(int index) const {
        Tile t;
        const int section_tiles = section_heads * num_m_blocks;
        const int section = index / section_tiles;
        const int in_section = index - section * section_tiles;
        // (The last section may hold fewer pairs.)
        const int left = num_tiles / num_m_blocks - section * section_heads;
        const int pairs = left < section_heads ? left : section_heads;
        const int m_index = in_section / pairs;
        const int head_batch = section * section_heads + (in_section - m_index * pairs);
        t.m_block = longest_first ? num_m_blocks - 1 - m_index : m_index;
        t.head = head_batch % heads_q;
        t.batch = head_batch / heads_q;
        t.kv_head = t.head / heads_per_kv;
        return t;
    }

    // Tile `index`, its first query row m0 and how many kBlockN-wide KV blocks its rows see under
    // `mask` (a Mask: n_blocks(m0, rows, block_n)); false for an index past the last tile.
    template <int kBlockM, int kBlockN, class MaskT>
    __device__ __forceinline__ bool tile_of(int index, const MaskT& mask, Tile& t, int& m0, int& n_blocks) const {
        if (index >= walk_tiles) return false;
        t = tile_at(index);
        return place<kBlockM, kBlockN>(t, mask, m0, n_blocks);
    }
    // The same for a tile decoded already (TileHandOff): false for past_last_tile().
    template <int kBlockM, int kBlockN, class MaskT>
    static __device__ __forceinline__ bool place(const Tile& t, const MaskT& mask, int& m0, int& n_blocks) {
        if (t.m_block < 0) return false;
        m0 = t.m_block * kBlockM;
        n_blocks = mask.n_blocks(m0, kBlockM, kBlockN);
        return true;
    }

    // Which of tile t's n_blocks KV block iterations (it = 0: the highest block) a consumer's
    // 64-row slice from row0 computes: [first, end), of which those below n_masked need the mask.
    // end: the tile's whole range unless a split tail's piece; first: past the range's start the
    // blocks none of the slice's rows sees, with kSkipHidden (the kernels' skip_hidden_blocks).
    struct SliceBlocks {
        int first, end, n_masked;
    };
    template <bool kSkipHidden, int kBlockN, class MaskT>
    __host__ __device__ static SliceBlocks slice_blocks(const Tile& t, const MaskT& mask, int m0, int row0, int n_blocks) {
        const int end = t.it_end < n_blocks ? t.it_end : n_blocks;
        const int masked = n_blocks - mask.first_masked_block(m0, kBlockN);
        const int hidden = kSkipHidden ? mask.hidden_blocks(m0, row0, kMmaM, kBlockN, n_blocks) : 0;
        const int first = t.it_begin > hidden ? t.it_begin : hidden;
        return {first < end ? first : end, end, masked < 0 ? 0 : masked < end ? masked : end};
    }

    // This CTA's tile on pass `pass` of a fixed walk; false once the walk is over.
    template <int kBlockM, int kBlockN, class MaskT>
    __device__ __forceinline__ bool tile_for_pass(int pass, const MaskT& mask, Tile& t, int& m0, int& n_blocks) const {
        return tile_of<kBlockM, kBlockN>(walk(pass, blockIdx.x, gridDim.x), mask, t, m0, n_blocks);
    }

    // The walk as its one claiming thread sees it: the first tile, then the one after pass
    // `pass` (a claim: its ticket's round trip to L2 is the one wait it adds, a few KV blocks
    // before the next tile is due).
    __device__ __forceinline__ int first_index() const { return static_cast<int>(blockIdx.x); }
    __device__ __forceinline__ int next_index(int pass) const {
        return tile_counter != nullptr ? ptx::atom_global_add_s32(tile_counter, 1) + static_cast<int>(gridDim.x)
                                       : walk(pass + 1, blockIdx.x, gridDim.x);
    }
    // The claiming thread, after its last claim (the one past the last tile). Every CTA counts
    // itself finished with acq_rel, so the last to do so sees every other CTA's claims before it
    // zeroes the counter for the next launch.
    __device__ __forceinline__ void finish_walk() const {
        if (tile_counter == nullptr) return;
        if (ptx::atom_acq_rel_gpu_global_add_s32(tile_counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
            ptx::st_relaxed_gpu_global_s32(tile_counter, 0);
            ptx::st_relaxed_gpu_global_s32(tile_counter + 1, 0);
        }
    }

    // This CTA's run of the split tail: the runs go to the CTAs in reverse launch order, so a
    // merger (its run's last piece) waits only on the runs after its own -- CTAs launched before it,
    // which write their pieces without waiting on anything. Thread blocks are dispatched in order
    // of their index (what the backward's deterministic dQ order relies on as well): with fewer
    // SMs than CTAs (MPS, a green context, a busy GPU) every CTA a merger waits for is already
    // running or done, and the tail cannot hang; in launch order a merger's partners could be
    // the CTAs still waiting for its SM.
    __device__ __forceinline__ int tail_run() const { return static_cast<int>(gridDim.x - 1 - blockIdx.x); }

    // Run `run`'s pieces of the split tail, in order: piece(tile) with the tile's it_begin, it_end
    // and split set. A run begins inside a tile (a writer, unless the run starts on a tile
    // boundary), may hold whole tiles, and ends with a tile's first iterations (that tile's merger,
    // whose partners are the runs that hold the rest of it).
    template <class Piece>
    __host__ __device__ __forceinline__ void for_each_tail_piece(int run, Piece&& piece) const {
        if (split_run == 0) return;
        int unit = run * split_run;
        const int end = unit + split_run < split_units ? unit + split_run : split_units;
        while (unit < end) {
            const int k = unit / split_blocks;
            const int begin = unit - k * split_blocks;
            const int stop = begin + (end - unit) < split_blocks ? begin + (end - unit) : split_blocks;
            Tile t = tile_at(walk_tiles + k);
            t.it_begin = begin;
            t.it_end = stop;
            t.split = begin > 0                ? kSplitWriter
                      : stop == split_blocks ? kWholeTile
                                             : ((k + 1) * split_blocks - 1) / split_run - run;  // partners
            piece(t);
            unit += stop - begin;
        }
    }

    // Host: whether a launch may split its tail: a full mask not on the dynamic walk, a workspace
    // for the partial tiles, and whole query tiles (a partial last tile's empty slices would skip
    // blocks of a run).
    static bool may_split_tail(bool causal, bool dynamic, const void* workspace, int block_m, int seqlen_q) {
        return !causal && !dynamic && workspace != nullptr && seqlen_q % block_m == 0;
    }

    // Host, after grid_ctas: cut the tiles past the last whole pass of `ctas` CTAs over their
    // n_blocks KV blocks each (full masks: every tile has n_blocks). Only where there are whole
    // passes and a partly empty last one, the grid fits the workspace's slots, and each CTA's run
    // is at least min_run blocks (a piece pays a Q load, a pipeline fill and drain, and a partial
    // tile's round trip to L2). Returns whether it split.
    bool plan_split_tail(int ctas, int n_blocks, int min_run) {
        const int passes = ctas > 0 ? num_tiles / ctas : 0;
        const int left = num_tiles - passes * ctas;
        if (passes == 0 || left == 0 || ctas > kSplitMaxCtas || n_blocks <= 0) return false;
        const int64_t units = static_cast<int64_t>(left) * n_blocks;
        const int64_t run = (units + ctas - 1) / ctas;
        if (run < min_run || units + run > INT_MAX) return false;
        walk_tiles = passes * ctas;
        split_blocks = n_blocks;
        split_run = static_cast<int>(run);
        split_units = static_cast<int>(units);
        return true;
    }

    // Full masks: the dynamic walk pays where the last query tile is partial and its empty slices
    // skip their blocks (tail_skips): such a tile costs a third to two thirds of a whole one, which
    // the fixed walk's passes count as whole, while the counter hands tiles out to fill the last
    // pass. Up to kPartialTailMaxSeqlenK keys: beyond, tails are under 1% of the tiles and the
    // walk measured ~1% slower (bench/RESULTS.md run 55d; scripts/model_tile_walk.py --mask full).
    static constexpr int kPartialTailMaxSeqlenK = 8192;
    __host__ __device__ static constexpr bool partial_tail_walk(bool tail_skips, int block_m, int seqlen_q,
                                                                int seqlen_k) {
        return tail_skips && seqlen_q % block_m != 0 && seqlen_k <= kPartialTailMaxSeqlenK;
    }

    // Causal sections: as many (head, batch) pairs as keep their K and V (kv_bytes_per_head each)
    // within this share of L2 (H100 / H200: 50 / 60 MB), at least one.
    static constexpr int64_t kSectionL2Bytes = 16ll << 20;

    // The walk over the ceil(seqlen_q / block_m) query blocks of every (head, batch); false, with
    // *error, when the tiles outnumber int32 (tile indices are ints). kv_bytes_per_head: the bytes
    // of K and V one head's tiles read; section_heads > 0 overrides the causal rule (A/B runs).
    static bool make(int block_m, int seqlen_q, int heads_q, int heads_kv, int batch, bool causal,
                     int64_t kv_bytes_per_head, TileScheduler& s, std::string* error, int section_heads = 0) {
        const int num_m_blocks = (seqlen_q + block_m - 1) / block_m;
        const int64_t pairs = static_cast<int64_t>(heads_q) * batch;
        const int64_t num_tiles = num_m_blocks * pairs;
        if (num_tiles > INT32_MAX) {
            if (error) *error = "batch * heads_q * (query blocks) exceeds 2^31 - 1 tiles";
            return false;
        }
        int64_t section = section_heads > 0 ? section_heads
                          : causal          ? kSectionL2Bytes / (kv_bytes_per_head > 0 ? kv_bytes_per_head : 1)
                                            : 1;
        section = section < 1 ? 1 : section > pairs ? pairs : section;
        s = TileScheduler{num_m_blocks, heads_q, heads_q / heads_kv, static_cast<int>(num_tiles), causal,
                          static_cast<int>(section), section_heads <= 0};
        s.walk_tiles = s.num_tiles;
        return true;
    }

    // The tile of pass `pass` for CTA `cta` of `grid`; >= num_tiles once the CTA is done.
    __host__ __device__ static int walk(int pass, int cta, int grid) {
        return pass * grid + (pass % 2 == 0 ? cta : grid - 1 - cta);
    }

    // Host: the CTAs to launch. `requested` > 0: that many (at most one per tile); else one per SM
    // of the current device when `persistent` (short tiles spend much of their time starting up --
    // barriers, first loads, the pipeline's prologue and drain, the O store -- and a persistent
    // CTA overlaps that with its previous tile), else one per tile.
    // A grid of fewer CTAs than tiles walks them (walk() above), and its back-and-forth balances
    // the head-by-head order; in the sections' order it measured 15-32% slower (causal 2k-4k,
    // bench/RESULTS.md run 40d). So on such a grid the causal rule's sections go back to one head,
    // unless the walk is dynamic (tile_counter), which takes the tiles in order.
    cudaError_t grid_ctas(int requested, bool persistent, int* ctas) {
        *ctas = requested > 0 ? (requested < num_tiles ? requested : num_tiles) : num_tiles;
        cudaError_t rc = cudaSuccess;
        if (requested <= 0 && persistent) {
            int device = 0, sms = 0;
            rc = cudaGetDevice(&device);
            if (rc == cudaSuccess) rc = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
            if (rc == cudaSuccess && sms < num_tiles) *ctas = sms;
        }
        if (sections_by_rule && *ctas < num_tiles && tile_counter == nullptr) section_heads = 1;
        return rc;
    }
};

// How each tile travels from the producer (produce_forward_tiles) to the consumers: decoded, one
// Tile per Q slot, written once the slot is free. (The producer runs tile_at's chain of integer
// divisions for its own loads anyway; run again by every consumer warp it stood between one tile's
// epilogue and the next tile's first GEMM, ~500 cycles: bench/RESULTS.md run 54e.) With kAnnounce a one-arrival mbarrier per Q slot is
// arrived on right after that write, before Q's TMA is issued, so the consumers set the tile up
// while Q's bytes land; without it they read the tile once Q has landed.
template <int kQStages, bool kAnnounce_>
struct TileHandOff {
    static constexpr bool kAnnounce = kAnnounce_;
    Tile tile[kQStages];
    uint64_t announced[kAnnounce ? kQStages : 1];

    // One thread, with the kernel's other barriers.
    __device__ __forceinline__ void init() {
        if constexpr (kAnnounce)
            for (uint64_t& bar : announced) ptx::mbarrier_init(&bar, 1);
    }
    // The producer: Q slot `stage`'s announce barrier (nullptr without).
    __device__ __forceinline__ uint64_t* announce_bar(int stage) { return kAnnounce ? &announced[stage] : nullptr; }
    // A consumer warp: the tile whose Q takes the slot of `st` (past_last_tile(): none), once
    // announced or once Q has landed. Lane 0 reads it -- the lane that later releases the slot, so
    // the read is ordered before the producer's next write -- and hands it to its warp.
    template <class QRing>
    __device__ __forceinline__ Tile consumer_tile(QRing& q_ring, const typename QRing::State& st, int lane) {
        if constexpr (kAnnounce) ptx::mbarrier_wait(&announced[st.stage], st.phase);
        else q_ring.consumer_wait(st);
        const Tile mine = lane == 0 ? tile[st.stage] : past_last_tile();
        Tile t;
        t.m_block = __shfl_sync(0xffffffffu, mine.m_block, 0);
        t.head = __shfl_sync(0xffffffffu, mine.head, 0);
        t.batch = __shfl_sync(0xffffffffu, mine.batch, 0);
        t.kv_head = __shfl_sync(0xffffffffu, mine.kv_head, 0);
        t.it_begin = __shfl_sync(0xffffffffu, mine.it_begin, 0);
        t.it_end = __shfl_sync(0xffffffffu, mine.it_end, 0);
        t.split = __shfl_sync(0xffffffffu, mine.split, 0);
        return t;
    }
};

// The forward kernels' TMA thread: for every tile of this CTA, Q once (even for a tile with nothing
// to attend to, so that Q's phases never depend on the mask), then its KV blocks from the last to
// the first (load_kv_blocks: K one block ahead of V). smem holds q[] / q_ring and k[] / k_ring;
// the V tile differs per kernel (V, V^T, or the FP8 forward's V rows staged for its in-kernel
// transpose), so v_ring is the ring its slots belong to and load_v(slot, full barrier, tile, key0)
// issues it, kVTxBytes being its size. Returns v_ring's state after the last V load (the next slot).
//   hand_off       a TileHandOff, or nullptr when the consumers walk the same fixed passes
//                  themselves: receives each tile with its Q slot, and after the last tile
//                  past_last_tile() with no data (the consumers' signal to stop)
//   kClaimLate     take the next tile after the current one's loads (kClaimAfterLoads; a kernel
//                  with a dynamic walk), not before them
template <int kBlockM, int kBlockN, uint32_t kVTxBytes, bool kClaimLate = false, class MaskT, class Smem, class VRing, class LoadV,
          class HandOff = TileHandOff<1, false>>
__device__ __forceinline__ typename VRing::State produce_forward_tiles(const TileScheduler& scheduler, const MaskT& mask, Smem& smem,
                                                      const CUtensorMap* tmap_q, const CUtensorMap* tmap_k,
                                                      VRing& v_ring, LoadV&& load_v, HandOff* hand_off = nullptr) {
    using QTile = std::remove_reference_t<decltype(smem.q[0])>;
    using KTile = std::remove_reference_t<decltype(smem.k[0])>;
    typename decltype(smem.q_ring)::State q_state;
    typename decltype(smem.k_ring)::State k_state;
    typename VRing::State v_state;
    Tile t;
    int m0, n_blocks;
    // Q's slot, with the tile when it is handed off (tx_bytes 0: the tile alone).
    auto acquire_q = [&](uint32_t tx_bytes, const Tile& tile) {
        return hand_off != nullptr ? smem.q_ring.producer_acquire_with(q_state, tx_bytes, &hand_off->tile[q_state.stage], tile,
                                                                      hand_off->announce_bar(q_state.stage))
                                   : smem.q_ring.producer_acquire(q_state, tx_bytes);
    };
    // One tile (or piece of one): Q, `after_q`, then its KV blocks in the consumers' order.
    auto load_tile = [&](auto after_q) {
        uint64_t* q_full = acquire_q(QTile::kTxBytes, t);
        smem.q[q_state.stage].load(tmap_q, q_full, m0, t.head, t.batch);
        q_state.advance();
        after_q();
        auto load_k = [&](int it) {
            uint64_t* full = smem.k_ring.producer_acquire(k_state, KTile::kTxBytes);
            smem.k[k_state.stage].load(tmap_k, full, (n_blocks - 1 - it) * kBlockN, t.kv_head, t.batch);
            k_state.advance();
        };
        auto load_v_block = [&](int it) {
            load_v(v_state.stage, v_ring.producer_acquire(v_state, kVTxBytes), t, (n_blocks - 1 - it) * kBlockN);
            v_state.advance();
        };
        load_kv_blocks(t.it_begin, t.it_end < n_blocks ? t.it_end : n_blocks, load_k, load_v_block);
    };
    int index = scheduler.first_index();
    for (int pass = 0; scheduler.template tile_of<kBlockM, kBlockN>(index, mask, t, m0, n_blocks); ++pass) {
        load_tile([&] {
            if constexpr (!kClaimLate) index = scheduler.next_index(pass);
        });
        if constexpr (kClaimLate) index = scheduler.next_index(pass);
    }
    scheduler.for_each_tail_piece(scheduler.tail_run(), [&](const Tile& piece) {
        t = piece;
        TileScheduler::place<kBlockM, kBlockN>(t, mask, m0, n_blocks);
        load_tile([] {});
    });
    if (hand_off != nullptr) acquire_q(0, past_last_tile());
    scheduler.finish_walk();
    return v_state;
}

}  // namespace hattn::sm90
