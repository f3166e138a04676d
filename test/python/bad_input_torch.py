#!/usr/bin/env python3
"""Every validation failure of hattn's public entry points, each called from its own PyTorch process.

For every case the parent starts a child process (`python -X faulthandler bad_input_torch.py --case
NAME`) that imports torch first, allocates real CUDA tensors (b1 s128 h2 d64 bf16 unless the case
says otherwise), fills O and LSE with a sentinel bit pattern, builds the params with
hattn_fwd_params_contiguous, applies one defect and then
  * calls hattn_fwd_validate: the status must be the expected one and the message must name the
    offending field (also with msg = NULL and with a 1-byte buffer, which must hold just the NUL);
  * calls hattn_fwd on torch's current stream and synchronizes: same status;
  * checks that O and LSE still hold the sentinel bit for bit and that Q, K, V are unchanged.
A child that dies (a signal, e.g. SIGSEGV from a launch that should never have happened) is a
failure naming the signal; one that does not finish within --timeout seconds is a failure too.
Positive controls (valid params, with and without LSE) must return HATTN_SUCCESS and write O.

The backward cases (named bwd_*) do the same for hattn_bwd_validate / hattn_bwd: the child fills
dQ, dK, dV with the sentinel and the workspace (a uint8 tensor of hattn_bwd_workspace_size bytes
plus slack for the misalignment cases) with a byte sentinel, and after a rejected call all four
must be untouched and Q, K, V, O, dO, LSE unchanged. Unless the case is about the workspace, the
params claim a workspace of the size the (possibly defective) sizes need, so that each case has
exactly one defect. Positive controls run hattn_fwd for O and LSE first and check dQ, dK, dV
against a float32 autograd reference (and HATTN_BWD_DETERMINISTIC for bit-identical repeats).
Where the header leaves the order of two checks open, a case accepts either status. A library
without the backward entry points (built before the backward API) skips the bwd_* cases.

The FP8 cases do the same for the pre-pass (fp8_prepass_*: hattn_fp8_prepass_validate /
hattn_fp8_prepass; the e4m3 outputs are filled with a byte sentinel and the descales with the LSE
sentinel) and the FP8 forward (fwd_fp8_*: hattn_fwd_fp8_validate / hattn_fwd_fp8 on e4m3 inputs
with descales; O, LSE and the V^T workspace are filled with sentinels). A rejected call must leave
every output and the workspace untouched; the positive controls check the pre-pass's
dequantized V against the input and the FP8 forward's O against a float32 attention of the
dequantized inputs. A library without the FP8 entry points skips these cases.

Before any child starts, the parent checks the same case table on the CPU (hattn_fwd_validate
with placeholder addresses, which validation never dereferences) together with the ctypes
struct layout, so a wrong expectation shows up even on a machine without a GPU.

  python3 test/python/bad_input_torch.py                 # all cases (build/libhattn.so or $HATTN_LIB)
  python3 test/python/bad_input_torch.py --lib PATH -j 8 # another library, 8 children at a time
  python3 test/python/bad_input_torch.py --list          # case names
  python3 test/python/bad_input_torch.py --case NAME     # one case in this process (what a child runs)

Exit status 0 when every case passes, or when the run is skipped (no torch, no CUDA device, no
Hopper GPU, no library: a line starting with SKIP says which); 1 otherwise. The last line is
"N passed, M failed".
"""
from __future__ import annotations

import argparse
import ctypes
import importlib.util
import math
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import hattn_ctypes as hc  # noqa: E402

# Child exit codes (the parent reads the RESULT line; these only back it up).
EXIT_PASS, EXIT_FAIL, EXIT_SKIP = 0, 1, 3

# Sentinels: O (16-bit) and LSE (32-bit) are filled with these bit patterns before the call.
O_SENTINEL = 0x5A5A      # bf16 1.5e16 / fp16 203: never an attention output of N(0,1) inputs
LSE_SENTINEL = 0x7FC0DEAD  # a quiet fp32 NaN with a payload
MSG_FILL = 0x7F          # fills the 1-byte message buffer test's guard bytes
WORKSPACE_SENTINEL = 0xA5  # every byte of the backward's workspace before the call
WORKSPACE_SLACK = 1024     # bytes past what the shape needs: room for the misaligned-workspace cases
BWD_REL_L2_LIMIT = 2e-2    # bf16 gradients against a float32 reference (positive controls)
FP8_BYTE_SENTINEL = 0x7F   # e4m3 NaN: never what the pre-pass writes (it saturates to +-448)
FP8_DEQUANT_REL_L2_LIMIT = 5e-2  # e4m3 keeps 3 mantissa bits: ~2.5e-2 relative L2 for N(0,1) rows
FWD_FP8_REL_L2_LIMIT = 6e-2      # O of e4m3 inputs (P rounded to e4m3) against float32 attention of them
FP8_DESCALE = 1.0 / 64           # the FP8 forward cases' descales (e4m3 inputs of magnitude < 448)

INT32_MAX = 2**31 - 1
TMA_STRIDE_LIMIT_ELEMS = 2**39  # 2^40 bytes of 2-byte elements


@dataclass(frozen=True)
class Shape:
    batch: int = 1
    seqlen: int = 128
    heads: int = 2
    head_dim: int = 64
    dtype: int = hc.HATTN_DTYPE_BF16
    heads_kv: int = 0  # 0: = heads (the forward cases are all MHA)

    @property
    def kv(self) -> int:
        return self.heads_kv or self.heads


@dataclass
class Bases:
    """Device addresses of the case's buffers (placeholders in the CPU check)."""
    q: int
    k: int
    v: int
    o: int
    lse: int


@dataclass
class BwdBases:
    """The backward's buffers; workspace_size is what the shape needs (the allocation has slack)."""
    q: int
    k: int
    v: int
    o: int
    dout: int
    lse: int
    dq: int
    dk: int
    dv: int
    workspace: int
    workspace_size: int


@dataclass
class Fp8Bases:
    """The pre-pass's and the FP8 forward's buffers (a case uses the ones its entry point names).
    q, k, v are the 16-bit inputs for the pre-pass and the e4m3 inputs for the FP8 forward."""
    q: int
    k: int
    v: int
    q_fp8: int
    k_fp8: int
    v_fp8: int
    q_descale: int
    k_descale: int
    v_descale: int
    rope_cos: int
    rope_sin: int
    o: int
    lse: int
    workspace: int
    workspace_size: int


# A defect: takes the library, valid params for the case's shape and the buffer addresses,
# returns the params to pass (None = a NULL params pointer). Backward cases get HattnBwdParams
# and BwdBases.
Mutate = Callable[[hc.Hattn, object, object, Shape], Optional[object]]


@dataclass
class Case:
    name: str
    mutate: Mutate
    expect: tuple[int, ...]   # acceptable statuses (one, except where noted)
    field_re: str             # the validation message must match this (the offending field)
    shape: Shape = field(default_factory=Shape)
    kind: str = "fwd"         # "fwd": hattn_fwd*; "bwd": hattn_bwd*; "fp8_prepass", "fwd_fp8"
    claim_workspace: bool = True  # bwd: set workspace_size to what the mutated sizes need

    @property
    def positive(self) -> bool:
        return self.expect == (hc.HATTN_SUCCESS,)


def setter(**values) -> Mutate:
    def mutate(lib, p, bases, shape):
        for name, value in values.items():
            setattr(p, name, value)
        return p
    return mutate


def offset_pointer(name: str, delta: int) -> Mutate:
    def mutate(lib, p, bases, shape):
        setattr(p, name, getattr(bases, name) + delta)
        return p
    return mutate


def both(first: Mutate, second: Mutate) -> Mutate:
    def mutate(lib, p, bases, shape):
        return second(lib, first(lib, p, bases, shape), bases, shape)
    return mutate


def contiguous(**overrides) -> Mutate:
    """hattn_fwd_params_contiguous called with some arguments replaced (its misuse)."""
    def mutate(lib, p, bases, shape):
        args = dict(q=bases.q, k=bases.k, v=bases.v, o=bases.o, batch=shape.batch, heads_q=shape.heads,
                    heads_kv=shape.heads, seqlen_q=shape.seqlen, seqlen_k=shape.seqlen, head_dim=shape.head_dim,
                    dtype=shape.dtype)
        args.update(overrides)
        for ptr in ("q", "k", "v", "o"):
            if callable(args[ptr]):
                args[ptr] = args[ptr](bases)
        new = lib.params_contiguous(**args)
        new.lse = bases.lse
        return new
    return mutate


def field_word(name: str) -> str:
    return rf"(?<![A-Za-z_]){re.escape(name)}(?![A-Za-z_])"



# The checks the forward and backward share (same fields, same statuses, same case names).
def add_dtype_and_head_dim_cases(add, setter):
    for dtype in (2, -1, INT32_MAX):
        add(f"dtype_{dtype}", setter(dtype=dtype), hc.HATTN_ERROR_UNSUPPORTED_DTYPE, field_word("dtype"))
    for d in (96, 0, -1, 32, 512):
        add(f"head_dim_{d}", setter(head_dim=d), hc.HATTN_ERROR_UNSUPPORTED_HEAD_DIM, field_word("head_dim"))


def add_size_cases(add, setter):
    for size in ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k"):
        for value in (0, -1, -(2**31)):
            add(f"{size}_{value}", setter(**{size: value}), hc.HATTN_ERROR_INVALID_SIZE, field_word(size))
    add("heads_q_2_heads_kv_3", setter(heads_kv=3), hc.HATTN_ERROR_HEADS_NOT_DIVISIBLE, field_word("heads_kv"))
    add("heads_q_3_heads_kv_2", setter(heads_q=3), hc.HATTN_ERROR_HEADS_NOT_DIVISIBLE, field_word("heads_q"))


