// hattn/src/kernels/fwd_rules.h -- the forward launcher's measured rules: which problems run on a
// persistent grid and which tile each head dim gets at which length (bench/RESULTS.md has the
// A/B runs behind each number). Every limit can be overridden at build time (-D) for an A/B.
#pragma once

// Problems with at most this many keys run on a persistent grid (one CTA per SM, see
// launch_fwd); the limits for causal and non-causal masks are separate measurements. Without a
// mask, d = 64 and 256 walk at every length (+0.8-2.5% at 8k-16k over one CTA per tile: the walk
// overlaps a tile's prologue with the last one's epilogue, bench/RESULTS.md run 43e), d = 128 up
// to 4096 keys (run 16: +1-2% at 4k over 2048; run 43e: -0.4 to -0.7% at 8k-16k).
#ifndef HATTN_FWD_PERSISTENT_MAX_SEQLEN_K
#define HATTN_FWD_PERSISTENT_MAX_SEQLEN_K 4096  // d = 128
#endif
#ifndef HATTN_FWD_PERSISTENT_MAX_SEQLEN_K_D64_D256
#define HATTN_FWD_PERSISTENT_MAX_SEQLEN_K_D64_D256 0x7FFFFFFF  // every length
#endif
#ifndef HATTN_FWD_PERSISTENT_CAUSAL_MAX_SEQLEN_K
#define HATTN_FWD_PERSISTENT_CAUSAL_MAX_SEQLEN_K 4096
#endif
// d = 64, causal, both lengths at most this, on the fixed walk (no workspace): 128-row tiles (2
// consumer warpgroups) and 2 K/V stages instead of 192-row tiles and 3 stages. It was +13-16% at
// 512-1k (bench/RESULTS.md run 16: a 192-row tile pads 512 to 576 and 1024 to 1152 rows, and its
// diagonal blocks mask more). Since its consumers skip the blocks none of their rows sees
// (skip_hidden_blocks below), the 192-row tile wins from 768 keys (+6% at 768 and 896, +2.4% at
// 1k) and the narrow one holds at 512 (level) and 640 (+23%) on the fixed walk (run 50e, H100).
// With a workspace, the 192-row tile on the dynamic walk against the narrow tile: 256 keys -15%
// (one and a third tiles: a third of its rows are padding), 384 +6.4%, 448 +9.5%, 512 +3.3-3.8%,
// 576 +25%, 640 -0.7 to -1.1% (runs 51e/f), so there the narrow tile keeps only up to 256
// (..._NARROW_MAX_SEQLEN_WS; 640 is the rule before run 51). 0 turns either off.
#ifndef HATTN_FWD_D64_CAUSAL_NARROW_MAX_SEQLEN
#define HATTN_FWD_D64_CAUSAL_NARROW_MAX_SEQLEN 640
#endif
#ifndef HATTN_FWD_D64_CAUSAL_NARROW_MAX_SEQLEN_WS
#define HATTN_FWD_D64_CAUSAL_NARROW_MAX_SEQLEN_WS 256
#endif

// 1: causal problems on a grid of one CTA per tile take sm90::TileScheduler's sections of heads
// (longest first across a section): +4% at d64 and d128, +8% at d256 causal 8k, level at 16k
// (bench/RESULTS.md run 40e; the FP8 forward's +3-7.5%, run 40d); 0: head by head.
#ifndef HATTN_FWD_CAUSAL_SECTIONS
#define HATTN_FWD_CAUSAL_SECTIONS 1
#endif

// 1: a causal problem given a workspace, with at least HATTN_FWD_DYNAMIC_CAUSAL_MIN_SEQLEN_K
// keys, runs on a persistent grid and takes its tiles, in the causal sections' longest-first
// order, from a counter (sm90::TileScheduler's dynamic walk): +1-6% at 2k-16k over the fixed
// walk / one CTA per tile (bench/RESULTS.md run 46c, H100). Below 1k keys a tile is a few KV
// blocks and the claim's round trip to L2 shows (-2 to -6% at 512). 0: the workspace is ignored.
#ifndef HATTN_FWD_DYNAMIC_CAUSAL
#define HATTN_FWD_DYNAMIC_CAUSAL 1
#endif
#ifndef HATTN_FWD_DYNAMIC_CAUSAL_MIN_SEQLEN_K
#define HATTN_FWD_DYNAMIC_CAUSAL_MIN_SEQLEN_K 1024
#endif

// 1: a full-mask problem given a workspace takes the dynamic walk too where its last query tile
// is partial and its empty slices skip their blocks (skip_hidden_blocks, d64 and d256: d64's
// 192-row tile pads 4096 rows to 22 tiles, the last one a single 64-row slice), up to 8k keys
// (sm90::TileScheduler::partial_tail_walk). Measured at d64 (bench/RESULTS.md run 55d, H100):
// +7.7 / +7.3 / +3.2 / +2.4 / +0.2 / -1.3% at 512 / 1k / 2k / 4k / 8k / 16k keys (16-bit; e4m3
// +7.1 / +5.9 / +1.4 / +1.7 / +0.5 / -1.5%). 0: full masks ignore the workspace.
#ifndef HATTN_FWD_DYNAMIC_FULL
#define HATTN_FWD_DYNAMIC_FULL 1
#endif

