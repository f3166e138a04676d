#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's per-instruction SASS page.

    python3 scripts/sass_stalls.py SASS.csv [--kernel REGEX] [--top N] [--opcodes N]
    python3 scripts/sass_stalls.py profile_out/ncu.tgz --file sass_bwd_d128_s8192_full_bf16.csv

SASS.csv is what `profile_fwd.sh SASS_PAGE=1` writes (into its ncu.tgz) for hattn's kernels and the
peers': `ncu -i REPORT --page source --csv --print-source sass`, one block per profiled kernel. For
each kernel whose name matches --kernel (default: every kernel) it prints
  * per opcode (HGMMA, MUFU, FFMA, UIADD3, ...): instructions executed, warp-state samples and the
    stall reasons that hold more than 2% of that opcode's samples;
  * the --top instructions by samples, in program order, each with its three largest reasons.
A sample is charged to the instruction a warp waits to issue, so a wait at a barrier shows on the
instruction after the BAR.SYNC (the stall reason "barrier"), and a wait for a wgmma group on its
WARPGROUP.DEPBAR. Where the samples of one kernel sum to 100%, the warps that only wait (a TMA
producer spinning on its mbarrier) count too: read the consumers' lines by their opcodes.
"""
from __future__ import annotations

import argparse
import collections
import csv
import io
import re
import sys
import tarfile
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
PREDICATE = re.compile(r"^@!?U?P\w+\s+")


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return 0.0


def read_blocks(lines) -> list[tuple[str, list[dict[str, str]]]]:
    """(kernel name, its instruction rows) per block of the page: a "Kernel Name" line, a header,
    the rows. ncu can print the same kernel's block twice; an identical repeat is dropped."""
    blocks: list[tuple[str, list[dict[str, str]]]] = []
    header = None
    for row in csv.reader(lines):
        if not row:
            continue
        if row[0] == "Kernel Name":
            blocks.append((row[1] if len(row) > 1 else "?", []))
            header = None
        elif row[0] == "Address":
            header = row
        elif header is not None and blocks:
            blocks[-1][1].append(dict(zip(header, row)))
    unique: list[tuple[str, list[dict[str, str]]]] = []
    for name, rows in blocks:
        if (name, rows) not in unique:
            unique.append((name, rows))
    return unique


def open_page(path: Path, member: str | None) -> list[str]:
    if path.name.endswith((".tgz", ".tar.gz")):
        with tarfile.open(path) as tar:
            names = [m for m in tar.getnames() if m.endswith(".csv") and Path(m).name.startswith("sass_")]
            chosen = [m for m in names if member and Path(m).name == member]
            if not chosen:
                listed = ", ".join(sorted(Path(m).name for m in names)) or "none (profiled without SASS_PAGE=1?)"
                sys.exit(f"sass_stalls.py: --file names one of the archive's SASS pages: {listed}")
            f = tar.extractfile(chosen[0])
            return io.TextIOWrapper(f, encoding="utf-8").read().splitlines()
    return path.read_text(encoding="utf-8").splitlines()


def reasons_of(row: dict[str, str]) -> dict[str, float]:
    return {k[len("stall_"):]: number(v) for k, v in row.items()
            if k.startswith("stall_") and "Not Issued" not in k and number(v) > 0}


def opcode(source: str) -> str:
    return PREDICATE.sub("", source.strip()).split(" ")[0].split(".")[0]


def report(name: str, rows: list[dict[str, str]], top: int, opcodes: int) -> None:
    total_samples = sum(number(r.get(SAMPLES, "0")) for r in rows) or 1.0
    total_executed = sum(number(r.get(EXECUTED, "0")) for r in rows) or 1.0
    print(f"== {name[:150]}")
    print(f"   {len(rows)} instructions, {total_executed:,.0f} executed (warp-level), {total_samples:,.0f} samples")
    executed: collections.Counter[str] = collections.Counter()
    samples: collections.Counter[str] = collections.Counter()
    why: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in rows:
        op = opcode(r.get("Source", ""))
        executed[op] += number(r.get(EXECUTED, "0"))
        samples[op] += number(r.get(SAMPLES, "0"))
        why[op].update(reasons_of(r))
    print(f"   {'opcode':12} {'executed':>15} {'%':>6} {'samples':>10} {'%':>6}  reasons (> 2% of the opcode's samples)")
    for op, n in executed.most_common(opcodes):
        main = ", ".join(f"{k} {v:,.0f}" for k, v in why[op].most_common() if v > 0.02 * max(samples[op], 1))
        print(f"   {op:12} {n:15,.0f} {100 * n / total_executed:6.1f} {samples[op]:10,.0f} "
              f"{100 * samples[op] / total_samples:6.1f}  {main}")
    hot = sorted(range(len(rows)), key=lambda i: -number(rows[i].get(SAMPLES, "0")))[:top]
    print(f"   the {len(hot)} instructions with the most samples, in program order:")
    for i in sorted(hot):
        r = rows[i]
        s = number(r.get(SAMPLES, "0"))
        main = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(reasons_of(r).items(), key=lambda kv: -kv[1])[:3])
        print(f"   {i:5d} {100 * s / total_samples:5.1f}% x{number(r.get(EXECUTED, '0')):>12,.0f}  "
              f"{r.get('Source', '').strip()[:64]:64}  {main}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("page", type=Path, help="a SASS page CSV, or profile_fwd.sh's ncu.tgz (with --file)")
    ap.add_argument("--file", help="the page's name inside the .tgz (sass_<shape>.csv, sass_<peer>_<shape>.csv)")
    ap.add_argument("--kernel", default="", help="a regular expression the kernel's name must match")
    ap.add_argument("--top", type=int, default=20, help="instructions to list (default 20)")
    ap.add_argument("--opcodes", type=int, default=24, help="opcodes to list (default 24)")
    args = ap.parse_args()
    kernels = read_blocks(open_page(args.page, args.file))
    shown = 0
    for name, rows in kernels:
        if rows and re.search(args.kernel, name):
            report(name, rows, args.top, args.opcodes)
            shown += 1
    if shown == 0:
        print(f"sass_stalls.py: no kernel in {args.page} matches {args.kernel!r} "
              f"(kernels: {'; '.join(n[:60] for n, _ in kernels) or 'none'})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