def stride_cases(add, E, tensors, misaligned_extra: dict, misaligned_name: str = "not_16_bytes"):
    """Zero and negative strides, and strides one step short of 16 bytes (misaligned_extra[t] is
    that step in the tensor's stride unit), for every stride of every tensor named."""
    for t in tensors:
        for dim in ("batch", "seq", "head"):
            name = f"{t}_{dim}_stride"

            def scaled(factor, extra, name=name):
                def mutate(lib, p, bases, shape):
                    setattr(p, name, getattr(p, name) * factor + extra)
                    return p
                return mutate
            add(f"{name}_zero", scaled(0, 0), E.HATTN_ERROR_INVALID_STRIDE, field_word(name))
            add(f"{name}_negative", scaled(-1, 0), E.HATTN_ERROR_INVALID_STRIDE, field_word(name))
            add(f"{name}_{misaligned_name}", scaled(1, misaligned_extra[t]), E.HATTN_ERROR_MISALIGNED,
                field_word(name))


def build_cases() -> list[Case]:
    E = hc
    cases: list[Case] = []

    def add(name, mutate, expect, field_re, shape=Shape()):
        cases.append(Case(name, mutate, expect if isinstance(expect, tuple) else (expect,), field_re, shape))

    # ---- positive controls ----
    add("control_valid", setter(), E.HATTN_SUCCESS, r"^ok$")
    add("control_valid_without_lse", setter(lse=None), E.HATTN_SUCCESS, r"^ok$")
    add("control_valid_d128_bf16_ablation", setter(flags=E.HATTN_FWD_NO_PINGPONG), E.HATTN_SUCCESS, r"^ok$",
        Shape(head_dim=128, dtype=E.HATTN_DTYPE_BF16))

    # ---- NULL pointers ----
    add("null_params", lambda lib, p, b, s: None, E.HATTN_ERROR_NULL_PARAMS, field_word("params"))
    for t in ("q", "k", "v", "o"):
        add(f"null_{t}", setter(**{t: None}), E.HATTN_ERROR_NULL_POINTER, field_word(t))

    # ---- dtype and head_dim ----
    add_dtype_and_head_dim_cases(add, setter)

    # ---- sizes ----
    add_size_cases(add, setter)

    # ---- alignment of the base pointers (TMA: 16 bytes; LSE: 4 bytes) ----
    for t in ("q", "k", "v", "o"):
        add(f"misaligned_{t}_by_2", offset_pointer(t, 2), E.HATTN_ERROR_MISALIGNED, field_word(t))
    add("misaligned_q_by_8", offset_pointer("q", 8), E.HATTN_ERROR_MISALIGNED, field_word("q"))
    add("misaligned_lse_by_2", offset_pointer("lse", 2), E.HATTN_ERROR_MISALIGNED, field_word("lse"))

    # ---- strides: non-positive, or not a multiple of 8 elements (16 bytes) ----
    stride_cases(add, E, ("q", "k", "v", "o"), {t: 4 for t in "qkvo"}, "not_multiple_of_8")

    # ---- overlapping output rows ----
    o_stride = r"o_(batch|seq|head)_stride"
    add("o_rows_overlap_seq_stride_64", setter(o_seq_stride=64), E.HATTN_ERROR_INVALID_STRIDE, o_stride)
    add("o_heads_overlap_head_stride_32", setter(o_head_stride=32), E.HATTN_ERROR_INVALID_STRIDE, o_stride)
    add("o_batches_overlap", setter(batch=2, o_batch_stride=8), E.HATTN_ERROR_INVALID_STRIDE, o_stride)

    # ---- sizes, strides and extents beyond what int32, TMA or int64 hold ----
    add("batch_times_heads_over_int32", setter(batch=2**20, heads_q=2**12), E.HATTN_ERROR_SIZE_OVERFLOW,
        field_word("batch"))
    add("tiles_over_int32", setter(batch=2**15, heads_q=2**15, seqlen_q=512), E.HATTN_ERROR_SIZE_OVERFLOW,
        field_word("seqlen_q"))
    for name in ("q_batch_stride", "k_batch_stride", "v_batch_stride", "o_batch_stride", "k_seq_stride"):
        add(f"{name}_2pow40_bytes", setter(**{name: TMA_STRIDE_LIMIT_ELEMS}), E.HATTN_ERROR_SIZE_OVERFLOW,
            field_word(name))
    # (2^31 - 2) * (2^39 - 8) elements: ~2^70, beyond int64.
    for t in ("k", "v"):
        add(f"{t}_extent_over_int64", setter(seqlen_k=INT32_MAX, **{f"{t}_seq_stride": TMA_STRIDE_LIMIT_ELEMS - 8}),
            E.HATTN_ERROR_SIZE_OVERFLOW, rf"^{t}:")
    # (2^31 - 2) * 2^32 elements fit int64, their bytes do not.
    add("k_byte_range_over_int64", setter(seqlen_k=INT32_MAX, k_seq_stride=2**32), E.HATTN_ERROR_SIZE_OVERFLOW, r"^k:")
    # Buffers that would run past the top of the address space (placeholders; never dereferenced).
    add("o_past_address_space", setter(o=2**64 - 4096), E.HATTN_ERROR_SIZE_OVERFLOW, r"^o:")
    add("lse_past_address_space", setter(lse=2**64 - 256), E.HATTN_ERROR_SIZE_OVERFLOW, r"^lse:")

    # ---- softmax scale ----
    for label, value in (("nan", math.nan), ("inf", math.inf), ("minus_inf", -math.inf), ("minus_1", -1.0),
                         ("minus_tiny", -1e-30)):
        add(f"softmax_scale_{label}", setter(softmax_scale=value), E.HATTN_ERROR_INVALID_SCALE,
            field_word("softmax_scale"))

    # ---- flags ----
    for bits in (1 << 2, 1 << 31, 0xFFFFFFFF):
        add(f"flags_unknown_{bits:#x}", setter(flags=bits), E.HATTN_ERROR_INVALID_FLAGS, field_word("flags"))
    add("ablation_on_d64_bf16", setter(flags=E.HATTN_FWD_NO_PINGPONG), E.HATTN_ERROR_INVALID_FLAGS,
        field_word("flags"))
    add("ablation_on_d128_fp16", setter(flags=E.HATTN_FWD_NO_INTRA_WG_OVERLAP), E.HATTN_ERROR_INVALID_FLAGS,
        field_word("flags"), Shape(head_dim=128, dtype=E.HATTN_DTYPE_FP16))
    add("ablation_on_d256_bf16", setter(flags=E.HATTN_FWD_NO_PINGPONG | E.HATTN_FWD_NO_INTRA_WG_OVERLAP),
        E.HATTN_ERROR_INVALID_FLAGS, field_word("flags"), Shape(head_dim=256))

    # ---- the optional workspace (placeholders; never dereferenced) ----
    ws_size = lambda lib: lib.fwd_workspace_size()  # noqa: E731
    add("workspace_not_16_bytes", lambda lib, p, b, s: setter(workspace=b.o + 8, workspace_size=ws_size(lib))(lib, p, b, s),
        E.HATTN_ERROR_WORKSPACE, field_word("workspace"))
    add("workspace_too_small", lambda lib, p, b, s: setter(workspace=b.o, workspace_size=ws_size(lib) - 1)(lib, p, b, s),
        E.HATTN_ERROR_WORKSPACE, field_word("workspace_size"))
    add("workspace_past_address_space",
        lambda lib, p, b, s: setter(workspace=2**64 - 4096, workspace_size=ws_size(lib))(lib, p, b, s),
        E.HATTN_ERROR_SIZE_OVERFLOW, r"^workspace:")

    # ---- hattn_fwd_params_contiguous misused ----
    add("contiguous_null_q", contiguous(q=None), E.HATTN_ERROR_NULL_POINTER, field_word("q"))
    add("contiguous_head_dim_96", contiguous(head_dim=96), E.HATTN_ERROR_UNSUPPORTED_HEAD_DIM, field_word("head_dim"))
    add("contiguous_dtype_7", contiguous(dtype=7), E.HATTN_ERROR_UNSUPPORTED_DTYPE, field_word("dtype"))
    add("contiguous_seqlen_q_negative", contiguous(seqlen_q=-128), E.HATTN_ERROR_INVALID_SIZE, field_word("seqlen_q"))
    add("contiguous_misaligned_v", contiguous(v=lambda b: b.v + 2), E.HATTN_ERROR_MISALIGNED, field_word("v"))
    # seqlen_k * heads_kv * head_dim ~ 2^70 is past int64: the helper saturates such a stride (a
    # library that wrapped it made it negative); either way it must be rejected. q's strides (heads_q
    # is as large) pass TMA's limit too, and q is checked first, so either tensor may be named.
    add("contiguous_kv_size_wraps_int64",
        contiguous(heads_q=INT32_MAX, heads_kv=INT32_MAX, seqlen_k=INT32_MAX, head_dim=256),
        (E.HATTN_ERROR_INVALID_STRIDE, E.HATTN_ERROR_SIZE_OVERFLOW), r"(?<![A-Za-z_])[qk](_|:|\b)")
    return cases


