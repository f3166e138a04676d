#!/usr/bin/env python3
"""A/B several builds of hattn's forward (or, with --bwd, backward) pass against each other and
cuDNN, in one process.

Each candidate is a libhattn.so (NAME=PATH), loaded side by side: ctypes opens each with its own
symbol scope, so two builds of the same library do not clash. All of them run on the same input
tensors as PyTorch SDPA's cuDNN backend, in interleaved rounds (round r times every backend on
every shape before round r+1 starts), and each backend keeps its best round: clock and power
drift then hits every backend alike, and a slow round does not decide anything.

  python3 scripts/ab_fwd.py --lib new=build/libhattn.so --lib base=/tmp/base/libhattn.so \
      [--bwd [--deterministic]] [--head-dims 64,128,256] [--seqlens 512,...,16384] \
      [--masks full,causal] [--rounds 3] [--kernel-split]

Forward: every hattn output is checked against cuDNN's (relative L2 error < 1e-2) before timing.
Backward: O and LSE come from the first build's forward (untimed; the builds share it), then
hattn_bwd is timed beside torch.autograd.grad through cuDNN's SDPA (the forward outside the
timing, as in compare_torch.py); dq, dk and dv of every build are checked against cuDNN's first,
and with --deterministic each build also runs with HATTN_BWD_DETERMINISTIC (NAME:det), which
must repeat bit for bit. Backward FLOPs = 2.5 x the forward's (halved for causal).

Prints one table (TFLOPS, best round; ratios against cuDNN), then a short summary per build
(geomean and minimum of the ratio per head dim at seqlen >= 4k, the issue's bars), and writes
--json if given.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from hattn_ctypes import (HATTN_BWD_DETERMINISTIC, HATTN_DTYPE_BF16,  # noqa: E402  (the one ctypes mirror)
                          Hattn)

REL_L2_LIMIT = 1e-2
EXIT_WRONG = 3  # some build's output failed its check (an uncaught error exits 1)
BAR_MIN_SEQLEN = 4096  # issue 9's bars are stated for seqlen 4k-16k
BWD_FLOP_FACTOR = 2.5  # backward FLOPs per forward FLOP


def rel_l2(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


class Forward:
    """hattn_fwd against SDPA's cuDNN forward."""

    flop_factor = 1.0

    def __init__(self, args, libs, torch, F):
        self.torch, self.F, self.libs = torch, F, libs
        self.stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.data = {}

    def add_shape(self, key, b, h, sets):
        self.data[key] = (b, h, [s[:3] for s in sets], self.torch.empty_like(sets[0][0]))

    def _params(self, lib, key, i):
        b, h, sets, out = self.data[key]
        d, s, causal = key
        q, k, v = sets[i]
        p = lib.lib.hattn_fwd_params_contiguous(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                                                b, h, h, s, s, d, HATTN_DTYPE_BF16)
        p.causal = int(causal)
        # The dynamic walk's counters (zero-filled once; every call leaves them so), full masks too.
        ws = lib.fwd_workspace_torch(out.device, self.stream.value or 0)
        if ws is not None:
            p.workspace, p.workspace_size = ws.data_ptr(), ws.numel()
        return p

    def _cudnn(self, key, i):
        q, k, v = (t.transpose(1, 2) for t in self.data[key][2][i])
        return self.F.scaled_dot_product_attention(q, k, v, is_causal=key[2])

    def check(self, key) -> list[str]:
        bad = []
        ref = self._cudnn(key, 0).transpose(1, 2).float()
        for name, lib in self.libs.items():
            p = self._params(lib, key, 0)
            rc = lib.lib.hattn_fwd(ctypes.byref(p), self.stream)
            self.torch.cuda.synchronize()
            err = rel_l2(self.data[key][3], ref)
            if rc != 0 or not math.isfinite(err) or err > REL_L2_LIMIT:
                bad.append(f"{name} {label(key)}: status {rc}, rel L2 {err:.2e}")
        return bad

    def runners(self, key) -> dict:
        runs = {}
        for name, lib in self.libs.items():
            params = [self._params(lib, key, i) for i in range(2)]
            runs[name] = lambda i, lib=lib, params=params: lib.lib.hattn_fwd(ctypes.byref(params[i]), self.stream)
        runs["cudnn"] = lambda i, key=key: self._cudnn(key, i)
        return runs


