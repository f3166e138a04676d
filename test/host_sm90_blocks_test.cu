// hattn/test/host_sm90_blocks_test.cu -- CPU tests of the kernel building blocks' index arithmetic
// (src/kernels/sm90/): the mask's limits and block counts, the tile walk, the swizzled layout.
// These are the pieces every kernel shares; a wrong limit here is a wrong attention everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/bwd.cuh"
#include "kernels/fwd_fp8.cuh"
#include "kernels/fwd_rules.h"
#include "kernels/sm90/mask.cuh"
#include "kernels/sm90/scheduler.cuh"
#include "kernels/sm90/softmax.cuh"
#include "kernels/sm90/tile.cuh"

namespace {

using hattn::sm90::Mask;
using hattn::sm90::TileScheduler;

// The definition, spelled out: bottom-right causal, and the seqlen_k tail.
bool visible_by_definition(const Mask& m, int row, int key) {
    if (row < 0 || row >= m.seqlen_q || key < 0 || key >= m.seqlen_k) return false;
    return !m.causal || key <= row + m.seqlen_k - m.seqlen_q;
}

TEST(Sm90Mask, LimitsMatchTheDefinitionBothWays) {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        const Mask m{1 + static_cast<int>(rng() % 300), 1 + static_cast<int>(rng() % 300), trial % 2 == 0};
        for (int row = 0; row < m.seqlen_q; ++row) {
            for (int key = 0; key < m.seqlen_k; ++key) {
                const bool want = visible_by_definition(m, row, key);
                ASSERT_EQ(m.visible(row, key), want) << "row " << row << " key " << key;
                // The transposed form (the backward's) must agree with the forward's.
                ASSERT_EQ(row >= m.query_begin(key), want) << "query_begin, row " << row << " key " << key;
            }
        }
    }
}

TEST(Sm90Mask, BlockCountsCoverExactlyTheVisibleKeysAndFlagEveryMaskedBlock) {
    std::mt19937 rng(11);
    for (int trial = 0; trial < 300; ++trial) {
        const Mask m{1 + static_cast<int>(rng() % 1000), 1 + static_cast<int>(rng() % 1000), trial % 2 == 1};
        const int block_m = trial % 3 == 0 ? 192 : 128, block_n = trial % 4 == 0 ? 80 : 128;
        for (int m0 = 0; m0 < m.seqlen_q; m0 += block_m) {
            const int n_blocks = m.n_blocks(m0, block_m, block_n);
            const int first_masked = m.first_masked_block(m0, block_n);
            for (int b = 0; b < (m.seqlen_k + block_n - 1) / block_n; ++b) {
                bool any_visible = false, all_visible = true;
                for (int row = m0; row < m0 + block_m; ++row) {
                    for (int key = b * block_n; key < (b + 1) * block_n; ++key) {
                        const bool v = visible_by_definition(m, row, key);
                        any_visible |= v;
                        // Rows past seqlen_q are never stored: they do not need a mask.
                        if (row < m.seqlen_q) all_visible &= v;
                    }
                }
                if (any_visible) ASSERT_LT(b, n_blocks) << "block " << b << " holds a visible key but is skipped";
                if (b < n_blocks && !all_visible) ASSERT_GE(b, first_masked) << "block " << b << " needs a mask";
            }
        }
    }
}