def contiguous_bwd(**overrides) -> Mutate:
    """hattn_bwd_params_contiguous called with some arguments replaced (its misuse); the workspace
    is set afterwards, as a caller must."""
    def mutate(lib, p, bases, shape):
        args = dict(q=bases.q, k=bases.k, v=bases.v, o=bases.o, dout=bases.dout, lse=bases.lse, dq=bases.dq,
                    dk=bases.dk, dv=bases.dv, batch=shape.batch, heads_q=shape.heads, heads_kv=shape.kv,
                    seqlen_q=shape.seqlen, seqlen_k=shape.seqlen, head_dim=shape.head_dim, dtype=shape.dtype)
        args.update(overrides)
        for ptr in ("q", "k", "v", "o", "dout", "lse", "dq", "dk", "dv"):
            if callable(args[ptr]):
                args[ptr] = args[ptr](bases)
        new = lib.bwd_params_contiguous(**args)
        new.workspace, new.workspace_size = bases.workspace, bases.workspace_size
        return new
    return mutate


BWD_TENSORS = ("q", "k", "v", "o", "dout", "lse", "dq", "dk", "dv")
# Stride-field prefixes of the eight [b, s, h, d] tensors (dout's strides are do_*).
BWD_STRIDED = ("q", "k", "v", "o", "do", "dq", "dk", "dv")


def build_bwd_cases() -> list[Case]:
    E = hc
    cases: list[Case] = []

    def add(name, mutate, expect, field_re, shape=Shape(), claim_workspace=True):
        cases.append(Case(f"bwd_{name}", mutate, expect if isinstance(expect, tuple) else (expect,), field_re, shape,
                          kind="bwd", claim_workspace=claim_workspace))

    def workspace_size(delta: int) -> Mutate:
        def mutate(lib, p, bases, shape):
            p.workspace_size = bases.workspace_size + delta
            return p
        return mutate

    # ---- positive controls ----
    add("control_valid", setter(), E.HATTN_SUCCESS, r"^ok$")
    add("control_valid_causal_gqa_odd_seqlen", setter(causal=1), E.HATTN_SUCCESS, r"^ok$",
        Shape(seqlen=200, heads=4, heads_kv=2))
    add("control_valid_deterministic_d128", setter(flags=E.HATTN_BWD_DETERMINISTIC), E.HATTN_SUCCESS, r"^ok$",
        Shape(head_dim=128))
    add("control_valid_fp16_d256_workspace_larger_than_needed", workspace_size(256), E.HATTN_SUCCESS, r"^ok$",
        Shape(head_dim=256, dtype=E.HATTN_DTYPE_FP16), claim_workspace=False)

    # ---- NULL pointers (every tensor, LSE included: the backward needs it) ----
    add("null_params", lambda lib, p, b, s: None, E.HATTN_ERROR_NULL_PARAMS, field_word("params"))
    for t in BWD_TENSORS:
        add(f"null_{t}", setter(**{t: None}), E.HATTN_ERROR_NULL_POINTER, field_word(t))

    # ---- the workspace: NULL, misaligned (256 bytes), too small ----
    ws = field_word("workspace") + "|" + field_word("workspace_size")
    add("null_workspace", setter(workspace=None), E.HATTN_ERROR_WORKSPACE, ws, claim_workspace=False)
    for delta in (16, 128, 255):
        add(f"workspace_misaligned_by_{delta}", offset_pointer("workspace", delta), E.HATTN_ERROR_WORKSPACE, ws,
            claim_workspace=False)
    add("workspace_one_byte_short", workspace_size(-1), E.HATTN_ERROR_WORKSPACE, ws, claim_workspace=False)
    add("workspace_256_bytes_short", workspace_size(-256), E.HATTN_ERROR_WORKSPACE, ws, claim_workspace=False)
    add("workspace_size_0", setter(workspace_size=0), E.HATTN_ERROR_WORKSPACE, ws, claim_workspace=False)
    # A d64 problem's workspace handed to the same problem at d128, which needs more (the tensors
    # are too small too, which validation cannot see: only the workspace size gives it away).
    def d128_with_d64_workspace(lib, p, bases, shape):
        new = _contiguous_bare(lib, bases, replace(shape, head_dim=128))
        new.workspace, new.workspace_size = bases.workspace, bases.workspace_size
        return new
    add("workspace_for_a_smaller_head_dim", d128_with_d64_workspace, E.HATTN_ERROR_WORKSPACE, ws,
        claim_workspace=False)

    # ---- dtype and head_dim ----
    add_dtype_and_head_dim_cases(add, setter)

    # ---- sizes, GQA ----
    add_size_cases(add, setter)
    add("heads_q_4_heads_kv_3", setter(heads_q=4, heads_kv=3), E.HATTN_ERROR_HEADS_NOT_DIVISIBLE,
        field_word("heads_kv") + "|" + field_word("heads_q"))

    # ---- alignment of the base pointers (TMA: 16 bytes; LSE: at least 4) ----
    for t in ("q", "k", "v", "o", "dout", "dq", "dk", "dv"):
        add(f"misaligned_{t}_by_2", offset_pointer(t, 2), E.HATTN_ERROR_MISALIGNED, field_word(t))
    add("misaligned_dout_by_8", offset_pointer("dout", 8), E.HATTN_ERROR_MISALIGNED, field_word("dout"))
    add("misaligned_lse_by_2", offset_pointer("lse", 2), E.HATTN_ERROR_MISALIGNED, field_word("lse"))

    # ---- strides: non-positive, or not a multiple of 8 elements (16 bytes) ----
    stride_cases(add, E, BWD_STRIDED, {t: 4 for t in BWD_STRIDED}, "not_multiple_of_8")

    # ---- overlapping rows of the outputs (dq, dk, dv are written by many CTAs) ----
    for t in ("dq", "dk", "dv"):
        strides = rf"{t}_(batch|seq|head)_stride"
        add(f"{t}_rows_overlap_seq_stride_64", setter(**{f"{t}_seq_stride": 64}), E.HATTN_ERROR_INVALID_STRIDE, strides)
        add(f"{t}_heads_overlap_head_stride_32", setter(**{f"{t}_head_stride": 32}), E.HATTN_ERROR_INVALID_STRIDE,
            strides)
        add(f"{t}_batches_overlap", setter(batch=2, **{f"{t}_batch_stride": 8}), E.HATTN_ERROR_INVALID_STRIDE, strides)

    # ---- sizes, strides and extents beyond what int32, TMA or int64 hold ----
    add("batch_times_heads_over_int32", setter(batch=2**20, heads_q=2**12), E.HATTN_ERROR_SIZE_OVERFLOW,
        field_word("batch") + "|" + field_word("heads_q"))
    # Q, K, V and dO are read through TMA by any FlashAttention-style backward: a stride of 2^40
    # bytes or more cannot be encoded.
    for name in ("q_batch_stride", "k_batch_stride", "v_batch_stride", "do_batch_stride", "k_seq_stride",
                 "do_seq_stride"):
        add(f"{name}_2pow40_bytes", setter(**{name: TMA_STRIDE_LIMIT_ELEMS}), E.HATTN_ERROR_SIZE_OVERFLOW,
            field_word(name))
    # (2^31 - 2) * (2^39 - 8) elements: ~2^70, beyond int64.
    for t in ("k", "dk", "dv"):
        add(f"{t}_extent_over_int64", setter(seqlen_k=INT32_MAX, **{f"{t}_seq_stride": TMA_STRIDE_LIMIT_ELEMS - 8}),
            E.HATTN_ERROR_SIZE_OVERFLOW, rf"(?<![A-Za-z_]){t}(_seq_stride)?(?![A-Za-z_])")
    # Buffers that would run past the top of the address space (placeholders; never dereferenced).
    for t in ("dq", "dk", "dout"):
        add(f"{t}_past_address_space", setter(**{t: 2**64 - 4096}), E.HATTN_ERROR_SIZE_OVERFLOW, field_word(t))
    add("lse_past_address_space", setter(lse=2**64 - 256), E.HATTN_ERROR_SIZE_OVERFLOW, field_word("lse"))
    # A workspace claimed to run past the top of the address space: too small or an overflow.
    add("workspace_past_address_space", setter(workspace=2**64 - 4096), (E.HATTN_ERROR_WORKSPACE,
        E.HATTN_ERROR_SIZE_OVERFLOW), ws)
    # Sizes whose workspace overflows (hattn_bwd_workspace_size says 0), contiguous strides for them.
    # Q of these sizes is as large as the workspace, so a stride or extent check may see it first:
    # any field may be named.
    add("workspace_size_overflows", contiguous_bwd(batch=2**15, heads_q=2**15, seqlen_q=INT32_MAX),
        (E.HATTN_ERROR_SIZE_OVERFLOW, E.HATTN_ERROR_WORKSPACE), r".")

    # ---- softmax scale ----
    for label, value in (("nan", math.nan), ("inf", math.inf), ("minus_inf", -math.inf), ("minus_1", -1.0),
                         ("minus_tiny", -1e-30)):
        add(f"softmax_scale_{label}", setter(softmax_scale=value), E.HATTN_ERROR_INVALID_SCALE,
            field_word("softmax_scale"))

    # ---- flags: only HATTN_BWD_DETERMINISTIC is known (bit 1 is a forward-only value) ----
    for bits in (1 << 1, 1 << 2, 1 << 31, 0xFFFFFFFF):
        add(f"flags_unknown_{bits:#x}", setter(flags=bits), E.HATTN_ERROR_INVALID_FLAGS, field_word("flags"))

    # ---- hattn_bwd_params_contiguous misused ----
    add("contiguous_null_dout", contiguous_bwd(dout=None), E.HATTN_ERROR_NULL_POINTER, field_word("dout"))
    add("contiguous_null_lse", contiguous_bwd(lse=None), E.HATTN_ERROR_NULL_POINTER, field_word("lse"))
    add("contiguous_head_dim_96", contiguous_bwd(head_dim=96), E.HATTN_ERROR_UNSUPPORTED_HEAD_DIM,
        field_word("head_dim"))
    add("contiguous_dtype_7", contiguous_bwd(dtype=7), E.HATTN_ERROR_UNSUPPORTED_DTYPE, field_word("dtype"))
    add("contiguous_seqlen_k_negative", contiguous_bwd(seqlen_k=-128), E.HATTN_ERROR_INVALID_SIZE,
        field_word("seqlen_k"))
    add("contiguous_misaligned_dk", contiguous_bwd(dk=lambda b: b.dk + 2), E.HATTN_ERROR_MISALIGNED, field_word("dk"))

    def without_workspace(lib, p, bases, shape):
        """What hattn_bwd_params_contiguous returns, passed on before the workspace is set."""
        return _contiguous_bare(lib, bases, shape)
    add("contiguous_without_workspace", without_workspace, E.HATTN_ERROR_WORKSPACE, ws, claim_workspace=False)
    return cases


