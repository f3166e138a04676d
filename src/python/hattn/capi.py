"""ctypes mirror of include/hattn.h: the params structs, the enums and the entry points.

The package's hattn.ops call the library through this module; the scripts load it as
`hattn_ctypes` from its file (scripts/hattn_ctypes.py), without torch or an installed package.

    from hattn import capi                 # scripts: import hattn_ctypes as capi
    lib = capi.Hattn()                     # $HATTN_LIB, else the package's libhattn.so, else build/libhattn.so
    p = lib.params_contiguous(q, k, v, o, batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, capi.HATTN_DTYPE_BF16)
    status, message = lib.validate(p)
    status = lib.fwd(p, stream)            # stream: a cudaStream_t as an int (0 = the legacy stream)

    # The backward (raw): lib.bwd_params_contiguous(...), lib.bwd_validate(p), lib.bwd(p, stream),
    # lib.bwd_workspace_size(batch, heads_q, seqlen_q, head_dim).

    # On PyTorch CUDA tensors in the [batch, seqlen, heads, head_dim] layout (any batch/seq/head
    # strides, contiguous head_dim); these raise ValueError (a check of the tensors),
    # HattnArgumentError (the C API's validation) or HattnError (a failed launch):
    o, lse = lib.fwd_torch(q, k, v, causal=True)
    dq, dk, dv = lib.bwd_torch(q, k, v, o, lse, dout, causal=True)   # workspace allocated for you
    ws = lib.bwd_workspace_torch(q)        # or allocate it once and pass workspace=ws

Pure standard library at import (torch is imported only by the *_torch helpers), so the struct
layout checks (check_struct_layout) run without torch or a GPU. The mirror is checked three ways:
field offsets and sizes against hand-worked x86-64 tables, field names, order and C types against
the struct definitions parsed from include/hattn.h, and the status enum and flag values against
the header's.
"""
from __future__ import annotations

import ctypes
import math
import os
import re
from pathlib import Path

# This file is src/python/hattn/capi.py in a source tree, <site-packages>/hattn/capi.py installed.
SOURCE_TREE = Path(__file__).resolve().parents[3]
HEADER = SOURCE_TREE / "include" / "hattn.h"
PACKAGED_LIB = Path(__file__).resolve().parent / "libhattn.so"  # put there by `pip install`
LIB_ENV = "HATTN_LIB"

# ---- enum hattn_status -------------------------------------------------------------------------
HATTN_SUCCESS = 0
HATTN_ERROR_NULL_PARAMS = 1
HATTN_ERROR_NULL_POINTER = 2
HATTN_ERROR_MISALIGNED = 3
HATTN_ERROR_UNSUPPORTED_HEAD_DIM = 4
HATTN_ERROR_UNSUPPORTED_DTYPE = 5
HATTN_ERROR_INVALID_SIZE = 6
HATTN_ERROR_INVALID_STRIDE = 7
HATTN_ERROR_HEADS_NOT_DIVISIBLE = 8
HATTN_ERROR_SIZE_OVERFLOW = 9
HATTN_ERROR_INVALID_SCALE = 10
HATTN_ERROR_INVALID_FLAGS = 11
HATTN_ERROR_UNSUPPORTED_DEVICE = 12
HATTN_ERROR_CUDA = 13
HATTN_ERROR_WORKSPACE = 14

STATUS_NAMES = {value: name for name, value in globals().items()
                if name.startswith("HATTN_ERROR_") or name == "HATTN_SUCCESS"}

# ---- enum hattn_dtype and the variant flags ------------------------------------------------------
HATTN_DTYPE_BF16 = 0
HATTN_DTYPE_FP16 = 1
HATTN_FWD_NO_PINGPONG = 1 << 0
HATTN_FWD_NO_INTRA_WG_OVERLAP = 1 << 1
HATTN_BWD_DETERMINISTIC = 1 << 0
HATTN_FP8_PREPASS_V_TRANSPOSED = 1 << 0  # the pre-pass writes V^T (the FP8 forward's layout)
HATTN_FP8_PREPASS_V_PER_HEAD = 1 << 1    # the pre-pass gives V one descale per (batch, KV head)
HATTN_FWD_FP8_V_TRANSPOSED = 1 << 0      # the FP8 forward reads V^T: no transpose pass, no workspace

# The backward's workspace must be this aligned (include/hattn.h, hattn_bwd_params.workspace).
BWD_WORKSPACE_ALIGN = 256

# ---- enum hattn_rope and the FP8 constants ---------------------------------------------------------
HATTN_ROPE_NONE = 0
HATTN_ROPE_INTERLEAVED = 1
HATTN_ROPE_HALF = 2
ROPE_CODES = {"none": HATTN_ROPE_NONE, "interleaved": HATTN_ROPE_INTERLEAVED, "half": HATTN_ROPE_HALF}
HATTN_FP8_BLOCK_ROWS = 128  # rows per descale block
HATTN_FP8_E4M3_MAX = 448.0
# The FP8 forward's workspace must be this aligned (include/hattn.h, hattn_fwd_fp8_params.workspace).
FWD_FP8_WORKSPACE_ALIGN = 256


def status_name(status: int) -> str:
    return STATUS_NAMES.get(status, f"unknown status {status}")