// The backward's view from a KV block: CTA n (keys [n * kBlockN, +kBlockN)) adds dQ to query
// blocks first_query_block(n * kBlockN, 64) .. num_m_blocks - 1. For every query block (padding
// rows included), the CTAs that add to it are exactly n_blocks(m * 64, 64, kBlockN) in number,
// the first of them KV block 0: HATTN_BWD_DET_FIRST_STORE's preprocess zeroes exactly the
// accumulator blocks with none, and block 0 stores (it reaches every other block first).
TEST(Sm90Mask, BackwardAddersOfAQueryBlockAreItsBlockCountStartingAtKvBlockZero) {
    namespace bwd = hattn::bwd;
    constexpr int kRows = bwd::kQueryBlockRows;
    constexpr int kBlockN = bwd::Config<64, hattn::sm90::Bf16>::kBlockN;
    static_assert(kBlockN == bwd::Config<256, hattn::sm90::Bf16, bwd::Grads::kDkDq, 1>::kBlockN, "one kBlockN");
    std::mt19937 rng(19);
    for (int trial = 0; trial < 400; ++trial) {
        const Mask m{1 + static_cast<int>(rng() % 1500), 1 + static_cast<int>(rng() % 1500), trial % 3 != 0};
        const int num_m = (m.seqlen_q + kRows - 1) / kRows, num_n = (m.seqlen_k + kBlockN - 1) / kBlockN;
        for (int mb = 0; mb < num_m; ++mb) {
            int adders = 0;
            bool block0 = false;
            for (int n = 0; n < num_n; ++n) {
                if (mb >= m.first_query_block(n * kBlockN, kRows)) {
                    ++adders;
                    block0 |= n == 0;
                }
            }
            ASSERT_EQ(adders, m.n_blocks(mb * kRows, kRows, kBlockN))
                << "sq " << m.seqlen_q << " sk " << m.seqlen_k << " causal " << m.causal << " query block " << mb;
            ASSERT_EQ(block0, adders > 0) << "sq " << m.seqlen_q << " sk " << m.seqlen_k << " query block " << mb;
        }
    }
}

// A consumer's 64-row slice skips the tile's highest blocks that none of its rows (in the
// problem) sees: every skipped block is hidden from all of them, and the next one is not.
TEST(Sm90Mask, HiddenBlocksOfASliceAreExactlyTheLeadingOnesItsRowsCannotSee) {
    std::mt19937 rng(13);
    constexpr int kSliceRows = 64;
    for (int trial = 0; trial < 300; ++trial) {
        const Mask m{1 + static_cast<int>(rng() % 1000), 1 + static_cast<int>(rng() % 1000), trial % 4 != 0};
        const int block_m = trial % 2 == 0 ? 192 : 128, block_n = trial % 3 == 0 ? 64 : 128;
        for (int m0 = 0; m0 < m.seqlen_q; m0 += block_m) {
            const int n_blocks = m.n_blocks(m0, block_m, block_n);
            for (int row0 = 0; row0 < block_m; row0 += kSliceRows) {
                const int hidden = m.hidden_blocks(m0, row0, kSliceRows, block_n, n_blocks);
                ASSERT_GE(hidden, 0);
                ASSERT_LE(hidden, n_blocks);
                auto seen = [&](int b) {  // does some row of the slice see a key of block b?
                    for (int row = m0 + row0; row < m0 + row0 + kSliceRows; ++row)
                        for (int key = b * block_n; key < (b + 1) * block_n; ++key)
                            if (visible_by_definition(m, row, key)) return true;
                    return false;
                };
                for (int it = 0; it < hidden; ++it)
                    ASSERT_FALSE(seen(n_blocks - 1 - it)) << "m0 " << m0 << " row0 " << row0 << ": skipped block is seen";
                if (hidden < n_blocks) ASSERT_TRUE(seen(n_blocks - 1 - hidden)) << "m0 " << m0 << " row0 " << row0;
                if (!m.causal && m0 + row0 < m.seqlen_q) ASSERT_EQ(hidden, 0);  // full: a slice in the problem sees all
            }
        }
    }
}

TEST(Sm90Scheduler, EveryGridWalksEveryTileExactlyOnce) {
    for (int tiles : {1, 17, 132, 133, 1000, 4097}) {
        for (int grid : {1, 7, 132, tiles}) {
            if (grid > tiles) continue;
            std::vector<int> seen(tiles, 0);
            for (int cta = 0; cta < grid; ++cta) {
                for (int pass = 0;; ++pass) {
                    const int index = TileScheduler::walk(pass, cta, grid);
                    if (index >= tiles) break;
                    ASSERT_GE(index, 0);
                    ++seen[index];
                }
            }
            for (int i = 0; i < tiles; ++i) ASSERT_EQ(seen[i], 1) << "tile " << i << " of " << tiles << ", grid " << grid;
        }
    }
}

