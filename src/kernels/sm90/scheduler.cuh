// hattn/src/kernels/sm90/scheduler.cuh -- which work tile a CTA takes next.
//
// A tile is kBlockM query rows of one (head, batch). Tiles are numbered with the query block
// fastest, so CTAs running at the same time share a head's K and V in L2. Under a causal mask a
// head's tiles go longest first (the highest query block sees the most keys), so the short ones
// fill the tail.
//
// CTA b of a grid of G walks its tiles in passes: pass p takes tile p*G + b on even passes and
// p*G + (G-1-b) on odd ones. With one CTA per tile that is simply tile b. On a persistent grid
// (G = number of SMs) the alternation balances causal costs: were the tile order to repeat with
// a period dividing G, a plain stride would hand a CTA the same query-block position, and so the
// same cost, on every pass; the back-and-forth pairs a long position with a short one.
#pragma once

#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "kernels/sm90/pipeline.cuh"

namespace hattn::sm90 {

struct Tile {
    int m_block, head, batch, kv_head;
};

struct TileScheduler {
    int num_m_blocks;
    int heads_q;
    int heads_per_kv;  // GQA group size
    int num_tiles;     // num_m_blocks * heads_q * batch
    bool longest_first;

    __host__ __device__ Tile tile_at(int index) const {
        Tile t;
        const int m_index = index % num_m_blocks;
        const int head_batch = index / num_m_blocks;
        t.m_block = longest_first ? num_m_blocks - 1 - m_index : m_index;
        t.head = head_batch % heads_q;
        t.batch = head_batch / heads_q;
        t.kv_head = t.head / heads_per_kv;
        return t;
    }

    // This CTA's tile on pass `pass` of its walk; false once the walk is over.
    __device__ bool tile_for_pass(int pass, Tile& t) const {
        const int index = walk(pass, blockIdx.x, gridDim.x);
        if (index >= num_tiles) return false;
        t = tile_at(index);
        return true;
    }

    // As above, with the tile's first query row m0 and how many kBlockN-wide KV blocks its rows
    // see under `mask` (a Mask: n_blocks(m0, rows, block_n)).
    template <int kBlockM, int kBlockN, class MaskT>
    __device__ __forceinline__ bool tile_for_pass(int pass, const MaskT& mask, Tile& t, int& m0, int& n_blocks) const {
        if (!tile_for_pass(pass, t)) return false;
        m0 = t.m_block * kBlockM;
        n_blocks = mask.n_blocks(m0, kBlockM, kBlockN);
        return true;
    }

    // The walk over the ceil(seqlen_q / block_m) query blocks of every (head, batch); false, with
    // *error, when the tiles outnumber int32 (tile indices are ints).
    static bool make(int block_m, int seqlen_q, int heads_q, int heads_kv, int batch, bool causal, TileScheduler& s,
                     std::string* error) {
        const int num_m_blocks = (seqlen_q + block_m - 1) / block_m;
        const int64_t num_tiles = static_cast<int64_t>(num_m_blocks) * heads_q * batch;
        if (num_tiles > INT32_MAX) {
            if (error) *error = "batch * heads_q * (query blocks) exceeds 2^31 - 1 tiles";
            return false;
        }
        s = TileScheduler{num_m_blocks, heads_q, heads_q / heads_kv, static_cast<int>(num_tiles), causal};
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
    cudaError_t grid_ctas(int requested, bool persistent, int* ctas) const {
        *ctas = requested > 0 ? (requested < num_tiles ? requested : num_tiles) : num_tiles;
        if (requested > 0 || !persistent) return cudaSuccess;
        int device = 0, sms = 0;
        cudaError_t rc = cudaGetDevice(&device);
        if (rc == cudaSuccess) rc = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        if (rc == cudaSuccess && sms < num_tiles) *ctas = sms;
        return rc;
    }
};

// The forward kernels' TMA thread: for every tile of this CTA, Q once (even for a tile with nothing
// to attend to, so that Q's phases never depend on the mask), then its KV blocks from the last to
// the first (load_kv_blocks: K one block ahead of V). smem holds q[] / q_ring, k[] / k_ring and
// v_ring; the V tile differs per kernel (V or V^T), so load_v(slot, full barrier, tile, key0)
// issues it, kVTxBytes being its size.
template <int kBlockM, int kBlockN, uint32_t kVTxBytes, class MaskT, class Smem, class LoadV>
__device__ __forceinline__ void produce_forward_tiles(const TileScheduler& scheduler, const MaskT& mask, Smem& smem,
                                                      const CUtensorMap* tmap_q, const CUtensorMap* tmap_k,
                                                      LoadV&& load_v) {
    using QTile = std::remove_reference_t<decltype(smem.q[0])>;
    using KTile = std::remove_reference_t<decltype(smem.k[0])>;
    typename decltype(smem.q_ring)::State q_state;
    typename decltype(smem.k_ring)::State k_state;
    typename decltype(smem.v_ring)::State v_state;
    Tile t;
    int m0, n_blocks;
    for (int pass = 0; scheduler.template tile_for_pass<kBlockM, kBlockN>(pass, mask, t, m0, n_blocks); ++pass) {
        smem.q[q_state.stage].load(tmap_q, smem.q_ring.producer_acquire(q_state, QTile::kTxBytes), m0, t.head, t.batch);
        q_state.advance();
        auto load_k = [&](int it) {
            uint64_t* full = smem.k_ring.producer_acquire(k_state, KTile::kTxBytes);
            smem.k[k_state.stage].load(tmap_k, full, (n_blocks - 1 - it) * kBlockN, t.kv_head, t.batch);
            k_state.advance();
        };
        auto load_v_block = [&](int it) {
            load_v(v_state.stage, smem.v_ring.producer_acquire(v_state, kVTxBytes), t, (n_blocks - 1 - it) * kBlockN);
            v_state.advance();
        };
        load_kv_blocks(n_blocks, load_k, load_v_block);
    }
}

}  // namespace hattn::sm90
