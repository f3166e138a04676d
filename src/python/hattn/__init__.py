"""hattn: FlashAttention-3-style attention for NVIDIA Hopper (sm_90a), in PyTorch.

    import torch, hattn
    q, k, v = (torch.randn(2, 4096, 16, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    out = hattn.attention(q, k, v, causal=True)   # [batch, seqlen, heads, head_dim], like flash_attn_func
    out.sum().backward()                          # hattn's backward kernel

The custom ops behind it are torch.ops.hattn.fwd and torch.ops.hattn.bwd (hattn.ops); hattn.capi
is the ctypes mirror of the C API (include/hattn.h) they call.
"""
from .attention import attention
from .capi import HattnArgumentError, HattnError
from .ops import bwd, fwd, library

__version__ = "0.1.0"  # = include/hattn.h's HATTN_VERSION_*; hattn.library().version() is the library's

__all__ = ["attention", "fwd", "bwd", "library", "HattnError", "HattnArgumentError", "__version__"]