# The fields both params structs share, in their order in include/hattn.h.
_SHAPE_FIELDS = [(name, ctypes.c_int) for name in ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim")]
_TAIL_FIELDS = [
    ("dtype", ctypes.c_int),  # hattn_dtype
    ("softmax_scale", ctypes.c_float),
    ("causal", ctypes.c_int),
    ("flags", ctypes.c_uint),
]


def _stride_fields(*tensors: str) -> list[tuple[str, type]]:
    return [(f"{t}_{dim}_stride", ctypes.c_int64) for t in tensors for dim in ("batch", "seq", "head")]


def _pointer_fields(*names: str) -> list[tuple[str, type]]:
    """Device pointers (const or not, any element type: ctypes sees them all as void*)."""
    return [(name, ctypes.c_void_p) for name in names]


class HattnFwdParams(ctypes.Structure):
    """struct hattn_fwd_params, field by field (enums are C ints, `unsigned` is c_uint)."""
    _fields_ = [
        *_pointer_fields("q", "k", "v", "o", "lse"),  # lse: float*
        *_SHAPE_FIELDS,
        *_stride_fields("q", "k", "v", "o"),
        *_TAIL_FIELDS,
        ("workspace", ctypes.c_void_p),  # optional: the dynamic tile walk's counters
        ("workspace_size", ctypes.c_size_t),
    ]


def _shape_and_stride_offsets(shape_at: int, *tensors: str) -> dict:
    """x86-64 offsets of the six int sizes from shape_at and, right after them (8-aligned), each
    tensor's int64 batch/seq/head strides in order: the layout every params struct shares."""
    sizes = {name: shape_at + 4 * i for i, name in enumerate(
        ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim"))}
    strides_at = (shape_at + 24 + 7) // 8 * 8
    strides = {f"{t}_{dim}_stride": strides_at + 24 * i + 8 * j
               for i, t in enumerate(tensors) for j, dim in enumerate(("batch", "seq", "head"))}
    return {**sizes, **strides}


# x86-64 (LP64, System V) layout, worked out by hand: five 8-byte pointers (0..39), six ints
# (40..63; 64 is 8-aligned, so no padding before the strides), twelve int64 strides (64..159),
# then dtype/scale/causal/flags, 4 bytes each (160..175), the workspace pointer (176..183) and
# size_t workspace_size (184..191). Size 192 = a multiple of the 8-byte alignment, so no tail
# padding. Confirmed with gcc: offsetof/sizeof on include/hattn.h.
EXPECTED_SIZE = 192
EXPECTED_OFFSETS = {
    "q": 0, "k": 8, "v": 16, "o": 24, "lse": 32,
    **_shape_and_stride_offsets(40, "q", "k", "v", "o"),
    "dtype": 160, "softmax_scale": 164, "causal": 168, "flags": 172, "workspace": 176, "workspace_size": 184,
}


class HattnBwdParams(ctypes.Structure):
    """struct hattn_bwd_params, field by field (enums are C ints, `unsigned` is c_uint)."""
    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("dout", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),  # const float*
        ("dq", ctypes.c_void_p),
        ("dk", ctypes.c_void_p),
        ("dv", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
        *_SHAPE_FIELDS,
        *_stride_fields("q", "k", "v", "o", "do", "dq", "dk", "dv"),
        *_TAIL_FIELDS,
    ]


# x86-64: ten 8-byte pointers (0..79), size_t workspace_size (80..87), six ints (88..111; 112 is
# 8-aligned, no padding), 24 int64 strides (112..303), dtype/scale/causal/flags (304..319). Size
# 320, a multiple of 8. Confirmed with gcc: offsetof/sizeof on include/hattn.h.
EXPECTED_BWD_SIZE = 320
EXPECTED_BWD_OFFSETS = {
    "q": 0, "k": 8, "v": 16, "o": 24, "dout": 32, "lse": 40, "dq": 48, "dk": 56, "dv": 64, "workspace": 72,
    "workspace_size": 80,
    **_shape_and_stride_offsets(88, "q", "k", "v", "o", "do", "dq", "dk", "dv"),
    "dtype": 304, "softmax_scale": 308, "causal": 312, "flags": 316,
}


class HattnFp8PrepassParams(ctypes.Structure):
    """struct hattn_fp8_prepass_params, field by field (enums are C ints, `unsigned` is c_uint)."""
    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("q_fp8", ctypes.c_void_p),
        ("k_fp8", ctypes.c_void_p),
        ("v_fp8", ctypes.c_void_p),
        ("q_descale", ctypes.c_void_p),  # float*
        ("k_descale", ctypes.c_void_p),
        ("v_descale", ctypes.c_void_p),
        ("rope_cos", ctypes.c_void_p),  # const float*
        ("rope_sin", ctypes.c_void_p),
        ("rope_rows", ctypes.c_int),
        ("rope_q_offset", ctypes.c_int),
        *_SHAPE_FIELDS,
        *_stride_fields("q", "k", "v", "q_fp8", "k_fp8", "v_fp8"),
        ("dtype", ctypes.c_int),  # hattn_dtype
        ("rope", ctypes.c_int),  # hattn_rope
        ("hadamard", ctypes.c_int),
        ("hadamard_seed", ctypes.c_uint64),
        ("flags", ctypes.c_uint),
    ]


# x86-64: eleven 8-byte pointers (0..87), rope_rows / rope_q_offset (88..95), six ints (96..119;
# 120 is 8-aligned), 18 int64 strides (120..263), dtype/rope/hadamard (264..275), 4 bytes of
# padding so the uint64_t seed is 8-aligned (280..287), flags (288..291), 4 bytes of tail padding:
# size 296. Confirmed with gcc: offsetof/sizeof on include/hattn.h.
EXPECTED_FP8_PREPASS_SIZE = 296
EXPECTED_FP8_PREPASS_OFFSETS = {
    **{name: 8 * i for i, name in enumerate(("q", "k", "v", "q_fp8", "k_fp8", "v_fp8", "q_descale", "k_descale",
                                             "v_descale", "rope_cos", "rope_sin"))},
    "rope_rows": 88, "rope_q_offset": 92,
    **_shape_and_stride_offsets(96, "q", "k", "v", "q_fp8", "k_fp8", "v_fp8"),
    "dtype": 264, "rope": 268, "hadamard": 272, "hadamard_seed": 280, "flags": 288,
}


class HattnFwdFp8Params(ctypes.Structure):
    """struct hattn_fwd_fp8_params, field by field (enums are C ints, `unsigned` is c_uint)."""
    _fields_ = [
        *_pointer_fields("q", "k", "v", "o", "lse", "q_descale", "k_descale", "v_descale", "workspace"),
        ("workspace_size", ctypes.c_size_t),
        *_SHAPE_FIELDS,
        *_stride_fields("q", "k", "v", "o"),
        ("o_dtype", ctypes.c_int),  # hattn_dtype
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int),
        ("flags", ctypes.c_uint),
        ("schedule_workspace", ctypes.c_void_p),  # optional: the dynamic tile walk's counters
        ("schedule_workspace_size", ctypes.c_size_t),
    ]


# x86-64: nine 8-byte pointers (0..71), size_t workspace_size (72..79), six ints (80..103; 104 is
# 8-aligned), twelve int64 strides (104..199), o_dtype/scale/causal/flags (200..215), the schedule
# workspace pointer (216..223) and its size_t size (224..231). Size 232, a multiple of 8. Confirmed
# with gcc: offsetof/sizeof on include/hattn.h.
EXPECTED_FWD_FP8_SIZE = 232
EXPECTED_FWD_FP8_OFFSETS = {
    **{name: 8 * i for i, name in enumerate(("q", "k", "v", "o", "lse", "q_descale", "k_descale", "v_descale",
                                             "workspace", "workspace_size"))},
    **_shape_and_stride_offsets(80, "q", "k", "v", "o"),
    "o_dtype": 200, "softmax_scale": 204, "causal": 208, "flags": 212, "schedule_workspace": 216,
    "schedule_workspace_size": 224,
}

# Every mirrored struct: (C name, ctypes mirror, x86-64 offsets, x86-64 size).
STRUCTS = (
    ("hattn_fwd_params", HattnFwdParams, EXPECTED_OFFSETS, EXPECTED_SIZE),
    ("hattn_bwd_params", HattnBwdParams, EXPECTED_BWD_OFFSETS, EXPECTED_BWD_SIZE),
    ("hattn_fp8_prepass_params", HattnFp8PrepassParams, EXPECTED_FP8_PREPASS_OFFSETS, EXPECTED_FP8_PREPASS_SIZE),
    ("hattn_fwd_fp8_params", HattnFwdFp8Params, EXPECTED_FWD_FP8_OFFSETS, EXPECTED_FWD_FP8_SIZE),
)

# ---- include/hattn.h, parsed: the mirror must match the header field for field -----------------
# C type of a struct field -> the ctypes type the mirror must use for it.
C_TO_CTYPES = {
    "const void*": ctypes.c_void_p, "void*": ctypes.c_void_p, "const float*": ctypes.c_void_p,
    "float*": ctypes.c_void_p, "size_t": ctypes.c_size_t, "int": ctypes.c_int, "int64_t": ctypes.c_int64,
    "hattn_dtype": ctypes.c_int, "float": ctypes.c_float, "unsigned": ctypes.c_uint,
    "hattn_rope": ctypes.c_int, "uint64_t": ctypes.c_uint64,
}


def _header_text(header: Path) -> str:
    """The header with its comments removed."""
    text = header.read_text()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def header_struct_fields(struct: str, header: Path = HEADER) -> list[tuple[str, str]]:
    """[(field name, C type)] of `typedef struct <struct> {...} <struct>;` in declaration order."""
    body = re.search(rf"typedef\s+struct\s+{struct}\s*\{{(.*?)\}}\s*{struct}\s*;", _header_text(header), re.S)
    if body is None:
        raise ValueError(f"{header}: no `typedef struct {struct} {{...}} {struct};`")
    fields = []
    for decl in body.group(1).split(";"):
        decl = " ".join(decl.replace("*", "* ").split())
        if not decl:
            continue
        first, *more = [part.strip() for part in decl.split(",")]
        words = first.split()
        ctype = " ".join(words[:-1]).replace(" *", "*")
        for name in [words[-1], *more]:
            fields.append((name.lstrip("* "), ctype + "*" * name.count("*")))
    return fields


def header_enum(enum: str, header: Path = HEADER) -> dict[str, int]:
    """NAME -> value of `typedef enum <enum> {...}` (implicit values counted as C does)."""
    body = re.search(rf"typedef\s+enum\s+{enum}\s*\{{(.*?)\}}", _header_text(header), re.S)
    if body is None:
        raise ValueError(f"{header}: no `typedef enum {enum} {{...}}`")
    values, nxt = {}, 0
    for item in body.group(1).split(","):
        item = item.strip()
        if not item:
            continue
        name, _, value = (part.strip() for part in item.partition("="))
        nxt = int(value, 0) if value else nxt
        values[name] = nxt
        nxt += 1
    return values


def header_flags(header: Path = HEADER) -> dict[str, int]:
    """HATTN_FWD_* / HATTN_BWD_* / HATTN_FP8_* flag values (`NAME = 1u << n`)."""
    return {name: 1 << int(shift) for name, shift in
            re.findall(r"\b(HATTN_(?:FWD|BWD|FP8)_[A-Z0-9_]+)\s*=\s*1u?\s*<<\s*(\d+)", _header_text(header))}


def check_against_header(header: Path = HEADER) -> list[str]:
    """Mismatches between this mirror and include/hattn.h (names, order, C types, enum values)."""
    problems = []
    for struct, mirror, _, _ in STRUCTS:
        want = header_struct_fields(struct, header)
        have = [(name, ctype) for name, ctype in mirror._fields_]
        want_names, have_names = [n for n, _ in want], [n for n, _ in have]
        if want_names != have_names:
            first = next(i for i, pair in enumerate(zip(want_names + [None], have_names + [None])) if pair[0] != pair[1])
            problems.append(f"{struct}: field {first} is {(want_names + ['(end)'])[first]!r} in the header, "
                            f"{(have_names + ['(end)'])[first]!r} in the mirror (header only: "
                            f"{sorted(set(want_names) - set(have_names))}, mirror only: "
                            f"{sorted(set(have_names) - set(want_names))})")
        for (name, c_type), (_, ctype) in zip(want, have):
            if c_type not in C_TO_CTYPES:
                problems.append(f"{struct}.{name}: C type {c_type!r} has no ctypes mapping here (extend C_TO_CTYPES)")
            elif C_TO_CTYPES[c_type] is not ctype:
                problems.append(f"{struct}.{name}: C type {c_type!r} needs {C_TO_CTYPES[c_type].__name__}, "
                                f"the mirror has {ctype.__name__}")
    mirror_status = {name: value for name, value in globals().items()
                     if name.startswith("HATTN_ERROR_") or name == "HATTN_SUCCESS"}
    header_status = header_enum("hattn_status", header)
    header_dtype = header_enum("hattn_dtype", header)
    mirror_dtype = {"HATTN_DTYPE_BF16": HATTN_DTYPE_BF16, "HATTN_DTYPE_FP16": HATTN_DTYPE_FP16}
    mirror_rope = {name: value for name, value in globals().items() if name.startswith("HATTN_ROPE_")}
    for enum, in_header, in_mirror in (("hattn_status", header_status, mirror_status),
                                       ("hattn_dtype", header_dtype, mirror_dtype),
                                       ("hattn_rope", header_enum("hattn_rope", header), mirror_rope)):
        for name in sorted(set(in_header) | set(in_mirror)):
            if in_header.get(name) != in_mirror.get(name):
                problems.append(f"{enum} {name}: header {in_header.get(name)}, mirror {in_mirror.get(name)}")
    for name, value in header_flags(header).items():
        if globals().get(name) != value:
            problems.append(f"{name}: header {value:#x}, mirror {globals().get(name)}")
    text = _header_text(header)
    for name in ("HATTN_FP8_BLOCK_ROWS", "HATTN_FP8_E4M3_MAX"):
        found = re.search(rf"#define\s+{name}\s+([0-9.]+)f?\b", text)
        if found is None or float(found.group(1)) != globals()[name]:
            problems.append(f"{name}: header {found and found.group(1)}, mirror {globals()[name]}")
    return problems


def check_struct_layout(header: Path | None = HEADER) -> None:
    """Raises SystemExit if a ctypes struct disagrees with its x86-64 layout table, or (when the
    header exists; pass None to skip) with include/hattn.h's declarations and enum values."""
    problems = []
    for struct, mirror, offsets, size in STRUCTS:
        actual = {name: getattr(mirror, name).offset for name, _ in mirror._fields_}
        problems += [f"{struct}.{name}: ctypes offset {actual.get(name)} != expected {offset}"
                     for name, offset in offsets.items() if actual.get(name) != offset]
        problems += [f"{struct}.{name}: not in the expected table" for name in actual if name not in offsets]
        if ctypes.sizeof(mirror) != size:
            problems.append(f"sizeof({struct}): ctypes {ctypes.sizeof(mirror)} != expected {size}")
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        problems.append("this is not a 64-bit platform; the expected tables are for x86-64")
    if header is not None and header.is_file():
        problems += check_against_header(header)
    if problems:
        raise SystemExit("ctypes mirror of include/hattn.h out of date:\n  " + "\n  ".join(problems))


def default_library_path() -> Path:
    """$HATTN_LIB if set, else the installed package's libhattn.so, else build/libhattn.so of the
    source tree this file is in."""
    env = os.environ.get(LIB_ENV)
    if env:
        return Path(env)
    return PACKAGED_LIB if PACKAGED_LIB.is_file() else SOURCE_TREE / "build" / "libhattn.so"


# HattnError.status when the loaded library lacks the entry point (not a hattn_status value).
NO_ENTRY_POINT = -1


class HattnError(RuntimeError):
    """A hattn entry point returned a non-success status (raised by the *_torch helpers)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class HattnArgumentError(HattnError, ValueError):
    """The C API's validation rejected the arguments (every status but HATTN_ERROR_CUDA and
    HATTN_ERROR_UNSUPPORTED_DEVICE): a ValueError as well as a HattnError."""


# The statuses a launch can return for valid arguments: not the caller's arguments' fault.
LAUNCH_STATUSES = (HATTN_ERROR_CUDA, HATTN_ERROR_UNSUPPORTED_DEVICE)


def error_for(status: int, message: str) -> HattnError:
    return (HattnError if status in LAUNCH_STATUSES else HattnArgumentError)(message, status)


class Hattn:
    """The C API of libhattn.so. `lib` is the raw ctypes.CDLL, with argument types declared.

    A library built before the backward existed has no hattn_bwd*: it still loads, `has_bwd` is
    False and the backward methods raise HattnError with status NO_ENTRY_POINT; likewise `has_fp8`
    and the FP8 methods (the pre-pass and the FP8 forward) for a library built before them."""

    BWD_SYMBOLS = ("hattn_bwd", "hattn_bwd_validate", "hattn_bwd_params_contiguous", "hattn_bwd_workspace_size")
    FP8_SYMBOLS = ("hattn_fp8_prepass", "hattn_fp8_prepass_validate", "hattn_fp8_prepass_params_contiguous",
                   "hattn_fwd_fp8", "hattn_fwd_fp8_validate", "hattn_fwd_fp8_params_contiguous",
                   "hattn_fwd_fp8_workspace_size")

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path is not None else default_library_path()
        self.lib = ctypes.CDLL(str(self.path))
        params_p = ctypes.POINTER(HattnFwdParams)
        self.lib.hattn_fwd.argtypes = [params_p, ctypes.c_void_p]
        self.lib.hattn_fwd.restype = ctypes.c_int
        self.lib.hattn_fwd_validate.argtypes = [params_p, ctypes.c_char_p, ctypes.c_size_t]
        self.lib.hattn_fwd_validate.restype = ctypes.c_int
        self.lib.hattn_status_string.argtypes = [ctypes.c_int]
        self.lib.hattn_status_string.restype = ctypes.c_char_p
        self.lib.hattn_version.argtypes = []
        self.lib.hattn_version.restype = ctypes.c_char_p
        self.lib.hattn_fwd_params_contiguous.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 7
        self.lib.hattn_fwd_params_contiguous.restype = HattnFwdParams
        self.has_fwd_workspace = hasattr(self.lib, "hattn_fwd_workspace_size")
        if self.has_fwd_workspace:
            self.lib.hattn_fwd_workspace_size.argtypes = []
            self.lib.hattn_fwd_workspace_size.restype = ctypes.c_size_t

        self.has_bwd = all(hasattr(self.lib, name) for name in self.BWD_SYMBOLS)
        if self.has_bwd:
            bwd_p = ctypes.POINTER(HattnBwdParams)
            self.lib.hattn_bwd.argtypes = [bwd_p, ctypes.c_void_p]
            self.lib.hattn_bwd.restype = ctypes.c_int
            self.lib.hattn_bwd_validate.argtypes = [bwd_p, ctypes.c_char_p, ctypes.c_size_t]
            self.lib.hattn_bwd_validate.restype = ctypes.c_int
            self.lib.hattn_bwd_params_contiguous.argtypes = [ctypes.c_void_p] * 9 + [ctypes.c_int] * 7
            self.lib.hattn_bwd_params_contiguous.restype = HattnBwdParams
            self.lib.hattn_bwd_workspace_size.argtypes = [ctypes.c_int] * 4
            self.lib.hattn_bwd_workspace_size.restype = ctypes.c_size_t

        self.has_fp8 = all(hasattr(self.lib, name) for name in self.FP8_SYMBOLS)
        if self.has_fp8:
            pre_p, ffp8_p = ctypes.POINTER(HattnFp8PrepassParams), ctypes.POINTER(HattnFwdFp8Params)
            self.lib.hattn_fp8_prepass.argtypes = [pre_p, ctypes.c_void_p]
            self.lib.hattn_fp8_prepass.restype = ctypes.c_int
            self.lib.hattn_fp8_prepass_validate.argtypes = [pre_p, ctypes.c_char_p, ctypes.c_size_t]
            self.lib.hattn_fp8_prepass_validate.restype = ctypes.c_int
            self.lib.hattn_fp8_prepass_params_contiguous.argtypes = [ctypes.c_void_p] * 9 + [ctypes.c_int] * 7
            self.lib.hattn_fp8_prepass_params_contiguous.restype = HattnFp8PrepassParams
            self.lib.hattn_fwd_fp8.argtypes = [ffp8_p, ctypes.c_void_p]
            self.lib.hattn_fwd_fp8.restype = ctypes.c_int
            self.lib.hattn_fwd_fp8_validate.argtypes = [ffp8_p, ctypes.c_char_p, ctypes.c_size_t]
            self.lib.hattn_fwd_fp8_validate.restype = ctypes.c_int
            self.lib.hattn_fwd_fp8_params_contiguous.argtypes = [ctypes.c_void_p] * 7 + [ctypes.c_int] * 7
            self.lib.hattn_fwd_fp8_params_contiguous.restype = HattnFwdFp8Params
            self.lib.hattn_fwd_fp8_workspace_size.argtypes = [ctypes.c_int] * 4
            self.lib.hattn_fwd_fp8_workspace_size.restype = ctypes.c_size_t

    # ---- thin wrappers (params may be None: the C side then gets NULL) ----
    def fwd(self, params: HattnFwdParams | None, stream: int | None = 0) -> int:
        return self.lib.hattn_fwd(None if params is None else ctypes.byref(params), ctypes.c_void_p(stream or None))

    def validate(self, params: HattnFwdParams | None, msg_len: int = 512) -> tuple[int, str]:
        buf = ctypes.create_string_buffer(msg_len)
        status = self.lib.hattn_fwd_validate(None if params is None else ctypes.byref(params), buf, msg_len)
        return status, buf.value.decode(errors="replace")

    def fwd_workspace_size(self) -> int:
        """hattn_fwd_workspace_size(): bytes of the forward's optional workspace (0 for a library
        built before it existed)."""
        return self.lib.hattn_fwd_workspace_size() if self.has_fwd_workspace else 0

    def version(self) -> str:
        """hattn_version(): the loaded library's "MAJOR.MINOR.PATCH"."""
        return self.lib.hattn_version().decode()

    def status_string(self, status: int) -> str:
        return (self.lib.hattn_status_string(status) or b"?").decode()

    def params_contiguous(self, q: int | None, k: int | None, v: int | None, o: int | None, batch: int,
                          heads_q: int, heads_kv: int, seqlen_q: int, seqlen_k: int, head_dim: int,
                          dtype: int) -> HattnFwdParams:
        return self.lib.hattn_fwd_params_contiguous(q, k, v, o, batch, heads_q, heads_kv, seqlen_q, seqlen_k,
                                                    head_dim, dtype)

    def _need_bwd(self) -> None:
        if not self.has_bwd:
            raise HattnError(f"{self.path} has no backward entry points ({', '.join(self.BWD_SYMBOLS)}): "
                             "it was built before the backward API; rebuild it", NO_ENTRY_POINT)

    def bwd(self, params: HattnBwdParams | None, stream: int | None = 0) -> int:
        self._need_bwd()
        return self.lib.hattn_bwd(None if params is None else ctypes.byref(params), ctypes.c_void_p(stream or None))

    def bwd_validate(self, params: HattnBwdParams | None, msg_len: int = 512) -> tuple[int, str]:
        self._need_bwd()
        buf = ctypes.create_string_buffer(msg_len)
        status = self.lib.hattn_bwd_validate(None if params is None else ctypes.byref(params), buf, msg_len)
        return status, buf.value.decode(errors="replace")

    def bwd_workspace_size(self, batch: int, heads_q: int, seqlen_q: int, head_dim: int) -> int:
        self._need_bwd()
        return self.lib.hattn_bwd_workspace_size(batch, heads_q, seqlen_q, head_dim)

    def bwd_params_contiguous(self, q: int | None, k: int | None, v: int | None, o: int | None,
                              dout: int | None, lse: int | None, dq: int | None, dk: int | None, dv: int | None,
                              batch: int, heads_q: int, heads_kv: int, seqlen_q: int, seqlen_k: int,
                              head_dim: int, dtype: int) -> HattnBwdParams:
        self._need_bwd()
        return self.lib.hattn_bwd_params_contiguous(q, k, v, o, dout, lse, dq, dk, dv, batch, heads_q, heads_kv,
                                                    seqlen_q, seqlen_k, head_dim, dtype)

    def _need_fp8(self) -> None:
        if not self.has_fp8:
            raise HattnError(f"{self.path} has no FP8 entry points ({', '.join(self.FP8_SYMBOLS)}): "
                             "it was built before the FP8 API; rebuild it", NO_ENTRY_POINT)

    def fp8_prepass(self, params: HattnFp8PrepassParams | None, stream: int | None = 0) -> int:
        self._need_fp8()
        return self.lib.hattn_fp8_prepass(None if params is None else ctypes.byref(params),
                                          ctypes.c_void_p(stream or None))

    def fp8_prepass_validate(self, params: HattnFp8PrepassParams | None, msg_len: int = 512) -> tuple[int, str]:
        self._need_fp8()
        buf = ctypes.create_string_buffer(msg_len)
        status = self.lib.hattn_fp8_prepass_validate(None if params is None else ctypes.byref(params), buf, msg_len)
        return status, buf.value.decode(errors="replace")

    def fp8_prepass_params_contiguous(self, q, k, v, q_fp8, k_fp8, v_fp8, q_descale, k_descale, v_descale,
                                      batch: int, heads_q: int, heads_kv: int, seqlen_q: int, seqlen_k: int,
                                      head_dim: int, dtype: int) -> HattnFp8PrepassParams:
        self._need_fp8()
        return self.lib.hattn_fp8_prepass_params_contiguous(q, k, v, q_fp8, k_fp8, v_fp8, q_descale, k_descale,
                                                            v_descale, batch, heads_q, heads_kv, seqlen_q, seqlen_k,
                                                            head_dim, dtype)

    def fwd_fp8(self, params: HattnFwdFp8Params | None, stream: int | None = 0) -> int:
        self._need_fp8()
        return self.lib.hattn_fwd_fp8(None if params is None else ctypes.byref(params), ctypes.c_void_p(stream or None))

    def fwd_fp8_validate(self, params: HattnFwdFp8Params | None, msg_len: int = 512) -> tuple[int, str]:
        self._need_fp8()
        buf = ctypes.create_string_buffer(msg_len)
        status = self.lib.hattn_fwd_fp8_validate(None if params is None else ctypes.byref(params), buf, msg_len)
        return status, buf.value.decode(errors="replace")

    def fwd_fp8_workspace_size(self, batch: int, heads_kv: int, seqlen_k: int, head_dim: int) -> int:
        self._need_fp8()
        return self.lib.hattn_fwd_fp8_workspace_size(batch, heads_kv, seqlen_k, head_dim)

    def fwd_fp8_params_contiguous(self, q, k, v, o, q_descale, k_descale, v_descale, batch: int, heads_q: int,
                                  heads_kv: int, seqlen_q: int, seqlen_k: int, head_dim: int,
                                  o_dtype: int) -> HattnFwdFp8Params:
        self._need_fp8()
        return self.lib.hattn_fwd_fp8_params_contiguous(q, k, v, o, q_descale, k_descale, v_descale, batch, heads_q,
                                                        heads_kv, seqlen_q, seqlen_k, head_dim, o_dtype)

    # ---- helpers ----
    def describe(self, status: int, params: HattnFwdParams) -> str:
        return self._status_text("hattn_fwd", self.lib.hattn_fwd_validate, status, params)

    def describe_bwd(self, status: int, params: HattnBwdParams) -> str:
        return self._status_text("hattn_bwd", self.lib.hattn_bwd_validate, status, params)

    def check_contiguous_helper(self) -> None:
        """CPU-only: hattn_fwd_params_contiguous (returned by value) must match our own strides."""
        b, hq, hkv, sq, sk, d = 2, 8, 2, 96, 80, 128
        fake = [0x10000 * (i + 1) for i in range(4)]  # 16-byte-aligned addresses, never dereferenced
        p = self.lib.hattn_fwd_params_contiguous(*fake, b, hq, hkv, sq, sk, d, HATTN_DTYPE_BF16)
        want = dict(q=fake[0], k=fake[1], v=fake[2], o=fake[3], lse=None, batch=b, heads_q=hq, heads_kv=hkv,
                    seqlen_q=sq, seqlen_k=sk, head_dim=d,
                    q_batch_stride=sq * hq * d, q_seq_stride=hq * d, q_head_stride=d,
                    k_batch_stride=sk * hkv * d, k_seq_stride=hkv * d, k_head_stride=d,
                    v_batch_stride=sk * hkv * d, v_seq_stride=hkv * d, v_head_stride=d,
                    o_batch_stride=sq * hq * d, o_seq_stride=hq * d, o_head_stride=d,
                    dtype=HATTN_DTYPE_BF16, causal=0, flags=0, workspace=None, workspace_size=0)
        bad = [f"{k}: {getattr(p, k)} != {v}" for k, v in want.items() if getattr(p, k) != v]
        # "the default scale": 0 (resolved later) or 1/sqrt(head_dim) spelled out are both fine.
        if not (p.softmax_scale == 0.0 or math.isclose(p.softmax_scale, 1 / math.sqrt(d), rel_tol=1e-6)):
            bad.append(f"softmax_scale: {p.softmax_scale} is neither 0 nor 1/sqrt({d})")
        if bad:
            raise SystemExit("hattn_fwd_params_contiguous disagrees with the ctypes mirror:\n  " + "\n  ".join(bad))

    def check_bwd_contiguous_helper(self) -> None:
        """CPU-only: hattn_bwd_params_contiguous must match our strides and leave no workspace;
        hattn_bwd_workspace_size must be 0 for bad sizes and a 256-multiple that grows with them."""
        self._need_bwd()
        b, hq, hkv, sq, sk, d = 2, 8, 2, 96, 80, 128
        fake = [0x10000 * (i + 1) for i in range(9)]  # aligned, never dereferenced
        p = self.lib.hattn_bwd_params_contiguous(*fake, b, hq, hkv, sq, sk, d, HATTN_DTYPE_BF16)
        want = dict(q=fake[0], k=fake[1], v=fake[2], o=fake[3], dout=fake[4], lse=fake[5], dq=fake[6], dk=fake[7],
                    dv=fake[8], workspace=None, workspace_size=0, batch=b, heads_q=hq, heads_kv=hkv,
                    seqlen_q=sq, seqlen_k=sk, head_dim=d, dtype=HATTN_DTYPE_BF16, causal=0, flags=0)
        for t, heads, seqlen in (("q", hq, sq), ("o", hq, sq), ("do", hq, sq), ("dq", hq, sq),
                                 ("k", hkv, sk), ("v", hkv, sk), ("dk", hkv, sk), ("dv", hkv, sk)):
            want.update({f"{t}_batch_stride": seqlen * heads * d, f"{t}_seq_stride": heads * d, f"{t}_head_stride": d})
        bad = [f"{k}: {getattr(p, k)} != {v}" for k, v in want.items() if getattr(p, k) != v]
        if not (p.softmax_scale == 0.0 or math.isclose(p.softmax_scale, 1 / math.sqrt(d), rel_tol=1e-6)):
            bad.append(f"softmax_scale: {p.softmax_scale} is neither 0 nor 1/sqrt({d})")
        ws = self.bwd_workspace_size
        small, large = ws(1, 2, 128, 64), ws(2, 16, 4096, 128)
        if not (0 < small < large):
            bad.append(f"hattn_bwd_workspace_size: {small} bytes for b1 h2 s128 d64, {large} for b2 h16 s4096 d128")
        for size in (small, large):
            if size % BWD_WORKSPACE_ALIGN:
                bad.append(f"hattn_bwd_workspace_size returned {size}, not a multiple of {BWD_WORKSPACE_ALIGN}")
        # The dQ accumulator alone is fp32 [batch, heads_q, seqlen_q, head_dim].
        if large < 2 * 16 * 4096 * 128 * 4:
            bad.append(f"hattn_bwd_workspace_size(2, 16, 4096, 128) = {large} is below the fp32 dQ accumulator's size")
        for args in ((0, 2, 128, 64), (1, -1, 128, 64), (1, 2, 0, 64), (1, 2, 128, 0),
                     (2**31 - 1, 2**31 - 1, 2**31 - 1, 256)):
            if ws(*args) != 0:
                bad.append(f"hattn_bwd_workspace_size{args} = {ws(*args)}, expected 0")
        if bad:
            raise SystemExit("hattn_bwd_params_contiguous / hattn_bwd_workspace_size disagree with the ctypes "
                             "mirror:\n  " + "\n  ".join(bad))

    def check_fp8_contiguous_helpers(self) -> None:
        """CPU-only: hattn_fp8_prepass_params_contiguous and hattn_fwd_fp8_params_contiguous must
        match our strides (bytes for e4m3) and zero the rest; hattn_fwd_fp8_workspace_size must be
        the V^T size the header documents, 0 for bad sizes."""
        self._need_fp8()
        b, hq, hkv, sq, sk, d = 2, 8, 2, 96, 80, 128
        fake = [0x10000 * (i + 1) for i in range(9)]  # aligned, never dereferenced
        p = self.lib.hattn_fp8_prepass_params_contiguous(*fake, b, hq, hkv, sq, sk, d, HATTN_DTYPE_FP16)
        want = dict(q=fake[0], k=fake[1], v=fake[2], q_fp8=fake[3], k_fp8=fake[4], v_fp8=fake[5], q_descale=fake[6],
                    k_descale=fake[7], v_descale=fake[8], rope_cos=None, rope_sin=None, rope_rows=0, rope_q_offset=0,
                    batch=b, heads_q=hq, heads_kv=hkv, seqlen_q=sq, seqlen_k=sk, head_dim=d,
                    dtype=HATTN_DTYPE_FP16, rope=HATTN_ROPE_NONE, hadamard=0, hadamard_seed=0, flags=0)
        for t, heads, seqlen in (("q", hq, sq), ("q_fp8", hq, sq), ("k", hkv, sk), ("v", hkv, sk),
                                 ("k_fp8", hkv, sk), ("v_fp8", hkv, sk)):
            want.update({f"{t}_batch_stride": seqlen * heads * d, f"{t}_seq_stride": heads * d, f"{t}_head_stride": d})
        bad = [f"prepass {k}: {getattr(p, k)} != {v}" for k, v in want.items() if getattr(p, k) != v]
        f = self.lib.hattn_fwd_fp8_params_contiguous(*fake[:7], b, hq, hkv, sq, sk, d, HATTN_DTYPE_BF16)
        want = dict(q=fake[0], k=fake[1], v=fake[2], o=fake[3], lse=None, q_descale=fake[4], k_descale=fake[5],
                    v_descale=fake[6], workspace=None, workspace_size=0, batch=b, heads_q=hq, heads_kv=hkv,
                    seqlen_q=sq, seqlen_k=sk, head_dim=d, o_dtype=HATTN_DTYPE_BF16, causal=0, flags=0)
        for t, heads, seqlen in (("q", hq, sq), ("o", hq, sq), ("k", hkv, sk), ("v", hkv, sk)):
            want.update({f"{t}_batch_stride": seqlen * heads * d, f"{t}_seq_stride": heads * d, f"{t}_head_stride": d})
        bad += [f"fwd_fp8 {k}: {getattr(f, k)} != {v}" for k, v in want.items() if getattr(f, k) != v]
        if not (f.softmax_scale == 0.0 or math.isclose(f.softmax_scale, 1 / math.sqrt(d), rel_tol=1e-6)):
            bad.append(f"fwd_fp8 softmax_scale: {f.softmax_scale} is neither 0 nor 1/sqrt({d})")
        ws = self.fwd_fp8_workspace_size
        for args in ((1, 2, 128, 64), (2, 4, 1000, 128), (1, 1, 17, 256)):
            expected = args[0] * args[1] * args[3] * (-(-args[2] // 32) * 32)
            if ws(*args) < expected:
                bad.append(f"hattn_fwd_fp8_workspace_size{args} = {ws(*args)} < V^T's {expected} bytes")
        for args in ((0, 2, 128, 64), (1, -1, 128, 64), (1, 2, 0, 64), (1, 2, 128, 0),
                     (2**31 - 1, 2**31 - 1, 2**31 - 1, 256)):
            if ws(*args) != 0:
                bad.append(f"hattn_fwd_fp8_workspace_size{args} = {ws(*args)}, expected 0")
        if bad:
            raise SystemExit("the FP8 contiguous helpers disagree with the ctypes mirror:\n  " + "\n  ".join(bad))

    # ---- PyTorch tensors ([batch, seqlen, heads, head_dim], strides taken from the tensors) ----
    # Every *_torch call checks in this order: the tensors' ranks, shapes and dtypes (ValueError
    # naming the tensor), the C API's validation (HattnArgumentError with its message), the devices
    # (ValueError), and only then launches. Nothing but the device check needs a GPU, so the first
    # two run on any machine, on CPU tensors too.
    def fwd_params_torch(self, q, k, v, o, lse=None, *, causal: bool = False, softmax_scale: float = 0.0,
                         flags: int = 0, address=None, workspace=None) -> HattnFwdParams:
        """hattn_fwd_params for these tensors. Checks what the C API cannot see: shapes that agree,
        a contiguous head dim, one dtype, a contiguous fp32 LSE of [batch, heads_q, seqlen_q].
        address(t) gives the address to pass for t (default t.data_ptr(); tracing with fake tensors
        passes placeholder_address). workspace: None or a zero-filled uint8 tensor (fwd_workspace_torch)."""
        address = address or _data_ptr
        b, sq, hq, d = _check_bshd({"q": q, "o": o}, "q")
        _, sk, hkv, _ = _check_bshd({"k": k, "v": v}, "k", batch=b, head_dim=d)
        _check_same_dtype(q=q, k=k, v=v, o=o)
        if lse is not None:
            _check_lse(lse, b, hq, sq)
        p = HattnFwdParams()
        p.q, p.k, p.v, p.o = address(q), address(k), address(v), address(o)
        p.lse = None if lse is None else address(lse)
        p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim = b, hq, hkv, sq, sk, d
        for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
            _set_strides(p, name, t)
        p.dtype, p.softmax_scale, p.causal, p.flags = dtype_code(q), softmax_scale, int(bool(causal)), flags
        if workspace is not None:
            p.workspace, p.workspace_size = address(workspace), workspace.numel() * workspace.element_size()
        return p

    def fwd_workspace_torch(self, device, stream: int):
        """The forward's workspace for (device, stream; 19.5 MB, most of it the split tail's scratch):
        zero-filled once, kept for later calls (each call leaves its state bytes zero-filled, and
        calls on one stream run one after the other); None for a
        library without it, or while the stream is being captured into a CUDA graph and none exists yet."""
        import torch

        key = (torch.device(device), stream)
        cache = self.__dict__.setdefault("_fwd_workspaces", {})
        if key not in cache:
            size = self.fwd_workspace_size()
            with torch.cuda.device(device):  # (the capture state asked of device's current stream)
                if size == 0 or torch.cuda.is_current_stream_capturing():
                    return None
                cache[key] = torch.zeros(size, dtype=torch.uint8, device=device)  # 512-byte-aligned blocks
        return cache[key]

    def bwd_params_torch(self, q, k, v, o, lse, dout, dq, dk, dv, workspace, *, causal: bool = False,
                         softmax_scale: float = 0.0, flags: int = 0, address=None) -> HattnBwdParams:
        """hattn_bwd_params for these tensors (same checks as fwd_params_torch; workspace: a uint8
        tensor whose size in bytes becomes workspace_size)."""
        address = address or _data_ptr
        b, sq, hq, d = _check_bshd({"q": q, "o": o, "dout": dout, "dq": dq}, "q")
        _, sk, hkv, _ = _check_bshd({"k": k, "v": v, "dk": dk, "dv": dv}, "k", batch=b, head_dim=d)
        _check_same_dtype(q=q, k=k, v=v, o=o, dout=dout, dq=dq, dk=dk, dv=dv)
        _check_lse(lse, b, hq, sq)
        if workspace.dtype.itemsize != 1 or not workspace.is_contiguous():
            raise ValueError(f"workspace: expected a contiguous 1-byte-element tensor, got {workspace.dtype} "
                             f"with strides {workspace.stride()}")
        p = HattnBwdParams()
        p.q, p.k, p.v, p.o, p.dout = address(q), address(k), address(v), address(o), address(dout)
        p.lse, p.dq, p.dk, p.dv = address(lse), address(dq), address(dk), address(dv)
        p.workspace, p.workspace_size = address(workspace), workspace.numel()
        p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim = b, hq, hkv, sq, sk, d
        for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", dout), ("dq", dq), ("dk", dk), ("dv", dv)):
            _set_strides(p, name, t)
        p.dtype, p.softmax_scale, p.causal, p.flags = dtype_code(q), softmax_scale, int(bool(causal)), flags
        return p

    def check_fwd(self, params: HattnFwdParams) -> None:
        """hattn_fwd_validate; raises HattnArgumentError with its message on failure."""
        status, message = self.validate(params)
        if status != HATTN_SUCCESS:
            raise error_for(status, f"hattn_fwd: {message} ({status_name(status)})")

    def check_bwd(self, params: HattnBwdParams) -> None:
        """hattn_bwd_validate; raises HattnArgumentError with its message on failure."""
        status, message = self.bwd_validate(params)
        if status != HATTN_SUCCESS:
            raise error_for(status, f"hattn_bwd: {message} ({status_name(status)})")

    def bwd_workspace_torch(self, q, seqlen_q: int | None = None):
        """A uint8 tensor of hattn_bwd_workspace_size bytes for q's shape ([b, s, h, d]), on q's
        device, BWD_WORKSPACE_ALIGN-byte aligned. torch's CUDA caching allocator hands out
        512-byte-aligned blocks; another allocator's block is over-allocated and sliced."""
        b, s, h, d = q.shape
        size = self.bwd_workspace_size(b, h, s if seqlen_q is None else seqlen_q, d)
        if size == 0:
            raise HattnArgumentError(f"hattn_bwd_workspace_size({b}, {h}, {s}, {d}) = 0: bad or overflowing sizes",
                                     HATTN_ERROR_SIZE_OVERFLOW)
        return _aligned_bytes(size, BWD_WORKSPACE_ALIGN, q.device)

    def fwd_torch(self, q, k, v, *, causal: bool = False, softmax_scale: float = 0.0, flags: int = 0,
                  out=None, lse=None, want_lse: bool = True, stream: int | None = None):
        """O (contiguous unless out is given) and LSE (fp32 [b, heads_q, s_q], when want_lse or lse
        is given) on the current stream of q's device. Returns (o, lse or None).

        A call that allocates its outputs on the current stream and whose layout (shapes, strides,
        dtypes, devices, mask, scale, flags) has passed every check before reuses that call's
        params (_plans): only the addresses change, and the C API still validates them."""
        import torch

        planned = out is None and lse is None and stream is None
        if planned:
            key = ("fwd",) + _layout_key(q, k, v) + (bool(causal), float(softmax_scale), flags, bool(want_lse))
            plan = self._plans.get(key)
            if plan is not None:
                return self._fwd_planned(plan, q, k, v)
        b, sq, hq, _ = _check_rank(q=q)
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device) if out is None else out
        if lse is None and want_lse:
            lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
        p = self.fwd_params_torch(q, k, v, out, lse, causal=causal, softmax_scale=softmax_scale, flags=flags)
        self.check_fwd(p)
        check_devices(q=q, k=k, v=v, out=out, **({} if lse is None else {"lse": lse}))
        launch_stream = self._current_stream(q.device, stream)
        # The dynamic walk's counters: causal problems and d64's partial tiles (include/hattn.h).
        p.workspace, p.workspace_size = self._walk_workspace(q.device, launch_stream[0])
        self._launch_on(self.lib.hattn_fwd, p, q.device, launch_stream, self._fwd_failure)
        if planned:
            self._remember(key, (bytes(p), None if lse is None else tuple(lse.shape)))
        return out, lse

    # Layouts remembered by fwd_torch / bwd_torch; past this many the memory starts afresh (a
    # workload of ever-new shapes then pays what it would without it).
    PLAN_CACHE_SIZE = 256

    @property
    def _plans(self) -> dict:
        return self.__dict__.setdefault("_plan_cache", {})

    def _remember(self, key, plan) -> None:
        plans = self._plans
        if len(plans) >= self.PLAN_CACHE_SIZE:
            plans.clear()
        plans[key] = plan

    def _current_stream(self, device, stream: int | None = None) -> tuple[int, bool]:
        """(stream, or the current stream of device when it is None; whether device is the current
        device). Launching on another device's stream needs that device current (a
        torch.cuda.device guard, which _launch_on takes). The raw handle comes from
        torch._C._cuda_getCurrentRawStream where it exists (what torch.compile's generated
        launchers call): torch.cuda.current_stream() builds a Stream object each time, ~10 us of a
        planned call's ~30 (bench/RESULTS.md run 53d)."""
        import torch

        here = device.index == torch.cuda.current_device()
        if stream is not None:
            return stream, here
        if here:
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            return (raw(device.index) if raw else torch.cuda.current_stream().cuda_stream), True
        with torch.cuda.device(device):
            return torch.cuda.current_stream().cuda_stream, False

    def _launch_on(self, entry, p, device, stream: tuple[int, bool], failure) -> None:
        """entry(p) on stream = _current_stream(device, ...), the one launch of fwd_torch and
        bwd_torch whether or not their layout was remembered; a failing status raises the error
        failure(status, p) names (HattnArgumentError where the checks refuse p)."""
        import torch

        s, here = stream
        if here:
            status = entry(ctypes.byref(p), ctypes.c_void_p(s or None))
        else:
            with torch.cuda.device(device):
                status = entry(ctypes.byref(p), ctypes.c_void_p(s or None))
        if status != HATTN_SUCCESS:
            raise error_for(status, failure(status, p))

    def _fwd_planned(self, plan, q, k, v):
        import torch

        template, lse_shape = plan
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse = None if lse_shape is None else torch.empty(lse_shape, dtype=torch.float32, device=q.device)
        p = HattnFwdParams.from_buffer_copy(template)
        p.q, p.k, p.v, p.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
        p.lse = None if lse is None else lse.data_ptr()
        stream = self._current_stream(q.device)
        # This call's stream's workspace (the template holds the first call's).
        p.workspace, p.workspace_size = self._walk_workspace(q.device, stream[0])
        self._launch_on(self.lib.hattn_fwd, p, q.device, stream, self._fwd_failure)
        return out, lse

    def _walk_workspace(self, device, stream: int) -> tuple[int | None, int]:
        """(address, bytes) of the dynamic tile walk's workspace of stream (fwd_workspace_torch),
        (None, 0) where there is none: what the bf16 forward's workspace and the FP8 forward's
        schedule_workspace fields take."""
        workspace = self.fwd_workspace_torch(device, stream)
        return (None, 0) if workspace is None else (workspace.data_ptr(), workspace.numel())

    def _fwd_failure(self, status: int, p) -> str:
        self.check_fwd(p)  # an address the checks reject raises what fwd_torch's checks would
        return self.describe(status, p)

    def bwd_torch(self, q, k, v, o, lse, dout, *, causal: bool = False, softmax_scale: float = 0.0,
                  deterministic: bool = False, flags: int = 0, dq=None, dk=None, dv=None, workspace=None,
                  stream: int | None = None):
        """(dq, dk, dv) for the forward that gave o and lse (same q, k, v, causal and scale), on the
        current stream of q's device; dk and dv are [b, s_k, heads_kv, d] (summed over each GQA group).
        Allocates what is not given (contiguous; the workspace with bwd_workspace_torch). Like
        fwd_torch, a call that allocates everything reuses the params of an earlier call of its layout."""
        import torch

        self._need_bwd()
        flags |= HATTN_BWD_DETERMINISTIC if deterministic else 0
        planned = dq is None and dk is None and dv is None and workspace is None and stream is None
        if planned:
            key = ("bwd",) + _layout_key(q, k, v, o, lse, dout)
            key += (bool(causal), float(softmax_scale), flags)
            plan = self._plans.get(key)
            if plan is not None:
                return self._bwd_planned(plan, q, k, v, o, lse, dout)
        _check_rank(q=q, k=k, v=v)
        dq = torch.empty(q.shape, dtype=q.dtype, device=q.device) if dq is None else dq
        dk = torch.empty(k.shape, dtype=k.dtype, device=k.device) if dk is None else dk
        dv = torch.empty(v.shape, dtype=v.dtype, device=v.device) if dv is None else dv
        workspace = self.bwd_workspace_torch(q) if workspace is None else workspace
        p = self.bwd_params_torch(q, k, v, o, lse, dout, dq, dk, dv, workspace, causal=causal,
                                  softmax_scale=softmax_scale, flags=flags)
        self.check_bwd(p)
        check_devices(q=q, k=k, v=v, o=o, lse=lse, dout=dout, dq=dq, dk=dk, dv=dv, workspace=workspace)
        self._launch_on(self.lib.hattn_bwd, p, q.device, self._current_stream(q.device, stream), self._bwd_failure)
        if planned:
            self._remember(key, (bytes(p), workspace.numel()))
        return dq, dk, dv

    def _bwd_planned(self, plan, q, k, v, o, lse, dout):
        import torch

        template, workspace_size = plan
        dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
        dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
        workspace = _aligned_bytes(workspace_size, BWD_WORKSPACE_ALIGN, q.device)
        p = HattnBwdParams.from_buffer_copy(template)
        p.q, p.k, p.v, p.o, p.dout = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), dout.data_ptr()
        p.lse, p.dq, p.dk, p.dv = lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
        p.workspace = workspace.data_ptr()
        self._launch_on(self.lib.hattn_bwd, p, q.device, self._current_stream(q.device), self._bwd_failure)
        return dq, dk, dv

    def _bwd_failure(self, status: int, p) -> str:
        self.check_bwd(p)
        return self.describe_bwd(status, p)


    # ---- the FP8 path on PyTorch tensors (same order of checks as fwd_torch) ----
    def fp8_prepass_params_torch(self, q, k, v, q8, k8, v8, q_descale, k_descale, v_descale, *, rope_cos=None,
                                 rope_sin=None, rope: str | int = "none", hadamard: bool = True, seed: int = 0,
                                 rope_q_offset: int = 0, v_transposed: bool = False, v_per_head: bool = False,
                                 address=None) -> HattnFp8PrepassParams:
        """hattn_fp8_prepass_params for these tensors: q, k, v bf16/fp16 [b, s, h, d]; q8, k8, v8
        float8_e4m3fn of the same shapes; descales fp32 [b, h, ceil(s / 128)], contiguous; the rotary
        tables fp32 [rows, d / 2], contiguous, both or neither (needed unless rope is "none").
        v_transposed: v8 is V^T for the FP8 forward (HATTN_FP8_PREPASS_V_TRANSPOSED), a contiguous
        float8_e4m3fn [b, h_kv, d, vt_keys(s_k)] tensor (fp8_prepass_outputs(..., v_transposed=True)).
        v_per_head: one V descale per (batch, KV head) (HATTN_FP8_PREPASS_V_PER_HEAD), written into
        every block's entry."""
        import torch

        address = address or _data_ptr
        rope_code = rope_code_of(rope)
        b, sq, hq, d = _check_bshd({"q": q}, "q")
        _, sk, hkv, _ = _check_bshd({"k": k, "v": v}, "k", batch=b, head_dim=d)
        _check_same_dtype(q=q, k=k, v=v)
        _check_bshd({"q8": q8}, "q8")
        _check_bshd({"k8": k8, "v8": v8} if not v_transposed else {"k8": k8}, "k8")
        for name, t, like in (("q8", q8, q), ("k8", k8, k)) + (() if v_transposed else (("v8", v8, v),)):
            _check_e4m3(name, t, tuple(like.shape))
        if v_transposed:
            _check_vt("v8", v8, b, hkv, sk, d)
        _check_descale("q_descale", q_descale, b, hq, sq)
        _check_descale("k_descale", k_descale, b, hkv, sk)
        _check_descale("v_descale", v_descale, b, hkv, sk)
        rope_rows = 0
        if rope_code == HATTN_ROPE_NONE:
            for name, t in (("rope_cos", rope_cos), ("rope_sin", rope_sin)):
                if t is not None:
                    raise ValueError(f"{name}: given, but rope is 'none' (pass rope='interleaved' or 'half')")
        else:
            for name, t in (("rope_cos", rope_cos), ("rope_sin", rope_sin)):
                if t is None:
                    raise ValueError(f"{name}: required with rope={rope!r}")
                if (t.dtype != torch.float32 or t.dim() != 2 or t.shape[1] != d // 2 or t.shape[0] < 1
                        or not t.is_contiguous()):
                    raise ValueError(f"{name}: expected a contiguous float32 tensor of shape [rows, {d // 2}] "
                                     f"(head_dim / 2), got {t.dtype} {tuple(t.shape)} strides {t.stride()}")
            if tuple(rope_sin.shape) != tuple(rope_cos.shape):
                raise ValueError(f"rope_sin: shape {tuple(rope_sin.shape)} differs from rope_cos's "
                                 f"{tuple(rope_cos.shape)}")
            rope_rows = rope_cos.shape[0]
        p = HattnFp8PrepassParams()
        p.q, p.k, p.v = address(q), address(k), address(v)
        p.q_fp8, p.k_fp8, p.v_fp8 = address(q8), address(k8), address(v8)
        p.q_descale, p.k_descale, p.v_descale = address(q_descale), address(k_descale), address(v_descale)
        if rope_code != HATTN_ROPE_NONE:
            p.rope_cos, p.rope_sin = address(rope_cos), address(rope_sin)
        p.rope_rows, p.rope_q_offset = rope_rows, rope_q_offset
        p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim = b, hq, hkv, sq, sk, d
        for name, t in (("q", q), ("k", k), ("v", v), ("q_fp8", q8), ("k_fp8", k8)) + (
                () if v_transposed else (("v_fp8", v8),)):
            _set_strides(p, name, t)
        p.dtype, p.rope, p.hadamard = dtype_code(q, "q"), rope_code, int(bool(hadamard))
        p.hadamard_seed = seed % (1 << 64)  # a negative seed: its 64-bit two's complement
        p.flags = (HATTN_FP8_PREPASS_V_TRANSPOSED if v_transposed else 0) | (HATTN_FP8_PREPASS_V_PER_HEAD if v_per_head else 0)
        return p

    def fwd_fp8_params_torch(self, q8, k8, v8, q_descale, k_descale, v_descale, o, lse, workspace, *,
                             causal: bool = False, softmax_scale: float = 0.0, v_transposed: bool = False,
                             address=None, schedule_workspace=None) -> HattnFwdFp8Params:
        """hattn_fwd_fp8_params for these tensors: q8, k8, v8 float8_e4m3fn [b, s, h, d]; descales
        fp32 [b, h, ceil(s / 128)], contiguous; o bf16/fp16 of q8's shape; lse fp32 [b, heads_q, s_q]
        or None; workspace a uint8 tensor whose size in bytes becomes workspace_size.
        v_transposed: v8 is V^T from the pre-pass ([b, h_kv, d, vt_keys(s_k)], contiguous;
        HATTN_FWD_FP8_V_TRANSPOSED): no transpose pass, and workspace may be None.
        schedule_workspace: None or a zero-filled uint8 tensor (fwd_workspace_torch)."""
        address = address or _data_ptr
        b, sq, hq, d = _check_bshd({"q8": q8}, "q8")
        _, sk, hkv, _ = _check_bshd({"k8": k8} if v_transposed else {"k8": k8, "v8": v8}, "k8", batch=b, head_dim=d)
        for name, t in (("q8", q8), ("k8", k8), ("v8", v8)):
            _check_e4m3(name, t, tuple(t.shape))
        if v_transposed:
            _check_vt("v8", v8, b, hkv, sk, d)
        _check_descale("q_descale", q_descale, b, hq, sq)
        _check_descale("k_descale", k_descale, b, hkv, sk)
        _check_descale("v_descale", v_descale, b, hkv, sk)
        _check_bshd({"o": o}, "o")
        if tuple(o.shape) != tuple(q8.shape):
            raise ValueError(f"o: shape {tuple(o.shape)} differs from q8's {tuple(q8.shape)}")
        o_code = dtype_code(o, "o")
        if lse is not None:
            _check_lse(lse, b, hq, sq)
        if workspace is not None or not v_transposed:
            _check_workspace(workspace)
        p = HattnFwdFp8Params()
        p.q, p.k, p.v, p.o = address(q8), address(k8), address(v8), address(o)
        p.lse = None if lse is None else address(lse)
        p.q_descale, p.k_descale, p.v_descale = address(q_descale), address(k_descale), address(v_descale)
        if workspace is not None:
            p.workspace, p.workspace_size = address(workspace), workspace.numel()
        p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim = b, hq, hkv, sq, sk, d
        for name, t in (("q", q8), ("k", k8), ("o", o)) + (() if v_transposed else (("v", v8),)):
            _set_strides(p, name, t)
        p.o_dtype, p.softmax_scale, p.causal = o_code, softmax_scale, int(bool(causal))
        p.flags = HATTN_FWD_FP8_V_TRANSPOSED if v_transposed else 0
        if schedule_workspace is not None:
            p.schedule_workspace = address(schedule_workspace)
            p.schedule_workspace_size = schedule_workspace.numel() * schedule_workspace.element_size()
        return p

    def check_fp8_prepass(self, params: HattnFp8PrepassParams) -> None:
        """hattn_fp8_prepass_validate; raises HattnArgumentError with its message on failure."""
        status, message = self.fp8_prepass_validate(params)
        if status != HATTN_SUCCESS:
            raise error_for(status, f"hattn_fp8_prepass: {message} ({status_name(status)})")

    def check_fwd_fp8(self, params: HattnFwdFp8Params) -> None:
        """hattn_fwd_fp8_validate; raises HattnArgumentError with its message on failure."""
        status, message = self.fwd_fp8_validate(params)
        if status != HATTN_SUCCESS:
            raise error_for(status, f"hattn_fwd_fp8: {message} ({status_name(status)})")

    def fwd_fp8_workspace_torch(self, k8):
        """A uint8 tensor of hattn_fwd_fp8_workspace_size bytes for k8's shape ([b, s_k, h_kv, d]), on
        k8's device, FWD_FP8_WORKSPACE_ALIGN-byte aligned (as bwd_workspace_torch)."""
        b, s, h, d = k8.shape
        size = self.fwd_fp8_workspace_size(b, h, s, d)
        if size == 0:
            raise HattnArgumentError(f"hattn_fwd_fp8_workspace_size({b}, {h}, {s}, {d}) = 0: bad or overflowing "
                                     "sizes", HATTN_ERROR_SIZE_OVERFLOW)
        return _aligned_bytes(size, FWD_FP8_WORKSPACE_ALIGN, k8.device)

    def fp8_prepass_torch(self, q, k, v, *, rope_cos=None, rope_sin=None, rope: str | int = "none",
                          hadamard: bool = True, seed: int = 0, rope_q_offset: int = 0, v_transposed: bool = False,
                          v_per_head: bool = False, stream: int | None = None):
        """(q8, k8, v8, q_descale, k_descale, v_descale): the pre-pass's outputs (contiguous; e4m3 as
        torch.float8_e4m3fn) on the current stream of q's device; with v_transposed, v8 is V^T for
        fwd_fp8_torch(..., v_transposed=True) (no transpose pass there); with v_per_head, V has one
        descale per (batch, KV head) (in every block's entry)."""
        self._need_fp8()
        planned = stream is None
        if planned:
            key = ("prepass",) + _layout_key(q, k, v)
            key += tuple(None if t is None else _layout_key(t) for t in (rope_cos, rope_sin))
            key += (rope, bool(hadamard), seed, rope_q_offset, bool(v_transposed), bool(v_per_head))
            plan = self._plans.get(key)
            if plan is not None:
                return self._fp8_prepass_planned(plan, q, k, v, rope_cos, rope_sin, v_transposed)
        _check_rank(q=q, k=k, v=v)
        outs = fp8_prepass_outputs(q, k, v, v_transposed=v_transposed)
        p = self.fp8_prepass_params_torch(q, k, v, *outs, rope_cos=rope_cos, rope_sin=rope_sin, rope=rope,
                                          hadamard=hadamard, seed=seed, rope_q_offset=rope_q_offset,
                                          v_transposed=v_transposed, v_per_head=v_per_head)
        self.check_fp8_prepass(p)
        tables = {} if rope_code_of(rope) == HATTN_ROPE_NONE else {"rope_cos": rope_cos, "rope_sin": rope_sin}
        check_devices(q=q, k=k, v=v, **tables)
        self._launch_on(self.lib.hattn_fp8_prepass, p, q.device, self._current_stream(q.device, stream),
                        self._fp8_prepass_failure)
        if planned:
            self._remember(key, bytes(p))
        return outs

    def _fp8_prepass_planned(self, template, q, k, v, rope_cos, rope_sin, v_transposed):
        outs = fp8_prepass_outputs(q, k, v, v_transposed=v_transposed)
        p = HattnFp8PrepassParams.from_buffer_copy(template)
        p.q, p.k, p.v = q.data_ptr(), k.data_ptr(), v.data_ptr()
        p.q_fp8, p.k_fp8, p.v_fp8, p.q_descale, p.k_descale, p.v_descale = (t.data_ptr() for t in outs)
        if p.rope_cos is not None:  # (the tables' addresses are in the params only with a rotation)
            p.rope_cos, p.rope_sin = rope_cos.data_ptr(), rope_sin.data_ptr()
        self._launch_on(self.lib.hattn_fp8_prepass, p, q.device, self._current_stream(q.device),
                        self._fp8_prepass_failure)
        return outs

    def _fp8_prepass_failure(self, status: int, p) -> str:
        self.check_fp8_prepass(p)
        return self._status_text("hattn_fp8_prepass", self.lib.hattn_fp8_prepass_validate, status, p)

    def fwd_fp8_torch(self, q8, k8, v8, q_descale, k_descale, v_descale, *, causal: bool = False,
                      softmax_scale: float = 0.0, out_dtype=None, out=None, lse=None, want_lse: bool = True,
                      workspace=None, v_transposed: bool = False, stream: int | None = None):
        """(o, lse or None) of the FP8 forward on the current stream of q8's device; o is out_dtype
        (bf16 default) and contiguous unless out is given; the workspace is allocated unless given
        (none is needed with v_transposed: v8 is then V^T from fp8_prepass_torch(..., v_transposed=True)).
        Causal calls also pass the stream's scheduler workspace (fwd_workspace_torch, as fwd_torch)."""
        import torch

        self._need_fp8()
        planned = out is None and lse is None and workspace is None and stream is None
        if planned:
            key = ("fwd_fp8",) + _layout_key(q8, k8, v8, q_descale, k_descale, v_descale)
            key += (bool(causal), float(softmax_scale), out_dtype, bool(want_lse), bool(v_transposed))
            plan = self._plans.get(key)
            if plan is not None:
                return self._fwd_fp8_planned(plan, q8, k8, v8, q_descale, k_descale, v_descale)
        b, sq, hq, _ = _check_rank(q8=q8, k8=k8, v8=v8)
        out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
        out = torch.empty(q8.shape, dtype=out_dtype, device=q8.device) if out is None else out
        if lse is None and want_lse:
            lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q8.device)
        if workspace is None and not v_transposed:
            workspace = self.fwd_fp8_workspace_torch(k8)
        p = self.fwd_fp8_params_torch(q8, k8, v8, q_descale, k_descale, v_descale, out, lse, workspace,
                                      causal=causal, softmax_scale=softmax_scale, v_transposed=v_transposed)
        self.check_fwd_fp8(p)
        check_devices(q8=q8, k8=k8, v8=v8, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, out=out,
                      **({} if workspace is None else {"workspace": workspace}), **({} if lse is None else {"lse": lse}))
        launch_stream = self._current_stream(q8.device, stream)
        # The dynamic walk's workspace, one per stream (causal problems and d64's partial tiles).
        p.schedule_workspace, p.schedule_workspace_size = self._walk_workspace(q8.device, launch_stream[0])
        self._launch_on(self.lib.hattn_fwd_fp8, p, q8.device, launch_stream, self._fwd_fp8_failure)
        if planned:
            self._remember(key, (bytes(p), out_dtype, None if lse is None else tuple(lse.shape)))
        return out, lse

    def _fwd_fp8_planned(self, plan, q8, k8, v8, q_descale, k_descale, v_descale):
        import torch

        template, out_dtype, lse_shape = plan
        out = torch.empty(q8.shape, dtype=out_dtype, device=q8.device)
        lse = None if lse_shape is None else torch.empty(lse_shape, dtype=torch.float32, device=q8.device)
        p = HattnFwdFp8Params.from_buffer_copy(template)
        p.q, p.k, p.v, p.o = q8.data_ptr(), k8.data_ptr(), v8.data_ptr(), out.data_ptr()
        p.lse = None if lse is None else lse.data_ptr()
        p.q_descale, p.k_descale, p.v_descale = q_descale.data_ptr(), k_descale.data_ptr(), v_descale.data_ptr()
        if p.workspace is not None:  # V^T of this call (none with v_transposed)
            workspace = self.fwd_fp8_workspace_torch(k8)
            p.workspace, p.workspace_size = workspace.data_ptr(), workspace.numel()
        stream = self._current_stream(q8.device)
        # This call's stream's workspace (the template holds the first call's).
        p.schedule_workspace, p.schedule_workspace_size = self._walk_workspace(q8.device, stream[0])
        self._launch_on(self.lib.hattn_fwd_fp8, p, q8.device, stream, self._fwd_fp8_failure)
        return out, lse

    def _fwd_fp8_failure(self, status: int, p) -> str:
        self.check_fwd_fp8(p)
        return self._status_text("hattn_fwd_fp8", self.lib.hattn_fwd_fp8_validate, status, p)

    def _status_text(self, name: str, validate, status: int, p) -> str:
        """name: status N: its string (and validate's message when the params fail it)."""
        text = self.status_string(status)
        detail = ctypes.create_string_buffer(512)
        if validate(ctypes.byref(p), detail, len(detail)) != HATTN_SUCCESS:
            text += f" ({detail.value.decode(errors='replace')})"
        return f"{name}: status {status}: {text}"


