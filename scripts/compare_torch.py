#!/usr/bin/env python3
"""Compare hattn's forward attention with PyTorch SDPA (cuDNN and FlashAttention-2 backends).

All three run in one process on the same input tensors, so clocks, power state and library
versions are shared. hattn is called through its C API (build/libhattn.so via ctypes) on
[batch, seqlen, heads, head_dim] tensors; SDPA gets the transposed views [batch, heads, seqlen,
head_dim] of the very same memory (no copies, unless a backend rejects those strides: then it gets
contiguous copies, made outside timing).

Timing: CUDA events around each call; a GPU sleep is queued first so the host runs ahead and no
host overhead lands inside an event pair; inputs rotate between independent sets so a call does
not find its operands in L2 from the previous one; median of --reps calls after --warmup calls.
TFLOPS = forward FLOPs / median time, with FLOPs = 4 * b * h * s * s * d (half of it for causal).

Correctness: every hattn output is compared with cuDNN's (max |diff| and relative L2 error, which
must be < 1e-2); FA2 is compared with cuDNN as a control. Without cuDNN, hattn is compared with
FA2, and without either with a float32 reference on a few heads.

Output (into --out): compare.json, compare.csv, compare.png; the markdown table goes to stdout.

  python3 scripts/compare_torch.py --out /tmp/cmp             # the full sweep (FA3 paper grid + ablation)
  python3 scripts/compare_torch.py --out /tmp/cmp --quick     # two shapes, for a smoke test
  python3 scripts/compare_torch.py --dry-run                  # check the ctypes struct layout only (no GPU, no torch)
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
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# ---- include/hattn.h, mirrored (scripts/hattn_ctypes.py) --------------------------------------
sys.path.insert(0, str(Path(__file__).resolve().parent))
from hattn_ctypes import (EXPECTED_OFFSETS, EXPECTED_SIZE, HATTN_DTYPE_BF16, HATTN_DTYPE_FP16,  # noqa: E402
                          HATTN_FWD_NO_INTRA_WG_OVERLAP, HATTN_FWD_NO_PINGPONG, HATTN_SUCCESS, Hattn,
                          HattnFwdParams, check_struct_layout)

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
    hattn_over_cudnn: float | None = None
    check_against: str = "n/a"
    max_abs_diff: float | None = None
    rel_l2: float | None = None
    check: str = "n/a"  # pass / FAIL / n/a
    fa2_rel_l2_vs_cudnn: float | None = None
    notes: list[str] = field(default_factory=list)


REL_L2_LIMIT = 1e-2


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "n/a" if x is None else format(x, spec)


# ---- GPU side (imports torch lazily so --dry-run runs anywhere) -----------------------------------
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
    meta.update({
        "device": props.name, "sms": props.multi_processor_count,
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "dtype": args.dtype, "reps": args.reps, "warmup": args.warmup, "input_sets": args.sets,
        "timing": "median of CUDA-event-timed calls, inputs rotated between sets, host queued ahead",
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

        # --- peers ---
        peer_ms: dict[str, float | None] = {}
        peer_out: dict[str, object] = {}
        peer_notes: list[str] = []
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
            peer_ms[name] = None
            for layout in ("views", "contiguous"):
                if layout == "views":
                    inputs = [[t.transpose(1, 2) for t in qkv] for qkv in sets]
                else:
                    inputs = [[t.transpose(1, 2).contiguous() for t in qkv] for qkv in sets]

                def sdpa(i: int, inputs=inputs):
                    qq, kk, vv = inputs[i]
                    return F.scaled_dot_product_attention(qq, kk, vv, is_causal=case.causal)

                try:
                    with warnings.catch_warnings(record=True) as caught, sdpa_kernel(backend):
                        warnings.simplefilter("always")
                        first = sdpa(0)
                        torch.cuda.synchronize()
                        peer_ms[name] = elapsed_ms(sdpa, args.sets)
                    peer_out[name] = first.transpose(1, 2)  # back to [b, s, h, d]
                    if layout == "contiguous":
                        peer_notes.append(f"{name} needed contiguous [b,h,s,d] copies")
                    break
                except (RuntimeError, torch.cuda.OutOfMemoryError) as error:
                    reason = " | ".join(str(w.message).splitlines()[0] for w in caught[:3]) or str(error).splitlines()[0]
                    if layout == "contiguous":
                        peer_notes.append(f"{name} n/a: {reason}")
                finally:
                    del inputs
            torch.cuda.synchronize()

        fa2_rel_l2 = None
        if "fa2" in peer_out and "cudnn" in peer_out:
            fa2_rel_l2 = compare(peer_out["fa2"], peer_out["cudnn"])[1]

        # --- hattn (the default schedule, then the ablation variants of this shape) ---
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        for flags in [0, *ablation_flags.get(case, [])]:
            row = Row(d, s, b, h, case.causal, flags, FLAG_NAMES.get(flags, str(flags)),
                      cudnn_ms=peer_ms["cudnn"], fa2_ms=peer_ms["fa2"], fa2_rel_l2_vs_cudnn=fa2_rel_l2,
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
                params.append(p)

            def run_hattn(i: int, params=params):
                status = hattn.lib.hattn_fwd(ctypes.byref(params[i]), stream)
                if status != HATTN_SUCCESS:
                    raise RuntimeError(hattn.describe(status, params[i]))

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
                row.hattn_ms = elapsed_ms(run_hattn, args.sets)
            except (RuntimeError, torch.cuda.OutOfMemoryError) as error:
                row.notes.append(str(error).splitlines()[0])
                row.check = "FAIL" if row.check == "n/a" else row.check

            for prefix in ("hattn", "cudnn", "fa2"):
                ms = getattr(row, f"{prefix}_ms")
                setattr(row, f"{prefix}_tflops", None if ms is None else case.flops / (ms * 1e-3) / 1e12)
            if row.hattn_tflops and row.cudnn_tflops:
                row.hattn_over_cudnn = row.hattn_tflops / row.cudnn_tflops
            rows.append(row)
            print(f"    {row.variant}: hattn {fmt(row.hattn_tflops)} cuDNN {fmt(row.cudnn_tflops)} "
                  f"FA2 {fmt(row.fa2_tflops)} TFLOPS; check {row.check} (rel L2 {fmt(row.rel_l2, '.2e')})"
                  + (f"; {'; '.join(row.notes)}" if row.notes else ""), file=sys.stderr, flush=True)

    generator = torch.Generator(device=device)
    for case_index, case in enumerate(cases):
        print(f"[{case_index + 1}/{len(cases)}] {case.label()}", file=sys.stderr, flush=True)
        try:
            measure_case(case, case_index)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as error:  # keep going: one bad shape must not hide the others
            rows.append(Row(case.head_dim, case.seqlen, case.batch, case.heads, case.causal, 0, "default",
                            check="FAIL", notes=[f"{type(error).__name__}: {str(error).splitlines()[0]}"]))
            print(f"    error: {rows[-1].notes[0]}", file=sys.stderr, flush=True)
            try:
                torch.cuda.synchronize()
            except Exception:
                print("compare_torch.py: the CUDA context is broken; stopping the sweep", file=sys.stderr)
                rows[-1].notes.append("CUDA context broken: sweep stopped here")
                return
        torch.cuda.empty_cache()


# ---- Reporting -------------------------------------------------------------------------------------
def markdown_table(rows: list[Row]) -> str:
    lines = ["| shape | variant | hattn TFLOPS | cuDNN TFLOPS | FA2 TFLOPS | hattn/cuDNN | check (rel L2, max abs) |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        shape = f"d{r.head_dim} s{r.seqlen} b{r.batch} h{r.heads} {'causal' if r.causal else 'full'}"
        check = r.check if r.rel_l2 is None else f"{r.check} ({r.rel_l2:.1e}, {r.max_abs_diff:.1e} vs {r.check_against})"
        lines.append(f"| {shape} | {r.variant} | {fmt(r.hattn_tflops)} | {fmt(r.cudnn_tflops)} | "
                     f"{fmt(r.fa2_tflops)} | {fmt(r.hattn_over_cudnn, '.2f')} | {check} |")
    return "\n".join(lines)


def write_outputs(out_dir: Path, rows: list[Row], meta: dict) -> list[str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "compare.json").write_text(json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=1))
    with open(out_dir / "compare.csv", "w", newline="") as f:
        names = [n for n in Row.__dataclass_fields__]
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        for r in rows:
            d = asdict(r)
            d["notes"] = "; ".join(r.notes)
            writer.writerow(d)
    written = ["compare.json", "compare.csv"]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("compare_torch.py: matplotlib not installed; no plot", file=sys.stderr)
        return written
    plot(out_dir / "compare.png", rows, meta, plt)
    return written + ["compare.png"]


def plot(path: Path, rows: list[Row], meta: dict, plt) -> None:
    base = [r for r in rows if r.flags == 0]
    head_dims = sorted({r.head_dim for r in base})
    ablation = [r for r in rows if r.flags != 0]
    n_rows = max(len(head_dims), 1) + (1 if ablation else 0)
    fig = plt.figure(figsize=(12, 3.2 * n_rows))
    grid = fig.add_gridspec(n_rows, 2)
    series = (("hattn", "hattn_tflops", "tab:red"), ("cuDNN", "cudnn_tflops", "tab:blue"),
              ("FA2", "fa2_tflops", "tab:green"))
    for i, d in enumerate(head_dims):
        for j, causal in enumerate((False, True)):
            ax = fig.add_subplot(grid[i, j])
            sel = sorted((r for r in base if r.head_dim == d and r.causal == causal), key=lambda r: r.seqlen)
            for name, key, color in series:
                pts = [(r.seqlen, getattr(r, key)) for r in sel if getattr(r, key) is not None]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=name, color=color)
            ax.set_xscale("log", base=2)
            ax.minorticks_off()
            ax.set_xticks([r.seqlen for r in sel])
            ax.set_xticklabels([f"{r.seqlen // 1024}k" if r.seqlen >= 1024 else str(r.seqlen) for r in sel])
            ax.set_ylim(bottom=0)
            ax.set_title(f"head_dim {d}, {'causal' if causal else 'full'}")
            ax.set_ylabel("TFLOPS")
            ax.grid(alpha=0.3)
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


def summary_line(rows: list[Row]) -> str:
    ratios = [r.hattn_over_cudnn for r in rows if r.flags == 0 and r.hattn_over_cudnn]
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
    fails = [r for r in rows if r.check == "FAIL"]
    return (f"hattn/cuDNN geometric mean over {len(ratios)} shapes: {fmt(geo, '.3f')}; "
            f"checks: {sum(r.check == 'pass' for r in rows)} pass, {len(fails)} FAIL, "
            f"{sum(r.check == 'n/a' for r in rows)} n/a; hattn timed on {sum(r.hattn_ms is not None for r in rows)}"
            f"/{len(rows)} rows")


# ---- Main --------------------------------------------------------------------------------------------
def parse_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_masks(text: str) -> list[str]:
    masks = [m for m in text.split(",") if m]
    if not masks or any(m not in ("full", "causal") for m in masks):
        raise argparse.ArgumentTypeError(f"masks must be a comma-separated subset of full,causal, not {text!r}")
    return masks


def build_cases(args) -> tuple[list[Case], dict[Case, list[int]]]:
    cases = []
    for d in args.head_dims:
        for causal in [m == "causal" for m in args.masks]:
            for s in args.seqlens:
                if args.tokens % s or args.width % d:
                    raise SystemExit(f"tokens {args.tokens} / seqlen {s} or width {args.width} / head_dim {d} is not exact")
                cases.append(Case(d, s, causal, args.tokens // s, args.width // d))
    ablation: dict[Case, list[int]] = {}
    if not args.no_ablation:
        abl = Case(args.ablation_head_dim, args.ablation_seqlen, False, args.tokens // args.ablation_seqlen,
                   args.width // args.ablation_head_dim)
        if abl not in cases:
            cases.append(abl)
        ablation[abl] = [HATTN_FWD_NO_PINGPONG, HATTN_FWD_NO_INTRA_WG_OVERLAP,
                         HATTN_FWD_NO_PINGPONG | HATTN_FWD_NO_INTRA_WG_OVERLAP]
    return cases, ablation


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--lib", type=Path, default=REPO / "build" / "libhattn.so")
    parser.add_argument("--out", type=Path, default=Path("compare_out"), help="output folder")
    parser.add_argument("--head-dims", type=parse_ints, default=[64, 128, 256])
    parser.add_argument("--seqlens", type=parse_ints, default=[512, 1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--masks", type=parse_masks, default=["full", "causal"], help="full,causal")
    parser.add_argument("--tokens", type=int, default=16384, help="batch * seqlen")
    parser.add_argument("--width", type=int, default=2048, help="heads * head_dim")
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    parser.add_argument("--ablation-head-dim", type=int, default=128)
    parser.add_argument("--ablation-seqlen", type=int, default=8192)
    parser.add_argument("--no-ablation", action="store_true")
    parser.add_argument("--reps", type=int, default=30, help="timed calls per backend and shape (median)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--sets", type=int, default=2, help="independent input sets to rotate through")
    parser.add_argument("--queue-ahead-ms", type=float, default=20.0,
                        help="GPU sleep queued before the timed calls so the host runs ahead")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--quick", action="store_true", help="d128, seqlen 1k and 4k, full and causal, no ablation")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the ctypes struct layout (and the library's contiguous-params helper if "
                             "the library exists); needs neither torch nor a GPU")
    args = parser.parse_args()
    if args.quick:
        args.head_dims, args.seqlens, args.no_ablation = [128], [1024, 4096], True
    if args.reps < 20:
        parser.error("--reps must be >= 20 (a median needs enough samples)")
    if args.sets < 2:
        parser.error("--sets must be >= 2 (rotating inputs keeps L2 from serving the previous call's data)")

    check_struct_layout()
    cases, ablation = build_cases(args)
    if args.dry_run:
        print(f"dry run: ctypes hattn_fwd_params matches the x86-64 table ({EXPECTED_SIZE} bytes, "
              f"{len(EXPECTED_OFFSETS)} fields); the sweep has {len(cases)} shapes "
              f"+ {sum(map(len, ablation.values()))} ablation variants")
        if args.lib.exists():
            Hattn(args.lib).check_contiguous_helper()
            print(f"dry run: {args.lib}: hattn_fwd_params_contiguous agrees with the ctypes mirror")
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
    except SystemExit as error:  # we fill params ourselves, so report it and carry on
        print(f"compare_torch.py: WARNING: {error}", file=sys.stderr)

    # `timeout` sends SIGTERM: turn it into an exception so the partial results still get written.
    def on_sigterm(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_sigterm)

    rows: list[Row] = []
    meta: dict = {}
    interrupted = False
    try:
        run_sweep(args, hattn, cases, ablation, rows, meta)
    except KeyboardInterrupt:
        interrupted = True
        print("compare_torch.py: interrupted; writing what was measured", file=sys.stderr)
    finally:
        written = write_outputs(args.out, rows, meta)
    print(markdown_table(rows))
    print()
    print(summary_line(rows) + (" (INTERRUPTED)" if interrupted else ""))
    print(f"wrote {', '.join(str(args.out / w) for w in written)}")
    failed = interrupted or any(r.check == "FAIL" or r.hattn_ms is None for r in rows) or not rows
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
