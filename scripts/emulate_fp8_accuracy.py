#!/usr/bin/env python3
"""FP8 attention accuracy on the CPU: which quantization recipe costs how much, without a GPU.

    python3 scripts/emulate_fp8_accuracy.py [--heads 16] [--seqlen 4096] [--rows 256] [--seed 1]

Needs numpy and ml_dtypes (pip install numpy ml_dtypes). FlashAttention-3's outlier inputs (Q, K,
V ~ N(0, 1) + N(0, 10^2) * Bernoulli(0.001), rounded to bf16, as `hattn accuracy-fp8` draws them),
head_dim 128; for `--rows` query rows of each head, the RMSE of O against float64 attention of the
unquantized inputs. The attention itself is exact (float64) on e4m3-rounded Q, K, V and P (P as
e4m3(256 p), the FP8 forward's gain), normalized by the sums of the rounded P (the d128 kernel's
row sums on the tensor cores), so the figures are the floor a kernel with that recipe can reach --
what a recipe costs, not what a kernel adds. Recipes (scales: amax -> 448 per group of rows):
  per-tensor, no Hadamard      one scale per tensor (FA3's baseline; cuDNN's FP8 inputs)
  block 128, Hadamard          hattn_fp8_prepass: random-sign Hadamard on Q and K, one scale per
                               (head, 128 rows) of Q, K and V
  per-head K and V, Hadamard   the same with one K and one V scale per head (FA3's per-KV-head
                               recipe: a KV block of any width then has one descale)
  per-head Q, K, V, Hadamard   one scale per head for all three
Prints each recipe's RMSE over all heads, and per head its RMSE relative to the block-128 recipe
on the same inputs (e4m3's rounding moves single heads by +-20%, so compare means over many heads).
"""
from __future__ import annotations

import argparse
import sys

try:
    import ml_dtypes
    import numpy as np
except ImportError as error:
    sys.exit(f"emulate_fp8_accuracy.py: needs numpy and ml_dtypes ({error}); pip install numpy ml_dtypes")

E4M3 = ml_dtypes.float8_e4m3fn
E4M3_MAX = 448.0
P_GAIN = 256.0  # P quantized as e4m3(P * 2^8), the plain path's gain (kernels/fwd_fp8_args.h: kDefaultPGainLog2)
HEAD_DIM = 128
OUTLIER_PROB, OUTLIER_STDDEV = 0.001, 10.0
BLOCK_ROWS = 128  # HATTN_FP8_BLOCK_ROWS


def outlier_inputs(rng, shape):
    x = rng.standard_normal(shape)
    x += (rng.random(shape) < OUTLIER_PROB) * rng.standard_normal(shape) * OUTLIER_STDDEV
    return x.astype(ml_dtypes.bfloat16).astype(np.float64)


def signed_hadamard(rng, d):
    """D H / sqrt(d): orthogonal, so (Q M)(K M)^T = Q K^T."""
    h = np.array([[1.0]])
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return np.diag(rng.choice([-1.0, 1.0], size=d)) @ h / np.sqrt(d)


def quantize(x, rows):
    """x [s, d] rounded to e4m3 with one scale per `rows` rows, returned dequantized."""
    out = np.empty_like(x)
    for r0 in range(0, x.shape[0], rows):
        block = x[r0:r0 + rows]
        amax = np.abs(block).max()
        scale = E4M3_MAX / amax if amax > 0 else 1.0
        out[r0:r0 + rows] = (block * scale).astype(E4M3).astype(np.float64) / scale
    return out


def attention(q, k, v, quantize_p):
    s = q @ k.T / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    if quantize_p:
        p = (p * P_GAIN).astype(E4M3).astype(np.float64) / P_GAIN
    return (p @ v) / p.sum(axis=1, keepdims=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--rows", type=int, default=256, help="query rows per head whose O is checked")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    s = args.seqlen
    recipes = {  # name: (Hadamard on Q and K, rows per scale of Q, K, V)
        "per-tensor, no Hadamard": (False, s, s, s),
        "block 128, Hadamard": (True, BLOCK_ROWS, BLOCK_ROWS, BLOCK_ROWS),
        "per-head K and V, Hadamard": (True, BLOCK_ROWS, s, s),
        "per-head Q, K, V, Hadamard": (True, s, s, s),
    }
    mse = {name: [] for name in recipes}
    rotation = signed_hadamard(rng, HEAD_DIM)
    for _ in range(args.heads):
        q, k, v = (outlier_inputs(rng, (s, HEAD_DIM)) for _ in range(3))
        ref = attention(q[:args.rows], k, v, quantize_p=False)
        for name, (hadamard, q_rows, k_rows, v_rows) in recipes.items():
            qq, kk = (q @ rotation, k @ rotation) if hadamard else (q, k)
            o = attention(quantize(qq, q_rows)[:args.rows], quantize(kk, k_rows), quantize(v, v_rows), quantize_p=True)
            mse[name].append(np.mean((o - ref) ** 2))
    base = np.array(mse["block 128, Hadamard"])
    print(f"d{HEAD_DIM} seqlen {s}, {args.heads} heads x {args.rows} rows, seed {args.seed}")
    for name, values in mse.items():
        ratio = np.sqrt(np.array(values) / base)
        print(f"  {name:28s} RMSE {np.sqrt(np.mean(values)):.3e}   per head vs block 128: mean {ratio.mean():.3f} "
              f"(min {ratio.min():.3f}, max {ratio.max():.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
