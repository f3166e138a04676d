// hattn/src/kernels/sm90/mask.cuh -- which keys a query row may see: the seqlen_k tail and the
// causal mask aligned bottom-right (query i sees key j iff j <= i + seqlen_k - seqlen_q, so the
// last query row sees every key whatever the two lengths).
//
// Forward kernels hold a [query rows x keys] score tile (apply); the backward holds the transpose,
// [keys x query rows] (apply_transposed). Both use the same two limits, so they cannot disagree.
#pragma once

#include <cmath>

#include "kernels/sm90/fragment.cuh"

namespace hattn::sm90 {

struct Mask {
    int seqlen_q;
    int seqlen_k;
    bool causal;

    // Keys [0, key_end(row)) are visible to query `row` (may be <= 0: the row sees nothing).
    __host__ __device__ constexpr int key_end(int row) const {
        return causal ? min_int(seqlen_k, row + seqlen_k - seqlen_q + 1) : seqlen_k;
    }
    // Queries [query_begin(key), seqlen_q) see `key` (key < seqlen_k).
    __host__ __device__ constexpr int query_begin(int key) const {
        return causal ? max_int(0, key - (seqlen_k - seqlen_q)) : 0;
    }
    __host__ __device__ constexpr bool visible(int row, int key) const {
        return row >= 0 && row < seqlen_q && key >= 0 && key < key_end(row);
    }

    // KV blocks of width kBlockN that query rows [m0, m0 + rows) need: [0, n_blocks).
    __host__ __device__ constexpr int n_blocks(int m0, int rows, int block_n) const {
        const int end = causal ? min_int(seqlen_k, m0 + rows + seqlen_k - seqlen_q) : seqlen_k;
        return end > 0 ? (end + block_n - 1) / block_n : 0;
    }
    // Of a tile's n_blocks from m0 (visited from the highest), how many leading ones no query row
    // of [m0 + row0, m0 + row0 + rows) sees: those above the causal diagonal for all of them, or
    // all n_blocks when they all lie past seqlen_q (a tail tile's slices).
    __host__ __device__ constexpr int hidden_blocks(int m0, int row0, int rows, int block_n, int n_blocks_of_tile) const {
        const int end = min_int(row0 + rows, seqlen_q - m0);  // the slice's rows in the problem: [row0, end)
        return n_blocks_of_tile - (end > row0 ? n_blocks(m0, end, block_n) : 0);
    }
    // Blocks [first_masked_block, n_blocks) can hold a key some row of [m0, ...) may not see:
    // the block reaching past seqlen_k, and (causal) those crossing the first row's diagonal.
    __host__ __device__ constexpr int first_masked_block(int m0, int block_n) const {
        const int first = seqlen_k / block_n;
        return causal ? min_int(first, max_int(m0 + seqlen_k - seqlen_q + 1, 0) / block_n) : first;
    }

    // The backward's view, from a KV block of keys [n0, n0 + block_n): query blocks of block_m
    // rows from first_query_block on see some key of it (n0 < seqlen_k) ...
    __host__ __device__ constexpr int first_query_block(int n0, int block_m) const {
        return query_begin(n0) / block_m;
    }
    // ... and from first_unmasked_query_block on, every row sees every key of it.
    __host__ __device__ constexpr int first_unmasked_query_block(int n0, int block_n, int block_m) const {
        const int first_full_row = n0 + block_n - 1 - (seqlen_k - seqlen_q);  // sees the block's last key
        return (!causal || first_full_row <= 0) ? 0 : (first_full_row + block_m - 1) / block_m;
    }

    // Scores of a forward fragment: rows first_row and first_row + 8, keys from col0 (the
    // fragment's column 0 for this tile). Invisible ones become -inf.
    // The lane's part of each column (acc_col(0, lane)) moves to the row's limit, so every score
    // is compared with a compile-time constant: one ISETP and one FSEL per score, no add.
    template <int kN>
    __device__ __forceinline__ void apply(float (&s)[kN / 2], int first_row, int col0) const {
        const int base = col0 + acc_col(0, threadIdx.x % 32);
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
            const int end = key_end(first_row + 8 * r) - base;
#pragma unroll
            for (int i = 0; i < kN / 2; ++i)
                if (acc_row_half(i) == r && acc_col(i, 0) >= end) s[i] = -INFINITY;
        }
    }

    // Scores of a transposed fragment: rows are keys (first_key, first_key + 8), columns are
    // query rows from query0.
    template <int kN>
    __device__ __forceinline__ void apply_transposed(float (&s)[kN / 2], int first_key, int query0) const {
        const int base = query0 + acc_col(0, threadIdx.x % 32);  // as in apply: constants per score
#pragma unroll
        for (int r = 0; r < kAccRowsPerThread; ++r) {
            const int key = first_key + 8 * r;
            const int begin = (key < seqlen_k ? query_begin(key) : seqlen_q) - base;  // past the tail: nobody
            const int end = seqlen_q - base;
#pragma unroll
            for (int i = 0; i < kN / 2; ++i) {
                const int q = acc_col(i, 0);
                if (acc_row_half(i) == r && (q < begin || q >= end)) s[i] = -INFINITY;
            }
        }
    }

  private:
    __host__ __device__ static constexpr int min_int(int a, int b) { return a < b ? a : b; }
    __host__ __device__ static constexpr int max_int(int a, int b) { return a > b ? a : b; }
};

}  // namespace hattn::sm90
