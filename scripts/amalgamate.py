#!/usr/bin/env python3
"""Amalgamate hattn's kernels (forward, backward, or both) into one self-contained, vendorable header.

Starting from the kernel's header (src/kernels/fwd.cuh, bwd.cuh, fp8_prepass.cuh, fwd_fp8.cuh), follow the
`#include "..."` graph through the repository (the PTX wrappers in ptx/, the building blocks in
src/kernels/sm90/, src/kernels/*_args.h, ...) and inline each local header exactly once, at its
first inclusion -- which is what the preprocessor does with `#pragma once`, so the result means
the same thing and comes out in dependency order. Local `#include "..."` lines and `#pragma once`
are dropped; system includes (`#include <...>`) stay where they were. The result needs only the
CUDA toolkit headers and cudart. Its first lines carry hattn's version (from include/hattn.h) and
licence (LICENSE), which every copy must keep, and define HATTN_VENDORED_FWD / HATTN_VENDORED_BWD /
HATTN_VENDORED_FP8_PREPASS / HATTN_VENDORED_FWD_FP8 for the kernels it holds.

ptx/wgmma_instr.cuh (every wgmma shape) is replaced by the subset the kernels instantiate: the N
values in KERNELS below (--wgmma-n table, the default), or those found in the PTX of a probe that
instantiates every launcher (--wgmma-n derive: needs nvcc, $NVCC or on PATH). `--print-wgmma`
prints the derived shapes and the table's; scripts/check_vendored.sh uses it when the subset is
short and says which N to add.

Usage: python3 scripts/amalgamate.py [--kernel fwd|bwd|all|fp8] [-o OUT] [--wgmma-n table|derive|all|N,N,...]
         fwd (default): build/hattn_fwd_single.cuh; bwd: build/hattn_bwd_single.cuh; all (both in
         one file, for a project that needs the two): build/hattn_single.cuh; fp8 (the FP8 pre-pass
         and the FP8 forward): build/hattn_fp8_single.cuh
       python3 scripts/amalgamate.py --kernel bwd --print-wgmma
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import gen_wgmma  # noqa: E402  (the wgmma wrapper generator, to vendor a subset of it)

WGMMA_HEADER = "ptx/wgmma_instr.cuh"
VENDORED_WGMMA_TYPES = ["bf16", "f16"]


@dataclass(frozen=True)
class Kernel:
    root: str                    # the header that holds the kernel and its launcher
    launcher: str                # template <int kHeadDim> cudaError_t launcher(const Args&, cudaStream_t, std::string*)
    args: str                    # the launcher's argument struct
    head_dims: tuple[int, ...]   # the kHeadDim values a user instantiates
    wgmma_n: tuple[int, ...]     # the wgmma N values its GEMMs instantiate (bf16 and f16, both transposes)
    macro: str                   # defined to 1 in a vendored file that holds this kernel
    title: str                   # what the banner calls it
    wgmma_types: tuple[str, ...] = ("bf16", "f16")  # the operand types of the wgmma wrappers it needs


# The wgmma N values each kernel instantiates; a vendored file carries the union for its kernels.
# Vendoring only these instead of all of ptx/wgmma_instr.cuh (every N, fp8 too) keeps it small.
# scripts/check_vendored.sh compiles an example that instantiates every head dim of each launcher:
# an N missing here fails there, naming the N to add (derived from the PTX of a probe).
#   fwd: S = Q K^T at N = kBlockN (128; 176 at d128 with long keys; 64 at d256), O += P V at N = head_dim.
#   bwd: S^T = K Q^T and dP^T = V dO^T at N = the query block, dV += P^T dO and dK += dS^T Q at
#        N = head_dim (64, 128, 256), dQ^T += K^T dS^T in slices; 32 is kept for smaller slices.
#   fp8_prepass: no GEMM. fwd_fp8: S = Q K^T at N = kBlockN (128; 64 at d256), O += P V at
#        N = head_dim, P's row sums at N = 8 (d128, d256), e4m3 operands (its shared 16-bit building blocks name the bf16/f16
#        wrappers too, so those come along at the same N).
KERNELS = {
    "fwd": Kernel("src/kernels/fwd.cuh", "hattn::fwd::launch_fwd_head_dim", "hattn::fwd::FwdArgs", (64, 128, 256),
                  (64, 128, 176, 256), "HATTN_VENDORED_FWD", "forward"),
    "bwd": Kernel("src/kernels/bwd.cuh", "hattn::bwd::launch_bwd_head_dim", "hattn::bwd::BwdArgs", (64, 128, 256),
                  (32, 64, 128, 256), "HATTN_VENDORED_BWD", "backward"),
    "fp8_prepass": Kernel("src/kernels/fp8_prepass.cuh", "hattn::fp8::launch_fp8_prepass_head_dim",
                          "hattn::fp8::Fp8PrepassArgs", (64, 128, 256), (), "HATTN_VENDORED_FP8_PREPASS",
                          "FP8 pre-pass (RoPE, random-sign Hadamard, e4m3 block quantization)", ()),
    "fwd_fp8": Kernel("src/kernels/fwd_fp8.cuh", "hattn::fwd_fp8::launch_fwd_fp8_head_dim", "hattn::fwd_fp8::Fp8FwdArgs",
                      (64, 128, 256), (8, 64, 128, 256), "HATTN_VENDORED_FWD_FP8", "FP8 (e4m3) forward",
                      ("bf16", "f16", "e4m3")),
}
KERNEL_SETS = {"fwd": ["fwd"], "bwd": ["bwd"], "all": ["fwd", "bwd"], "fp8": ["fp8_prepass", "fwd_fp8"]}
DEFAULT_OUTPUTS = {"fwd": "build/hattn_fwd_single.cuh", "bwd": "build/hattn_bwd_single.cuh",
                   "all": "build/hattn_single.cuh", "fp8": "build/hattn_fp8_single.cuh"}
# Kept for callers that read it: the forward's table.
VENDORED_WGMMA_N = list(KERNELS["fwd"].wgmma_n)
WGMMA_IN_PTX = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k\d+\.f32\.(\w+?)\.\w+")
# The same quoted-include search path as the CMake build (hattn_cuda_options), after the
# including file's own directory.
INCLUDE_DIRS = [REPO, REPO / "include", REPO / "src"]
LICENSE = REPO / "LICENSE"
VERSION_HEADER = REPO / "include" / "hattn.h"
VERSION_DEFINE = re.compile(r"^#define HATTN_VERSION_(MAJOR|MINOR|PATCH) +([0-9]+)$", re.MULTILINE)

LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SYSTEM_INCLUDE = re.compile(r"^\s*#\s*include\s*<([^>]+)>")
PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\b")
CONDITIONAL_OPEN = re.compile(r"^\s*#\s*if(n?def)?\b")
CONDITIONAL_CLOSE = re.compile(r"^\s*#\s*endif\b")


class AmalgamationError(Exception):
    pass


def rel(path: Path) -> str:
    try:
        return path.relative_to(REPO).as_posix()
    except ValueError:
        return str(path)


def resolve(name: str, including_file: Path) -> Path:
    for directory in [including_file.parent, *INCLUDE_DIRS]:
        candidate = (directory / name).resolve()
        if candidate.is_file():
            return candidate
    raise AmalgamationError(f'{rel(including_file)}: cannot resolve #include "{name}" '
                            f"(searched its folder and {', '.join(rel(d) or '.' for d in INCLUDE_DIRS)})")


class Amalgamator:
    def __init__(self, line_directives: bool, wgmma_n: list[int], wgmma_types: list[str] | None = None):
        self.line_directives = line_directives
        self.wgmma_n = wgmma_n
        self.wgmma_types = VENDORED_WGMMA_TYPES if wgmma_types is None else wgmma_types
        self.inlined: list[Path] = []        # in the order they were emitted
        self.in_progress: list[Path] = []    # the current include chain, to report cycles
        self.system_seen: set[str] = set()   # system headers already included unconditionally
        self.out: list[str] = []

    def emit_file(self, path: Path) -> None:
        if path in self.inlined:
            return
        if path in self.in_progress:
            chain = " -> ".join(rel(p) for p in [*self.in_progress, path])
            raise AmalgamationError(f"include cycle: {chain}")
        if REPO not in path.parents:
            raise AmalgamationError(f"{path} lies outside the repository; refusing to vendor it")
        self.in_progress.append(path)
        self.out.append(f"\n// ===== begin {rel(path)} =====\n")
        if self.line_directives:
            self.out.append(f'#line 1 "{rel(path)}"\n')
        depth = 0  # preprocessor conditional nesting inside this file
        if rel(path) == WGMMA_HEADER:
            text = gen_wgmma.generate(self.wgmma_n, self.wgmma_types)
        else:
            text = path.read_text()
        lines = text.splitlines(keepends=True)
        for number, line in enumerate(lines, start=1):
            if PRAGMA_ONCE.match(line):
                continue
            local = LOCAL_INCLUDE.match(line)
            if local:
                if depth > 0:
                    print(f"amalgamate.py: warning: {rel(path)}:{number}: conditional #include "
                          f'"{local.group(1)}" is inlined unconditionally', file=sys.stderr)
                self.emit_file(resolve(local.group(1), path))
                if self.line_directives:
                    self.out.append(f'#line {number + 1} "{rel(path)}"\n')
                continue
            system = SYSTEM_INCLUDE.match(line)
            if system:
                header = system.group(1).strip()
                if header in self.system_seen:
                    continue  # already included unconditionally above; system headers are guarded
                if depth == 0:
                    self.system_seen.add(header)
            elif CONDITIONAL_OPEN.match(line):
                depth += 1
            elif CONDITIONAL_CLOSE.match(line):
                depth = max(depth - 1, 0)
            self.out.append(line if line.endswith("\n") else line + "\n")
        self.out.append(f"// ===== end {rel(path)} =====\n")
        self.in_progress.pop()
        self.inlined.append(path)


def git(*args: str) -> str:
    """stdout of a git command in the repository (trailing whitespace removed), "" on failure."""
    try:
        return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True,
                              text=True).stdout.rstrip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def provenance(files: list[Path]) -> str:
    commit = git("rev-parse", "HEAD")
    if not commit:
        return "unknown (not a git checkout)"
    dirty = git("status", "--porcelain", "--", *(rel(f) for f in files))
    if dirty:
        changed = sorted({line[3:] for line in dirty.splitlines()})  # porcelain: "XY path"
        return f"{commit} plus uncommitted changes to {', '.join(changed)}"
    return commit


def version() -> str:
    """MAJOR.MINOR.PATCH from include/hattn.h's HATTN_VERSION_* macros (as CMake reads it)."""
    parts = dict(VERSION_DEFINE.findall(VERSION_HEADER.read_text()))
    if set(parts) != {"MAJOR", "MINOR", "PATCH"}:
        raise AmalgamationError(f"{rel(VERSION_HEADER)}: HATTN_VERSION_MAJOR/MINOR/PATCH not all defined")
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


