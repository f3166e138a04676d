#!/usr/bin/env python3
"""Compare hattn's attention with PyTorch SDPA (cuDNN and FlashAttention-2 backends), forward and backward.

All backends run in one process on the same input tensors, so clocks, power state and library
versions are shared. hattn is called through its C API (build/libhattn.so) with the Python package's
ctypes mirror (src/python/hattn/capi.py, loaded as scripts/hattn_ctypes.py, so no install is needed)
on [batch, seqlen, heads, head_dim] tensors; SDPA gets the transposed
views [batch, heads, seqlen, head_dim] of the very same memory (no copies, unless a backend rejects
those strides: then it gets contiguous copies, made outside timing).

Forward (the default, or --both): hattn, SDPA's cuDNN and FLASH (FA2) backends and, when
`flash_attn.cute` imports, FlashAttention-4, on the same inputs. Every hattn output is compared
with cuDNN's (relative L2 error < 1e-2); FA2 and FA4 are compared with cuDNN as a control. Without
cuDNN, hattn is compared with FA2, and without either with a float32 reference on a few heads.
Timing: interleaved rounds (--rounds; round r times every backend before round r+1 starts, in a
rotated order), each backend keeping its best round; a round is the median of --reps calls after
--warmup calls, CUDA events around each call, a GPU sleep queued first so the host runs ahead and
no host overhead lands inside an event pair, inputs rotated between independent sets so a call
does not find its operands in L2 from the previous one. TFLOPS = forward FLOPs / time, FLOPs =
4 * b * h * s * s * d (half for causal). The summary names every shape under its bar (issue 7's
ratios over cuDNN) and where hattn is ahead of both cuDNN and FA4.

Backward (--bwd, or --both): per shape, every backend gets the same Q, K, V and the same dO.
hattn runs hattn_fwd for O and LSE (untimed), then hattn_bwd is timed (--deterministic adds a row
with HATTN_BWD_DETERMINISTIC, checked bit-identical over two runs); SDPA (cuDNN, FLASH) and, when
`flash_attn.cute` imports, FlashAttention-4 run their forward once with autograd and only the
backward is timed (torch.autograd.grad(out, (q, k, v), dO, retain_graph=True): no grad accumulation,
no forward inside the timing). Before timing, hattn's dQ, dK, dV are compared with cuDNN's
gradients (else FA2's, else FA4's, else a float32 autograd reference on a few heads): relative L2
error < 2e-2 each; the peers are compared with the same reference as a control. Timing: interleaved
rounds (round r times every backend before round r+1 starts, in a rotated order), each round the
median of --bwd-reps calls with L2 flushed (a 2x-L2-sized memset, outside the events) before
each call and the host queued ahead behind a GPU sleep; each backend keeps its best round.
Backward FLOPs = 2.5 x forward FLOPs (half for causal, as the forward).

FP8 (--fp8): per shape, on the same bf16 Q, K, V: hattn's bf16 forward; hattn's FP8 path as two
figures, the pre-pass (hattn_fp8_prepass: e4m3 per 128-row block, with the random-sign Hadamard
unless --no-hadamard; V written as the FP8 forward's V^T unless --fp8-v-rows) and the e4m3 forward
on its output (hattn_fwd_fp8; with --fp8-v-rows its V^T kernel included);
and cuDNN's FP8 attention through cudnn-frontend's graph API (cudnn.pygraph().sdpa_fp8: e4m3 inputs
quantized per tensor, descales and scales as device tensors, e4m3 output as Hopper requires; the
heuristics' first plan; one graph per shape, built once, its build time reported). cuDNN's causal
mask is top-left aligned, hattn's bottom-right: the same here, where seqlen_q == seqlen_k. Every
output is checked against bf16 SDPA (relative L2: hattn bf16 < 1e-2, hattn e4m3 < 8e-2, cuDNN FP8,
dequantized, < 0.15, so a broken peer call is caught and not timed); then interleaved rounds as in
the backward, each round the median of --reps calls. A shape whose cuDNN graph does not build or
run is reported and the sweep goes on; where cudnn-frontend does not import, that is said in
capitals and hattn is timed alone. Shapes are visited 2k, 16k, 8k first and --budget-s stops
starting new ones (the rest are listed as not run). A last line sets the e4m3 rows against issue
10's speed bars (d256 full >= 1200 and d128 full >= 1000 TFLOPS at 8k-16k, every shape >= 1.0x
cuDNN FP8) and names the misses.

Output (into --out): compare.json, compare.csv, compare.png (forward); compare_bwd.json,
compare_bwd.csv, compare_bwd.png (backward); compare_fp8.json, compare_fp8.csv, compare_fp8.png
(FP8); the markdown tables go to stdout.

  python3 scripts/compare_torch.py --out /tmp/cmp             # the forward sweep (FA3 paper grid + ablation)
  python3 scripts/compare_torch.py --out /tmp/cmp --bwd       # the backward sweep (same grid)
  python3 scripts/compare_torch.py --out /tmp/cmp --both --deterministic   # both, one process
  python3 scripts/compare_torch.py --out /tmp/cmp --quick     # two shapes, for a smoke test
  python3 scripts/compare_torch.py --out /tmp/cmp --fp8 --cudnn-frontend-path DIR  # FP8 vs cuDNN FP8
  python3 scripts/compare_torch.py --dry-run                  # check the ctypes struct layouts only (no GPU, no torch)

FlashAttention-4 installed into a folder (pip install --target DIR ...): --fa4-path DIR puts DIR
and DIR/nvidia_cutlass_dsl/dsl_packages on the import path.
nvidia-cudnn-frontend installed into a folder (pip install --no-deps --target DIR ...):
--cudnn-frontend-path DIR puts DIR on the import path (scripts/gpu_fp8_compare.sh does all of it).
"""
from __future__ import annotations

import argparse
import csv
import ctypes
import importlib.util
import json
import math
import signal
import statistics
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# ---- include/hattn.h, mirrored by the package's hattn/capi.py (scripts/hattn_ctypes.py loads it) --
sys.path.insert(0, str(Path(__file__).resolve().parent))
from hattn_ctypes import (EXPECTED_BWD_OFFSETS, EXPECTED_BWD_SIZE, EXPECTED_OFFSETS,  # noqa: E402
                          EXPECTED_SIZE, HATTN_BWD_DETERMINISTIC, HATTN_DTYPE_BF16, HATTN_DTYPE_FP16,
                          HATTN_FP8_BLOCK_ROWS, HATTN_FP8_E4M3_MAX, HATTN_FWD_NO_INTRA_WG_OVERLAP,
                          HATTN_FWD_NO_PINGPONG, HATTN_SUCCESS, Hattn, HattnError, HattnFwdParams,
                          check_struct_layout, default_library_path, fp8_prepass_outputs)

FLAG_NAMES = {
    0: "default",
    HATTN_FWD_NO_PINGPONG: "no_pingpong",
    HATTN_FWD_NO_INTRA_WG_OVERLAP: "no_intra_wg_overlap",
    HATTN_FWD_NO_PINGPONG | HATTN_FWD_NO_INTRA_WG_OVERLAP: "no_pingpong+no_intra_wg_overlap",
}


# ---- The sweep -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    head_dim: int
    seqlen: int
    causal: bool
    batch: int
    heads: int

    @property
    def flops(self) -> float:
        full = 4.0 * self.batch * self.heads * self.seqlen * self.seqlen * self.head_dim
        return full / 2 if self.causal else full

    @property
    def bwd_flops(self) -> float:
        """Five matmuls of the forward's size against the forward's two: 2.5x."""
        return 2.5 * self.flops

    def label(self) -> str:
        return (f"d{self.head_dim} s{self.seqlen} b{self.batch} h{self.heads} "
                f"{'causal' if self.causal else 'full'}")


@dataclass
class Row:
    head_dim: int
    seqlen: int
    batch: int
    heads: int
    causal: bool
    flags: int
    variant: str
    hattn_ms: float | None = None
    hattn_tflops: float | None = None
    cudnn_ms: float | None = None
    cudnn_tflops: float | None = None
    fa2_ms: float | None = None
    fa2_tflops: float | None = None
    fa4_ms: float | None = None
    fa4_tflops: float | None = None
    hattn_over_cudnn: float | None = None
    hattn_over_fa4: float | None = None
    check_against: str = "n/a"
    max_abs_diff: float | None = None
    rel_l2: float | None = None
    check: str = "n/a"  # pass / FAIL / n/a
    fa2_rel_l2_vs_cudnn: float | None = None
    fa4_rel_l2_vs_cudnn: float | None = None
    notes: list[str] = field(default_factory=list)


REL_L2_LIMIT = 1e-2
# Exit status when a sweep stopped because the CUDA context broke (a fault in some kernel): what
# ran is written; a caller may rerun the rest without the peer that faulted.
CONTEXT_BROKEN_EXIT = 3


@dataclass
class BwdRow:
    head_dim: int
    seqlen: int
    batch: int
    heads: int
    causal: bool
    variant: str  # "default" or "deterministic" (HATTN_BWD_DETERMINISTIC)
    hattn_ms: float | None = None
    hattn_tflops: float | None = None
    cudnn_ms: float | None = None
    cudnn_tflops: float | None = None
    fa2_ms: float | None = None
    fa2_tflops: float | None = None
    fa4_ms: float | None = None
    fa4_tflops: float | None = None
    hattn_over_cudnn: float | None = None
    check_against: str = "n/a"
    rel_l2_dq: float | None = None
    rel_l2_dk: float | None = None
    rel_l2_dv: float | None = None
    check: str = "n/a"  # pass / FAIL / n/a
    repeatable: str = "n/a"  # deterministic variant: "bit-identical" / "DIFFERS"
    fa2_rel_l2_vs_ref: float | None = None  # max over dq, dk, dv: the control
    fa4_rel_l2_vs_ref: float | None = None
    notes: list[str] = field(default_factory=list)


# bf16 gradients: two correct backwards (cuDNN vs FA2) differ by a few 1e-3 in relative L2.
BWD_REL_L2_LIMIT = 2e-2
BWD_PEERS = ("cudnn", "fa2", "fa4")


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "n/a" if x is None else format(x, spec)


# ---- GPU side (imports torch lazily so --dry-run runs anywhere) -----------------------------------
def fill_tflops(row, prefixes: tuple[str, ...], flops: float) -> None:
    """row.<prefix>_tflops from row.<prefix>_ms for each backend, and hattn's ratio to cuDNN."""
    for prefix in prefixes:
        ms = getattr(row, f"{prefix}_ms")
        setattr(row, f"{prefix}_tflops", None if ms is None else flops / (ms * 1e-3) / 1e12)
    if row.hattn_tflops and row.cudnn_tflops:
        row.hattn_over_cudnn = row.hattn_tflops / row.cudnn_tflops
    if hasattr(row, "hattn_over_fa4") and row.hattn_tflops and getattr(row, "fa4_tflops", None):
        row.hattn_over_fa4 = row.hattn_tflops / row.fa4_tflops


def interleaved_best(runners: dict, rounds: int, time_one, errors: tuple, on_failure) -> dict[str, float]:
    """Times every runner once per round, in an order rotated from round to round, and returns each
    one's best (smallest) time: a clock or power excursion during one round does not decide a ratio.
    time_one(name, run) -> ms. A runner raising one of `errors` drops out: on_failure(name, error)."""
    best: dict[str, float] = {}
    failed: set[str] = set()
    names = list(runners)
    for rnd in range(rounds):
        shift = rnd % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            if name in failed:
                continue
            try:
                best[name] = min(best.get(name, float("inf")), time_one(name, runners[name]))
            except errors as error:
                failed.add(name)
                best.pop(name, None)
                on_failure(name, error)
    return best