def _layout_key(*tensors) -> tuple:
    """What a remembered call's params depend on besides the addresses: each tensor's shape,
    strides, dtype and device (the *_torch helpers' plan keys)."""
    return tuple(x for t in tensors for x in (t.shape, t.stride(), t.dtype, t.device))


# ---- checks behind the *_torch helpers (what the C API cannot see from pointers and strides) ----
def dtype_code(t, name: str = "tensor") -> int:
    """hattn_dtype of a torch tensor (bf16 or fp16); ValueError naming it otherwise."""
    import torch

    codes = {torch.bfloat16: HATTN_DTYPE_BF16, torch.float16: HATTN_DTYPE_FP16}
    if t.dtype not in codes:
        raise ValueError(f"{name}: hattn takes bfloat16 or float16 tensors, got {t.dtype}")
    return codes[t.dtype]


def _data_ptr(t) -> int:
    return t.data_ptr()


# A 512-byte-aligned placeholder (the alignment torch's CUDA allocator gives): validation compares
# addresses with alignment rules only and never dereferences them.
PLACEHOLDER_ADDRESS = 1 << 32


def placeholder_address(t) -> int:
    """The address validation sees for a tensor that has none (a fake tensor while tracing)."""
    return PLACEHOLDER_ADDRESS


def _check_rank(**tensors) -> tuple:
    """Each tensor must be 4-D [batch, seqlen, heads, head_dim]; returns the first one's shape."""
    for name, t in tensors.items():
        if t.dim() != 4:
            raise ValueError(f"{name}: expected a 4-D tensor [batch, seqlen, heads, head_dim], got shape "
                             f"{tuple(t.shape)}")
    return tuple(next(iter(tensors.values())).shape)