TEST(Sm90Scheduler, TilesCoverEveryBlockHeadAndBatchLongestFirstWhenAsked) {
    const TileScheduler s{5, 6, 3, 5 * 6 * 2, true};
    std::set<std::tuple<int, int, int>> seen;
    for (int i = 0; i < s.num_tiles; ++i) {
        const auto t = s.tile_at(i);
        EXPECT_EQ(t.kv_head, t.head / 3);
        seen.insert({t.m_block, t.head, t.batch});
        if (i % s.num_m_blocks == 0) EXPECT_EQ(t.m_block, s.num_m_blocks - 1) << "a head starts with its longest tile";
    }
    EXPECT_EQ(static_cast<int>(seen.size()), s.num_tiles);
}

TEST(Sm90Scheduler, CausalSectionsCoverEveryTileOnceLongestFirstAcrossEachSection) {
    // 7 query blocks, 5 heads x 2 batches = 10 pairs in sections of 4, 4 and 2 (the last partial).
    for (int section : {1, 3, 4, 10}) {
        const TileScheduler s{7, 5, 1, 7 * 5 * 2, true, section};
        std::set<std::tuple<int, int, int>> seen;
        int prev_section = -1, prev_m = 0;
        for (int i = 0; i < s.num_tiles; ++i) {
            const auto t = s.tile_at(i);
            const int pair = t.batch * s.heads_q + t.head;
            const int sec = pair / section;
            ASSERT_GE(sec, prev_section) << "sections run one after the other";
            if (sec == prev_section) EXPECT_LE(t.m_block, prev_m) << "longest first across the section";
            else EXPECT_EQ(t.m_block, s.num_m_blocks - 1) << "a section starts with a longest tile";
            prev_section = sec;
            prev_m = t.m_block;
            seen.insert({t.m_block, t.head, t.batch});
        }
        EXPECT_EQ(static_cast<int>(seen.size()), s.num_tiles) << "section " << section;
    }
}

TEST(Sm90Scheduler, MakeSizesCausalSectionsToTheL2ShareAndKeepsFullMasksHeadByHead) {
    TileScheduler s{};
    const int64_t four_mb = 4ll << 20;
    ASSERT_TRUE(TileScheduler::make(128, 8192, 8, 8, 2, true, four_mb, s, nullptr));
    EXPECT_EQ(s.section_heads, static_cast<int>(TileScheduler::kSectionL2Bytes / four_mb));
    ASSERT_TRUE(TileScheduler::make(128, 8192, 8, 8, 2, false, four_mb, s, nullptr));
    EXPECT_EQ(s.section_heads, 1);
    ASSERT_TRUE(TileScheduler::make(128, 8192, 8, 8, 2, true, TileScheduler::kSectionL2Bytes * 4, s, nullptr));
    EXPECT_EQ(s.section_heads, 1) << "at least one pair";
    ASSERT_TRUE(TileScheduler::make(128, 512, 2, 2, 1, true, 1024, s, nullptr));
    EXPECT_EQ(s.section_heads, 2) << "at most every pair";
    ASSERT_TRUE(TileScheduler::make(128, 8192, 8, 8, 2, true, four_mb, s, nullptr, 3));
    EXPECT_EQ(s.section_heads, 3) << "the override";
    int ctas = 0;
    ASSERT_TRUE(TileScheduler::make(128, 8192, 8, 8, 2, true, four_mb, s, nullptr));
    ASSERT_EQ(s.grid_ctas(s.num_tiles, false, &ctas), cudaSuccess);
    EXPECT_EQ(ctas, s.num_tiles);
    EXPECT_EQ(s.section_heads, 4) << "one CTA per tile keeps the sections";
    ASSERT_EQ(s.grid_ctas(s.num_tiles - 1, false, &ctas), cudaSuccess);
    EXPECT_EQ(ctas, s.num_tiles - 1);
    EXPECT_EQ(s.section_heads, 1) << "a walking grid takes the head-by-head order";
    ASSERT_TRUE(TileScheduler::make(128, 8192, 8, 8, 2, true, four_mb, s, nullptr, 3));
    ASSERT_EQ(s.grid_ctas(s.num_tiles - 1, false, &ctas), cudaSuccess);
    EXPECT_EQ(s.section_heads, 3) << "an override holds on any grid";
    int32_t counter_words[TileScheduler::kCounterWords] = {};
    ASSERT_TRUE(TileScheduler::make(128, 8192, 8, 8, 2, true, four_mb, s, nullptr));
    s.tile_counter = counter_words;  // a dynamic walk takes the tiles in order: the sections stay
    ASSERT_EQ(s.grid_ctas(s.num_tiles - 1, false, &ctas), cudaSuccess);
    EXPECT_EQ(s.section_heads, 4) << "a dynamic walk keeps the sections";
}