def _contiguous_bare(lib, bases, shape):
    return lib.bwd_params_contiguous(bases.q, bases.k, bases.v, bases.o, bases.dout, bases.lse, bases.dq, bases.dk,
                                     bases.dv, shape.batch, shape.heads, shape.kv, shape.seqlen, shape.seqlen,
                                     shape.head_dim, shape.dtype)


# ---- FP8: the pre-pass and the FP8 forward ------------------------------------------------------
FP8_TENSORS_16BIT = ("q", "k", "v")            # the pre-pass's inputs (strides in elements)
FP8_TENSORS_E4M3 = ("q_fp8", "k_fp8", "v_fp8")  # its outputs (strides in bytes)
DESCALES = ("q_descale", "k_descale", "v_descale")


def _prepass_bare(lib, b: Fp8Bases, s: Shape):
    return lib.fp8_prepass_params_contiguous(b.q, b.k, b.v, b.q_fp8, b.k_fp8, b.v_fp8, b.q_descale, b.k_descale,
                                             b.v_descale, s.batch, s.heads, s.kv, s.seqlen, s.seqlen, s.head_dim,
                                             s.dtype)


def _fwd_fp8_bare(lib, b: Fp8Bases, s: Shape):
    """Valid FP8-forward params on the e4m3 buffers (q_fp8, k_fp8, v_fp8), with LSE and workspace."""
    p = lib.fwd_fp8_params_contiguous(b.q_fp8, b.k_fp8, b.v_fp8, b.o, b.q_descale, b.k_descale, b.v_descale, s.batch,
                                      s.heads, s.kv, s.seqlen, s.seqlen, s.head_dim, s.dtype)
    p.lse, p.workspace, p.workspace_size = b.lse, b.workspace, b.workspace_size
    return p


def with_rope(rope: int, **values) -> Mutate:
    """RoPE on (tables of seqlen rows), then some fields replaced."""
    def mutate(lib, p, bases, shape):
        p.rope, p.rope_cos, p.rope_sin, p.rope_rows = rope, bases.rope_cos, bases.rope_sin, shape.seqlen
        for name, value in values.items():
            setattr(p, name, value)
        return p
    return mutate


def offset_field(name: str, base: str, delta: int) -> Mutate:
    """Field `name` set to buffer `base` + delta bytes (the FP8 forward's q is the q_fp8 buffer)."""
    def mutate(lib, p, bases, shape):
        setattr(p, name, getattr(bases, base) + delta)
        return p
    return mutate


def build_fp8_prepass_cases() -> list[Case]:
    E = hc
    cases: list[Case] = []

    def add(name, mutate, expect, field_re, shape=Shape()):
        cases.append(Case(f"fp8_prepass_{name}", mutate, expect if isinstance(expect, tuple) else (expect,),
                          field_re, shape, kind="fp8_prepass"))

    # ---- positive controls ----
    add("control_valid", setter(), E.HATTN_SUCCESS, r"^ok$")
    add("control_valid_rope_interleaved_hadamard", with_rope(E.HATTN_ROPE_INTERLEAVED, hadamard=1, hadamard_seed=7),
        E.HATTN_SUCCESS, r"^ok$")
    add("control_valid_rope_half_gqa_d128_fp16", with_rope(E.HATTN_ROPE_HALF, hadamard=1), E.HATTN_SUCCESS, r"^ok$",
        Shape(seqlen=200, heads=4, heads_kv=2, head_dim=128, dtype=E.HATTN_DTYPE_FP16))

    # ---- NULL pointers ----
    add("null_params", lambda lib, p, b, s: None, E.HATTN_ERROR_NULL_PARAMS, field_word("params"))
    for t in FP8_TENSORS_16BIT + FP8_TENSORS_E4M3 + DESCALES:
        add(f"null_{t}", setter(**{t: None}), E.HATTN_ERROR_NULL_POINTER, field_word(t))
    add("null_rope_cos", with_rope(E.HATTN_ROPE_INTERLEAVED, rope_cos=None), E.HATTN_ERROR_NULL_POINTER,
        field_word("rope_cos"))
    add("null_rope_sin", with_rope(E.HATTN_ROPE_HALF, rope_sin=None), E.HATTN_ERROR_NULL_POINTER,
        field_word("rope_sin"))

    # ---- dtype, head_dim, sizes ----
    add_dtype_and_head_dim_cases(add, setter)
    add_size_cases(add, setter)

    # ---- RoPE and flags ----
    for rope in (3, -1):
        add(f"rope_{rope}", setter(rope=rope), E.HATTN_ERROR_INVALID_FLAGS, field_word("rope"))
    # (bit 0 is HATTN_FP8_PREPASS_V_TRANSPOSED, bit 1 HATTN_FP8_PREPASS_V_PER_HEAD)
    for bits in (4, 1 << 31, E.HATTN_FP8_PREPASS_V_TRANSPOSED | E.HATTN_FP8_PREPASS_V_PER_HEAD | 8):
        add(f"flags_unknown_{bits:#x}", setter(flags=bits), E.HATTN_ERROR_INVALID_FLAGS, field_word("flags"))
    # V^T output: its own alignment rule (16 bytes, the FP8 forward's TMA); its strides are ignored.
    add("vt_output_misaligned_by_4", both(setter(flags=E.HATTN_FP8_PREPASS_V_TRANSPOSED), offset_pointer("v_fp8", 4)),
        E.HATTN_ERROR_MISALIGNED, field_word("v_fp8"))
    add("vt_output_ignores_v_fp8_strides_but_not_q_fp8",
        setter(flags=E.HATTN_FP8_PREPASS_V_TRANSPOSED, v_fp8_seq_stride=-1, q_fp8_seq_stride=-1),
        E.HATTN_ERROR_INVALID_STRIDE, field_word("q_fp8_seq_stride"))
    add("rope_q_offset_negative", with_rope(E.HATTN_ROPE_INTERLEAVED, rope_q_offset=-1), E.HATTN_ERROR_INVALID_SIZE,
        field_word("rope_q_offset"))
    add("rope_rows_below_seqlen", with_rope(E.HATTN_ROPE_HALF, rope_rows=127), E.HATTN_ERROR_INVALID_SIZE,
        field_word("rope_rows"))
    add("rope_rows_below_query_rows", with_rope(E.HATTN_ROPE_HALF, rope_q_offset=1), E.HATTN_ERROR_INVALID_SIZE,
        field_word("rope_rows"))

    # ---- alignment: 16 bytes for the tensors and the rope tables, 4 for the descales ----
    for t, delta in (("q", 2), ("k", 8), ("v", 2), ("q_fp8", 8), ("k_fp8", 1), ("v_fp8", 4)):
        add(f"misaligned_{t}_by_{delta}", offset_pointer(t, delta), E.HATTN_ERROR_MISALIGNED, field_word(t))
    for t in DESCALES:
        add(f"misaligned_{t}_by_2", offset_pointer(t, 2), E.HATTN_ERROR_MISALIGNED, field_word(t))

    def rope_cos_misaligned(lib, p, bases, shape):
        p = with_rope(E.HATTN_ROPE_INTERLEAVED)(lib, p, bases, shape)
        p.rope_cos = bases.rope_cos + 4
        return p
    add("misaligned_rope_cos_by_4", rope_cos_misaligned, E.HATTN_ERROR_MISALIGNED, field_word("rope_cos"))

    # ---- strides ----
    stride_cases(add, E, FP8_TENSORS_16BIT + FP8_TENSORS_E4M3,
                 {**{t: 4 for t in FP8_TENSORS_16BIT}, **{t: 8 for t in FP8_TENSORS_E4M3}})
    add("q_fp8_heads_overlap", setter(q_fp8_head_stride=32), E.HATTN_ERROR_INVALID_STRIDE,
        r"q_fp8_(batch|seq|head)_stride")
    add("k_fp8_rows_overlap", setter(k_fp8_seq_stride=64), E.HATTN_ERROR_INVALID_STRIDE,
        r"k_fp8_(batch|seq|head)_stride")

    # ---- beyond int32, TMA, int64 and the address space ----
    add("batch_times_heads_over_int32", setter(batch=2**20, heads_q=2**12), E.HATTN_ERROR_SIZE_OVERFLOW,
        field_word("batch") + "|" + field_word("heads_q"))
    add("q_batch_stride_2pow40_bytes", setter(q_batch_stride=TMA_STRIDE_LIMIT_ELEMS), E.HATTN_ERROR_SIZE_OVERFLOW,
        field_word("q_batch_stride"))
    add("q_fp8_past_address_space", setter(q_fp8=2**64 - 4096), E.HATTN_ERROR_SIZE_OVERFLOW, r"^q_fp8:")
    add("v_descale_past_address_space", setter(v_descale=2**64 - 4), E.HATTN_ERROR_SIZE_OVERFLOW, r"^v_descale:")
    return cases