class Backward:
    """hattn_bwd (and its deterministic mode) against autograd through SDPA's cuDNN backend."""

    flop_factor = BWD_FLOP_FACTOR

    def __init__(self, args, libs, torch, F):
        self.torch, self.F, self.libs, self.deterministic = torch, F, libs, args.deterministic
        # --det-libs: the builds that also run deterministic (default: all of them)
        self.det_libs = set(args.det_libs.split(",")) if args.det_libs else set(libs)
        self.stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.data = {}

    def add_shape(self, key, b, h, sets):
        # Per input set (q, k, v, dO): O and LSE from the first build's forward; one set of
        # gradients and one workspace, shared by every build (they run one at a time).
        first = next(iter(self.libs.values()))
        full = []
        for q, k, v, dout in sets:
            o, lse = first.fwd_torch(q, k, v, causal=key[2])
            full.append((q, k, v, dout, o, lse))
        grads = tuple(self.torch.empty_like(t) for t in sets[0][:3])
        workspace = first.bwd_workspace_torch(sets[0][0])
        self.data[key] = (b, h, full, grads, workspace)

    def _params(self, lib, key, i, flags):
        _, _, full, (dq, dk, dv), workspace = self.data[key]
        q, k, v, dout, o, lse = full[i]
        return lib.bwd_params_torch(q, k, v, o, lse, dout, dq, dk, dv, workspace, causal=key[2], flags=flags)

    def variants(self):
        yield from ((name, lib, 0) for name, lib in self.libs.items())
        if self.deterministic:
            yield from ((f"{name}:det", lib, HATTN_BWD_DETERMINISTIC) for name, lib in self.libs.items()
                        if name in self.det_libs)

    def _cudnn_graph(self, key, i):
        """The cuDNN forward with autograd, once per input set; the backward alone is timed."""
        q, k, v, dout = (t.transpose(1, 2) for t in self.data[key][2][i][:4])
        try:  # cuDNN on views of the [b, s, h, d] tensors, else on contiguous copies (as compare_torch.py)
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            out = self.F.scaled_dot_product_attention(*leaves, is_causal=key[2])
        except RuntimeError:
            leaves = [t.contiguous().detach().requires_grad_() for t in (q, k, v)]
            out = self.F.scaled_dot_product_attention(*leaves, is_causal=key[2])
            dout = dout.contiguous()
        return out, leaves, dout

    def check(self, key) -> list[str]:
        bad = []
        out, leaves, dout = self._cudnn_graph(key, 0)
        ref = [g.transpose(1, 2).float() for g in self.torch.autograd.grad(out, leaves, dout)]
        del out, leaves
        grads = self.data[key][3]
        for name, lib, flags in self.variants():
            p = self._params(lib, key, 0, flags)
            outputs = []
            for _ in range(2 if flags & HATTN_BWD_DETERMINISTIC else 1):
                for t in grads:
                    t.fill_(float("nan"))  # an element the kernel skips shows up
                rc = lib.lib.hattn_bwd(ctypes.byref(p), self.stream)
                self.torch.cuda.synchronize()
                outputs.append([t.clone() for t in grads])
            errs = [rel_l2(g, r) for g, r in zip(outputs[0], ref)]
            if rc != 0 or not all(math.isfinite(e) and e < REL_L2_LIMIT for e in errs):
                bad.append(f"{name} {label(key)}: status {rc}, rel L2 dq/dk/dv " + "/".join(f"{e:.2e}" for e in errs))
            if len(outputs) == 2 and not all(self.torch.equal(a.view(self.torch.int16), b.view(self.torch.int16))
                                             for a, b in zip(*outputs)):
                bad.append(f"{name} {label(key)}: deterministic mode not bit-identical over 2 runs")
        return bad

    def runners(self, key) -> dict:
        runs = {}
        for name, lib, flags in self.variants():
            params = [self._params(lib, key, i, flags) for i in range(2)]
            runs[name] = lambda i, lib=lib, params=params: lib.lib.hattn_bwd(ctypes.byref(params[i]), self.stream)
        graphs = [self._cudnn_graph(key, i) for i in range(2)]
        runs["cudnn"] = lambda i, graphs=graphs: self.torch.autograd.grad(graphs[i][0], graphs[i][1], graphs[i][2],
                                                                          retain_graph=True)
        return runs


