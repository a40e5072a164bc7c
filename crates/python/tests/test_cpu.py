"""lanefold on CPU tensors: numerics against torch in float64, shapes,
dtypes, errors, the custom ops, the modules and swap_norms."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F

import lanefold

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# Normwise relative error allowed against float64 (lanefold's own
# validation tolerances: f32 1e-5, f16 2e-3, bf16 1e-2), with headroom
# for the inputs' own rounding in the 16-bit dtypes.
TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}
SHAPES = [(1, 127), (17, 257), (2, 3, 64), (4, 1), (3, 1000)]


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    num = (got - want).norm().item()
    den = want.norm().item()
    return num / den if den > 0 else num


def data(shape, dtype, seed=0, lo=-2.0, hi=2.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo
    return x.to(dtype)


def test_import_and_ops_registered():
    assert callable(lanefold.rms_norm)
    for name in [
        "rms_norm",
        "layer_norm",
        "add_layer_norm",
        "softmax",
        "row_sum",
        "cross_entropy_rows",
        "cross_entropy_rows_lse",
        "cross_entropy_backward",
        "cross_entropy_backward_recompute",
    ]:
        assert hasattr(torch.ops.lanefold, name), name


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm(dtype, shape):
    n = shape[-1]
    x = data(shape, dtype, 1)
    w = data((n,), dtype, 2, 0.5, 1.5)
    for weight in [w, None]:
        for eps in [1e-6, 1e-2]:
            y = lanefold.rms_norm(x, weight, eps=eps)
            assert y.shape == x.shape and y.dtype == dtype
            want = F.rms_norm(x.double(), (n,), None if weight is None else weight.double(), eps)
            assert rel_err(y, want) < TOL[dtype], (weight is None, eps)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm(dtype, shape):
    n = shape[-1]
    x = data(shape, dtype, 3)
    w = data((n,), dtype, 4, 0.5, 1.5)
    b = data((n,), dtype, 5)
    for weight, bias in [(w, b), (w, None), (None, b), (None, None)]:
        for eps in [1e-5, 0.1]:
            y = lanefold.layer_norm(x, weight, bias, eps=eps)
            assert y.shape == x.shape and y.dtype == dtype
            d = lambda t: None if t is None else t.double()  # noqa: E731
            want = F.layer_norm(x.double(), (n,), d(weight), d(bias), eps)
            if n == 1 and bias is None:
                # Every output is 0: compare absolutely.
                assert y.abs().max().item() == 0.0
                continue
            assert rel_err(y, want) < TOL[dtype], (weight is None, bias is None, eps)


def test_a_callers_eps_reaches_the_cold_path():
    """Rows offset far from zero take layernorm's cold path, which once
    used the default eps whatever the caller gave."""
    n = 1000
    x = data((8, n), torch.float32, 1)
    x[4:] = 4096.0 + x[4:] * 1e-2
    for eps in [0.25, 1e-5]:
        y = lanefold.layer_norm(x, None, None, eps=eps)
        want = F.layer_norm(x.double(), (n,), None, None, eps)
        assert rel_err(y, want) < TOL[torch.float32], eps


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_add_layer_norm(dtype, shape):
    n = shape[-1]
    x, r = data(shape, dtype, 6), data(shape, dtype, 7)
    w, b = data((n,), dtype, 8, 0.5, 1.5), data((n,), dtype, 9)
    y, h = lanefold.add_layer_norm(x, r, w, b, eps=1e-5)
    assert y.shape == x.shape and h.shape == x.shape and y.dtype == dtype and h.dtype == dtype
    # h is x + r rounded to the dtype once, as torch's add.
    assert torch.equal(h, x + r)
    want = F.layer_norm(h.double(), (n,), w.double(), b.double(), 1e-5)
    assert rel_err(y, want) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax(dtype, shape):
    x = data(shape, dtype, 10, -8.0, 8.0)
    y = lanefold.softmax(x)
    assert y.shape == x.shape and y.dtype == dtype
    assert rel_err(y, F.softmax(x.double(), -1)) < TOL[dtype]
    assert torch.equal(lanefold.softmax(x, dim=x.dim() - 1), y)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_sum(dtype, shape):
    x = data(shape, dtype, 11, 0.0, 1.0)
    y = lanefold.sum(x)
    assert y.shape == x.shape[:-1] and y.dtype == dtype
    assert rel_err(y, x.double().sum(-1)) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 127), (17, 257), (2, 3, 64), (3, 1000)])
def test_cross_entropy(dtype, shape):
    n = shape[-1]
    logits = data(shape, dtype, 12, -4.0, 4.0)
    g = torch.Generator().manual_seed(13)
    target = torch.randint(0, n, shape[:-1], generator=g)
    flat = target.reshape(-1)
    flat[0] = -100
    for ignore_index in [-100, 5]:
        t = target.clone()
        if ignore_index != -100:
            t[t == -100] = ignore_index
        for reduction in ["none", "sum", "mean"]:
            got = lanefold.cross_entropy(logits, t, ignore_index=ignore_index, reduction=reduction)
            want = F.cross_entropy(
                logits.double().reshape(-1, n),
                t.reshape(-1),
                ignore_index=ignore_index,
                reduction=reduction,
            )
            if reduction == "none":
                assert got.shape == shape[:-1]
                want = want.reshape(shape[:-1])
            assert got.dtype == dtype
            if want.numel() == 1 and want.isnan().item():
                assert got.isnan().item()  # every row ignored: 0/0 as torch
                continue
            assert rel_err(got, want) < TOL[dtype], (ignore_index, reduction)


def test_cross_entropy_int32_targets_and_all_ignored():
    logits = data((4, 10), torch.float32, 14)
    t = torch.tensor([1, 2, 3, 4], dtype=torch.int32)
    want = F.cross_entropy(logits.double(), t.long())
    assert rel_err(lanefold.cross_entropy(logits, t), want) < 1e-5
    ignored = torch.full((4,), -100)
    assert lanefold.cross_entropy(logits, ignored).isnan().item()
    assert lanefold.cross_entropy(logits, ignored, reduction="sum").item() == 0.0


def test_non_contiguous_inputs_are_made_contiguous():
    base = data((8, 130), torch.float32, 15)
    x = base[:, 1:129]  # strided rows
    assert not x.is_contiguous()
    w = data((128,), torch.float32, 16, 0.5, 1.5)
    assert rel_err(lanefold.rms_norm(x, w), F.rms_norm(x.double(), (128,), w.double(), 1e-6)) < 2e-5
    xt = data((64, 8), torch.float32, 17).t()  # 8 x 64, transposed
    assert rel_err(lanefold.softmax(xt), F.softmax(xt.double(), -1)) < 2e-5
    # An offset view: contiguous but not at the start of its storage.
    flat = data((1001,), torch.float16, 18)
    xo = flat[1:].view(10, 100)
    assert rel_err(lanefold.layer_norm(xo), F.layer_norm(xo.double(), (100,))) < 4e-3


def test_empty_rows():
    x = torch.empty((0, 16))
    assert lanefold.layer_norm(x).shape == (0, 16)
    assert lanefold.sum(x).shape == (0,)
    assert lanefold.cross_entropy(x, torch.empty((0,), dtype=torch.long), reduction="none").shape == (0,)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_of_length_zero_give_torchs_answers(dtype):
    x = torch.ones(3, 0, dtype=dtype)
    w = torch.ones(0, dtype=dtype)
    assert lanefold.softmax(x).shape == (3, 0)
    s = lanefold.sum(x)
    assert s.shape == (3,) and s.dtype == dtype and bool((s == 0).all())
    assert lanefold.rms_norm(x, w).shape == (3, 0)
    assert lanefold.layer_norm(x, w, w).shape == (3, 0)
    y, h = lanefold.add_layer_norm(x, x.clone())
    assert y.shape == h.shape == (3, 0)
    ignored = torch.full((3,), -100)
    loss = lanefold.cross_entropy(x, ignored, reduction="none")
    assert loss.shape == (3,) and bool((loss == 0).all())
    assert lanefold.cross_entropy(x, ignored, reduction="sum").item() == 0.0
    assert lanefold.cross_entropy(x, ignored).isnan().item()  # 0/0, as torch
    with pytest.raises(ValueError, match="0 classes"):
        lanefold.cross_entropy(x, torch.tensor([-100, 0, -100]))
    g = torch.ones(2, 0, dtype=dtype, requires_grad=True)
    lanefold.softmax(g).sum().backward()
    assert g.grad.shape == (2, 0)
    with pytest.raises(ValueError, match="no plan"):
        lanefold.describe_plan("softmax", x)


def test_cross_entropy_on_torchs_class_layout_names_the_difference():
    # torch's (N, C, d1) logits: lanefold's classes are the last dim.
    with pytest.raises(ValueError, match="movedim"):
        lanefold.cross_entropy(torch.randn(2, 5, 3), torch.zeros(2, 3, dtype=torch.long))


def test_one_dimensional_input():
    x = data((300,), torch.float32, 19)
    assert rel_err(lanefold.softmax(x), F.softmax(x.double(), -1)) < 2e-5
    assert lanefold.sum(x).shape == ()


# -------------------------------------------------------------------- errors


def test_errors():
    x = data((4, 32), torch.float32, 20)
    w = torch.ones(32)
    with pytest.raises(TypeError, match="dtype"):
        lanefold.rms_norm(x.double())
    with pytest.raises(TypeError, match="dtype"):
        lanefold.softmax(torch.ones(4, 4, dtype=torch.int32))
    with pytest.raises(TypeError, match="torch.Tensor"):
        lanefold.softmax([1.0, 2.0])
    with pytest.raises(TypeError, match="weight has dtype"):
        lanefold.rms_norm(x, w.half())
    with pytest.raises(ValueError, match="weight has shape"):
        lanefold.rms_norm(x, torch.ones(31))
    with pytest.raises(ValueError, match="bias has shape"):
        lanefold.layer_norm(x, w, torch.ones(2, 32))
    with pytest.raises(ValueError, match="residual has shape"):
        lanefold.add_layer_norm(x, x[:2])
    with pytest.raises(ValueError, match="last dim"):
        lanefold.softmax(x, dim=0)
    with pytest.raises(ValueError, match="last dim"):
        lanefold.sum(x, dim=-2)
    with pytest.raises(ValueError, match="eps"):
        lanefold.layer_norm(x, eps=0.0)
    with pytest.raises(ValueError, match="eps"):
        lanefold.rms_norm(x, eps=float("nan"))
    with pytest.raises(ValueError, match="scalar"):
        lanefold.softmax(torch.tensor(1.0))
    with pytest.raises(ValueError, match="reduction"):
        lanefold.cross_entropy(x, torch.zeros(4, dtype=torch.long), reduction="avg")
    with pytest.raises(ValueError, match="target has shape"):
        lanefold.cross_entropy(x, torch.zeros(5, dtype=torch.long))
    with pytest.raises(TypeError, match="class indices"):
        lanefold.cross_entropy(x, torch.zeros(4))
    with pytest.raises(ValueError, match="out of range"):
        lanefold.cross_entropy(x, torch.tensor([0, 1, 32, 3]))
    with pytest.raises(ValueError, match="out of range"):
        lanefold.cross_entropy(x, torch.tensor([0, 1, -1, 3]))
    with pytest.raises(ValueError, match="too large"):
        lanefold.sum(torch.empty((2**16, 2**15 + 1), dtype=torch.float16).expand(2**16, 2**15 + 1))


def test_native_module_rejects_bad_arguments_without_panicking():
    from lanefold import _lanefold as C

    x = torch.ones(2, 8)
    y = torch.empty(2, 8)
    ok = [("x", x.data_ptr())]
    with pytest.raises(ValueError, match="unknown operator"):
        C.cpu_run("norm", "f32", 2, 8, 1e-5, ok, [("y", y.data_ptr())])
    with pytest.raises(ValueError, match="dtype"):
        C.cpu_run("softmax", "f64", 2, 8, 1e-5, ok, [("y", y.data_ptr())])
    with pytest.raises(ValueError, match="zero rows"):
        C.cpu_run("softmax", "f32", 0, 8, 1e-5, ok, [("y", y.data_ptr())])
    with pytest.raises(ValueError, match="missing buffer 'y'"):
        C.cpu_run("softmax", "f32", 2, 8, 1e-5, ok, [])
    with pytest.raises(ValueError, match="no input 'residual'"):
        C.cpu_run("softmax", "f32", 2, 8, 1e-5, ok + [("residual", x.data_ptr())], [("y", y.data_ptr())])
    with pytest.raises(ValueError, match="not aligned|null"):
        C.cpu_run("softmax", "f32", 2, 8, 1e-5, [("x", 0)], [("y", y.data_ptr())])
    with pytest.raises(ValueError, match="eps"):
        C.cpu_run("rmsnorm", "f32", 2, 8, -1.0, ok, [("y", y.data_ptr())])
    # Without a GPU (or driver), the CUDA entry point raises.
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError):
            C.cuda_prepare("softmax", "f32", 2, 8, 1e-5, 0, ["x", "y"])
    with pytest.raises(ValueError, match="no prepared kernel"):
        C.cuda_launch(1 << 40, 0, [16, 32])


def test_plans_are_described():
    x = torch.ones(64, 4096)
    assert "W=" in lanefold.describe_plan("rmsnorm", x, bias=False)


# ------------------------------------------------------------------ modules


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_module_is_a_drop_in(dtype):
    torch.manual_seed(0)
    ref = torch.nn.LayerNorm(96, eps=1e-4, dtype=dtype)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-1, 1)
    mine = lanefold.nn.LayerNorm(96, eps=1e-4, dtype=dtype)
    assert isinstance(mine, torch.nn.LayerNorm)
    assert list(mine.state_dict()) == list(ref.state_dict()) == ["weight", "bias"]
    mine.load_state_dict(ref.state_dict())
    ref.load_state_dict(mine.state_dict())
    x = data((5, 7, 96), dtype, 21)
    with torch.no_grad():
        got = mine(x)
    want = F.layer_norm(x.double(), (96,), ref.weight.double(), ref.bias.double(), 1e-4)
    assert rel_err(got, want) < TOL[dtype]
    for kwargs, keys in [
        (dict(bias=False), ["weight"]),
        (dict(elementwise_affine=False), []),
    ]:
        a, b = torch.nn.LayerNorm(96, **kwargs), lanefold.nn.LayerNorm(96, **kwargs)
        assert list(a.state_dict()) == list(b.state_dict()) == keys
        with torch.no_grad():
            assert rel_err(b(x.float()), a(x.float())) < 2e-5


def test_layer_norm_module_over_two_trailing_dims():
    m = lanefold.nn.LayerNorm((4, 24))
    x = data((3, 4, 24), torch.float32, 22)
    with torch.no_grad():
        assert rel_err(m(x), F.layer_norm(x.double(), (4, 24))) < 2e-5


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_module_is_a_drop_in(dtype):
    ref = torch.nn.RMSNorm(80, eps=1e-6, dtype=dtype)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
    mine = lanefold.nn.RMSNorm(80, eps=1e-6, dtype=dtype)
    assert isinstance(mine, torch.nn.RMSNorm)
    assert list(mine.state_dict()) == ["weight"]
    mine.load_state_dict(ref.state_dict())
    x = data((2, 9, 80), dtype, 23)
    with torch.inference_mode():
        got = mine(x)
    assert rel_err(got, F.rms_norm(x.double(), (80,), ref.weight.double(), 1e-6)) < TOL[dtype]
    # eps=None is torch.finfo(dtype).eps, as torch's.
    none_eps = lanefold.nn.RMSNorm(80)
    with torch.no_grad():
        got = none_eps(x.float())
    want = F.rms_norm(x.double(), (80,), None, torch.finfo(torch.float32).eps)
    assert rel_err(got, want) < 2e-5


def test_modules_train_through_lanefold_and_fall_back_for_other_dtypes():
    m = lanefold.nn.LayerNorm(32)
    x = data((4, 32), torch.float32, 24).requires_grad_()
    y = m(x)
    assert "lanefold" in str(y.grad_fn).lower() or y.grad_fn is not None
    y.sum().backward()
    assert x.grad is not None and m.weight.grad is not None
    r = lanefold.nn.RMSNorm(32)
    r(x).pow(2).sum().backward()
    assert r.weight.grad is not None
    # float64 is not lanefold's, the module still works (torch's forward).
    with torch.no_grad():
        assert m.double()(x.double().detach()).dtype == torch.float64


def _grads(f, args):
    """f(*args) and the gradients of a fixed random projection of it."""
    args = [a.detach().clone().requires_grad_(a.is_floating_point()) if a is not None else None for a in args]
    out = f(*args)
    outs = out if isinstance(out, tuple) else (out,)
    g = torch.Generator().manual_seed(99)
    loss = builtins_sum((o.double() * torch.randn(o.shape, generator=g, dtype=torch.float64)).sum() for o in outs)
    leaves = [a for a in args if a is not None and a.requires_grad]
    return torch.autograd.grad(loss, leaves)


def builtins_sum(xs):
    total = 0
    for x in xs:
        total = total + x
    return total


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gradients_match_torch(dtype):
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    x, r = data((2, 3, 50), dtype, 40), data((2, 3, 50), dtype, 41)
    w, b = data((50,), dtype, 42, 0.5, 1.5), data((50,), dtype, 43)
    t = torch.tensor([[1, -100, 49], [0, 7, 7]])
    cases = [
        (lambda x, w: lanefold.rms_norm(x, w, 1e-5), lambda x, w: F.rms_norm(x, (50,), w, 1e-5), (x, w)),
        (lambda x: lanefold.rms_norm(x), lambda x: F.rms_norm(x, (50,), None, 1e-6), (x,)),
        (
            lambda x, w, b: lanefold.layer_norm(x, w, b, 1e-3),
            lambda x, w, b: F.layer_norm(x, (50,), w, b, 1e-3),
            (x, w, b),
        ),
        (lambda x: lanefold.layer_norm(x), lambda x: F.layer_norm(x, (50,)), (x,)),
        (
            lambda x, r, w, b: lanefold.add_layer_norm(x, r, w, b),
            lambda x, r, w, b: (F.layer_norm(x + r, (50,), w, b), x + r),
            (x, r, w, b),
        ),
        (lambda x: lanefold.softmax(x), lambda x: F.softmax(x, -1), (x,)),
        (lambda x: lanefold.sum(x), lambda x: x.sum(-1), (x,)),
    ]
    for mine, ref, args in cases:
        got = _grads(mine, args)
        want = _grads(lambda *a: ref(*[v.float() for v in a]), args)
        for g, e in zip(got, want):
            assert g.dtype == dtype
            assert rel_err(g, e) < tol
    for reduction in ["mean", "sum", "none"]:
        got = _grads(lambda x: lanefold.cross_entropy(x, t, reduction=reduction), (x,))
        want = _grads(
            lambda x: F.cross_entropy(x.float().reshape(-1, 50), t.reshape(-1), reduction=reduction).reshape(
                () if reduction != "none" else (2, 3)
            ),
            (x,),
        )
        assert rel_err(got[0], want[0]) < tol, reduction


class LlamaRMSNorm(torch.nn.Module):
    """transformers' LlamaRMSNorm, as written there."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class Block(torch.nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.proj = torch.nn.Linear(d, d)
        self.rms = torch.nn.RMSNorm(d, eps=1e-5)
        self.llama = LlamaRMSNorm(d, eps=1e-5)
        self.inner = torch.nn.Sequential(torch.nn.LayerNorm(d, bias=False), torch.nn.GELU())

    def forward(self, x):
        return self.inner(self.llama(self.rms(self.proj(self.ln(x)))))