def run_cases(cases: list[Case], rows: list, measure_case, tag: str, failed_row, skip_reason=None) -> None:
    """measure_case(case, index) for every case; one that raises becomes failed_row(case, note) and
    the sweep goes on, unless the CUDA context is broken. skip_reason(case) (optional): a note when
    the case must not start (a time budget spent), and the case becomes failed_row(case, note)."""
    import torch

    for case_index, case in enumerate(cases):
        print(f"[{tag}{case_index + 1}/{len(cases)}] {case.label()}", file=sys.stderr, flush=True)
        reason = skip_reason(case) if skip_reason else None
        if reason:
            rows.append(failed_row(case, reason))
            print(f"    skipped: {reason}", file=sys.stderr, flush=True)
            continue
        try:
            measure_case(case, case_index)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as error:  # keep going: one bad shape must not hide the others
            rows.append(failed_row(case, f"{type(error).__name__}: {str(error).splitlines()[0]}"))
            print(f"    error: {rows[-1].notes[0]}", file=sys.stderr, flush=True)
            try:
                torch.cuda.synchronize()
            except Exception:
                print("compare_torch.py: the CUDA context is broken; stopping the sweep", file=sys.stderr)
                rows[-1].notes.append("CUDA context broken: sweep stopped here")
                return
        torch.cuda.empty_cache()


def run_sweep(args, hattn: Hattn, cases: list[Case], ablation_flags: dict[Case, list[int]],
              rows: list[Row], meta: dict) -> None:
    """Measures every case, appending to `rows` as it goes (so an interrupted sweep keeps its rows)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not torch.cuda.is_available():
        raise SystemExit("compare_torch.py: no CUDA device visible to PyTorch")
    device = torch.device("cuda")
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    hattn_dtype = {"bf16": HATTN_DTYPE_BF16, "fp16": HATTN_DTYPE_FP16}[args.dtype]
    props = torch.cuda.get_device_properties(device)
    fa4_func, fa4_version = import_fa4(args.fa4_path) if not args.no_fa4 else (None, "disabled (--no-fa4)")
    if fa4_func is None:
        print(f"compare_torch.py: FA4 skipped: {fa4_version}", file=sys.stderr, flush=True)
    meta.update({
        "device": props.name, "sms": props.multi_processor_count,
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "fa4": fa4_version if fa4_func is not None else None, "fa4_note": None if fa4_func else fa4_version,
        "dtype": args.dtype, "reps": args.reps, "warmup": args.warmup, "input_sets": args.sets,
        "rounds": args.rounds,
        "timing": "best of interleaved rounds (every backend once per round, rotated order); each round the "
                  "median of CUDA-event-timed calls, inputs rotated between sets, host queued ahead",
        "rel_l2_limit": REL_L2_LIMIT,
    })
    # A sleep long enough for the host to queue every timed call behind it (cycles at ~2 GHz).
    sleep_cycles = int(args.queue_ahead_ms * 2e6)

    def elapsed_ms(run, n_sets: int) -> float:
        """Median time of run(set_index) over args.reps calls (after args.warmup untimed ones)."""
        for i in range(args.warmup):
            run(i % n_sets)
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.reps)]
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(sleep_cycles)
        for r in range(args.reps):
            starts[r].record()
            run(r % n_sets)
            ends[r].record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))

    def compare(out, ref) -> tuple[float, float]:
        diff = out.float() - ref.float()
        return diff.abs().max().item(), (diff.norm() / ref.float().norm().clamp_min(1e-30)).item()

    def fp32_reference_heads(q, k, v, causal: bool, heads: int):
        """float32 attention for batch 0 and the first `heads` heads, as [s, heads, d]."""
        outs = []
        for h in range(heads):
            qh, kh, vh = (t[0, :, h, :].float() for t in (q, k, v))
            s = (qh @ kh.T) / math.sqrt(q.shape[-1])
            if causal:
                s.masked_fill_(torch.ones_like(s, dtype=torch.bool).triu_(1), float("-inf"))
            outs.append(torch.softmax(s, dim=-1) @ vh)
        return torch.stack(outs, dim=1)

    def measure_case(case: Case, case_index: int) -> None:
        b, s, h, d = case.batch, case.seqlen, case.heads, case.head_dim
        # SDPA's is_causal is top-left aligned, hattn's causal bottom-right aligned: the same mask
        # only when seqlen_q == seqlen_k, which holds for every case here (self-attention shapes).
        seqlen_q = seqlen_k = s
        assert seqlen_q == seqlen_k, "causal masks of SDPA and hattn differ unless seqlen_q == seqlen_k"
        generator.manual_seed(args.seed + case_index)
        sets = [[torch.randn((b, s, h, d), device=device, dtype=torch_dtype, generator=generator)
                 for _ in range(3)] for _ in range(args.sets)]
        out = torch.empty((b, s, h, d), device=device, dtype=torch_dtype)

        # --- peers: each checked once here, timed below in the interleaved rounds ---
        runners: dict[str, object] = {}
        peer_out: dict[str, object] = {}
        peer_notes: list[str] = []
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
            for layout in ("views", "contiguous"):
                if layout == "views":
                    inputs = [[t.transpose(1, 2) for t in qkv] for qkv in sets]
                else:
                    inputs = [[t.transpose(1, 2).contiguous() for t in qkv] for qkv in sets]

                def sdpa(i: int, inputs=inputs, backend=backend):
                    qq, kk, vv = inputs[i]
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(qq, kk, vv, is_causal=case.causal)

                try:
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        first = sdpa(0)
                        torch.cuda.synchronize()
                    peer_out[name] = first.transpose(1, 2)  # back to [b, s, h, d]
                    runners[name] = sdpa
                    if layout == "contiguous":
                        peer_notes.append(f"{name} needed contiguous [b,h,s,d] copies")
                    break
                except (RuntimeError, torch.cuda.OutOfMemoryError) as error:
                    reason = " | ".join(str(w.message).splitlines()[0] for w in caught[:3]) or str(error).splitlines()[0]
                    if layout == "contiguous":
                        peer_notes.append(f"{name} n/a: {reason}")
            torch.cuda.synchronize()
        if fa4_func is not None:
            def fa4(i: int):
                result = fa4_func(*sets[i], causal=case.causal)
                return result[0] if isinstance(result, tuple) else result
            try:
                peer_out["fa4"] = fa4(0)  # the first call per shape compiles (1-3 s), outside timing
                torch.cuda.synchronize()
                runners["fa4"] = fa4
            except Exception as error:  # FA4 raises its own types for shapes it does not support
                peer_notes.append(f"fa4 n/a: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")

        controls = {name: compare(peer_out[name], peer_out["cudnn"])[1]
                    for name in ("fa2", "fa4") if name in peer_out and "cudnn" in peer_out}

        # --- hattn (the default schedule, then the ablation variants of this shape), checked ---
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        hattn_rows: list[tuple[Row, str]] = []
        for flags in [0, *ablation_flags.get(case, [])]:
            row = Row(d, s, b, h, case.causal, flags, FLAG_NAMES.get(flags, str(flags)),
                      fa2_rel_l2_vs_cudnn=controls.get("fa2"), fa4_rel_l2_vs_cudnn=controls.get("fa4"),
                      notes=list(peer_notes))
            params = []
            for q, k, v in sets:
                p = HattnFwdParams()
                p.q, p.k, p.v, p.o, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), None
                p.batch, p.heads_q, p.heads_kv = b, h, h
                p.seqlen_q, p.seqlen_k, p.head_dim = seqlen_q, seqlen_k, d
                p.q_batch_stride, p.q_seq_stride, p.q_head_stride = q.stride(0), q.stride(1), q.stride(2)
                p.k_batch_stride, p.k_seq_stride, p.k_head_stride = k.stride(0), k.stride(1), k.stride(2)
                p.v_batch_stride, p.v_seq_stride, p.v_head_stride = v.stride(0), v.stride(1), v.stride(2)
                p.o_batch_stride, p.o_seq_stride, p.o_head_stride = out.stride(0), out.stride(1), out.stride(2)
                p.dtype, p.softmax_scale, p.causal, p.flags = hattn_dtype, 0.0, int(case.causal), flags
                workspace = hattn.fwd_workspace_torch(out.device, stream.value or 0)
                if workspace is not None:  # the dynamic walk's counters (include/hattn.h)
                    p.workspace, p.workspace_size = workspace.data_ptr(), workspace.numel()
                params.append(p)

            def run_hattn(i: int, params=params):
                status = hattn.lib.hattn_fwd(ctypes.byref(params[i]), stream)
                if status != HATTN_SUCCESS:
                    raise RuntimeError(hattn.describe(status, params[i]))

            key = f"hattn:{flags}"
            try:
                out.fill_(float("nan"))  # poison: a tile the kernel skips shows up in the check
                run_hattn(0)
                torch.cuda.synchronize()
                if "cudnn" in peer_out or "fa2" in peer_out:
                    row.check_against = "cudnn" if "cudnn" in peer_out else "fa2"
                    row.max_abs_diff, row.rel_l2 = compare(out, peer_out[row.check_against])
                else:
                    ref_heads = min(2, h)
                    row.check_against = f"fp32 reference (batch 0, {ref_heads} heads)"
                    ref = fp32_reference_heads(sets[0][0], sets[0][1], sets[0][2], case.causal, ref_heads)
                    row.max_abs_diff, row.rel_l2 = compare(out[0, :, :ref_heads, :], ref)
                ok = math.isfinite(row.rel_l2) and row.rel_l2 < REL_L2_LIMIT and math.isfinite(row.max_abs_diff)
                row.check = "pass" if ok else "FAIL"
                runners[key] = run_hattn
            except (RuntimeError, torch.cuda.OutOfMemoryError) as error:
                row.notes.append(str(error).splitlines()[0])
                row.check = "FAIL" if row.check == "n/a" else row.check
            hattn_rows.append((row, key))
        peer_out.clear()

        # --- interleaved rounds, each backend keeping its best ---
        def timing_failed(name, error):
            for row, _ in hattn_rows:
                row.notes.append(f"{name} timing failed: {str(error).splitlines()[0]}")

        best = interleaved_best(runners, args.rounds, lambda name, run: elapsed_ms(run, args.sets),
                                (RuntimeError, torch.cuda.OutOfMemoryError), timing_failed)
        for row, key in hattn_rows:
            row.hattn_ms = best.get(key)
            row.cudnn_ms, row.fa2_ms, row.fa4_ms = best.get("cudnn"), best.get("fa2"), best.get("fa4")
            fill_tflops(row, ("hattn", "cudnn", "fa2", "fa4"), case.flops)
            rows.append(row)
            print(f"    {row.variant}: hattn {fmt(row.hattn_tflops)} cuDNN {fmt(row.cudnn_tflops)} "
                  f"FA2 {fmt(row.fa2_tflops)} FA4 {fmt(row.fa4_tflops)} TFLOPS; check {row.check} "
                  f"(rel L2 {fmt(row.rel_l2, '.2e')})" + (f"; {'; '.join(row.notes)}" if row.notes else ""),
                  file=sys.stderr, flush=True)

    generator = torch.Generator(device=device)
    run_cases(cases, rows, measure_case, "", lambda case, note: Row(
        case.head_dim, case.seqlen, case.batch, case.heads, case.causal, 0, "default", check="FAIL", notes=[note]))


# ---- Backward --------------------------------------------------------------------------------------
def import_fa4(paths: list[Path]):
    """flash_attn.cute.flash_attn_func, or (None, why not)."""
    for folder in paths:
        for extra in (folder, folder / "nvidia_cutlass_dsl" / "dsl_packages"):
            if extra.is_dir() and str(extra) not in sys.path:
                sys.path.insert(0, str(extra))
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as error:  # ImportError, or a broken install raising anything at import
        return None, f"flash_attn.cute does not import ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
    try:  # the distribution's version (its flash_attn namespace package carries none)
        from importlib import metadata
        version = metadata.version("flash-attn-4")
    except Exception:
        try:
            import flash_attn
            version = getattr(flash_attn, "__version__", "?")
        except Exception:
            version = "?"
    return flash_attn_func, version


def run_bwd_sweep(args, hattn: Hattn, cases: list[Case], rows: list[BwdRow], meta: dict) -> None:
    """Measures every case's backward, appending to `rows` as it goes."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not torch.cuda.is_available():
        raise SystemExit("compare_torch.py: no CUDA device visible to PyTorch")
    device = torch.device("cuda")
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    props = torch.cuda.get_device_properties(device)
    fa4_func, fa4_version = import_fa4(args.fa4_path) if not args.no_fa4 else (None, "disabled (--no-fa4)")
    if fa4_func is None:
        print(f"compare_torch.py: FA4 skipped: {fa4_version}", file=sys.stderr, flush=True)
    l2_bytes = getattr(props, "L2_cache_size", 0) or 60 * 2**20
    flush_buffer = torch.empty(max(2 * l2_bytes, 256 * 2**20), dtype=torch.uint8, device=device)
    variants = [("default", 0)] + ([("deterministic", HATTN_BWD_DETERMINISTIC)] if args.deterministic else [])
    meta.update({
        "direction": "backward", "device": props.name, "sms": props.multi_processor_count,
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "fa4": fa4_version if fa4_func is not None else None, "fa4_note": None if fa4_func else fa4_version,
        "dtype": args.dtype, "rounds": args.rounds, "reps": args.bwd_reps, "warmup": args.warmup,
        "l2_flush_bytes": flush_buffer.numel(),
        "timing": "best of interleaved rounds; each round the median of CUDA-event-timed backward calls, "
                  "L2 flushed before each call, host queued ahead",
        "flops": "2.5 x forward FLOPs (causal: half)", "rel_l2_limit": BWD_REL_L2_LIMIT,
        "hattn_variants": [name for name, _ in variants],
    })
    sleep_cycles = int(args.queue_ahead_ms * 2e6)

    def median_ms(run) -> float:
        """Median time of run() over args.bwd_reps calls, L2 flushed before each (outside the events)."""
        for _ in range(args.warmup):
            run()
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(args.bwd_reps)]
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(sleep_cycles)
        for start, end in events:
            flush_buffer.zero_()
            start.record()
            run()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) for start, end in events)

    def rel_l2(out, ref) -> float:
        diff = out.float() - ref.float()
        return (diff.norm() / ref.float().norm().clamp_min(1e-30)).item()

    def fp32_reference_grads(q, k, v, dout, causal: bool, heads: int):
        """float32 autograd gradients for batch 0 and the first `heads` heads, as [s, heads, d] each."""
        grads = []
        for h in range(heads):
            qh, kh, vh = (t[0, :, h, :].float().requires_grad_() for t in (q, k, v))
            s = (qh @ kh.T) / math.sqrt(q.shape[-1])
            if causal:
                s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu_(1), float("-inf"))
            out = torch.softmax(s, dim=-1) @ vh
            grads.append(torch.autograd.grad(out, (qh, kh, vh), dout[0, :, h, :].float()))
        return [torch.stack([g[i] for g in grads], dim=1) for i in range(3)]

    def measure_case(case: Case, case_index: int) -> None:
        b, s, h, d = case.batch, case.seqlen, case.heads, case.head_dim
        # SDPA's is_causal is top-left aligned, hattn's causal bottom-right aligned: the same mask
        # only when seqlen_q == seqlen_k, which holds for every case here.
        generator.manual_seed(args.seed + case_index)
        q, k, v, dout = (torch.randn((b, s, h, d), device=device, dtype=torch_dtype, generator=generator)
                         for _ in range(4))
        runners: dict[str, object] = {}
        grads: dict[str, list] = {}  # backend -> [dq, dk, dv] as [b, s, h, d]
        notes: list[str] = []

        # --- peers: forward once with autograd, then time only the backward ---
        def prepare_sdpa(name: str, backend) -> None:
            for layout in ("views", "contiguous"):
                leaves = [t.transpose(1, 2) for t in (q, k, v)]
                grad_out = dout.transpose(1, 2)
                if layout == "contiguous":
                    leaves, grad_out = [t.contiguous() for t in leaves], grad_out.contiguous()
                leaves = [t.detach().requires_grad_() for t in leaves]
                try:
                    with warnings.catch_warnings(record=True) as caught, sdpa_kernel(backend):
                        warnings.simplefilter("always")
                        out = F.scaled_dot_product_attention(*leaves, is_causal=case.causal)
                        first = torch.autograd.grad(out, leaves, grad_out, retain_graph=True)
                        torch.cuda.synchronize()
                except (RuntimeError, torch.cuda.OutOfMemoryError) as error:
                    reason = " | ".join(str(w.message).splitlines()[0] for w in caught[:3]) or str(error).splitlines()[0]
                    if layout == "contiguous":
                        notes.append(f"{name} n/a: {reason}")
                    continue
                grads[name] = [g.transpose(1, 2) for g in first]
                runners[name] = lambda out=out, leaves=leaves, grad_out=grad_out: torch.autograd.grad(
                    out, leaves, grad_out, retain_graph=True)
                if layout == "contiguous":
                    notes.append(f"{name} needed contiguous [b,h,s,d] copies")
                return

        prepare_sdpa("cudnn", SDPBackend.CUDNN_ATTENTION)
        prepare_sdpa("fa2", SDPBackend.FLASH_ATTENTION)
        if fa4_func is not None:
            try:
                leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                out = fa4_func(*leaves, causal=case.causal)
                out = out[0] if isinstance(out, tuple) else out
                grads["fa4"] = list(torch.autograd.grad(out, leaves, dout, retain_graph=True))
                torch.cuda.synchronize()
                runners["fa4"] = lambda out=out, leaves=leaves: torch.autograd.grad(out, leaves, dout, retain_graph=True)
            except Exception as error:  # FA4 raises its own types for unsupported shapes
                notes.append(f"fa4 n/a: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")

        ref_name = next((name for name in BWD_PEERS if name in grads), None)
        if ref_name is not None:
            reference, check_against = grads[ref_name], ref_name
            compare_slice = (slice(None),) * 4
        else:
            ref_heads = min(2, h)
            reference = fp32_reference_grads(q, k, v, dout, case.causal, ref_heads)
            check_against = f"fp32 reference (batch 0, {ref_heads} heads)"
            compare_slice = (0, slice(None), slice(0, ref_heads), slice(None))
        control = {name: max(rel_l2(g, r) for g, r in zip(grads[name], reference))
                   for name in grads if name != ref_name}

        # --- hattn: O and LSE from hattn_fwd (untimed), then the backward variants ---
        hattn_rows: list[BwdRow] = []
        dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
        try:
            o, lse = hattn.fwd_torch(q, k, v, causal=case.causal)
            workspace = hattn.bwd_workspace_torch(q)
        except HattnError as error:
            o = lse = workspace = None
            notes.append(f"hattn: {str(error).splitlines()[0]}")
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        for variant, flags in variants:
            row = BwdRow(d, s, b, h, case.causal, variant, check_against=check_against,
                         fa2_rel_l2_vs_ref=control.get("fa2"), fa4_rel_l2_vs_ref=control.get("fa4"), notes=list(notes))
            hattn_rows.append(row)
            if o is None:
                row.check = "FAIL"
                continue
            params = hattn.bwd_params_torch(q, k, v, o, lse, dout, dq, dk, dv, workspace, causal=case.causal,
                                            flags=flags)

            def run_hattn(params=params):
                status = hattn.lib.hattn_bwd(ctypes.byref(params), stream)
                if status != HATTN_SUCCESS:
                    raise HattnError(hattn.describe_bwd(status, params), status)

            try:
                for t in (dq, dk, dv):
                    t.fill_(float("nan"))  # poison: an element the kernel skips shows up in the check
                run_hattn()
                torch.cuda.synchronize()
                errors = [rel_l2(got[compare_slice], ref) for got, ref in zip((dq, dk, dv), reference)]
                row.rel_l2_dq, row.rel_l2_dk, row.rel_l2_dv = errors
                ok = all(math.isfinite(e) and e < BWD_REL_L2_LIMIT for e in errors)
                row.check = "pass" if ok else "FAIL"
                if flags & HATTN_BWD_DETERMINISTIC:
                    first = [t.clone() for t in (dq, dk, dv)]
                    run_hattn()
                    torch.cuda.synchronize()
                    same = all(torch.equal(a.view(torch.int16), b_.view(torch.int16))
                               for a, b_ in zip(first, (dq, dk, dv)))
                    row.repeatable = "bit-identical" if same else "DIFFERS"
                    if not same:
                        row.check = "FAIL"
                    del first
                runners[f"hattn:{variant}"] = run_hattn
            except (HattnError, RuntimeError, torch.cuda.OutOfMemoryError) as error:
                row.notes.append(str(error).splitlines()[0])
                row.check = "FAIL" if row.check == "n/a" else row.check

        # --- interleaved rounds, each backend keeping its best ---
        def timing_failed(name, error):
            for row in hattn_rows:
                row.notes.append(f"{name} timing failed: {str(error).splitlines()[0]}")

        best = interleaved_best(runners, args.rounds, lambda name, run: median_ms(run),
                                (HattnError, RuntimeError, torch.cuda.OutOfMemoryError), timing_failed)
        for row in hattn_rows:
            row.hattn_ms = best.get(f"hattn:{row.variant}")
            row.cudnn_ms, row.fa2_ms, row.fa4_ms = best.get("cudnn"), best.get("fa2"), best.get("fa4")
            fill_tflops(row, ("hattn", "cudnn", "fa2", "fa4"), case.bwd_flops)
            rows.append(row)
            errs = "/".join(fmt(e, ".1e") for e in (row.rel_l2_dq, row.rel_l2_dk, row.rel_l2_dv))
            print(f"    {row.variant}: hattn {fmt(row.hattn_tflops)} cuDNN {fmt(row.cudnn_tflops)} "
                  f"FA2 {fmt(row.fa2_tflops)} FA4 {fmt(row.fa4_tflops)} TFLOPS; check {row.check} "
                  f"(rel L2 dq/dk/dv {errs} vs {row.check_against})"
                  + (f"; {'; '.join(row.notes)}" if row.notes else ""), file=sys.stderr, flush=True)

    generator = torch.Generator(device=device)
    run_cases(cases, rows, measure_case, "bwd ", lambda case, note: BwdRow(
        case.head_dim, case.seqlen, case.batch, case.heads, case.causal, "default", check="FAIL", notes=[note]))