def print_kernel_split(mode, shapes, torch, sdpa_kernel, SDPBackend) -> None:
    """The first build's GPU time per kernel kind (torch.profiler, 4 calls, the mean), as a table:
    what the pre- and post-processing passes cost beside the main kernel(s)."""
    kinds = ("preprocess", "bwd_kernel", "dq_convert", "fwd_kernel")
    try:
        from torch.profiler import ProfilerActivity, profile
        print("| kernel split (us per call) | " + " | ".join(kinds) + " | other | aux share |")
        print("|" + "---|" * (len(kinds) + 3))
        first = next(iter(mode.libs))
        for key in shapes:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                fn = mode.runners(key)[first]
            fn(0)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for i in range(4):
                    fn(i % 2)
                torch.cuda.synchronize()
            us = dict.fromkeys(kinds + ("other",), 0.0)
            for item in prof.key_averages():
                t = getattr(item, "device_time_total", None)
                t = getattr(item, "cuda_time_total", 0.0) if t is None else t
                kind = next((k for k in kinds if k in item.key), "other")
                us[kind] += t / 4
            total = sum(us.values()) or float("nan")
            aux = us["preprocess"] + us["dq_convert"]
            print(f"| {label(key)} | " + " | ".join(f"{us[k]:.0f}" for k in kinds + ("other",)) +
                  f" | {aux / total:.1%} |")
    except Exception as error:  # the split is extra information: never lose the A/B to it
        print(f"| kernel split failed: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''} |")


