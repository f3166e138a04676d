"""The hattn package on a Hopper GPU: outputs and gradients against float64, torch.compile, training,
bad inputs and the cost of the Python layer. Every test skips, saying why, without a Hopper GPU.

Accuracy standard: for every output and gradient, hattn's relative L2 error and its largest single
error against a float64 SDPA reference (the inputs upcast) must each be at most twice the larger
of two yardsticks' on the same inputs, plus a small floor: PyTorch's own SDPA in the same 16-bit
dtype (which falls back to other paths for some layouts, one of them far more precise than any
fused kernel), and plain attention written in PyTorch ops in that dtype (the
yardstick FlashAttention's tests use: 16-bit GEMM operands, P and dS rounded to 16 bits, as in
every Hopper attention kernel). The fused kernels' worst element can be within
half an ulp of float64 where a kernel that rounds dS to 16 bits before the dQ GEMM is a few ulps
off; the plain yardstick makes the same roundings, so a bad element still fails.
"""
from __future__ import annotations

import ctypes
import math
import os
import statistics
import time

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

import hattn
from hopper import missing_hopper

MISSING = missing_hopper()
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
ERROR_FACTOR = 2.0  # hattn's error may be this multiple of SDPA's own 16-bit error
ERROR_FLOOR = 1e-3  # absolute, relative to the largest reference magnitude (covers a zero SDPA error)


def need_gpu():
    if MISSING:
        pytest.skip(MISSING)


def randn(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)


def sdpa(q, k, v, causal, scale, dtype=None):
    """SDPA on [b, s, h, d] tensors (bottom-right causal mask, GQA by repeating K/V heads), optionally
    upcast to dtype first; autograd flows back to the given tensors. In 16 bits the mask is a
    CausalBias, so SDPA can pick its fused kernels (they round P as hattn does) rather than the math
    path, whose smaller error would be an unfair yardstick."""
    if dtype is not None:
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    mask = None
    if causal:
        sq, sk = q.shape[2], k.shape[2]
        if q.dtype == torch.float64:
            i = torch.arange(sq, device=q.device)[:, None]
            j = torch.arange(sk, device=q.device)[None, :]
            mask = j <= i + (sk - sq)
        else:
            mask = causal_lower_right(sq, sk)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale).transpose(1, 2)


def plain_attention(q, k, v, causal, scale):
    """Attention in PyTorch ops in the inputs' 16-bit dtype (softmax in fp32, P rounded back):
    the roundings of a fused kernel, none of its care. [b, s, h, d], bottom-right causal, GQA."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-1, -2)).float() * scale
    if causal:
        sq, sk = q.shape[2], k.shape[2]
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + (sk - sq), float("-inf"))
    p = torch.softmax(s, dim=-1).to(q.dtype)
    return (p @ v).transpose(1, 2)


def run_with_grads(fn, q, k, v, dout):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    return out, dq, dk, dv


def check_close(name, got, ref, peer, plain=None, zero_scale=1e-6):
    """got (hattn), peer (fused SDPA, 16-bit) and plain (plain_attention) against ref (float64).

    zero_scale stands in for the reference's magnitude where the reference is identically zero (dQ
    with one key: every softmax row is 1, so dS = dP - D cancels exactly in float64 but leaves fp32
    rounding noise of the size of dP in any 16-bit kernel, SDPA's included)."""
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    assert torch.isfinite(got).all(), f"{name}: {int((~torch.isfinite(got)).sum())} non-finite elements"
    err = (got.double() - ref).abs()
    peer_err = (peer.double() - ref).abs()
    plain_max = (plain.double() - ref).abs().max().item() if plain is not None else 0.0
    ref_max = ref.abs().max().item()
    floor = ERROR_FLOOR * (max(ref_max, 1e-6) if ref_max > 0 else zero_scale)
    worst = err.max().item()
    yardstick = max(peer_err.max().item(), plain_max)
    limit = ERROR_FACTOR * yardstick + floor
    where = tuple(int(i) for i in torch.unravel_index(err.argmax(), err.shape))
    assert worst <= limit, (f"{name}: max error {worst:.3e} at {where} (got {got[where].item():.5f}, "
                            f"ref {ref[where].item():.5f}) > {limit:.3e} ({ERROR_FACTOR} x max(fused SDPA's "
                            f"{peer_err.max().item():.3e}, plain's {plain_max:.3e}) + {floor:.1e})")
    norm = ref.norm().item() or 1.0
    rel, peer_rel = err.norm().item() / norm, peer_err.norm().item() / norm
    plain_rel = (plain.double() - ref).norm().item() / norm if plain is not None else 0.0
    yard_rel = max(peer_rel, plain_rel)
    assert rel <= ERROR_FACTOR * yard_rel + ERROR_FLOOR, (f"{name}: relative L2 error {rel:.3e} > {ERROR_FACTOR} x "
                                                          f"max(fused SDPA's {peer_rel:.3e}, plain's {plain_rel:.3e})"
                                                          f" + {ERROR_FLOOR}")