// Full masks take the dynamic walk only for a partial last tile whose empty slices skip, up to
// the length limit (d64's 192-row tile: 4096 = 21 1/3 tiles, 3840 = 20 whole ones).
TEST(Sm90Scheduler, FullMasksWalkDynamicallyOnlyForAPartialTailThatSkips) {
    constexpr int kMax = TileScheduler::kPartialTailMaxSeqlenK;
    EXPECT_TRUE(TileScheduler::partial_tail_walk(true, 192, 4096, 4096));
    EXPECT_TRUE(TileScheduler::partial_tail_walk(true, 192, 1, kMax));
    EXPECT_FALSE(TileScheduler::partial_tail_walk(true, 192, 3840, 3840)) << "whole tiles only";
    EXPECT_FALSE(TileScheduler::partial_tail_walk(false, 192, 4096, 4096)) << "a tile that does not skip";
    EXPECT_FALSE(TileScheduler::partial_tail_walk(true, 192, 4096, kMax + 1)) << "past the length limit";
    EXPECT_FALSE(TileScheduler::partial_tail_walk(true, 128, 4096, 4096));
}

// The split tail (TileScheduler::plan_split_tail, for_each_tail_piece): the whole passes plus the
// pieces cover every KV block of every tile exactly once; a tile cut into pieces has one merger,
// the piece with its first iterations and its run's last piece, whose partners are exactly the
// runs after it holding the tile's other pieces, each as the first piece of its run, and at most
// one writer per run (one partial slot each); runs differ by at most one block. (The kernels give
// run r to CTA gridDim.x - 1 - r, TileScheduler::tail_run: a merger's partners are CTAs launched
// before it.)
TEST(Sm90Scheduler, SplitTailCoversEveryBlockOnceWithOneMergerPerSplitTile) {
    using hattn::sm90::Tile;
    struct Shape {
        int tiles, ctas, n_blocks;
    };
    const Shape shapes[] = {{2048, 132, 128}, {1024, 132, 256}, {2048, 132, 32}, {8, 3, 8},
                            {7, 3, 5},       {300, 132, 4},    {133, 132, 40},  {1000, 144, 3}, {12, 5, 9}, {52, 7, 30}};
    for (const Shape& sh : shapes) {
        TileScheduler s{};
        std::string error;
        ASSERT_TRUE(TileScheduler::make(128, 128 * sh.tiles, 1, 1, 1, false, 0, s, &error)) << error;
        ASSERT_EQ(s.num_tiles, sh.tiles);
        const bool split = s.plan_split_tail(sh.ctas, sh.n_blocks, 4);
        const int passes = sh.tiles / sh.ctas, left = sh.tiles % sh.ctas;
        const int64_t run = (static_cast<int64_t>(left) * sh.n_blocks + sh.ctas - 1) / sh.ctas;
        ASSERT_EQ(split, left > 0 && run >= 4) << sh.tiles << " tiles on " << sh.ctas;
        if (!split) {
            EXPECT_EQ(s.walk_tiles, s.num_tiles);
            continue;
        }
        EXPECT_EQ(s.walk_tiles, passes * sh.ctas);
        std::vector<std::vector<int>> seen(sh.tiles, std::vector<int>(sh.n_blocks, 0));
        for (int i = 0; i < s.walk_tiles; ++i)
            for (int& b : seen[i]) ++b;  // the whole passes
        std::vector<int> merger_of(sh.tiles, -1), partners(sh.tiles, 0), writers_seen(sh.tiles, 0);
        std::vector<std::vector<int>> writer_ctas(sh.tiles);
        for (int cta = 0; cta < sh.ctas; ++cta) {
            std::vector<Tile> pieces;
            s.for_each_tail_piece(cta, [&](const Tile& t) { pieces.push_back(t); });
            int blocks = 0, writers = 0;
            for (size_t i = 0; i < pieces.size(); ++i) {
                const Tile& t = pieces[i];
                int index = -1;  // the tile's index, from its coordinates
                for (int k = s.walk_tiles; k < sh.tiles; ++k) {
                    const Tile w = s.tile_at(k);
                    if (w.m_block == t.m_block && w.head == t.head && w.batch == t.batch) index = k;
                }
                ASSERT_GE(index, s.walk_tiles);
                ASSERT_TRUE(t.it_begin >= 0 && t.it_begin < t.it_end && t.it_end <= sh.n_blocks);
                for (int it = t.it_begin; it < t.it_end; ++it) ++seen[index][it];
                blocks += t.it_end - t.it_begin;
                if (t.split == hattn::sm90::kSplitWriter) {
                    ++writers;
                    EXPECT_EQ(i, 0u) << "a writer opens its run";
                    EXPECT_GT(t.it_begin, 0);
                    writer_ctas[index].push_back(cta);
                } else if (t.split > 0) {
                    EXPECT_EQ(i + 1, pieces.size()) << "a merger closes its run";
                    EXPECT_EQ(t.it_begin, 0);
                    EXPECT_LT(t.it_end, sh.n_blocks);
                    EXPECT_EQ(merger_of[index], -1);
                    merger_of[index] = cta;
                    partners[index] = t.split;
                } else {
                    EXPECT_EQ(t.split, hattn::sm90::kWholeTile);
                    EXPECT_EQ(t.it_begin, 0);
                    EXPECT_EQ(t.it_end, sh.n_blocks);
                }
            }
            EXPECT_LE(writers, 1) << "one partial slot per CTA";
            EXPECT_TRUE(blocks == s.split_run || (blocks < s.split_run && cta >= s.split_units / s.split_run))
                << "equal runs but the last";
        }
        for (int k = 0; k < sh.tiles; ++k) {
            for (int it = 0; it < sh.n_blocks; ++it) ASSERT_EQ(seen[k][it], 1) << "tile " << k << " block " << it;
            if (writer_ctas[k].empty()) {
                EXPECT_EQ(merger_of[k], -1);
                continue;
            }
            ASSERT_GE(merger_of[k], 0) << "a split tile has a merger";
            ASSERT_EQ(static_cast<int>(writer_ctas[k].size()), partners[k]);
            for (int j = 0; j < partners[k]; ++j) EXPECT_EQ(writer_ctas[k][j], merger_of[k] + 1 + j);
        }
    }
}

