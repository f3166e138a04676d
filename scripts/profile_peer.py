#!/usr/bin/env python3
"""One peer attention forward (or backward) for scripts/profile_fwd.sh to profile under Nsight Compute.

    python3 scripts/profile_peer.py --peer cudnn|cudnn_fp8|fa4 --batch B --heads H --seqlen S --dim D
                                    [--causal] [--bwd] [--fa4-path DIR] [--cudnn-frontend-path DIR]

Runs the peer's forward twice on random [b, s, h, d] inputs (the first call compiles, builds its
graph or picks its plan; ncu profiles the second, --launch-skip 1) and exits 0, or prints why the
peer is not available and exits 3 (so the caller can say "not run" instead of "failed"):
  cudnn      PyTorch SDPA restricted to its cuDNN backend, bf16
  cudnn_fp8  cuDNN's FP8 attention through cudnn-frontend (compare_torch.py's CudnnFp8Attention,
             per-tensor e4m3 inputs, e4m3 output), the peer of hattn's e4m3 forward
  fa4        FlashAttention-4's forward (flash_attn.cute), bf16
The kernel each launches is found by name by the caller (KERNEL_PEER_* in profile_fwd.sh).
--bwd (cudnn and fa4): each call runs the forward with autograd, then the backward; the second
call's backward alone runs between cudaProfilerStart and cudaProfilerStop (torch.cuda.profiler),
so that ncu --profile-from-start off catches every kernel of that backward (preprocess, main, dQ
conversion) whatever the peer names them. (Not an NVTX push/pop range: those are per host thread,
and autograd launches the backward's kernels from its own device thread, outside the range.)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_torch import (HATTN_FP8_E4M3_MAX, CudnnFp8Attention, import_cudnn_frontend,  # noqa: E402
                           import_fa4)

NOT_AVAILABLE = 3
CALLS = 2  # a warm-up call, then the profiled one


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", required=True, choices=("cudnn", "cudnn_fp8", "fa4"))
    for name in ("batch", "heads", "seqlen", "dim"):
        ap.add_argument(f"--{name}", type=int, required=True)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--bwd", action="store_true", help="profile the backward (cudnn, fa4)")
    ap.add_argument("--fa4-path", type=Path, action="append", default=[])
    ap.add_argument("--cudnn-frontend-path", type=Path, action="append", default=[])
    args = ap.parse_args()

    try:
        import torch
        import torch.nn.functional as F
    except ImportError as error:
        print(f"profile_peer.py: PyTorch does not import ({error})", file=sys.stderr)
        return NOT_AVAILABLE
    if not torch.cuda.is_available():
        print("profile_peer.py: no CUDA device visible to PyTorch", file=sys.stderr)
        return NOT_AVAILABLE
    device = torch.device("cuda")
    b, h, s, d = args.batch, args.heads, args.seqlen, args.dim
    q, k, v = (torch.randn((b, s, h, d), device=device, dtype=torch.bfloat16) for _ in range(3))

    if args.bwd:
        if args.peer == "cudnn":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            def forward(qt, kt, vt):
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    out = F.scaled_dot_product_attention(qt.transpose(1, 2), kt.transpose(1, 2), vt.transpose(1, 2),
                                                         is_causal=args.causal)
                return out.transpose(1, 2)
        elif args.peer == "fa4":
            fa4_func, why = import_fa4(args.fa4_path)
            if fa4_func is None:
                print(f"profile_peer.py: FA4: {why}", file=sys.stderr)
                return NOT_AVAILABLE

            def forward(qt, kt, vt):
                out = fa4_func(qt, kt, vt, causal=args.causal)
                return out[0] if isinstance(out, tuple) else out
        else:
            print("profile_peer.py: --bwd: cudnn or fa4 only", file=sys.stderr)
            return NOT_AVAILABLE
        dout = torch.randn_like(q)
        for call in range(CALLS):
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            out = forward(*leaves)
            torch.cuda.synchronize()
            if call == CALLS - 1:
                torch.cuda.profiler.start()
            torch.autograd.grad(out, leaves, dout)
            torch.cuda.synchronize()
            if call == CALLS - 1:
                torch.cuda.profiler.stop()
        return 0

    if args.peer == "cudnn":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for _ in range(CALLS):
                F.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal)
    elif args.peer == "fa4":
        fa4_func, why = import_fa4(args.fa4_path)
        if fa4_func is None:
            print(f"profile_peer.py: FA4: {why}", file=sys.stderr)
            return NOT_AVAILABLE
        for _ in range(CALLS):
            fa4_func(q, k, v, causal=args.causal)
    else:
        cudnn, why = import_cudnn_frontend(args.cudnn_frontend_path)
        if cudnn is None:
            print(f"profile_peer.py: cuDNN FP8: {why}", file=sys.stderr)
            return NOT_AVAILABLE
        peer = CudnnFp8Attention(cudnn, torch, device)
        entry = peer.entry(b, h, s, d, args.causal)
        e4m3 = torch.float8_e4m3fn

        def per_tensor(x):
            amax = x.abs().amax().float().clamp_min(1e-30)
            x8 = (x.float() * (HATTN_FP8_E4M3_MAX / amax)).clamp_(-HATTN_FP8_E4M3_MAX, HATTN_FP8_E4M3_MAX).to(e4m3)
            return x8, (amax / HATTN_FP8_E4M3_MAX).reshape(1, 1, 1, 1)

        (q8, qd), (k8, kd), (v8, vd) = per_tensor(q), per_tensor(k), per_tensor(v)
        s_scale = torch.full((1, 1, 1, 1), HATTN_FP8_E4M3_MAX, dtype=torch.float32, device=device)
        o_scale = torch.ones((1, 1, 1, 1), dtype=torch.float32, device=device)  # speed only: O is not checked
        o8 = torch.empty((b, s, h, d), dtype=e4m3, device=device)
        pack = peer.pack(entry, q=q8, k=k8, v=v8, o=o8, descale_q=qd, descale_k=kd, descale_v=vd,
                         descale_s=1.0 / s_scale, scale_s=s_scale, scale_o=o_scale)
        for _ in range(CALLS):
            peer.execute(entry, pack)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