# ---- FP8: hattn's e4m3 forward beside cuDNN's FP8 attention (cudnn-frontend's graph API) ----------
@dataclass
class Fp8Row:
    head_dim: int
    seqlen: int
    batch: int
    heads: int
    causal: bool
    hattn_bf16_ms: float | None = None
    hattn_bf16_tflops: float | None = None
    hattn_e4m3_ms: float | None = None  # hattn_fwd_fp8 on inputs already in e4m3 (its V^T kernel included)
    hattn_e4m3_tflops: float | None = None
    # --fp8-fixed-walk: the same call without the schedule workspace (the fixed tile walk)
    hattn_e4m3_fixed_ms: float | None = None
    hattn_e4m3_fixed_tflops: float | None = None
    prepass_ms: float | None = None  # hattn_fp8_prepass of q, k, v (bf16 -> e4m3 + block descales), alone
    prepass_gbps: float | None = None  # bytes read + written by the pre-pass / its time
    hattn_e4m3_e2e_tflops: float | None = None  # FLOPs / (pre-pass + FP8 forward)
    cudnn_fp8_ms: float | None = None
    cudnn_fp8_tflops: float | None = None
    e4m3_over_cudnn_fp8: float | None = None
    e4m3_over_bf16: float | None = None
    rel_l2_bf16: float | None = None  # hattn bf16 O vs bf16 SDPA
    rel_l2_e4m3: float | None = None  # hattn e4m3 O vs bf16 SDPA
    rel_l2_cudnn_fp8: float | None = None  # cuDNN FP8 O, dequantized, vs bf16 SDPA
    rel_l2_e4m3_vs_cudnn_fp8: float | None = None
    check: str = "n/a"  # hattn's outputs vs SDPA: pass / FAIL / n/a
    peer_check: str = "n/a"  # cuDNN FP8's output vs SDPA (a broken peer call shows here): pass / FAIL / n/a
    cudnn_build_s: float | None = None  # graph build (validate .. build_plans) of this shape
    cudnn_plan: str = ""
    cudnn_host_us: float | None = None  # host time per cuDNN execute() call (Python graph API)
    notes: list[str] = field(default_factory=list)


