#!/usr/bin/env python3
"""Generate ptx/wgmma_instr.cuh: one wrapper per wgmma.mma_async shape and operand type.

wgmma's accumulator is a list of N/2 registers spelled out in the instruction text, so each
N needs its own asm string; writing 128 such functions by hand invites typos. This script is
the single source of truth; the generated header is committed so users need no Python.

Usage: python3 scripts/gen_wgmma.py > ptx/wgmma_instr.cuh
       python3 scripts/gen_wgmma.py --n 64,128 --types bf16,f16   (a subset; scripts/amalgamate.py
       uses this to vendor only the shapes the kernels instantiate)
"""
import argparse
import sys

# Every multiple of 16 in [16, 256] (the ISA allows every multiple of 8 for dense f16/bf16/fp8),
# and 8: the FP8 forward's row sums of P (P times a tile of ones, sm90/vt_e4m3.cuh).
ROW_SUM_N_VALUES = [8]
N_VALUES = sorted(ROW_SUM_N_VALUES + list(range(16, 257, 16)))

# (suffix, ptx type, k, supports transpose)
TYPES = [
    ("bf16", "bf16", 16, True),
    ("f16", "f16", 16, True),
    ("e4m3", "e4m3", 32, False),
    ("e5m2", "e5m2", 32, False),
]


def acc_list(n_regs, first=0):
    return ", ".join(f"%{first + i}" for i in range(n_regs))


def acc_constraints(n_regs):
    return ", ".join(f'"+f"(d[{i}])' for i in range(n_regs))


def emit_ss(suffix, ptype, n, k, transposable):
    regs = n // 2
    a, b, s = regs, regs + 1, regs + 2
    tmpl = "template <int kTransA, int kTransB>\n" if transposable else ""
    trans_ops = f", %{s + 1}, %{s + 2}" if transposable else ""
    trans_cons = ', "n"(kTransA), "n"(kTransB)' if transposable else ""
    return f"""{tmpl}__device__ __forceinline__ void wgmma_m64n{n}k{k}_f32_{suffix}_ss(float (&d)[{regs}], uint64_t desc_a,
                                                        uint64_t desc_b, uint32_t accumulate) {{
    asm volatile(
        "{{\\n\\t.reg .pred p;\\n\\tsetp.ne.b32 p, %{s}, 0;\\n\\t"
        "wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ptype}.{ptype} "
        "{{{acc_list(regs)}}}, %{a}, %{b}, p, 1, 1{trans_ops};\\n\\t}}"
        : {acc_constraints(regs)}
        : "l"(desc_a), "l"(desc_b), "r"(accumulate){trans_cons}
        : "memory");
}}
"""


def emit_rs(suffix, ptype, n, k, transposable):
    regs = n // 2
    a0 = regs
    b, s = regs + 4, regs + 5
    tmpl = "template <int kTransB>\n" if transposable else ""
    trans_ops = f", %{s + 1}" if transposable else ""
    trans_cons = ', "n"(kTransB)' if transposable else ""
    return f"""{tmpl}__device__ __forceinline__ void wgmma_m64n{n}k{k}_f32_{suffix}_rs(float (&d)[{regs}], const uint32_t (&a)[4],
                                                        uint64_t desc_b, uint32_t accumulate) {{
    asm volatile(
        "{{\\n\\t.reg .pred p;\\n\\tsetp.ne.b32 p, %{s}, 0;\\n\\t"
        "wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ptype}.{ptype} "
        "{{{acc_list(regs)}}}, {{%{a0}, %{a0 + 1}, %{a0 + 2}, %{a0 + 3}}}, %{b}, p, 1, 1{trans_ops};\\n\\t}}"
        : {acc_constraints(regs)}
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate){trans_cons}
        : "memory");
}}
"""


