#!/usr/bin/env python3
"""How evenly each tile walk of hattn's forward spreads its work over a persistent grid.

A model, not a measurement: a tile costs its KV blocks (the causal mask's n_blocks for its query
block) plus a fixed start-up cost in blocks (--overhead), and every CTA runs at the same speed. For
each walk it prints the grid's finish time over the ideal one (total work / CTAs): 1.00 = perfect.

  fixed      sm90::TileScheduler::walk: pass p takes tile p*G + b, back and forth (head by head)
  dyn-early  the dynamic walk claiming its next tile when it starts the current one
             (HATTN_SCHED_CLAIM_AFTER_LOADS=0)
  dyn-late   the dynamic walk claiming once its producer has issued the current tile's last K/V
             block, --ahead blocks before the tile ends (the default)
  list       the ideal list schedule: the next tile goes to the CTA that frees up first (what a
             grid of one CTA per tile gets from the hardware's block dispatch)

The dynamic walks and the list schedule take the tiles in TileScheduler::tile_at's order (causal
sections of heads, longest first across each); fixed takes the head-by-head order, as
TileScheduler::grid_ctas gives a fixed walk. Shapes as scripts/compare_torch.py's grid: batch x
seqlen = --tokens, heads = --width / head_dim, the forward's tile per head dim and length
(kernels/fwd_rules.h).

With --mask full every tile sees every KV block, but a tail tile's 64-row slices past seqlen_q skip
them where the tile is taller than its blocks (kernels/fwd_rules.h skip_hidden_blocks: d64's 192 x
128, d256's 128 x 64); such a tile costs its blocks times SOLO_SHARE + (1 - SOLO_SHARE) x (its
active slices / all), and the order is head by head for every walk (no sections without a mask).
There the dynamic walk is what a workspace gives d64's partial tiles (HATTN_FWD_DYNAMIC_FULL), and
"split tail" models hattn's split tail (kernels/sm90/split_tail.cuh): the tiles of the last, partial
pass cut into one equal run of KV blocks per CTA, partial results merged (--merge blocks of time).
It counts idle SMs as lost time; measured, the split gained 1.5-4.5% at d128 4k-16k where this
predicts ~3%, and lost at d256 and short lengths (bench/RESULTS.md run 56c/d): a piece's partial
tile costs more than one block there, and a partly empty pass runs at higher clocks under the
power limit, so it is not as slow as its SM count says.

  python3 scripts/model_tile_walk.py [--sms 132] [--overhead 2] [--ahead 2] [--mask causal|full]

--bwd models the backward's causal grid instead (kernels/bwd.cuh): one CTA per (KV block of 128
keys, KV head, batch), each costing the 64-row query blocks that see its keys plus --overhead
(K / V loads, dK / dV epilogue, in query-block steps); the hardware hands CTAs to free SMs in
launch order (the list schedule). d256 runs two such grids back to back (the dV kernel, then its
programmatic dependent). The launch order is longest-first within groups of G (KV head, batch)
pairs (lpt_group(): 4 at d64 / d128; "by length" = max(4, 16k rows / seqlen) pairs, d256's
default, HATTN_BWD_LPT_GROUP=0 at every head dim; "all" = one global longest-first order), or
the plain order, KV block fastest.

  python3 scripts/model_tile_walk.py --bwd [--overhead 1.5]
"""
import argparse
import heapq
import math

SECTION_L2_BYTES = 16 << 20  # TileScheduler::kSectionL2Bytes
ELEM_BYTES = 2  # bf16 / fp16
SLICE_ROWS = 64  # one consumer warpgroup's rows of a tile
# A tail tile's cost per block with only some slices active, as a share of a whole tile's: the
# active consumers still wait on their own GEMM -> softmax chain (a fit to run 55d: one slice of
# three ~0.5, two ~0.75).
SOLO_SHARE = 0.25


def tile_shape(head_dim: int, seqlen: int) -> tuple[int, int]:
    """(block_m, block_n) of the 16-bit forward's causal tile (kernels/fwd_rules.h, fwd.cuh)."""
    if head_dim == 64:
        return (128, 128) if seqlen <= 640 else (192, 128)  # HATTN_FWD_D64_CAUSAL_NARROW_MAX_SEQLEN
    return (128, 128) if head_dim == 128 else (128, 64)