# hattn bf16 against bf16 SDPA: two correct bf16 attentions differ by ~1e-3.
FP8_BF16_REL_L2_LIMIT = 1e-2
# hattn e4m3 against bf16 SDPA: every operand of both GEMMs rounded to e4m3 (test/python/test_gpu.py's
# FP8_MAX_REL_L2).
FP8_REL_L2_LIMIT = 8e-2
# cuDNN FP8 against bf16 SDPA: per-tensor e4m3 inputs and, on Hopper, an e4m3 output (3 mantissa
# bits: ~2.5% RMS rounding on its own). A broken call (wrong layout, scales, mask) gives ~1 or NaN.
CUDNN_FP8_REL_L2_LIMIT = 0.15
# cuDNN's O is e4m3: scale_o maps the bf16 reference's amax a little under the e4m3 maximum, so a
# slightly larger FP8 output does not saturate.
O_SCALE_HEADROOM = 0.9
E4M3_NAN_BYTE = 0x7F  # float8_e4m3fn's NaN (S.1111.111): poisons an output before its check
# Sequence lengths in the order the FP8 sweep visits them, so a sweep cut short by its time budget
# has the columns that matter most (long sequences, where FP8 pays; 2k for the short end) first.
FP8_SEQLEN_PRIORITY = (2048, 16384, 8192, 4096, 1024, 512)


def import_cudnn_frontend(paths: list[Path]):
    """(the cudnn module, "cudnn-frontend X, cuDNN Y") or (None, why not)."""
    for folder in paths:
        if folder.is_dir() and str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    try:
        import cudnn
    except Exception as error:  # ImportError, or a broken install raising anything at import
        return None, f"cudnn-frontend does not import ({type(error).__name__}: {first_line(error)})"
    try:
        backend = cudnn.backend_version_string()
    except Exception as error:
        return None, f"cudnn-frontend imports but has no cuDNN library ({type(error).__name__}: {first_line(error)})"
    if not hasattr(getattr(cudnn, "pygraph", None), "sdpa_fp8"):
        return None, "this cudnn-frontend has no pygraph.sdpa_fp8"
    return cudnn, f"cudnn-frontend {getattr(cudnn, '__version__', '?')}, cuDNN {backend}"


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


class CudnnFp8Attention:
    """cuDNN's FP8 attention through cudnn-frontend's graph API (cudnn.pygraph().sdpa_fp8).

    Inputs are e4m3 [b, s, h, d] tensors, declared to cuDNN as [b, h, s, d] with their strides, with
    per-tensor fp32 descales as device tensors; the output is e4m3 (on Hopper cuDNN's FP8 SDPA writes
    FP8 only) with its scale an input. cuDNN's causal mask is top-left aligned (the same as hattn's
    bottom-right one only when seqlen_q == seqlen_k). One graph per shape, built on first use and
    kept (builds take seconds); only the heuristics' first plan (mode A), since cuDNN's other FP8
    plans have been seen to fault on Hopper. The graph variants are tried in order until one builds:
    "inference" (no softmax stats; Amax_S left virtual, as the frontend deprecates it; causal as a
    top-left band with right bound 0), then "classic" (stats, Amax_S an output, use_causal_mask)."""

    VARIANTS = ("inference", "classic")
    SCALARS = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")

    def __init__(self, cudnn, torch, device):
        self.cudnn, self.torch, self.device = cudnn, torch, device
        stream = torch.cuda.current_stream(device).cuda_stream  # PyTorch's context first
        self.handle = cudnn.create_handle()
        cudnn.set_stream(self.handle, stream)
        self.graphs: dict = {}  # (b, h, s, d, causal) -> entry dict, or the exception its build raised
        self.build_seconds: list[float] = []

    def entry(self, b: int, h: int, s: int, d: int, causal: bool) -> dict:
        """The built graph of this shape (built now if new); raises the build's error, once per shape."""
        key = (b, h, s, d, causal)
        if key not in self.graphs:
            start = time.perf_counter()
            errors = []
            for variant in self.VARIANTS:
                try:
                    self.graphs[key] = self._build(b, h, s, d, causal, variant)
                    break
                except Exception as error:  # cudnnGraphNotSupportedError, RuntimeError, ValueError, ...
                    errors.append(f"{variant}: {type(error).__name__}: {first_line(error)}")
            else:
                self.graphs[key] = RuntimeError("graph not built (" + "; ".join(errors) + ")")
            seconds = time.perf_counter() - start
            self.build_seconds.append(seconds)
            if isinstance(self.graphs[key], dict):
                self.graphs[key].update(build_s=seconds, declined=errors)
        found = self.graphs[key]
        if isinstance(found, Exception):
            raise found
        return found

    def _build(self, b: int, h: int, s: int, d: int, causal: bool, variant: str) -> dict:
        cudnn, torch = self.cudnn, self.torch
        fp8, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
        one = (1, 1, 1, 1)
        g = cudnn.pygraph(io_data_type=fp8, intermediate_data_type=f32, compute_data_type=f32, handle=self.handle)
        bshd = (s * h * d, d, h * d, 1)  # [b, s, h, d] memory seen as [b, h, s, d]
        q, k, v = (g.tensor(name=name, dim=(b, h, s, d), stride=bshd, data_type=fp8) for name in ("q", "k", "v"))
        scalars = {name: g.tensor(name=name, dim=one, stride=one, data_type=f32) for name in self.SCALARS}
        options: dict = {"attn_scale": 1.0 / math.sqrt(d), "name": "sdpa_fp8"}
        if variant == "inference":
            options["generate_stats"] = False
            if causal:
                options.update(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, right_bound=0)
        else:
            options.update(generate_stats=True, use_causal_mask=causal)
        o, stats, amax_s, amax_o = g.sdpa_fp8(q, k, v, *(scalars[name] for name in self.SCALARS), **options)
        o.set_output(True).set_dim((b, h, s, d)).set_stride(bshd).set_data_type(fp8)
        amax_o.set_output(True).set_dim(one).set_stride(one).set_data_type(f32)
        tensors = {"q": q, "k": k, "v": v, "o": o, "amax_o": amax_o, **scalars}
        extras = {"amax_o": torch.empty(one, dtype=torch.float32, device=self.device)}
        if variant == "classic":
            amax_s.set_output(True).set_dim(one).set_stride(one).set_data_type(f32)
            stats.set_output(True).set_dim((b, h, s, 1)).set_stride((h * s, s, 1, 1)).set_data_type(f32)
            tensors.update(amax_s=amax_s, stats=stats)
            extras["amax_s"] = torch.empty(one, dtype=torch.float32, device=self.device)
            extras["stats"] = torch.empty((b, h, s, 1), dtype=torch.float32, device=self.device)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A])
        g.select_plan(0)  # strict: the first plan or nothing (never a later one quietly)
        g.check_support()
        g.build_plans()
        workspace = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device=self.device)
        try:
            plan = g.get_plan_name_at_index(0)
        except Exception:
            plan = "?"
        return {"graph": g, "tensors": tensors, "extras": extras, "workspace": workspace, "variant": variant,
                "plan": plan}

    def pack(self, entry: dict, **data) -> dict:
        """The variant pack: graph tensor -> torch tensor (q, k, v, o and the six scalars by name)."""
        named = {**entry["extras"], **data}
        return {tensor: named[name] for name, tensor in entry["tensors"].items()}

    def execute(self, entry: dict, pack: dict) -> None:
        entry["graph"].execute(pack, entry["workspace"], handle=self.handle)


def fp8_order(cases: list[Case]) -> list[Case]:
    """The FP8 sweep's visiting order: FP8_SEQLEN_PRIORITY first, then head dim, then mask."""
    rank = {s: i for i, s in enumerate(FP8_SEQLEN_PRIORITY)}
    return sorted(cases, key=lambda c: (rank.get(c.seqlen, len(rank)), c.seqlen, c.head_dim, c.causal))


def fp8_table_order(rows: list[Fp8Row]) -> list[Fp8Row]:
    return sorted(rows, key=lambda r: (r.head_dim, r.causal, r.seqlen))