// 1: a d128 full-mask problem given a workspace, whose query tiles are all whole, runs on a
// persistent grid and cuts the tiles left over for a partly empty last pass over their KV blocks
// (a stream-K split tail, sm90::TileScheduler::plan_split_tail; partial tiles merged through the
// workspace, sm90/split_tail.cuh) when each CTA's run is at least HATTN_FWD_SPLIT_MIN_RUN blocks.
// A model put the gain at ~3% (2048 equal tiles on 132 SMs are 15.5 passes); measured with runs of
// >= 16 blocks +1.5 / +3.7 / +4.5% at 4k / 8k / 16k keys (e4m3 +1.8 / +2.5 / +2.1%; bench/RESULTS.md
// run 56d, H100); runs of 5 blocks lost 2% at 1k, and d256 lost 2-7% at 512-2k, where a piece's
// 128 KB partial tile costs more than the split saves (run 56c). 0: full masks ignore the
// workspace here.
#ifndef HATTN_FWD_SPLIT_TAIL
#define HATTN_FWD_SPLIT_TAIL 1
#endif
#ifndef HATTN_FWD_SPLIT_MIN_RUN
#define HATTN_FWD_SPLIT_MIN_RUN 16
#endif

// 1: the producer announces each tile's index on an mbarrier of its own as soon as it holds the
// tile's Q slot, before Q's TMA lands, so the consumers set the tile up (its rows, mask bounds,
// zeroed O, softmax state) while Q loads; 0: the index arrives with Q and the set-up waits for it
// (short shapes lost 1-5% to that, run 46d). Announced: +1-2% at d64 causal 512-1k, +0.5-1% at
// d128/d256 up to 4k, level (-0.2%) at d64 4k-16k (bench/RESULTS.md run 47b, H100).
#ifndef HATTN_FWD_TILE_ANNOUNCE
#define HATTN_FWD_TILE_ANNOUNCE 1
#endif

// 1: the forward launches with programmatic stream serialization (PDL, an A/B option: off until
// measured). Its CTAs may then start while the previous kernel of the stream retires and run their
// prologue (barrier set-up, tensor-map prefetch); griddepcontrol.wait holds every thread before
// its first global-memory access until that kernel's writes are visible. Every CTA lets the next
// such launch go ahead as soon as it has started: once all of ours have, none of them still needs
// an SM the next grid's CTAs could take.
#ifndef HATTN_FWD_PDL
#define HATTN_FWD_PDL 0
#endif

// 1: where O's staging buffer does not fit beside Q and the K/V rings but half of it does (d256:
// 192 KB of Q and K/V), O is stored in two column halves through a half-width buffer, so the next
// tile's Q loads during the last block and the epilogue; 0: O is staged in Q's buffer and the next
// Q waits until the store has read it out.
#ifndef HATTN_FWD_O_HALVES
#define HATTN_FWD_O_HALVES 1
#endif

