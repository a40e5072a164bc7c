"""The custom ops (namespace ``lanefold``) and the torch.nn.functional-like
functions over them.

Each op takes 2-D row-major inputs (rows x n; weight and bias of n; targets
of rows) and returns freshly allocated outputs. The public functions check
their arguments, flatten leading dims to rows, call the op and restore the
shape. On CPU tensors the op runs lanefold's exact-order CPU executor; on
CUDA tensors it launches lanefold's generated kernel on the tensor's device
and the current torch stream, reading and writing torch's memory directly.
"""

import os
from typing import Optional, Sequence, Tuple

import torch
from torch.utils import _python_dispatch as _pd

from . import _lanefold as _C

_wrapped = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", lambda t: False)

__all__ = [
    "rms_norm",
    "layer_norm",
    "add_layer_norm",
    "softmax",
    "cross_entropy",
    "sum",
]

_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
SUPPORTED_DTYPES = tuple(_DTYPES)
_IGNORE_INDEX = -100  # the sentinel the kernels know


# ----------------------------------------------------------------- launching

_nvrtc_ready = False


def _preload_nvrtc() -> None:
    """Make NVRTC loadable by name for the native module.

    lanefold-cuda opens ``libnvrtc.so.<major>`` by name through the dynamic
    loader. PyTorch's pip wheels bring NVRTC in the ``nvidia`` packages
    (``nvidia/cu13/lib``, ``nvidia/cuda_nvrtc/lib``), outside the loader's
    path; loading it once here by full path makes the later by-name open
    find the loaded library. A system NVRTC on the loader's path is used
    as it is. Best effort: a missing NVRTC is reported by the first launch.
    """
    global _nvrtc_ready
    if _nvrtc_ready:
        return
    _nvrtc_ready = True
    import ctypes
    import glob
    import os
    import sys

    if os.environ.get("LANEFOLD_NO_NVRTC_PRELOAD"):
        return
    for name in ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"):
        try:
            ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
            return
        except OSError:
            pass
    for base in sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"):
            found = sorted(glob.glob(os.path.join(base, sub, "libnvrtc.so.*")))
            # libnvrtc.so.13 (not libnvrtc.so.13.x.y alone, nor builtins)
            main = [f for f in found if os.path.basename(f).count(".") == 2]
            for lib in main or found:
                try:
                    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                    return
                except OSError:
                    continue


def _ready(t: torch.Tensor) -> torch.Tensor:
    """Contiguous, and on CUDA 16-byte aligned (the kernels' vector loads)."""
    t = t.contiguous()
    if t.is_cuda and t.data_ptr() % 16 != 0:
        t = t.clone(memory_format=torch.contiguous_format)
    return t


# (op, dtype, rows, n, eps, buffer names, device) -> prepared kernel handle
_PREPARED: dict = {}
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(device: int) -> int:
    """The current torch stream of ``device`` as a ``CUstream`` address."""
    if _raw_stream is not None:
        return _raw_stream(device)
    return torch.cuda.current_stream(device).cuda_stream


def _launch(op: str, x: torch.Tensor, eps: float, inputs, outputs, in_place: bool = False) -> None:
    """Run ``op`` over the rows of the 2-D ``x``: ``inputs`` and ``outputs``
    are (buffer name, tensor) pairs, every tensor contiguous on x's device.
    ``in_place``: the plan that writes its row output over its first row
    input (both given the same tensor)."""
    rows, n = x.shape
    dtype = _DTYPES[x.dtype]
    if x.device.type == "cpu":
        _C.cpu_run(
            op,
            dtype,
            rows,
            n,
            float(eps),
            [(name, t.data_ptr()) for name, t in inputs],
            [(name, t.data_ptr()) for name, t in outputs],
            in_place,
        )
    elif x.device.type == "cuda":
        buffers = inputs + outputs
        device = x.device.index
        names = tuple([name for name, _ in buffers])
        key = (op, dtype, rows, n, eps, names, device, in_place)
        handle = _PREPARED.get(key)
        if handle is None:
            _preload_nvrtc()
            handle = _C.cuda_prepare(op, dtype, rows, n, float(eps), device, list(names), in_place)
            _PREPARED[key] = handle
        _C.cuda_launch(handle, _stream(device), [t.data_ptr() for _, t in buffers])
    else:
        raise RuntimeError(f"lanefold: tensors on {x.device} are not supported (CPU or CUDA)")


def _columns(weight: Optional[torch.Tensor], bias: Optional[torch.Tensor]):
    cols = []
    if weight is not None:
        cols.append(("weight", _ready(weight)))
    if bias is not None:
        cols.append(("bias", _ready(bias)))
    return cols


# ------------------------------------------------------------ the custom ops