def test_swap_norms_keeps_state_and_outputs():
    torch.manual_seed(1)
    model = Block()
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(0.5, 1.5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = {k: id(v) for k, v in model.named_parameters()}
    x = data((3, 5, 64), torch.float32, 25)
    with torch.no_grad():
        want = model(x)
    out = lanefold.nn.swap_norms(model)
    assert out is model
    assert isinstance(model.ln, lanefold.nn.LayerNorm)
    assert isinstance(model.rms, lanefold.nn.RMSNorm)
    assert isinstance(model.llama, lanefold.nn.RMSNorm) and model.llama.eps == 1e-5
    assert isinstance(model.inner[0], lanefold.nn.LayerNorm)
    assert isinstance(model.proj, torch.nn.Linear)
    after = model.state_dict()
    assert list(after) == list(before)
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert {k: id(v) for k, v in model.named_parameters()} == ids  # shared, not copied
    with torch.no_grad():
        got = model(x)
    assert rel_err(got, want) < 2e-5
    # Training still works (torch's forward where gradients flow).
    model(x).sum().backward()
    assert model.llama.weight.grad is not None
    # A norm as the model itself is returned replaced.
    assert isinstance(lanefold.nn.swap_norms(torch.nn.LayerNorm(8)), lanefold.nn.LayerNorm)


def test_swapped_llama_norm_with_float32_weight_on_bfloat16_keeps_its_own_forward():
    m = LlamaRMSNorm(32)
    x = data((2, 32), torch.bfloat16, 26)
    with torch.no_grad():
        want = m(x)
        got = lanefold.nn.swap_norms(torch.nn.Sequential(m))[0](x)
    assert got.dtype == want.dtype == torch.float32
    assert torch.equal(got, want)


# ---------------------------------------------------------------- compile


def test_custom_ops_pass_torch_library_opcheck():
    x = data((3, 40), torch.float32, 27)
    w, b = torch.ones(40), torch.zeros(40)
    t = torch.tensor([1, -100, 39])
    cases = [
        (torch.ops.lanefold.rms_norm.default, (x, w, 1e-6)),
        (torch.ops.lanefold.layer_norm.default, (x, w, b, 1e-5)),
        (torch.ops.lanefold.add_layer_norm.default, (x, x, None, b, 1e-5)),
        (torch.ops.lanefold.softmax.default, (x,)),
        (torch.ops.lanefold.row_sum.default, (x,)),
        (torch.ops.lanefold.cross_entropy_rows.default, (x, t)),
        (torch.ops.lanefold.cross_entropy_rows_lse.default, (x, t)),
    ]
    for op, args in cases:
        torch.library.opcheck(
            op,
            args,
            test_utils=(
                "test_schema",
                "test_autograd_registration",
                "test_faketensor",
                "test_aot_dispatch_static",
                "test_aot_dispatch_dynamic",
            ),
        )


def _compile_works() -> str:
    """'' if torch.compile with the inductor backend runs here, else why not."""
    if os.environ.get("LANEFOLD_SKIP_COMPILE"):
        return "LANEFOLD_SKIP_COMPILE is set"
    code = "import torch\nf = torch.compile(lambda x: x.sin() + 1, fullgraph=True)\nf(torch.ones(4))\n"
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=240)
    except subprocess.TimeoutExpired:
        return "torch.compile takes over 240 s here"
    if r.returncode != 0:
        return "torch.compile does not work here: " + r.stderr.decode()[-300:]
    return ""