namespace hattn::fwd {

constexpr bool kOHalves = HATTN_FWD_O_HALVES != 0;
constexpr bool kProgrammaticLaunch = HATTN_FWD_PDL != 0;
constexpr bool kCausalSections = HATTN_FWD_CAUSAL_SECTIONS != 0;
constexpr bool kDynamicCausal = HATTN_FWD_DYNAMIC_CAUSAL != 0;
constexpr bool kDynamicFull = HATTN_FWD_DYNAMIC_FULL != 0;
constexpr bool kTileAnnounce = HATTN_FWD_TILE_ANNOUNCE != 0;
constexpr bool kSplitTail = HATTN_FWD_SPLIT_TAIL != 0;
constexpr int kSplitMinRunBlocks = HATTN_FWD_SPLIT_MIN_RUN;
constexpr int kDynamicCausalMinSeqlenK = HATTN_FWD_DYNAMIC_CAUSAL_MIN_SEQLEN_K;
constexpr int kPersistentMaxSeqlenK = HATTN_FWD_PERSISTENT_MAX_SEQLEN_K;
constexpr int kPersistentMaxSeqlenKD64D256 = HATTN_FWD_PERSISTENT_MAX_SEQLEN_K_D64_D256;
// The non-causal limit at head dim `head_dim`.
constexpr int persistent_max_seqlen_k(int head_dim) {
    return head_dim == 128 ? kPersistentMaxSeqlenK : kPersistentMaxSeqlenKD64D256;
}
constexpr int kPersistentCausalMaxSeqlenK = HATTN_FWD_PERSISTENT_CAUSAL_MAX_SEQLEN_K;
constexpr int kD64CausalNarrowMaxSeqlen = HATTN_FWD_D64_CAUSAL_NARROW_MAX_SEQLEN;
// Where the dynamic walk starts for a tile of block_m rows: d64's 192-row causal tile takes it
// wherever it runs with a workspace, i.e. past the narrow tile's lengths there, at any seqlen_k
// (over the fixed walk +11% at 700 keys, +15% at 1000, +2% at 768, where some lengths fell 10-20%
// behind the narrow tile, run 50e; over the narrow tile +3-25% at 384-576, runs 51e/f; H100).
constexpr int kD64CausalNarrowMaxSeqlenWs = HATTN_FWD_D64_CAUSAL_NARROW_MAX_SEQLEN_WS;
constexpr int kTallTileDynamicMinSeqlenK = 1;
constexpr int dynamic_causal_min_seqlen_k(int block_m) {
    return block_m > 128 ? kTallTileDynamicMinSeqlenK : kDynamicCausalMinSeqlenK;
}
// d64's 128-row tile on short causal problems (dynamic_walk: the call has a workspace).
constexpr bool d64_narrow_tile(bool causal, int longest, bool dynamic_walk) {
    return causal && longest <= (dynamic_walk ? kD64CausalNarrowMaxSeqlenWs : kD64CausalNarrowMaxSeqlen);
}

// d = 128 takes 128-key blocks at every length. FA3's 176-key blocks for seqlen_k >= 4k (+1-6%
// with the row max ahead of the exps, RESULTS run 12) lost 4-6% at 4k and 3% at 8k causal once
// the speculative step below made the softmax short (run 49a, H100), and 128 keeps two Q slots.

// The online softmax's lazy rescale (kernels/sm90/softmax.cuh: O rescaled only when a row's max
// grows by more than 2^8): +2-4% at every head dim and length over the eager one (run 33b).
#ifndef HATTN_FWD_LAZY_RESCALE
#define HATTN_FWD_LAZY_RESCALE 1
#endif
constexpr bool lazy_rescale(int /*head_dim*/) { return HATTN_FWD_LAZY_RESCALE != 0; }

// 1: on tiles taller than their key blocks (d64's 192 x 128, d256's 128 x 64), a consumer
// warpgroup skips the blocks none of its rows sees (Mask::hidden_blocks: the top block above the
// causal diagonal, every block of a tail tile's slices past seqlen_q), waiting for and releasing
// their slots only: +4% at d64 causal 4k, +1.8-4.5% at 2k, level on full masks (bench/RESULTS.md
// run 50d, H100). Where the tile is no taller than its blocks (d128, d64's causal 128-row tile)
// only a tail tile or an offset diagonal could skip, and the code alone cost 1.5% at d64 causal
// 1k. 0: every consumer computes every block of its tile, masked.
#ifndef HATTN_FWD_SKIP_HIDDEN_BLOCKS
#define HATTN_FWD_SKIP_HIDDEN_BLOCKS 1
#endif
constexpr bool skip_hidden_blocks(int block_m, int block_n) { return HATTN_FWD_SKIP_HIDDEN_BLOCKS != 0 && block_m > block_n; }

// 1: the unmasked steady-state steps exponentiate against the rows' current (lazy) references
// with no row max ahead of the exps, and move a reference only when a row's sum says a weight grew
// past 2^12 (OnlineSoftmax::online_update_speculative; scores that overflow against it are
// recomputed from shared memory). A d64 step drops from 435 to 354 instructions and the exps no
// longer wait for the max's FMNMX tree and shuffles: +3% at d64, +3.6-6.5% at d128, level at d256
// (bench/RESULTS.md run 48a, H100). 0: online_update's row max first.
#ifndef HATTN_FWD_SPECULATIVE_MAX
#define HATTN_FWD_SPECULATIVE_MAX 1
#endif
constexpr bool kSpeculativeMax = HATTN_FWD_SPECULATIVE_MAX != 0;

// d = 64's consumer warpgroups (64 query rows each) and KV block width. Two consumers (128-row
// tiles) measured 0.83-0.95 of three at 1k-16k (run 38c).
#ifndef HATTN_FWD_D64_CONSUMERS
#define HATTN_FWD_D64_CONSUMERS 3
#endif
#ifndef HATTN_FWD_D64_BLOCK_N
#define HATTN_FWD_D64_BLOCK_N 128
#endif

// d = 256's KV block width: 64 keys measured +0.7-0.8% over 80 at 512-8k (causal 512 +1.7%, full 1k
// -1.5%; bench/RESULTS.md run 47c, H100). Narrower blocks mask less of the causal diagonal; why
// full masks gain too has not been measured.
#ifndef HATTN_FWD_D256_BLOCK_N
#define HATTN_FWD_D256_BLOCK_N 64
#endif

// d = 64's K/V ring depth and whether its warpgroups overlap their own softmax with their PV GEMM
// (run 33c): 2 stages lose 2% at <= 2k, 4 gain nothing; without the overlap d64 loses 12-22%
// (three consumer warpgroups' ping-pong alone does not hide its exps).
#ifndef HATTN_FWD_D64_STAGES
#define HATTN_FWD_D64_STAGES 3
#endif
#ifndef HATTN_FWD_D64_INTRA_WG_OVERLAP
#define HATTN_FWD_D64_INTRA_WG_OVERLAP 1
#endif
constexpr bool default_intra_wg_overlap(int head_dim) { return head_dim != 64 || HATTN_FWD_D64_INTRA_WG_OVERLAP != 0; }

}  // namespace hattn::fwd
