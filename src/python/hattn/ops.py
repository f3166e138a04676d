"""hattn's custom ops, torch.ops.hattn.fwd and torch.ops.hattn.bwd.

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


@torch.library.custom_op("hattn::fwd", mutates_args=())
def fwd(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, softmax_scale: float = 0.0) -> tuple[Tensor, Tensor]:
    """(O, LSE) of attention on [batch, seqlen, heads, head_dim] tensors; LSE is fp32
    [batch, heads_q, seqlen_q] (natural log). softmax_scale 0 means 1/sqrt(head_dim)."""
    q, k, v = _aligned(q), _aligned(k), _aligned(v)
    return library().fwd_torch(q, k, v, causal=causal, softmax_scale=softmax_scale)


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


@torch.library.custom_op("hattn::bwd", mutates_args=())
def bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, causal: bool = False,
        softmax_scale: float = 0.0, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """(dQ, dK, dV) for dout = dL/dO of the forward that gave o and lse (same q, k, v, causal and
    scale); dK and dV are summed over each GQA group. deterministic: bit-identical dQ run to run."""
    dout, q, k, v, o = _aligned(dout), _aligned(q), _aligned(k), _aligned(v), _aligned(o)
    return library().bwd_torch(q, k, v, o, lse, dout, causal=causal, softmax_scale=softmax_scale,
                               deterministic=deterministic)


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
