"""lanefold on CUDA tensors (skipped without CUDA): every op and dtype on
odd shapes against torch in float64, torch's current (non-default)
stream, CUDA graph capture, torch.compile(fullgraph=True), devices."""

import gc

import pytest
import torch
import torch.nn.functional as F

import lanefold

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}
# Odd lengths (tails, scalar packs), a leading-dims batch, a typical
# hidden size, and a row long enough for a cluster of groups.
SHAPES = [(1, 127), (17, 257), (3, 5, 1000), (64, 4096), (4, 131072)]


def rel_err(got, want) -> float:
    got, want = got.double().cpu(), want.double().cpu()
    den = want.norm().item()
    num = (got - want).norm().item()
    return num / den if den > 0 else num


def data(shape, dtype, seed=0, lo=-2.0, hi=2.0, device="cuda"):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.rand(shape, generator=g, device=device, dtype=torch.float32) * (hi - lo) + lo
    return x.to(dtype)


def d(t):
    return None if t is None else t.double()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_every_op_against_float64(dtype, shape):
    n = shape[-1]
    x = data(shape, dtype, 1)
    r = data(shape, dtype, 2)
    w = data((n,), dtype, 3, 0.5, 1.5)
    b = data((n,), dtype, 4)
    tol = TOL[dtype]
    for weight in [w, None]:
        y = lanefold.rms_norm(x, weight, eps=1e-6)
        assert y.device == x.device and y.dtype == dtype and y.shape == x.shape
        assert rel_err(y, F.rms_norm(x.double(), (n,), d(weight), 1e-6)) < tol
    for weight, bias in [(w, b), (None, None), (w, None)]:
        y = lanefold.layer_norm(x, weight, bias, eps=1e-5)
        assert rel_err(y, F.layer_norm(x.double(), (n,), d(weight), d(bias), 1e-5)) < tol
    y = lanefold.layer_norm(x, w, b, eps=0.25)  # a non-default eps reaches the kernel
    assert rel_err(y, F.layer_norm(x.double(), (n,), d(w), d(b), 0.25)) < tol
    y, h = lanefold.add_layer_norm(x, r, w, b)
    assert torch.equal(h, x + r)
    assert rel_err(y, F.layer_norm(h.double(), (n,), d(w), d(b), 1e-5)) < tol
    xs = data(shape, dtype, 5, -8.0, 8.0)
    assert rel_err(lanefold.softmax(xs), F.softmax(xs.double(), -1)) < tol
    xp = data(shape, dtype, 6, 0.0, 0.5)  # f16 holds the sum of 131072 of these
    s = lanefold.sum(xp)
    assert s.shape == xp.shape[:-1]
    assert rel_err(s, xp.double().sum(-1)) < tol
    g = torch.Generator(device="cuda").manual_seed(7)
    target = torch.randint(0, n, shape[:-1], generator=g, device="cuda")
    target.view(-1)[0] = -100
    for reduction in ["none", "sum", "mean"]:
        got = lanefold.cross_entropy(xs, target, reduction=reduction)
        want = F.cross_entropy(xs.double().reshape(-1, n), target.reshape(-1), reduction=reduction)
        if reduction == "none":
            want = want.reshape(shape[:-1])
        if want.numel() == 1 and want.isnan().item():
            assert got.isnan().item()
            continue
        assert rel_err(got, want) < tol, reduction


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_callers_eps_reaches_the_cold_path(dtype):
    """Rows offset far from zero take layernorm's cold path; it and the
    plain rows beside them use the caller's eps (the default once reached
    neither after the runtime planned the cold path again)."""
    n = 1000
    x = data((8, n), dtype, 1)
    x[4:] = (4096.0 + x[4:].float() * 1e-2).to(dtype)
    for eps in [0.25, 1e-5]:
        y = lanefold.layer_norm(x, None, None, eps=eps)
        want = F.layer_norm(x.double(), (n,), None, None, eps)
        assert rel_err(y, want) < TOL[dtype], eps
        y = lanefold.rms_norm(x, None, eps=eps)
        assert rel_err(y, F.rms_norm(x.double(), (n,), None, eps)) < TOL[dtype], eps


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [1001, 1002])
def test_norms_on_rows_off_four_elements(dtype, n):
    """Rows of no multiple of 4 elements, as many as SMs and more: the
    norms read them in aligned packs (each row's packs shifted, weight and
    bias gcd(n, V) elements an access: one on odd rows, two on 1002), and
    rows that overflow or sit far from zero take the cold path in that
    shifted layout."""
    rows = 300
    x = data((rows, n), dtype, 1)
    x[7] = (x[7].float() * 1e30).to(dtype)  # its sum of squares overflows f32
    x[11:14] = (4096.0 + x[11:14].float() * 1e-2).to(dtype)
    r = data((rows, n), dtype, 2)
    w = data((n,), dtype, 3, 0.5, 1.5)
    b = data((n,), dtype, 4)
    tol = TOL[dtype]
    plan = lanefold.describe_plan("rmsnorm", x)
    assert "aligned-packs" in plan, plan
    y = lanefold.rms_norm(x, w, eps=1e-6)
    assert rel_err(y, F.rms_norm(x.double(), (n,), d(w), 1e-6)) < tol
    y = lanefold.layer_norm(x, w, b, eps=1e-5)
    assert rel_err(y, F.layer_norm(x.double(), (n,), d(w), d(b), 1e-5)) < tol
    y, h = lanefold.add_layer_norm(x, r, w, b)
    assert torch.equal(h, x + r)
    assert rel_err(y, F.layer_norm(h.double(), (n,), d(w), d(b), 1e-5)) < tol


