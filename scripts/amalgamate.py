#!/usr/bin/env python3
"""Amalgamate hattn's forward kernel into one self-contained, vendorable header.

Starting from src/kernels/fwd.cuh, follow the `#include "..."` graph through the repository
(the PTX wrappers in ptx/, src/kernels/sm90/tensor_map.h, src/kernels/fwd_args.h, ...) and inline each
local header exactly once, at its first inclusion -- which is what the preprocessor does with
`#pragma once`, so the result means the same thing and comes out in dependency order. Local
`#include "..."` lines and `#pragma once` are dropped; system includes (`#include <...>`) stay
where they were. The result needs only the CUDA toolkit headers and cudart. Its first lines carry
hattn's version (from include/hattn.h) and licence (LICENSE), which every copy must keep.

Usage: python3 scripts/amalgamate.py [-o build/hattn_fwd_single.cuh] [--root src/kernels/fwd.cuh]
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import gen_wgmma  # noqa: E402  (the wgmma wrapper generator, to vendor a subset of it)

# The wgmma shapes the forward kernel instantiates: S = Q K^T at N = kBlockN (128; 176 for d128 with long keys; 80 at
# head_dim 256) and O += P V at N = head_dim, bf16 and fp16. Vendoring only these instead of all
# of ptx/wgmma_instr.cuh (every N, fp8 too) keeps the single file small. scripts/vendor_example.cu
# instantiates every head dim, so a shape missing here fails CI's check_vendored.sh.
WGMMA_HEADER = "ptx/wgmma_instr.cuh"
VENDORED_WGMMA_N = [64, 80, 128, 176, 256]
VENDORED_WGMMA_TYPES = ["bf16", "f16"]
DEFAULT_ROOT = "src/kernels/fwd.cuh"
DEFAULT_OUTPUT = "build/hattn_fwd_single.cuh"
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
    def __init__(self, line_directives: bool):
        self.line_directives = line_directives
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
            text = gen_wgmma.generate(VENDORED_WGMMA_N, VENDORED_WGMMA_TYPES)
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


def banner(output_name: str, roots: list[Path], files: list[Path]) -> str:
    listing = "\n".join(f"//   {rel(f)}" for f in files)
    return f"""// {output_name} -- hattn {version()} forward attention for NVIDIA Hopper (sm_90a), as one self-contained header.
// SPDX-License-Identifier: MIT
//
{license_notice()}//
// GENERATED FILE -- DO NOT EDIT. Made by `python3 scripts/amalgamate.py` from hattn commit
//   {provenance(files)}
// by inlining, once each and in dependency order, the local headers reachable from
// {", ".join(rel(r) for r in roots)}:
{listing}
// (their `#pragma once` and local #include lines removed, system #includes kept).
//
// Needs only the CUDA toolkit headers and cudart: the tensor-map encoder is reached through
// cudaGetDriverEntryPointByVersion, so nothing links -lcuda. Needs CUDA 12.8 or newer. Compile for
// sm_90a, e.g.
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a my_file.cu -o my_file
// Entry point: hattn::fwd::launch_fwd_head_dim<kHeadDim>(const hattn::fwd::FwdArgs&, cudaStream_t,
// std::string* error), kHeadDim in {{64, 128, 256}}; see FwdArgs for the tensor layout. The launcher
// trusts its arguments: the checks live in hattn's C API (hattn_fwd_validate), not in this file.
#pragma once
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default=DEFAULT_OUTPUT,
                        help=f"output path, relative to the repository root unless absolute (default {DEFAULT_OUTPUT})")
    parser.add_argument("--root", action="append", default=None,
                        help=f"header to start from, repeatable (default {DEFAULT_ROOT})")
    parser.add_argument("--line-directives", action="store_true",
                        help="emit #line directives so diagnostics point at the original files")
    args = parser.parse_args()

    roots = [(REPO / r).resolve() for r in (args.root or [DEFAULT_ROOT])]
    amalgamator = Amalgamator(args.line_directives)
    try:
        for root in roots:
            if not root.is_file():
                raise AmalgamationError(f"root {root} does not exist")
            amalgamator.emit_file(root)
        head = banner(Path(args.output).name, roots, amalgamator.inlined)
    except AmalgamationError as error:
        print(f"amalgamate.py: error: {error}", file=sys.stderr)
        return 1

    output = Path(args.output)
    if not output.is_absolute():
        output = REPO / output
    output.parent.mkdir(parents=True, exist_ok=True)
    text = head + "".join(amalgamator.out)
    output.write_text(text)
    print(f"amalgamate.py: wrote {output} ({len(text.splitlines())} lines, "
          f"{len(amalgamator.inlined)} files: {', '.join(rel(f) for f in amalgamator.inlined)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
