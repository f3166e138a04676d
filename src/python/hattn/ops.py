"""hattn's custom ops: torch.ops.hattn.fwd and torch.ops.hattn.bwd, and the FP8 path's
torch.ops.hattn.fp8_prepass and torch.ops.hattn.fwd_fp8.

Each op allocates its outputs (contiguous), checks its inputs (ValueError naming the tensor, or
HattnArgumentError with the C API's message) and launches on the current CUDA stream of q's device.
Each has a fake implementation (same checks, same output shapes and strides, no launch), so
torch.compile traces them without graph breaks. The ops read strided inputs in place and copy one
whose start is not 16-byte aligned (a view at an odd offset); strides the kernel cannot use are an
error here (hattn.attention copies such inputs first).
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor

from . import capi


@functools.lru_cache(maxsize=None)
def library() -> capi.Hattn:
    """The loaded libhattn.so ($HATTN_LIB if set, else the one installed inside this package).

    The package's only global state: the library is loaded on first use and this one handle is
    kept for the life of the process (a loaded CUDA library cannot be unloaded safely)."""
    return capi.Hattn(capi.default_library_path())


# TMA needs 16-byte aligned base addresses.
_TMA_ALIGN_BYTES = 16


def _aligned(t: Tensor) -> Tensor:
    """t, or a contiguous copy of it when its data does not start on a 16-byte boundary."""
    return t if t.data_ptr() % _TMA_ALIGN_BYTES == 0 else t.clone(memory_format=torch.contiguous_format)


def _static(*tensors: Tensor) -> bool:
    """True when every size and stride is a plain int (not a symbolic size from dynamic shapes)."""
    return all(isinstance(x, int) for t in tensors for x in (*t.shape, *t.stride(), t.storage_offset()))


def fwd_direct(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, softmax_scale: float = 0.0):
    """hattn::fwd's body: what the op runs, and what hattn.attention calls in eager mode without the
    op's dispatch (the same checks and launch, ~50 us less host time a call)."""
    q, k, v = _aligned(q), _aligned(k), _aligned(v)
    return library().fwd_torch(q, k, v, causal=causal, softmax_scale=softmax_scale)


@torch.library.custom_op("hattn::fwd", mutates_args=())
def fwd(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, softmax_scale: float = 0.0) -> tuple[Tensor, Tensor]:
    """(O, LSE) of attention on [batch, seqlen, heads, head_dim] tensors; LSE is fp32
    [batch, heads_q, seqlen_q] (natural log). softmax_scale 0 means 1/sqrt(head_dim)."""
    return fwd_direct(q, k, v, causal, softmax_scale)


@fwd.register_fake
def _fwd_fake(q, k, v, causal=False, softmax_scale=0.0):
    b, sq, hq, _ = capi._check_rank(q=q)
    o, lse = q.new_empty(q.shape), q.new_empty((b, hq, sq), dtype=torch.float32)
    if _static(q, k, v):  # symbolic sizes (dynamic shapes) are checked when the op runs
        lib = library()
        lib.check_fwd(lib.fwd_params_torch(q, k, v, o, lse, causal=causal, softmax_scale=softmax_scale,
                                           address=capi.placeholder_address))
    capi.check_devices(q=q, k=k, v=v)
    return o, lse


def bwd_direct(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, causal: bool = False,
               softmax_scale: float = 0.0, deterministic: bool = False):
    """hattn::bwd's body (as fwd_direct)."""
    dout, q, k, v, o = _aligned(dout), _aligned(q), _aligned(k), _aligned(v), _aligned(o)
    return library().bwd_torch(q, k, v, o, lse, dout, causal=causal, softmax_scale=softmax_scale,
                               deterministic=deterministic)


@torch.library.custom_op("hattn::bwd", mutates_args=())
def bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, causal: bool = False,
        softmax_scale: float = 0.0, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """(dQ, dK, dV) for dout = dL/dO of the forward that gave o and lse (same q, k, v, causal and
    scale); dK and dV are summed over each GQA group. deterministic: bit-identical dQ run to run."""
    return bwd_direct(dout, q, k, v, o, lse, causal, softmax_scale, deterministic)