def test_torch_compile_fullgraph_on_cpu():
    why = _compile_works()
    if why:
        pytest.skip(why)
    torch._dynamo.reset()

    def f(x, r, w, b, logits, target):
        y, h = lanefold.add_layer_norm(x, r, w, b)
        z = lanefold.rms_norm(y, w)
        s = lanefold.softmax(z)
        return s * 2, lanefold.sum(h), lanefold.cross_entropy(logits, target)

    x, r = data((6, 48), torch.float32, 28), data((6, 48), torch.float32, 29)
    w, b = data((48,), torch.float32, 30, 0.5, 1.5), data((48,), torch.float32, 31)
    logits = data((6, 48), torch.float32, 32)
    target = torch.tensor([0, 1, 2, -100, 4, 47])
    started = time.time()
    compiled = torch.compile(f, fullgraph=True)
    got = compiled(x, r, w, b, logits, target)
    want = f(x, r, w, b, logits, target)
    for g, e in zip(got, want):
        assert torch.allclose(g, e, rtol=1e-5, atol=1e-6)
    assert time.time() - started < 600

    # A model with swapped norms compiles whole too (inference).
    model = lanefold.nn.swap_norms(Block(48)).eval()
    with torch.no_grad():
        eager = model(x)
        assert torch.allclose(torch.compile(model, fullgraph=True)(x), eager, rtol=1e-5, atol=1e-6)

    # Training: the backward formulas compile too, cross entropy's
    # forward-written gradient with a unit and a scaled incoming gradient.
    def loss(x, w, b):
        ce = lanefold.cross_entropy(x, target) + 0.25 * lanefold.cross_entropy(x, target, reduction="sum")
        return (lanefold.layer_norm(x, w, b) * 0.5).sum() + ce

    args = [t.clone().requires_grad_() for t in (x, w, b)]
    torch.compile(loss, fullgraph=True)(*args).backward()
    eager = [t.clone().requires_grad_() for t in (x, w, b)]
    loss(*eager).backward()
    for a, e in zip(args, eager):
        torch.testing.assert_close(a.grad, e.grad)