def license_notice() -> str:
    """The LICENSE file as a // comment block: the notice that must travel with every copy."""
    if not LICENSE.is_file():
        raise AmalgamationError(f"{rel(LICENSE)} is missing")
    return "".join(f"// {line}".rstrip() + "\n" for line in LICENSE.read_text().splitlines())


def entry_points(kernels: list[str]) -> str:
    lines = []
    for name in kernels:
        k = KERNELS[name]
        lines.append(f"//   {k.launcher}<kHeadDim>(const {k.args}&, cudaStream_t, std::string* error),\n"
                     f"//     kHeadDim in {{{', '.join(map(str, k.head_dims))}}}; see {k.args.split('::')[-1]} for the tensor layout.")
        if name == "bwd":
            lines.append("//     The backward also needs O and LSE from the forward and a device workspace of\n"
                         "//     hattn::bwd::workspace_layout(batch, heads_q, seqlen_q, head_dim).bytes bytes,\n"
                         "//     hattn::bwd::kWorkspaceAlign-aligned (BwdArgs::workspace / workspace_size).")
        if name == "fwd_fp8":
            lines.append("//     Its inputs are the pre-pass's e4m3 tensors and descales; it needs a device workspace\n"
                         "//     of hattn::fwd_fp8::vt_bytes(batch, heads_kv, seqlen_k, head_dim) bytes for V^T\n"
                         "//     (Fp8FwdArgs::vt), 256-byte aligned.")
    return "\n".join(lines)