def _check_bshd(tensors: dict, first: str, batch: int | None = None, head_dim: int | None = None):
    """The tensors must be 4-D [batch, seqlen, heads, head_dim] tensors of one shape with a
    contiguous head dim; returns that shape."""
    _check_rank(**tensors)
    shape = tuple(tensors[first].shape)
    for name, t in tensors.items():
        if 0 in t.shape:
            raise ValueError(f"{name}: empty tensor of shape {tuple(t.shape)}: every size must be at least 1")
        if tuple(t.shape) != shape:
            raise ValueError(f"{name}: shape {tuple(t.shape)} differs from {first}'s {shape}")
        if t.stride(3) != 1:
            raise ValueError(f"{name}: head_dim must be contiguous (stride 1), got stride {t.stride(3)}")
    if batch is not None and shape[0] != batch:
        raise ValueError(f"{first}: batch {shape[0]} differs from q's {batch}")
    if head_dim is not None and shape[3] != head_dim:
        raise ValueError(f"{first}: head_dim {shape[3]} differs from q's {head_dim}")
    return shape


def _check_same_dtype(**tensors) -> None:
    (first_name, first), *rest = tensors.items()
    dtype_code(first, first_name)
    for name, t in rest:
        if t.dtype != first.dtype:
            raise ValueError(f"{name}: dtype {t.dtype} differs from {first_name}'s {first.dtype}")