def test_direct_calls_skip_the_op_only_where_nothing_can_tell():
    from lanefold import _ops

    x = torch.randn(3, 40)
    w = torch.randn(40)
    assert _ops._direct(x, w, None)
    assert not _ops._direct(x, w.requires_grad_())
    with torch.no_grad():
        assert _ops._direct(x, w)
    w.requires_grad_(False)

    class Sub(torch.Tensor):
        pass

    assert not _ops._direct(x.as_subclass(Sub))
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Record():
        assert not _ops._direct(x)
        y = lanefold.rms_norm(x, w)
    # A mode sees lanefold's op itself, not its parts.
    assert any("lanefold.rms_norm" in f for f in seen), seen
    # Both paths give the same bits.
    direct = lanefold.rms_norm(x, w)
    via_op = _ops._rms_norm_op(x, w, 1e-6)
    assert torch.equal(direct, via_op) and torch.equal(direct, y)


# ---------------------------------------------------------------- backward


def _recording(monkeypatch):
    """The lanefold ops each call launches, in order."""
    import lanefold._ops as ops

    seen = []
    real = ops._launch

    def launch(op, *args, **kwargs):
        seen.append(op)
        return real(op, *args, **kwargs)

    monkeypatch.setattr(ops, "_launch", launch)
    return seen