def banner(output_name: str, roots: list[Path], files: list[Path], kernels: list[str], wgmma_n: list[int]) -> str:
    listing = "\n".join(f"//   {rel(f)}" for f in files)
    title = " and ".join(KERNELS[k].title for k in kernels) or "kernels from " + ", ".join(rel(r) for r in roots)
    title += "" if kernels == ["fp8_prepass", "fwd_fp8"] or not kernels else " attention"
    validators = " / ".join(f"hattn_{k}_validate" for k in kernels) or "hattn_fwd_validate"
    macros = "".join(f"#define {KERNELS[k].macro} 1\n" for k in kernels)
    wgmma_note = ""
    if any(rel(f) == WGMMA_HEADER for f in files):
        wgmma_note = (f"; of the wgmma\n// wrappers only N in {{{', '.join(map(str, wgmma_n))}}}, "
                      f"{' and '.join(table_types(kernels or list(KERNELS)))}")
    return f"""// {output_name} -- hattn {version()} {title} for NVIDIA Hopper (sm_90a), as one self-contained header.
// SPDX-License-Identifier: MIT
//
{license_notice()}//
// GENERATED FILE -- DO NOT EDIT. Made by `python3 scripts/amalgamate.py` from hattn commit
//   {provenance(files)}
// by inlining, once each and in dependency order, the local headers reachable from
// {", ".join(rel(r) for r in roots)}:
{listing}
// (their `#pragma once` and local #include lines removed, system #includes kept{wgmma_note}).
//
// Needs only the CUDA toolkit headers and cudart: the tensor-map encoder is reached through
// cudaGetDriverEntryPointByVersion, so nothing links -lcuda. Needs CUDA 12.8 or newer. Compile for
// sm_90a, e.g.
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a my_file.cu -o my_file
// Entry points:
{entry_points(kernels)}
// The launchers trust their arguments: the checks live in hattn's C API ({validators}),
// not in this file. One translation unit may include one such file; for the forward and the
// backward together vendor the file made with --kernel all (the two single files share code).
#pragma once
{macros}"""


