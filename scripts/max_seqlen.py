#!/usr/bin/env python3
"""The longest sequence hattn's forward runs in GPU memory, checked against cuDNN and float64.

For each --heads value (default 16), head_dim 128, bf16, batch 1, seqlen_q = seqlen_k = s
(causal unless --full), contiguous [batch, seqlen, heads, head_dim] tensors:

1. Validation limit (CPU only): the largest s that hattn_fwd_validate accepts for this layout,
   found by bisection with placeholder addresses (never dereferenced), and the status and message
   it gives one past it: past its int32 / TMA limits hattn must return a status, not run.
2. Memory limits, by allocation probes (doubling, then bisection to --granularity tokens; nothing
   is computed): the largest s whose Q, K, V, O, LSE fit ("hattn alone"), and the largest whose
   tensors fit together with cuDNN's output and LSE ("checked"); both keep --reserve-gib free
   for cuDNN's workspace and the float64 reference.
3. Calibration at --calibrate-seqlen: one hattn_fwd and one cuDNN call, timed; run times are
   extrapolated quadratically in s to stay inside --budget-s.
4. Run A, "checked": at the largest s that fits the checked memory limit and the time left,
   hattn_fwd (status, time, peak memory), then cuDNN (PyTorch SDPA, cuDNN backend, through
   aten._scaled_dot_product_cudnn_attention to get its LSE too): O relative L2 error and max
   |diff|, LSE max |diff|, computed in chunks.
5. Run B, "hattn alone": at the hattn-alone memory limit, when that is longer than run A and its
   predicted time fits what is left; otherwise its predicted time is reported.
Both runs also compare sampled rows (first, last, middle, random, and the rows on either side of
every multiple of 2^31 elements of Q's offsets, where 32-bit indexing would wrap) with a float64
reference computed in key chunks (online softmax): O and LSE for every head of those rows.

Output: a markdown table on stdout, --json FILE with everything. Exit status 0 when every run
that happened passed its checks (rel L2 < 1e-2 against cuDNN, sampled rows within 2e-2 of float64,
LSE within 1e-3), 1 otherwise, 2 for a usage error.

  python3 scripts/max_seqlen.py --json out/maxlen.json                 # heads 16, 300 s budget
  python3 scripts/max_seqlen.py --heads 16,1 --budget-s 1200 --full    # more configurations, longer
  python3 scripts/max_seqlen.py --dry-run                              # step 1 only (no GPU, no torch)
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import random
import signal
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import hattn_ctypes as hc  # noqa: E402  (the one ctypes mirror of include/hattn.h)

INT32_MAX = 2**31 - 1
HEAD_DIM = 128
O_REL_L2_LIMIT = 1e-2       # hattn O vs cuDNN O (bf16 both)
SAMPLED_ABS_LIMIT = 2e-2    # hattn O rows vs float64 (|O| <= max |V| ~ 5 for N(0,1) inputs; bf16 output)
LSE_ABS_LIMIT = 1e-3        # fp32 LSE vs float64 / cuDNN
SAFETY = 1.3                # predicted times are multiplied by this before comparing with the budget
GIB = 2**30


def fmt(x, spec=".3g") -> str:
    return "n/a" if x is None else format(x, spec)


# ---- 1. validation limit (CPU) -------------------------------------------------------------------
def validate_seqlen(lib: hc.Hattn, s: int, heads: int, causal: bool) -> tuple[int, str]:
    fake = [0x100000 * (i + 1) for i in range(4)]  # 16-byte aligned, never dereferenced
    p = lib.params_contiguous(*fake, 1, heads, heads, s, s, HEAD_DIM, hc.HATTN_DTYPE_BF16)
    p.lse = 0x900000
    p.causal = int(causal)
    return lib.validate(p)


def validation_limit(lib: hc.Hattn, heads: int, causal: bool) -> dict:
    """Largest s in [1, INT32_MAX] hattn_fwd_validate accepts (validity is monotone in s here),
    and what it says one past it."""
    if validate_seqlen(lib, INT32_MAX, heads, causal)[0] == hc.HATTN_SUCCESS:
        return {"max_seqlen": INT32_MAX, "past": None, "note": "every int seqlen validates"}
    lo, hi = 1, INT32_MAX  # lo validates, hi does not
    if validate_seqlen(lib, lo, heads, causal)[0] != hc.HATTN_SUCCESS:
        return {"max_seqlen": 0, "past": validate_seqlen(lib, lo, heads, causal)}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if validate_seqlen(lib, mid, heads, causal)[0] == hc.HATTN_SUCCESS:
            lo = mid
        else:
            hi = mid
    status, message = validate_seqlen(lib, hi, heads, causal)
    return {"max_seqlen": lo, "past_seqlen": hi, "past_status": hc.status_name(status), "past_message": message}


# ---- the GPU side -----------------------------------------------------------------------------------
class Runner:
    def __init__(self, args, lib: hc.Hattn):
        import torch

        self.torch = torch
        self.args = args
        self.lib = lib
        self.device = torch.device("cuda")
        self.t0 = time.monotonic()
        self.generator = torch.Generator(device=self.device)

    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.t0)

    # -- 2. memory limits by allocation probes --
    def fits(self, s: int, heads: int, bf16_tensors: int, fp32_rows: int) -> bool:
        torch = self.torch
        bufs = []
        try:
            for _ in range(bf16_tensors):
                bufs.append(torch.empty((1, s, heads, HEAD_DIM), dtype=torch.bfloat16, device=self.device))
            for _ in range(fp32_rows):
                bufs.append(torch.empty((1, heads, s), dtype=torch.float32, device=self.device))
            bufs.append(torch.empty(int(self.args.reserve_gib * GIB), dtype=torch.uint8, device=self.device))
            return True
        except torch.cuda.OutOfMemoryError:
            return False
        finally:
            del bufs
            torch.cuda.empty_cache()

    def memory_limit(self, heads: int, bf16_tensors: int, fp32_rows: int, cap: int) -> int:
        """Largest multiple of --granularity (<= cap) whose buffers fit; 0 if none does."""
        g = self.args.granularity
        s = g
        if not self.fits(s, heads, bf16_tensors, fp32_rows):
            return 0
        while s * 2 <= cap and self.fits(s * 2, heads, bf16_tensors, fp32_rows):
            s *= 2
        lo, hi = s, min(s * 2, cap // g * g + g)  # lo fits; hi does not (or is past the cap)
        while hi - lo > g:
            mid = (lo + hi) // 2 // g * g
            if self.fits(mid, heads, bf16_tensors, fp32_rows):
                lo = mid
            else:
                hi = mid
        return lo

    # -- the calls --
    def inputs(self, s: int, heads: int, seed: int):
        torch = self.torch
        self.generator.manual_seed(seed)
        return [torch.randn((1, s, heads, HEAD_DIM), dtype=torch.bfloat16, device=self.device, generator=self.generator)
                for _ in range(3)]

    def timed(self, fn):
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        result = fn()
        end.record()
        torch.cuda.synchronize()
        return result, start.elapsed_time(end) / 1e3

    def hattn(self, q, k, v, causal: bool):
        """(o, lse, seconds) or raises HattnError."""
        torch = self.torch
        o = torch.empty_like(q)
        lse = torch.empty((1, q.shape[2], q.shape[1]), dtype=torch.float32, device=self.device)
        _, seconds = self.timed(lambda: self.lib.fwd_torch(q, k, v, causal=causal, out=o, lse=lse))
        return o, lse, seconds

    def cudnn(self, q, k, v, causal: bool):
        """(o [b, s, h, d] view, lse [b, h, s] or None, seconds, note)."""
        torch = self.torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            try:
                op = torch.ops.aten._scaled_dot_product_cudnn_attention
                result, seconds = self.timed(lambda: op(qt, kt, vt, None, True, 0.0, causal, False))
                out, lse = result[0], result[1]
                return out.transpose(1, 2), lse.reshape(1, q.shape[2], q.shape[1]), seconds, ""
            except (RuntimeError, TypeError) as error:
                if isinstance(error, torch.cuda.OutOfMemoryError):
                    raise
                note = f"cuDNN LSE not available ({str(error).splitlines()[0][:120]}); O only"
            out, seconds = self.timed(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
            return out.transpose(1, 2), None, seconds, note

    # -- checks --
    def compare_chunked(self, a, b) -> tuple[float, float]:
        """(relative L2 of a - b against b, max |a - b|) over [1, s, h, d] tensors, in chunks of
        rows small enough that their fp32 copies take about half a GiB."""
        chunk_rows = max(1, int(0.5 * GIB) // (a.shape[2] * a.shape[3] * 4 * 3))
        err2 = ref2 = 0.0
        worst = 0.0
        for i in range(0, a.shape[1], chunk_rows):
            x, y = a[:, i:i + chunk_rows].float(), b[:, i:i + chunk_rows].float()
            diff = x - y
            err2 += float((diff * diff).sum())
            ref2 += float((y * y).sum())
            worst = max(worst, float(diff.abs().max()))
            del x, y, diff
        return math.sqrt(err2 / max(ref2, 1e-30)), worst

    def sampled_rows(self, s: int, heads: int) -> list[int]:
        rows = {0, 1, s // 2, s - 2, s - 1}
        step = heads * HEAD_DIM  # Q elements per row
        m = 1
        while m * 2**31 // step < s:
            r = -(-m * 2**31 // step)  # first row whose offsets reach m * 2^31 elements
            rows.update({r - 1, r} & set(range(s)))
            m += 1
        rng = random.Random(s)
        rows.update(rng.randrange(s) for _ in range(6))
        return sorted(r for r in rows if 0 <= r < s)

    def reference_rows(self, q, k, v, rows: list[int], causal: bool, scale: float):
        """float64 O [m, h, d] and LSE [m, h] of the given query rows, keys in chunks (online softmax)."""
        torch = self.torch
        idx = torch.tensor(rows, device=self.device)
        qr = q[0].index_select(0, idx).double()  # [m, h, d]
        m, h = qr.shape[0], qr.shape[1]
        last_key = max(rows) if causal else k.shape[1] - 1
        row_max = torch.full((m, h), -math.inf, dtype=torch.float64, device=self.device)
        row_sum = torch.zeros((m, h), dtype=torch.float64, device=self.device)
        acc = torch.zeros((m, h, HEAD_DIM), dtype=torch.float64, device=self.device)
        chunk = self.args.reference_chunk
        for j0 in range(0, last_key + 1, chunk):
            j1 = min(j0 + chunk, last_key + 1)
            kc, vc = k[0, j0:j1].double(), v[0, j0:j1].double()  # [c, h, d]
            scores = torch.einsum("mhd,chd->mhc", qr, kc) * scale
            if causal:
                keys = torch.arange(j0, j1, device=self.device)
                scores.masked_fill_(keys[None, None, :] > idx[:, None, None], -math.inf)
            new_max = torch.maximum(row_max, scores.amax(dim=-1))
            safe_max = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
            correction = torch.exp(row_max - safe_max)
            p = torch.exp(scores - safe_max[..., None])
            row_sum = row_sum * correction + p.sum(dim=-1)
            acc = acc * correction[..., None] + torch.einsum("mhc,chd->mhd", p, vc)
            row_max = new_max
            del kc, vc, scores, p
        return acc / row_sum[..., None], row_max + torch.log(row_sum)

    # -- one run --
    def run(self, label: str, s: int, heads: int, causal: bool, with_cudnn: bool) -> dict:
        torch = self.torch
        row: dict = {"run": label, "heads": heads, "seqlen": s, "causal": causal,
                     "q_elements": s * heads * HEAD_DIM, "offsets_beyond_int32": s * heads * HEAD_DIM > INT32_MAX,
                     "checks": [], "notes": []}
        flops = 4.0 * heads * s * s * HEAD_DIM * (0.5 if causal else 1.0)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        try:
            q, k, v = self.inputs(s, heads, seed=s)
            o, lse, seconds = self.hattn(q, k, v, causal)
        except hc.HattnError as error:
            row.update(hattn_status=hc.status_name(error.status), hattn_message=str(error))
            row["checks"].append(("hattn status", False))
            return row
        except torch.cuda.OutOfMemoryError as error:
            row.update(hattn_status="not run", hattn_message=str(error).splitlines()[0][:160])
            row["checks"].append(("memory for the inputs (the probe said they fit)", False))
            torch.cuda.empty_cache()
            return row
        row.update(hattn_status="HATTN_SUCCESS", hattn_s=seconds, hattn_tflops=flops / seconds / 1e12,
                   hattn_peak_gib=torch.cuda.max_memory_allocated() / GIB)
        free, total = torch.cuda.mem_get_info()
        row.update(device_used_gib=(total - free) / GIB, device_total_gib=total / GIB)

        rows = self.sampled_rows(s, heads)
        t_ref = time.monotonic()
        try:
            ref_o, ref_lse = self.reference_rows(q, k, v, rows, causal, 1.0 / math.sqrt(HEAD_DIM))
            idx = torch.tensor(rows, device=self.device)
            got_o = o[0].index_select(0, idx).double()
            got_lse = lse[0].index_select(1, idx).T.double()
            row.update(sampled_rows=len(rows), sampled_row_ids=rows,
                       sampled_o_max_abs=float((got_o - ref_o).abs().max()),
                       sampled_lse_max_abs=float((got_lse - ref_lse).abs().max()),
                       reference_s=time.monotonic() - t_ref)
            ok_o = row["sampled_o_max_abs"] < SAMPLED_ABS_LIMIT  # NaN fails
            ok_lse = row["sampled_lse_max_abs"] < LSE_ABS_LIMIT
            row["checks"] += [("sampled O vs float64", ok_o), ("sampled LSE vs float64", ok_lse)]
            del ref_o, ref_lse, got_o, got_lse
        except torch.cuda.OutOfMemoryError as error:
            row["notes"].append(f"float64 reference n/a (out of memory: raise --reserve-gib): {str(error).splitlines()[0][:100]}")
            torch.cuda.empty_cache()

        if with_cudnn:
            try:
                out, c_lse, c_seconds, note = self.cudnn(q, k, v, causal)
                row.update(cudnn_s=c_seconds, cudnn_tflops=flops / c_seconds / 1e12,
                           peak_with_cudnn_gib=torch.cuda.max_memory_allocated() / GIB)
                if note:
                    row["notes"].append(note)
                row["o_rel_l2_vs_cudnn"], row["o_max_abs_vs_cudnn"] = self.compare_chunked(o, out)
                row["checks"].append(("O vs cuDNN", row["o_rel_l2_vs_cudnn"] < O_REL_L2_LIMIT))
                if c_lse is not None:
                    c_lse = c_lse.float()
                    row["lse_max_abs_vs_cudnn"] = float((lse - c_lse).abs().max())
                    ok = row["lse_max_abs_vs_cudnn"] < LSE_ABS_LIMIT
                    # The sampled rows check hattn's LSE against float64; if cuDNN's stats come in
                    # log2 units, say so rather than fail on a convention.
                    if not ok and float((lse - c_lse * math.log(2)).abs().max()) < LSE_ABS_LIMIT:
                        row["notes"].append("cuDNN's LSE is in log2 units here; compared after converting")
                        row["lse_max_abs_vs_cudnn"] = float((lse - c_lse * math.log(2)).abs().max())
                        ok = True
                    row["checks"].append(("LSE vs cuDNN", ok))
                del out, c_lse
            except (RuntimeError, torch.cuda.OutOfMemoryError) as error:
                row["notes"].append(f"cuDNN n/a: {str(error).splitlines()[0][:160]}")
        del q, k, v, o, lse
        torch.cuda.empty_cache()
        return row

    def config(self, heads: int, causal: bool, budget_share: float) -> list[dict]:
        """Memory limits, calibration, run A and (if it fits the time) run B for one head count."""
        torch = self.torch
        t_start = time.monotonic()

        def share_left() -> float:
            return min(budget_share - (time.monotonic() - t_start), self.left())

        cap = INT32_MAX // self.args.granularity * self.args.granularity
        summary: dict = {"run": "limits", "heads": heads, "causal": causal, "notes": [], "checks": []}
        summary["validation"] = validation_limit(self.lib, heads, causal)
        cap = min(cap, summary["validation"]["max_seqlen"])
        summary["mem_hattn_alone"] = self.memory_limit(heads, 4, 1, cap)      # q, k, v, o + lse
        summary["mem_checked"] = self.memory_limit(heads, 5, 2, cap)          # + cuDNN's out and lse
        results = [summary]

        if summary["mem_checked"] < self.args.granularity:
            summary["notes"].append("not even the smallest problem fits next to the reserve (--reserve-gib)")
            summary["checks"].append(("memory", False))
            return results
        # Calibration, after a first call of each at 4k (module loading, cuDNN plan building).
        s0 = min(self.args.calibrate_seqlen, summary["mem_checked"])
        try:
            for seqlen in (4096, s0):
                q, k, v = self.inputs(seqlen, heads, seed=seqlen)
                t_h = self.hattn(q, k, v, causal)[2]
        except hc.HattnError as error:
            summary["notes"].append(f"calibration: hattn_fwd failed at s {seqlen}: {error}")
            summary["checks"].append(("calibration", False))
            return results
        try:
            self.cudnn(*self.inputs(4096, heads, seed=4096), causal)
        except (RuntimeError, torch.cuda.OutOfMemoryError):
            pass
        try:
            t_c = self.cudnn(q, k, v, causal)[2]
        except (RuntimeError, torch.cuda.OutOfMemoryError) as error:
            t_c = t_h
            summary["notes"].append(f"calibration: cuDNN failed ({str(error).splitlines()[0][:100]}); assuming hattn's time")
        del q, k, v
        torch.cuda.empty_cache()
        summary.update(calibrate_seqlen=s0, calibrate_hattn_s=t_h, calibrate_cudnn_s=t_c)

        def predict(s: int, seconds_at_s0: float) -> float:
            return seconds_at_s0 * (s / s0) ** 2

        g = self.args.granularity
        # Run A: checked against cuDNN. Time: hattn + cuDNN + ~10% for the reference and checks.
        avail = share_left() - self.args.overhead_s
        s_time = int(s0 * math.sqrt(max(avail, 0) / (SAFETY * 1.1 * (t_h + t_c)))) // g * g
        s_a = min(summary["mem_checked"], s_time)
        summary["time_limit_checked"] = s_time
        if s_a < g:
            summary["notes"].append(f"no time left for a checked run ({avail:.0f} s)")
        else:
            row = self.run("A checked", s_a, heads, causal, with_cudnn=True)
            row["limited_by"] = "memory" if s_a == summary["mem_checked"] else "time budget"
            results.append(row)

        # Run B: hattn alone at its memory limit.
        s_b = summary["mem_hattn_alone"]
        predicted = predict(s_b, t_h)
        summary["predicted_hattn_s_at_mem_limit"] = predicted
        if s_b > s_a >= g and SAFETY * predicted * 1.1 + self.args.overhead_s <= share_left():
            row = self.run("B hattn alone", s_b, heads, causal, with_cudnn=False)
            row["limited_by"] = "memory"
            results.append(row)
        elif s_b > s_a:
            summary["notes"].append(f"hattn alone fits up to s {s_b} but one call there is predicted at "
                                    f"{predicted:.0f} s; not run in this budget (--budget-s)")
        return results


def markdown(results: list[dict]) -> str:
    lines = ["| heads | hattn_fwd_validate accepts s <= | one past it | memory limit: hattn alone | "
             "memory limit: with cuDNN's outputs | calibration (hattn / cuDNN s) | hattn predicted at its memory limit | notes |",
             "|---|---:|---|---:|---:|---|---:|---|"]
    for r in results:
        if r["run"] != "limits":
            continue
        val = r["validation"]
        past = f"{val['past_status']}: {val['past_message']}" if val.get("past_status") else "-"
        lines.append(f"| {r['heads']} | {val['max_seqlen']} | {past} | {r.get('mem_hattn_alone')} | {r.get('mem_checked')} | "
                     f"s {r.get('calibrate_seqlen')}: {fmt(r.get('calibrate_hattn_s'))} / {fmt(r.get('calibrate_cudnn_s'))} | "
                     f"{fmt(r.get('predicted_hattn_s_at_mem_limit'), '.0f')} s | {'; '.join(r['notes'])} |")
    lines += ["", "| heads | run | seqlen | limited by | hattn status | hattn s (TFLOPS) | peak GiB | O rel L2 / max vs cuDNN | "
              "LSE max vs cuDNN | sampled rows vs float64: O / LSE max | cuDNN s | Q offsets > int32 | verdict |",
              "|---|---|---:|---|---|---|---:|---|---|---|---:|---|---|"]
    for r in results:
        if r["run"] == "limits":
            continue
        failed = [name for name, passed in r["checks"] if not passed]
        lines.append(
            f"| {r['heads']} | {r['run']} | {r['seqlen']} | {r.get('limited_by', '')} | {r.get('hattn_status')} | "
            f"{fmt(r.get('hattn_s'))} ({fmt(r.get('hattn_tflops'), '.0f')}) | {fmt(r.get('hattn_peak_gib'), '.1f')} | "
            f"{fmt(r.get('o_rel_l2_vs_cudnn'), '.2e')} / {fmt(r.get('o_max_abs_vs_cudnn'), '.2e')} | "
            f"{fmt(r.get('lse_max_abs_vs_cudnn'), '.2e')} | {fmt(r.get('sampled_o_max_abs'), '.2e')} / "
            f"{fmt(r.get('sampled_lse_max_abs'), '.2e')} ({r.get('sampled_rows', 0)} rows) | {fmt(r.get('cudnn_s'))} | "
            f"{'yes' if r.get('offsets_beyond_int32') else 'no'} | "
            f"{'FAIL: ' + ', '.join(failed) if failed else 'pass'}{'; ' + '; '.join(r['notes']) if r['notes'] else ''}"
            f"{'; ' + r['hattn_message'] if r.get('hattn_message') else ''} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--lib", type=Path, default=None, help="libhattn.so (default: $HATTN_LIB or build/libhattn.so)")
    parser.add_argument("--heads", default="16", help="comma-separated head counts, one configuration each (16)")
    parser.add_argument("--full", action="store_true", help="no causal mask (default: causal)")
    parser.add_argument("--budget-s", type=float, default=300.0, help="time for everything, split between head counts")
    parser.add_argument("--overhead-s", type=float, default=30.0,
                        help="time kept per run for allocation, the float64 reference and the checks")
    parser.add_argument("--granularity", type=int, default=1024, help="seqlen step of the memory search")
    parser.add_argument("--reserve-gib", type=float, default=6.0,
                        help="memory kept free for cuDNN's workspace and the reference (GiB)")
    parser.add_argument("--calibrate-seqlen", type=int, default=32768)
    parser.add_argument("--reference-chunk", type=int, default=32768, help="keys per float64 reference chunk")
    parser.add_argument("--json", type=Path, help="write every number here")
    parser.add_argument("--dry-run", action="store_true", help="validation limits only (no torch, no GPU)")
    args = parser.parse_args()
    try:
        heads_list = [int(h) for h in args.heads.split(",") if h]
    except ValueError:
        parser.error(f"--heads {args.heads!r}: comma-separated integers")
    if not heads_list or min(heads_list) < 1 or args.granularity < 128:
        parser.error("--heads must be positive and --granularity >= 128")
    causal = not args.full

    lib_path = args.lib or hc.default_library_path()
    if not Path(lib_path).exists():
        print(f"max_seqlen.py: {lib_path} not found (build first: cmake --build build)", file=sys.stderr)
        return 2
    lib = hc.Hattn(lib_path)
    if args.dry_run:
        for heads in heads_list:
            val = validation_limit(lib, heads, causal)
            print(f"heads {heads}, d{HEAD_DIM} bf16 b1 {'causal' if causal else 'full'}: hattn_fwd_validate accepts "
                  f"seqlen <= {val['max_seqlen']}" + (f"; at {val['past_seqlen']}: {val['past_status']}: "
                                                      f"{val['past_message']}" if val.get("past_status") else ""))
        return 0
    if importlib.util.find_spec("torch") is None:
        print("max_seqlen.py: PyTorch is not installed (only --dry-run works without it)", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("max_seqlen.py: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    runner = Runner(args, lib)

    # `timeout` sends SIGTERM: turn it into an exception so what was measured is still written.
    def on_sigterm(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_sigterm)
    props = torch.cuda.get_device_properties(0)
    meta = {"device": props.name, "memory_gib": props.total_memory / GIB, "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(), "head_dim": HEAD_DIM, "dtype": "bf16", "batch": 1,
            "causal": causal, "budget_s": args.budget_s, "reserve_gib": args.reserve_gib}
    results: list[dict] = []
    try:
        for i, heads in enumerate(heads_list):
            share = runner.left() / (len(heads_list) - i)
            print(f"[heads {heads}] {share:.0f} s", file=sys.stderr, flush=True)
            results += runner.config(heads, causal, share)
    except KeyboardInterrupt:
        results.append({"run": "interrupted", "heads": 0, "checks": [("finished", False)], "notes": []})
    finally:
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    print(f"hattn forward, longest sequences: {meta['device']} ({meta['memory_gib']:.0f} GiB), torch {meta['torch']}, "
          f"cuDNN {meta['cudnn']}, d{HEAD_DIM} bf16 batch 1 {'causal' if causal else 'full'}\n")
    print(markdown([r for r in results if r["run"] != "interrupted"]))
    failed = [r for r in results if not all(passed for _, passed in r.get("checks", []))]
    ran = [r for r in results if r["run"] not in ("limits", "interrupted")]
    print(f"\n{len(ran)} runs, {len(failed)} with a failed check" + (" (INTERRUPTED)" if any(
        r["run"] == "interrupted" for r in results) else ""))
    return 1 if failed or not ran else 0


if __name__ == "__main__":
    sys.exit(main())