def test_backward_runs_lanefolds_backward_programs(monkeypatch):
    seen = _recording(monkeypatch)
    x = data((5, 33), torch.float32, 60).requires_grad_()
    r = data((5, 33), torch.float32, 61).requires_grad_()
    w = data((33,), torch.float32, 62, 0.5, 1.5).requires_grad_()
    t = torch.tensor([1, -100, 32, 0, 5])
    lanefold.rms_norm(x, w).sum().backward()
    lanefold.layer_norm(x, w).sum().backward()
    y, h = lanefold.add_layer_norm(x, r, w)
    (y.sum() + h.sum()).backward()
    lanefold.softmax(x).pow(2).sum().backward()
    # Per-row losses get their gradient only in the backward.
    lanefold.cross_entropy(x, t, reduction="none").sum().backward()
    backward = [op for op in seen if op.endswith("_backward")]
    assert backward == [
        "rmsnorm_backward",
        "layernorm_backward",
        "residual_layernorm_backward",
        "softmax_backward",
        "cross_entropy_backward",
    ], seen


def _torch_grads(ref, args, dtype):
    """Gradients of ref in float64 at the same (rounded) inputs."""
    return _grads(lambda *a: ref(*[v.double() if v is not None else None for v in a]), args)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (17, 257), (2, 3, 1000)])
def test_backward_gradients_match_torch_in_float64(dtype, shape):
    n = shape[-1]
    tol = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}[dtype]
    x, r = data(shape, dtype, 70), data(shape, dtype, 71)
    w, b = data((n,), dtype, 72, 0.5, 1.5), data((n,), dtype, 73)
    cases = [
        (lambda x, w: lanefold.rms_norm(x, w, 1e-5), lambda x, w: F.rms_norm(x, (n,), w, 1e-5), (x, w)),
        (lambda x: lanefold.rms_norm(x), lambda x: F.rms_norm(x, (n,), None, 1e-6), (x,)),
        (
            lambda x, w, b: lanefold.layer_norm(x, w, b, 1e-3),
            lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-3),
            (x, w, b),
        ),
        (lambda x, b: lanefold.layer_norm(x, None, b), lambda x, b: F.layer_norm(x, (n,), None, b), (x, b)),
        (
            lambda x, r, w, b: lanefold.add_layer_norm(x, r, w, b),
            lambda x, r, w, b: (F.layer_norm(x + r, (n,), w, b), x + r),
            (x, r, w, b),
        ),
        (lambda x: lanefold.softmax(x), lambda x: F.softmax(x, -1), (x,)),
    ]
    for k, (mine, ref, args) in enumerate(cases):
        got = _grads(mine, args)
        want = _torch_grads(ref, args, dtype)
        for i, (g, e) in enumerate(zip(got, want)):
            assert g.dtype == dtype
            # A one-element row's norm gradients are ~eps times their
            # terms: judged absolutely there.
            err = (g.double() - e).abs().max().item() if n == 1 else rel_err(g, e)
            assert err < tol, (k, i, err)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_backward_matches_torch_and_zeroes_ignored_rows(dtype):
    tol = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}[dtype]
    x = data((6, 300), dtype, 80, -6.0, 6.0)
    t = torch.tensor([3, -100, 299, 0, -100, 17])
    for reduction in ["mean", "sum", "none"]:
        got = _grads(lambda x: lanefold.cross_entropy(x, t, reduction=reduction), (x,))[0]
        want = _grads(lambda x: F.cross_entropy(x.double(), t, reduction=reduction), (x,))[0]
        assert rel_err(got, want) < tol, reduction
        assert (got[1] == 0).all() and (got[4] == 0).all()
    # All ignored: no gradient anywhere, and no NaN from 0/0.
    x = data((3, 8), dtype, 81).requires_grad_()
    lanefold.cross_entropy(x, torch.full((3,), -100), reduction="sum").backward()
    assert (x.grad == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 300), (2, 3, 1000), (4, 1)])