def run_fp8_sweep(args, hattn: Hattn, cases: list[Case], rows: list[Fp8Row], meta: dict) -> None:
    """Per shape, on the same bf16 inputs: hattn bf16 forward, hattn's pre-pass and e4m3 forward, and
    cuDNN's FP8 attention; checked against bf16 SDPA, then timed in interleaved rounds."""
    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        raise SystemExit("compare_torch.py: no CUDA device visible to PyTorch")
    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    if not hattn.has_fp8:
        print(f"compare_torch.py: WARNING: {hattn.path} has no FP8 entry points: the hattn e4m3 rows are n/a",
              file=sys.stderr, flush=True)
    peer, peer_status = None, "disabled (--no-cudnn-fp8)"
    if not args.no_cudnn_fp8:
        cudnn, peer_status = import_cudnn_frontend(args.cudnn_frontend_path)
        if cudnn is not None:
            try:
                peer = CudnnFp8Attention(cudnn, torch, device)
            except Exception as error:
                peer_status = f"cuDNN handle not created ({type(error).__name__}: {first_line(error)})"
    if peer is None:
        banner = "=" * 100
        print(f"{banner}\nCUDNN FP8 PEER SKIPPED: {peer_status}\nonly hattn is timed\n{banner}", file=sys.stderr, flush=True)
    meta.update({
        "direction": "fp8 forward", "device": props.name, "sms": props.multi_processor_count,
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cudnn_fp8_peer": peer_status if peer is not None else None,
        "cudnn_fp8_peer_skipped": None if peer is not None else peer_status,
        "hadamard": args.fp8_hadamard, "v_layout": "rows" if args.fp8_v_rows else "transposed",
        "v_descale": "per head" if args.fp8_v_per_head else "per 128-row block",
        "rounds": args.rounds, "reps": args.reps, "warmup": args.warmup,
        "input_sets": args.sets, "budget_s": args.budget_s,
        "timing": "best of interleaved rounds; each round the median of CUDA-event-timed calls, inputs rotated "
                  "between sets, host queued ahead",
        "hattn_e4m3": "hattn_fwd_fp8 alone on pre-quantized inputs (V^T from the pre-pass, or with --fp8-v-rows "
                      "its own V^T kernel included); the pre-pass timed separately",
        "cudnn_fp8": "cudnn.pygraph().sdpa_fp8, e4m3 in (per-tensor scales) and out, heuristics mode A first plan",
        "reference": "bf16 SDPA (PyTorch's backend choice) of the same bf16 inputs",
        "limits": {"hattn_bf16": FP8_BF16_REL_L2_LIMIT, "hattn_e4m3": FP8_REL_L2_LIMIT,
                   "cudnn_fp8": CUDNN_FP8_REL_L2_LIMIT},
    })
    sleep_cycles = int(args.queue_ahead_ms * 2e6)
    e4m3 = torch.float8_e4m3fn

    def timed(run, n_sets: int) -> tuple[float, float]:
        """(median ms of args.reps calls after args.warmup, host microseconds per call to enqueue)."""
        for i in range(args.warmup):
            run(i % n_sets)
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(args.reps)]
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(sleep_cycles)
        host_start = time.perf_counter()
        for r, (start, end) in enumerate(events):
            start.record()
            run(r % n_sets)
            end.record()
        host_us = (time.perf_counter() - host_start) * 1e6 / args.reps
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) for start, end in events), host_us

    def rel_l2(out, ref) -> float:
        diff = out.float() - ref.float()
        return (diff.norm() / ref.float().norm().clamp_min(1e-30)).item()

    def per_tensor_e4m3(x):
        """x in e4m3 with one scale for the whole tensor (amax -> the e4m3 maximum): (x8, descale)."""
        amax = x.abs().amax().float().clamp_min(1e-30)
        x8 = (x.float() * (HATTN_FP8_E4M3_MAX / amax)).clamp_(-HATTN_FP8_E4M3_MAX, HATTN_FP8_E4M3_MAX).to(e4m3)
        return x8, (amax / HATTN_FP8_E4M3_MAX).reshape(1, 1, 1, 1)

    def launcher(entry_point, params: list, describe: str):
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

        def run(i: int) -> None:
            status = entry_point(ctypes.byref(params[i]), stream)
            if status != HATTN_SUCCESS:
                raise HattnError(f"{describe}: status {status}: {hattn.status_string(status)}", status)
        return run

    sweep_start = time.monotonic()
    longest_case_s = [0.0]

    def skip_reason(case: Case) -> str | None:
        if args.budget_s <= 0:
            return None
        left = args.budget_s - (time.monotonic() - sweep_start)
        if left < 1.2 * longest_case_s[0] + 1.0:
            return f"not run: the --budget-s {args.budget_s:.0f} s was spent ({left:.0f} s left)"
        return None

    def measure_case(case: Case, case_index: int) -> None:
        case_start = time.monotonic()
        b, s, h, d = case.batch, case.seqlen, case.heads, case.head_dim
        # cuDNN's causal mask is top-left aligned, hattn's bottom-right: the same only when
        # seqlen_q == seqlen_k, which holds for every shape here (self-attention).
        seqlen_q = seqlen_k = s
        assert seqlen_q == seqlen_k, "causal masks of cuDNN and hattn differ unless seqlen_q == seqlen_k"
        row = Fp8Row(d, s, b, h, case.causal)
        generator.manual_seed(args.seed + case_index)
        sets = [[torch.randn((b, s, h, d), device=device, dtype=torch.bfloat16, generator=generator)
                 for _ in range(3)] for _ in range(args.sets)]
        runners: dict = {}
        ref = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in sets[0]),
                                             is_causal=case.causal).transpose(1, 2)

        # --- hattn bf16 ---
        out_bf16 = torch.empty_like(sets[0][0])
        # The dynamic walk's counters (include/hattn.h), for both forwards on this stream.
        ws = hattn.fwd_workspace_torch(device, torch.cuda.current_stream().cuda_stream)
        try:
            params = [hattn.fwd_params_torch(q, k, v, out_bf16, causal=case.causal, workspace=ws) for q, k, v in sets]
            run_bf16 = launcher(hattn.lib.hattn_fwd, params, "hattn_fwd")
            out_bf16.fill_(float("nan"))  # poison: a tile the kernel skips shows up in the check
            run_bf16(0)
            torch.cuda.synchronize()
            row.rel_l2_bf16 = rel_l2(out_bf16, ref)
            runners["hattn_bf16"] = run_bf16
        except (HattnError, RuntimeError, ValueError, torch.cuda.OutOfMemoryError) as error:
            row.notes.append(f"hattn bf16: {first_line(error)}")

        # --- hattn e4m3: the pre-pass into each set's e4m3 tensors, then the FP8 forward on them ---
        out_e4m3 = None
        if hattn.has_fp8:
            try:
                quantized, pre_params = [], []
                vt = not args.fp8_v_rows
                for q, k, v in sets:
                    outs = fp8_prepass_outputs(q, k, v, v_transposed=vt)
                    p = hattn.fp8_prepass_params_torch(q, k, v, *outs, hadamard=args.fp8_hadamard, seed=args.seed,
                                                       v_transposed=vt, v_per_head=args.fp8_v_per_head)
                    hattn.check_fp8_prepass(p)
                    quantized.append(outs)
                    pre_params.append(p)
                workspace = None if vt else hattn.fwd_fp8_workspace_torch(quantized[0][1])
                out_e4m3 = torch.empty_like(sets[0][0])
                fwd_params = []
                for outs in quantized:
                    p = hattn.fwd_fp8_params_torch(*outs, out_e4m3, None, workspace, causal=case.causal,
                                                   v_transposed=vt, schedule_workspace=ws)
                    hattn.check_fwd_fp8(p)
                    fwd_params.append(p)
                run_prepass = launcher(hattn.lib.hattn_fp8_prepass, pre_params, "hattn_fp8_prepass")
                run_e4m3 = launcher(hattn.lib.hattn_fwd_fp8, fwd_params, "hattn_fwd_fp8")
                if args.fp8_fixed_walk and ws is not None:  # the A/B of the dynamic walk
                    fixed_params = []
                    for p in fwd_params:
                        fixed = type(p).from_buffer_copy(p)
                        fixed.schedule_workspace, fixed.schedule_workspace_size = None, 0
                        fixed_params.append(fixed)
                    runners["hattn_e4m3_fixed"] = launcher(hattn.lib.hattn_fwd_fp8, fixed_params, "hattn_fwd_fp8")
                for i in range(len(sets)):
                    run_prepass(i)  # every set's e4m3 inputs (the timed pre-pass rewrites the same bytes)
                out_e4m3.fill_(float("nan"))
                run_e4m3(0)
                torch.cuda.synchronize()
                row.rel_l2_e4m3 = rel_l2(out_e4m3, ref)
                runners["prepass"], runners["hattn_e4m3"] = run_prepass, run_e4m3
            except (HattnError, RuntimeError, ValueError, torch.cuda.OutOfMemoryError) as error:
                row.notes.append(f"hattn e4m3: {first_line(error)}")
                out_e4m3 = None

        # --- cuDNN FP8 (per-tensor e4m3 of the same bf16 inputs) ---
        if peer is not None:
            stage = "graph build"
            try:
                entry = peer.entry(b, h, s, d, case.causal)
                row.cudnn_build_s, row.cudnn_plan = entry["build_s"], f"{entry['plan']} [{entry['variant']}]"
                stage = "execute"
                # P is in [0, 1]: its scale maps 1 to the e4m3 maximum (amax of S = 1, as cuDNN's docs say).
                s_scale = torch.full((1, 1, 1, 1), HATTN_FP8_E4M3_MAX, dtype=torch.float32, device=device)
                s_descale = 1.0 / s_scale
                o_scale = (HATTN_FP8_E4M3_MAX * O_SCALE_HEADROOM / ref.abs().amax().float().clamp_min(1e-30))
                o_scale = o_scale.reshape(1, 1, 1, 1)
                o8 = torch.empty((b, s, h, d), dtype=e4m3, device=device)
                packs = []
                for q, k, v in sets:
                    (q8, qd), (k8, kd), (v8, vd) = per_tensor_e4m3(q), per_tensor_e4m3(k), per_tensor_e4m3(v)
                    packs.append(peer.pack(entry, q=q8, k=k8, v=v8, o=o8, descale_q=qd, descale_k=kd,
                                           descale_v=vd, descale_s=s_descale, scale_s=s_scale, scale_o=o_scale))

                def run_cudnn(i: int, packs=packs, entry=entry) -> None:
                    peer.execute(entry, packs[i])

                o8.view(torch.uint8).fill_(E4M3_NAN_BYTE)
                run_cudnn(0)
                torch.cuda.synchronize()
                o_cudnn = o8.float() / o_scale.reshape(())
                row.rel_l2_cudnn_fp8 = rel_l2(o_cudnn, ref)
                if out_e4m3 is not None:
                    row.rel_l2_e4m3_vs_cudnn_fp8 = rel_l2(out_e4m3, o_cudnn)
                del o_cudnn
                runners["cudnn_fp8"] = run_cudnn
            except Exception as error:  # the peer raises its own types; one shape's failure is reported
                row.notes.append(f"cuDNN FP8 {stage} failed: {type(error).__name__}: {first_line(error)}")
                row.peer_check = "FAIL" if stage == "execute" else "n/a"
        del ref

        # --- checks ---
        errors = [(row.rel_l2_bf16, FP8_BF16_REL_L2_LIMIT)] + ([(row.rel_l2_e4m3, FP8_REL_L2_LIMIT)] if hattn.has_fp8 else [])
        ok = all(e is not None and math.isfinite(e) and e < limit for e, limit in errors)
        row.check = "pass" if ok else "FAIL"
        if row.rel_l2_cudnn_fp8 is not None:
            ok = math.isfinite(row.rel_l2_cudnn_fp8) and row.rel_l2_cudnn_fp8 < CUDNN_FP8_REL_L2_LIMIT
            row.peer_check = "pass" if ok else "FAIL"
            if not ok:
                runners.pop("cudnn_fp8", None)  # a wrong answer is not timed
                row.notes.append("cuDNN FP8 output wrong: not timed")

        # --- interleaved rounds, each leg keeping its best (GPU time and host time apart) ---
        host: dict[str, float] = {}

        def time_leg(name, run):
            ms, host_us = timed(run, len(sets))
            host[name] = min(host.get(name, float("inf")), host_us)
            return ms

        def timing_failed(name, error):
            row.notes.append(f"{name} timing failed: {type(error).__name__}: {first_line(error)}")
            if name == "cudnn_fp8":
                row.peer_check = "FAIL"
            torch.cuda.synchronize()  # raises if the context is gone: run_cases stops the sweep

        best = interleaved_best(runners, args.rounds, time_leg, (Exception,), timing_failed)
        for name, ms in best.items():
            # The calls queue behind the GPU sleep; the host falls behind the GPU only when its lag over
            # all calls exceeds the sleep: then the figure measures the host.
            if args.reps * (host[name] - 1e3 * ms) > 1e3 * args.queue_ahead_ms:
                row.notes.append(f"{name}: host-bound ({host[name]:.0f} us/call to enqueue, GPU {1e3 * ms:.0f} us/call)")
        row.hattn_bf16_ms, row.hattn_e4m3_ms = best.get("hattn_bf16"), best.get("hattn_e4m3")
        row.prepass_ms, row.cudnn_fp8_ms = best.get("prepass"), best.get("cudnn_fp8")
        row.hattn_e4m3_fixed_ms = best.get("hattn_e4m3_fixed")
        row.cudnn_host_us = host.get("cudnn_fp8")

        def tflops(ms):
            return None if ms is None else case.flops / (ms * 1e-3) / 1e12
        row.hattn_bf16_tflops, row.hattn_e4m3_tflops = tflops(row.hattn_bf16_ms), tflops(row.hattn_e4m3_ms)
        row.cudnn_fp8_tflops = tflops(row.cudnn_fp8_ms)
        row.hattn_e4m3_fixed_tflops = tflops(row.hattn_e4m3_fixed_ms)
        if row.prepass_ms is not None:
            elements = b * s * h * d
            descale_bytes = 3 * b * h * -(-s // HATTN_FP8_BLOCK_ROWS) * 4
            row.prepass_gbps = (3 * elements * (2 + 1) + descale_bytes) / (row.prepass_ms * 1e-3) / 1e9
            if row.hattn_e4m3_ms is not None:
                row.hattn_e4m3_e2e_tflops = tflops(row.prepass_ms + row.hattn_e4m3_ms)
        if row.hattn_e4m3_tflops and row.cudnn_fp8_tflops:
            row.e4m3_over_cudnn_fp8 = row.hattn_e4m3_tflops / row.cudnn_fp8_tflops
        if row.hattn_e4m3_tflops and row.hattn_bf16_tflops:
            row.e4m3_over_bf16 = row.hattn_e4m3_tflops / row.hattn_bf16_tflops
        rows.append(row)
        longest_case_s[0] = max(longest_case_s[0], time.monotonic() - case_start)
        # The JSON after every shape, so a run killed outright (a hang in a library) keeps its rows.
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "compare_fp8.json").write_text(json.dumps(
            {"meta": {**meta, "partial": True}, "rows": [asdict(r) for r in fp8_table_order(rows)]}, indent=1))
        fixed = f" (fixed walk {fmt(row.hattn_e4m3_fixed_tflops)})" if row.hattn_e4m3_fixed_tflops else ""
        print(f"    hattn bf16 {fmt(row.hattn_bf16_tflops)} e4m3 {fmt(row.hattn_e4m3_tflops)}{fixed} (pre-pass "
              f"{fmt(row.prepass_ms, '.3f')} ms) cuDNN FP8 {fmt(row.cudnn_fp8_tflops)} TFLOPS; rel L2 vs SDPA: bf16 "
              f"{fmt(row.rel_l2_bf16, '.1e')} e4m3 {fmt(row.rel_l2_e4m3, '.1e')} cuDNN FP8 "
              f"{fmt(row.rel_l2_cudnn_fp8, '.1e')}; checks {row.check}/{row.peer_check}; cuDNN build "
              f"{fmt(row.cudnn_build_s, '.1f')} s" + (f"; {'; '.join(row.notes)}" if row.notes else ""),
              file=sys.stderr, flush=True)

    generator = torch.Generator(device=device)
    try:
        run_cases(cases, rows, measure_case, "fp8 ", lambda case, note: Fp8Row(
            case.head_dim, case.seqlen, case.batch, case.heads, case.causal,
            check="n/a" if note.startswith("not run") else "FAIL", notes=[note]), skip_reason)
    finally:
        builds = peer.build_seconds if peer is not None else []
        meta["cudnn_graph_builds"] = len(builds)
        meta["cudnn_graph_build_s_total"] = sum(builds)
        meta["cudnn_graph_build_s_max"] = max(builds, default=0.0)
        meta["sweep_s"] = time.monotonic() - sweep_start