def test_unaligned_and_strided_inputs():
    flat = data((1 + 8 * 300,), torch.float16, 8)
    x = flat[1:].view(8, 300)  # contiguous, 2 bytes past an aligned start
    assert x.data_ptr() % 16 != 0
    assert rel_err(lanefold.layer_norm(x), F.layer_norm(x.double(), (300,))) < 4e-3
    base = data((16, 520), torch.float32, 9)
    xs = base[:, 3:515]
    assert not xs.is_contiguous()
    assert rel_err(lanefold.softmax(xs), F.softmax(xs.double(), -1)) < 2e-5


def test_runs_on_the_current_non_default_stream():
    s = torch.cuda.Stream()
    x = data((256, 4096), torch.bfloat16, 10)
    w = data((4096,), torch.bfloat16, 11, 0.5, 1.5)
    lanefold.rms_norm(x, w)  # compiled outside the timed part
    torch.cuda.synchronize()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)  # keep the stream busy
        x2 = x * 2  # produced on s: the kernel must run after it
        y = lanefold.rms_norm(x2, w)
        assert not s.query(), "the launch did not go on the current stream"
    s.synchronize()
    assert rel_err(y, F.rms_norm((x.double() * 2), (4096,), w.double(), 1e-6)) < 2e-2


def test_cuda_graph_capture_and_replay():
    n = 1000
    static_x = data((33, n), torch.float32, 12)
    static_r = data((33, n), torch.float32, 13)
    w, b = data((n,), torch.float32, 14, 0.5, 1.5), data((n,), torch.float32, 15)
    target = torch.randint(0, n, (33,), device="cuda")

    def step():
        y, h = lanefold.add_layer_norm(static_x, static_r, w, b)
        z = lanefold.rms_norm(y, w)
        return lanefold.softmax(z), lanefold.sum(h), lanefold.cross_entropy(static_x, target, reduction="none")

    # Warm up on a side stream (compiles and loads every kernel), as
    # torch's CUDA graph docs ask.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step()
    for seed in [16, 17]:
        static_x.copy_(data((33, n), torch.float32, seed))
        static_r.copy_(data((33, n), torch.float32, seed + 100))
        graph.replay()
        torch.cuda.synchronize()
        h = static_x.double() + static_r.double()
        y = F.layer_norm(h, (n,), w.double(), b.double(), 1e-5)
        z = F.rms_norm(y, (n,), w.double(), 1e-6)
        assert rel_err(outs[0], F.softmax(z, -1)) < 1e-4
        assert rel_err(outs[1], h.sum(-1)) < 1e-5
        want = F.cross_entropy(static_x.double(), target, reduction="none")
        assert rel_err(outs[2], want) < 1e-5


