#!/usr/bin/env python3
"""Summarise the microbenchmarks' Google Benchmark JSON: a markdown table on stdout, a PNG.

    scripts/plot_micro.py OUT/mufu.json OUT/wgmma.json ... [--png OUT/micro.png]

Inputs are files written with --benchmark_out=X.json --benchmark_out_format=json by
bench/{mufu,wgmma,tma,exp_vs_mma}_bench. Rates "per SM per clock" use the SM clock each kernel
measured on itself (clock64 against %globaltimer), so they compare directly with the hardware's
documented peaks (16 ex2, 4096 bf16 / 8192 fp8 FLOP per SM per clock).
"""
import argparse
import json
import sys
from collections import OrderedDict

# Counters shown in the table, in this order, when a benchmark reports them.
TABLE_COUNTERS = [
    ("per_SM_per_clk", "per SM per clk", "{:.2f}"),
    ("pct_of_peak", "% of peak", "{:.1f}"),
    ("TFLOPS", "TFLOPS", "{:.1f}"),
    ("elements_per_s", "elem/s", "{:.3g}"),
    ("read_TBps", "read TB/s", "{:.2f}"),
    ("read_plus_write_TBps", "read+write TB/s", "{:.2f}"),
    ("exp_per_clk_per_SM", "exp/clk/SM", "{:.2f}"),
    ("measured_exp_over_mma", "exp/mma meas.", "{:.2f}"),
    ("theory_exp_over_mma", "exp/mma theory", "{:.2f}"),
    ("c_over_max_ab", "c/max(a,b)", "{:.2f}"),
    ("c_over_sum_ab", "c/(a+b)", "{:.2f}"),
    ("poly_max_rel_err", "poly rel err", "{:.2e}"),
    ("kernel_cycles", "SM cycles", "{:.4g}"),
    ("clock_MHz", "clock MHz", "{:.0f}"),
]


def load(paths):
    """name -> (bench file stem, averaged iteration entry), in file order."""
    runs = OrderedDict()
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        for b in data.get("benchmarks", []):
            if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
                continue
            runs.setdefault(b["name"], (stem, []))[1].append(b)
    averaged = OrderedDict()
    for name, (stem, entries) in runs.items():
        avg = dict(entries[-1])
        for key, value in entries[-1].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                avg[key] = sum(e.get(key, 0.0) for e in entries) / len(entries)
        averaged[name] = (stem, avg)
    return averaged


def to_ms(entry):
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[entry.get("time_unit", "ns")]
    return entry["real_time"] * scale