def _rms_norm_impl(x: torch.Tensor, weight: Optional[torch.Tensor], eps: float) -> torch.Tensor:
    x = _ready(x)
    y = torch.empty_like(x)
    if x.shape[0] > 0:
        _launch("rmsnorm", x, eps, [("x", x)] + _columns(weight, None), [("y", y)])
    return y


_rms_norm_op = torch.library.custom_op("lanefold::rms_norm", mutates_args=())(_rms_norm_impl)


@_rms_norm_op.register_fake
def _(x, weight, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _layer_norm_impl(
    x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], eps: float
) -> torch.Tensor:
    x = _ready(x)
    y = torch.empty_like(x)
    if x.shape[0] > 0:
        _launch("layernorm", x, eps, [("x", x)] + _columns(weight, bias), [("y", y)])
    return y


_layer_norm_op = torch.library.custom_op("lanefold::layer_norm", mutates_args=())(_layer_norm_impl)


@_layer_norm_op.register_fake
def _(x, weight, bias, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _add_layer_norm_impl(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    eps: float,
) -> Tuple[torch.Tensor, torch.Tensor]:
    x, residual = _ready(x), _ready(residual)
    y = torch.empty_like(x)
    h = torch.empty_like(x)
    if x.shape[0] > 0:
        _launch(
            "residual_layernorm",
            x,
            eps,
            [("x", x), ("residual", residual)] + _columns(weight, bias),
            [("y", y), ("h", h)],
        )
    return y, h


_add_layer_norm_op = torch.library.custom_op("lanefold::add_layer_norm", mutates_args=())(_add_layer_norm_impl)


@_add_layer_norm_op.register_fake
def _(x, residual, weight, bias, eps):
    return (
        torch.empty_like(x, memory_format=torch.contiguous_format),
        torch.empty_like(x, memory_format=torch.contiguous_format),
    )


def _softmax_impl(x: torch.Tensor) -> torch.Tensor:
    x = _ready(x)
    y = torch.empty_like(x)
    if x.shape[0] > 0:
        _launch("softmax", x, 1.0, [("x", x)], [("y", y)])
    return y


_softmax_op = torch.library.custom_op("lanefold::softmax", mutates_args=())(_softmax_impl)


@_softmax_op.register_fake
def _(x):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _sum_impl(x: torch.Tensor) -> torch.Tensor:
    x = _ready(x)
    y = x.new_empty((x.shape[0],))
    if x.shape[0] > 0:
        _launch("sum", x, 1.0, [("x", x)], [("y", y)])
    return y


_sum_op = torch.library.custom_op("lanefold::row_sum", mutates_args=())(_sum_impl)


@_sum_op.register_fake
def _(x):
    return x.new_empty((x.shape[0],))


def _cross_entropy_impl(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-row loss; rows whose target is -100 get 0."""
    logits, target = _ready(logits), _ready(target)
    loss = logits.new_empty((logits.shape[0],))
    if logits.shape[0] > 0:
        _launch("cross_entropy", logits, 1.0, [("x", logits), ("target", target)], [("loss", loss)])
    return loss


_cross_entropy_op = torch.library.custom_op("lanefold::cross_entropy_rows", mutates_args=())(_cross_entropy_impl)


@_cross_entropy_op.register_fake
def _(logits, target):
    return logits.new_empty((logits.shape[0],))


def _cross_entropy_lse_impl(logits: torch.Tensor, target: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-row loss and each row's log-sum-exp (float32, 4 bytes a row),
    saved for the backward: it then reads the logits once instead of
    twice. Only a forward whose logits need a gradient runs this one."""
    logits, target = _ready(logits), _ready(target)
    rows = logits.shape[0]
    loss = logits.new_empty((rows,))
    lse = logits.new_empty((rows,), dtype=torch.float32)
    if rows > 0:
        _launch(
            "cross_entropy_with_lse",
            logits,
            1.0,
            [("x", logits), ("target", target)],
            [("loss", loss), ("lse", lse)],
        )
    return loss, lse


_cross_entropy_lse_op = torch.library.custom_op("lanefold::cross_entropy_rows_lse", mutates_args=())(
    _cross_entropy_lse_impl
)


@_cross_entropy_lse_op.register_fake
def _(logits, target):
    rows = logits.shape[0]
    return logits.new_empty((rows,)), logits.new_empty((rows,), dtype=torch.float32)


# ------------------------------------------------------- the backward ops
#
# Input gradients (dx) are lanefold's backward row programs, on the same
# paths as the forward: the exact-order executor on the CPU, a generated
# kernel on torch's stream on CUDA. dweight and dbias are lanefold's
# fixed-order column sums (groups of COLUMN_GROUP_ROWS rows, then the
# groups in order): the same bits on the CPU and on CUDA, and however the
# rows are batched at group boundaries.


@torch.library.custom_op("lanefold::rms_norm_backward", mutates_args=())
def _rms_norm_backward_op(
    dy: torch.Tensor, x: torch.Tensor, weight: Optional[torch.Tensor], eps: float
) -> torch.Tensor:
    dy, x = _ready(dy), _ready(x)
    dx = torch.empty_like(x)
    if x.shape[0] > 0:
        _launch("rmsnorm_backward", x, eps, [("x", x), ("dy", dy)] + _columns(weight, None), [("dx", dx)])
    return dx


@_rms_norm_backward_op.register_fake
def _(dy, x, weight, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("lanefold::layer_norm_backward", mutates_args=())
def _layer_norm_backward_op(
    dy: torch.Tensor, x: torch.Tensor, weight: Optional[torch.Tensor], eps: float
) -> torch.Tensor:
    dy, x = _ready(dy), _ready(x)
    dx = torch.empty_like(x)
    if x.shape[0] > 0:
        _launch("layernorm_backward", x, eps, [("x", x), ("dy", dy)] + _columns(weight, None), [("dx", dx)])
    return dx


@_layer_norm_backward_op.register_fake
def _(dy, x, weight, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("lanefold::add_layer_norm_backward", mutates_args=())
def _add_layer_norm_backward_op(
    dy: torch.Tensor, dh: torch.Tensor, h: torch.Tensor, weight: Optional[torch.Tensor], eps: float
) -> torch.Tensor:
    """dx (= d residual): layer_norm's dx of h plus h's own gradient dh."""
    dy, dh, h = _ready(dy), _ready(dh), _ready(h)
    dx = torch.empty_like(h)
    if h.shape[0] > 0:
        _launch(
            "residual_layernorm_backward",
            h,
            eps,
            [("h", h), ("dy", dy), ("dh", dh)] + _columns(weight, None),
            [("dx", dx)],
        )
    return dx


@_add_layer_norm_backward_op.register_fake
def _(dy, dh, h, weight, eps):
    return torch.empty_like(h, memory_format=torch.contiguous_format)


@torch.library.custom_op("lanefold::softmax_backward", mutates_args=())
def _softmax_backward_op(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    dy, y = _ready(dy), _ready(y)
    dx = torch.empty_like(y)
    if y.shape[0] > 0:
        _launch("softmax_backward", y, 1.0, [("y", y), ("dy", dy)], [("dx", dx)])
    return dx


@_softmax_backward_op.register_fake
def _(dy, y):
    return torch.empty_like(y, memory_format=torch.contiguous_format)


@torch.library.custom_op("lanefold::cross_entropy_backward", mutates_args=())
def _cross_entropy_backward_op(
    dloss: torch.Tensor, logits: torch.Tensor, target: torch.Tensor, lse: torch.Tensor
) -> torch.Tensor:
    """dlogits = (exp(logits - lse) - onehot(target)) * dloss per row from
    the forward's saved log-sum-exp (float32): one read of the logits, one
    write; rows whose target is -100 get 0 (NaN where the row's lse is, as
    torch's backward)."""
    dloss, logits, target, lse = _ready(dloss), _ready(logits), _ready(target), _ready(lse)
    dx = torch.empty_like(logits)
    if logits.shape[0] > 0:
        _launch(
            "cross_entropy_backward",
            logits,
            1.0,
            [("x", logits), ("target", target), ("lse", lse), ("dloss", dloss)],
            [("dx", dx)],
        )
    return dx


@_cross_entropy_backward_op.register_fake
def _(dloss, logits, target, lse):
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


@torch.library.custom_op("lanefold::cross_entropy_backward_recompute", mutates_args=())
def _cross_entropy_backward_recompute_op(dloss: torch.Tensor, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """dlogits = (softmax(logits) - onehot(target)) * dloss per row, the
    row's normalizer recomputed (two reads of the logits): the gradient of
    ``cross_entropy_rows`` called directly, which saves no statistic."""
    dloss, logits, target = _ready(dloss), _ready(logits), _ready(target)
    dx = torch.empty_like(logits)
    if logits.shape[0] > 0:
        _launch(
            "cross_entropy_backward_recompute",
            logits,
            1.0,
            [("x", logits), ("target", target), ("dloss", dloss)],
            [("dx", dx)],
        )
    return dx


@_cross_entropy_backward_recompute_op.register_fake
def _(dloss, logits, target):
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


def _cross_entropy_with_grad_impl(
    logits: torch.Tensor, target: torch.Tensor, dloss: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(per-row loss, dlogits) in one pass over the logits: the loss of
    cross_entropy_rows and the dlogits of cross_entropy_backward for the
    per-row gradient ``dloss`` the loss will receive."""
    logits = _ready(logits)
    dx = torch.empty_like(logits)
    return _launch_cross_entropy_with_grad(logits, target, dloss, dx), dx


def _launch_cross_entropy_with_grad(logits, target, dloss, dx) -> torch.Tensor:
    """The per-row loss; dlogits written to ``dx`` (``logits`` itself in place)."""
    target, dloss = _ready(target), _ready(dloss)
    loss = logits.new_empty((logits.shape[0],))
    if logits.shape[0] > 0:
        _launch(
            "cross_entropy_with_grad",
            logits,
            1.0,
            [("x", logits), ("target", target), ("dloss", dloss)],
            [("loss", loss), ("dx", dx)],
            in_place=dx is logits,
        )
    return loss


_cross_entropy_with_grad_op = torch.library.custom_op("lanefold::cross_entropy_with_grad", mutates_args=())(
    _cross_entropy_with_grad_impl
)


@_cross_entropy_with_grad_op.register_fake
def _(logits, target, dloss):
    return logits.new_empty((logits.shape[0],)), torch.empty_like(logits, memory_format=torch.contiguous_format)


def _cross_entropy_with_grad_inplace_impl(logits: torch.Tensor, target: torch.Tensor, dloss: torch.Tensor) -> torch.Tensor:
    """cross_entropy_with_grad writing dlogits over ``logits`` (contiguous,
    2-D): returns the per-row loss; ``logits`` then holds the gradient. One
    logits-sized buffer fewer than the out-of-place op."""
    if not logits.is_contiguous() or (logits.is_cuda and logits.data_ptr() % 16 != 0):
        raise ValueError("lanefold: in place, logits must be contiguous (and 16-byte aligned on CUDA)")
    return _launch_cross_entropy_with_grad(logits, target, dloss, logits)


_cross_entropy_with_grad_inplace_op = torch.library.custom_op(
    "lanefold::cross_entropy_with_grad_", mutates_args=("logits",)
)(_cross_entropy_with_grad_inplace_impl)


@_cross_entropy_with_grad_inplace_op.register_fake
def _(logits, target, dloss):
    return logits.new_empty((logits.shape[0],))


@torch.library.custom_op("lanefold::norm_column_grads", mutates_args=())
def _column_grads_op(x: torch.Tensor, dy: torch.Tensor, eps: float, layer: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """(dweight, dbias) of a norm of the rows x (layer: LayerNorm, else
    RMSNorm, whose dbias is empty)."""
    x, dy = _ready(x), _ready(dy)
    n = x.shape[1]
    dw = x.new_empty((n,))
    db = x.new_empty((n,) if layer else (0,))
    if x.shape[0] == 0:
        dw.zero_()
        db.zero_()
    elif x.device.type == "cpu":
        op = "layernorm_backward" if layer else "rmsnorm_backward"
        _C.cpu_column_grads(
            op,
            _DTYPES[x.dtype],
            x.shape[0],
            n,
            float(eps),
            x.data_ptr(),
            dy.data_ptr(),
            dw.data_ptr(),
            db.data_ptr() if layer else 0,
        )
    elif x.device.type == "cuda":
        rows = x.shape[0]
        groups = (rows + _C.COLUMN_GROUP_ROWS - 1) // _C.COLUMN_GROUP_ROWS
        partials = torch.empty(((2 if layer else 1) * groups * n,), dtype=torch.float32, device=x.device)
        device = x.device.index if x.device.index is not None else torch.cuda.current_device()
        _preload_nvrtc()
        _C.cuda_column_grads(
            "layernorm_backward" if layer else "rmsnorm_backward",
            _DTYPES[x.dtype],
            rows,
            n,
            float(eps),
            device,
            torch.cuda.current_stream(x.device).cuda_stream,
            x.data_ptr(),
            dy.data_ptr(),
            partials.data_ptr(),
            dw.data_ptr(),
            db.data_ptr() if layer else 0,
        )
    else:
        raise RuntimeError(f"lanefold: tensors on {x.device} are not supported (CPU or CUDA)")
    return dw, db


@_column_grads_op.register_fake
def _(x, dy, eps, layer):
    n = x.shape[1]
    return x.new_empty((n,)), x.new_empty((n,) if layer else (0,))


# ----------------------------------------------------------------- autograd


def _norm_backward(ctx, x, weight, bias, gy, layer: bool):
    """(dx, dweight, dbias) of a norm of x; dx by lanefold's backward op."""
    gy = gy.to(x.dtype)
    at = ctx.weight_at
    want_w = weight is not None and ctx.needs_input_grad[at]
    want_b = bias is not None and ctx.needs_input_grad[at + 1]
    gw = gb = None
    if want_w or want_b:
        dw, db = _column_grads_op(x, gy, ctx.eps, layer)
        gw = dw.to(weight.dtype) if want_w else None
        gb = db.to(bias.dtype) if want_b else None
    op = _layer_norm_backward_op if layer else _rms_norm_backward_op
    gx = op(gy, x, weight, ctx.eps) if ctx.needs_input_grad[0] else None
    return gx, gw, gb


def _rms_setup(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps
    ctx.weight_at = 1


def _rms_backward(ctx, gy):
    x, weight = ctx.saved_tensors
    gx, gw, _ = _norm_backward(ctx, x, weight, None, gy, False)
    return gx, gw, None


def _layer_norm_setup(ctx, inputs, output):
    x, weight, bias, eps = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.eps = eps
    ctx.weight_at = 1


def _layer_norm_backward(ctx, gy):
    x, weight, bias = ctx.saved_tensors
    gx, gw, gb = _norm_backward(ctx, x, weight, bias, gy, True)
    return gx, gw, gb, None


def _add_layer_norm_setup(ctx, inputs, output):
    x, residual, weight, bias, eps = inputs
    ctx.save_for_backward(output[1], weight, bias)
    ctx.eps = eps
    ctx.weight_at = 2


def _add_layer_norm_backward(ctx, gy, gh):
    h, weight, bias = ctx.saved_tensors
    gy = gy.to(h.dtype) if gy is not None else torch.zeros_like(h)
    gh = gh.to(h.dtype) if gh is not None else torch.zeros_like(h)
    gw = gb = None
    want_w = weight is not None and ctx.needs_input_grad[2]
    want_b = bias is not None and ctx.needs_input_grad[3]
    if want_w or want_b:
        dw, db = _column_grads_op(h, gy, ctx.eps, True)
        gw = dw.to(weight.dtype) if want_w else None
        gb = db.to(bias.dtype) if want_b else None
    gx = None
    if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
        gx = _add_layer_norm_backward_op(gy, gh, h, weight, ctx.eps)
    return gx, None if gx is None else gx.clone(), gw, gb, None


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_backward(ctx, gy):
    (y,) = ctx.saved_tensors
    return _softmax_backward_op(gy.to(y.dtype), y)


def _sum_setup(ctx, inputs, output):
    (x,) = inputs
    ctx.shape = x.shape
    ctx.dtype = x.dtype


def _sum_backward(ctx, gy):
    return gy.to(ctx.dtype).unsqueeze(-1).expand(ctx.shape).contiguous()


def _cross_entropy_setup(ctx, inputs, output):
    logits, target = inputs
    ctx.save_for_backward(logits, target)


def _cross_entropy_backward(ctx, gl):
    logits, target = ctx.saved_tensors
    return _cross_entropy_backward_recompute_op(gl.to(logits.dtype), logits, target), None


def _cross_entropy_lse_setup(ctx, inputs, output):
    logits, target = inputs
    ctx.save_for_backward(logits, target, output[1])
    ctx.mark_non_differentiable(output[1])


def _cross_entropy_lse_backward(ctx, gl, _glse):
    logits, target, lse = ctx.saved_tensors
    return _cross_entropy_backward_op(gl.to(logits.dtype), logits, target, lse), None


def _forward_writes_ce_grad() -> bool:
    """The forward-written dlogits, unless ``LANEFOLD_CE_GRAD_IN_FORWARD=0``
    asks for the backward op (which keeps the logits and the saved lse and
    reads the logits again, once)."""
    return os.environ.get("LANEFOLD_CE_GRAD_IN_FORWARD") != "0"


def _per_row_dloss(logits: torch.Tensor, target: torch.Tensor, mean: bool):
    """(rows not ignored, the gradient each row's loss receives from the
    mean or sum), both on the device: no synchronization."""
    count = (target != _IGNORE_INDEX).sum().to(torch.float32)
    scale = count.reciprocal() if mean else torch.ones_like(count)
    return count, scale.to(logits.dtype).expand(logits.shape[0]).contiguous()


class _CrossEntropyWithGrad(torch.autograd.Function):
    """cross_entropy's mean or sum whose forward also writes dlogits, for
    the gradient each row's loss receives from the reduction, and saves
    only them: the logits are not kept for the backward, nor read again.
    The backward scales the saved dlogits by the incoming gradient in place
    (on CUDA not at all where it is 1) and returns them, so a backward
    through the same graph again (after ``retain_graph=True``) is refused
    by autograd's saved-tensor check."""

    @staticmethod
    def forward(ctx, logits, target, mean: bool):
        count, dloss = _per_row_dloss(logits, target, mean)
        op = _cross_entropy_with_grad_impl if _direct(logits, target) else _cross_entropy_with_grad_op
        loss, dx = op(logits, target, dloss)
        ctx.save_for_backward(dx)
        return _reduce_losses(loss, count if mean else None, logits.dtype)

    @staticmethod
    def backward(ctx, grad):
        (dx,) = ctx.saved_tensors
        return _scale_unless_one_(dx, grad), None, None


class _CrossEntropyWithGradInPlace(torch.autograd.Function):
    """``inplace_backward=True``: as :class:`_CrossEntropyWithGrad`, but
    dlogits are written over the logits themselves (Liger's and
    flash-attn's in-place gradient), so forward + backward hold no second
    logits-sized buffer; the saved tensor is the logits' own storage and
    the backward scales it in place and returns it as their gradient."""

    @staticmethod
    def forward(ctx, logits, target, mean: bool):
        count, dloss = _per_row_dloss(logits, target, mean)
        op = _cross_entropy_with_grad_inplace_impl if _direct(logits, target) else _cross_entropy_with_grad_inplace_op
        loss = op(logits, target, dloss)
        ctx.save_for_backward(logits.detach())
        return _reduce_losses(loss, count if mean else None, logits.dtype)

    @staticmethod
    def backward(ctx, grad):
        (dx,) = ctx.saved_tensors
        return _scale_unless_one_(dx, grad), None, None


def _scale_unless_one_(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``x *= s`` in place (``s`` one element). On CUDA lanefold's kernel
    leaves x alone where s is exactly 1, the usual incoming gradient of a
    loss: decided on the device, so no synchronization and no traffic."""
    s = s.to(device=x.device, dtype=x.dtype)
    if x.is_cuda and x.numel() > 0 and _direct(x, s):
        s = _ready(s.reshape(1))
        device = x.device.index
        _preload_nvrtc()
        _C.cuda_scale_unless_one(
            _DTYPES[x.dtype], x.shape[0], x.shape[1], device, _stream(device), x.data_ptr(), s.data_ptr()
        )
        return x
    return x.mul_(s)


_rms_norm_op.register_autograd(_rms_backward, setup_context=_rms_setup)
_layer_norm_op.register_autograd(_layer_norm_backward, setup_context=_layer_norm_setup)
_add_layer_norm_op.register_autograd(_add_layer_norm_backward, setup_context=_add_layer_norm_setup)
_softmax_op.register_autograd(_softmax_backward, setup_context=_softmax_setup)
_sum_op.register_autograd(_sum_backward, setup_context=_sum_setup)
_cross_entropy_op.register_autograd(_cross_entropy_backward, setup_context=_cross_entropy_setup)
_cross_entropy_lse_op.register_autograd(_cross_entropy_lse_backward, setup_context=_cross_entropy_lse_setup)


# ------------------------------------------------------------ argument checks


def _check_tensor(t, what: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"lanefold: {what} must be a torch.Tensor, got {type(t).__name__}")


def _check_input(x, what: str = "x") -> None:
    _check_tensor(x, what)
    if x.dtype not in _DTYPES:
        raise TypeError(
            f"lanefold: {what} has dtype {x.dtype}; supported: float32, bfloat16, float16"
        )
    if x.dim() == 0:
        raise ValueError(f"lanefold: {what} must have at least one dimension, got a scalar")
    if x.device.type not in ("cpu", "cuda"):
        raise RuntimeError(f"lanefold: {what} is on {x.device}; supported: CPU and CUDA")


def _no_columns(x: torch.Tensor) -> bool:
    """Rows of length 0 have no kernel: the public functions return what
    torch returns for them (empty rows, zero sums, ignored losses)."""
    return x.shape[-1] == 0


def _check_like(t, x: torch.Tensor, what: str, shape: Sequence[int]) -> None:
    """``t`` (weight, bias, residual) matches x's dtype and device and has ``shape``."""
    _check_tensor(t, what)
    if t.device != x.device:
        raise RuntimeError(
            f"lanefold: {what} is on {t.device} but x is on {x.device}; "
            "all tensors must be on the same device"
        )
    if t.dtype != x.dtype:
        raise TypeError(f"lanefold: {what} has dtype {t.dtype} but x has {x.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(
            f"lanefold: {what} has shape {tuple(t.shape)}, expected {tuple(shape)} "
            f"for x of shape {tuple(x.shape)}"
        )


def _check_eps(eps) -> float:
    try:
        e = float(eps)
    except (TypeError, ValueError):
        raise TypeError(f"lanefold: eps must be a number, got {type(eps).__name__}") from None
    if not (e > 0.0 and e < float("inf")):
        raise ValueError(f"lanefold: eps must be positive and finite, got {eps}")
    return e


def _check_last_dim(x: torch.Tensor, dim) -> None:
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"lanefold: dim must be an int, got {type(dim).__name__}")
    if dim not in (-1, x.dim() - 1):
        raise ValueError(
            f"lanefold: only the last dim is supported (dim=-1 or {x.dim() - 1}), got dim={dim}"
        )


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x if x.dim() == 2 else x.reshape(-1, x.shape[-1])


def _shaped(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``y`` (rows x n) in x's shape; a view only where one is needed."""
    return y if x.dim() == 2 else y.view(x.shape)


# --------------------------------------------------------- public functions


# Parameters only disable torch function overrides: plain for our purpose.
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _direct(*tensors) -> bool:
    """Whether a call may skip the custom op's dispatch (tens of µs of
    host time) and run the implementation itself: only where nothing could
    tell the difference, i.e. no autograd, no torch.compile tracing, no
    tensor subclass, functorch transform or dispatch/function mode."""
    if torch.compiler.is_compiling() or _pd.is_in_torch_dispatch_mode():
        return False
    if torch._C._is_torch_function_mode_enabled():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is None:
            continue
        if type(t) not in _PLAIN or (grad and t.requires_grad) or _wrapped(t):
            return False
    return True




def rms_norm(
    x: torch.Tensor, weight: Optional[torch.Tensor] = None, eps: float = 1e-6
) -> torch.Tensor:
    """``x * rsqrt(mean(x^2) + eps) * weight`` over the last dim."""
    _check_input(x)
    if weight is not None:
        _check_like(weight, x, "weight", x.shape[-1:])
    eps = _check_eps(eps)
    if _no_columns(x):
        return torch.nn.functional.rms_norm(x, (0,), weight, eps)
    op = _rms_norm_impl if _direct(x, weight) else _rms_norm_op
    return _shaped(op(_rows(x), weight, eps), x)


def layer_norm(
    x: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """LayerNorm over the last dim (biased variance, as torch)."""
    _check_input(x)
    if weight is not None:
        _check_like(weight, x, "weight", x.shape[-1:])
    if bias is not None:
        _check_like(bias, x, "bias", x.shape[-1:])
    eps = _check_eps(eps)
    if _no_columns(x):
        return torch.nn.functional.layer_norm(x, (0,), weight, bias, eps)
    op = _layer_norm_impl if _direct(x, weight, bias) else _layer_norm_op
    return _shaped(op(_rows(x), weight, bias, eps), x)


def add_layer_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    eps: float = 1e-5,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``h = x + residual`` (rounded to x's dtype) and ``LayerNorm(h)``:
    returns ``(y, h)``."""
    _check_input(x)
    _check_like(residual, x, "residual", x.shape)
    if weight is not None:
        _check_like(weight, x, "weight", x.shape[-1:])
    if bias is not None:
        _check_like(bias, x, "bias", x.shape[-1:])
    eps = _check_eps(eps)
    if _no_columns(x):
        h = x + residual
        return torch.nn.functional.layer_norm(h, (0,), weight, bias, eps), h
    op = _add_layer_norm_impl if _direct(x, residual, weight, bias) else _add_layer_norm_op
    y, h = op(_rows(x), _rows(residual), weight, bias, eps)
    return y.view(x.shape), h.view(x.shape)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax over the last dim."""
    _check_input(x)
    _check_last_dim(x, dim)
    if _no_columns(x):
        return torch.softmax(x, -1)
    op = _softmax_impl if _direct(x) else _softmax_op
    return _shaped(op(_rows(x)), x)


def sum(x: torch.Tensor, dim: int = -1) -> torch.Tensor:  # noqa: A001 (torch's name)
    """Sum over the last dim, in x's dtype (FP32 accumulation)."""
    _check_input(x)
    _check_last_dim(x, dim)
    if _no_columns(x):
        return x.sum(-1)
    op = _sum_impl if _direct(x) else _sum_op
    return op(_rows(x)).view(x.shape[:-1])


def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
    inplace_backward: bool = False,
) -> torch.Tensor:
    """Cross entropy of class-index targets over the last dim of ``logits``.

    ``reduction``: ``"none"`` (per-row losses, shape ``logits.shape[:-1]``,
    0 where ignored), ``"sum"``, or ``"mean"`` (over the rows not ignored,
    as torch). Losses are in logits' dtype; the reductions accumulate in
    float32. On the CPU an out-of-range target raises ValueError; on CUDA
    it is not checked (a check would synchronize).

    ``inplace_backward=True`` (``"mean"`` or ``"sum"``, logits that require
    grad): the forward overwrites ``logits`` with their gradient and the
    backward returns that storage, as Liger's cross entropy does, saving
    one logits-sized buffer. ``logits`` must be contiguous and not a leaf
    (autograd forbids changing a leaf that requires grad in place); nothing
    else may read them after this call (their values are gone: a
    producer that saved them for its own backward, e.g. ``tanh``, fails
    autograd's version check, while a matmul's saved inputs are
    untouched).
    """
    _check_input(logits, "logits")
    _check_tensor(target, "target")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(
            f"lanefold: reduction must be 'mean', 'sum' or 'none', got {reduction!r}"
        )
    if target.device != logits.device:
        raise RuntimeError(
            f"lanefold: target is on {target.device} but logits are on {logits.device}; "
            "all tensors must be on the same device"
        )
    if target.dtype.is_floating_point or target.dtype.is_complex or target.dtype == torch.bool:
        raise TypeError(
            f"lanefold: target must hold class indices (an integer dtype), got {target.dtype}"
        )
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        hint = ""
        if logits.dim() > 2 and tuple(target.shape) == (logits.shape[0], *logits.shape[2:]):
            hint = (
                "; the classes are logits' last dim, not torch's dim 1: for torch's "
                "(N, C, d1, ...) layout pass logits.movedim(1, -1)"
            )
        raise ValueError(
            f"lanefold: target has shape {tuple(target.shape)}, expected {tuple(logits.shape[:-1])} "
            f"for logits of shape {tuple(logits.shape)}{hint}"
        )
    if not isinstance(ignore_index, int) or isinstance(ignore_index, bool):
        raise TypeError(f"lanefold: ignore_index must be an int, got {type(ignore_index).__name__}")
    if _no_columns(logits):
        # No class to index: every target must be ignored, as in torch.
        if bool((target != ignore_index).any()):
            raise ValueError(
                "lanefold: target out of range: logits have 0 classes, so every target "
                f"must be ignore_index ({ignore_index})"
            )
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(target.numel(), 0),
            target.reshape(-1).long(),
            ignore_index=ignore_index,
            reduction=reduction,
        )
        return loss.view(logits.shape[:-1]) if reduction == "none" else loss
    t = target.reshape(-1).to(torch.int64)
    if ignore_index != _IGNORE_INDEX:
        t = torch.where(t == ignore_index, torch.full_like(t, _IGNORE_INDEX), t)
    if inplace_backward and logits.requires_grad and torch.is_grad_enabled():
        if reduction == "none":
            raise ValueError(
                "lanefold: inplace_backward needs reduction 'mean' or 'sum' "
                "(with 'none' the gradient each row receives is not known in the forward)"
            )
        base = logits if logits._base is None else logits._base
        if base.is_leaf:
            raise RuntimeError(
                "lanefold: inplace_backward overwrites logits with their gradient, "
                "but they are (a view of) a leaf that requires grad (autograd forbids that in place)"
            )
        if not logits.is_contiguous():
            raise ValueError("lanefold: inplace_backward needs contiguous logits")
        return _CrossEntropyWithGradInPlace.apply(_rows(logits), t, reduction == "mean")
    if (
        reduction != "none"
        and logits.requires_grad
        and torch.is_grad_enabled()
        and _forward_writes_ce_grad()
    ):
        # The gradient each row's loss will receive is known now: the
        # forward writes dlogits too (one pass, the logits not kept).
        return _CrossEntropyWithGrad.apply(_rows(logits), t, reduction == "mean")
    if logits.requires_grad and torch.is_grad_enabled():
        # The backward will need the logits' normalizer: the forward saves
        # each row's log-sum-exp (4 bytes a row), so the backward reads the
        # logits once, not twice.
        loss, _ = _cross_entropy_lse_op(_rows(logits), t)
    else:
        op = _cross_entropy_impl if _direct(logits, t) else _cross_entropy_op
        loss = op(_rows(logits), t)
    if reduction == "none":
        return loss.view(logits.shape[:-1])
    count = (t != _IGNORE_INDEX).sum().to(torch.float32) if reduction == "mean" else None
    return _reduce_losses(loss, count, logits.dtype)


def _reduce_losses(loss: torch.Tensor, count: Optional[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """The sum of the per-row losses in float32, divided by ``count`` for
    the mean, in ``dtype``."""
    total = loss.to(torch.float32).sum()
    out = total if count is None else total / count
    # Not `.to` to its own dtype: returned from an autograd.Function that
    # alias makes torch.compile (2.11) lose the Function's gradient.
    return out if out.dtype == dtype else out.to(dtype)


def describe_plan(op: str, x: torch.Tensor, weight: bool = True, bias: bool = True) -> str:
    """The plan lanefold picks for ``op`` (rmsnorm, layernorm,
    residual_layernorm, softmax, cross_entropy, sum, or the first five's
    ``*_backward``) on x's rows."""
    _check_input(x)
    if _no_columns(x):
        raise ValueError(f"lanefold: x has rows of length 0 (shape {tuple(x.shape)}): no plan")
    rows = x.numel() // x.shape[-1]
    device = x.device.index if x.is_cuda else None
    if x.is_cuda and device is None:
        device = torch.cuda.current_device()
    return _C.describe_plan(op, _DTYPES[x.dtype], rows, x.shape[-1], weight, bias, x.is_cuda, device)


def clear_caches() -> None:
    """Forget every cached plan and loaded kernel of this process."""
    _C.clear_caches()