def test_torch_compile_fullgraph():
    torch._dynamo.reset()

    def f(x, r, w, b, logits, target):
        y, h = lanefold.add_layer_norm(x, r, w, b)
        z = lanefold.rms_norm(y * 0.5, w)
        return lanefold.softmax(z) + 1, lanefold.sum(h), lanefold.cross_entropy(logits, target)

    x, r = data((8, 4096), torch.bfloat16, 18), data((8, 4096), torch.bfloat16, 19)
    w, b = data((4096,), torch.bfloat16, 20, 0.5, 1.5), data((4096,), torch.bfloat16, 21)
    logits = data((8, 4096), torch.bfloat16, 22)
    target = torch.randint(0, 4096, (8,), device="cuda")
    want = f(x, r, w, b, logits, target)
    got = torch.compile(f, fullgraph=True)(x, r, w, b, logits, target)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)
    # With CUDA graphs under torch.compile.
    torch._dynamo.reset()
    cg = torch.compile(f, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):
        got = cg(x, r, w, b, logits, target)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)


def test_swapped_model_compiles_on_cuda():
    torch._dynamo.reset()
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 256), torch.nn.LayerNorm(256), torch.nn.RMSNorm(256)
    ).cuda().half().eval()
    x = data((4, 7, 256), torch.float16, 23)
    with torch.no_grad():
        want = model(x)
        lanefold.nn.swap_norms(model)
        assert isinstance(model[1], lanefold.nn.LayerNorm)
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True)(x)
    assert rel_err(eager, want) < 4e-3
    torch.testing.assert_close(compiled, eager)


def test_mismatched_devices_raise():
    x = data((4, 64), torch.float32, 24)
    with pytest.raises(RuntimeError, match="same device"):
        lanefold.rms_norm(x, torch.ones(64))
    with pytest.raises(RuntimeError, match="same device"):
        lanefold.layer_norm(x, torch.ones(64, device="cuda"), torch.zeros(64))
    with pytest.raises(RuntimeError, match="same device"):
        lanefold.add_layer_norm(x, x.cpu())
    with pytest.raises(RuntimeError, match="same device"):
        lanefold.cross_entropy(x, torch.zeros(4, dtype=torch.long))
    with pytest.raises(RuntimeError, match="same device"):
        lanefold.rms_norm(x.cpu(), torch.ones(64, device="cuda"))
    if torch.cuda.device_count() > 1:
        with pytest.raises(RuntimeError, match="same device"):
            lanefold.rms_norm(x, torch.ones(64, device="cuda:1"))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="one GPU")
def test_runs_on_the_tensors_own_device():
    x = data((8, 512), torch.float32, 25, device="cuda:1")
    with torch.cuda.device(0):
        y = lanefold.softmax(x)
    assert y.device == x.device
    assert rel_err(y, F.softmax(x.double(), -1)) < 2e-5


def test_no_memory_is_freed_or_leaked_by_lanefold():
    x = data((64, 4096), torch.float32, 26)
    w = torch.ones(4096, device="cuda")
    lanefold.rms_norm(x, w)
    torch.cuda.synchronize()
    gc.collect()
    before = torch.cuda.memory_allocated()
    for _ in range(50):
        y = lanefold.rms_norm(x, w)
    del y
    torch.cuda.synchronize()
    gc.collect()
    assert torch.cuda.memory_allocated() == before
    # Inputs are intact after many launches (nothing freed them).
    assert torch.isfinite(x).all().item() and torch.equal(w, torch.ones_like(w))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gradients_match_torch(dtype):
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    n = 1000
    x, r = data((3, 5, n), dtype, 27), data((3, 5, n), dtype, 28)
    w, b = data((n,), dtype, 29, 0.5, 1.5), data((n,), dtype, 30)
    t = torch.randint(0, n, (3, 5), device="cuda")
    t[0, 0] = -100
    cases = [
        (lambda x, w: lanefold.rms_norm(x, w, 1e-5), lambda x, w: F.rms_norm(x, (n,), w, 1e-5), (x, w)),
        (
            lambda x, w, b: lanefold.layer_norm(x, w, b),
            lambda x, w, b: F.layer_norm(x, (n,), w, b),
            (x, w, b),
        ),
        (
            lambda x, r, w, b: lanefold.add_layer_norm(x, r, w, b),
            lambda x, r, w, b: (F.layer_norm(x + r, (n,), w, b), x + r),
            (x, r, w, b),
        ),
        (lambda x: lanefold.softmax(x), lambda x: F.softmax(x, -1), (x,)),
        (lambda x: lanefold.sum(x), lambda x: x.sum(-1), (x,)),
        (
            lambda x: lanefold.cross_entropy(x, t),
            lambda x: F.cross_entropy(x.reshape(-1, n), t.reshape(-1)),
            (x,),
        ),
    ]

    def grads(f, args):
        leaves = [a.detach().clone().requires_grad_() for a in args]
        out = f(*leaves)
        outs = out if isinstance(out, tuple) else (out,)
        g = torch.Generator(device="cuda").manual_seed(99)
        loss = 0
        for o in outs:
            loss = loss + (o.double() * torch.randn(o.shape, generator=g, device="cuda", dtype=torch.float64)).sum()
        return torch.autograd.grad(loss, leaves)

    for mine, ref, args in cases:
        got = grads(mine, args)
        want = grads(lambda *a: ref(*[v.float() for v in a]), args)
        for g, e in zip(got, want):
            assert g.dtype == dtype
            assert rel_err(g, e) < tol


