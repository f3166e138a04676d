#!/usr/bin/env python3
"""Check in SASS that the forward kernel really overlaps a warpgroup's softmax with its own PV GEMM,
and that the d64 backward adds dQ while its next query block's scores are on the tensor cores.

The intra-warpgroup pipeline issues S_{j+1} = Q K^T and O += P_j V_j back to back, waits for the
first (`wgmma.wait_group 1`, SASS `WARPGROUP.DEPBAR.LE gsb0, 0x1`), runs the softmax of S_{j+1}
(`MUFU.EX2`), and only then waits for the PV GEMM (`WARPGROUP.DEPBAR.LE gsb0, 0x0`). ptxas is
free to move that last wait upwards (waiting early is always correct), and does so whenever an
instruction that writes P's registers -- the A operand of the GEMM still in flight -- ends up in
the same basic block as the exps. Then the exps only overlap the *other* warpgroup's GEMMs.

This script disassembles every forward kernel and fails if, after any `DEPBAR.LE gsb0, 0x1`,
fewer than MIN_EXPS exps come before the next `DEPBAR.LE gsb0, 0x0`. An exp is a `MUFU.EX2` or,
for the FP8 forward's MUFU/FMA split (kernels/sm90/exp2_poly.cuh), the polynomial's
range-reduction add of 1.5 * 2^23 (`FADD Rd, Rs, 12582912`, one per exp on the FMA pipe).

The d64 backward (kernels/bwd.cuh, Config::kPipeline; every other step with kDqParity) issues a
step's dQ^T GEMM (SS, both operands transposed: `HGMMA ... tnspA.tnspB`), then the next query
block's S^T and dP^T (8 SS `HGMMA`s without tnsp), waits for all but those (`DEPBAR.LE gsb0, 0x1`)
and only then adds dQ (`REDG.E.ADD.F32x4`, 8 per thread). If ptxas hoisted a wait-for-all above
the reds, or the scores were issued after them, the reds would run with the tensor cores idle
(bench/RESULTS.md run 64a: the order is worth 4-11%). Checked in each non-deterministic d64
backward kernel.

Usage: scripts/check_overlap_sass.py [OBJECT_OR_LIBRARY ...]
       (default: build/libhattn.a). Needs cuobjdump (CUDA toolkit, or `pip install
       nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`); CUOBJDUMP=/path picks one.
Exit: 0 every overlapped kernel passes, 1 a kernel fails or none was found, 2 no cuobjdump.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_INPUT = REPO / "build" / "libhattn.a"
KERNEL_NAMES = ("fwd_kernel", "fwd_fp8_kernel")  # the 16-bit and the FP8 forward
# Every steady-state step exponentiates kBlockN/2 >= 40 scores per thread; a handful of exps
# between the waits would mean ptxas split the softmax around the wait.
MIN_EXPS = 32
# The library instantiates 3 head dims x 2 dtypes with the overlap on, plus the FP8 forward's
# d128 x 2 output dtypes.
MIN_KERNELS = 8

WAIT_ONE = re.compile(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x1\b")
WAIT_ZERO = re.compile(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x0\b")
EXP = re.compile(r"\bMUFU\.EX2\b|\bFADD(\.\w+)*\s+R\d+,\s*R\d+,\s*12582912\b")
FUNCTION = re.compile(r"Function\s*:\s*(\S+)")
# The d64 backward kernels in their non-deterministic walk: Config<64, ...> and kWalkDown = false
# (the last template argument); bf16 and fp16, each with both grid orders.
BWD_D64 = re.compile(r"bwd_kernelINS0_6ConfigILi64E.*Lb[01]ELb0EEEv")
MIN_BWD_KERNELS = 4
HGMMA = re.compile(r"\bHGMMA\.")
DQ_GEMM = re.compile(r"\bHGMMA\..*tnspA\.tnspB")
TRANSPOSED = re.compile(r"tnsp")
RED_ADD = re.compile(r"\bREDG\.E\.ADD\.F32x4\b")
ANY_WAIT = re.compile(r"WARPGROUP\.DEPBAR\.LE")
QUEUED_SCORES = 8  # S^T and dP^T: 2 x head_dim / 16 HGMMAs
DQ_REDS = 8        # 64 floats of dQ^T per thread, 4 per red


def find_cuobjdump() -> str | None:
    explicit = os.environ.get("CUOBJDUMP")
    if explicit and os.access(explicit, os.X_OK):
        return explicit
    found = shutil.which("cuobjdump")
    if found:
        return found
    candidates = [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "cuobjdump")]
    for sp in site.getsitepackages() + [site.getusersitepackages()]:
        candidates += glob.glob(os.path.join(sp, "nvidia", "cu*", "bin", "cuobjdump"))
        candidates += glob.glob(os.path.join(sp, "nvidia", "cuda_cuobjdump", "bin", "cuobjdump"))
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    return None


def kernels(sass: str):
    """Yield (name, instruction lines) for each function in a cuobjdump listing."""
    name, body = None, []
    for line in sass.splitlines():
        m = FUNCTION.search(line)
        if m:
            if name is not None:
                yield name, body
            name, body = m.group(1), []
        elif name is not None:
            body.append(line)
    if name is not None:
        yield name, body


def check_kernel(body: list[str]) -> tuple[int, list[int]]:
    """Return (number of overlapped steps, exp counts of the steps that fail)."""
    steps, failures = 0, []
    exps = None  # exps seen since the last wait-for-one, None outside such a window
    for line in body:
        if WAIT_ONE.search(line):
            exps = 0
            steps += 1
        elif WAIT_ZERO.search(line) and exps is not None:
            if exps < MIN_EXPS:
                failures.append(exps)
            exps = None
        elif EXP.search(line) and exps is not None:
            exps += 1
    return steps, failures


def check_bwd_kernel(body: list[str]) -> bool:
    """True if some `DEPBAR.LE gsb0, 0x1` is followed by >= DQ_REDS dQ reds before the next wait
    and preceded by the queued scores (QUEUED_SCORES SS HGMMAs), with a dQ GEMM before those."""
    for i, line in enumerate(body):
        if not WAIT_ONE.search(line):
            continue
        reds = 0
        for after in body[i + 1:]:
            if ANY_WAIT.search(after):
                break
            reds += bool(RED_ADD.search(after))
        if reds < DQ_REDS:
            continue
        before = [b for b in body[:i] if HGMMA.search(b)]
        scores = before[-QUEUED_SCORES:]
        if len(scores) == QUEUED_SCORES and not any(TRANSPOSED.search(b) for b in scores) and \
                DQ_GEMM.search(before[-QUEUED_SCORES - 1] if len(before) > QUEUED_SCORES else ""):
            return True
    return False


def main(argv: list[str]) -> int:
    inputs = [Path(a) for a in argv[1:]] or [DEFAULT_INPUT]
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        print("check_overlap_sass: no cuobjdump (CUDA toolkit, or pip install nvidia-cuda-cuobjdump "
              "nvidia-cuda-nvdisasm); set CUOBJDUMP", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(cuobjdump) + os.pathsep + env.get("PATH", "")  # nvdisasm beside it
    checked, bad = 0, 0
    bwd_checked, bwd_bad = 0, 0
    for path in inputs:
        if not path.exists():
            print(f"check_overlap_sass: {path} not found (build first)", file=sys.stderr)
            return 1
        sass = subprocess.run([cuobjdump, "-sass", str(path)], check=True, capture_output=True, text=True,
                              env=env).stdout
        for name, body in kernels(sass):
            if BWD_D64.search(name):
                bwd_checked += 1
                if check_bwd_kernel(body):
                    print(f"ok   {name}: dQ reds after the next block's scores are queued")
                else:
                    bwd_bad += 1
                    print(f"FAIL {name}: no dQ GEMM -> next scores -> wait(1) -> dQ reds sequence")
                continue
            if not any(k in name for k in KERNEL_NAMES):
                continue
            steps, failures = check_kernel(body)
            if steps == 0:
                continue  # a variant built without the intra-warpgroup overlap (ablation)
            checked += 1
            if failures:
                bad += 1
                print(f"FAIL {name}: {len(failures)} of {steps} overlapped steps wait for PV before the "
                      f"softmax (exps between the waits: {failures}, need >= {MIN_EXPS})")
            else:
                print(f"ok   {name}: {steps} overlapped steps, softmax between the PV issue and its wait")
    if checked < MIN_KERNELS:
        print(f"check_overlap_sass: only {checked} overlapped forward kernels found, expected >= {MIN_KERNELS}")
        return 1
    if bwd_checked < MIN_BWD_KERNELS:
        print(f"check_overlap_sass: only {bwd_checked} d64 backward kernels found, expected >= {MIN_BWD_KERNELS}")
        return 1
    print(f"check_overlap_sass: {checked - bad} of {checked} kernels overlap the softmax with their own PV GEMM; "
          f"{bwd_checked - bwd_bad} of {bwd_checked} d64 backward kernels add dQ under the next scores")
    return 1 if bad or bwd_bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