def emit_dispatch(suffix, k, transposable, n_values):
    out = []
    # SS dispatch
    tparams = "int N, int kTransA, int kTransB" if transposable else "int N"
    targs = "<kTransA, kTransB>" if transposable else ""
    out.append(f"template <{tparams}>\n__device__ __forceinline__ void wgmma_ss_{suffix}(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,\n"
               f"                                                 uint32_t accumulate) {{")
    for i, n in enumerate(n_values):
        kw = "if constexpr" if i == 0 else "} else if constexpr"
        out.append(f"    {kw} (N == {n}) {{\n        wgmma_m64n{n}k{k}_f32_{suffix}_ss{targs}(d, desc_a, desc_b, accumulate);")
    out.append(f'    }} else {{\n        static_assert(N < 0, "wgmma N not generated here (have {n_list(n_values)})");\n    }}\n}}\n')
    tparams = "int N, int kTransB" if transposable else "int N"
    targs = "<kTransB>" if transposable else ""
    out.append(f"template <{tparams}>\n__device__ __forceinline__ void wgmma_rs_{suffix}(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,\n"
               f"                                                 uint32_t accumulate) {{")
    for i, n in enumerate(n_values):
        kw = "if constexpr" if i == 0 else "} else if constexpr"
        out.append(f"    {kw} (N == {n}) {{\n        wgmma_m64n{n}k{k}_f32_{suffix}_rs{targs}(d, a, desc_b, accumulate);")
    out.append(f'    }} else {{\n        static_assert(N < 0, "wgmma N not generated here (have {n_list(n_values)})");\n    }}\n}}\n')
    return "\n".join(out)


def n_list(n_values):
    if list(n_values) == N_VALUES:
        return "every multiple of 16 in [16, 256], and 8"
    return ", ".join(str(n) for n in n_values)


def generate(n_values=N_VALUES, type_names=None):
    """The header text for the given N values and operand types (all by default)."""
    types = [t for t in TYPES if type_names is None or t[0] in type_names]
    out = []
    out.append("// hattn/ptx/wgmma_instr.cuh -- GENERATED by scripts/gen_wgmma.py; do not edit by hand.")
    out.append("//")
    out.append("// PTX ISA 9.7.15.5.2 wgmma.mma_async: D(64xN, f32) (+)= A(64xK) * B(KxN), issued by a whole")
    out.append("// warpgroup. _ss: A and B from shared memory via matrix descriptors; _rs: A from registers")
    out.append("// (4 x b32 per thread). `accumulate` = 0 zero-initialises D (the scale-d predicate).")
    out.append("// 16-bit types take the transpose immediates (0 = K-major, 1 = MN-major); fp8 is K-major only.")
    if list(n_values) != N_VALUES or type_names is not None:
        out.append(f"// Subset: N in {{{n_list(n_values)}}}, types {', '.join(t[0] for t in types)}.")
    out.append("#pragma once\n\n#include \"common.cuh\"\n\nnamespace hattn::ptx {\n")
    for suffix, ptype, k, tr in types:
        for n in n_values:
            out.append(emit_ss(suffix, ptype, n, k, tr))
            out.append(emit_rs(suffix, ptype, n, k, tr))
        out.append(emit_dispatch(suffix, k, tr, n_values))
    out.append("}  // namespace hattn::ptx")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description="Generate the wgmma.mma_async wrappers.")
    parser.add_argument("--n", help="comma-separated N values (default: every multiple of 16 up to 256, and 8)")
    parser.add_argument("--types", help="comma-separated operand types among bf16,f16,e4m3,e5m2 (default: all)")
    args = parser.parse_args()
    n_values = [int(v) for v in args.n.split(",")] if args.n else N_VALUES
    bad = [n for n in n_values if n not in N_VALUES]
    if bad:
        parser.error(f"N must be a multiple of 16 in [16, 256], or 8: {bad}")
    type_names = args.types.split(",") if args.types else None
    sys.stdout.write(generate(n_values, type_names))


if __name__ == "__main__":
    main()