# ---------------------------------------------------------------- backward


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_backward_kernels_against_float64(dtype, shape, monkeypatch):
    """dx of every op by lanefold's backward kernels (recorded), against
    torch's autograd in float64, on odd, typical and cluster-long rows."""
    import lanefold._ops as ops

    seen = []
    real = ops._launch
    monkeypatch.setattr(ops, "_launch", lambda op, *a, **k: (seen.append(op), real(op, *a, **k))[1])
    n = shape[-1]
    tol = TOL[dtype]
    x, r = data(shape, dtype, 31), data(shape, dtype, 32)
    w, b = data((n,), dtype, 33, 0.5, 1.5), data((n,), dtype, 34)
    gy = data(shape, dtype, 35)
    rows = x.numel() // n
    t = torch.randint(0, n, (rows,), device="cuda")
    t[0] = -100
    dl = data((rows,), dtype, 36)

    def dx(f, ref, *args):
        a = [v.detach().clone().requires_grad_() for v in args]
        (got,) = torch.autograd.grad(f(*a), a[:1], gy)
        a64 = [v.detach().double().requires_grad_() for v in args]
        (want,) = torch.autograd.grad(ref(*a64), a64[:1], gy.double())
        assert got.dtype == dtype and got.shape == x.shape
        return rel_err(got, want)

    assert dx(lambda x, w: lanefold.rms_norm(x, w), lambda x, w: F.rms_norm(x, (n,), w, 1e-6), x, w) < tol
    assert dx(lambda x: lanefold.rms_norm(x), lambda x: F.rms_norm(x, (n,), None, 1e-6), x) < tol
    assert dx(lambda x, w: lanefold.layer_norm(x, w, b), lambda x, w: F.layer_norm(x, (n,), w, b.double()), x, w) < tol
    assert dx(lambda x: lanefold.layer_norm(x), lambda x: F.layer_norm(x, (n,)), x) < tol
    h = x + r
    assert (
        dx(
            lambda h: lanefold.add_layer_norm(h, torch.zeros_like(h), w, b)[0],
            lambda h: F.layer_norm(h, (n,), w.double(), b.double()),
            h,
        )
        < tol
    )
    assert dx(lambda x: lanefold.softmax(x), lambda x: F.softmax(x, -1), x) < tol
    # Cross entropy per row: dlogits = (softmax - onehot) * dloss, 0 where ignored.
    xs = data((rows, n), dtype, 37, -8.0, 8.0).requires_grad_()
    (got,) = torch.autograd.grad(lanefold.cross_entropy(xs, t, reduction="none"), xs, dl)
    x64 = xs.detach().double().requires_grad_()
    (want,) = torch.autograd.grad(F.cross_entropy(x64, t, reduction="none"), x64, dl.double())
    assert rel_err(got, want) < tol
    assert (got[0] == 0).all()
    for op in ["rmsnorm", "layernorm", "residual_layernorm", "softmax", "cross_entropy"]:
        assert op + "_backward" in seen, (op, seen)


def test_backward_runs_on_the_current_stream_and_in_a_cuda_graph():
    x = data((64, 4096), torch.bfloat16, 40).requires_grad_()
    w = data((4096,), torch.bfloat16, 41, 0.5, 1.5).requires_grad_()
    gy = data((64, 4096), torch.bfloat16, 42)
    lanefold.rms_norm(x, w).backward(gy)  # compile and load outside the capture
    want = x.grad.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        x.grad = None
        lanefold.rms_norm(x, w).backward(gy)
    torch.cuda.current_stream().wait_stream(s)
    assert torch.equal(x.grad, want)
    # The backward kernel alone, captured and replayed.
    xd = x.detach()
    out = torch.ops.lanefold.rms_norm_backward(gy, xd, w.detach(), 1e-6)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out2 = torch.ops.lanefold.rms_norm_backward(gy, xd, w.detach(), 1e-6)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, out2)
    assert torch.equal(out, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (70, 300), (3, 5, 1000), (1024, 4096), (3, 131072)])