def test_cross_entropy_with_grad_matches_torch_for_mean_and_sum(dtype, shape):
    """Mean and sum write dlogits in the forward: torch's gradients in
    float64 with ignored rows (a custom ignore_index too), scaled by an
    incoming gradient other than 1, and the loss of the path without it."""
    tol = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}[dtype]
    n = shape[-1]
    x = data(shape, dtype, 82, -6.0, 6.0)
    g = torch.Generator().manual_seed(83)
    t = torch.randint(0, n, shape[:-1], generator=g)
    t.view(-1)[1] = -100
    for reduction in ["mean", "sum"]:
        for ignore_index, scale in [(-100, 1.0), (7, 2.5)]:
            tt = torch.where(t == -100, torch.full_like(t, ignore_index), t)
            a = x.clone().requires_grad_()
            loss = lanefold.cross_entropy(a, tt, ignore_index=ignore_index, reduction=reduction)
            (loss * scale).backward()
            x64 = x.double().requires_grad_()
            want = F.cross_entropy(x64.reshape(-1, n), tt.reshape(-1), ignore_index=ignore_index, reduction=reduction)
            (want * scale).backward()
            assert a.grad.dtype == dtype and a.grad.shape == x.shape
            assert rel_err(a.grad, x64.grad) < tol, (reduction, ignore_index)
            assert (a.grad.reshape(-1, n)[1] == 0).all()
            plain = lanefold.cross_entropy(x, tt, ignore_index=ignore_index, reduction=reduction)
            assert rel_err(loss.detach(), want.detach()) < tol
            assert rel_err(loss.detach(), plain) < tol


def test_cross_entropy_with_grad_saves_only_dlogits_and_reads_no_logits_in_backward(monkeypatch):
    """The fused path is taken for mean and sum with grad: one launch in the
    forward, none in the backward, dlogits the only saved tensor, and the
    gradient is that very buffer (scaled in place, not copied). 'none', no
    grad and no_grad take the plain forward."""
    seen = _recording(monkeypatch)
    x = data((5, 33), torch.float32, 84).requires_grad_()
    t = torch.tensor([1, -100, 32, 0, 5])
    for reduction in ["mean", "sum"]:
        x.grad = None
        seen.clear()
        loss = lanefold.cross_entropy(x, t, reduction=reduction)
        assert seen == ["cross_entropy_with_grad"]
        assert type(loss.grad_fn).__name__ == "_CrossEntropyWithGradBackward"
        (saved,) = loss.grad_fn.saved_tensors
        assert saved.shape == x.shape and saved.data_ptr() != x.data_ptr()
        buffer = saved.data_ptr()
        del saved
        (loss * 3).backward()
        assert seen == ["cross_entropy_with_grad"], seen
        assert x.grad.data_ptr() == buffer
    # The saved dlogits are scaled in place: a second backward is refused.
    loss = lanefold.cross_entropy(x, t)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()
    seen.clear()
    lanefold.cross_entropy(x.detach(), t)
    with torch.no_grad():
        lanefold.cross_entropy(x, t, reduction="sum")
    assert seen == ["cross_entropy"] * 2, seen
    # 'none' with grad: the forward that saves lse for the backward.
    seen.clear()
    lanefold.cross_entropy(x, t, reduction="none")
    assert seen == ["cross_entropy_with_lse"], seen


def test_cross_entropy_with_grad_is_turned_off_by_the_environment(monkeypatch):
    """LANEFOLD_CE_GRAD_IN_FORWARD=0 keeps the logits and the saved lse for
    the backward op: the same gradient, from cross_entropy_with_lse then
    cross_entropy_backward."""
    x = data((6, 40), torch.float32, 85).requires_grad_()
    t = torch.tensor([1, -100, 39, 0, 5, 7])
    lanefold.cross_entropy(x, t).backward()
    fused = x.grad.clone()
    monkeypatch.setenv("LANEFOLD_CE_GRAD_IN_FORWARD", "0")
    seen = _recording(monkeypatch)
    x.grad = None
    lanefold.cross_entropy(x, t).backward()
    assert seen == ["cross_entropy_with_lse", "cross_entropy_backward"], seen
    assert rel_err(x.grad, fused) < 1e-6


def test_column_gradients_are_deterministic_and_batch_split_invariant():
    """dweight and dbias are lanefold's fixed-order column sums: the same
    bits on every call, and 64 rows at once give the bits of two calls of
    32 (one row group of the first pass each) added."""
    x = data((64, 129), torch.float32, 90)
    w = data((129,), torch.float32, 91, 0.5, 1.5)
    b = data((129,), torch.float32, 92)
    gy = data((64, 129), torch.float32, 93)

    def grads(rows):
        ww, bb = w.clone().requires_grad_(), b.clone().requires_grad_()
        lanefold.layer_norm(x[rows], ww, bb).backward(gy[rows])
        return ww.grad, bb.grad

    whole = grads(slice(0, 64))
    assert all(torch.equal(a, c) for a, c in zip(whole, grads(slice(0, 64))))
    first, second = grads(slice(0, 32)), grads(slice(32, 64))
    for a, p, q in zip(whole, first, second):
        assert torch.equal(a, p + q)
    want = F.layer_norm(x.double(), (129,)).mul(gy.double()).sum(0)
    assert rel_err(whole[0], want) < 1e-5


def test_backward_custom_ops_pass_torch_library_opcheck():
    x = data((3, 40), torch.float32, 94)
    dy = data((3, 40), torch.float32, 95)
    w = torch.ones(40)
    t = torch.tensor([1, -100, 39])
    cases = [
        (torch.ops.lanefold.rms_norm_backward.default, (dy, x, w, 1e-6)),
        (torch.ops.lanefold.layer_norm_backward.default, (dy, x, None, 1e-5)),
        (torch.ops.lanefold.add_layer_norm_backward.default, (dy, dy, x, w, 1e-5)),
        (torch.ops.lanefold.softmax_backward.default, (dy, x.softmax(-1))),
        (torch.ops.lanefold.cross_entropy_backward.default, (dy[:, 0].contiguous(), x, t, torch.logsumexp(x, -1))),
        (torch.ops.lanefold.cross_entropy_backward_recompute.default, (dy[:, 0].contiguous(), x, t)),
        (torch.ops.lanefold.cross_entropy_with_grad.default, (x, t, dy[:, 0].contiguous())),
        (torch.ops.lanefold.norm_column_grads.default, (x, dy, 1e-5, True)),
        (torch.ops.lanefold.norm_column_grads.default, (x, dy, 1e-6, False)),
    ]
    for op, args in cases:
        torch.library.opcheck(
            op,
            args,
            test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static", "test_aot_dispatch_dynamic"),
        )