def build_fwd_fp8_cases() -> list[Case]:
    E = hc
    cases: list[Case] = []

    def add(name, mutate, expect, field_re, shape=Shape(), claim_workspace=True):
        cases.append(Case(f"fwd_fp8_{name}", mutate, expect if isinstance(expect, tuple) else (expect,), field_re,
                          shape, kind="fwd_fp8", claim_workspace=claim_workspace))

    # ---- positive controls ----
    add("control_valid", setter(), E.HATTN_SUCCESS, r"^ok$")
    add("control_valid_without_lse", setter(lse=None), E.HATTN_SUCCESS, r"^ok$")
    add("control_valid_causal_gqa_odd_seqlen", setter(causal=1), E.HATTN_SUCCESS, r"^ok$",
        Shape(seqlen=200, heads=4, heads_kv=2))
    add("control_valid_d256_fp16", setter(), E.HATTN_SUCCESS, r"^ok$", Shape(head_dim=256, dtype=E.HATTN_DTYPE_FP16))

    # ---- NULL pointers ----
    add("null_params", lambda lib, p, b, s: None, E.HATTN_ERROR_NULL_PARAMS, field_word("params"))
    for t in ("q", "k", "v", "o") + DESCALES:
        add(f"null_{t}", setter(**{t: None}), E.HATTN_ERROR_NULL_POINTER, field_word(t))

    # ---- o_dtype, head_dim, sizes ----
    for dtype in (2, -1, INT32_MAX):
        add(f"o_dtype_{dtype}", setter(o_dtype=dtype), E.HATTN_ERROR_UNSUPPORTED_DTYPE, field_word("o_dtype"))
    for d in (96, 0, -1, 32, 512):
        add(f"head_dim_{d}", setter(head_dim=d), E.HATTN_ERROR_UNSUPPORTED_HEAD_DIM, field_word("head_dim"))
    add_size_cases(add, setter)

    # ---- alignment: 16 bytes for the TMA tensors, 4 for LSE and the descales ----
    for t, base, delta in (("q", "q_fp8", 8), ("k", "k_fp8", 1), ("v", "v_fp8", 4), ("o", "o", 2)):
        add(f"misaligned_{t}_by_{delta}", offset_field(t, base, delta), E.HATTN_ERROR_MISALIGNED, field_word(t))
    for t in ("lse",) + DESCALES:
        add(f"misaligned_{t}_by_2", offset_pointer(t, 2), E.HATTN_ERROR_MISALIGNED, field_word(t))

    # ---- strides (bytes for the e4m3 inputs, elements for o) ----
    stride_cases(add, E, ("q", "k", "v", "o"), {"q": 8, "k": 8, "v": 8, "o": 4})
    o_stride = r"o_(batch|seq|head)_stride"
    add("o_heads_overlap_head_stride_32", setter(o_head_stride=32), E.HATTN_ERROR_INVALID_STRIDE, o_stride)
    add("o_rows_overlap_seq_stride_64", setter(o_seq_stride=64), E.HATTN_ERROR_INVALID_STRIDE, o_stride)

    # ---- beyond int32, TMA, int64 and the address space ----
    add("batch_times_heads_over_int32", setter(batch=2**20, heads_q=2**12), E.HATTN_ERROR_SIZE_OVERFLOW,
        field_word("batch") + "|" + field_word("heads_q"))
    add("k_seq_stride_2pow40_bytes", setter(k_seq_stride=2**40), E.HATTN_ERROR_SIZE_OVERFLOW, field_word("k_seq_stride"))
    add("o_batch_stride_2pow40_bytes", setter(o_batch_stride=TMA_STRIDE_LIMIT_ELEMS), E.HATTN_ERROR_SIZE_OVERFLOW,
        field_word("o_batch_stride"))
    add("q_past_address_space", setter(q=2**64 - 4096), E.HATTN_ERROR_SIZE_OVERFLOW, r"^q:")
    add("v_descale_past_address_space", setter(v_descale=2**64 - 4), E.HATTN_ERROR_SIZE_OVERFLOW, r"^v_descale:")

    # ---- scale, flags ----
    for label, value in (("nan", math.nan), ("inf", math.inf), ("minus_1", -1.0)):
        add(f"softmax_scale_{label}", setter(softmax_scale=value), E.HATTN_ERROR_INVALID_SCALE,
            field_word("softmax_scale"))
    # (bit 0 is HATTN_FWD_FP8_V_TRANSPOSED)
    for bits in (1 << 1, 1 << 3, E.HATTN_FWD_FP8_V_TRANSPOSED | (1 << 31), 0xFFFFFFFF):
        add(f"flags_unknown_{bits:#x}", setter(flags=bits), E.HATTN_ERROR_INVALID_FLAGS, field_word("flags"))
    # V^T given by the caller: 16-byte aligned; its strides are ignored.
    add("vt_input_misaligned_by_8", both(setter(flags=E.HATTN_FWD_FP8_V_TRANSPOSED), offset_field("v", "v_fp8", 8)),
        E.HATTN_ERROR_MISALIGNED, field_word("v"))
    add("vt_input_ignores_v_strides_but_not_k",
        setter(flags=E.HATTN_FWD_FP8_V_TRANSPOSED, v_seq_stride=-1, k_seq_stride=-1),
        E.HATTN_ERROR_INVALID_STRIDE, field_word("k_seq_stride"))

    # ---- the V^T workspace: NULL, misaligned (256 bytes), too small ----
    ws = field_word("workspace") + "|" + field_word("workspace_size")
    add("null_workspace", setter(workspace=None), E.HATTN_ERROR_WORKSPACE, ws, claim_workspace=False)
    add("workspace_misaligned_by_16", offset_pointer("workspace", 16), E.HATTN_ERROR_WORKSPACE, ws,
        claim_workspace=False)

    def workspace_short(lib, p, bases, shape):
        p.workspace_size = bases.workspace_size - 1
        return p
    add("workspace_one_byte_short", workspace_short, E.HATTN_ERROR_WORKSPACE, ws, claim_workspace=False)
    add("workspace_size_0", setter(workspace_size=0), E.HATTN_ERROR_WORKSPACE, ws, claim_workspace=False)

    # ---- the optional schedule workspace (hattn_fwd_workspace_size() bytes, 16-byte aligned) ----
    sched_size = lambda lib: lib.fwd_workspace_size()  # noqa: E731
    add("schedule_workspace_not_16_bytes",
        lambda lib, p, b, s: setter(schedule_workspace=b.o + 8, schedule_workspace_size=sched_size(lib))(lib, p, b, s),
        E.HATTN_ERROR_WORKSPACE, field_word("schedule_workspace"))
    add("schedule_workspace_too_small",
        lambda lib, p, b, s: setter(schedule_workspace=b.o, schedule_workspace_size=sched_size(lib) - 1)(lib, p, b, s),
        E.HATTN_ERROR_WORKSPACE, field_word("schedule_workspace_size"))
    add("schedule_workspace_past_address_space",
        lambda lib, p, b, s: setter(schedule_workspace=2**64 - 4096, schedule_workspace_size=sched_size(lib))(lib, p, b, s),
        E.HATTN_ERROR_SIZE_OVERFLOW, field_word("schedule_workspace"))
    return cases


ALL_CASES = build_cases() + build_bwd_cases() + build_fp8_prepass_cases() + build_fwd_fp8_cases()
CASES = {c.name: c for c in ALL_CASES}
assert len(CASES) == len(ALL_CASES), "duplicate case names"
FP8_KINDS = ("fp8_prepass", "fwd_fp8")


def params_for(lib: hc.Hattn, case: Case, bases) -> Optional[object]:
    """Valid params for the case's shape on these buffers, with the case's one defect applied."""
    s = case.shape
    if case.kind == "fp8_prepass":
        return case.mutate(lib, _prepass_bare(lib, bases, s), bases, s)
    if case.kind == "fwd_fp8":
        p = case.mutate(lib, _fwd_fp8_bare(lib, bases, s), bases, s)
        if p is not None and case.claim_workspace:
            need = lib.fwd_fp8_workspace_size(p.batch, p.heads_kv, p.seqlen_k, p.head_dim)
            p.workspace_size = max(p.workspace_size, need)
        return p
    if case.kind == "bwd":
        p = _contiguous_bare(lib, bases, s)
        p.workspace, p.workspace_size = bases.workspace, bases.workspace_size
        p = case.mutate(lib, p, bases, s)
        if p is not None and case.claim_workspace:
            # Keep the workspace out of it: claim what the (mutated) sizes need, when that is defined.
            need = lib.bwd_workspace_size(p.batch, p.heads_q, p.seqlen_q, p.head_dim)
            p.workspace_size = max(p.workspace_size, need)
        return p
    p = lib.params_contiguous(bases.q, bases.k, bases.v, bases.o, s.batch, s.heads, s.kv, s.seqlen, s.seqlen,
                              s.head_dim, s.dtype)
    p.lse = bases.lse
    return case.mutate(lib, p, bases, s)


def check_validate(lib: hc.Hattn, case: Case, params: Optional[object]) -> list[str]:
    """hattn_<kind>_validate: status, message, and the msg = NULL and 1-byte-buffer forms."""
    name = f"hattn_{case.kind}_validate"
    validate = {"fwd": lib.validate, "bwd": lib.bwd_validate, "fp8_prepass": lib.fp8_prepass_validate,
                "fwd_fp8": lib.fwd_fp8_validate}[case.kind]
    raw = getattr(lib.lib, name)
    problems = []
    status, msg = validate(params)
    if status not in case.expect:
        problems.append(f"{name} returned {hc.status_name(status)}, expected "
                        f"{' or '.join(map(hc.status_name, case.expect))} (message: {msg!r})")
    if not msg:
        problems.append(f"{name} left the message empty")
    elif not re.search(case.field_re, msg):
        problems.append(f"the message {msg!r} does not name the field (/{case.field_re}/)")
    ptr = None if params is None else ctypes.byref(params)
    status_null = raw(ptr, None, 0)
    if status_null != status:
        problems.append(f"{name}(msg = NULL) returned {hc.status_name(status_null)}")
    tiny = ctypes.create_string_buffer(4)
    ctypes.memset(tiny, MSG_FILL, 4)
    status_tiny = raw(ptr, tiny, 1)
    if status_tiny != status or tiny.raw != bytes([0, MSG_FILL, MSG_FILL, MSG_FILL]):
        problems.append(f"{name}(msg_len = 1) returned {hc.status_name(status_tiny)} and left the buffer "
                        f"{tiny.raw!r} (expected b'\\x00' then untouched bytes)")
    return problems