// A consumer slice's block range (TileScheduler::slice_blocks): for whole tiles and any piece of one,
// full and causal, with and without skipping hidden blocks, the range clamped to the piece, the
// hidden blocks skipped only past its start, the masked ones counted from the tile's top.
TEST(Sm90Scheduler, SliceBlocksClampTheMaskedAndHiddenBlocksToThePiece) {
    using hattn::sm90::Tile;
    constexpr int kBlockM = 192, kBlockN = 128;
    for (bool causal : {false, true}) {
        for (int sq : {1, 100, 333, 1000}) {
            for (int sk : {1, 200, 1000}) {
                const Mask mask{sq, sk, causal};
                for (int m0 = 0; m0 < sq; m0 += kBlockM) {
                    const int n_blocks = mask.n_blocks(m0, kBlockM, kBlockN);
                    const int masked = std::max(0, n_blocks - mask.first_masked_block(m0, kBlockN));
                    for (int row0 = 0; row0 < kBlockM; row0 += 64) {
                        const int hidden = mask.hidden_blocks(m0, row0, 64, kBlockN, n_blocks);
                        for (int begin = 0; begin <= n_blocks; ++begin) {
                            for (int stop = begin; stop <= n_blocks + 1; ++stop) {
                                Tile t;
                                t.it_begin = begin;
                                t.it_end = stop == n_blocks + 1 ? INT_MAX : stop;  // INT_MAX: a whole tile
                                const int end = std::min(t.it_end, n_blocks);
                                const auto skip = TileScheduler::slice_blocks<true, kBlockN>(t, mask, m0, row0, n_blocks);
                                const auto all = TileScheduler::slice_blocks<false, kBlockN>(t, mask, m0, row0, n_blocks);
                                ASSERT_EQ(skip.end, end);
                                ASSERT_EQ(skip.n_masked, std::min(end, masked));
                                ASSERT_EQ(skip.first, std::min(end, std::max(begin, hidden)));
                                ASSERT_EQ(all.first, std::min(end, begin));
                                ASSERT_EQ(all.end, end);
                                ASSERT_EQ(all.n_masked, skip.n_masked);
                            }
                        }
                    }
                }
            }
        }
    }
}