def markdown_table_fp8(rows: list[Fp8Row]) -> str:
    lines = ["| shape | hattn bf16 | hattn e4m3 | pre-pass ms (GB/s) | e4m3 + pre-pass | cuDNN FP8 | "
             "e4m3/cuDNN FP8 | e4m3/bf16 | rel L2 vs SDPA bf16: hattn e4m3 / cuDNN FP8 (hattn vs cuDNN) | "
             "checks hattn / cuDNN | cuDNN build s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|"]
    for r in fp8_table_order(rows):
        shape = f"d{r.head_dim} s{r.seqlen} b{r.batch} h{r.heads} {'causal' if r.causal else 'full'}"
        pre = "n/a" if r.prepass_ms is None else f"{r.prepass_ms:.3f} ({r.prepass_gbps:.0f})"
        errs = (f"{fmt(r.rel_l2_e4m3, '.1e')} / {fmt(r.rel_l2_cudnn_fp8, '.1e')} "
                f"({fmt(r.rel_l2_e4m3_vs_cudnn_fp8, '.1e')})")
        note = f" {'; '.join(r.notes)}" if r.notes else ""
        lines.append(f"| {shape} | {fmt(r.hattn_bf16_tflops)} | {fmt(r.hattn_e4m3_tflops)} | {pre} | "
                     f"{fmt(r.hattn_e4m3_e2e_tflops)} | {fmt(r.cudnn_fp8_tflops)} | {fmt(r.e4m3_over_cudnn_fp8, '.2f')} | "
                     f"{fmt(r.e4m3_over_bf16, '.2f')} | {errs} | {r.check} / {r.peer_check}{note} | "
                     f"{fmt(r.cudnn_build_s, '.1f')} |")
    return "\n".join(lines)