def test_column_gradients_on_cuda_equal_the_cpus_bits(dtype, shape):
    """dweight and dbias by lanefold's two column kernels: bit for bit the
    CPU's fixed-order sums, and within tolerance of float64."""
    n = shape[-1]
    x, gy = data(shape, dtype, 50), data(shape, dtype, 51)
    w, b = data((n,), dtype, 52, 0.5, 1.5), data((n,), dtype, 53)

    def grads(device, f):
        # Fresh leaves each call (`.to` on the same device would return w
        # itself, and its .grad would accumulate across calls).
        ww = w.detach().clone().to(device).requires_grad_()
        bb = b.detach().clone().to(device).requires_grad_()
        f(x.to(device), ww, bb).backward(gy.to(device))
        return ww.grad.cpu(), None if bb.grad is None else bb.grad.cpu()

    for f in [
        lambda x, w, b: lanefold.layer_norm(x, w, b),
        lambda x, w, b: lanefold.rms_norm(x, w),
        lambda x, w, b: lanefold.add_layer_norm(x, torch.zeros_like(x), w, b)[0],
    ]:
        on_gpu, on_cpu = grads("cuda", f), grads("cpu", f)
        for g, c in zip(on_gpu, on_cpu):
            assert (g is None and c is None) or torch.equal(g, c)
    x64, g64 = x.double().reshape(-1, n), gy.double().reshape(-1, n)
    want_w = (F.layer_norm(x64, (n,)) * g64).sum(0)
    dw, db = grads("cuda", lambda x, w, b: lanefold.layer_norm(x, w, b))
    assert rel_err(dw, want_w) < TOL[dtype] or n == 1
    assert rel_err(db, g64.sum(0)) < TOL[dtype]


# ------------------------------------------- cross entropy's fused gradient


def _ce_unfused(x, t, reduction):
    """cross_entropy through per-row losses: the path whose backward
    launches cross_entropy_backward from the saved lse (one more read of
    the logits)."""
    loss = lanefold.cross_entropy(x, t, reduction="none").float().sum()
    if reduction == "mean":
        loss = loss / (t != -100).sum()
    return loss.to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(17, 257), (3, 5, 1000), (64, 4096), (4, 131072)])
def test_cross_entropy_with_grad_against_float64(dtype, shape, monkeypatch):
    """Mean and sum write dlogits in the forward (one launch of
    cross_entropy_with_grad, none in the backward): torch's float64
    gradients with an ignored row, under a unit and a scaled incoming
    gradient; the loss that of the per-row path."""
    import lanefold._ops as ops

    seen = []
    real = ops._launch
    monkeypatch.setattr(ops, "_launch", lambda op, *a, **k: (seen.append(op), real(op, *a, **k))[1])
    n = shape[-1]
    tol = TOL[dtype]
    x = data(shape, dtype, 60, -8.0, 8.0)
    g = torch.Generator(device="cuda").manual_seed(61)
    t = torch.randint(0, n, shape[:-1], generator=g, device="cuda")
    t.view(-1)[0] = -100
    for reduction in ["mean", "sum"]:
        unit = None
        for scale in [1.0, 2.5]:
            seen.clear()
            a = x.clone().requires_grad_()
            loss = lanefold.cross_entropy(a, t, reduction=reduction)
            (loss * scale).backward()
            assert seen == ["cross_entropy_with_grad"], seen
            # The in-place scale: torch's mul in the storage dtype, bit for
            # bit, tails past the 16-byte packs included.
            if unit is None:
                unit = a.grad.clone()
            else:
                assert torch.equal(a.grad, unit * torch.tensor(scale, dtype=dtype, device="cuda"))
            x64 = x.double().requires_grad_()
            want = F.cross_entropy(x64.reshape(-1, n), t.reshape(-1), reduction=reduction)
            (want * scale).backward()
            assert a.grad.dtype == dtype and a.grad.shape == x.shape
            assert rel_err(a.grad, x64.grad) < tol, (reduction, scale)
            assert (a.grad.reshape(-1, n)[0] == 0).all()
            assert rel_err(loss.detach(), want.detach()) < tol
            with torch.no_grad():
                assert rel_err(loss.detach(), _ce_unfused(x, t, reduction)) < tol