@bwd.register_fake
def _bwd_fake(dout, q, k, v, o, lse, causal=False, softmax_scale=0.0, deterministic=False):
    b, sq, hq, d = capi._check_rank(q=q, k=k, v=v)
    dq, dk, dv = q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)
    if _static(dout, q, k, v, o, lse):  # symbolic sizes (dynamic shapes) are checked when the op runs
        lib = library()
        size = lib.bwd_workspace_size(b, hq, sq, d)
        workspace = q.new_empty(max(size, 1), dtype=torch.uint8)  # a fake tensor: allocates nothing
        p = lib.bwd_params_torch(q, k, v, o, lse, dout, dq, dk, dv, workspace, causal=causal,
                                 softmax_scale=softmax_scale, address=capi.placeholder_address)
        p.workspace_size = size
        lib.check_bwd(p)
    capi.check_devices(q=q, k=k, v=v, o=o, lse=lse, dout=dout)
    return dq, dk, dv


def fp8_prepass_direct(q: Tensor, k: Tensor, v: Tensor, rope_cos: Tensor | None = None, rope_sin: Tensor | None = None,
                       rope: str = "none", hadamard: bool = True, seed: int = 0, rope_q_offset: int = 0,
                       v_transposed: bool = False, v_per_head: bool = False):
    """hattn::fp8_prepass's body (as fwd_direct; hattn.attention_fp8 calls it in eager mode)."""
    q, k, v = _aligned(q), _aligned(k), _aligned(v)
    rope_cos = None if rope_cos is None else _aligned(rope_cos)
    rope_sin = None if rope_sin is None else _aligned(rope_sin)
    return library().fp8_prepass_torch(q, k, v, rope_cos=rope_cos, rope_sin=rope_sin, rope=rope, hadamard=hadamard,
                                       seed=seed, rope_q_offset=rope_q_offset, v_transposed=v_transposed,
                                       v_per_head=v_per_head)


