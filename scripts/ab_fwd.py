#!/usr/bin/env python3
"""A/B several builds of hattn's forward pass against each other and cuDNN, in one process.

Each candidate is a libhattn.so (NAME=PATH), loaded side by side: ctypes opens each with its own
symbol scope, so two builds of the same library do not clash. All of them run on the same input
tensors as PyTorch SDPA's cuDNN backend, in interleaved rounds (round r times every backend on
every shape before round r+1 starts), and each backend keeps its best round: clock and power
drift then hits every backend alike, and a slow round does not decide anything.

  python3 scripts/ab_fwd.py --lib new=build/libhattn.so --lib base=/tmp/base/libhattn.so \
      [--head-dims 64,128,256] [--seqlens 512,...,16384] [--masks full,causal] [--rounds 3]

Prints one table (TFLOPS, best round; ratios against cuDNN) and writes --json if given.
Every hattn output is checked against cuDNN's (relative L2 error < 1e-2) before timing.
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
from hattn_ctypes import HattnFwdParams  # noqa: E402  (the one ctypes mirror of include/hattn.h)

REL_L2_LIMIT = 1e-2
HATTN_DTYPE_BF16 = 0


def load(path: str):
    lib = ctypes.CDLL(path)
    lib.hattn_fwd.argtypes = [ctypes.POINTER(HattnFwdParams), ctypes.c_void_p]
    lib.hattn_fwd.restype = ctypes.c_int
    lib.hattn_fwd_params_contiguous.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 7
    lib.hattn_fwd_params_contiguous.restype = HattnFwdParams
    return lib


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", action="append", required=True, help="NAME=PATH to a libhattn.so")
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--masks", default="full,causal")
    ap.add_argument("--tokens", type=int, default=16384, help="batch * seqlen")
    ap.add_argument("--width", type=int, default=2048, help="heads * head_dim")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--b2b-seqlens", default="",
                    help="also time --b2b-calls calls back to back (one event pair, no sleep: host time, launch "
                         "gaps and programmatic dependent launch count) at these seqlens, e.g. 512,1024")
    ap.add_argument("--b2b-calls", type=int, default=200)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    libs = {}
    for spec in args.lib:
        name, _, path = spec.partition("=")
        libs[name] = load(path)
    dev = torch.device("cuda")
    stream = torch.cuda.current_stream().cuda_stream
    shapes = []
    for d in map(int, args.head_dims.split(",")):
        for s in map(int, args.seqlens.split(",")):
            for mask in args.masks.split(","):
                shapes.append((d, s, mask == "causal"))

    # Inputs and outputs per shape, made once; two input sets rotate so no call finds its
    # operands in L2 from the call before.
    data = {}
    gen = torch.Generator(device=dev).manual_seed(1234)
    for d, s, causal in shapes:
        b, h = max(1, args.tokens // s), args.width // d
        sets = [[torch.randn((b, s, h, d), device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(3)]
                for _ in range(2)]
        data[(d, s, causal)] = (b, h, sets, torch.empty((b, s, h, d), device=dev, dtype=torch.bfloat16))

    def hattn_call(lib, key, i):
        b, h, sets, out = data[key]
        d, s, causal = key
        q, k, v = sets[i]
        p = lib.hattn_fwd_params_contiguous(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                                            b, h, h, s, s, d, HATTN_DTYPE_BF16)
        p.causal = int(causal)
        return p

    def cudnn_call(key, i):
        b, h, sets, out = data[key]
        q, k, v = (t.transpose(1, 2) for t in sets[i])
        return F.scaled_dot_product_attention(q, k, v, is_causal=key[2])

    def time_ms(fn) -> float:
        for i in range(3):
            fn(i % 2)
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(args.reps)]
        torch.cuda._sleep(int(20e6))  # queue every call behind a sleep: no host time inside the events
        for r, (a, b) in enumerate(ev):
            a.record()
            fn(r % 2)
            b.record()
        torch.cuda.synchronize()
        return statistics.median(a.elapsed_time(b) for a, b in ev)

    # Correctness first: each build against cuDNN on the first input set.
    bad = []
    for key in shapes:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            ref = cudnn_call(key, 0).transpose(1, 2).float()
        for name, lib in libs.items():
            p = hattn_call(lib, key, 0)
            rc = lib.hattn_fwd(ctypes.byref(p), ctypes.c_void_p(stream))
            torch.cuda.synchronize()
            out = data[key][3].float()
            err = ((out - ref).norm() / ref.norm()).item()
            if rc != 0 or not math.isfinite(err) or err > REL_L2_LIMIT:
                bad.append(f"{name} d{key[0]} s{key[1]} {'causal' if key[2] else 'full'}: status {rc}, rel L2 {err:.2e}")
    if bad:
        print("CORRECTNESS FAILURES:\n  " + "\n  ".join(bad))

    best: dict[tuple, dict[str, float]] = {key: {} for key in shapes}
    for rnd in range(args.rounds):
        for key in shapes:
            runs = {}
            for name, lib in libs.items():
                params = [hattn_call(lib, key, i) for i in range(2)]
                runs[name] = lambda i, lib=lib, params=params: lib.hattn_fwd(ctypes.byref(params[i]),
                                                                            ctypes.c_void_p(stream))
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                runs["cudnn"] = lambda i, key=key: cudnn_call(key, i)
                # Rotate the order per round, so no backend always runs first.
                names = list(runs)
                names = names[rnd % len(names):] + names[:rnd % len(names)]
                for name in names:
                    ms = time_ms(runs[name])
                    best[key][name] = min(best[key].get(name, float("inf")), ms)
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)

    names = list(libs) + ["cudnn"]
    print("| d | mask | seqlen | " + " | ".join(names) + " | " + " | ".join(f"{n}/cudnn" for n in libs) + " |")
    print("|" + "---|" * (3 + len(names) + len(libs)))
    rows, ratios = [], {n: [] for n in libs}
    for key in shapes:
        d, s, causal = key
        b, h = data[key][0], data[key][1]
        flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
        tf = {n: flops / (best[key][n] * 1e-3) / 1e12 for n in names}
        for n in libs:
            ratios[n].append(tf[n] / tf["cudnn"])
        rows.append({"d": d, "seqlen": s, "causal": causal, "tflops": tf})
        print(f"| {d} | {'causal' if causal else 'full'} | {s} | " + " | ".join(f"{tf[n]:.0f}" for n in names) +
              " | " + " | ".join(f"{tf[n] / tf['cudnn']:.3f}" for n in libs) + " |")
    for n in libs:
        geo = math.exp(sum(math.log(r) for r in ratios[n]) / len(ratios[n]))
        print(f"geomean {n}/cudnn = {geo:.3f}  (min {min(ratios[n]):.3f})")
    b2b_rows = []
    if args.json:  # written now and again below: a failure in the back-to-back part keeps the table
        args.json.write_text(json.dumps({"rows": rows, "back_to_back": b2b_rows, "failures": bad}, indent=1))
    b2b_seqlens = {int(x) for x in args.b2b_seqlens.split(",") if x}
    b2b_shapes = [key for key in shapes if key[1] in b2b_seqlens]
    if b2b_shapes:
        # Two ways: "stream", the calls issued from Python one after another (host time counts
        # whenever it exceeds the kernel's); "graph", the same calls captured once into a CUDA
        # graph and replayed (no host time: only the kernels and the gaps between them).
        def back_to_back_us(fn, graph: bool) -> float:
            for i in range(3):
                fn(i % 2, torch.cuda.current_stream().cuda_stream)
            torch.cuda.synchronize()
            g = None
            if graph:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, capture_error_mode="relaxed"):
                    cs = torch.cuda.current_stream().cuda_stream
                    for r in range(args.b2b_calls):
                        fn(r % 2, cs)
                g.replay()
                torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            cs = torch.cuda.current_stream().cuda_stream
            a.record()
            if g is not None:
                g.replay()
            else:
                for r in range(args.b2b_calls):
                    fn(r % 2, cs)
            b.record()
            torch.cuda.synchronize()
            return a.elapsed_time(b) * 1e3 / args.b2b_calls

        def hattn_b2b(lib, key):
            params = [hattn_call(lib, key, i) for i in range(2)]

            def run(i, cs):
                rc = lib.hattn_fwd(ctypes.byref(params[i]), ctypes.c_void_p(cs))
                if rc != 0:
                    raise RuntimeError(f"hattn_fwd status {rc}")
            return run

        modes = ("stream", "graph")
        b2b = {(key, m): {} for key in b2b_shapes for m in modes}
        for rnd in range(args.rounds):
            for key in b2b_shapes:
                runs = {name: hattn_b2b(lib, key) for name, lib in libs.items()}
                runs["cudnn"] = lambda i, cs, key=key: cudnn_call(key, i)
                order = list(runs)[rnd % len(runs):] + list(runs)[:rnd % len(runs)]
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    for m in modes:
                        for name in order:
                            try:
                                us = back_to_back_us(runs[name], m == "graph")
                            except Exception as e:  # noqa: BLE001 -- a failed capture must not hide the rest
                                print(f"back to back {m} {name} {key}: {e}", file=sys.stderr)
                                torch.cuda.synchronize()
                                us = float("nan")
                            seen = [x for x in (b2b[(key, m)].get(name, math.nan), us) if not math.isnan(x)]
                            b2b[(key, m)][name] = min(seen, default=math.nan)
        for m in modes:
            print(f"\nback to back ({m}), {args.b2b_calls} calls: microseconds per call (best round)")
            print("| d | mask | seqlen | " + " | ".join(names) + " | " + " | ".join(f"cudnn/{n}" for n in libs) + " |")
            print("|" + "---|" * (3 + len(names) + len(libs)))
            for key in b2b_shapes:
                us = b2b[(key, m)]
                b2b_rows.append({"mode": m, "d": key[0], "seqlen": key[1], "causal": key[2], "us": us})
                print(f"| {key[0]} | {'causal' if key[2] else 'full'} | {key[1]} | " +
                      " | ".join(f"{us[n]:.1f}" for n in names) + " | " +
                      " | ".join(f"{us['cudnn'] / us[n]:.3f}" for n in libs) + " |")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "back_to_back": b2b_rows, "failures": bad}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