def test_cross_entropy_with_grad_never_synchronizes():
    """The count of rows not ignored stays on the device: forward and
    backward run under torch's sync debug mode set to error."""
    x = data((64, 4096), torch.bfloat16, 62).requires_grad_()
    t = torch.randint(0, 4096, (64,), device="cuda")
    t[3] = -100
    for reduction in ["mean", "sum"]:
        lanefold.cross_entropy(x, t, reduction=reduction).backward()  # compile outside
    x.grad = None
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for reduction in ["mean", "sum"]:
            (lanefold.cross_entropy(x, t, reduction=reduction) * 2).backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(x.grad).all().item()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_with_grad_peak_memory_on_a_large_vocabulary(reduction):
    """Forward and backward over 4096 x 128256 bf16 logits (1 GiB), the
    incoming gradient not 1: the fused path allocates one logits-sized
    buffer (dlogits, which becomes logits.grad) and no other, and peaks no
    higher than the per-row path, whose backward allocates its dlogits
    while the forward keeps the logits."""
    rows, n = 4096, 128256
    size = rows * n * 2
    x = data((rows, n), torch.bfloat16, 63).requires_grad_()
    t = torch.randint(0, n, (rows,), device="cuda")
    t[::7] = -100

    def peak(f):
        x.grad = None
        gc.collect()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        (f(x, t, reduction) * 2).backward()
        torch.cuda.synchronize()
        grad = x.grad
        x.grad = None
        return torch.cuda.max_memory_allocated() - base, grad

    fused = lambda x, t, r: lanefold.cross_entropy(x, t, reduction=r)  # noqa: E731
    for f in [fused, _ce_unfused]:
        peak(f)  # compile and load outside the measurement
    fused_peak, fused_grad = peak(fused)
    unfused_peak, unfused_grad = peak(_ce_unfused)
    small = 64 << 20  # per-row buffers and reductions, far below one logits
    assert size <= fused_peak <= size + small, (fused_peak, size)
    assert fused_peak <= unfused_peak + small, (fused_peak, unfused_peak)
    # On the device: float64 copies of 10^9 elements on the host take long.
    diff = (fused_grad.float() - unfused_grad.float()).norm() / unfused_grad.float().norm()
    assert diff.item() < TOL[torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(17, 257), (64, 4096), (4, 131072), (8, 128256)])
def test_inplace_backward_is_the_fused_gradient_bit_for_bit(dtype, shape):
    """inplace_backward=True on CUDA: the in-place kernel's loss and
    gradient are the out-of-place fused path's bit for bit (mean and sum,
    an ignored row, a scaled incoming gradient), the gradient lies in the
    logits' own storage."""
    rows, n = shape
    x = data(shape, dtype, 64, -8.0, 8.0)
    t = torch.randint(0, n, (rows,), device="cuda", generator=torch.Generator(device="cuda").manual_seed(65))
    t[0] = -100
    eye_h = lambda: x.clone().requires_grad_()  # noqa: E731
    for reduction in ["mean", "sum"]:
        a = eye_h()
        loss_a = lanefold.cross_entropy(a, t, reduction=reduction)
        (loss_a * 2.5).backward()
        h = eye_h()
        logits = h.clone()  # not a leaf; CloneBackward passes the gradient through
        loss = lanefold.cross_entropy(logits, t, reduction=reduction, inplace_backward=True)
        (loss * 2.5).backward()
        assert torch.equal(loss, loss_a), reduction
        assert torch.equal(h.grad, a.grad), reduction
        assert torch.equal(logits.detach(), a.grad), reduction


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_inplace_backward_peak_memory_is_one_logits_buffer_lower(reduction):
    """4096 x 128256 bf16 logits (1 GiB) made before the measurement:
    forward + backward in place allocate no logits-sized buffer at all
    (Liger's peak), the fused path one."""
    rows, n = 4096, 128256
    size = rows * n * 2
    t = torch.randint(0, n, (rows,), device="cuda")
    t[::7] = -100
    src = data((rows, n), torch.bfloat16, 66)

    def peak(inplace):
        logits = src.clone().requires_grad_().clone()  # not a leaf
        gc.collect()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss = lanefold.cross_entropy(logits, t, reduction=reduction, inplace_backward=inplace)
        (grad,) = torch.autograd.grad(loss * 2, logits)
        torch.cuda.synchronize()
        assert (grad.data_ptr() == logits.data_ptr()) == inplace
        return torch.cuda.max_memory_allocated() - base

    for inplace in [False, True]:
        peak(inplace)  # compile and load outside the measurement
    small = 64 << 20
    fused, inplace = peak(False), peak(True)
    assert inplace <= small, (inplace, size)
    assert fused >= size, (fused, size)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(17, 257), (64, 4096), (8, 50257), (4, 131072)])
