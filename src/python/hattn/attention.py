"""hattn.attention: the user function, with autograd through hattn's backward kernel; and
hattn.attention_fp8, the FP8 forward (pre-pass, then FP8 attention; no autograd)."""
from __future__ import annotations

import torch
from torch import Tensor

from . import ops  # (also registers torch.ops.hattn.*)

# TMA reads global memory in 16-byte units: every stride must be a multiple.
_TMA_ALIGN_BYTES = 16


def _kernel_layout(t: Tensor) -> Tensor:
    """t itself when the kernel can read it in place (contiguous head dim; batch, seq and head
    strides positive multiples of 16 bytes), else a contiguous copy. (A start that is not 16-byte
    aligned, which only the data pointer tells and torch.compile cannot trace, is the ops' to copy.)"""
    if t.is_contiguous():  # (what .contiguous() below would return anyway)
        return t
    size = t.element_size()
    in_place = t.dim() == 4 and t.stride(3) == 1 and all(
        t.shape[i] == 1 or (t.stride(i) > 0 and t.stride(i) * size % _TMA_ALIGN_BYTES == 0) for i in range(3))
    return t if in_place else t.contiguous()


def _eager(*tensors: Tensor) -> bool:
    """True when a call may go straight to the library instead of through the custom op: not
    while torch.compile or torch.export traces it, and only on plain tensors (not fake tensors or
    other subclasses). The custom op's dispatch costs ~50 us of host time per call in eager mode
    (more under autograd, bench/RESULTS.md run 53), as much as a small problem's kernel; both
    paths run the same checks and the same launch."""
    return not torch.compiler.is_compiling() and all(type(t) is Tensor for t in tensors)


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal: bool, softmax_scale: float, deterministic: bool):
        fwd = ops.fwd_direct if _eager(q, k, v) else torch.ops.hattn.fwd
        o, lse = fwd(q, k, v, causal, softmax_scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.softmax_scale, ctx.deterministic = causal, softmax_scale, deterministic
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        # The incoming gradient may be any layout (expanded from a sum, say): copy it if needed.
        dout = _kernel_layout(dout)
        bwd = ops.bwd_direct if _eager(dout, q, k, v, o, lse) else torch.ops.hattn.bwd
        dq, dk, dv = bwd(dout, q, k, v, o, lse, ctx.causal, ctx.softmax_scale, ctx.deterministic)
        return dq, dk, dv, None, None, None


def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, softmax_scale: float | None = None,
              return_lse: bool = False, deterministic: bool = False):
    """softmax(softmax_scale * Q K^T + mask) V on CUDA tensors of layout [batch, seqlen, heads, head_dim]
    (as flash_attn_func), bf16 or fp16, head_dim 64, 128 or 256, any sequence lengths.

    k and v have heads_kv heads, a divisor of q's heads (GQA; 1 = MQA). causal: key j is visible
    to query i iff j <= i + seqlen_k - seqlen_q (bottom-right aligned). softmax_scale: default
    1/sqrt(head_dim). return_lse: also return LSE, fp32 [batch, heads, seqlen_q] (natural log; not
    differentiable). deterministic: the backward's dQ is bit-identical from run to run.
    Inputs whose strides the kernel cannot use are copied; the output is contiguous."""
    q, k, v = _kernel_layout(q), _kernel_layout(k), _kernel_layout(v)
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    o, lse = _Attention.apply(q, k, v, bool(causal), scale, bool(deterministic))
    return (o, lse) if return_lse else o


def attention_fp8(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, softmax_scale: float | None = None,
                  hadamard: bool = True, seed: int = 0, return_lse: bool = False):
    """FP8 attention, forward only: softmax(softmax_scale * Q K^T + mask) V of bf16 or fp16
    [batch, seqlen, heads, head_dim] tensors (arguments as hattn.attention), computed by
    torch.ops.hattn.fp8_prepass (q, k, v quantized to e4m3 per block of 128 rows; with hadamard,
    q and k first multiplied by the random-sign Hadamard matrix of seed, which leaves the scores
    unchanged and spreads outliers across the head dim) and then torch.ops.hattn.fwd_fp8.

    No autograd: the result has no grad_fn whatever the inputs' requires_grad (use hattn.attention
    to train). Returns O in q's dtype (contiguous), and with return_lse LSE fp32 [batch, heads,
    seqlen_q] (natural log). Expect errors of a few percent (rel L2) against exact attention:
    every operand of both GEMMs is rounded to e4m3."""
    q, k, v = (_kernel_layout(t.detach()) for t in (q, k, v))
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    # V^T straight from the pre-pass: the FP8 forward then runs no transpose pass of its own (the same
    # bytes reach the kernel: results are bit-identical to the rows path, and 1.01-1.36x faster).
    eager = _eager(q, k, v)
    prepass = ops.fp8_prepass_direct if eager else torch.ops.hattn.fp8_prepass
    fwd_fp8 = ops.fwd_fp8_direct if eager else torch.ops.hattn.fwd_fp8
    q8, k8, v8, qd, kd, vd = prepass(q, k, v, None, None, "none", bool(hadamard), int(seed), 0, True)
    o, lse = fwd_fp8(q8, k8, v8, qd, kd, vd, bool(causal), scale, q.dtype, True)
    return (o, lse) if return_lse else o