def check_against_sdpa(q, k, v, causal=False, scale=None, deterministic=False):
    dout = torch.randn_like(q)
    fwd = lambda a, b, c: hattn.attention(a, b, c, causal=causal, softmax_scale=scale, deterministic=deterministic)
    got = run_with_grads(fwd, q, k, v, dout)
    ref = run_with_grads(lambda a, b, c: sdpa(a, b, c, causal, scale, torch.float64), q, k, v, dout.double())
    peer = run_with_grads(lambda a, b, c: sdpa(a, b, c, causal, scale), q, k, v, dout)
    plain = run_with_grads(lambda a, b, c: plain_attention(a, b, c, causal, scale), q, k, v, dout)
    largest = max(r.abs().max().item() for r in ref)
    for name, g, r, p, pl in zip(("out", "dq", "dk", "dv"), got, ref, peer, plain):
        check_close(name, g, r, p, pl, zero_scale=largest)
    return got


# ---- outputs and gradients --------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_head_dims_dtypes(head_dim, dtype, causal):
    need_gpu()
    b, s, h = 2, 300, 4
    q, k, v = (randn(b, s, h, head_dim, dtype=DTYPES[dtype], seed=i) for i in range(3))
    check_against_sdpa(q, k, v, causal)


# Causal with seqlen_q > seqlen_k leaves rows that see no key, where SDPA's reference is NaN:
# test_causal_rows_without_keys covers those.
ODD_LENGTHS = [(sq, sk, causal) for sq, sk in [(1, 1), (17, 17), (1000, 1000), (17, 1000), (1, 1000), (1000, 17)]
               for causal in (False, True) if not (causal and sq > sk)]


@pytest.mark.parametrize("seqlen_q,seqlen_k,causal", ODD_LENGTHS)
def test_odd_lengths(seqlen_q, seqlen_k, causal):
    need_gpu()
    q = randn(2, seqlen_q, 4, 128, seed=1)
    k, v = randn(2, seqlen_k, 4, 128, seed=2), randn(2, seqlen_k, 4, 128, seed=3)
    check_against_sdpa(q, k, v, causal)


def test_causal_rows_without_keys():
    need_gpu()
    sq, sk = 100, 40  # bottom-right causal: the first 60 query rows see no key
    q, k, v = randn(1, sq, 2, 64, seed=1), randn(1, sk, 2, 64, seed=2), randn(1, sk, 2, 64, seed=3)
    out, lse = hattn.attention(q, k, v, causal=True, return_lse=True)
    blind = sq - sk
    assert torch.equal(out[:, :blind], torch.zeros_like(out[:, :blind]))
    assert torch.isneginf(lse[:, :, :blind]).all()
    ref = sdpa(q[:, blind:], k, v, True, None, torch.float64)
    check_close("out (rows that see keys)", out[:, blind:], ref, sdpa(q[:, blind:], k, v, True, None))


@pytest.mark.parametrize("heads_q,heads_kv", [(8, 2), (8, 1), (12, 3)])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_mqa(heads_q, heads_kv, causal):
    need_gpu()
    q = randn(2, 333, heads_q, 128, seed=1)
    k, v = randn(2, 333, heads_kv, 128, seed=2), randn(2, 333, heads_kv, 128, seed=3)
    check_against_sdpa(q, k, v, causal)


def test_softmax_scale_and_lse():
    need_gpu()
    q, k, v = (randn(2, 200, 4, 64, seed=i) for i in range(3))
    check_against_sdpa(q, k, v, causal=True, scale=0.3)
    _, lse = hattn.attention(q, k, v, softmax_scale=0.3, return_lse=True)
    scores = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) * 0.3
    torch.testing.assert_close(lse.double(), torch.logsumexp(scores, -1), rtol=0, atol=1e-3)


def test_deterministic_backward_is_bit_identical():
    need_gpu()
    q, k, v = (randn(2, 1000, 4, 128, seed=i) for i in range(3))
    check_against_sdpa(q, k, v, causal=True, deterministic=True)
    dout = torch.randn_like(q)
    runs = [run_with_grads(lambda a, b, c: hattn.attention(a, b, c, causal=True, deterministic=True), q, k, v, dout)
            for _ in range(2)]
    for name, x, y in zip(("out", "dq", "dk", "dv"), *runs):
        assert torch.equal(x, y), f"{name} differs between two deterministic runs"


# ---- layouts: views the kernel reads in place, and ones it must copy ----------------------------
def layouts(b=2, s=257, h=4, d=128):
    """name -> (q, k, v) built as views of larger tensors."""
    qkv = randn(b, s, 3, h, d, seed=7)  # packed projections: seq stride 3*h*d
    bhsd = [randn(b, h, s, d, seed=10 + i).transpose(1, 2) for i in range(3)]  # [b, h, s, d] storage
    wide = randn(b, s, h, 2 * d, seed=11)  # head dim with stride 2: must be copied
    flat = randn(3 * b * s * h * d + 3, seed=12)
    odd = [flat[3 + i * b * s * h * d:3 + (i + 1) * b * s * h * d].view(b, s, h, d) for i in range(3)]  # 6-byte offset
    return {
        "packed_qkv": (qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]),
        "bhsd_transposed": tuple(bhsd),
        "head_dim_strided": (wide[..., ::2], wide[..., 1::2], wide[..., ::2]),
        "misaligned_start": tuple(odd),
        "expanded_batch": tuple(randn(1, s, h, d, seed=20 + i).expand(b, s, h, d) for i in range(3)),
    }


