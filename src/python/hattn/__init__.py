"""hattn: FlashAttention-3-style attention for NVIDIA Hopper (sm_90a), in PyTorch.

    import torch, hattn
    q, k, v = (torch.randn(2, 4096, 16, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    out = hattn.attention(q, k, v, causal=True)   # [batch, seqlen, heads, head_dim], like flash_attn_func
    out.sum().backward()                          # hattn's backward kernel

    out8 = hattn.attention_fp8(q, k, v, causal=True)  # FP8 forward (e4m3 operands), no autograd

The custom ops behind them are torch.ops.hattn.fwd, torch.ops.hattn.bwd, torch.ops.hattn.fp8_prepass
and torch.ops.hattn.fwd_fp8 (hattn.ops): what torch.compile and torch.export trace (hattn.attention
runs the ops' bodies directly in eager mode, without their dispatch); hattn.capi is the ctypes
mirror of the C API (include/hattn.h) they call.
"""
from .attention import attention, attention_fp8
from .capi import HattnArgumentError, HattnError
from .ops import bwd, fp8_prepass, fwd, fwd_fp8, library

__version__ = "0.1.0"  # = include/hattn.h's HATTN_VERSION_*; hattn.library().version() is the library's

__all__ = ["attention", "attention_fp8", "fwd", "bwd", "fp8_prepass", "fwd_fp8", "library",
           "HattnError", "HattnArgumentError", "__version__"]