// Which launches may split their tail: full masks off the dynamic walk, with a workspace, whose
// query tiles are all whole.
TEST(Sm90Scheduler, OnlyWholeTileFullMasksWithAWorkspaceMaySplitTheirTail) {
    int workspace = 0;
    EXPECT_TRUE(TileScheduler::may_split_tail(false, false, &workspace, 128, 1024));
    EXPECT_FALSE(TileScheduler::may_split_tail(true, false, &workspace, 128, 1024));   // causal
    EXPECT_FALSE(TileScheduler::may_split_tail(false, true, &workspace, 128, 1024));   // the dynamic walk
    EXPECT_FALSE(TileScheduler::may_split_tail(false, false, nullptr, 128, 1024));     // no workspace
    EXPECT_FALSE(TileScheduler::may_split_tail(false, false, &workspace, 128, 1000));  // a partial last tile
}

// The GPU tests' split-tail cases (fwd_test's Workspace cases on 132 SMs, fwd_fp8_test's on 3, 5
// and 140 CTAs) do split under the launchers' default rule (runs of kSplitMinRunBlocks).
TEST(Sm90Scheduler, TheGpuTestsSplitTailCasesSplitUnderTheDefaultRule) {
    struct Shape {
        int tiles, ctas, n_blocks, min_run;
    };
    const int rule = hattn::fwd::kSplitMinRunBlocks;
    const Shape shapes[] = {{24 * 8, 132, 36, rule},   // d128 b1 h24 q1024 k4500
                            {2 * 12 * 9, 132, 24, rule},  // d128 b2 h12 q1152 k3000
                            {84 * 2, 132, 64, rule},   // d128 b1 h84 q256 k8192 (stress_test's PartialGpu too)
                            {84 * 2, 132, 64, hattn::fwd_fp8::kSplitMinRunBlocks},  // ... FP8 (the same tiles)
                            {4 * 8, 3, 24, hattn::fwd_fp8::kSplitMinRunBlocks},      // FP8 b1 h4 q1024 k3000, 3 CTAs
                            {2 * 3 * 9, 5, 24, hattn::fwd_fp8::kSplitMinRunBlocks},   // FP8 b2 h3 q1152 k3000, 5 CTAs
                            {2 * 12 * 11, 140, 17, hattn::fwd_fp8::kSplitMinRunBlocks}};  // FP8 b2 h12 q1408 k2100, 140 CTAs
    for (const Shape& sh : shapes) {
        TileScheduler s{};
        std::string error;
        ASSERT_TRUE(TileScheduler::make(128, 128 * sh.tiles, 1, 1, 1, false, 0, s, &error)) << error;
        EXPECT_TRUE(s.plan_split_tail(sh.ctas, sh.n_blocks, sh.min_run)) << sh.tiles << " tiles on " << sh.ctas;
    }
}

