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
};

}  // namespace hattn::sm90