def child_setup(case: Case):
    """The case's shape, its torch dtype, the CUDA device and a generator seeded by the case name."""
    import torch

    s = case.shape
    torch_dtype = torch.bfloat16 if s.dtype == hc.HATTN_DTYPE_BF16 else torch.float16
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(sum(map(ord, case.name)))
    return s, torch_dtype, dev, gen


def finish_child(case: Case, problems: list[str], names, before, after) -> int:
    """Inputs must be unchanged bit for bit; print the RESULT line and return the exit code."""
    import torch

    for name, b, a in zip(names, before, after):
        if not torch.equal(b.view(torch.uint8), a.view(torch.uint8)):
            problems.append(f"input {name} changed")
    verdict = "PASS" if not problems else "FAIL: " + "; ".join(problems)
    print(f"RESULT {case.name} {verdict}")
    return EXIT_PASS if not problems else EXIT_FAIL


# ---- the child: one case, with torch ------------------------------------------------------------
def run_child(case_name: str, lib_path: Path) -> int:
    import torch  # first, before libhattn is loaded: the point is hattn inside a torch process

    case = CASES.get(case_name)
    if case is None:
        print(f"RESULT {case_name} FAIL: no such case (see --list)")
        return EXIT_FAIL
    if not torch.cuda.is_available():
        print(f"RESULT {case_name} SKIP: torch sees no CUDA device")
        return EXIT_SKIP
    lib = hc.Hattn(lib_path)
    if case.kind == "bwd":
        if not lib.has_bwd:
            print(f"RESULT {case_name} SKIP: {lib_path} has no backward entry points")
            return EXIT_SKIP
        return run_child_bwd(case, lib)
    if case.kind in FP8_KINDS:
        if not lib.has_fp8:
            print(f"RESULT {case_name} SKIP: {lib_path} has no FP8 entry points")
            return EXIT_SKIP
        return run_child_fp8_prepass(case, lib) if case.kind == "fp8_prepass" else run_child_fwd_fp8(case, lib)
    s, torch_dtype, dev, gen = child_setup(case)
    q, k, v = (torch.randn((s.batch, s.seqlen, s.heads, s.head_dim), device=dev, dtype=torch_dtype, generator=gen)
               for _ in range(3))
    inputs_before = [t.clone() for t in (q, k, v)]
    o = torch.empty_like(q)
    o.view(torch.int16).fill_(O_SENTINEL)
    lse = torch.empty((s.batch, s.heads, s.seqlen), device=dev, dtype=torch.float32)
    lse.view(torch.int32).fill_(LSE_SENTINEL)
    torch.cuda.synchronize()

    bases = Bases(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr())
    params = params_for(lib, case, bases)
    problems = check_validate(lib, case, params)

    stream = torch.cuda.current_stream().cuda_stream
    status = lib.fwd(params, stream)
    if status not in case.expect:
        problems.append(f"hattn_fwd returned {hc.status_name(status)}, expected "
                        f"{' or '.join(map(hc.status_name, case.expect))}")
    try:
        torch.cuda.synchronize()
    except RuntimeError as error:  # a kernel that faulted: the context is gone
        problems.append(f"torch.cuda.synchronize() after hattn_fwd failed: {str(error).splitlines()[0]}")
        print(f"RESULT {case_name} FAIL: " + "; ".join(problems))
        return EXIT_FAIL

    o_kept = int((o.view(torch.int16) == O_SENTINEL).sum().item())
    lse_kept = int((lse.view(torch.int32) == LSE_SENTINEL).sum().item())
    lse_requested = params is not None and params.lse == bases.lse
    if case.positive:
        if o_kept:
            problems.append(f"{o_kept} of {o.numel()} elements of O still hold the sentinel after hattn_fwd")
        elif not torch.isfinite(o.float()).all():
            problems.append("O has non-finite elements after hattn_fwd on N(0,1) inputs")
        if lse_requested and lse_kept:
            problems.append(f"{lse_kept} of {lse.numel()} LSE elements still hold the sentinel")
        if not lse_requested and lse_kept != lse.numel():
            problems.append(f"LSE was not requested but {lse.numel() - lse_kept} of its elements changed")
    else:
        if o_kept != o.numel():
            problems.append(f"{o.numel() - o_kept} of {o.numel()} elements of O were written by a rejected call")
        if lse_kept != lse.numel():
            problems.append(f"{lse.numel() - lse_kept} of {lse.numel()} LSE elements were written by a rejected call")
    return finish_child(case, problems, "qkv", inputs_before, (q, k, v))


def reference_attention(qf, kf, vf, causal: bool, scale: float):
    """Attention of float32 [b, s, h, d] tensors (GQA: K/V heads repeated); causal is bottom-right
    aligned, as hattn's."""
    import torch

    group = qf.shape[2] // kf.shape[2]
    qh = qf.transpose(1, 2)
    kh, vh = (t.repeat_interleave(group, dim=2).transpose(1, 2) for t in (kf, vf))
    scores = (qh @ kh.transpose(-1, -2)) * scale
    if causal:
        sq, sk = qf.shape[1], kf.shape[1]
        visible = torch.ones(sq, sk, dtype=torch.bool, device=qf.device).tril_(sk - sq)
        scores = scores.masked_fill(~visible, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vh).transpose(1, 2)


def reference_grads(q, k, v, dout, causal: bool, scale: float):
    """float32 autograd gradients of reference_attention (dK and dV summed over each GQA group)."""
    import torch

    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    return torch.autograd.grad(reference_attention(qf, kf, vf, causal, scale), (qf, kf, vf), dout.float())