@torch.library.custom_op("hattn::fp8_prepass", mutates_args=())
def fp8_prepass(q: Tensor, k: Tensor, v: Tensor, rope_cos: Tensor | None = None, rope_sin: Tensor | None = None,
                rope: str = "none", hadamard: bool = True, seed: int = 0, rope_q_offset: int = 0,
                v_transposed: bool = False, v_per_head: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The FP8 pre-pass of bf16/fp16 [batch, seqlen, heads, head_dim] q, k, v: (q8, k8, v8,
    q_descale, k_descale, v_descale), e4m3 tensors (torch.float8_e4m3fn, contiguous, the inputs'
    shapes) and fp32 descales [batch, heads, ceil(seqlen / 128)], so that x ~= x8 * descale per
    block of 128 rows. rope ("none", "interleaved" = GPT-J pairs, "half" = GPT-NeoX pairs) rotates
    q and k with the fp32 [rows, head_dim / 2] tables rope_cos / rope_sin (key row j uses table
    row j, query row i row i + rope_q_offset); hadamard multiplies q and k by the orthogonal
    random-sign Hadamard matrix of seed (scores unchanged, outliers spread). v is only quantized;
    with v_transposed, v8 is V^T for hattn::fwd_fp8(..., v_transposed=True): e4m3 [batch, heads_kv,
    head_dim, seqlen_k rounded up to 32] (include/hattn.h, HATTN_FP8_PREPASS_V_TRANSPOSED); with
    v_per_head, v gets one descale per (batch, KV head), written into every block's entry
    (HATTN_FP8_PREPASS_V_PER_HEAD; hattn::fwd_fp8 reads it as any v_descale)."""
    return fp8_prepass_direct(q, k, v, rope_cos, rope_sin, rope, hadamard, seed, rope_q_offset, v_transposed,
                              v_per_head)


@fp8_prepass.register_fake
def _fp8_prepass_fake(q, k, v, rope_cos=None, rope_sin=None, rope="none", hadamard=True, seed=0, rope_q_offset=0,
                      v_transposed=False, v_per_head=False):
    capi._check_rank(q=q, k=k, v=v)
    outs = capi.fp8_prepass_outputs(q, k, v, v_transposed=v_transposed)
    tables = [t for t in (rope_cos, rope_sin) if t is not None]
    scalars_static = isinstance(seed, int) and isinstance(rope_q_offset, int)
    if _static(q, k, v, *tables) and scalars_static:  # symbolic values are checked when the op runs
        lib = library()
        lib.check_fp8_prepass(lib.fp8_prepass_params_torch(q, k, v, *outs, rope_cos=rope_cos, rope_sin=rope_sin,
                                                           rope=rope, hadamard=hadamard, seed=seed,
                                                           rope_q_offset=rope_q_offset, v_transposed=v_transposed,
                                                           v_per_head=v_per_head, address=capi.placeholder_address))
    else:
        capi.rope_code_of(rope)
    tables = {} if capi.rope_code_of(rope) == capi.HATTN_ROPE_NONE else {"rope_cos": rope_cos, "rope_sin": rope_sin}
    capi.check_devices(q=q, k=k, v=v, **tables)
    return outs


def fwd_fp8_direct(q8: Tensor, k8: Tensor, v8: Tensor, q_descale: Tensor, k_descale: Tensor, v_descale: Tensor,
                   causal: bool = False, softmax_scale: float = 0.0, out_dtype: torch.dtype = torch.bfloat16,
                   v_transposed: bool = False):
    """hattn::fwd_fp8's body (as fwd_direct)."""
    q8, k8, v8 = _aligned(q8), _aligned(k8), _aligned(v8)
    return library().fwd_fp8_torch(q8, k8, v8, q_descale, k_descale, v_descale, causal=causal,
                                   softmax_scale=softmax_scale, out_dtype=out_dtype, v_transposed=v_transposed)


@torch.library.custom_op("hattn::fwd_fp8", mutates_args=())
def fwd_fp8(q8: Tensor, k8: Tensor, v8: Tensor, q_descale: Tensor, k_descale: Tensor, v_descale: Tensor,
            causal: bool = False, softmax_scale: float = 0.0, out_dtype: torch.dtype = torch.bfloat16,
            v_transposed: bool = False) -> tuple[Tensor, Tensor]:
    """(O, LSE) of FP8 attention on hattn::fp8_prepass's outputs (e4m3 [batch, seqlen, heads,
    head_dim] and their fp32 descales): O of out_dtype (bf16 or fp16), LSE fp32 [batch, heads_q,
    seqlen_q] (natural log), as hattn::fwd computes them on the dequantized inputs (P rounded to
    e4m3 before P V). The V^T workspace is allocated here, on the current stream; with
    v_transposed, v8 is V^T from hattn::fp8_prepass(..., v_transposed=True) and no workspace or
    transpose pass is needed."""
    return fwd_fp8_direct(q8, k8, v8, q_descale, k_descale, v_descale, causal, softmax_scale, out_dtype, v_transposed)


@fwd_fp8.register_fake
def _fwd_fp8_fake(q8, k8, v8, q_descale, k_descale, v_descale, causal=False, softmax_scale=0.0,
                  out_dtype=torch.bfloat16, v_transposed=False):
    b, sq, hq, _ = capi._check_rank(q8=q8, k8=k8, v8=v8)
    o, lse = q8.new_empty(q8.shape, dtype=out_dtype), q8.new_empty((b, hq, sq), dtype=torch.float32)
    if _static(q8, k8, v8, q_descale, k_descale, v_descale):  # symbolic sizes are checked when the op runs
        lib = library()
        _, sk, hkv, d = k8.shape
        size = 0 if v_transposed else lib.fwd_fp8_workspace_size(b, hkv, sk, d)
        # a fake tensor: allocates nothing
        workspace = None if v_transposed else q8.new_empty(max(size, 1), dtype=torch.uint8)
        p = lib.fwd_fp8_params_torch(q8, k8, v8, q_descale, k_descale, v_descale, o, lse, workspace, causal=causal,
                                     softmax_scale=softmax_scale, v_transposed=v_transposed,
                                     address=capi.placeholder_address)
        p.workspace_size = size
        lib.check_fwd_fp8(p)
    capi.check_devices(q8=q8, k8=k8, v8=v8, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    return o, lse