def test_backward_plans_are_described():
    x = data((64, 4096), torch.bfloat16, 96)
    for op in [
        "rmsnorm_backward",
        "layernorm_backward",
        "softmax_backward",
        "cross_entropy_backward",
        "cross_entropy_with_grad",
    ]:
        assert "W=" in lanefold.describe_plan(op, x)
    assert lanefold._ops._C.COLUMN_GROUP_ROWS == 32


def _logits(x):
    """Logits that are not a leaf, as a model's head makes them: a matmul's
    output, whose backward reads its inputs, not the logits."""
    h = x.detach().clone().requires_grad_()
    eye = torch.eye(x.shape[-1], dtype=x.dtype)
    return h, h @ eye


@pytest.mark.parametrize("dtype", DTYPES)
def test_inplace_backward_gives_torchs_gradients_in_the_logits_own_storage(monkeypatch, dtype):
    """inplace_backward=True: the gradient of torch's float64 cross entropy
    (mean and sum, ignored rows, a custom ignore_index, an incoming
    gradient other than 1), bit for bit the out-of-place path's; the logits
    hold the unscaled gradient after the forward; the saved tensor and the
    gradient are the logits' own storage (no logits-sized allocation)."""
    tol = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}[dtype]
    seen = _recording(monkeypatch)
    x = data((2, 3, 300), dtype, 120, -6.0, 6.0)
    t = torch.randint(0, 300, (2, 3), generator=torch.Generator().manual_seed(121))
    t[0, 1] = 7
    for reduction in ["mean", "sum"]:
        # The out-of-place path's dlogits and gradient, for the bits.
        a, la = _logits(x)
        loss_a = lanefold.cross_entropy(la, t, ignore_index=7, reduction=reduction)
        (unscaled,) = loss_a.grad_fn.saved_tensors
        unscaled = unscaled.clone()
        (loss_a * 2.5).backward()
        seen.clear()
        h, logits = _logits(x)
        loss = lanefold.cross_entropy(logits, t, ignore_index=7, reduction=reduction, inplace_backward=True)
        assert seen == ["cross_entropy_with_grad"]
        assert torch.equal(loss, loss_a)
        assert torch.equal(logits.detach().reshape(-1, 300), unscaled)
        (saved,) = loss.grad_fn.saved_tensors
        assert saved.data_ptr() == logits.data_ptr()
        grads = []
        logits.register_hook(lambda g: grads.append(g))
        (loss * 2.5).backward()
        assert seen == ["cross_entropy_with_grad"], seen
        assert grads[0].data_ptr() == logits.data_ptr()
        assert torch.equal(h.grad, a.grad)
        x64 = x.double().requires_grad_()
        want = F.cross_entropy(x64.reshape(-1, 300), t.reshape(-1), ignore_index=7, reduction=reduction)
        (want * 2.5).backward()
        assert rel_err(h.grad, x64.grad) < tol, reduction
        assert (h.grad[0, 1] == 0).all()


def test_inplace_backward_refuses_what_autograd_cannot_allow():
    """A leaf that requires grad, 'none', non-contiguous logits: clear
    exceptions, the logits untouched. Without grad the logits stay as they
    are. A producer that saved the logits sees its version check fail."""
    x = data((4, 50), torch.float32, 122)
    t = torch.tensor([1, 2, -100, 49])
    leaf = x.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="leaf"):
        lanefold.cross_entropy(leaf, t, inplace_backward=True)
    _, logits = _logits(x)
    with pytest.raises(ValueError, match="'mean' or 'sum'"):
        lanefold.cross_entropy(logits, t, reduction="none", inplace_backward=True)
    _, wide = _logits(data((50, 4), torch.float32, 123))
    with pytest.raises(ValueError, match="contiguous"):
        lanefold.cross_entropy(wide.t(), t, inplace_backward=True)
    assert torch.equal(logits.detach(), x) and torch.equal(leaf.detach(), x)
    with torch.no_grad():
        plain = x.clone()
        lanefold.cross_entropy(plain, t, inplace_backward=True)
        assert torch.equal(plain, x)
    h = x.clone().requires_grad_()
    squashed = torch.tanh(h)
    loss = lanefold.cross_entropy(squashed, t, inplace_backward=True)
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()


@pytest.mark.parametrize("dtype", DTYPES)
def test_saved_lse_backward_gives_torchs_gradients_and_reads_the_logits_once(monkeypatch, dtype):
    """reduction='none' with grad (and mean/sum with the forward-written
    gradient turned off): the forward writes each row's lse (float32) and
    saves it with the logits; the backward is one cross_entropy_backward
    launch over them, giving torch's float64 gradients (ignored rows 0, a
    custom ignore_index), and the recomputing backward's within tolerance."""
    tol = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}[dtype]
    seen = _recording(monkeypatch)
    monkeypatch.setenv("LANEFOLD_CE_GRAD_IN_FORWARD", "0")
    x = data((2, 3, 300), dtype, 130, -6.0, 6.0)
    t = torch.tensor([[3, -100, 299], [0, 7, 17]])
    g = data((2, 3), dtype, 131)
    for reduction, ignore_index in [("none", -100), ("mean", -100), ("sum", 7)]:
        tt = torch.where(t == -100, ignore_index, t)
        seen.clear()
        h = x.clone().requires_grad_()
        loss = lanefold.cross_entropy(h, tt, ignore_index=ignore_index, reduction=reduction)
        assert seen == ["cross_entropy_with_lse"], seen
        if reduction == "none":
            # Under the view back to the batch's shape: the op's node.
            node = loss.grad_fn.next_functions[0][0]
            logits, target, lse = node.saved_tensors
            assert logits.shape == (6, 300)
            assert lse.dtype == torch.float32 and lse.shape == (6,)
            want_lse = torch.logsumexp(x.double().reshape(6, 300), -1)
            assert (lse.double() - want_lse).abs().max() < 1e-5 * want_lse.abs().max()
        loss.backward(g if reduction == "none" else None)
        assert seen == ["cross_entropy_with_lse", "cross_entropy_backward"], seen
        e = x.double().requires_grad_()
        want = F.cross_entropy(e.reshape(6, 300), tt.reshape(6), ignore_index=ignore_index, reduction=reduction)
        want.backward(g.double().reshape(6) if reduction == "none" else None)
        assert h.grad.dtype == dtype
        assert rel_err(h.grad, e.grad) < tol, reduction
        assert (h.grad[tt == ignore_index] == 0).all()
    # The same gradient as the recomputing backward op, on the same inputs.
    rows = x.reshape(6, 300)
    tt = t.reshape(6)
    dl = g.reshape(6).contiguous()
    _, lse = torch.ops.lanefold.cross_entropy_rows_lse(rows, tt)
    a = torch.ops.lanefold.cross_entropy_backward(dl, rows, tt, lse)
    b = torch.ops.lanefold.cross_entropy_backward_recompute(dl, rows, tt)
    assert rel_err(a, b.double()) < tol
    # A wrong lse gives a wrong gradient: the op reads it.
    c = torch.ops.lanefold.cross_entropy_backward(dl, rows, tt, lse + 1.0)
    assert not torch.allclose(c, b, rtol=0.1, atol=0.0)


