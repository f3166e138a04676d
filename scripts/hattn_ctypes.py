"""ctypes mirror of include/hattn.h: the params struct, the enums and the four entry points.

    import hattn_ctypes as hc
    lib = hc.Hattn()                       # $HATTN_LIB, else build/libhattn.so
    p = lib.params_contiguous(q, k, v, o, batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, hc.HATTN_DTYPE_BF16)
    status, message = lib.validate(p)
    status = lib.fwd(p, stream)            # stream: a cudaStream_t as an int (0 = the legacy stream)

Pure standard library (no torch, no GPU needed to import it or to check the struct layout).
"""
from __future__ import annotations

import ctypes
import math
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
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

STATUS_NAMES = {value: name for name, value in globals().items()
                if name.startswith("HATTN_ERROR_") or name == "HATTN_SUCCESS"}

# ---- enum hattn_dtype and the variant flags ------------------------------------------------------
HATTN_DTYPE_BF16 = 0
HATTN_DTYPE_FP16 = 1
HATTN_FWD_NO_PINGPONG = 1 << 0
HATTN_FWD_NO_INTRA_WG_OVERLAP = 1 << 1


def status_name(status: int) -> str:
    return STATUS_NAMES.get(status, f"unknown status {status}")


class HattnFwdParams(ctypes.Structure):
    """struct hattn_fwd_params, field by field (enums are C ints, `unsigned` is c_uint)."""
    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),  # float*
        ("batch", ctypes.c_int),
        ("heads_q", ctypes.c_int),
        ("heads_kv", ctypes.c_int),
        ("seqlen_q", ctypes.c_int),
        ("seqlen_k", ctypes.c_int),
        ("head_dim", ctypes.c_int),
        ("q_batch_stride", ctypes.c_int64),
        ("q_seq_stride", ctypes.c_int64),
        ("q_head_stride", ctypes.c_int64),
        ("k_batch_stride", ctypes.c_int64),
        ("k_seq_stride", ctypes.c_int64),
        ("k_head_stride", ctypes.c_int64),
        ("v_batch_stride", ctypes.c_int64),
        ("v_seq_stride", ctypes.c_int64),
        ("v_head_stride", ctypes.c_int64),
        ("o_batch_stride", ctypes.c_int64),
        ("o_seq_stride", ctypes.c_int64),
        ("o_head_stride", ctypes.c_int64),
        ("dtype", ctypes.c_int),  # hattn_dtype
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int),
        ("flags", ctypes.c_uint),
    ]


# x86-64 (LP64, System V) layout, worked out by hand: five 8-byte pointers (0..39), six ints
# (40..63; 64 is 8-aligned, so no padding before the strides), twelve int64 strides (64..159),
# then dtype/scale/causal/flags, 4 bytes each (160..175). Size 176 = a multiple of the 8-byte
# alignment, so no tail padding. Confirmed with gcc: offsetof/sizeof on include/hattn.h.
EXPECTED_SIZE = 176
EXPECTED_OFFSETS = {
    "q": 0, "k": 8, "v": 16, "o": 24, "lse": 32,
    "batch": 40, "heads_q": 44, "heads_kv": 48, "seqlen_q": 52, "seqlen_k": 56, "head_dim": 60,
    "q_batch_stride": 64, "q_seq_stride": 72, "q_head_stride": 80,
    "k_batch_stride": 88, "k_seq_stride": 96, "k_head_stride": 104,
    "v_batch_stride": 112, "v_seq_stride": 120, "v_head_stride": 128,
    "o_batch_stride": 136, "o_seq_stride": 144, "o_head_stride": 152,
    "dtype": 160, "softmax_scale": 164, "causal": 168, "flags": 172,
}


def check_struct_layout() -> None:
    """Raises SystemExit if the ctypes struct disagrees with the x86-64 layout table."""
    actual = {name: getattr(HattnFwdParams, name).offset for name, _ in HattnFwdParams._fields_}
    problems = [f"{name}: ctypes offset {actual.get(name)} != expected {offset}"
                for name, offset in EXPECTED_OFFSETS.items() if actual.get(name) != offset]
    problems += [f"{name}: not in the expected table" for name in actual if name not in EXPECTED_OFFSETS]
    if ctypes.sizeof(HattnFwdParams) != EXPECTED_SIZE:
        problems.append(f"sizeof: ctypes {ctypes.sizeof(HattnFwdParams)} != expected {EXPECTED_SIZE}")
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        problems.append("this is not a 64-bit platform; the expected table is for x86-64")
    if problems:
        raise SystemExit("hattn_fwd_params layout mismatch:\n  " + "\n  ".join(problems))


def default_library_path() -> Path:
    """$HATTN_LIB if set, else build/libhattn.so in this repository."""
    env = os.environ.get(LIB_ENV)
    return Path(env) if env else REPO / "build" / "libhattn.so"


class Hattn:
    """The C API of libhattn.so. `lib` is the raw ctypes.CDLL, with argument types declared."""

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
        self.lib.hattn_fwd_params_contiguous.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 7
        self.lib.hattn_fwd_params_contiguous.restype = HattnFwdParams

    # ---- thin wrappers (params may be None: the C side then gets NULL) ----
    def fwd(self, params: HattnFwdParams | None, stream: int | None = 0) -> int:
        return self.lib.hattn_fwd(None if params is None else ctypes.byref(params), ctypes.c_void_p(stream or None))

    def validate(self, params: HattnFwdParams | None, msg_len: int = 512) -> tuple[int, str]:
        buf = ctypes.create_string_buffer(msg_len)
        status = self.lib.hattn_fwd_validate(None if params is None else ctypes.byref(params), buf, msg_len)
        return status, buf.value.decode(errors="replace")

    def status_string(self, status: int) -> str:
        return (self.lib.hattn_status_string(status) or b"?").decode()

    def params_contiguous(self, q: int | None, k: int | None, v: int | None, o: int | None, batch: int,
                          heads_q: int, heads_kv: int, seqlen_q: int, seqlen_k: int, head_dim: int,
                          dtype: int) -> HattnFwdParams:
        return self.lib.hattn_fwd_params_contiguous(q, k, v, o, batch, heads_q, heads_kv, seqlen_q, seqlen_k,
                                                    head_dim, dtype)

    # ---- helpers ----
    def describe(self, status: int, params: HattnFwdParams) -> str:
        text = self.status_string(status)
        detail = ctypes.create_string_buffer(512)
        if self.lib.hattn_fwd_validate(ctypes.byref(params), detail, len(detail)) != HATTN_SUCCESS:
            text += f" ({detail.value.decode(errors='replace')})"
        return f"hattn_fwd: status {status}: {text}"

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
                    dtype=HATTN_DTYPE_BF16, causal=0, flags=0)
        bad = [f"{k}: {getattr(p, k)} != {v}" for k, v in want.items() if getattr(p, k) != v]
        # "the default scale": 0 (resolved later) or 1/sqrt(head_dim) spelled out are both fine.
        if not (p.softmax_scale == 0.0 or math.isclose(p.softmax_scale, 1 / math.sqrt(d), rel_tol=1e-6)):
            bad.append(f"softmax_scale: {p.softmax_scale} is neither 0 nor 1/sqrt({d})")
        if bad:
            raise SystemExit("hattn_fwd_params_contiguous disagrees with the ctypes mirror:\n  " + "\n  ".join(bad))