@pytest.mark.parametrize("layout", ["packed_qkv", "bhsd_transposed", "head_dim_strided", "misaligned_start",
                                    "expanded_batch"])
def test_non_contiguous_inputs(layout):
    need_gpu()
    q, k, v = layouts()[layout]
    check_against_sdpa(q, k, v, causal=True)


def test_strided_views_are_not_copied():
    need_gpu()
    from hattn.attention import _kernel_layout

    # (misaligned_start passes through here: the ops copy it, seeing its data pointer.)
    for name in ("packed_qkv", "bhsd_transposed", "misaligned_start"):
        for t in layouts()[name]:
            assert _kernel_layout(t) is t, f"{name}: a layout the kernel takes was copied"
    for name in ("head_dim_strided", "expanded_batch"):
        for t in layouts()[name]:
            assert _kernel_layout(t) is not t, f"{name}: a layout the kernel cannot take was not copied"


# ---- layouts remembered by capi.Hattn.fwd_torch / bwd_torch -------------------------------------
def test_remembered_layouts_give_the_same_results():
    """A layout's later calls reuse its first call's checked params (only the addresses change):
    forward and backward results must be bit-identical to those of a library handle that has seen
    no call, full and causal, on layouts read in place."""
    need_gpu()
    lib = hattn.library()
    for name in ("packed_qkv", "bhsd_transposed"):
        q, k, v = layouts(s=300)[name]
        dout = randn(*q.shape, seed=5)
        for causal in (False, True):
            for _ in range(3):
                o, lse = lib.fwd_torch(q, k, v, causal=causal)
                grads = lib.bwd_torch(q, k, v, o, lse, dout, causal=causal, deterministic=True)
            fresh = hattn.capi.Hattn(lib.path)
            o_ref, lse_ref = fresh.fwd_torch(q, k, v, causal=causal)
            ref = fresh.bwd_torch(q, k, v, o_ref, lse_ref, dout, causal=causal, deterministic=True)
            assert torch.equal(o, o_ref) and torch.equal(lse, lse_ref), f"{name} causal={causal}: forward differs"
            for what, got, want in zip(("dq", "dk", "dv"), grads, ref):
                assert torch.equal(got, want), f"{name} causal={causal}: {what} differs"
    kinds = {key[0] for key in lib._plans}
    assert kinds == {"fwd", "bwd"}, f"no layout was remembered: {kinds}"


def test_remembered_layouts_still_check_addresses():
    """A misaligned start with a remembered layout's shapes and strides is refused as the checks
    would refuse it, with the same error, and launches nothing."""
    need_gpu()
    lib = hattn.library()
    b, s, h, d = 1, 64, 2, 64
    n = b * s * h * d
    flat = randn(8 * n + 8, seed=3)
    good = [flat[i * n:(i + 1) * n].view(b, s, h, d) for i in range(4)]
    bad = flat[4 * n + 1:5 * n + 1].view(b, s, h, d)  # a 2-byte offset, the same shape and strides
    for _ in range(2):
        o, lse = lib.fwd_torch(good[0], good[1], good[2])
        lib.bwd_torch(good[0], good[1], good[2], o, lse, good[3])
    refused_alike(lib, [lambda l: l.fwd_torch(bad, good[1], good[2]),
                        lambda l: l.fwd_torch(good[0], good[1], bad),
                        lambda l: l.bwd_torch(good[0], good[1], good[2], o, lse, bad),
                        lambda l: l.bwd_torch(bad, good[1], good[2], o, lse, good[3])])


def refused_alike(lib, calls):
    """Each call(handle) must raise the same HattnArgumentError on lib, whose layouts are
    remembered, as on a fresh handle, which runs every check."""
    fresh = hattn.capi.Hattn(lib.path)
    for call in calls:
        with pytest.raises(hattn.HattnArgumentError) as planned:
            call(lib)
        with pytest.raises(hattn.HattnArgumentError) as checked:
            call(fresh)
        assert str(planned.value) == str(checked.value)
    torch.cuda.synchronize()  # nothing was launched: the context is healthy


def test_launch_stream_is_the_current_stream():
    """The raw stream handle planned calls launch on is torch's current stream, on the default
    stream and inside torch.cuda.stream(side)."""
    need_gpu()
    lib = hattn.library()
    device = torch.device("cuda", torch.cuda.current_device())
    assert lib._current_stream(device) == (torch.cuda.current_stream().cuda_stream, True)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert lib._current_stream(device) == (side.cuda_stream, True)


def test_remembered_layouts_are_bounded():
    need_gpu()
    lib = hattn.capi.Hattn(hattn.library().path)
    lib.PLAN_CACHE_SIZE = 4
    for s in range(1, 12):
        q = randn(1, s, 2, 64, seed=s)
        lib.fwd_torch(q, q, q)
        assert len(lib._plans) <= 4


# ---- the ops themselves -------------------------------------------------------------------------
def test_opcheck():
    need_gpu()
    q, k, v = randn(1, 100, 4, 64, seed=1), randn(1, 90, 2, 64, seed=2), randn(1, 90, 2, 64, seed=3)
    torch.library.opcheck(torch.ops.hattn.fwd.default, (q, k, v, True, 0.0))
    o, lse = torch.ops.hattn.fwd(q, k, v, True, 0.0)
    dout = torch.randn_like(o)
    torch.library.opcheck(torch.ops.hattn.bwd.default, (dout, q, k, v, o, lse, True, 0.0, True))