def check_devices(**tensors) -> None:
    """Every tensor must be a CUDA tensor on the first one's device."""
    (first_name, first), *rest = tensors.items()
    if not first.is_cuda:
        raise ValueError(f"{first_name}: expected a CUDA tensor, got one on {first.device}")
    for name, t in rest:
        if t.device != first.device:
            raise ValueError(f"{name}: on {t.device}, expected {first_name}'s device {first.device}")


def _check_lse(lse, batch: int, heads_q: int, seqlen_q: int) -> None:
    import torch

    if lse.dtype != torch.float32 or tuple(lse.shape) != (batch, heads_q, seqlen_q) or not lse.is_contiguous():
        raise ValueError(f"lse: expected a contiguous float32 tensor of shape {(batch, heads_q, seqlen_q)}, "
                         f"got {lse.dtype} {tuple(lse.shape)} strides {lse.stride()}")


def rope_code_of(rope: str | int) -> int:
    """hattn_rope of "none" / "interleaved" / "half" (or the enum's int); ValueError otherwise."""
    if isinstance(rope, str) and rope.lower() in ROPE_CODES:
        return ROPE_CODES[rope.lower()]
    if isinstance(rope, int) and not isinstance(rope, bool) and rope in ROPE_CODES.values():
        return rope
    raise ValueError(f"rope: expected one of {sorted(ROPE_CODES)} (or 0, 1, 2), got {rope!r}")


