"""The hattn package without a GPU: import, version, the ctypes mirror, the op schemas, the fake
implementations (shapes, strides, and the same errors as the real ops), and the argument checks,
which all run before anything touches a device (the C API's validation never dereferences)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import hattn
from hattn import capi
from hattn.attention import _kernel_layout

REPO = Path(__file__).resolve().parents[2]
HEADER = REPO / "include" / "hattn.h"


def test_installed_package_and_version():
    assert Path(hattn.library().path).is_file()
    assert hattn.library().version() == hattn.__version__
    text = HEADER.read_text()
    header = ".".join(re.search(rf"#define HATTN_VERSION_{p} +(\d+)", text).group(1) for p in ("MAJOR", "MINOR", "PATCH"))
    assert hattn.__version__ == header
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1) == header


def test_ctypes_mirror_matches_the_header():
    capi.check_struct_layout(HEADER)  # raises SystemExit with the differences
    lib = hattn.library()
    lib.check_contiguous_helper()
    lib.check_bwd_contiguous_helper()
    lib.check_fp8_contiguous_helpers()


def test_ctypes_mirror_catches_a_wrong_fp8_field():
    fields = list(capi.HattnFwdFp8Params._fields_)
    fields[-1], fields[-2] = fields[-2], fields[-1]  # causal <-> flags
    broken = type("Broken", (capi.ctypes.Structure,), {"_fields_": fields})
    saved = capi.STRUCTS  # (no monkeypatch fixture: run_without_pytest.py runs this file too)
    capi.STRUCTS = (("hattn_fwd_fp8_params", broken, capi.EXPECTED_FWD_FP8_OFFSETS, capi.EXPECTED_FWD_FP8_SIZE),)
    try:
        with pytest.raises(SystemExit, match="hattn_fwd_fp8_params"):
            capi.check_struct_layout(HEADER)
    finally:
        capi.STRUCTS = saved


def test_op_schemas():
    assert str(torch.ops.hattn.fwd.default._schema) == (
        "hattn::fwd(Tensor q, Tensor k, Tensor v, bool causal=False, float softmax_scale=0.) -> (Tensor, Tensor)")
    assert str(torch.ops.hattn.bwd.default._schema) == (
        "hattn::bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, bool causal=False, "
        "float softmax_scale=0., bool deterministic=False) -> (Tensor, Tensor, Tensor)")
    assert str(torch.ops.hattn.fp8_prepass.default._schema) == (
        "hattn::fp8_prepass(Tensor q, Tensor k, Tensor v, Tensor? rope_cos=None, Tensor? rope_sin=None, "
        'str rope="none", bool hadamard=True, SymInt seed=0, SymInt rope_q_offset=0, bool v_transposed=False, '
        "bool v_per_head=False) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
    assert str(torch.ops.hattn.fwd_fp8.default._schema) == (
        "hattn::fwd_fp8(Tensor q8, Tensor k8, Tensor v8, Tensor q_descale, Tensor k_descale, Tensor v_descale, "
        "bool causal=False, float softmax_scale=0., ScalarType out_dtype=15, bool v_transposed=False) "
        "-> (Tensor, Tensor)")


# ---- fake implementations: what torch.compile sees ----------------------------------------------
def fake(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="cuda")


@pytest.mark.parametrize("heads_kv", [8, 2, 1])
def test_fake_fwd_and_bwd_shapes(heads_kv):
    with FakeTensorMode():
        q, k = fake(2, 100, 8, 128), fake(2, 77, heads_kv, 128)
        o, lse = torch.ops.hattn.fwd(q, k, k, True, 0.0)
        assert (o.shape, o.stride(), o.dtype) == (q.shape, (100 * 8 * 128, 8 * 128, 128, 1), q.dtype)
        assert (lse.shape, lse.dtype) == ((2, 8, 100), torch.float32)
        dq, dk, dv = torch.ops.hattn.bwd(o, q, k, k, o, lse, True, 0.0, False)
        assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, k.shape)
        assert dk.is_contiguous() and dq.device == q.device


def test_fake_attention_with_autograd_and_lse():
    with FakeTensorMode():
        qkv = fake(2, 64, 3, 4, 64).requires_grad_()
        q, k, v = qkv.unbind(2)
        out, lse = hattn.attention(q, k, v, causal=True, return_lse=True)
        assert out.shape == q.shape and lse.shape == (2, 4, 64) and not lse.requires_grad
        # (Running the backward needs a CUDA context, even on fake tensors: test_gpu.py does.)
        assert "_Attention" in type(out.grad_fn).__name__


def test_fake_rejects_what_the_kernel_rejects():
    with FakeTensorMode():
        q = fake(1, 16, 4, 96)
        with pytest.raises(hattn.HattnArgumentError, match="head_dim = 96"):
            torch.ops.hattn.fwd(q, q, q)
        padded = fake(1, 16, 4, 68)[..., :64]
        with pytest.raises(hattn.HattnArgumentError, match="q_head_stride = 68 elements"):
            torch.ops.hattn.fwd(padded, padded, padded)
        cpu = torch.empty(1, 16, 4, 64, dtype=torch.bfloat16)
        with pytest.raises(ValueError, match="q: expected a CUDA tensor"):
            torch.ops.hattn.fwd(cpu, cpu, cpu)


def test_make_fx_traces_the_ops_without_a_gpu():
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode():
        q = fake(1, 32, 4, 64)
        graph = make_fx(lambda a: hattn.attention(a, a, a, causal=True))(q)
    targets = [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]
    assert "hattn.fwd.default" in targets, targets


class QKVAttention(torch.nn.Module):
    """A QKV projection into hattn.attention: its inputs are strided views of one tensor."""

    def __init__(self, dim=256, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False, device="cuda", dtype=torch.bfloat16)

    def forward(self, x):
        b, s, dim = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, dim // self.heads).unbind(2)
        return hattn.attention(q, k, v, causal=True).reshape(b, s, dim)


def test_dynamo_traces_attention_without_graph_breaks():
    """torch.export in strict mode traces with Dynamo (torch.compile's front end) and fails on any
    graph break; fake CUDA tensors let it run here, without a GPU."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        module = QKVAttention()
        x = torch.empty(2, 128, 256, device="cuda", dtype=torch.bfloat16)
        exported = torch.export.export(module, (x,), strict=True)
    code = "\n".join(m.code for m in exported.graph_module.modules() if isinstance(m, torch.fx.GraphModule))
    assert "torch.ops.hattn.fwd.default" in code, code


# ---- argument checks: each names the argument (CPU tensors reach every check but the device's) ---
def cpu(*shape, dtype=torch.bfloat16):
    return torch.zeros(*shape, dtype=dtype)


Q = cpu(1, 128, 4, 64)
WIDE = cpu(1, 128, 4, 128)
BAD_FWD = [
    ("rank", (Q[0], Q, Q), ValueError, r"q: expected a 4-D tensor"),
    ("dtype", (Q.float(), Q.float(), Q.float()), ValueError, r"q: hattn takes bfloat16 or float16"),
    ("mixed dtypes", (Q, Q.half(), Q), ValueError, r"k: dtype torch.float16 differs from q's torch.bfloat16"),
    ("k/v shapes", (Q, Q[:, :100], Q), ValueError, r"v: shape \(1, 128, 4, 64\) differs from k's"),
    ("batch", (Q, cpu(2, 128, 4, 64), cpu(2, 128, 4, 64)), ValueError, r"k: batch 2 differs from q's 1"),
    ("head dims", (Q, WIDE, WIDE), ValueError, r"k: head_dim 128 differs from q's 64"),
    ("head dim stride", (WIDE[..., ::2],) * 3, ValueError, r"q: head_dim must be contiguous"),
    ("head_dim 96", (cpu(1, 8, 2, 96),) * 3, hattn.HattnArgumentError, r"head_dim = 96"),
    ("heads", (Q, Q[:, :, :3], Q[:, :, :3]), hattn.HattnArgumentError, r"heads_q = 4 is not a multiple of heads_kv = 3"),
    ("empty", (cpu(1, 0, 4, 64),) * 3, ValueError, r"q: empty tensor of shape \(1, 0, 4, 64\)"),
    # A view at an odd offset is copied by the op (its data pointer is known only when it runs).
    ("misaligned start", (WIDE[..., 1:65],) * 3, ValueError, r"q: expected a CUDA tensor"),
    ("stride", (cpu(1, 128, 4, 68)[..., :64],) * 3, hattn.HattnArgumentError, r"q_head_stride = 68 elements"),
    ("device", (Q, Q, Q), ValueError, r"q: expected a CUDA tensor, got one on cpu"),
]


@pytest.mark.parametrize("case", BAD_FWD, ids=[c[0] for c in BAD_FWD])
def test_fwd_argument_errors(case):
    _, args, error, pattern = case
    with pytest.raises(error, match=pattern):
        torch.ops.hattn.fwd(*args)


def test_scale_error():
    with pytest.raises(hattn.HattnArgumentError, match="softmax_scale"):
        torch.ops.hattn.fwd(Q, Q, Q, False, -1.0)
    with pytest.raises(hattn.HattnArgumentError, match="softmax_scale"):
        hattn.attention(Q, Q, Q, softmax_scale=float("nan"))


def test_bwd_argument_errors():
    lse = torch.zeros(1, 4, 128)
    with pytest.raises(ValueError, match=r"lse: expected a contiguous float32 tensor of shape \(1, 4, 128\)"):
        torch.ops.hattn.bwd(Q, Q, Q, Q, Q, lse[:, :2])
    with pytest.raises(ValueError, match="dout: shape"):
        torch.ops.hattn.bwd(Q[:, :64], Q, Q, Q, Q, lse)
    with pytest.raises(ValueError, match="o: dtype"):
        torch.ops.hattn.bwd(Q, Q, Q, Q, Q.half(), lse)
    with pytest.raises(ValueError, match="q: expected a CUDA tensor"):
        torch.ops.hattn.bwd(Q, Q, Q, Q, Q, lse)


def test_errors_are_both_hattn_and_value_errors():
    assert issubclass(hattn.HattnArgumentError, hattn.HattnError)
    assert issubclass(hattn.HattnArgumentError, ValueError)
    with pytest.raises(hattn.HattnError) as info:
        torch.ops.hattn.fwd(*(cpu(1, 8, 2, 96),) * 3)
    assert info.value.status == capi.HATTN_ERROR_UNSUPPORTED_HEAD_DIM


# ---- layouts hattn.attention passes in place, and ones it copies -------------------------------
def test_kernel_layout_copies_only_what_the_kernel_cannot_read():
    qkv = cpu(2, 64, 3, 4, 64)
    bhsd = cpu(2, 4, 64, 64).transpose(1, 2)
    flat = cpu(2 * 64 * 4 * 64 + 3)
    # (A misaligned start, flat[3:], is left to the ops, which see the data pointer.)
    for t in (qkv[:, :, 0], bhsd, cpu(1, 64, 4, 64), cpu(64, 4, 64).unsqueeze(0), flat[3:].view(2, 64, 4, 64)):
        assert _kernel_layout(t) is t
    for t in (cpu(2, 64, 4, 128)[..., ::2], cpu(1, 64, 4, 64).expand(2, 64, 4, 64), cpu(2, 64, 4, 68)[..., :64]):
        copy = _kernel_layout(t)
        assert copy is not t and copy.is_contiguous() and torch.equal(copy, t)


def test_size_one_dimensions_get_contiguous_strides():
    t = cpu(64, 4, 64).unsqueeze(0).expand(1, 64, 4, 64)  # batch stride 0, but batch 1
    assert capi.kernel_strides(t) == (64 * 4 * 64, 4 * 64, 64)
    t = cpu(1, 64, 1, 64).as_strided((1, 64, 1, 64), (1, 64, 3, 1))  # head stride 3, but 1 head
    assert capi.kernel_strides(t) == (64 * 64, 64, 64)



# ---- the FP8 path: fake implementations and argument checks --------------------------------------
E4M3 = torch.float8_e4m3fn


@pytest.mark.parametrize("seqlen_q, seqlen_k, heads_kv", [(100, 77, 8), (128, 129, 2), (17, 1000, 1)])
def test_fake_fp8_prepass_and_fwd_fp8_shapes(seqlen_q, seqlen_k, heads_kv):
    with FakeTensorMode():
        q, k = fake(2, seqlen_q, 8, 128, dtype=torch.float16), fake(2, seqlen_k, heads_kv, 128, dtype=torch.float16)
        q8, k8, v8, qd, kd, vd = torch.ops.hattn.fp8_prepass(q, k, k)
        assert (q8.shape, q8.dtype, k8.shape, v8.dtype) == (q.shape, E4M3, k.shape, E4M3)
        assert q8.is_contiguous() and k8.is_contiguous() and q8.device == q.device
        blocks = lambda s: -(-s // 128)
        assert (qd.shape, qd.dtype) == ((2, 8, blocks(seqlen_q)), torch.float32)
        assert kd.shape == vd.shape == (2, heads_kv, blocks(seqlen_k))
        for out_dtype in (torch.bfloat16, torch.float16):
            o, lse = torch.ops.hattn.fwd_fp8(q8, k8, v8, qd, kd, vd, True, 0.0, out_dtype)
            assert (o.shape, o.dtype, o.is_contiguous()) == (q.shape, out_dtype, True)
            assert (lse.shape, lse.dtype) == ((2, 8, seqlen_q), torch.float32)
        # V^T straight from the pre-pass: [b, h_kv, d, seqlen_k rounded up to 32], read as such.
        q8, k8, vt8, qd, kd, vd = torch.ops.hattn.fp8_prepass(q, k, k, None, None, "none", True, 0, 0, True)
        assert (vt8.shape, vt8.dtype, vt8.is_contiguous()) == ((2, heads_kv, 128, -(-seqlen_k // 32) * 32), E4M3, True)
        o, lse = torch.ops.hattn.fwd_fp8(q8, k8, vt8, qd, kd, vd, False, 0.0, torch.bfloat16, True)
        assert (o.shape, lse.shape) == (q.shape, (2, 8, seqlen_q))


def test_fake_attention_fp8_has_no_grad_fn():
    with FakeTensorMode():
        qkv = fake(2, 64, 3, 4, 64).requires_grad_()
        q, k, v = qkv.unbind(2)
        out, lse = hattn.attention_fp8(q, k, v, causal=True, return_lse=True)
        assert (out.shape, out.dtype, lse.shape) == (q.shape, q.dtype, (2, 4, 64))
        assert out.grad_fn is None and not out.requires_grad


def test_fake_fp8_prepass_with_rope():
    with FakeTensorMode():
        q = fake(1, 64, 4, 64)
        cos, sin = (torch.empty(80, 32, device="cuda") for _ in range(2))
        q8, *_ = torch.ops.hattn.fp8_prepass(q, q, q, cos, sin, "half", False, 7, 16)
        assert q8.dtype == E4M3
        with pytest.raises(hattn.HattnArgumentError, match="rope_rows = 80"):
            torch.ops.hattn.fp8_prepass(q, q, q, cos, sin, "interleaved", False, 7, 17)


def test_make_fx_traces_attention_fp8_without_a_gpu():
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode():
        q = fake(1, 32, 4, 64)
        graph = make_fx(lambda a: hattn.attention_fp8(a, a, a, causal=True))(q)
    targets = [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]
    assert "hattn.fp8_prepass.default" in targets and "hattn.fwd_fp8.default" in targets, targets


def test_dynamo_traces_attention_fp8_without_graph_breaks():
    class Module(torch.nn.Module):
        def forward(self, q, k, v):
            return hattn.attention_fp8(q, k, v, causal=True)

    with FakeTensorMode(allow_non_fake_inputs=True):
        q, k = fake(2, 128, 4, 64), fake(2, 128, 2, 64)
        exported = torch.export.export(Module(), (q, k, k), strict=True)
    code = "\n".join(m.code for m in exported.graph_module.modules() if isinstance(m, torch.fx.GraphModule))
    assert "torch.ops.hattn.fp8_prepass.default" in code and "torch.ops.hattn.fwd_fp8.default" in code, code


COS = torch.zeros(128, 32)
BAD_PREPASS = [
    ("rank", (Q[0], Q, Q), {}, ValueError, r"q: expected a 4-D tensor"),
    ("dtype", (Q.float(), Q.float(), Q.float()), {}, ValueError, r"q: hattn takes bfloat16 or float16"),
    ("mixed dtypes", (Q, Q, Q.half()), {}, ValueError, r"v: dtype torch.float16 differs from q's"),
    ("k/v shapes", (Q, Q, Q[:, :100]), {}, ValueError, r"v: shape \(1, 100, 4, 64\) differs from k's"),
    ("head_dim 96", (cpu(1, 8, 2, 96),) * 3, {}, hattn.HattnArgumentError, r"head_dim = 96"),
    ("heads", (Q, Q[:, :, :3], Q[:, :, :3]), {}, hattn.HattnArgumentError, r"heads_q = 4 .*heads_kv = 3"),
    ("rope name", (Q, Q, Q), {"rope": "neox"}, ValueError, r"rope: expected one of"),
    ("rope without tables", (Q, Q, Q), {"rope": "half"}, ValueError, r"rope_cos: required"),
    ("tables without rope", (Q, Q, Q, COS, COS), {}, ValueError, r"rope_cos: given, but rope is 'none'"),
    ("table width", (Q, Q, Q, torch.zeros(128, 64), COS), {"rope": "half"}, ValueError,
     r"rope_cos: expected a contiguous float32 tensor of shape \[rows, 32\]"),
    ("table dtype", (Q, Q, Q, COS, COS.double()), {"rope": "half"}, ValueError, r"rope_sin: expected"),
    ("table rows", (Q, Q, Q, COS[:100], COS[:100]), {"rope": "half"}, hattn.HattnArgumentError,
     r"rope_rows = 100"),
    ("rope offset", (Q, Q, Q, COS, COS), {"rope": "interleaved", "rope_q_offset": -1}, hattn.HattnArgumentError,
     r"rope_q_offset = -1"),
    ("device", (Q, Q, Q), {}, ValueError, r"q: expected a CUDA tensor, got one on cpu"),
    ("device of tables", (Q, Q, Q, COS, COS), {"rope": "half"}, ValueError, r"q: expected a CUDA tensor"),
]


@pytest.mark.parametrize("case", BAD_PREPASS, ids=[c[0] for c in BAD_PREPASS])
def test_fp8_prepass_argument_errors(case):
    _, args, kwargs, error, pattern = case
    with pytest.raises(error, match=pattern):
        torch.ops.hattn.fp8_prepass(*args, **kwargs)


Q8 = torch.zeros(1, 128, 4, 64, dtype=E4M3)
D1 = torch.zeros(1, 4, 1)
BAD_FWD_FP8 = [
    ("not e4m3", (Q, Q8, Q8, D1, D1, D1), ValueError, r"q8: expected a torch.float8_e4m3fn tensor"),
    ("k/v shapes", (Q8, Q8, Q8[:, :100], D1, D1, D1), ValueError, r"v8: shape \(1, 100, 4, 64\) differs"),
    ("descale shape", (Q8, Q8, Q8, D1, torch.zeros(1, 4, 2), D1), ValueError,
     r"k_descale: expected a contiguous float32 tensor of shape \(1, 4, 1\)"),
    ("descale dtype", (Q8, Q8, Q8, D1, D1, D1.half()), ValueError, r"v_descale: expected"),
    ("head_dim 96", (torch.zeros(1, 8, 2, 96, dtype=E4M3),) * 3 + (torch.zeros(1, 2, 1),) * 3,
     hattn.HattnArgumentError, r"head_dim = 96"),
    ("device", (Q8, Q8, Q8, D1, D1, D1), ValueError, r"q8: expected a CUDA tensor, got one on cpu"),
]


@pytest.mark.parametrize("case", BAD_FWD_FP8, ids=[c[0] for c in BAD_FWD_FP8])
def test_fwd_fp8_argument_errors(case):
    _, args, error, pattern = case
    with pytest.raises(error, match=pattern):
        torch.ops.hattn.fwd_fp8(*args)


def test_fwd_fp8_out_dtype_and_scale_errors():
    with pytest.raises(ValueError, match=r"o: hattn takes bfloat16 or float16 tensors, got torch.float32"):
        torch.ops.hattn.fwd_fp8(Q8, Q8, Q8, D1, D1, D1, False, 0.0, torch.float32)
    with pytest.raises(hattn.HattnArgumentError, match="softmax_scale"):
        torch.ops.hattn.fwd_fp8(Q8, Q8, Q8, D1, D1, D1, False, -1.0)
    with FakeTensorMode(), pytest.raises(hattn.HattnArgumentError, match="softmax_scale"):
        q = fake(1, 128, 4, 64)
        hattn.attention_fp8(q, q, q, softmax_scale=float("nan"))
    with pytest.raises(ValueError, match="q: expected a CUDA tensor"):
        hattn.attention_fp8(Q, Q, Q)


# ---- layouts remembered by capi.Hattn.fwd_torch / bwd_torch, without a GPU ----------------------------
class _RecordingHattn(capi.Hattn):
    """capi.Hattn whose launches validate the params as the C API does and then record them
    instead of running, on the stream 0: fwd_torch / bwd_torch's own path on CPU tensors."""

    def __init__(self, path):
        super().__init__(path)
        self.launched = []
        real, launched = self.lib, self.launched

        def recording(kind, validate):  # an entry point that validates and records instead of launching
            def launch(p, stream):
                status = validate(p, None, 0)
                if status == capi.HATTN_SUCCESS:
                    launched.append((kind, bytes(p._obj)))
                return status
            return launch

        class Lib:
            hattn_fwd = staticmethod(recording("fwd", real.hattn_fwd_validate))
            hattn_bwd = staticmethod(recording("bwd", real.hattn_bwd_validate))
            hattn_fp8_prepass = staticmethod(recording("prepass", real.hattn_fp8_prepass_validate))
            hattn_fwd_fp8 = staticmethod(recording("fwd_fp8", real.hattn_fwd_fp8_validate))

            def __getattr__(self, name):
                return getattr(real, name)

        self.lib = Lib()

    current = 0  # the stream handle a call without one launches on

    def _current_stream(self, device, stream=None):
        return (self.current if stream is None else stream), True

    def fwd_workspace_torch(self, device, stream):
        """The causal walk's workspace in host memory (one per stream, as on a GPU)."""
        cache = self.__dict__.setdefault("_cpu_workspaces", {})
        return cache.setdefault(stream, torch.zeros(max(self.fwd_workspace_size(), 1), dtype=torch.uint8))


def _fields(struct, skip=()):
    return {name: getattr(struct, name) for name, _ in struct._fields_ if name not in skip}


def test_remembered_layouts_without_a_gpu():
    """A layout's second call launches the params the checks would build for it (a copy of the
    first call's with the new addresses); a bad address in a remembered layout is refused with
    the checks' own error; the memory of layouts is bounded."""
    lib = _RecordingHattn(hattn.library().path)
    saved = capi.check_devices  # CPU tensors stand in for CUDA ones (no monkeypatch: see above)
    capi.check_devices = lambda **tensors: None
    try:
        q = torch.randn(1, 64, 4, 64, dtype=torch.bfloat16)
        k, v = torch.randn(1, 80, 2, 64, dtype=torch.bfloat16), torch.randn(1, 80, 2, 64, dtype=torch.bfloat16)
        o1, lse1 = lib.fwd_torch(q, k, v, softmax_scale=0.1)
        o2, lse2 = lib.fwd_torch(q, k, v, softmax_scale=0.1)
        assert [kind for kind, _ in lib.launched] == ["fwd", "fwd"] and len(lib._plans) == 1
        second = capi.HattnFwdParams.from_buffer_copy(lib.launched[1][1])
        # Every call takes its stream's scheduler workspace (the dynamic walk: causal problems and
        # d64's partial tiles, include/hattn.h).
        want = lib.fwd_params_torch(q, k, v, o2, lse2, softmax_scale=0.1, workspace=lib.fwd_workspace_torch(q.device, 0))
        assert _fields(second) == _fields(want)
        for stream in (0, 7):  # causal, on two streams: each stream's own workspace
            lib.current = stream
            o3, lse3 = lib.fwd_torch(q, k, v, causal=True)
        lib.current = 0
        second = capi.HattnFwdParams.from_buffer_copy(lib.launched[3][1])
        workspace = lib.fwd_workspace_torch(q.device, 7)
        want = lib.fwd_params_torch(q, k, v, o3, lse3, causal=True, workspace=workspace)
        assert _fields(second) == _fields(want) and len(lib._plans) == 2
        del lib.launched[2:]
        dout = torch.randn_like(q)
        for _ in range(2):
            dq, dk, dv = lib.bwd_torch(q, k, v, o1, lse1, dout)
        first, second = (capi.HattnBwdParams.from_buffer_copy(b) for _, b in lib.launched[2:])
        ws = torch.empty(first.workspace_size, dtype=torch.uint8)  # (its address is the call's own)
        want = lib.bwd_params_torch(q, k, v, o1, lse1, dout, dq, dk, dv, ws)
        assert _fields(second, skip=("workspace",)) == _fields(want, skip=("workspace",))
        assert second.workspace is not None and second.workspace % capi.BWD_WORKSPACE_ALIGN == 0
        assert len(lib._plans) == 3
        flat = torch.randn(q.numel() + 8, dtype=torch.bfloat16)
        bad = flat[1:1 + q.numel()].view(q.shape)  # a 2-byte offset, q's shape and strides
        fresh = _RecordingHattn(hattn.library().path)
        for call in (lambda h: h.fwd_torch(bad, k, v, softmax_scale=0.1), lambda h: h.bwd_torch(bad, k, v, o1, lse1, dout)):
            with pytest.raises(hattn.HattnArgumentError) as planned:
                call(lib)
            with pytest.raises(hattn.HattnArgumentError) as checked:
                call(fresh)
            assert str(planned.value) == str(checked.value)
        assert len(lib.launched) == 4 and not fresh.launched
        lib.PLAN_CACHE_SIZE = 3
        for s in range(1, 8):
            lib.fwd_torch(q[:, :s], q[:, :s], q[:, :s])
            assert len(lib._plans) <= 3
    finally:
        capi.check_devices = saved


def test_fp8_remembered_layouts_without_a_gpu():
    """As test_remembered_layouts_without_a_gpu for the FP8 pre-pass (with RoPE, V^T) and the FP8
    forward (V rows: its V^T workspace is the call's own)."""
    lib = _RecordingHattn(hattn.library().path)
    saved = capi.check_devices
    capi.check_devices = lambda **tensors: None
    try:
        q, k, v = (torch.randn(1, 100, 2, 128, dtype=torch.bfloat16) for _ in range(3))
        cos, sin = torch.randn(100, 64), torch.randn(100, 64)
        rope = dict(rope="half", rope_cos=cos, rope_sin=sin)
        for _ in range(2):
            outs = lib.fp8_prepass_torch(q, k, v, v_transposed=True, **rope)
        second = capi.HattnFp8PrepassParams.from_buffer_copy(lib.launched[1][1])
        assert _fields(second) == _fields(lib.fp8_prepass_params_torch(q, k, v, *outs, v_transposed=True, **rope))
        rows = lib.fp8_prepass_torch(q, k, v)
        for _ in range(2):
            o, lse = lib.fwd_fp8_torch(*rows, softmax_scale=0.1)
        second = capi.HattnFwdFp8Params.from_buffer_copy(lib.launched[-1][1])
        ws = torch.empty(second.workspace_size, dtype=torch.uint8)
        want = lib.fwd_fp8_params_torch(*rows, o, lse, ws, softmax_scale=0.1,
                                        schedule_workspace=lib.fwd_workspace_torch(q.device, 0))
        assert _fields(second, skip=("workspace",)) == _fields(want, skip=("workspace",))
        assert [kind for kind, _ in lib.launched] == ["prepass"] * 3 + ["fwd_fp8"] * 2
        for stream in (0, 7):  # causal, on two streams: each stream's own scheduler workspace
            lib.current = stream
            o, lse = lib.fwd_fp8_torch(*rows, causal=True)
        lib.current = 0
        second = capi.HattnFwdFp8Params.from_buffer_copy(lib.launched[-1][1])
        ws = torch.empty(second.workspace_size, dtype=torch.uint8)
        want = lib.fwd_fp8_params_torch(*rows, o, lse, ws, causal=True,
                                        schedule_workspace=lib.fwd_workspace_torch(q.device, 7))
        assert _fields(second, skip=("workspace",)) == _fields(want, skip=("workspace",))
        del lib.launched[5:]
        assert {key[0] for key in lib._plans} == {"prepass", "fwd_fp8"}
        flat = torch.randn(q.numel() + 8, dtype=torch.bfloat16)
        bad = flat[1:1 + q.numel()].view(q.shape)  # a 2-byte offset, q's shape and strides
        fresh = _RecordingHattn(hattn.library().path)
        with pytest.raises(hattn.HattnArgumentError) as planned:
            lib.fp8_prepass_torch(bad, k, v, v_transposed=True, **rope)
        with pytest.raises(hattn.HattnArgumentError) as checked:
            fresh.fp8_prepass_torch(bad, k, v, v_transposed=True, **rope)
        assert str(planned.value) == str(checked.value) and not fresh.launched
    finally:
        capi.check_devices = saved