def pivot_table_fp8(rows: list[Fp8Row]) -> str:
    """TFLOPS side by side, one line per head dim and mask: hattn e4m3 / cuDNN FP8 (ratio) per seqlen."""
    seqlens = sorted({r.seqlen for r in rows})
    lines = ["| d | mask | " + " | ".join(f"{s // 1024}k" if s >= 1024 else str(s) for s in seqlens) + " |",
             "|---|---|" + "---|" * len(seqlens)]
    for d in sorted({r.head_dim for r in rows}):
        for causal in (False, True):
            cells = []
            by_s = {r.seqlen: r for r in rows if r.head_dim == d and r.causal == causal}
            if not by_s:
                continue
            for s in seqlens:
                r = by_s.get(s)
                if r is None or (r.hattn_e4m3_tflops is None and r.cudnn_fp8_tflops is None):
                    cells.append("-")
                else:
                    cells.append(f"{fmt(r.hattn_e4m3_tflops, '.0f')} / {fmt(r.cudnn_fp8_tflops, '.0f')}"
                                 + (f" ({r.e4m3_over_cudnn_fp8:.2f})" if r.e4m3_over_cudnn_fp8 else ""))
            lines.append(f"| {d} | {'causal' if causal else 'full'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pivot_table_peers(rows: list, what: str) -> str:
    """The 16-bit forward's or backward's default rows (`what`) side by side, after a title line, one
    line per head dim and mask: TFLOPS hattn / cuDNN / FA4 (hattn/cuDNN, hattn/FA4) per seqlen; FA4
    left out where it did not run."""
    with_fa4 = any(r.fa4_tflops for r in rows)
    seqlens = sorted({r.seqlen for r in rows})
    title = ("\nTFLOPS, hattn / cuDNN" + (" / FA4 (hattn/cuDNN, hattn/FA4)" if with_fa4 else " (ratio)")
             + f", {what}:\n")
    lines = [title, "| d | mask | " + " | ".join(f"{s // 1024}k" if s >= 1024 else str(s) for s in seqlens) + " |",
             "|---|---|" + "---|" * len(seqlens)]
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"
    for d in sorted({r.head_dim for r in rows}):
        for causal in (False, True):
            by_s = {r.seqlen: r for r in rows if r.head_dim == d and r.causal == causal}
            if not by_s:
                continue
            cells = []
            for s in seqlens:
                r = by_s.get(s)
                if r is None or r.hattn_tflops is None:
                    cells.append("-")
                elif with_fa4:
                    cells.append(f"{fmt(r.hattn_tflops, '.0f')} / {fmt(r.cudnn_tflops, '.0f')} / {fmt(r.fa4_tflops, '.0f')} "
                                 f"({ratio(r.hattn_tflops, r.cudnn_tflops)}, {ratio(r.hattn_tflops, r.fa4_tflops)})")
                else:
                    cells.append(f"{fmt(r.hattn_tflops, '.0f')} / {fmt(r.cudnn_tflops, '.0f')} "
                                 f"({ratio(r.hattn_tflops, r.cudnn_tflops)})")
            lines.append(f"| {d} | {'causal' if causal else 'full'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_line_fp8(rows: list[Fp8Row], meta: dict) -> str:
    def geo(values):
        values = [v for v in values if v]
        return (math.exp(sum(map(math.log, values)) / len(values)), len(values)) if values else (None, 0)
    ratio, n = geo(r.e4m3_over_cudnn_fp8 for r in rows)
    e2e, n_e2e = geo(r.hattn_e4m3_e2e_tflops / r.cudnn_fp8_tflops for r in rows
                     if r.hattn_e4m3_e2e_tflops and r.cudnn_fp8_tflops)
    vs_bf16, n_bf16 = geo(r.e4m3_over_bf16 for r in rows)
    skipped = sum(any(note.startswith("not run") for note in r.notes) for r in rows)
    peer = (f"peer: {meta['cudnn_fp8_peer']}" if meta.get("cudnn_fp8_peer")
            else f"CUDNN FP8 PEER SKIPPED: {meta.get('cudnn_fp8_peer_skipped') or 'n/a'}")
    return (f"hattn e4m3 / cuDNN FP8 geometric mean over {n} shapes: {fmt(ratio, '.3f')} (with the pre-pass: "
            f"{fmt(e2e, '.3f')} over {n_e2e}); hattn e4m3 / hattn bf16: {fmt(vs_bf16, '.3f')} over {n_bf16}; "
            f"checks hattn: {sum(r.check == 'pass' for r in rows)} pass, {sum(r.check == 'FAIL' for r in rows)} FAIL; "
            f"cuDNN FP8: {sum(r.peer_check == 'pass' for r in rows)} pass, "
            f"{sum(r.peer_check == 'FAIL' for r in rows)} FAIL, {sum(r.peer_check == 'n/a' for r in rows)} n/a; "
            f"{skipped} shapes not run (time budget); cuDNN graph builds: {meta.get('cudnn_graph_builds', 0)}, "
            f"{meta.get('cudnn_graph_build_s_total', 0.0):.1f} s in all, max {meta.get('cudnn_graph_build_s_max', 0.0):.1f} s; "
            f"sweep {meta.get('sweep_s', 0.0):.0f} s; {peer}")


# The FP8 forward's speed bars (issue 10): full masks at 16k tokens of at least these TFLOPS at
# seqlen FP8_BAR_MIN_SEQLEN and up, and every shape cuDNN's FP8 attention runs at >= 1.0x it.
FP8_BAR_TFLOPS = {256: 1200.0, 128: 1000.0}
FP8_BAR_MIN_SEQLEN = 8192
FP8_BAR_VS_CUDNN = 1.0


def fp8_bars_line(rows: list[Fp8Row]) -> str:
    """Where the e4m3 rows stand against issue 10's speed bars; the misses are named."""
    def name(r):
        return f"d{r.head_dim} s{r.seqlen} {'causal' if r.causal else 'full'}"
    parts = []
    for d, want in FP8_BAR_TFLOPS.items():
        long_full = [r for r in rows if r.head_dim == d and not r.causal and r.seqlen >= FP8_BAR_MIN_SEQLEN
                     and r.hattn_e4m3_tflops]
        if not long_full:
            parts.append(f"d{d} full >= {FP8_BAR_MIN_SEQLEN // 1024}k: not run")
            continue
        low = [r for r in long_full if r.hattn_e4m3_tflops < want]
        parts.append(f"d{d} full >= {FP8_BAR_MIN_SEQLEN // 1024}k >= {want:.0f} TFLOPS: "
                     + ("met" if not low else "NOT met (" + ", ".join(f"{name(r)} {r.hattn_e4m3_tflops:.0f}"
                                                                     for r in low) + ")"))
    ratios = [r for r in rows if r.e4m3_over_cudnn_fp8]
    behind = [r for r in ratios if r.e4m3_over_cudnn_fp8 < FP8_BAR_VS_CUDNN]
    parts.append(f"{len(ratios) - len(behind)}/{len(ratios)} shapes >= {FP8_BAR_VS_CUDNN:.1f}x cuDNN FP8"
                 + (" (misses: " + ", ".join(f"{name(r)} {r.e4m3_over_cudnn_fp8:.3f}" for r in behind) + ")"
                    if behind else ""))
    return "FP8 bars: " + "; ".join(parts)


def plot_fp8(path: Path, rows: list[Fp8Row], meta: dict, plt) -> None:
    head_dims = sorted({r.head_dim for r in rows})
    fig, axes = plt.subplots(max(len(head_dims), 1), 2, figsize=(12, 3.2 * max(len(head_dims), 1)), squeeze=False)
    series = [("hattn e4m3", "hattn_e4m3_tflops", "tab:red", "-"),
              ("hattn e4m3 + pre-pass", "hattn_e4m3_e2e_tflops", "tab:orange", ":"),
              ("hattn bf16", "hattn_bf16_tflops", "tab:gray", "--"),
              ("cuDNN FP8", "cudnn_fp8_tflops", "tab:blue", "-")]
    for i, d in enumerate(head_dims):
        for j, causal in enumerate((False, True)):
            ax = axes[i][j]
            sel = sorted((r for r in rows if r.head_dim == d and r.causal == causal), key=lambda r: r.seqlen)
            for name, key, color, style in series:
                pts = [(r.seqlen, getattr(r, key)) for r in sel if getattr(r, key) is not None]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=name, color=color, linestyle=style)
            seqlen_axis(ax, [r.seqlen for r in sel])
            ax.set_title(f"head_dim {d}, {'causal' if causal else 'full'}")
            ax.legend(fontsize=8)
    peer = meta.get("cudnn_fp8_peer") or "cuDNN FP8 skipped"
    fig.suptitle(f"FP8 forward (e4m3), {meta.get('device', '')}, torch {meta.get('torch', '')}, {peer}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- Reporting -------------------------------------------------------------------------------------
def markdown_table(rows: list[Row]) -> str:
    lines = ["| shape | variant | hattn TFLOPS | cuDNN TFLOPS | FA2 TFLOPS | FA4 TFLOPS | hattn/cuDNN | hattn/FA4 | "
             "check (rel L2, max abs) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        shape = f"d{r.head_dim} s{r.seqlen} b{r.batch} h{r.heads} {'causal' if r.causal else 'full'}"
        check = r.check if r.rel_l2 is None else f"{r.check} ({r.rel_l2:.1e}, {r.max_abs_diff:.1e} vs {r.check_against})"
        lines.append(f"| {shape} | {r.variant} | {fmt(r.hattn_tflops)} | {fmt(r.cudnn_tflops)} | "
                     f"{fmt(r.fa2_tflops)} | {fmt(r.fa4_tflops)} | {fmt(r.hattn_over_cudnn, '.2f')} | "
                     f"{fmt(r.hattn_over_fa4, '.2f')} | {check} |")
    return "\n".join(lines)


def write_outputs(out_dir: Path, rows: list, meta: dict, stem: str = "compare", row_type=Row,
                  plotter=None) -> list[str]:
    """<stem>.json, <stem>.csv and (with matplotlib) <stem>.png; returns the names written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=1))
    with open(out_dir / f"{stem}.csv", "w", newline="") as f:
        names = [n for n in row_type.__dataclass_fields__]
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        for r in rows:
            d = asdict(r)
            d["notes"] = "; ".join(r.notes)
            writer.writerow(d)
    written = [f"{stem}.json", f"{stem}.csv"]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("compare_torch.py: matplotlib not installed; no plot", file=sys.stderr)
        return written
    (plotter or plot)(out_dir / f"{stem}.png", rows, meta, plt)
    return written + [f"{stem}.png"]


def seqlen_axis(ax, seqlens: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.minorticks_off()
    ax.set_xticks(seqlens)
    ax.set_xticklabels([f"{s // 1024}k" if s >= 1024 else str(s) for s in seqlens])
    ax.set_ylim(bottom=0)
    ax.set_ylabel("TFLOPS")
    ax.grid(alpha=0.3)


def plot(path: Path, rows: list[Row], meta: dict, plt) -> None:
    base = [r for r in rows if r.flags == 0]
    head_dims = sorted({r.head_dim for r in base})
    ablation = [r for r in rows if r.flags != 0]
    n_rows = max(len(head_dims), 1) + (1 if ablation else 0)
    fig = plt.figure(figsize=(12, 3.2 * n_rows))
    grid = fig.add_gridspec(n_rows, 2)
    series = (("hattn", "hattn_tflops", "tab:red"), ("cuDNN", "cudnn_tflops", "tab:blue"),
              ("FA2", "fa2_tflops", "tab:green"), ("FA4", "fa4_tflops", "tab:purple"))
    for i, d in enumerate(head_dims):
        for j, causal in enumerate((False, True)):
            ax = fig.add_subplot(grid[i, j])
            sel = sorted((r for r in base if r.head_dim == d and r.causal == causal), key=lambda r: r.seqlen)
            for name, key, color in series:
                pts = [(r.seqlen, getattr(r, key)) for r in sel if getattr(r, key) is not None]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=name, color=color)
            seqlen_axis(ax, [r.seqlen for r in sel])
            ax.set_title(f"head_dim {d}, {'causal' if causal else 'full'}")
            ax.legend(fontsize=8)
    if ablation:
        ax = fig.add_subplot(grid[n_rows - 1, :])
        abl_shape = (ablation[0].head_dim, ablation[0].seqlen, ablation[0].causal)
        bars = [r for r in rows if (r.head_dim, r.seqlen, r.causal) == abl_shape]
        labels = [r.variant.replace("+", "+\n") for r in bars] + ["cuDNN", "FA2"]
        values = [r.hattn_tflops or 0 for r in bars] + [bars[0].cudnn_tflops or 0, bars[0].fa2_tflops or 0]
        ax.bar(labels, values, color=["tab:red"] * len(bars) + ["tab:blue", "tab:green"])
        for x, y in enumerate(values):
            ax.text(x, y, f"{y:.0f}", ha="center", va="bottom", fontsize=8)
        ax.set_title(f"ablation: head_dim {abl_shape[0]}, seqlen {abl_shape[1]}, {'causal' if abl_shape[2] else 'full'}")
        ax.set_ylabel("TFLOPS")
    fig.suptitle(f"forward {meta.get('dtype', '')}, {meta.get('device', '')}, torch {meta.get('torch', '')}, "
                 f"cuDNN {meta.get('cudnn', '')}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def geometric_mean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


# The forward's bars over cuDNN (issue 7: the ratios FA4 reached over cuDNN in one run): the
# geometric mean, a floor by length, and per head dim at seqlen >= FWD_BAR_LONG_SEQLEN.
FWD_BAR_GEOMEAN = 1.05
FWD_BAR_LONG_SEQLEN, FWD_BAR_MID_SEQLEN = 4096, 2048
FWD_BAR_MID, FWD_BAR_SHORT = 1.0, 0.90
FWD_BAR_LONG = {64: 1.15, 128: 1.08, 256: 1.05}


def bars_line(rows: list[Row]) -> str:
    """Where the default rows stand against the bars; the misses are named."""
    base = [r for r in rows if r.flags == 0 and r.hattn_over_cudnn]
    if not base:
        return "bars: no default row has a ratio to cuDNN"
    misses = []
    for r in base:
        want = FWD_BAR_MID if r.seqlen >= FWD_BAR_MID_SEQLEN else FWD_BAR_SHORT
        if r.seqlen >= FWD_BAR_LONG_SEQLEN and r.head_dim in FWD_BAR_LONG:
            want = max(want, FWD_BAR_LONG[r.head_dim])
        if r.hattn_over_cudnn < want:
            misses.append(f"d{r.head_dim} s{r.seqlen} {'causal' if r.causal else 'full'} "
                          f"{r.hattn_over_cudnn:.3f}<{want:.2f}")
    geo = geometric_mean([r.hattn_over_cudnn for r in base])
    ahead = [r for r in base if r.hattn_tflops >= max(r.cudnn_tflops or 0, r.fa4_tflops or 0)]
    with_fa4 = [r for r in base if r.hattn_over_fa4]
    return (f"bars: geomean {geo:.3f} (want >= {FWD_BAR_GEOMEAN}: {'met' if geo >= FWD_BAR_GEOMEAN else 'NOT met'}); "
            f"{len(base) - len(misses)}/{len(base)} shapes meet their per-shape bar"
            + (f"; misses: {', '.join(misses)}" if misses else "")
            + f"; hattn ahead of cuDNN and FA4 on {len(ahead)}/{len(base)} shapes"
            + (f"; hattn/FA4 geomean {geometric_mean([r.hattn_over_fa4 for r in with_fa4]):.3f} over "
               f"{len(with_fa4)} shapes" if with_fa4 else "; FA4 not run"))


def summary_line(rows: list[Row]) -> str:
    ratios = [r.hattn_over_cudnn for r in rows if r.flags == 0 and r.hattn_over_cudnn]
    geo = geometric_mean(ratios)
    fails = [r for r in rows if r.check == "FAIL"]
    return (f"hattn/cuDNN geometric mean over {len(ratios)} shapes: {fmt(geo, '.3f')}; "
            f"checks: {sum(r.check == 'pass' for r in rows)} pass, {len(fails)} FAIL, "
            f"{sum(r.check == 'n/a' for r in rows)} n/a; hattn timed on {sum(r.hattn_ms is not None for r in rows)}"
            f"/{len(rows)} rows\n" + bars_line(rows))


def markdown_table_bwd(rows: list[BwdRow]) -> str:
    lines = ["| shape | variant | hattn TFLOPS | cuDNN TFLOPS | FA2 TFLOPS | FA4 TFLOPS | hattn/cuDNN | "
             "check (rel L2 dq / dk / dv) |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        shape = f"d{r.head_dim} s{r.seqlen} b{r.batch} h{r.heads} {'causal' if r.causal else 'full'}"
        check = r.check
        if r.rel_l2_dq is not None:
            check += (f" ({r.rel_l2_dq:.1e} / {r.rel_l2_dk:.1e} / {r.rel_l2_dv:.1e} vs {r.check_against}"
                      + (f"; FA2 {r.fa2_rel_l2_vs_ref:.1e}" if r.fa2_rel_l2_vs_ref is not None else "")
                      + (f"; FA4 {r.fa4_rel_l2_vs_ref:.1e}" if r.fa4_rel_l2_vs_ref is not None else "") + ")")
        if r.repeatable != "n/a":
            check += f", {r.repeatable}"
        lines.append(f"| {shape} | {r.variant} | {fmt(r.hattn_tflops)} | {fmt(r.cudnn_tflops)} | "
                     f"{fmt(r.fa2_tflops)} | {fmt(r.fa4_tflops)} | {fmt(r.hattn_over_cudnn, '.2f')} | {check} |")
    return "\n".join(lines)


def summary_line_bwd(rows: list[BwdRow], meta: dict) -> str:
    parts = []
    for variant in dict.fromkeys(r.variant for r in rows):
        ratios = [r.hattn_over_cudnn for r in rows if r.variant == variant and r.hattn_over_cudnn]
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
        parts.append(f"hattn ({variant})/cuDNN backward geometric mean over {len(ratios)} shapes: {fmt(geo, '.3f')}")
        with_fa4 = [r for r in rows if r.variant == variant and r.hattn_tflops and r.fa4_tflops]
        if with_fa4:
            geo_fa4 = geometric_mean([r.hattn_tflops / r.fa4_tflops for r in with_fa4])
            ahead = sum(r.hattn_tflops >= max(r.cudnn_tflops or 0, r.fa4_tflops) for r in with_fa4)
            parts.append(f"hattn ({variant})/FA4 {fmt(geo_fa4, '.3f')} over {len(with_fa4)} shapes, "
                         f"ahead of cuDNN and FA4 on {ahead}")
    fails = [r for r in rows if r.check == "FAIL"]
    fa4 = f"FA4 {meta['fa4']}" if meta.get("fa4") else f"FA4 skipped: {meta.get('fa4_note') or 'n/a'}"
    return ("; ".join(parts) + f"; checks: {sum(r.check == 'pass' for r in rows)} pass, {len(fails)} FAIL, "
            f"{sum(r.check == 'n/a' for r in rows)} n/a; hattn timed on {sum(r.hattn_ms is not None for r in rows)}"
            f"/{len(rows)} rows; {fa4}")


def plot_bwd(path: Path, rows: list[BwdRow], meta: dict, plt) -> None:
    head_dims = sorted({r.head_dim for r in rows})
    fig, axes = plt.subplots(max(len(head_dims), 1), 2, figsize=(12, 3.2 * max(len(head_dims), 1)), squeeze=False)
    series = [("hattn", "hattn_tflops", "tab:red", "default", "-"),
              ("hattn deterministic", "hattn_tflops", "tab:red", "deterministic", "--"),
              ("cuDNN", "cudnn_tflops", "tab:blue", "default", "-"),
              ("FA2", "fa2_tflops", "tab:green", "default", "-"),
              ("FA4", "fa4_tflops", "tab:purple", "default", "-")]
    for i, d in enumerate(head_dims):
        for j, causal in enumerate((False, True)):
            ax = axes[i][j]
            shape_rows = [r for r in rows if r.head_dim == d and r.causal == causal]
            for name, key, color, variant, style in series:
                sel = sorted((r for r in shape_rows if r.variant == variant), key=lambda r: r.seqlen)
                pts = [(r.seqlen, getattr(r, key)) for r in sel if getattr(r, key) is not None]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=name, color=color, linestyle=style)
            seqlen_axis(ax, sorted({r.seqlen for r in shape_rows}))
            ax.set_title(f"head_dim {d}, {'causal' if causal else 'full'}")
            ax.legend(fontsize=8)
    fig.suptitle(f"backward {meta.get('dtype', '')} (FLOPs = 2.5 x forward), {meta.get('device', '')}, "
                 f"torch {meta.get('torch', '')}, cuDNN {meta.get('cudnn', '')}"
                 + (f", FA4 {meta['fa4']}" if meta.get("fa4") else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- Main --------------------------------------------------------------------------------------------
def parse_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_masks(text: str) -> list[str]:
    masks = [m for m in text.split(",") if m]
    if not masks or any(m not in ("full", "causal") for m in masks):
        raise argparse.ArgumentTypeError(f"masks must be a comma-separated subset of full,causal, not {text!r}")
    return masks


def build_cases(args) -> tuple[list[Case], list[Case], dict[Case, list[int]]]:
    """(the grid, the forward's cases = the grid + the ablation shape, the ablation flags per case)."""
    grid = []
    for d in args.head_dims:
        for causal in [m == "causal" for m in args.masks]:
            for s in args.seqlens:
                if args.tokens % s or args.width % d:
                    raise SystemExit(f"tokens {args.tokens} / seqlen {s} or width {args.width} / head_dim {d} is not exact")
                grid.append(Case(d, s, causal, args.tokens // s, args.width // d))
    cases = list(grid)
    ablation: dict[Case, list[int]] = {}
    if not args.no_ablation:
        abl = Case(args.ablation_head_dim, args.ablation_seqlen, False, args.tokens // args.ablation_seqlen,
                   args.width // args.ablation_head_dim)
        if abl not in cases:
            cases.append(abl)
        ablation[abl] = [HATTN_FWD_NO_PINGPONG, HATTN_FWD_NO_INTRA_WG_OVERLAP,
                         HATTN_FWD_NO_PINGPONG | HATTN_FWD_NO_INTRA_WG_OVERLAP]
    return grid, cases, ablation


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--lib", type=Path, default=default_library_path(),
                        help="libhattn.so (default: $HATTN_LIB, else build/libhattn.so)")
    parser.add_argument("--out", type=Path, default=Path("compare_out"), help="output folder")
    direction = parser.add_mutually_exclusive_group()
    direction.add_argument("--bwd", action="store_true", help="the backward sweep only")
    direction.add_argument("--both", action="store_true", help="the forward sweep, then the backward sweep")
    direction.add_argument("--fp8", action="store_true",
                           help="the FP8 forward sweep: hattn bf16, hattn e4m3 (pre-pass timed apart) and cuDNN FP8")
    parser.add_argument("--head-dims", type=parse_ints, default=[64, 128, 256])
    parser.add_argument("--seqlens", type=parse_ints, default=[512, 1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--masks", type=parse_masks, default=["full", "causal"], help="full,causal")
    parser.add_argument("--tokens", type=int, default=16384, help="batch * seqlen")
    parser.add_argument("--width", type=int, default=2048, help="heads * head_dim")
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    parser.add_argument("--ablation-head-dim", type=int, default=128)
    parser.add_argument("--ablation-seqlen", type=int, default=8192)
    parser.add_argument("--no-ablation", action="store_true")
    parser.add_argument("--reps", type=int, default=20, help="forward: timed calls per backend per round (median)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls before each timing")
    parser.add_argument("--sets", type=int, default=2, help="forward: independent input sets to rotate through")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (each backend keeps its best)")
    parser.add_argument("--bwd-reps", type=int, default=10, help="backward: timed calls per backend per round (median)")
    parser.add_argument("--deterministic", action="store_true",
                        help="backward: also time hattn with HATTN_BWD_DETERMINISTIC (checked bit-identical over two runs)")
    parser.add_argument("--fa4-path", type=Path, action="append", default=[],
                        help="backward: a folder FlashAttention-4 was pip-installed into with --target (repeatable)")
    parser.add_argument("--no-fa4", action="store_true", help="leave FlashAttention-4 out (forward and backward)")
    parser.add_argument("--cudnn-frontend-path", type=Path, action="append", default=[],
                        help="fp8: a folder nvidia-cudnn-frontend was pip-installed into with --target (repeatable)")
    parser.add_argument("--no-cudnn-fp8", action="store_true", help="fp8: leave cuDNN's FP8 attention out")
    parser.add_argument("--fp8-v-per-head", action="store_true",
                        help="fp8: one V descale per (batch, KV head) from the pre-pass (HATTN_FP8_PREPASS_V_PER_HEAD)")
    parser.add_argument("--fp8-v-rows", action="store_true",
                        help="fp8: the pre-pass writes V's rows and hattn_fwd_fp8 transposes them itself (its "
                             "V^T kernel timed in); default: the pre-pass writes V^T")
    parser.add_argument("--fp8-fixed-walk", action="store_true",
                        help="fp8: also time hattn_fwd_fp8 without its schedule workspace (the fixed tile walk; "
                             "the A/B of the dynamic walk), column hattn_e4m3_fixed")
    parser.add_argument("--no-hadamard", dest="fp8_hadamard", action="store_false",
                        help="fp8: hattn's pre-pass without the random-sign Hadamard (quantization only)")
    parser.add_argument("--budget-s", type=float, default=0.0,
                        help="fp8: start no shape once this many seconds of the sweep are spent (0: no limit); "
                             "shapes are visited long and 2k sequences first, the rest are listed as not run")
    parser.add_argument("--queue-ahead-ms", type=float, default=20.0,
                        help="GPU sleep queued before the timed calls so the host runs ahead")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--quick", action="store_true", help="d128, seqlen 1k and 4k, full and causal, no ablation "
                        "(with --fp8: every head dim, seqlen 2k, 8k and 16k)")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the ctypes struct layouts (and the library's contiguous-params helpers if "
                             "the library exists); needs neither torch nor a GPU")
    args = parser.parse_args()
    if args.quick and args.fp8:
        args.seqlens = [2048, 8192, 16384]
    elif args.quick:
        args.head_dims, args.seqlens, args.no_ablation = [128], [1024, 4096], True
    if args.reps < 20:
        parser.error("--reps must be >= 20 (a median needs enough samples)")
    if args.sets < 2:
        parser.error("--sets must be >= 2 (rotating inputs keeps L2 from serving the previous call's data)")
    if args.rounds < 1 or args.bwd_reps < 5:
        parser.error("--rounds must be >= 1 and --bwd-reps >= 5")
    directions = ["bwd"] if args.bwd else ["fwd", "bwd"] if args.both else ["fp8"] if args.fp8 else ["fwd"]

    check_struct_layout()
    grid, cases, ablation = build_cases(args)
    if args.dry_run:
        print(f"dry run: ctypes hattn_fwd_params ({EXPECTED_SIZE} bytes, {len(EXPECTED_OFFSETS)} fields) and "
              f"hattn_bwd_params ({EXPECTED_BWD_SIZE} bytes, {len(EXPECTED_BWD_OFFSETS)} fields) match the x86-64 "
              f"tables and include/hattn.h; the forward sweep has {len(cases)} shapes + "
              f"{sum(map(len, ablation.values()))} ablation variants, the backward sweep and the FP8 sweep "
              f"{len(grid)} shapes each")
        # The bars' summary on two made-up rows: one over its bars, one under both of its own.
        line = fp8_bars_line([Fp8Row(256, 16384, 1, 8, False, hattn_e4m3_tflops=1250.0, e4m3_over_cudnn_fp8=1.28),
                              Fp8Row(128, 8192, 2, 16, False, hattn_e4m3_tflops=988.0, e4m3_over_cudnn_fp8=0.99)])
        expected = ("d256 full >= 8k >= 1200 TFLOPS: met", "NOT met (d128 s8192 full 988)",
                    "1/2 shapes >= 1.0x cuDNN FP8 (misses: d128 s8192 full 0.990)")
        if not all(part in line for part in expected):
            raise SystemExit(f"compare_torch.py: fp8_bars_line gave {line!r}")
        print("dry run: the FP8 bars line names what meets and what misses issue 10's bars")
        if args.lib.exists():
            lib = Hattn(args.lib)
            lib.check_contiguous_helper()
            print(f"dry run: {args.lib}: hattn_fwd_params_contiguous agrees with the ctypes mirror")
            if lib.has_bwd:
                lib.check_bwd_contiguous_helper()
                print(f"dry run: {args.lib}: hattn_bwd_params_contiguous and hattn_bwd_workspace_size agree")
            else:
                print(f"dry run: {args.lib} has no backward entry points (built before the backward API)")
            if lib.has_fp8:
                lib.check_fp8_contiguous_helpers()
                print(f"dry run: {args.lib}: the FP8 contiguous helpers and hattn_fwd_fp8_workspace_size agree")
            else:
                print(f"dry run: {args.lib} has no FP8 entry points (built before the FP8 API)")
        else:
            print(f"dry run: {args.lib} not built; library checks skipped")
        return 0

    if importlib.util.find_spec("torch") is None:
        raise SystemExit("compare_torch.py: PyTorch is not installed (only --dry-run works without it)")
    if not args.lib.exists():
        raise SystemExit(f"compare_torch.py: {args.lib} not found (build first: cmake --build build)")
    hattn = Hattn(args.lib)
    try:
        hattn.check_contiguous_helper()
        if "bwd" in directions and hattn.has_bwd:
            hattn.check_bwd_contiguous_helper()
    except SystemExit as error:  # we fill params ourselves, so report it and carry on
        print(f"compare_torch.py: WARNING: {error}", file=sys.stderr)
    if "bwd" in directions and not hattn.has_bwd:
        print(f"compare_torch.py: WARNING: {args.lib} has no hattn_bwd (built before the backward API): the "
              "backward rows time the peers only", file=sys.stderr)

    # `timeout` sends SIGTERM: turn it into an exception so the partial results still get written.
    def on_sigterm(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_sigterm)

    failed = interrupted = False
    for direction in directions:
        if interrupted:
            print(f"compare_torch.py: interrupted; the {direction} sweep did not run", file=sys.stderr)
            failed = True
            break
        rows: list = []
        meta: dict = {}
        try:
            if direction == "fwd":
                run_sweep(args, hattn, cases, ablation, rows, meta)
            elif direction == "fp8":
                run_fp8_sweep(args, hattn, fp8_order(grid), rows, meta)
            else:
                run_bwd_sweep(args, hattn, grid, rows, meta)
        except KeyboardInterrupt:
            interrupted = True
            print("compare_torch.py: interrupted; writing what was measured", file=sys.stderr)
        finally:
            if direction == "fwd":
                written = write_outputs(args.out, rows, meta)
            elif direction == "fp8":
                written = write_outputs(args.out, fp8_table_order(rows), meta, "compare_fp8", Fp8Row, plot_fp8)
            else:
                written = write_outputs(args.out, rows, meta, "compare_bwd", BwdRow, plot_bwd)
        if direction == "fwd":
            print("## Forward\n" if len(directions) > 1 else "", end="")
            print(markdown_table(rows))
            print(pivot_table_peers([r for r in rows if r.flags == 0], "default kernels"))
            print()
            print(summary_line(rows) + (" (INTERRUPTED)" if interrupted else ""))
        elif direction == "fp8":
            print(markdown_table_fp8(rows))
            print()
            print("TFLOPS, hattn e4m3 / cuDNN FP8 (ratio):\n")
            print(pivot_table_fp8(rows))
            print()
            print(summary_line_fp8(rows, meta) + (" (INTERRUPTED)" if interrupted else ""))
            print(fp8_bars_line(rows))
        else:
            print("\n## Backward\n" if len(directions) > 1 else "", end="")
            print(markdown_table_bwd(rows))
            print(pivot_table_peers([r for r in rows if r.variant == "default"], "the default backward"))
            print()
            print(summary_line_bwd(rows, meta) + (" (INTERRUPTED)" if interrupted else ""))
        print(f"wrote {', '.join(str(args.out / w) for w in written)}")
        if direction == "fp8":
            ran = [r for r in rows if not any(note.startswith("not run") for note in r.notes)]
            failed |= interrupted or not ran or any(
                r.check == "FAIL" or r.peer_check == "FAIL" or r.hattn_bf16_ms is None
                or (hattn.has_fp8 and r.hattn_e4m3_ms is None) for r in ran)
            if any("CUDA context broken" in note for r in rows for note in r.notes):
                return CONTEXT_BROKEN_EXIT
        else:
            failed |= interrupted or any(r.check == "FAIL" or r.hattn_ms is None for r in rows) or not rows
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