def full_tile_costs(head_dim: int, seqlen: int, tokens: int, width: int) -> list[float]:
    """Each full-mask tile's cost in KV blocks, head by head, query blocks in order."""
    block_m, block_n = (192, 128) if head_dim == 64 else tile_shape(head_dim, seqlen)
    pairs = (width // head_dim) * max(1, tokens // seqlen)
    n_blocks = math.ceil(seqlen / block_n)
    slices = block_m // SLICE_ROWS
    costs = []
    for m in range(math.ceil(seqlen / block_m)):
        active = math.ceil(min(block_m, seqlen - m * block_m) / SLICE_ROWS)
        share = SOLO_SHARE + (1 - SOLO_SHARE) * active / slices if block_m > block_n else 1.0
        costs.append(n_blocks * share)
    return costs * pairs


def tile_costs(head_dim: int, seqlen: int, tokens: int, width: int, sections: bool) -> list[int]:
    """Each tile's KV blocks, in walk order: longest first across sections of (head, batch) pairs."""
    block_m, block_n = tile_shape(head_dim, seqlen)
    pairs = (width // head_dim) * max(1, tokens // seqlen)
    kv_bytes = 2 * seqlen * head_dim * ELEM_BYTES
    section = max(1, min(pairs, SECTION_L2_BYTES // kv_bytes)) if sections else 1
    m_blocks = math.ceil(seqlen / block_m)
    costs = []
    for first in range(0, pairs, section):
        n_pairs = min(section, pairs - first)
        for m in reversed(range(m_blocks)):
            costs += [math.ceil(min(seqlen, (m + 1) * block_m) / block_n)] * n_pairs
    return costs


def fixed_walk(costs: list[float], ctas: int, overhead: float) -> float:
    finish = [0.0] * ctas
    for b in range(ctas):
        p = 0
        while (i := p * ctas + (b if p % 2 == 0 else ctas - 1 - b)) < len(costs):
            finish[b] += costs[i] + overhead
            p += 1
    return max(finish)


def dynamic_walk(costs: list[float], ctas: int, overhead: float, ahead: float | None) -> float:
    """ahead None: claim at the tile's start; else claim `ahead` blocks before it ends."""
    queue = [[costs[b]] if b < len(costs) else [] for b in range(ctas)]
    events = [(0.0, 0, b) for b in range(ctas) if queue[b]]  # (time, kind 0 start / 1 claim, cta)
    heapq.heapify(events)
    next_tile, end = ctas, 0.0
    while events:
        now, kind, b = heapq.heappop(events)
        if kind == 0:
            done = now + queue[b].pop(0) + overhead
            heapq.heappush(events, (now if ahead is None else max(now, done - ahead), 1, b))
            heapq.heappush(events, (done, 2, b))
        elif kind == 1:
            if next_tile < len(costs):
                queue[b].append(costs[next_tile])
                next_tile += 1
        else:
            end = max(end, now)
            if queue[b]:
                heapq.heappush(events, (now, 0, b))
    return end


def split_tail(costs: list[float], ctas: int, overhead: float, merge: float) -> float:
    """Whole tiles on the dynamic walk for every pass that fills the grid; the tiles left over
    (fewer than `ctas`) cut into `ctas` equal runs of KV blocks (a stream-K tail: a run may cross
    tiles), each CTA paying one start-up plus `merge` blocks to combine the partial results."""
    whole = len(costs) - len(costs) % ctas
    head = dynamic_walk(costs[:whole], ctas, overhead, 0.0) if whole else 0.0
    tail = sum(costs[whole:])
    return head + (tail / ctas + overhead + merge if tail else 0.0)


def bwd_grid_costs(head_dim: int, seqlen: int, tokens: int, width: int, group: int | None) -> list[int]:
    """The backward's causal CTAs in launch order: group None = plain (KV block fastest), else
    block 0 of every pair of a group of `group` pairs, then block 1, ..., group after group."""
    block_n, block_m = 128, 64
    pairs = (width // head_dim) * max(1, tokens // seqlen)
    n_blocks, m_blocks = math.ceil(seqlen / block_n), math.ceil(seqlen / block_m)
    steps = [m_blocks - (j * block_n) // block_m for j in range(n_blocks)]
    if group is None:
        costs = steps * pairs
    else:
        group = min(group, pairs)
        costs = [steps[j] for _ in range(pairs // group) for j in range(n_blocks) for _ in range(group)]
    return costs * (2 if head_dim == 256 else 1)


def largest_divisor(n: int, most: int) -> int:
    """The largest group size up to `most` that divides n (the launch's rule, kernels/bwd.cuh)."""
    return next(g for g in range(min(most, n), 0, -1) if n % g == 0)


def bwd_main(a) -> None:
    groups = (4, 16, 64, None)
    print(f"backward causal grid: finish / ideal on {a.sms} SMs (CTA start-up {a.overhead} query blocks)")
    print("| d | seqlen | CTAs | plain | " + " | ".join(f"groups of {g}" for g in groups[:-1]) + " | all | by length |")
    print("|---|---|---|---|" + "---|" * (len(groups) + 1))
    for d in (64, 128, 256):
        for s in (512, 1024, 2048, 4096, 8192, 16384):
            pairs = (a.width // d) * max(1, a.tokens // s)
            orders = [bwd_grid_costs(d, s, a.tokens, a.width, None)] + \
                     [bwd_grid_costs(d, s, a.tokens, a.width, g or pairs) for g in groups] + \
                     [bwd_grid_costs(d, s, a.tokens, a.width, largest_divisor(pairs, max(4, 16384 // s)))]
            ideal = (sum(orders[0]) + a.overhead * len(orders[0])) / a.sms
            row = [dynamic_walk(c, a.sms, a.overhead, 0.0) / ideal for c in orders]
            print(f"| {d} | {s} | {len(orders[0])} | " + " | ".join(f"{x:.3f}" for x in row) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sms", type=int, default=132, help="CTAs of the persistent grid (H100 / H200: 132)")
    ap.add_argument("--overhead", type=float, default=2.0, help="a tile's start-up cost, in KV blocks")
    ap.add_argument("--ahead", type=float, default=2.0, help="dyn-late: blocks between the claim and the tile's end")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--mask", choices=("causal", "full"), default="causal")
    ap.add_argument("--merge", type=float, default=1.0, help="split tail: blocks' worth of time to merge partials")
    ap.add_argument("--bwd", action="store_true", help="the backward's causal grid orders instead")
    a = ap.parse_args()
    if a.bwd:
        bwd_main(a)
        return
    full = a.mask == "full"
    print(f"finish / ideal on {a.sms} CTAs (tile start-up {a.overhead} blocks), {a.mask} masks")
    print("| d | seqlen | tiles | fixed | dyn-early | dyn-late | list |" + (" split tail |" if full else ""))
    print("|---|---|---|---|---|---|---|" + ("---|" if full else ""))
    for d in (64, 128, 256):
        for s in (512, 1024, 2048, 4096, 8192, 16384):
            if a.mask == "full":
                by_head = costs = full_tile_costs(d, s, a.tokens, a.width)
            else:
                by_head = tile_costs(d, s, a.tokens, a.width, sections=False)
                costs = tile_costs(d, s, a.tokens, a.width, sections=True)
            ideal = (sum(costs) + a.overhead * len(costs)) / a.sms
            row = [fixed_walk(by_head, a.sms, a.overhead), dynamic_walk(costs, a.sms, a.overhead, None),
                   dynamic_walk(costs, a.sms, a.overhead, a.ahead), dynamic_walk(costs, a.sms, a.overhead, 0.0)]
            if full:
                row.append(split_tail(costs, a.sms, a.overhead, a.merge))
            print(f"| {d} | {s} | {len(costs)} | " + " | ".join(f"{x / ideal:.3f}" for x in row) + " |")


if __name__ == "__main__":
    main()