def test_runs_on_the_current_stream():
    """On a side stream, q is written after a long GPU sleep: a launch on any other stream would
    read it before it is written (NaN) instead of after."""
    need_gpu()
    q, k, v = (randn(2, 2048, 8, 128, seed=i) for i in range(3))
    expected = hattn.attention(q, k, v)
    late_q = torch.full_like(q, float("nan"))
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # ~10 ms
        late_q.copy_(q)
        out = hattn.attention(late_q, k, v)
    side.synchronize()
    assert torch.equal(out, expected)


# ---- torch.compile ------------------------------------------------------------------------------
class Block(torch.nn.Module):
    """Pre-norm attention block: QKV projection, hattn (or SDPA), output projection, residual."""

    def __init__(self, dim, heads, heads_kv, use_hattn=True):
        super().__init__()
        self.heads, self.heads_kv, self.head_dim = heads, heads_kv, dim // heads
        self.norm = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, (heads + 2 * heads_kv) * self.head_dim, bias=False)
        self.proj = torch.nn.Linear(dim, dim, bias=False)
        self.use_hattn = use_hattn

    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(self.norm(x)).view(b, s, self.heads + 2 * self.heads_kv, self.head_dim)
        # Attention in bf16 whatever the model's dtype (a no-op for a bf16 model).
        q, k, v = (t.to(torch.bfloat16) for t in qkv.split([self.heads, self.heads_kv, self.heads_kv], dim=2))
        if self.use_hattn:
            o = hattn.attention(q, k, v, causal=True)
        else:
            o = sdpa(q, k, v, True, None)
        return x + self.proj(o.to(x.dtype).reshape(b, s, -1))


def test_torch_compile_fullgraph():
    need_gpu()
    torch._dynamo.reset()
    torch.manual_seed(0)
    block = Block(512, 8, 2).cuda().to(torch.bfloat16)
    x = torch.randn(2, 256, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    explanation = torch._dynamo.explain(block)(x)
    assert explanation.graph_break_count == 0, f"graph breaks: {explanation.break_reasons}"
    # The autograd.Function's forward and backward are subgraphs of the traced graph.
    code = [m.code for g in explanation.graphs for m in g.modules() if isinstance(m, torch.fx.GraphModule)]
    assert any("hattn.fwd" in c for c in code), "the traced graph does not call torch.ops.hattn.fwd"

    compiled = torch.compile(block, fullgraph=True, backend=os.environ.get("HATTN_COMPILE_BACKEND", "inductor"))
    dout = torch.randn_like(x)
    eager_out = block(x)
    (eager_dx,) = torch.autograd.grad(eager_out, x, dout)
    out = compiled(x)
    (dx,) = torch.autograd.grad(out, x, dout)
    torch.testing.assert_close(out, eager_out, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(dx, eager_dx, rtol=2e-2, atol=2e-2)


# ---- training -------------------------------------------------------------------------------------
class TinyTransformer(torch.nn.Module):
    def __init__(self, vocab=256, dim=256, heads=4, heads_kv=2, layers=2, use_hattn=True):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(Block(dim, heads, heads_kv, use_hattn) for _ in range(layers))
        self.mlps = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.LayerNorm(dim), torch.nn.Linear(dim, 4 * dim),
                                                            torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))
                                        for _ in range(layers))
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block, mlp in zip(self.blocks, self.mlps):
            x = block(x)
            x = x + mlp(x)
        return self.head(x)


def train(use_hattn, steps=8):
    torch.manual_seed(0)
    model = TinyTransformer(use_hattn=use_hattn).cuda()  # fp32 weights, bf16 attention
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    g = torch.Generator(device="cuda")
    g.manual_seed(1)
    # Learnable sequences (token t is followed by 3t + 1 mod 256), so the loss visibly falls.
    data = torch.empty(steps, 4, 257, dtype=torch.long, device="cuda")
    data[..., 0] = torch.randint(0, 256, (steps, 4), device="cuda", generator=g)
    for i in range(1, data.shape[-1]):
        data[..., i] = (3 * data[..., i - 1] + 1) % 256
    losses = []
    for tokens in data:
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_training_loss_matches_sdpa():
    need_gpu()
    with_hattn, with_sdpa = train(True), train(False)
    print(f"training losses: hattn {[round(x, 4) for x in with_hattn]}, SDPA {[round(x, 4) for x in with_sdpa]}")
    for step, (a, b) in enumerate(zip(with_hattn, with_sdpa)):
        assert math.isfinite(a) and abs(a - b) <= 1e-2 * abs(b), f"step {step}: loss {a:.5f} with hattn, {b:.5f} with SDPA"
    assert with_hattn[-1] < with_hattn[0], "the loss did not go down"