def label(key) -> str:
    d, s, causal = key
    return f"d{d} s{s} {'causal' if causal else 'full'}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", action="append", required=True, help="NAME=PATH to a libhattn.so")
    ap.add_argument("--bwd", action="store_true", help="time the backward pass instead of the forward")
    ap.add_argument("--deterministic", action="store_true", help="--bwd: also time HATTN_BWD_DETERMINISTIC")
    ap.add_argument("--det-libs", default="", help="--deterministic: only these builds (NAME,NAME; default all)")
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--masks", default="full,causal")
    ap.add_argument("--tokens", type=int, default=16384, help="batch * seqlen")
    ap.add_argument("--width", type=int, default=2048, help="heads * head_dim")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--burst", type=int, default=1,
                    help="calls between two events, the time divided by it (default 1: each call timed alone); > 1 "
                         "measures calls back to back, where a launch may overlap the previous kernel's tail (PDL)")
    ap.add_argument("--kernel-split", action="store_true",
                    help="after the table: the first build's GPU time per kernel (torch.profiler)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    libs = {}
    for spec in args.lib:
        name, _, path = spec.partition("=")
        libs[name] = Hattn(path)
    mode = (Backward if args.bwd else Forward)(args, libs, torch, F)
    dev = torch.device("cuda")
    shapes = []
    for d in map(int, args.head_dims.split(",")):
        for s in map(int, args.seqlens.split(",")):
            for mask in args.masks.split(","):
                shapes.append((d, s, mask == "causal"))

    # Inputs (q, k, v, dO) per shape, made once; two sets rotate so no call finds its operands
    # in L2 from the call before.
    gen = torch.Generator(device=dev).manual_seed(1234)
    for key in shapes:
        d, s, _ = key
        b, h = max(1, args.tokens // s), args.width // d
        sets = [[torch.randn((b, s, h, d), device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(4)]
                for _ in range(2)]
        mode.add_shape(key, b, h, sets)

    def time_ms(fn) -> float:
        for i in range(3):
            fn(i % 2)
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(args.reps)]
        torch.cuda._sleep(int(20e6))  # queue every call behind a sleep: no host time inside the events
        for r, (a, b) in enumerate(ev):
            a.record()
            for i in range(args.burst):
                fn((r + i) % 2)
            b.record()
        torch.cuda.synchronize()
        return statistics.median(a.elapsed_time(b) for a, b in ev) / args.burst

    # Correctness first: each build against cuDNN on the first input set.
    bad = []
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for key in shapes:
            bad += mode.check(key)
    if bad:
        print("CORRECTNESS FAILURES:\n  " + "\n  ".join(bad))

    if args.rounds == 0:  # correctness only
        print(f"{len(bad)} CORRECTNESS FAILURES" if bad else f"correctness: all {len(shapes)} shapes pass")
        return EXIT_WRONG if bad else 0

    best: dict[tuple, dict[str, float]] = {key: {} for key in shapes}
    for rnd in range(args.rounds):
        for key in shapes:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                runs = mode.runners(key)
                # Rotate the order per round, so no backend always runs first.
                names = list(runs)
                names = names[rnd % len(names):] + names[:rnd % len(names)]
                for name in names:
                    ms = time_ms(runs[name])
                    best[key][name] = min(best[key].get(name, float("inf")), ms)
                del runs
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    names = list(best[shapes[0]])
    names = [n for n in names if n != "cudnn"] + ["cudnn"]
    ours = names[:-1]
    print("| d | mask | seqlen | " + " | ".join(names) + " | " + " | ".join(f"{n}/cudnn" for n in ours) + " |")
    print("|" + "---|" * (3 + len(names) + len(ours)))
    rows, ratios = [], {n: {} for n in ours}
    for key in shapes:
        d, s, causal = key
        b, h = mode.data[key][0], mode.data[key][1]
        flops = mode.flop_factor * 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
        tf = {n: flops / (best[key][n] * 1e-3) / 1e12 for n in names}
        for n in ours:
            ratios[n][key] = tf[n] / tf["cudnn"]
        rows.append({"d": d, "seqlen": s, "causal": causal, "tflops": tf})
        print(f"| {d} | {'causal' if causal else 'full'} | {s} | " + " | ".join(f"{tf[n]:.0f}" for n in names) +
              " | " + " | ".join(f"{tf[n] / tf['cudnn']:.3f}" for n in ours) + " |")

    if args.kernel_split:
        print_kernel_split(mode, shapes, torch, sdpa_kernel, SDPBackend)

    def geomean(xs):
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")

    # The short summary, last: per build, all shapes, then per head dim at the bars' lengths.
    dims = sorted({k[0] for k in shapes})
    print("\nratio to cuDNN: geomean over all shapes | per head dim at seqlen >= 4k: geomean (min, its shape)")
    for n in ours:
        cells = [f"{n:>14}: all {geomean(list(ratios[n].values())):.3f}"]
        for d in dims:
            sel = {k: r for k, r in ratios[n].items() if k[0] == d and k[1] >= BAR_MIN_SEQLEN}
            if sel:
                worst = min(sel, key=sel.get)
                cells.append(f"d{d} {geomean(list(sel.values())):.3f} ({sel[worst]:.3f} {label(worst)[len(f'd{d} '):]})")
        print(" | ".join(cells))
    if bad:
        print(f"{len(bad)} CORRECTNESS FAILURES (listed above the table)")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "failures": bad}, indent=1))
    return EXIT_WRONG if bad else 0


if __name__ == "__main__":
    sys.exit(main())
