#!/usr/bin/env python3
"""Host time per call of hattn's Python layers, beside PyTorch SDPA, on a GPU host.

What a small problem costs on the CPU decides whether the GPU waits for Python: where a wrapper
spends more host time per call than the kernel takes on the GPU, the GPU idles between calls. For
scale, the first row per mask is the GPU time of one forward at the shape (C API calls back to
back); then, for each layer from the C API up to hattn.attention with autograd, this times N calls
issued back to back behind a queued GPU sleep (so no launch waits for the GPU) and prints the
median host microseconds per call over several repeats; then cProfile's top functions for
hattn.attention's forward and forward + backward.

  PYTHONPATH=src/python HATTN_LIB=build/libhattn.so python3 scripts/profile_python_host.py [--out DIR]
"""
from __future__ import annotations

import argparse
import cProfile
import ctypes
import io
import pstats
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

import hattn
from hattn import capi

CALLS = 100  # calls per timed repeat
REPEATS = 7
GPU_SLEEP_CYCLES = 200_000_000  # ~100 ms queued ahead: the host never waits for the GPU


def host_us(fn) -> float:
    """Median host time of one call of fn, in microseconds."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(REPEATS):
        torch.cuda._sleep(GPU_SLEEP_CYCLES)
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        samples.append((time.perf_counter() - t0) * 1e6 / CALLS)
        torch.cuda.synchronize()
    return statistics.median(samples)


def gpu_us(fn) -> float:
    """GPU time of one call of fn, in microseconds: CALLS calls back to back between two events
    (the host keeps ahead only where its time per call is below this)."""
    for _ in range(10):
        fn()
    samples = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(GPU_SLEEP_CYCLES // 10)  # the calls queue up behind it, so none waits for the host
        start.record()
        for _ in range(CALLS):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / CALLS)
    return statistics.median(samples)


def profile(fn, title: str, out) -> None:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(200):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
    print(f"\n== cProfile, 200 calls: {title} (sorted by own time)", file=out)
    print(text.getvalue(), file=out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="also write the report to DIR/python_host.txt")
    ap.add_argument("--seqlen", type=int, default=512)
    args = ap.parse_args()
    out = io.StringIO()

    def say(line=""):
        print(line)
        print(line, file=out)

    b, s, h, d = 1, args.seqlen, 16, 128
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(1)
    q, k, v, dout = (torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(4))
    lib = hattn.library()

    class Unplanned(capi.Hattn):
        """A handle that remembers no layout: every call runs every check (hattn before run 53)."""

        @property
        def _plans(self):
            return {}

    unplanned = Unplanned(lib.path)
    say(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, python {sys.version.split()[0]}; "
        f"b{b} s{s} h{h} d{d} bf16; host us per call (median of {REPEATS} x {CALLS} calls)")

    rows = []
    for causal in (False, True):
        o = torch.empty_like(q)
        lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
        pf = lib.fwd_params_torch(q, k, v, o, lse, causal=causal)
        if causal:
            ws = lib.fwd_workspace_torch(q.device, torch.cuda.current_stream().cuda_stream)
            if ws is not None:
                pf.workspace, pf.workspace_size = ws.data_ptr(), ws.numel()
        pref = ctypes.byref(pf)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream or None)
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
        qtg, ktg, vtg = (t.transpose(1, 2) for t in (qg, kg, vg))
        doutt = dout.transpose(1, 2)

        def c_api():
            assert lib.lib.hattn_fwd(pref, stream) == 0

        def fwd_torch():
            lib.fwd_torch(q, k, v, causal=causal)

        def custom_op():
            torch.ops.hattn.fwd(q, k, v, causal, 0.0)

        def attention():
            hattn.attention(q, k, v, causal=causal)

        def attention_fwd_bwd():
            out = hattn.attention(qg, kg, vg, causal=causal)
            torch.autograd.grad(out, (qg, kg, vg), dout)

        class ViaOps(torch.autograd.Function):
            """hattn.attention's autograd.Function as it runs under torch.compile: through the
            custom ops (what eager calls skip)."""

            @staticmethod
            def forward(ctx, q_, k_, v_):
                o_, lse_ = torch.ops.hattn.fwd(q_, k_, v_, causal, 0.0)
                ctx.save_for_backward(q_, k_, v_, o_, lse_)
                return o_

            @staticmethod
            def backward(ctx, do_):
                q_, k_, v_, o_, lse_ = ctx.saved_tensors
                return torch.ops.hattn.bwd(do_.contiguous(), q_, k_, v_, o_, lse_, causal, 0.0, False)

        def via_ops_fwd_bwd():
            out = ViaOps.apply(qg, kg, vg)
            torch.autograd.grad(out, (qg, kg, vg), dout)

        def fwd_torch_unplanned():
            unplanned.fwd_torch(q, k, v, causal=causal)

        def attention_fp8():
            hattn.attention_fp8(q, k, v, causal=causal)

        def attention_fp8_via_ops():
            q8, k8, v8, qd, kd, vd = torch.ops.hattn.fp8_prepass(q, k, v, None, None, "none", True, 0, 0, True)
            torch.ops.hattn.fwd_fp8(q8, k8, v8, qd, kd, vd, causal, 0.0, q.dtype, True)

        def sdpa(backend):
            def run():
                with torch.nn.attention.sdpa_kernel(backend):
                    F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            return run

        def sdpa_fwd_bwd(backend):
            def run():
                with torch.nn.attention.sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(qtg, ktg, vtg, is_causal=causal)
                torch.autograd.grad(out, (qg, kg, vg), doutt)
            return run

        cases = [("C API hattn_fwd (ctypes, params built once)", c_api),
                 ("capi.Hattn.fwd_torch, every check each call", fwd_torch_unplanned),
                 ("capi.Hattn.fwd_torch (remembered layout)", fwd_torch),
                 ("torch.ops.hattn.fwd (custom op)", custom_op),
                 ("hattn.attention (no grad)", attention),
                 ("hattn.attention_fp8 (pre-pass + FP8 forward)", attention_fp8),
                 ("the same through the custom ops", attention_fp8_via_ops),
                 ("SDPA flash (no grad)", sdpa(SDPBackend.FLASH_ATTENTION)),
                 ("SDPA cuDNN (no grad)", sdpa(SDPBackend.CUDNN_ATTENTION)),
                 ("hattn.attention fwd + autograd.grad", attention_fwd_bwd),
                 ("the same through the custom ops (as under torch.compile)", via_ops_fwd_bwd),
                 ("SDPA flash fwd + autograd.grad", sdpa_fwd_bwd(SDPBackend.FLASH_ATTENTION))]
        try:
            rows.append((causal, "GPU time per forward (C API calls back to back)", f"{gpu_us(c_api):9.1f}"))
        except Exception as e:
            rows.append((causal, "GPU time per forward", f"error: {type(e).__name__}: {e}"[:100]))
        for name, fn in cases:
            try:
                us = host_us(fn)
                rows.append((causal, name, f"{us:9.1f}"))
            except Exception as e:  # a peer that is missing on this host must not hide the rest
                rows.append((causal, name, f"error: {type(e).__name__}: {e}"[:100]))
        torch.cuda.synchronize()
        if not causal:
            profile(attention, "hattn.attention forward, full", out)
            profile(attention_fwd_bwd, "hattn.attention forward + backward, full", out)
    say(f"| mask | layer | host us / call |")
    say("|---|---|---|")
    for causal, name, us in rows:
        say(f"| {'causal' if causal else 'full'} | {name} | {us} |")
    report = out.getvalue()
    if args.out:
        import os

        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "python_host.txt"), "w") as f:
            f.write(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