def markdown(runs):
    lines = []
    by_file = OrderedDict()
    for name, (stem, entry) in runs.items():
        by_file.setdefault(stem, []).append((name, entry))
    for stem, entries in by_file.items():
        cols = [c for c in TABLE_COUNTERS if any(c[0] in e for _, e in entries)]
        lines.append(f"\n### {stem}\n")
        lines.append("| benchmark | ms | " + " | ".join(c[1] for c in cols) + " |")
        lines.append("|---" * (len(cols) + 2) + "|")
        for name, e in entries:
            cells = [fmt.format(e[key]) if key in e else "-" for key, _, fmt in cols]
            lines.append(f"| {name} | {to_ms(e):.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def exp_vs_mma_rows(runs):
    """label -> {case: entry} for exp_vs_mma/<dtype>/<d>/<case>."""
    rows = OrderedDict()
    for name, (_, e) in runs.items():
        parts = name.split("/")
        if parts[0] == "exp_vs_mma" and len(parts) == 4:
            rows.setdefault(parts[1] + "/" + parts[2], {})[parts[3]] = e
    return rows


def plot(runs, png):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"plot_micro: matplotlib not available, no {png}", file=sys.stderr)
        return False

    fig, axes = plt.subplots(2, 2, figsize=(16, 11))

    # MUFU and FMA-pipe exp2: elements per SM per clock against MUFU's 16.
    ax = axes[0][0]
    mufu = [(n, e) for n, (s, e) in runs.items() if n.split("/")[0] in ("mufu", "fma", "mixed")]
    if mufu:
        ax.bar(range(len(mufu)), [e.get("per_SM_per_clk", 0) for _, e in mufu], color="tab:blue")
        ax.axhline(16, color="k", ls="--", lw=1, label="MUFU peak 16 /SM/clk")
        ax.set_xticks(range(len(mufu)), [n for n, _ in mufu], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("2^x elements / SM / clk")
        ax.legend(fontsize=8)
    ax.set_title("exp2 throughput (mufu_bench)")

    # wgmma: % of the dense peak per case.
    ax = axes[0][1]
    mma = [(n, e) for n, (s, e) in runs.items() if n.startswith("wgmma/")]
    if mma:
        colors = ["tab:orange" if "/e4m3/" in n else "tab:green" for n, _ in mma]
        ax.bar(range(len(mma)), [e.get("pct_of_peak", 0) for _, e in mma], color=colors)
        ax.axhline(100, color="k", ls="--", lw=1)
        ax.set_xticks(range(len(mma)), [n[len("wgmma/"):] for n, _ in mma], rotation=90, fontsize=6)
        ax.set_ylabel("% of dense peak (4096 bf16 / 8192 fp8 FLOP/clk/SM)")
    ax.set_title("wgmma throughput (wgmma_bench; green bf16/fp16, orange e4m3)")

    # TMA read stream against the d2d copy.
    ax = axes[1][0]
    bw = []
    for n, (s, e) in runs.items():
        if n == "memcpy/d2d":
            bw += [("memcpy read+write", e.get("read_plus_write_TBps", 0)), ("memcpy read", e.get("read_TBps", 0))]
        elif n.startswith("tma/"):
            bw.append((n + " read", e.get("read_TBps", 0)))
    if bw:
        ax.bar(range(len(bw)), [v for _, v in bw], color="tab:purple")
        ax.set_xticks(range(len(bw)), [k for k, _ in bw], rotation=15, fontsize=8)
        ax.set_ylabel("TB/s")
    ax.set_title("HBM bandwidth (tma_bench)")

    # The experiment: b, b1 and c relative to a, in SM cycles, with the theoretical exp/mma.
    ax = axes[1][1]
    rows = exp_vs_mma_rows(runs)
    if rows:
        labels = list(rows)
        cases = [("b_exp_2wg", "b exp"), ("c_2mma_1exp", "c both"), ("b1_exp_1wg", "b1 exp (1 wg)")]
        width = 0.25
        for i, (case, legend) in enumerate(cases):
            vals = []
            for lab in labels:
                a = rows[lab].get("a_mma_2wg", {}).get("kernel_cycles", 0)
                x = rows[lab].get(case, {}).get("kernel_cycles", 0)
                vals.append(x / a if a else 0)
            ax.bar([j + (i - 1) * width for j in range(len(labels))], vals, width, label=legend + " / a")
        theory = [next(iter(rows[lab].values())).get("theory_exp_over_mma", 0) for lab in labels]
        ax.scatter(range(len(labels)), theory, color="k", marker="_", s=400, zorder=3, label="theory exp/mma")
        ax.axhline(1, color="k", ls=":", lw=1)
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_ylabel("SM cycles relative to a (mma alone)")
        ax.legend(fontsize=8)
    ax.set_title("exp vs mma per attention step (exp_vs_mma_bench)")

    fig.tight_layout()
    fig.savefig(png, dpi=120)
    print(f"plot_micro: wrote {png}", file=sys.stderr)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="+", help="Google Benchmark JSON files")
    parser.add_argument("--png", default="micro.png", help="output image (default: micro.png)")
    args = parser.parse_args()
    runs = load(args.json)
    if not runs:
        print("plot_micro: no benchmark results in the inputs", file=sys.stderr)
        return 1
    print(markdown(runs))
    plot(runs, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