# ---- bad inputs -------------------------------------------------------------------------------------
def test_bad_inputs_raise():
    need_gpu()
    q = randn(1, 128, 4, 64, seed=1)
    padded = randn(1, 128, 4, 68, seed=2)[..., :64]  # head stride 136 bytes: the op takes no copy
    cases = [
        (lambda: hattn.attention(q, q.cpu(), q), ValueError, "k: on cpu"),
        (lambda: hattn.attention(q.float(), q, q), ValueError, "q: .*bfloat16 or float16"),
        (lambda: hattn.attention(q, q.half(), q), ValueError, "k: dtype"),
        (lambda: hattn.attention(q[..., :48], q[..., :48], q[..., :48]), hattn.HattnArgumentError, "head_dim = 48"),
        (lambda: hattn.attention(q, q[:, :, :3], q[:, :, :3]), hattn.HattnArgumentError, "heads_q = 4 .* heads_kv = 3"),
        (lambda: hattn.attention(q, q[:, :100], q), ValueError, "v: shape"),
        (lambda: hattn.attention(q[0], q[0], q[0]), ValueError, "q: expected a 4-D tensor"),
        (lambda: hattn.attention(q, q, q, softmax_scale=-1.0), hattn.HattnArgumentError, "softmax_scale"),
        (lambda: torch.ops.hattn.fwd(padded, padded, padded), hattn.HattnArgumentError, "q_head_stride = 68"),
    ]
    if torch.cuda.device_count() > 1:
        cases.append((lambda: hattn.attention(q, q.to("cuda:1"), q), ValueError, "k: on cuda:1"))
    for call, error, pattern in cases:
        with pytest.raises(error, match=pattern):
            call()
    o, lse = torch.ops.hattn.fwd(q, q, q)
    with pytest.raises(ValueError, match="lse: expected"):
        torch.ops.hattn.bwd(o, q, q, q, o, lse[:, :2])
    torch.cuda.synchronize()  # nothing was launched with bad arguments: the context is healthy
    check_against_sdpa(q, q, q)


# ---- cost of the Python layer ---------------------------------------------------------------------
TIMING_TOLERANCE = 0.03  # hattn.attention fwd+bwd may be at most 3% slower than the C API
HOST_AHEAD_CYCLES = 10_000_000  # a GPU sleep (~5 ms) queued before each sample: the host runs ahead


def test_python_overhead_within_3_percent_of_the_c_api():
    """hattn.attention forward + backward (autograd) at d128, seqlen 8k, b2 h16, bf16 against
    hattn_fwd + hattn_bwd called through ctypes with preallocated outputs, in this process:
    CUDA events around each sample, samples of the two interleaved, medians compared."""
    need_gpu()
    b, s, h, d = 2, 8192, 16, 128
    q, k, v, dout = (randn(b, s, h, d, seed=i) for i in range(4))
    lib = hattn.library()
    o, lse = torch.empty_like(q), torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    workspace = lib.bwd_workspace_torch(q)
    # The forward's scheduler workspace hattn.attention uses on this stream: the same schedule (with
    # it, d128 problems without a mask split their last pass, which rounds differently from whole
    # tiles), so both sides compute the same bits.
    fwd_workspace = lib.fwd_workspace_torch(q.device, torch.cuda.current_stream().cuda_stream)
    pf = lib.fwd_params_torch(q, k, v, o, lse, workspace=fwd_workspace)
    pb = lib.bwd_params_torch(q, k, v, o, lse, dout, dq, dk, dv, workspace)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream or None)
    pf_ref, pb_ref = ctypes.byref(pf), ctypes.byref(pb)

    def c_api():
        assert lib.lib.hattn_fwd(pf_ref, stream) == 0 and lib.lib.hattn_bwd(pb_ref, stream) == 0

    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))

    def python():
        out = hattn.attention(qg, kg, vg)
        torch.autograd.grad(out, (qg, kg, vg), dout)

    host_us = {"c_api": [], "python": []}  # host time to issue the work (for information)

    def sample(name, fn):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(HOST_AHEAD_CYCLES)
        start.record()
        t0 = time.perf_counter()
        fn()
        host_us[name].append((time.perf_counter() - t0) * 1e6)
        end.record()
        return start, end

    for fn in (c_api, python) * 3:  # warm-up
        fn()
    events = {"c_api": [], "python": []}
    for _ in range(30):
        events["c_api"].append(sample("c_api", c_api))
        events["python"].append(sample("python", python))
    torch.cuda.synchronize()
    ms = {name: statistics.median(a.elapsed_time(e) for a, e in pairs) for name, pairs in events.items()}
    host = {name: statistics.median(us) for name, us in host_us.items()}
    ratio = ms["python"] / ms["c_api"]
    line = (f"TIMING d{d} s{s} b{b} h{h} bf16 fwd+bwd: hattn.attention {ms['python']:.3f} ms, C API {ms['c_api']:.3f} ms, "
            f"ratio {ratio:.4f} (limit {1 + TIMING_TOLERANCE:.2f}); host time to issue: {host['python']:.0f} us vs "
            f"{host['c_api']:.0f} us")
    print(line)
    if os.environ.get("HATTN_TIMING_FILE"):
        with open(os.environ["HATTN_TIMING_FILE"], "a") as f:
            f.write(line + "\n")
    # The C API's own results must be right too, or the comparison means nothing.
    out = hattn.attention(q, k, v)
    assert torch.equal(out, o), "hattn.attention and the C API disagree at the timed shape"
    assert ratio <= 1 + TIMING_TOLERANCE, line