def relative_l2(got, ref) -> float:
    return ((got.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def per_row_descale(descale, seqlen: int):
    """[b, h, blocks] descales as [b, seqlen, h, 1], one per row, to multiply [b, s, h, d] tensors."""
    return descale.repeat_interleave(hc.HATTN_FP8_BLOCK_ROWS, dim=2)[:, :, :seqlen].transpose(1, 2).unsqueeze(-1)


def run_child_fp8_prepass(case: Case, lib: hc.Hattn) -> int:
    import torch

    s, torch_dtype, dev, gen = child_setup(case)
    q = torch.randn((s.batch, s.seqlen, s.heads, s.head_dim), device=dev, dtype=torch_dtype, generator=gen)
    k, v = (torch.randn((s.batch, s.seqlen, s.kv, s.head_dim), device=dev, dtype=torch_dtype, generator=gen)
            for _ in range(2))
    q8, k8, v8 = (torch.full(t.shape, FP8_BYTE_SENTINEL, dtype=torch.uint8, device=dev) for t in (q, k, v))
    blocks = -(-s.seqlen // hc.HATTN_FP8_BLOCK_ROWS)
    descales = [torch.empty((s.batch, heads, blocks), dtype=torch.float32, device=dev) for heads in (s.heads, s.kv, s.kv)]
    for t in descales:
        t.view(torch.int32).fill_(LSE_SENTINEL)
    angles = torch.rand((s.seqlen, s.head_dim // 2), device=dev, generator=gen) * (2 * math.pi)
    cos, sin = angles.cos().contiguous(), angles.sin().contiguous()
    inputs = (q, k, v, cos, sin)
    inputs_before = [t.clone() for t in inputs]
    torch.cuda.synchronize()

    bases = Fp8Bases(q.data_ptr(), k.data_ptr(), v.data_ptr(), q8.data_ptr(), k8.data_ptr(), v8.data_ptr(),
                     *(t.data_ptr() for t in descales), cos.data_ptr(), sin.data_ptr(), o=0, lse=0, workspace=0,
                     workspace_size=0)
    params = params_for(lib, case, bases)
    problems = check_validate(lib, case, params)
    status = lib.fp8_prepass(params, torch.cuda.current_stream().cuda_stream)
    if status not in case.expect:
        problems.append(f"hattn_fp8_prepass returned {hc.status_name(status)}, expected "
                        f"{' or '.join(map(hc.status_name, case.expect))}")
    try:
        torch.cuda.synchronize()
    except RuntimeError as error:
        problems.append(f"torch.cuda.synchronize() after hattn_fp8_prepass failed: {str(error).splitlines()[0]}")
        print(f"RESULT {case.name} FAIL: " + "; ".join(problems))
        return EXIT_FAIL

    e4m3 = dict(zip(FP8_TENSORS_E4M3, (q8, k8, v8)))
    kept = {name: int((t == FP8_BYTE_SENTINEL).sum().item()) for name, t in e4m3.items()}
    kept.update({name: int((t.view(torch.int32) == LSE_SENTINEL).sum().item()) for name, t in zip(DESCALES, descales)})
    sizes = {**{n: t.numel() for n, t in e4m3.items()}, **{n: t.numel() for n, t in zip(DESCALES, descales)}}
    if case.positive and status == hc.HATTN_SUCCESS:
        for name, left in kept.items():
            if left:
                problems.append(f"{left} of {sizes[name]} elements of {name} still hold the sentinel")
        if not kept["v_fp8"] and not kept["v_descale"]:
            # V is only quantized (no rotation): its dequantized copy must be close to the input.
            dequant = v8.view(torch.float8_e4m3fn).float() * per_row_descale(descales[2], s.seqlen)
            err = relative_l2(dequant, v.float())
            if not err < FP8_DEQUANT_REL_L2_LIMIT:
                problems.append(f"dequantized v_fp8: relative L2 error {err:.2e} (limit {FP8_DEQUANT_REL_L2_LIMIT})")
    elif not case.positive:
        for name, left in kept.items():
            if left != sizes[name]:
                problems.append(f"{sizes[name] - left} of {sizes[name]} elements of {name} were written by a "
                                "rejected call")
    return finish_child(case, problems, ("q", "k", "v", "rope_cos", "rope_sin"), inputs_before, inputs)


def run_child_fwd_fp8(case: Case, lib: hc.Hattn) -> int:
    import torch

    s, torch_dtype, dev, gen = child_setup(case)
    e4m3_max = 448.0

    def e4m3(heads):  # dequantized (times FP8_DESCALE): ~N(0, 1)
        x = torch.randn((s.batch, s.seqlen, heads, s.head_dim), device=dev, generator=gen) / FP8_DESCALE
        return x.clamp_(-e4m3_max, e4m3_max).to(torch.float8_e4m3fn).view(torch.uint8)
    q8, k8, v8 = e4m3(s.heads), e4m3(s.kv), e4m3(s.kv)
    blocks = -(-s.seqlen // hc.HATTN_FP8_BLOCK_ROWS)
    descales = [torch.full((s.batch, heads, blocks), FP8_DESCALE, dtype=torch.float32, device=dev)
                for heads in (s.heads, s.kv, s.kv)]
    o = torch.empty((s.batch, s.seqlen, s.heads, s.head_dim), dtype=torch_dtype, device=dev)
    o.view(torch.int16).fill_(O_SENTINEL)
    lse = torch.empty((s.batch, s.heads, s.seqlen), device=dev, dtype=torch.float32)
    lse.view(torch.int32).fill_(LSE_SENTINEL)
    need = lib.fwd_fp8_workspace_size(s.batch, s.kv, s.seqlen, s.head_dim)
    workspace = torch.full((need + WORKSPACE_SLACK,), WORKSPACE_SENTINEL, dtype=torch.uint8, device=dev)
    inputs = (q8, k8, v8, *descales)
    inputs_before = [t.clone() for t in inputs]
    torch.cuda.synchronize()

    bases = Fp8Bases(q8.data_ptr(), k8.data_ptr(), v8.data_ptr(), q8.data_ptr(), k8.data_ptr(), v8.data_ptr(),
                     *(t.data_ptr() for t in descales), rope_cos=0, rope_sin=0, o=o.data_ptr(), lse=lse.data_ptr(),
                     workspace=workspace.data_ptr(), workspace_size=need)
    params = params_for(lib, case, bases)
    problems = []
    if need == 0 or workspace.data_ptr() % hc.FWD_FP8_WORKSPACE_ALIGN:
        problems.append(f"setup: hattn_fwd_fp8_workspace_size = {need}, workspace at {workspace.data_ptr():#x}")
    problems += check_validate(lib, case, params)
    status = lib.fwd_fp8(params, torch.cuda.current_stream().cuda_stream)
    if status not in case.expect:
        problems.append(f"hattn_fwd_fp8 returned {hc.status_name(status)}, expected "
                        f"{' or '.join(map(hc.status_name, case.expect))}")
    try:
        torch.cuda.synchronize()
    except RuntimeError as error:
        problems.append(f"torch.cuda.synchronize() after hattn_fwd_fp8 failed: {str(error).splitlines()[0]}")
        print(f"RESULT {case.name} FAIL: " + "; ".join(problems))
        return EXIT_FAIL

    o_kept = int((o.view(torch.int16) == O_SENTINEL).sum().item())
    lse_kept = int((lse.view(torch.int32) == LSE_SENTINEL).sum().item())
    lse_requested = params is not None and params.lse == bases.lse
    if case.positive and status == hc.HATTN_SUCCESS:
        if o_kept:
            problems.append(f"{o_kept} of {o.numel()} elements of O still hold the sentinel after hattn_fwd_fp8")
        else:
            dq, dk, dv = (t.view(torch.float8_e4m3fn).float() * per_row_descale(d, s.seqlen)
                          for t, d in zip((q8, k8, v8), descales))
            scale = params.softmax_scale or 1.0 / math.sqrt(s.head_dim)
            err = relative_l2(o, reference_attention(dq, dk, dv, bool(params.causal), scale))
            if not err < FWD_FP8_REL_L2_LIMIT:
                problems.append(f"O: relative L2 error {err:.2e} against float32 attention of the dequantized "
                                f"inputs (limit {FWD_FP8_REL_L2_LIMIT})")
        if lse_requested and lse_kept:
            problems.append(f"{lse_kept} of {lse.numel()} LSE elements still hold the sentinel")
        if not lse_requested and lse_kept != lse.numel():
            problems.append(f"LSE was not requested but {lse.numel() - lse_kept} of its elements changed")
    elif not case.positive:
        if o_kept != o.numel():
            problems.append(f"{o.numel() - o_kept} of {o.numel()} elements of O were written by a rejected call")
        if lse_kept != lse.numel():
            problems.append(f"{lse.numel() - lse_kept} of {lse.numel()} LSE elements were written by a rejected call")
        touched = int((workspace != WORKSPACE_SENTINEL).sum().item())
        if touched:
            problems.append(f"{touched} of {workspace.numel()} workspace bytes were written by a rejected call")
    return finish_child(case, problems, ("q", "k", "v") + DESCALES, inputs_before, inputs)


def run_child_bwd(case: Case, lib: hc.Hattn) -> int:
    import torch

    s, torch_dtype, dev, gen = child_setup(case)
    q, o, dout = (torch.randn((s.batch, s.seqlen, s.heads, s.head_dim), device=dev, dtype=torch_dtype, generator=gen)
                  for _ in range(3))
    k, v = (torch.randn((s.batch, s.seqlen, s.kv, s.head_dim), device=dev, dtype=torch_dtype, generator=gen)
            for _ in range(2))
    lse = torch.randn((s.batch, s.heads, s.seqlen), device=dev, dtype=torch.float32, generator=gen)
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    for t in (dq, dk, dv):
        t.view(torch.int16).fill_(O_SENTINEL)
    need = lib.bwd_workspace_size(s.batch, s.heads, s.seqlen, s.head_dim)
    workspace = torch.full((need + WORKSPACE_SLACK,), WORKSPACE_SENTINEL, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()

    bases = BwdBases(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), dout.data_ptr(), lse.data_ptr(),
                     dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), workspace.data_ptr(), need)
    params = params_for(lib, case, bases)
    problems = []
    if need == 0 or workspace.data_ptr() % hc.BWD_WORKSPACE_ALIGN:
        problems.append(f"setup: hattn_bwd_workspace_size = {need}, workspace at {workspace.data_ptr():#x}")
    if case.positive:
        # O and LSE from the forward pass of the same problem, written into the buffers the params name.
        try:
            lib.fwd_torch(q, k, v, causal=bool(params.causal), softmax_scale=params.softmax_scale, out=o, lse=lse)
            torch.cuda.synchronize()
        except hc.HattnError as error:
            problems.append(f"hattn_fwd for O and LSE failed: {error}")
    inputs_before = [t.clone() for t in (q, k, v, o, dout, lse)]
    problems += check_validate(lib, case, params)

    stream = torch.cuda.current_stream().cuda_stream
    status = lib.bwd(params, stream)
    if status not in case.expect:
        problems.append(f"hattn_bwd returned {hc.status_name(status)}, expected "
                        f"{' or '.join(map(hc.status_name, case.expect))}")
    try:
        torch.cuda.synchronize()
    except RuntimeError as error:  # a kernel that faulted: the context is gone
        problems.append(f"torch.cuda.synchronize() after hattn_bwd failed: {str(error).splitlines()[0]}")
        print(f"RESULT {case.name} FAIL: " + "; ".join(problems))
        return EXIT_FAIL

    outputs = {"dq": dq, "dk": dk, "dv": dv}
    kept = {name: int((t.view(torch.int16) == O_SENTINEL).sum().item()) for name, t in outputs.items()}
    if case.positive and status == hc.HATTN_SUCCESS:
        for name, t in outputs.items():
            if kept[name]:
                problems.append(f"{kept[name]} of {t.numel()} elements of {name} still hold the sentinel after hattn_bwd")
            elif not torch.isfinite(t.float()).all():
                problems.append(f"{name} has non-finite elements after hattn_bwd on N(0,1) inputs")
        scale = params.softmax_scale or 1.0 / math.sqrt(s.head_dim)
        for name, got, ref in zip(outputs, outputs.values(), reference_grads(q, k, v, dout, bool(params.causal), scale)):
            err = relative_l2(got, ref)
            if not err < BWD_REL_L2_LIMIT:
                problems.append(f"{name}: relative L2 error {err:.2e} against a float32 reference (limit {BWD_REL_L2_LIMIT})")
        if params.flags & hc.HATTN_BWD_DETERMINISTIC:
            first = [t.clone() for t in outputs.values()]
            status2 = lib.bwd(params, stream)
            torch.cuda.synchronize()
            if status2 != hc.HATTN_SUCCESS or not all(torch.equal(a.view(torch.int16), b.view(torch.int16))
                                                      for a, b in zip(first, outputs.values())):
                problems.append(f"HATTN_BWD_DETERMINISTIC: a second run (status {hc.status_name(status2)}) is not "
                                "bit-identical to the first")
    elif not case.positive:
        for name, t in outputs.items():
            if kept[name] != t.numel():
                problems.append(f"{t.numel() - kept[name]} of {t.numel()} elements of {name} were written by a "
                                "rejected call")
        touched = int((workspace != WORKSPACE_SENTINEL).sum().item())
        if touched:
            problems.append(f"{touched} of {workspace.numel()} workspace bytes were written by a rejected call")
    return finish_child(case, problems, ("q", "k", "v", "o", "dout", "lse"), inputs_before, (q, k, v, o, dout, lse))


def run_probe() -> int:
    """Child: is there a Hopper GPU that torch can use?"""
    try:
        import torch
    except ImportError as error:
        print(f"PROBE SKIP: torch does not import ({error})")
        return EXIT_SKIP
    if not torch.cuda.is_available():
        print(f"PROBE SKIP: torch {torch.__version__} sees no CUDA device")
        return EXIT_SKIP
    cap = torch.cuda.get_device_capability()
    name = torch.cuda.get_device_name()
    if cap != (9, 0):
        print(f"PROBE SKIP: {name} is sm_{cap[0]}{cap[1]}, hattn needs sm_90a (Hopper)")
        return EXIT_SKIP
    print(f"PROBE OK: {name}, torch {torch.__version__} (CUDA {torch.version.cuda})")
    return EXIT_PASS


# ---- the parent -------------------------------------------------------------------------------
PLACEHOLDER = Bases(q=0x10000, k=0x20000, v=0x30000, o=0x40000, lse=0x50000)  # aligned, never dereferenced


PLACEHOLDER_BWD = dict(q=0x10000, k=0x20000, v=0x30000, o=0x40000, dout=0x50000, lse=0x60000, dq=0x70000, dk=0x80000,
                       dv=0x90000, workspace=0x100000)  # 256-byte aligned, never dereferenced


PLACEHOLDER_FP8 = dict(q=0x10000, k=0x20000, v=0x30000, q_fp8=0x40000, k_fp8=0x50000, v_fp8=0x60000,
                       q_descale=0x70000, k_descale=0x80000, v_descale=0x90000, rope_cos=0xA0000, rope_sin=0xB0000,
                       o=0xC0000, lse=0xD0000, workspace=0x100000)  # 256-byte aligned, never dereferenced


def placeholder_bases(lib: hc.Hattn, case: Case):
    if case.kind == "fwd":
        return PLACEHOLDER
    s = case.shape
    if case.kind in FP8_KINDS:
        bases = Fp8Bases(**PLACEHOLDER_FP8, workspace_size=lib.fwd_fp8_workspace_size(s.batch, s.kv, s.seqlen,
                                                                                      s.head_dim))
        if case.kind == "fwd_fp8":  # its q, k, v are the e4m3 buffers
            bases.q, bases.k, bases.v = bases.q_fp8, bases.k_fp8, bases.v_fp8
        return bases
    return BwdBases(**PLACEHOLDER_BWD, workspace_size=lib.bwd_workspace_size(s.batch, s.heads, s.seqlen, s.head_dim))


def available(lib: hc.Hattn, case: Case) -> bool:
    """Does the library have the case's entry point (libraries built before the backward or FP8 API
    do not)?"""
    return (case.kind != "bwd" or lib.has_bwd) and (case.kind not in FP8_KINDS or lib.has_fp8)


def cpu_checks(lib: hc.Hattn) -> list[str]:
    """Struct layouts (against the tables and include/hattn.h), status strings, the contiguous
    helpers and every case's validation result, without a GPU. The backward's part only where the
    library has the backward entry points."""
    problems = []
    try:
        hc.check_struct_layout()
        lib.check_contiguous_helper()
        if lib.has_bwd:
            lib.check_bwd_contiguous_helper()
        if lib.has_fp8:
            lib.check_fp8_contiguous_helpers()
    except SystemExit as error:
        problems.append(str(error))
    unknown = lib.status_string(max(hc.STATUS_NAMES) + 1)
    for status in hc.STATUS_NAMES:
        if status == hc.HATTN_ERROR_WORKSPACE and not lib.has_bwd:
            continue  # the backward's status, added with it
        if lib.status_string(status) == unknown:
            problems.append(f"hattn_status_string({status}) ({hc.status_name(status)}) is the unknown-status text: "
                            "the library or the ctypes enum mirror is out of date")
    for case in CASES.values():
        if not available(lib, case):
            continue
        for p in check_validate(lib, case, params_for(lib, case, placeholder_bases(lib, case))):
            problems.append(f"{case.name}: {p}")
    return problems


def describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            return f"crashed: killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"crashed: killed by signal {-rc}"
    return f"exit code {rc}"


def run_case_process(name: str, lib_path: Path, timeout_s: float) -> tuple[str, bool, str, float]:
    cmd = [sys.executable, "-X", "faulthandler", str(Path(__file__).resolve()), "--case", name, "--lib", str(lib_path)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as error:
        tail = (error.stderr or b"")[-600:]
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return name, False, f"timed out after {timeout_s:.0f} s (killed); stderr tail: {tail.strip()!r}", timeout_s
    elapsed = time.monotonic() - t0
    result = [line for line in r.stdout.splitlines() if line.startswith(f"RESULT {name} ")]
    err_lines = r.stderr.strip().splitlines()
    # faulthandler prints "Fatal Python error: ..." and then the stack, innermost frame first.
    fatal = next((i for i, line in enumerate(err_lines) if line.startswith("Fatal Python error")), None)
    shown = err_lines[fatal:fatal + 6] if fatal is not None else err_lines[-6:]
    stderr_tail = " | ".join(line.strip() for line in shown)
    if r.returncode < 0:
        return name, False, f"{describe_exit(r.returncode)}; stderr: {stderr_tail}", elapsed
    if not result:
        return name, False, f"{describe_exit(r.returncode)} without a RESULT line; stderr: {stderr_tail}", elapsed
    verdict = result[-1][len(f"RESULT {name} "):]
    ok = verdict == "PASS" and r.returncode == EXIT_PASS
    if verdict == "PASS" and r.returncode != EXIT_PASS:
        verdict = f"printed PASS but {describe_exit(r.returncode)}; stderr: {stderr_tail}"
    return name, ok, verdict, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--lib", type=Path, default=None, help=f"libhattn.so (default: ${hc.LIB_ENV} or build/libhattn.so)")
    parser.add_argument("--case", help="run one case in this process (child mode)")
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    parser.add_argument("-j", "--jobs", type=int, default=min(16, os.cpu_count() or 1), help="children at a time")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per child before it is killed")
    parser.add_argument("-k", "--filter", default="", help="only cases whose name contains this")
    args = parser.parse_args()
    lib_path = (args.lib or hc.default_library_path()).resolve()

    if args.list:
        print("\n".join(CASES))
        return 0
    if args.probe:
        return run_probe()
    if args.case:
        return run_child(args.case, lib_path)

    names = [n for n in CASES if args.filter in n]
    if not lib_path.exists():
        print(f"SKIP: {lib_path} not found (build it: cmake --build build --target hattn_shared; "
              f"or point {hc.LIB_ENV} / --lib at it)")
        print("0 passed, 0 failed")
        return 0
    lib = hc.Hattn(lib_path)
    missing = [n for n in names if not available(lib, CASES[n])]
    skipped = len(missing)
    if missing:
        names = [n for n in names if available(lib, CASES[n])]
        print(f"SKIP: {lib_path} has no backward or no FP8 entry points (built before that API): "
              f"{skipped} cases not run")
    cpu_problems = cpu_checks(lib)
    for p in cpu_problems:
        print(f"FAIL cpu_checks: {p}")
    checked = sum(available(lib, c) for c in CASES.values())
    cpu_line = (f"cpu checks ({checked} validation expectations, struct layouts, status strings): "
                + ("ok" if not cpu_problems else f"{len(cpu_problems)} problems"))
    print(cpu_line, flush=True)
    cpu_failed = 1 if cpu_problems else 0

    if importlib.util.find_spec("torch") is None:
        print("SKIP: PyTorch is not installed (the GPU cases need it)")
        print(f"{1 - cpu_failed} passed, {cpu_failed} failed")
        return 1 if cpu_failed else 0
    probe = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--probe"], capture_output=True, text=True,
                           timeout=args.timeout)
    probe_line = next((line for line in probe.stdout.splitlines() if line.startswith("PROBE ")), "")
    if probe.returncode == EXIT_SKIP:
        print("SKIP:" + probe_line.split(":", 1)[-1])
        print(f"{1 - cpu_failed} passed, {cpu_failed} failed")
        return 1 if cpu_failed else 0
    if probe.returncode != EXIT_PASS:
        print(f"FAIL probe: {describe_exit(probe.returncode)}: {probe.stderr.strip()[-600:]}")
        print(f"0 passed, {1 + cpu_failed} failed")
        return 1
    print(f"{probe_line[len('PROBE OK: '):]}; library {lib_path}; {len(names)} cases, {args.jobs} at a time, "
          f"{args.timeout:.0f} s limit each", flush=True)

    t0 = time.monotonic()
    passed = failed = 0
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_case_process, n, lib_path, args.timeout) for n in names]
        for future in futures:  # in case order; children run in parallel meanwhile
            name, ok, verdict, elapsed = future.result()
            print(f"{'PASS' if ok else 'FAIL'} {name} ({elapsed:.1f} s)" + ("" if ok else f": {verdict}"), flush=True)
            passed += ok
            failed += not ok
    passed += 1 - cpu_failed
    failed += cpu_failed
    print(f"children: {len(names)} in {time.monotonic() - t0:.0f} s; the CPU checks count as one case")
    print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