# ---- wgmma shapes: the table, or derived from what the launchers instantiate ---------------------
def find_nvcc() -> str:
    return os.environ.get("NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


def amalgamate(roots: list[Path], wgmma_n: list[int], wgmma_types: list[str] | None = None,
               line_directives: bool = False) -> Amalgamator:
    amalgamator = Amalgamator(line_directives, wgmma_n, wgmma_types)
    for root in roots:
        if not root.is_file():
            raise AmalgamationError(f"root {root} does not exist")
        amalgamator.emit_file(root)
    return amalgamator


def derive_wgmma(kernels: list[str]) -> dict[str, set[int]]:
    """{operand type: N values} of the wgmma instructions in the PTX of a translation unit that
    instantiates every launcher of these kernels at every head dim (the file amalgamated with all
    wgmma shapes, compiled with nvcc -ptx for sm_90a)."""
    roots = [(REPO / KERNELS[k].root).resolve() for k in kernels]
    full = amalgamate(roots, gen_wgmma.N_VALUES, [t[0] for t in gen_wgmma.TYPES])
    probes = "\n".join(f"[[maybe_unused]] auto* const probe_{k}_{d} = &{KERNELS[k].launcher}<{d}>;"
                       for k in kernels for d in KERNELS[k].head_dims)
    with tempfile.TemporaryDirectory(prefix="hattn-wgmma-probe.") as tmp:
        folder = Path(tmp)
        (folder / "probe_single.cuh").write_text("#pragma once\n" + "".join(full.out))
        (folder / "probe.cu").write_text(f'#include "probe_single.cuh"\nnamespace {{\n{probes}\n}}  // namespace\n')
        cmd = [find_nvcc(), "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-ptx", "probe.cu", "-o", "probe.ptx"]
        try:
            run = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
        except OSError as error:
            raise AmalgamationError(f"cannot run {cmd[0]} to derive the wgmma shapes ({error}); set NVCC") from error
        if run.returncode != 0:
            tail = "\n".join((run.stderr or run.stdout).strip().splitlines()[-15:])
            raise AmalgamationError(f"the wgmma probe did not compile ({' '.join(cmd)}):\n{tail}")
        used: dict[str, set[int]] = {}
        for n, ptype in WGMMA_IN_PTX.findall((folder / "probe.ptx").read_text()):
            used.setdefault(ptype, set()).add(int(n))
    return used


def table_wgmma(kernels: list[str]) -> list[int]:
    return sorted({n for k in kernels for n in KERNELS[k].wgmma_n})


def table_types(kernels: list[str]) -> list[str]:
    """The wgmma operand types these kernels need, in gen_wgmma's order."""
    wanted = {t for k in kernels for t in KERNELS[k].wgmma_types}
    return [t[0] for t in gen_wgmma.TYPES if t[0] in wanted]


def print_wgmma(kernels: list[str]) -> int:
    """Derived vs table; 0 when the table covers what the kernels use, 1 otherwise."""
    used = derive_wgmma(kernels)
    table = set(table_wgmma(kernels))
    derived = set().union(*used.values()) if used else set()
    print(f"wgmma shapes used by {'+'.join(kernels)} (from the PTX of every launcher at every head dim): "
          + (", ".join(f"{t} N={sorted(ns)}" for t, ns in sorted(used.items())) or "none"))
    types = table_types(kernels)
    print(f"table (amalgamate.py KERNELS): N={sorted(table)}, types {', '.join(types)}")
    missing = sorted(derived - table)
    other_types = sorted(set(used) - set(types))
    if missing:
        print(f"MISSING from the table: N={missing}: add them to the wgmma_n of "
              f"{' / '.join(k for k in kernels if set(missing) - set(KERNELS[k].wgmma_n))} in scripts/amalgamate.py")
    if other_types:
        print(f"MISSING types: {other_types}: add them to the wgmma_types of the kernel in scripts/amalgamate.py")
    unused = sorted(table - derived)
    if unused:
        print(f"note: in the table but not instantiated (harmless, a few lines each): N={unused}")
    return 1 if missing or other_types else 0


def parse_wgmma_n(text: str, kernels: list[str]) -> list[int]:
    if text == "table":
        return table_wgmma(kernels)
    if text == "all":
        return list(gen_wgmma.N_VALUES)
    if text == "derive":
        used = derive_wgmma(kernels)
        derived = sorted(set().union(*used.values())) if used else []
        if not derived:  # nothing instantiated yet (a placeholder): keep the table's shapes
            print("amalgamate.py: no wgmma in the derived PTX; vendoring the table's N", file=sys.stderr)
            return table_wgmma(kernels)
        return derived
    values = [int(x) for x in text.split(",") if x]
    bad = [n for n in values if n not in gen_wgmma.N_VALUES]
    if bad or not values:
        raise AmalgamationError(f"--wgmma-n: {text!r}: N must be 8 or a multiple of 16 in [16, 256] (or table, derive, all)")
    return sorted(set(values))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--kernel", choices=sorted(KERNEL_SETS), default="fwd",
                        help="fwd (default), bwd, all (the forward and the backward in one file), or fp8 (the "
                             "FP8 pre-pass and the FP8 forward)")
    parser.add_argument("-o", "--output", default=None,
                        help="output path, relative to the repository root unless absolute (default "
                             + ", ".join(f"{k}: {v}" for k, v in DEFAULT_OUTPUTS.items()) + ")")
    parser.add_argument("--root", action="append", default=None,
                        help="header to start from, repeatable (replaces the kernel's; wgmma: the union of the "
                             "tables unless --wgmma-n says otherwise)")
    parser.add_argument("--wgmma-n", default="table",
                        help="wgmma N values to vendor: table (default), derive (from the PTX; needs nvcc), all, or N,N,...")
    parser.add_argument("--print-wgmma", action="store_true",
                        help="print the wgmma shapes the kernels instantiate (needs nvcc) beside the table and exit "
                             "(1 if the table misses one)")
    parser.add_argument("--line-directives", action="store_true",
                        help="emit #line directives so diagnostics point at the original files")
    args = parser.parse_args()

    kernels = KERNEL_SETS[args.kernel] if not args.root else []
    table_kernels = kernels or list(KERNELS)
    try:
        if args.print_wgmma:
            return print_wgmma(kernels or list(KERNELS))
        roots = [(REPO / r).resolve() for r in (args.root or [KERNELS[k].root for k in kernels])]
        wgmma_n = parse_wgmma_n(args.wgmma_n, table_kernels)
        amalgamator = amalgamate(roots, wgmma_n, table_types(table_kernels), line_directives=args.line_directives)
        output_name = Path(args.output or DEFAULT_OUTPUTS[args.kernel]).name
        head = banner(output_name, roots, amalgamator.inlined, kernels, wgmma_n)
    except AmalgamationError as error:
        print(f"amalgamate.py: error: {error}", file=sys.stderr)
        return 1

    output = Path(args.output or DEFAULT_OUTPUTS[args.kernel])
    if not output.is_absolute():
        output = REPO / output
    output.parent.mkdir(parents=True, exist_ok=True)
    text = head + "".join(amalgamator.out)
    output.write_text(text)
    print(f"amalgamate.py: wrote {output} ({len(text.splitlines())} lines, wgmma N {wgmma_n}, "
          f"{len(amalgamator.inlined)} files: {', '.join(rel(f) for f in amalgamator.inlined)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