# ---- the FP8 path: hattn.attention_fp8, torch.ops.hattn.fp8_prepass and torch.ops.hattn.fwd_fp8 ----
# O's rel L2 against float64 attention of the 16-bit inputs: every GEMM operand rounded to e4m3
# (3 mantissa bits) gives ~5e-2 (test/fwd_fp8_test.cu's end-to-end bound, kEndToEndMaxRelL2).
FP8_MAX_REL_L2 = 8e-2
# The pre-pass alone: each element rounded to e4m3, half an ulp 2^-4 relative at worst, RMS ~2.6e-2.
FP8_PREPASS_MAX_REL_L2 = 5e-2
# LSE: rounding Q and K to e4m3 moves every score, and the LSE can move by as much as the largest
# score of its row does (LSE is 1-Lipschitz in the max-norm of the scores): up to ~0.3 for rows of
# large scores. That part is computed, not bounded, by taking the float64 LSE of the pre-pass's own
# dequantized Q and K; the kernel itself must then be within this of it (the 8-bit GEMM's reduced
# accumulation precision; test/fwd_fp8_test.cu measured up to 3e-2).
FP8_LSE_ATOL = 5e-2
FP8_BLOCK_ROWS = 128


def rel_l2(got, ref):
    return ((got.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def reference_lse(q, k, causal, scale):
    """float64 LSE [b, heads_q, s_q] of [b, s, h, d] q, k (bottom-right causal, GQA)."""
    q, k = (t.double().transpose(1, 2) for t in (q, k))
    k = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if causal:
        sq, sk = q.shape[2], k.shape[2]
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + (sk - sq), float("-inf"))
    return torch.logsumexp(s, dim=-1)


def check_fp8_against_float64(q, k, v, causal, scale=None, hadamard=True):
    o, lse = hattn.attention_fp8(q, k, v, causal=causal, softmax_scale=scale, hadamard=hadamard, return_lse=True)
    assert o.dtype == q.dtype and o.shape == q.shape and o.grad_fn is None
    assert torch.isfinite(o).all(), f"{int((~torch.isfinite(o)).sum())} non-finite elements of O"
    ref = sdpa(q, k, v, causal, scale, torch.float64)
    err = rel_l2(o, ref)
    print(f"attention_fp8 rel L2 {tuple(q.shape)} k {tuple(k.shape)} causal={causal}: {err:.3e}")
    assert err < FP8_MAX_REL_L2, f"O: relative L2 error {err:.3e} >= {FP8_MAX_REL_L2}"
    # The same pre-pass attention_fp8 ran (deterministic: same seed, same bytes), dequantized.
    q8, k8, _, qd, kd, _ = torch.ops.hattn.fp8_prepass(q, k, v, None, None, "none", hadamard, 0, 0)
    lse_ref = reference_lse(q, k, causal, scale)
    lse_deq = reference_lse(dequantize(q8, qd), dequantize(k8, kd), causal, scale)
    lse_err = (lse.double() - lse_deq).abs().max().item()
    moved = (lse_deq - lse_ref).abs().max().item()
    print(f"attention_fp8 LSE: {lse_err:.3e} from the dequantized inputs' (which the rounding of Q/K "
          f"moved by up to {moved:.3e} from the 16-bit inputs')")
    assert lse_err <= FP8_LSE_ATOL + 1e-3 * lse_deq.abs().max().item(), (
        f"LSE: max error {lse_err:.3e} against the float64 LSE of the dequantized Q, K")
    return o


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_fp8_head_dims(head_dim, causal, dtype):
    need_gpu()
    q, k, v = (randn(2, 300, 4, head_dim, dtype=DTYPES[dtype], seed=s) for s in (1, 2, 3))
    check_fp8_against_float64(q, k, v, causal)


@pytest.mark.parametrize("seqlen_q, seqlen_k, causal", [(17, 17, True), (17, 1000, False), (17, 1000, True),
                                                        (1000, 17, False), (1000, 1000, True), (1, 129, True)])
def test_attention_fp8_odd_lengths(seqlen_q, seqlen_k, causal):
    need_gpu()
    q = randn(1, seqlen_q, 4, 128, seed=4)
    k, v = randn(1, seqlen_k, 4, 128, seed=5), randn(1, seqlen_k, 4, 128, seed=6)
    check_fp8_against_float64(q, k, v, causal)


@pytest.mark.parametrize("heads_q, heads_kv", [(8, 2), (8, 1)])
def test_attention_fp8_gqa(heads_q, heads_kv):
    need_gpu()
    q = randn(2, 256, heads_q, 128, seed=7)
    k, v = randn(2, 384, heads_kv, 128, seed=8), randn(2, 384, heads_kv, 128, seed=9)
    check_fp8_against_float64(q, k, v, True)
    check_fp8_against_float64(q, k, v, False, scale=0.05, hadamard=False)


def test_attention_fp8_has_no_autograd():
    need_gpu()
    q = randn(1, 64, 2, 64, seed=10).requires_grad_()
    o = hattn.attention_fp8(q, q, q)
    assert o.grad_fn is None and not o.requires_grad


def dequantize(x8, descale):
    """x8 [b, s, h, d] e4m3 times its per-block descale [b, h, ceil(s / 128)]: fp32 [b, s, h, d]."""
    s = x8.shape[1]
    per_row = descale.repeat_interleave(FP8_BLOCK_ROWS, dim=2)[:, :, :s]  # [b, h, s]
    return x8.float() * per_row.transpose(1, 2).unsqueeze(-1)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_fp8_prepass_dequantizes_to_the_input(head_dim):
    need_gpu()
    q = randn(2, 300, 4, head_dim, seed=11)
    k, v = randn(2, 200, 2, head_dim, seed=12), randn(2, 200, 2, head_dim, seed=13)
    q[:, 130:140] *= 50  # one block with large rows: its own descale
    q8, k8, v8, qd, kd, vd = torch.ops.hattn.fp8_prepass(q, k, v, None, None, "none", False, 0, 0)
    assert q8.dtype == torch.float8_e4m3fn and qd.shape == (2, 4, 3) and kd.shape == vd.shape == (2, 2, 2)
    for name, x8, d, x in (("q", q8, qd, q), ("k", k8, kd, k), ("v", v8, vd, v)):
        err = rel_l2(dequantize(x8, d), x)
        assert err < FP8_PREPASS_MAX_REL_L2, f"{name}: dequantized rel L2 error {err:.3e}"
    # The Hadamard transform leaves scores unchanged (and v untouched but quantized).
    q8, k8, v8, qd, kd, vd = torch.ops.hattn.fp8_prepass(q, k, v, None, None, "none", True, 1234, 0)
    def scores(a, b):  # [b, heads_q, s_q, s_k]; b has half a's heads
        return a.float().transpose(1, 2) @ b.float().transpose(1, 2).repeat_interleave(2, 1).transpose(-1, -2)
    err = rel_l2(scores(dequantize(q8, qd), dequantize(k8, kd)), scores(q, k))
    assert err < FP8_MAX_REL_L2, f"scores after the Hadamard pre-pass: rel L2 error {err:.3e}"
    assert rel_l2(dequantize(v8, vd), v) < FP8_PREPASS_MAX_REL_L2


def test_fp8_prepass_rope_half():
    need_gpu()
    b, sq, sk, h, d, offset = 1, 100, 150, 2, 128, 50
    q, k = randn(b, sq, h, d, seed=14), randn(b, sk, h, d, seed=15)
    pos = torch.arange(sk, device="cuda", dtype=torch.float32)[:, None]
    angle = pos * (10000.0 ** (-torch.arange(d // 2, device="cuda", dtype=torch.float32) / (d // 2)))
    cos, sin = angle.cos().contiguous(), angle.sin().contiguous()

    def rope(x, rows):
        a, c = x.float()[..., : d // 2], x.float()[..., d // 2:]
        cs, sn = cos[rows][None, :, None, :], sin[rows][None, :, None, :]
        return torch.cat((a * cs - c * sn, a * sn + c * cs), dim=-1)

    q8, k8, _, qd, kd, _ = torch.ops.hattn.fp8_prepass(q, k, k, cos, sin, "half", False, 0, offset)
    assert rel_l2(dequantize(q8, qd), rope(q, slice(offset, offset + sq))) < FP8_PREPASS_MAX_REL_L2
    assert rel_l2(dequantize(k8, kd), rope(k, slice(0, sk))) < FP8_PREPASS_MAX_REL_L2


@pytest.mark.parametrize("seqlen_k", [1, 200, 4097])
def test_fp8_v_transposed_matches_rows(seqlen_k):
    """V^T written by the pre-pass and read by the FP8 forward without its transpose pass gives the
    same O and LSE, bit for bit, as V's rows transposed by the forward itself (same V^T bytes)."""
    need_gpu()
    from hattn.ops import library

    lib = library()
    q = randn(2, 300, 4, 128, seed=21)
    k, v = randn(2, seqlen_k, 2, 128, seed=22), randn(2, seqlen_k, 2, 128, seed=23)
    rows = lib.fp8_prepass_torch(q, k, v, hadamard=True, seed=5)
    vt = lib.fp8_prepass_torch(q, k, v, hadamard=True, seed=5, v_transposed=True)
    assert tuple(vt[2].shape) == (2, 2, 128, (seqlen_k + 31) // 32 * 32)
    o_rows, lse_rows = lib.fwd_fp8_torch(*rows, causal=True)
    o_vt, lse_vt = lib.fwd_fp8_torch(*vt, causal=True, v_transposed=True)
    torch.cuda.synchronize()
    assert torch.equal(o_rows.view(torch.int16), o_vt.view(torch.int16))
    assert torch.equal(lse_rows, lse_vt)


def test_fp8_opcheck():
    need_gpu()
    q, k, v = randn(1, 100, 4, 64, seed=16), randn(1, 90, 2, 64, seed=17), randn(1, 90, 2, 64, seed=18)
    torch.library.opcheck(torch.ops.hattn.fp8_prepass.default, (q, k, v, None, None, "none", True, 3, 0))
    outs = torch.ops.hattn.fp8_prepass(q, k, v, None, None, "none", True, 3, 0)
    # opcheck's schema test perturbs the inputs arithmetically, which PyTorch does not implement
    # for float8_e4m3fn tensors ("mul_cuda" not implemented): the other checks run on fwd_fp8.
    torch.library.opcheck(torch.ops.hattn.fwd_fp8.default, (*outs, True, 0.0, torch.bfloat16),
                          test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))


def test_attention_fp8_torch_compile_fullgraph():
    need_gpu()
    torch._dynamo.reset()
    fn = lambda q, k, v: hattn.attention_fp8(q, k, v, causal=True) * 2.0
    compiled = torch.compile(fn, fullgraph=True, backend=os.environ.get("HATTN_COMPILE_BACKEND", "inductor"))
    q, k = randn(2, 256, 8, 128, seed=19), randn(2, 256, 2, 128, seed=20)
    out, eager = compiled(q, k, k), fn(q, k, k)
    torch.testing.assert_close(out, eager, rtol=1e-2, atol=1e-2)


def test_fp8_runs_on_the_current_stream():
    need_gpu()
    q = randn(1, 512, 4, 128, seed=21)
    expected = hattn.attention_fp8(q, q, q)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = hattn.attention_fp8(q, q, q)
    side.synchronize()
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_fp8_remembered_layouts_give_the_same_results():
    """The pre-pass and the FP8 forward reuse a layout's checked params as the 16-bit ones do:
    bit-identical outputs to a fresh library handle's, with and without RoPE, V rows or V^T,
    full and causal; a misaligned start is refused with the checks' own error."""
    need_gpu()
    lib = hattn.library()
    b, s, h, d = 1, 300, 2, 128
    q, k, v = (randn(b, s, h, d, seed=40 + i) for i in range(3))
    angle = torch.arange(s, device="cuda", dtype=torch.float32)[:, None] * torch.rand(d // 2, device="cuda")
    tables = {"rope": "half", "rope_cos": angle.cos().contiguous(), "rope_sin": angle.sin().contiguous()}

    def bits(t):
        return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t

    for rope in ({}, tables):
        for v_transposed in (False, True):
            for causal in (False, True):
                for _ in range(3):
                    outs = lib.fp8_prepass_torch(q, k, v, v_transposed=v_transposed, **rope)
                    o, lse = lib.fwd_fp8_torch(*outs, causal=causal, v_transposed=v_transposed)
                fresh = hattn.capi.Hattn(lib.path)
                outs_ref = fresh.fp8_prepass_torch(q, k, v, v_transposed=v_transposed, **rope)
                o_ref, lse_ref = fresh.fwd_fp8_torch(*outs_ref, causal=causal, v_transposed=v_transposed)
                what = f"rope={bool(rope)} v_transposed={v_transposed} causal={causal}"
                for i, (got, want) in enumerate(zip(outs, outs_ref)):
                    assert torch.equal(bits(got), bits(want)), f"{what}: pre-pass output {i} differs"
                assert torch.equal(o, o_ref) and torch.equal(lse, lse_ref), f"{what}: FP8 forward differs"
    assert {"prepass", "fwd_fp8"} <= {key[0] for key in lib._plans}
    n = b * s * h * d
    flat = randn(n + 8, seed=44)
    bad = flat[1:1 + n].view(b, s, h, d)  # a 2-byte offset, q's shape and strides
    outs = lib.fp8_prepass_torch(q, k, v)
    bad8 = torch.empty(n + 16, dtype=torch.uint8, device="cuda")[1:1 + n].view(torch.float8_e4m3fn).view(b, s, h, d)
    refused_alike(lib, [lambda l: l.fp8_prepass_torch(bad, k, v), lambda l: l.fwd_fp8_torch(bad8, *outs[1:])])


def test_fp8_bad_inputs_raise():
    need_gpu()
    q = randn(1, 128, 4, 64, seed=22)
    q8, k8, v8, qd, kd, vd = torch.ops.hattn.fp8_prepass(q, q, q)
    cases = [
        (lambda: hattn.attention_fp8(q, q.cpu(), q), ValueError, "k: on cpu"),
        (lambda: hattn.attention_fp8(q.float(), q, q), ValueError, "q: .*bfloat16 or float16"),
        (lambda: hattn.attention_fp8(q[..., :48], q[..., :48], q[..., :48]), hattn.HattnArgumentError,
         "head_dim = 48"),
        (lambda: hattn.attention_fp8(q, q[:, :, :3], q[:, :, :3]), hattn.HattnArgumentError,
         "heads_q = 4 .*heads_kv = 3"),
        (lambda: hattn.attention_fp8(q, q, q, softmax_scale=-1.0), hattn.HattnArgumentError, "softmax_scale"),
        (lambda: torch.ops.hattn.fwd_fp8(q, k8, v8, qd, kd, vd), ValueError, "q8: expected a torch.float8_e4m3fn"),
        (lambda: torch.ops.hattn.fwd_fp8(q8, k8, v8, qd[:, :2], kd, vd), ValueError, "q_descale: expected"),
        (lambda: torch.ops.hattn.fwd_fp8(q8, k8, v8, qd, kd, vd.cpu()), ValueError, "v_descale: on cpu"),
        (lambda: torch.ops.hattn.fp8_prepass(q, q, q, rope="half"), ValueError, "rope_cos: required"),
    ]
    for call, error, pattern in cases:
        with pytest.raises(error, match=pattern):
            call()
    torch.cuda.synchronize()  # nothing was launched with bad arguments: the context is healthy
    check_fp8_against_float64(q, q, q, False)