TEST(Sm90Tile, SwizzledOffsetsAreABijectionWithSixteenByteChunksKept) {
    using Tile = hattn::sm90::SwizzledTile<hattn::sm90::Bf16, 64, 128>;
    static_assert(Tile::kAtoms == 2 && Tile::kBytes == 64 * 128 * 2, "two 64-column atoms");
    std::set<uint32_t> offsets;
    for (int row = 0; row < Tile::kRows; ++row) {
        for (int col = 0; col < Tile::kCols; ++col) {
            const uint32_t off = Tile::offset(row, col);
            ASSERT_LT(off, Tile::kBytes);
            ASSERT_TRUE(offsets.insert(off).second) << "row " << row << " col " << col;
            // 8 consecutive 16-bit elements stay one 16-byte chunk (what stmatrix/ldmatrix need).
            if (col % 8 != 0) ASSERT_EQ(off, Tile::offset(row, col - 1) + 2);
        }
    }
    // The 128B pattern: row 1's first chunk is the second 16-byte slot of its 128-byte row.
    EXPECT_EQ(Tile::offset(1, 0), 128u + 16u);
    EXPECT_EQ(Tile::offset(0, 64), Tile::kAtomBytes);
}

}  // namespace

// The backward's dQ accumulator: the fragment-order index is a bijection onto the 64 x 64 slice,
// pairs of a thread's register pairs 2j, 2j + 1 are 16 contiguous bytes (one v4 red), and the
// conversion kernel's inverse recovers (pair, thread).
TEST(Sm90BwdDqAccum, FragmentOrderIsABijectionWithItsInverse) {
    constexpr int kPairs = hattn::bwd::kQueryBlockRows / 4;  // register pairs per thread per slice
    constexpr int kThreads = hattn::sm90::kWarpgroupThreads;
    std::set<int> seen;
    for (int pair = 0; pair < kPairs; ++pair) {
        for (int tid = 0; tid < kThreads; ++tid) {
            const int index = hattn::bwd::dq_accum_index(pair, tid);
            ASSERT_EQ(index % 2, 0);
            ASSERT_TRUE(seen.insert(index).second) << "pair " << pair << " tid " << tid;
            if (pair % 2 == 0) EXPECT_EQ(hattn::bwd::dq_accum_index(pair + 1, tid), index + 2);
            if (pair % 2 == 0) EXPECT_EQ(index % 4, 0);  // 16-byte aligned for red.v4
            const hattn::bwd::DqPair back = hattn::bwd::dq_accum_pair(index / 2);
            EXPECT_EQ(back.pair, pair);
            EXPECT_EQ(back.tid, tid);
        }
    }
    EXPECT_EQ(static_cast<int>(seen.size()), kPairs * kThreads);
    EXPECT_EQ(*seen.rbegin(), 2 * (kPairs * kThreads - 1));
}

// The speculative softmax step's reference move (softmax.cuh): 2^-k brings the row's largest
// weight into [1/2, 1) exactly, and leaves weights <= 1 alone.
TEST(Sm90Softmax, SpeculativeReferenceStepBringsTheLargestWeightIntoHalfToOne) {
    using hattn::sm90::exp2_int;
    using hattn::sm90::reference_step_log2;
    EXPECT_EQ(reference_step_log2(0.25f), 0);
    EXPECT_EQ(reference_step_log2(1.f), 0);
    EXPECT_EQ(reference_step_log2(std::nextafter(1.f, 2.f)), 1);
    EXPECT_EQ(reference_step_log2(2.f), 2);
    EXPECT_EQ(reference_step_log2(4095.f), 12);
    EXPECT_EQ(reference_step_log2(0x1p100f), 101);
    EXPECT_EQ(exp2_int(-101), 0x1p-101f);
    EXPECT_EQ(exp2_int(0), 1.f);
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<float> log2_top(0.f, 100.f);
    for (int i = 0; i < 10000; ++i) {
        const float top = std::exp2(log2_top(rng));
        if (!(top > 1.f)) continue;
        const int k = reference_step_log2(top);
        const float scaled = top * exp2_int(-k);
        EXPECT_GE(scaled, 0.5f) << top;
        EXPECT_LT(scaled, 1.f) << top;
        EXPECT_EQ(scaled * exp2_int(k), top) << "not exact for " << top;  // a power of two: no rounding
    }
}