def descale_shape(batch: int, heads: int, seqlen: int) -> tuple[int, int, int]:
    """[batch, heads, ceil(seqlen / HATTN_FP8_BLOCK_ROWS)]: one fp32 descale per block of rows."""
    return (batch, heads, -(-seqlen // HATTN_FP8_BLOCK_ROWS))


def vt_keys(seqlen_k: int) -> int:
    """V^T's row length: seqlen_k rounded up to 32 (include/hattn.h, HATTN_FWD_FP8_V_TRANSPOSED)."""
    return (seqlen_k + 31) // 32 * 32


def fp8_prepass_outputs(q, k, v, v_transposed: bool = False) -> tuple:
    """Empty contiguous (q8, k8, v8, q_descale, k_descale, v_descale) for [b, s, h, d] q, k, v;
    with v_transposed, v8 is V^T [b, h_kv, d, vt_keys(s_k)] for HATTN_FP8_PREPASS_V_TRANSPOSED."""
    import torch

    q8, k8, v8 = (t.new_empty(t.shape, dtype=torch.float8_e4m3fn) for t in (q, k, v))
    (b, sq, hq, _), (_, sk, hkv, _) = q.shape, k.shape
    if v_transposed:
        v8 = v.new_empty((b, hkv, v.shape[3], vt_keys(sk)), dtype=torch.float8_e4m3fn)
    descales = (q.new_empty(descale_shape(b, h, s), dtype=torch.float32) for h, s in ((hq, sq), (hkv, sk), (hkv, sk)))
    return (q8, k8, v8, *descales)


def _check_e4m3(name: str, t, shape: tuple) -> None:
    import torch

    if t.dtype != torch.float8_e4m3fn:
        raise ValueError(f"{name}: expected a torch.float8_e4m3fn tensor (hattn_fp8_prepass's output), got {t.dtype}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name}: shape {tuple(t.shape)}, expected {shape}")


def _check_vt(name: str, t, batch: int, heads_kv: int, seqlen_k: int, head_dim: int) -> None:
    import torch

    want = (batch, heads_kv, head_dim, vt_keys(seqlen_k))
    if t.dtype != torch.float8_e4m3fn or tuple(t.shape) != want or not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous float8_e4m3fn V^T of shape {want} "
                         f"([b, h_kv, d, seqlen_k rounded up to 32]), got {t.dtype} {tuple(t.shape)}")


def _check_descale(name: str, t, batch: int, heads: int, seqlen: int) -> None:
    import torch

    want = descale_shape(batch, heads, seqlen)
    if t.dtype != torch.float32 or tuple(t.shape) != want or not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous float32 tensor of shape {want} ([batch, heads, "
                         f"ceil(seqlen / {HATTN_FP8_BLOCK_ROWS})]), got {t.dtype} {tuple(t.shape)} strides {t.stride()}")


def _check_workspace(workspace) -> None:
    if workspace.dtype.itemsize != 1 or not workspace.is_contiguous():
        raise ValueError(f"workspace: expected a contiguous 1-byte-element tensor, got {workspace.dtype} "
                         f"with strides {workspace.stride()}")


def _aligned_bytes(size: int, align: int, device):
    """A uint8 tensor of size bytes on device whose data starts on an align-byte boundary."""
    import torch

    ws = torch.empty(size, dtype=torch.uint8, device=device)
    if ws.data_ptr() % align:
        ws = torch.empty(size + align, dtype=torch.uint8, device=device)
        skip = -ws.data_ptr() % align
        ws = ws[skip:skip + size]
    return ws


def kernel_strides(t) -> tuple[int, int, int]:
    """The batch, seq and head strides to pass for a [b, s, h, d] tensor. A dimension of size 1 is
    never stepped through, and torch leaves its stride arbitrary (0 after expand, 1 after some
    views): it gets the stride a contiguous tensor would have, so it cannot fail a stride check."""
    _, s, h, d = t.shape
    contiguous = (s * h * d, h * d, d)
    return tuple(c if t.shape[i] == 1 else t.stride(i) for i, c in enumerate(contiguous))


def _set_strides(p, name: str, t) -> None:
    strides = kernel_strides(t)
    for dim, stride in zip(("batch", "seq", "head"), strides):
        setattr(p, f"{name}_{dim}_stride", stride)