def test_saved_lse_backward_against_float64(dtype, shape):
    """Per-row losses with grad on CUDA: the forward saves each row's lse
    (float32, torch's logsumexp within f32), the backward from it gives
    torch's float64 gradient (an ignored row 0, a fully masked row NaN as
    torch) and the recomputing backward op's within tolerance."""
    rows, n = shape
    x = data(shape, dtype, 66, -8.0, 8.0)
    x[rows - 1] = float("-inf")
    t = torch.randint(0, n, (rows,), device="cuda", generator=torch.Generator(device="cuda").manual_seed(67))
    t[0] = -100
    g = data((rows,), dtype, 68)
    h = x.clone().requires_grad_()
    loss = lanefold.cross_entropy(h, t, reduction="none")
    _, _, lse = loss.grad_fn.next_functions[0][0].saved_tensors
    assert lse.dtype == torch.float32
    want_lse = torch.logsumexp(x.double()[:-1], -1)
    assert ((lse[:-1].double() - want_lse).abs() <= 1e-5 * want_lse.abs().clamp_min(1)).all()
    loss.backward(g)
    e = x.double().requires_grad_()
    F.cross_entropy(e, t, reduction="none").backward(g.double())
    assert h.grad[-1].isnan().all() and e.grad[-1].isnan().all()
    assert (h.grad[0] == 0).all()
    assert rel_err(h.grad[1:-1], e.grad[1:-1]) < TOL[dtype]
    b = torch.ops.lanefold.cross_entropy_backward_recompute(g, x, t)
    assert rel_err(h.grad[1:-1], b[1:-1].double()) < TOL[dtype]


def test_a_tuned_winner_is_the_plan_that_runs(tmp_path, monkeypatch):
    # The tuning cache's winner for this GPU (as `lanefold tune` or
    # `run --autotune` records it) is planned and runs correctly; another
    # GPU's winner is not taken.
    import json

    from lanefold import _lanefold as C

    major, minor = torch.cuda.get_device_capability(0)
    device = f"{torch.cuda.get_device_name(0)} cc{major}.{minor}"
    rows, n = 1000, 2500  # an odd row length, so no other test planned it
    args = ("rmsnorm", "bf16", rows, n, True, False, True)
    C.clear_caches()
    auto = C.describe_plan(*args, device=0)
    workers = 64 if not auto.startswith("W=64 ") else 128
    path = tmp_path / "tuning.json"

    def record(gpu):
        request = {"workers": workers, "pack": 4, "unroll": 1, "rows_per_group": 0, "order": None,
                   "residency": "auto", "mapper": "model"}
        key = {"device": gpu, "op": "rmsnorm", "dtype": "bf16", "rows": "1024", "n": n}
        entry = {"key": key, "request": request, "describe": "", "objective": "gpu", "p50_us": 1.0,
                 "source_sha256": "", "shape": f"{rows}x{n}", "batch_invariant": False,
                 "recorded_utc": ""}
        path.write_text(json.dumps({"schema": "lanefold-tuning/1",
                                    "entries": {f"{gpu}|rmsnorm|bf16|1024|{n}": entry}}))

    monkeypatch.setenv("LANEFOLD_TUNING_CACHE", str(path))
    record("Some Other GPU cc1.0")
    assert C.describe_plan(*args, device=0) == auto
    record(device)
    try:
        C.clear_caches()
        assert C.describe_plan(*args, device=0).startswith(f"W={workers} V=4 U=1 ")
        x = data((rows, n), torch.bfloat16, 11)
        w = data((n,), torch.bfloat16, 12, 0.5, 1.5)
        y = lanefold.rms_norm(x, w, eps=1e-6)
        assert rel_err(y, F.rms_norm(x.double(), (n,), w.double(), 1e-6)) < TOL[torch.bfloat16]
    finally:
        C.clear_caches()