def test_saved_lse_backward_of_masked_rows_is_torchs():
    """Masked logits (-inf): a partly masked row's gradient is 0 at its
    masked classes; a fully masked row has lse = -inf in torch and gives NaN
    everywhere, its target ignored or not, as torch's backward does."""
    inf = float("inf")
    x = torch.tensor(
        [[-inf, 0.5, 1.0, -inf], [-inf] * 4, [-inf] * 4, [0.0, 1.0, 2.0, 3.0]], dtype=torch.float32
    )
    t = torch.tensor([2, 1, -100, 0])
    g = torch.tensor([0.5, 1.0, 1.0, 2.0])
    h = x.clone().requires_grad_()
    lanefold.cross_entropy(h, t, reduction="none").backward(g)
    e = x.clone().requires_grad_()
    F.cross_entropy(e, t, reduction="none").backward(g)
    torch.testing.assert_close(h.grad, e.grad, equal_nan=True)
    assert h.grad[1:3].isnan().all() and e.grad[1:3].isnan().all()
    assert (h.grad[0, [0, 3]] == 0).all()
    # torch's saved statistic for the masked row, given to the op: NaN too.
    lse = torch.logsumexp(x, -1)
    assert lse[1] == -inf
    dx = torch.ops.lanefold.cross_entropy_backward(g, x, t, lse)
    torch.testing.assert_close(dx, e.grad, equal_nan=True)


def test_saved_lse_path_compiles_with_its_gradient():
    """torch.compile(fullgraph=True) of a per-row loss with grad: the
    lse-saving forward and the backward from it, through their fake
    kernels, give eager's gradient."""
    why = _compile_works()
    if why:
        pytest.skip(why)
    torch._dynamo.reset()
    t = torch.tensor([1, -100, 39, 5])
    g = data((4,), torch.float32, 133)
    w = data((40, 40), torch.float32, 134).requires_grad_()

    def step(h, w):
        return (lanefold.cross_entropy(h @ w, t, reduction="none") * g).sum()

    x = data((4, 40), torch.float32, 135)
    assert_compiled_grads_match(step, x, w)


def assert_compiled_grads_match(step, x, w):
    """`step(h, w)` under torch.compile(fullgraph=True) and eagerly, from
    the same x and w: the same gradients of both."""
    h = x.clone().requires_grad_()
    torch.compile(step, fullgraph=True)(h, w).backward()
    he, we = x.clone().requires_grad_(), w.detach().clone().requires_grad_()
    step(he, we).backward()
    torch.testing.assert_close(h.grad, he.grad)
    torch.testing.assert_close(w.grad, we.grad)


def test_inplace_cross_entropy_op_passes_opcheck_and_compiles():
    x = data((3, 40), torch.float32, 124)
    t = torch.tensor([1, -100, 39])
    dloss = torch.full((3,), 0.5)
    torch.library.opcheck(
        torch.ops.lanefold.cross_entropy_with_grad_.default,
        (x.clone(), t, dloss),
        test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static", "test_aot_dispatch_dynamic"),
    )
    why = _compile_works()
    if why:
        pytest.skip(why)
    torch._dynamo.reset()
    w = data((40, 40), torch.float32, 125).requires_grad_()

    def step(h, w):
        return lanefold.cross_entropy(h @ w, t, inplace_backward=True)

    assert_compiled_grads_match(step, x, w)


def test_the_plan_for_a_device_is_its_tuning_cache_winner(tmp_path, monkeypatch):
    # What `lanefold tune` or `run --autotune` recorded for this device and
    # problem is the plan a CUDA call runs (the package used to plan
    # automatically whatever the user had tuned).
    from lanefold import _lanefold as C

    device = "NVIDIA H200 cc9.0"
    args = ("rmsnorm", "bf16", 4096, 4096, True, False, True)
    auto = C.describe_plan(*args)
    workers = 256 if auto.startswith("W=128 ") else 128
    path = tmp_path / "tuning.json"

    def record(w):
        request = {"workers": w, "pack": 8, "unroll": 1, "rows_per_group": 0, "order": None,
                   "residency": "auto", "mapper": "model"}
        key = {"device": device, "op": "rmsnorm", "dtype": "bf16", "rows": "4096", "n": 4096}
        entry = {"key": key, "request": request, "describe": "", "objective": "gpu", "p50_us": 1.0,
                 "source_sha256": "", "shape": "4096x4096", "batch_invariant": False,
                 "recorded_utc": ""}
        path.write_text(json.dumps({"schema": "lanefold-tuning/1",
                                    "entries": {f"{device}|rmsnorm|bf16|4096|4096": entry}}))

    record(workers)
    monkeypatch.setenv("LANEFOLD_TUNING_CACHE", str(path))
    assert C.describe_plan(*args, device_key=device).startswith(f"W={workers} V=8 U=1 ")
    assert C.describe_plan(*args, device_key="NVIDIA H100 cc9.0") == auto
    assert C.describe_plan(*args) == auto  # no device named: automatic
    record(3)  # a winner that does not plan here: the automatic plan
    assert C.describe_plan(*args, device_key=device) == auto
