#!/usr/bin/env python3
"""The PyTorch peer of lanefold: PyTorch eager, torch.compile, Liger-Kernel
and Quack timed on lanefold's own inputs, through lanefold's phases.

lanefold starts this script as a subprocess and talks JSON lines: one
request object per line on stdin, one reply object per line on stdout.
Everything else (logs, warnings, compiler chatter) goes to stderr: file
descriptor 1 is redirected to stderr at start-up and the protocol is written
to a private duplicate of the original stdout.

Commands:
  {"cmd": "hello"} -> {"ok": true, "torch": ..., "cuda": ..., "device": ...,
                       "liger": "0.x.y" | null, "quack": "0.x.y" | null,
                       "python": ...}
  {"cmd": "quit"}  -> exit 0 (so does end of input)

A case:
  {"op": "rmsnorm", "dtype": "bf16", "rows": 64, "n": 4096,
   "inputs": {"x": "/abs/x.npy", "weight": "/abs/weight.npy"},
   "input_sets": [{...}, {...}],          # optional, replaces "inputs"
   "outputs_dir": "/abs/dir", "mode": "eager" | "compile" | "liger" | "quack",
   "samples": 7, "single_samples": 15, "sample_ms": 20.0, "warmup_ms": 100.0}
  -> {"ok": true, "mode": ..., "outputs": {"y": "/abs/dir/y.npy"},
      "gpu": [{"batch": B, "total_us": T}, ...], "gpu_graph": true,
      "gpu_enqueue_us": [...],
      "e2e": [{"batch": B, "total_us": T}, ...], "e2e_enqueue_us": [...],
      "single": [{"gpu_us": g, "host_us": h}, ...], "notes": [...]}
  or {"ok": false, "error": "..."}; a bad request never ends the process.

Phases (the same definitions as lanefold's):
  gpu    batch calls captured once in a torch.cuda.CUDAGraph (inputs static;
         with several input sets, call k uses set k % sets inside the
         captured batch), replayed between two timing events; the batch is
         sized so one replay takes about sample_ms. If capture fails the
         batch runs as eager calls between the events and gpu_graph is false.
  e2e    host perf_counter around batch eager calls + torch.cuda.synchronize.
  single one call between two events + synchronize, then one call timed on
         the host (call + synchronize, no event in the window); repeated
         single_samples times (default: samples).
Warm-up (warmup_ms, after a first call that covers torch.compile's
compilation) is excluded. Outputs written for validation are those of a
final call on input set 0, after the timing.

Semantics are PyTorch's own, output dtype = input dtype:
  sum                x.sum(-1)                                   -> y
  softmax            torch.softmax(x, -1)                        -> y
  rmsnorm            F.rms_norm(x, (n,), weight, eps=1e-6)       -> y
  layernorm          F.layer_norm(x, (n,), weight, bias, 1e-5)   -> y
  residual_layernorm h = x + residual; F.layer_norm(h, ...)      -> h, y
  cross_entropy      F.cross_entropy(x, target, reduction='none',
                                     ignore_index=-100)          -> loss
  add                x + residual                                -> y
bf16 travels through .npy files as raw bits (<u2 or <i2).

The input gradients, named as lanefold's row programs name them (weight
never requires a gradient: only dx is asked for):
  rmsnorm_backward            x, dy, weight       -> dx of rmsnorm
  layernorm_backward          x, dy, weight       -> dx of layernorm (bias
                                                     does not reach dx)
  residual_layernorm_backward h, dy, dh, weight   -> dx (= d residual): the
                                 layernorm dx of h plus dh, the gradient h
                                 itself receives
  softmax_backward            y, dy               -> y * (dy - sum(y * dy))
  cross_entropy_backward      x, target, dloss    -> (softmax(x) -
                                 onehot(target)) * dloss per row, 0 on rows
                                 whose target is -100. lanefold's form also
                                 reads the forward's saved log-sum-exp
                                 `lse` (f32, one per row): accepted and
                                 ignored here, as every mode's backward
                                 reads its own forward's saved state.
  cross_entropy_backward_recompute  the same gradient (lanefold's form that
                                 recomputes the normalizer from x); the
                                 peers run the same backward as above
Only the backward is timed: whatever a mode's backward reads from its
forward (the autograd graph, saved statistics) is made once per input set
before the timing. Eager runs torch.autograd.grad of the F.* forward
(F.rms_norm, F.layer_norm, h = x + residual then F.layer_norm,
F.cross_entropy with reduction='none') with respect to the row input only,
the graph built once and kept (retain_graph): exactly the kernels autograd
runs in training, nothing more. softmax_backward is the one direct call,
torch._softmax_backward_data(dy, y, -1, dtype): autograd runs that op, but
its graph would need softmax's input x, which the case does not have.
Compile runs the same under torch.compile (the forward compiled, so the
backward is AOTAutograd's compiled one; softmax's call compiled as it is).
Liger runs its autograd functions' backward (its norms also compute the
column gradients, which they cannot skip; its cross entropy computes the
gradient inside the forward, so forward and backward are timed together,
what a user runs), Quack its backward kernels with the forward's statistics
made before the timing: liger_backward and quack_backward say which calls.
The backward cases run on a side stream, where CUDA graphs capture them:
autograd launches each backward op on its forward op's stream, and the
legacy default stream cannot join a capture.

Mode "liger" runs Liger-Kernel's functional operators and mode "quack" the
kernels of Quack (quack-kernels, CuTe-DSL), each only where it has the
operator with these semantics; other cases are refused (ok: false) with
the reason, and so is every case of a mode whose package is not importable.
Quack needs `import quack` to work in this interpreter (e.g. unpacked wheels
on PYTHONPATH, with nvidia_cutlass_dsl/dsl_packages beside them); see
quack_op and quack_backward for the calls and where they differ from the
eager forms.
"""

import contextlib
import json
import math
import os
import platform
import sys
import time
import traceback

RMSNORM_EPS = 1e-6
LAYERNORM_EPS = 1e-5
IGNORE_INDEX = -100
# Upper bound on calls captured in one CUDA graph.
MAX_GRAPH_CALLS = 20000
# Upper bound on calls in one e2e batch.
MAX_E2E_CALLS = 200000

OPS = {
    # op: (required inputs, optional inputs, outputs)
    "sum": (["x"], [], ["y"]),
    "softmax": (["x"], [], ["y"]),
    "rmsnorm": (["x"], ["weight"], ["y"]),
    "layernorm": (["x"], ["weight", "bias"], ["y"]),
    "residual_layernorm": (["x", "residual"], ["weight", "bias"], ["h", "y"]),
    "cross_entropy": (["x", "target"], [], ["loss"]),
    "add": (["x", "residual"], [], ["y"]),
    "rmsnorm_backward": (["x", "dy"], ["weight"], ["dx"]),
    "layernorm_backward": (["x", "dy"], ["weight"], ["dx"]),
    "residual_layernorm_backward": (["h", "dy", "dh"], ["weight"], ["dx"]),
    "softmax_backward": (["y", "dy"], [], ["dx"]),
    "cross_entropy_backward": (["x", "target", "dloss"], ["lse"], ["dx"]),
    "cross_entropy_backward_recompute": (["x", "target", "dloss"], [], ["dx"]),
}
# lanefold's operators whose peers run another's code: the gradient is the
# same whatever lanefold's kernel reads.
SAME_AS = {"cross_entropy_backward_recompute": "cross_entropy_backward"}
MODES = ("eager", "compile", "liger", "quack")

torch = None
F = None
np = None
IMPORT_ERROR = None


def log(*args):
    print("torch-peer:", *args, file=sys.stderr, flush=True)


class Refused(Exception):
    """A request this peer cannot serve (reported as ok:false)."""


def import_torch():
    global torch, F, np, IMPORT_ERROR
    try:
        import torch as _torch
        import torch.nn.functional as _F
        import numpy as _np

        torch, F, np = _torch, _F, _np
    except Exception as e:  # noqa: BLE001 - report any import failure
        IMPORT_ERROR = f"{type(e).__name__}: {e}"


def package_version(name):
    try:
        from importlib import metadata

        return metadata.version(name)
    except Exception:  # noqa: BLE001
        return None


def quack_version():
    """Quack's version, or None where it is not installed. The package
    metadata where present; else, where a `quack` package is on the path
    (unpacked wheels without metadata), its __version__ after importing it."""
    version = package_version("quack-kernels") or package_version("quack_kernels")
    if version is not None:
        return version
    try:
        import importlib.util

        if importlib.util.find_spec("quack") is None:
            return None
        import quack

        return str(getattr(quack, "__version__", "unknown"))
    except Exception:  # noqa: BLE001 - not importable: no version
        return None


def hello():
    if IMPORT_ERROR is not None:
        return {"ok": False, "error": f"import torch failed: {IMPORT_ERROR}"}
    if not torch.cuda.is_available():
        return {
            "ok": False,
            "error": f"torch {torch.__version__} sees no CUDA device "
            "(torch.cuda.is_available() is False)",
        }
    try:
        uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
    except Exception:  # noqa: BLE001 - informational only
        uuid = None
    return {
        "ok": True,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0),
        "device_uuid": None if uuid is None else f"GPU-{uuid}",
        "liger": package_version("liger-kernel")
        or package_version("liger_kernel"),
        "quack": quack_version(),
        "triton": package_version("triton"),
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


# --- .npy in and out ------------------------------------------------------

TORCH_DTYPES = {}


def storage_dtype(name):
    if not TORCH_DTYPES:
        TORCH_DTYPES.update(
            {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
        )
    if name not in TORCH_DTYPES:
        raise Refused(f"unknown dtype {name!r} (expected f32, bf16 or f16)")
    return TORCH_DTYPES[name]


def is_backward(op):
    return isinstance(op, str) and SAME_AS.get(op, op).endswith("_backward") and op in OPS


def input_shape(name, rows, n):
    if name in ("x", "residual", "h", "y", "dy", "dh"):
        return (rows, n)
    if name in ("weight", "bias"):
        return (n,)
    if name in ("target", "dloss", "lse"):
        return (rows,)
    raise Refused(f"unknown input {name!r}")


def output_shape(op, name, rows, n):
    if op == "sum" or name == "loss":
        return (rows,)
    return (rows, n)


def seeded_inputs(op, dtype_name, rows, n, seed=0):
    """Every input of `op` (required and optional) on the GPU, random from
    `seed`: normal values in the storage dtype, uniform targets in [0, n).
    For the diagnostic scripts (python/inductor_dump.py, python/ncu_peer.py),
    which need an operator's inputs but not lanefold's."""
    dtype = storage_dtype(dtype_name)
    required, optional, _ = OPS[op]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    inputs = {}
    for name in required + optional:
        shape = input_shape(name, rows, n)
        if name == "target":
            inputs[name] = torch.randint(0, n, shape, device="cuda", generator=gen)
        else:
            inputs[name] = torch.randn(shape, device="cuda", generator=gen).to(dtype)
    return inputs


def load_npy(path, name, dtype, shape):
    if not isinstance(path, str) or not os.path.isabs(path):
        raise Refused(f"input {name!r}: path must be absolute, got {path!r}")
    a = np.load(path, allow_pickle=False)
    if a.dtype.byteorder not in ("=", "|", "<" if sys.byteorder == "little" else ">"):
        a = a.astype(a.dtype.newbyteorder("="))
    want = math.prod(shape)
    if a.size != want:
        raise Refused(
            f"{path}: {a.size} elements (shape {list(a.shape)}), "
            f"expected {want} for {name} {list(shape)}"
        )
    a = np.ascontiguousarray(a).reshape(shape)
    if name == "target":
        if a.dtype.kind != "i":
            raise Refused(f"{path}: target dtype {a.dtype}, expected <i8 or <i4")
        return torch.from_numpy(a.astype(np.int64)).cuda()
    if name == "lse":
        # A saved statistic: f32 whatever the storage dtype.
        if a.dtype != np.float32:
            raise Refused(f"{path}: lse dtype {a.dtype}, expected float32")
        return torch.from_numpy(a).cuda()
    if dtype == torch.bfloat16:
        if a.dtype.kind not in "iu" or a.dtype.itemsize != 2:
            raise Refused(f"{path}: bf16 must arrive as raw bits (<u2/<i2), got {a.dtype}")
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda()
    wanted = {torch.float32: np.float32, torch.float16: np.float16}[dtype]
    if a.dtype != wanted:
        raise Refused(f"{path}: dtype {a.dtype}, expected {np.dtype(wanted)}")
    return torch.from_numpy(a).cuda()


def save_npy(path, t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        a = t.view(torch.int16).numpy().view(np.uint16)
    else:
        a = t.numpy()
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        np.save(f, a, allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# --- the operators ----------------------------------------------------------


def eager_op(op, n):
    """fn(inputs: dict) -> tuple of outputs in OPS[op][2] order."""
    if op == "sum":
        return lambda a: (a["x"].sum(-1),)
    if op == "softmax":
        return lambda a: (torch.softmax(a["x"], -1),)
    if op == "rmsnorm":
        return lambda a: (F.rms_norm(a["x"], (n,), a.get("weight"), eps=RMSNORM_EPS),)
    if op == "layernorm":
        return lambda a: (
            F.layer_norm(a["x"], (n,), a.get("weight"), a.get("bias"), LAYERNORM_EPS),
        )
    if op == "residual_layernorm":

        def f(a):
            h = a["x"] + a["residual"]
            return (h, F.layer_norm(h, (n,), a.get("weight"), a.get("bias"), LAYERNORM_EPS))

        return f
    if op == "cross_entropy":
        return lambda a: (
            F.cross_entropy(a["x"], a["target"], reduction="none", ignore_index=IGNORE_INDEX),
        )
    if op == "add":
        return lambda a: (a["x"] + a["residual"],)
    raise Refused(f"unknown op {op!r}")


def import_liger():
    """Liger-Kernel's label (name and version), or Refused where it cannot
    be imported."""
    version = package_version("liger-kernel") or package_version("liger_kernel")
    try:
        import liger_kernel  # noqa: F401
    except Exception as e:  # noqa: BLE001
        raise Refused(f"mode 'liger': Liger-Kernel is not installed ({type(e).__name__}: {e})")
    return f"Liger-Kernel {version or '(unknown version)'}"


def liger_op(op, n, dtype, notes):
    """Liger-Kernel's functional forms; Refused where Liger has none."""
    label = import_liger()
    dev = "cuda"
    if op == "rmsnorm":
        from liger_kernel.transformers.functional import liger_rms_norm

        def f(a):
            w = a.get("weight")
            if w is None:
                w = a["_ones"]
            return (liger_rms_norm(a["x"], w, RMSNORM_EPS),)

        notes.append(f"{label} liger_rms_norm (default casting mode); absent weight passed as ones")
        return f, {"_ones": torch.ones(n, dtype=dtype, device=dev)}
    if op == "layernorm":
        from liger_kernel.transformers.functional import liger_layer_norm

        def f(a):
            w = a.get("weight")
            b = a.get("bias")
            return (
                liger_layer_norm(
                    a["x"],
                    a["_ones"] if w is None else w,
                    a["_zeros"] if b is None else b,
                    LAYERNORM_EPS,
                ),
            )

        notes.append(f"{label} liger_layer_norm; absent weight/bias passed as ones/zeros")
        return f, {
            "_ones": torch.ones(n, dtype=dtype, device=dev),
            "_zeros": torch.zeros(n, dtype=dtype, device=dev),
        }
    if op == "cross_entropy":
        from liger_kernel.transformers.functional import liger_cross_entropy

        notes.append(
            f"{label} liger_cross_entropy(reduction='none'); some Liger versions "
            "overwrite their input with the gradient, so the validated output is "
            "computed from a fresh copy of input set 0"
        )
        return (
            lambda a: (
                liger_cross_entropy(
                    a["x"], a["target"], ignore_index=IGNORE_INDEX, reduction="none"
                ),
            ),
            {},
        )
    if op == "softmax":
        try:
            from liger_kernel.ops.softmax import LigerSoftmaxFunction
        except Exception as e:  # noqa: BLE001
            raise Refused(f"{label} has no softmax ({type(e).__name__}: {e})")
        notes.append(f"{label} LigerSoftmaxFunction")
        return (lambda a: (LigerSoftmaxFunction.apply(a["x"]),)), {}
    raise Refused(f"{label} has no {op} operator")


def import_quack():
    """The quack package, or Refused with the reason it cannot be imported
    (it needs torch, the CUTLASS DSL and a CUDA toolkit of its own)."""
    try:
        import quack
    except Exception as e:  # noqa: BLE001 - report any import failure
        raise Refused(
            f"mode 'quack': Quack (quack-kernels) is not installed or not importable "
            f"({type(e).__name__}: {e})"
        )
    return quack


def quack_label(quack):
    return f"Quack {quack_version() or getattr(quack, '__version__', '(unknown version)')}"


def quack_op(op, n, dtype, notes):
    """Quack's forward kernels: (fn, prepare), where prepare(input set) gives
    the extra tensors fn reads from that set, made once before any timing.
    Refused where Quack has no forward with lanefold's semantics."""
    label = quack_label(import_quack())
    dev = "cuda"
    if op == "rmsnorm":
        from quack.rmsnorm import rmsnorm_fwd

        # rmsnorm_fwd(x, weight, ...) -> (out, residual_out, rstd); without a
        # residual, residual_out is x itself and rstd None (store_rstd=False).
        notes.append(
            f"{label} quack.rmsnorm.rmsnorm_fwd(x, weight, eps={RMSNORM_EPS}) "
            "(analytical config, not autotuned); weight in the input dtype"
        )
        return (
            lambda a: (rmsnorm_fwd(a["x"], a.get("weight"), eps=RMSNORM_EPS)[0],),
            lambda s: {},
        )
    if op in ("layernorm", "residual_layernorm"):

        def f32_columns(s):
            # Quack's LayerNorm takes float32 weight and bias only: exact
            # copies, made once per input set outside the timing.
            w, b = s.get("weight"), s.get("bias")
            return {
                "_w32": torch.ones(n, dtype=torch.float32, device=dev)
                if w is None
                else w.float().contiguous(),
                "_b32": None if b is None else b.float().contiguous(),
            }

        if op == "layernorm":
            from quack.rmsnorm import layernorm_fwd

            notes.append(
                f"{label} quack.rmsnorm.layernorm_fwd(x, weight, bias, eps={LAYERNORM_EPS}); "
                "weight and bias passed as float32 copies (Quack requires float32), "
                "made before the timing; absent weight passed as ones"
            )
            return (
                lambda a: (layernorm_fwd(a["x"], a["_w32"], a["_b32"], eps=LAYERNORM_EPS),),
                f32_columns,
            )
        if dtype != torch.float32:
            raise Refused(
                f"{label} residual_layernorm: Quack's fused residual LayerNorm "
                "normalizes the float32 sum x + residual, not h rounded to the "
                "storage dtype as lanefold's residual_layernorm does; served for "
                "f32 only, where the two agree"
            )
        from quack.rmsnorm import _rmsnorm_fwd

        def f(a):
            x = a["x"]
            y = torch.empty_like(x)
            h = torch.empty_like(x)
            # (x, weight, out, bias, rstd, mean, residual, residual_out, eps,
            # is_layernorm): the kernel rmsnorm_fwd and layernorm_fwd share.
            _rmsnorm_fwd(
                x, a["_w32"], y, a["_b32"], None, None, a["residual"], h, LAYERNORM_EPS, True
            )
            return (h, y)

        notes.append(
            f"{label} quack.rmsnorm._rmsnorm_fwd(x, weight, out, bias, None, None, "
            f"residual, residual_out, {LAYERNORM_EPS}, is_layernorm=True) (the fused "
            "residual LayerNorm under layernorm_fwd; not public API), f32 only; "
            "weight and bias as float32 copies made before the timing"
        )
        return f, f32_columns
    if op == "softmax":
        from quack.softmax import softmax_fwd

        notes.append(f"{label} quack.softmax.softmax_fwd(x)")
        return (lambda a: (softmax_fwd(a["x"]),)), (lambda s: {})
    if op == "cross_entropy":
        from quack.cross_entropy import cross_entropy_fwd

        notes.append(
            f"{label} quack.cross_entropy.cross_entropy_fwd(x, target, "
            f"ignore_index={IGNORE_INDEX}) (per-row loss, reduction none; an "
            "ignored row's loss is 0 as in PyTorch); the timed calls write the "
            "loss as float32, Quack's only loss dtype, cast to the input dtype "
            "after the timing for validation"
        )
        return (
            lambda a: (cross_entropy_fwd(a["x"], a["target"], ignore_index=IGNORE_INDEX),),
            lambda s: {},
        )
    raise Refused(f"{label} has no {op} operator")


# --- the backward operators -------------------------------------------------


def autograd_dx(forward, leaf, args, grads, extra=None):
    """(fn, prepare) timing the backward of `forward` alone. prepare, once
    per input set and outside the timing, makes the set's `leaf` input a
    leaf that requires grad (nothing else does), adds the tensors
    extra(set) makes, and runs forward(leaf, *args) to build the autograd
    graph; fn is torch.autograd.grad of those outputs with respect to the
    leaf, the set's `grads` as the outputs' gradients, keeping the graph
    for the next call."""

    def prepare(s):
        made = extra(s) if extra is not None else {}
        got = {**s, **made}
        x = s[leaf].detach().requires_grad_()
        outs = forward(x, *[got.get(a) for a in args])
        return {**made, "_leaf": x, "_outs": outs, "_grads": tuple(s[g] for g in grads)}

    def fn(a):
        return torch.autograd.grad(a["_outs"], a["_leaf"], a["_grads"], retain_graph=True)

    return fn, prepare


def zero_residual(s):
    # residual_layernorm_backward gets h, not x and residual: h = h + 0
    # gives autograd the forward's graph (its add, then LayerNorm).
    return {"_residual": torch.zeros_like(s["h"])}


def torch_backward(op, n, compiled):
    """The eager (or, with compiled, torch.compile) backward: (fn, prepare)."""
    wrap = (lambda f: torch.compile(f, dynamic=False)) if compiled else (lambda f: f)
    if op == "softmax_backward":
        # Autograd's own call: softmax saves its output and runs this.
        f = wrap(lambda dy, y: torch._softmax_backward_data(dy, y, -1, y.dtype))
        return (lambda a: (f(a["dy"], a["y"]),)), (lambda s: {})
    if op == "rmsnorm_backward":
        f = wrap(lambda x, w: (F.rms_norm(x, (n,), w, eps=RMSNORM_EPS),))
        return autograd_dx(f, "x", ["weight"], ["dy"])
    if op == "layernorm_backward":
        f = wrap(lambda x, w: (F.layer_norm(x, (n,), w, None, LAYERNORM_EPS),))
        return autograd_dx(f, "x", ["weight"], ["dy"])
    if op == "residual_layernorm_backward":

        def g(x, r, w):
            h = x + r
            return h, F.layer_norm(h, (n,), w, None, LAYERNORM_EPS)

        return autograd_dx(wrap(g), "h", ["_residual", "weight"], ["dh", "dy"], zero_residual)
    if op == "cross_entropy_backward":
        f = wrap(
            lambda x, t: (
                F.cross_entropy(x, t, reduction="none", ignore_index=IGNORE_INDEX),
            )
        )
        return autograd_dx(f, "x", ["target"], ["dloss"])
    raise Refused(f"unknown backward op {op!r}")


def liger_backward(op, n, notes):
    """Liger-Kernel's backward, as its autograd functions run it; Refused
    where Liger has none with lanefold's semantics."""
    label = import_liger()
    if op == "rmsnorm_backward":
        from liger_kernel.transformers.functional import liger_rms_norm

        notes.append(
            f"{label} liger_rms_norm (casting 'llama', in_place=True: dx written "
            "into dy, so the validated call reloads the inputs); its backward also "
            "computes dweight, which it cannot skip; absent weight passed as ones"
        )
        return autograd_dx(
            lambda x, w: (liger_rms_norm(x, w, RMSNORM_EPS),), "x", ["_w"], ["dy"], ones_weight(n)
        )
    if op == "layernorm_backward":
        from liger_kernel.transformers.functional import liger_layer_norm

        def extra(s):
            made = ones_weight(n)(s)
            made["_b"] = torch.zeros_like(made["_w"])
            return made

        notes.append(
            f"{label} liger_layer_norm; its backward also computes dweight and dbias, "
            "which it cannot skip; absent weight passed as ones, bias as zeros"
        )
        return autograd_dx(
            lambda x, w, b: (liger_layer_norm(x, w, b, LAYERNORM_EPS),),
            "x",
            ["_w", "_b"],
            ["dy"],
            extra,
        )
    if op == "softmax_backward":
        try:
            from liger_kernel.ops.softmax import _softmax_backward
            from liger_kernel.ops.utils import calculate_settings
        except Exception as e:  # noqa: BLE001
            raise Refused(f"{label} has no softmax backward ({type(e).__name__}: {e})")
        block, warps = calculate_settings(n)
        notes.append(
            f"{label} liger_kernel.ops.softmax._softmax_backward(dy, y, {block}, {warps}, "
            f"{n > block}) (what LigerSoftmaxFunction.backward runs, with its forward's "
            "settings; not public API)"
        )
        return (lambda a: (_softmax_backward(a["dy"], a["y"], block, warps, n > block),)), (
            lambda s: {}
        )
    if op == "cross_entropy_backward":
        from liger_kernel.transformers.functional import liger_cross_entropy

        def fn(a):
            x = a["_leaf"]
            loss = liger_cross_entropy(
                x, a["target"], ignore_index=IGNORE_INDEX, reduction="none"
            )
            return torch.autograd.grad(loss, x, a["dloss"])

        notes.append(
            f"{label} liger_cross_entropy(reduction='none') then torch.autograd.grad: "
            "Liger computes the gradient inside its forward (written over x) and its "
            "backward scales it by dloss, so each timed call is forward and backward, "
            "what a user runs; the validated call reloads the inputs"
        )
        return fn, lambda s: {"_leaf": s["x"].detach().requires_grad_()}
    raise Refused(
        f"{label} has no {op} with lanefold's semantics (no fused residual LayerNorm)"
        if op == "residual_layernorm_backward"
        else f"{label} has no {op}"
    )


def ones_weight(n):
    """extra(set) giving `_w`: the set's weight, or ones where it has none."""

    def extra(s):
        w = s.get("weight")
        if w is None:
            x = s.get("x", s.get("h"))
            w = torch.ones(n, dtype=x.dtype, device=x.device)
        return {"_w": w}

    return extra


def quack_backward(op, n, notes):
    """Quack's backward kernels, called as its autograd functions call them,
    the forward's saved statistics made before the timing; Refused where
    Quack has none."""
    label = quack_label(import_quack())
    if op in ("rmsnorm_backward", "layernorm_backward", "residual_layernorm_backward"):
        from quack.rmsnorm import _rmsnorm_bwd, layernorm_fwd, rmsnorm_fwd

        try:
            from quack.rmsnorm_config import get_sm_count
        except ImportError:
            from quack.rmsnorm import get_sm_count
        layer = op != "rmsnorm_backward"
        row = "h" if op == "residual_layernorm_backward" else "x"

        def prepare(s):
            x, w = s[row], s.get("weight")
            if layer:
                # Quack's LayerNorm takes float32 weights only (exact copies).
                w = torch.ones(n, device=x.device) if w is None else w.float().contiguous()
                _, rstd, mean = layernorm_fwd(
                    x, w, None, eps=LAYERNORM_EPS, return_rstd=True, return_mean=True
                )
            else:
                _, _, rstd = rmsnorm_fwd(x, w, eps=RMSNORM_EPS, store_rstd=True)
                mean = None
            return {"_w": w, "_rstd": rstd, "_mean": mean, "_sm": get_sm_count(n, x.device)}

        def fn(a):
            x = a[row]
            dx = torch.empty_like(x)
            # (x, weight, dout, rstd, dx, dw_partial, db_partial,
            # dresidual_out, dresidual, sm_count): no column partials.
            _rmsnorm_bwd(
                x, a["_w"], a["dy"], a["_rstd"], dx, None, None, a.get("dh"), None, a["_sm"],
                mean=a["_mean"], is_layernorm=layer,
            )
            return (dx,)

        what = "LayerNorm" if layer else "RMSNorm"
        notes.append(
            f"{label} quack.rmsnorm._rmsnorm_bwd, the {what} backward kernel its "
            "autograd function runs (not public API), asked for dx only (no dweight "
            "partials, as the other modes), rstd"
            + (" and mean" if layer else "")
            + " from its forward made before the timing"
            + ("; weight as a float32 copy" if layer else "")
            + ("; dh folded into dx by its dresidual_out input" if row == "h" else "")
        )
        return fn, prepare
    if op == "softmax_backward":
        from quack.softmax import softmax_bwd

        notes.append(f"{label} quack.softmax.softmax_bwd(dy, y)")
        return (lambda a: (softmax_bwd(a["dy"], a["y"]),)), (lambda s: {})
    if op == "cross_entropy_backward":
        from quack.cross_entropy import cross_entropy_bwd, cross_entropy_fwd

        def prepare(s):
            _, lse = cross_entropy_fwd(
                s["x"], s["target"], ignore_index=IGNORE_INDEX, return_lse=True
            )
            return {"_lse": lse, "_dloss32": s["dloss"].float()}

        notes.append(
            f"{label} quack.cross_entropy.cross_entropy_bwd(x, target, dloss, lse, "
            f"ignore_index={IGNORE_INDEX}); lse from cross_entropy_fwd made before the "
            "timing; dloss as a float32 copy (Quack's loss, so its gradient, is float32)"
        )
        return (
            lambda a: (
                cross_entropy_bwd(
                    a["x"], a["target"], a["_dloss32"], a["_lse"], ignore_index=IGNORE_INDEX
                ),
            ),
            prepare,
        )
    raise Refused(f"{label} has no {op}")


def backward_op(op, mode, n, notes):
    """(fn, prepare) of a backward op in `mode`: prepare(input set) gives
    the tensors fn reads beyond the set's inputs (the forward's graph or
    statistics), made once per set before any timing; fn(set) -> (dx,)."""
    op = SAME_AS.get(op, op)
    if mode == "liger":
        return liger_backward(op, n, notes)
    if mode == "quack":
        return quack_backward(op, n, notes)
    fn, prepare = torch_backward(op, n, mode == "compile")
    if op == "softmax_backward":
        notes.append("torch._softmax_backward_data(dy, y, -1, dtype), softmax's autograd call")
    else:
        notes.append(f"torch.autograd.grad of the {'compiled ' if mode == 'compile' else ''}"
                     "forward w.r.t. the row input, graph built before the timing")
    return fn, prepare


# --- timing -----------------------------------------------------------------


def sync():
    torch.cuda.synchronize()


def rotate(fn, sets, count, start=0):
    for k in range(start, start + count):
        fn(sets[k % len(sets)])


def timed_eager(fn, sets, count):
    """(host us, enqueue us, event us) around count eager calls."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    sync()
    start.record()
    t0 = time.perf_counter()
    rotate(fn, sets, count)
    t1 = time.perf_counter()
    end.record()
    sync()
    t2 = time.perf_counter()
    return (t2 - t0) * 1e6, (t1 - t0) * 1e6, start.elapsed_time(end) * 1e3


def capture(fn, sets, batch):
    """A CUDAGraph of batch calls (call k uses set k % sets), or raise."""
    g = torch.cuda.CUDAGraph()
    # Warm the side stream first, as torch's documentation asks.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        rotate(fn, sets, min(3, len(sets) + 2))
    torch.cuda.current_stream().wait_stream(s)
    sync()
    # Captured on the current stream where it is a side stream (a backward
    # case's: see case_context).
    cur = torch.cuda.current_stream()
    with torch.cuda.graph(g, stream=None if cur == torch.cuda.default_stream() else cur):
        for k in range(batch):
            out = fn(sets[k % len(sets)])
            del out
    sync()
    return g


def replay_us(g):
    """(event us, host us of the replay call) around one graph replay."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    sync()
    start.record()
    t0 = time.perf_counter()
    g.replay()
    enqueue_us = (time.perf_counter() - t0) * 1e6
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3, enqueue_us


def measure(fn, sets, samples, single_samples, sample_ms, warmup_ms, notes):
    target_us = max(sample_ms, 0.01) * 1e3
    # Warm-up, excluded (compilation already happened in run_case).
    deadline = time.perf_counter() + warmup_ms / 1e3
    k = 0
    while True:
        rotate(fn, sets, 1, start=k)
        k += 1
        if time.perf_counter() >= deadline and k >= 2:
            break
    sync()

    # Size the batches: grow an eager batch until it takes about 1 ms or
    # a quarter of a sample, whichever is less.
    probe = 1
    while True:
        host_us, _, event_us = timed_eager(fn, sets, probe)
        if host_us >= min(1000.0, target_us / 4) or probe >= MAX_E2E_CALLS:
            break
        probe *= 2
    e2e_batch = max(1, min(MAX_E2E_CALLS, round(target_us / (host_us / probe))))
    # Eager event time per call bounds the graph's per-call time from above.
    gpu_batch = max(1, min(MAX_GRAPH_CALLS, round(target_us / max(event_us / probe, 1e-3))))

    graph = None
    try:
        graph = capture(fn, sets, gpu_batch)
        t, _ = replay_us(graph)
        if t < 0.5 * target_us and gpu_batch < MAX_GRAPH_CALLS:
            resized = max(1, min(MAX_GRAPH_CALLS, round(gpu_batch * target_us / max(t, 1e-3))))
            if resized > gpu_batch:
                del graph
                graph = None
                gpu_batch = resized
                graph = capture(fn, sets, gpu_batch)
                replay_us(graph)
    except Exception as e:  # noqa: BLE001 - any capture failure falls back
        graph = None
        capture_error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        notes.append(
            f"CUDA graph capture failed ({capture_error}); "
            "gpu phase timed as eager calls between events"
        )
        try:
            sync()
        except Exception as e2:  # noqa: BLE001
            raise RuntimeError(f"the device is unusable after a failed graph capture: {e2}")
        gpu_batch = max(1, min(MAX_E2E_CALLS, round(target_us / max(event_us / probe, 1e-3))))

    graphed = graph is not None
    gpu, gpu_enqueue = [], []
    for _ in range(samples):
        if graph is not None:
            t, enq_us = replay_us(graph)
        else:
            _, enq_us, t = timed_eager(fn, sets, gpu_batch)
        gpu.append({"batch": gpu_batch, "total_us": t})
        gpu_enqueue.append(enq_us)
    del graph

    e2e, enqueue = [], []
    for _ in range(samples):
        host_us, enq_us, _ = timed_eager(fn, sets, e2e_batch)
        e2e.append({"batch": e2e_batch, "total_us": host_us})
        enqueue.append(enq_us)

    single = []
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for i in range(single_samples):
        a = sets[i % len(sets)]
        # Timed twice, separately, as lanefold's own side is: device events
        # around one call, then the host clock of a call plus synchronize
        # with no event in the window.
        sync()
        start.record()
        fn(a)
        end.record()
        end.synchronize()
        t0 = time.perf_counter()
        fn(a)
        sync()
        host_us = (time.perf_counter() - t0) * 1e6
        single.append({"gpu_us": start.elapsed_time(end) * 1e3, "host_us": host_us})

    return {
        "gpu": gpu,
        "gpu_graph": graphed,
        "gpu_enqueue_us": gpu_enqueue,
        "e2e": e2e,
        "e2e_enqueue_us": enqueue,
        "single": single,
    }


def number(req, key, kind, minimum):
    v = req.get(key)
    if kind is int:
        ok = isinstance(v, int) and not isinstance(v, bool)
    else:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or v < minimum:
        raise Refused(f"'{key}' must be a {kind.__name__} >= {minimum}, got {v!r}")
    return v


def run_case(req):
    mode = req.get("mode", "eager")
    if mode not in MODES:
        raise Refused(f"unknown mode {mode!r} (expected one of {', '.join(MODES)})")
    if mode == "quack":
        # Before torch's checks: the refusal names Quack on any machine.
        import_quack()
    if IMPORT_ERROR is not None:
        raise Refused(f"import torch failed: {IMPORT_ERROR}")
    if not torch.cuda.is_available():
        raise Refused("torch sees no CUDA device")
    op = req.get("op")
    if op not in OPS:
        raise Refused(f"unknown op {op!r} (expected one of {', '.join(OPS)})")
    dtype = storage_dtype(req.get("dtype"))
    rows = number(req, "rows", int, 1)
    n = number(req, "n", int, 1)
    samples = number(req, "samples", int, 1)
    single_samples = number(req, "single_samples", int, 1) if "single_samples" in req else samples
    sample_ms = float(number(req, "sample_ms", float, 0))
    warmup_ms = float(number(req, "warmup_ms", float, 0))
    out_dir = req.get("outputs_dir")
    if not isinstance(out_dir, str) or not os.path.isabs(out_dir):
        raise Refused(f"'outputs_dir' must be an absolute path, got {out_dir!r}")
    if "input_sets" in req and req["input_sets"] is not None:
        paths = req["input_sets"]
        if not isinstance(paths, list) or not paths:
            raise Refused("'input_sets' must be a non-empty list of {name: path}")
    else:
        paths = [req.get("inputs")]
    required, optional, out_names = OPS[op]
    backward = is_backward(op)
    notes = []
    if mode == "compile":
        # Fresh Dynamo caches per case: the op functions share code
        # objects across cases, and hitting the recompile limit would
        # silently fall back to eager.
        torch._dynamo.reset()
    # Before any input is loaded: a case a mode cannot do is refused as such.
    if backward:
        fn, prepare = backward_op(op, mode, n, notes)
    elif mode == "quack":
        fn, prepare = quack_op(op, n, dtype, notes)
    sets = []
    for i, p in enumerate(paths):
        if not isinstance(p, dict):
            raise Refused(f"input set {i} must be an object {{name: path}}, got {p!r}")
        for name in required:
            if name not in p:
                raise Refused(f"input set {i}: {op} needs input {name!r}")
        for name in p:
            if name not in required and name not in optional:
                raise Refused(f"input set {i}: {op} has no input {name!r}")
        sets.append(
            {name: load_npy(path, name, dtype, input_shape(name, rows, n)) for name, path in p.items()}
        )
    if "target" in required:
        for s in sets:
            t = s["target"]
            bad = ((t < 0) | (t >= n)) & (t != IGNORE_INDEX)
            if bool(bad.any()):
                raise Refused(f"target indices out of range [0, {n}) (and not {IGNORE_INDEX})")

    t0 = time.perf_counter()
    if backward or mode == "quack":
        for s in sets:
            s.update(prepare(s))
    elif mode == "liger":
        fn, extra = liger_op(op, n, dtype, notes)
        for s in sets:
            s.update(extra)
    else:
        fn = eager_op(op, n)
    if mode == "compile":
        if not backward:
            fn = torch.compile(fn, dynamic=False)
        notes.append("torch.compile(mode=None, dynamic=False); compilation excluded")

    def check(outs):
        if not isinstance(outs, tuple) or len(outs) != len(out_names):
            raise RuntimeError(f"{op} returned {type(outs).__name__}, expected {len(out_names)} outputs")
        for name, t in zip(out_names, outs):
            want = output_shape(op, name, rows, n)
            if tuple(t.shape) != want:
                raise Refused(
                    f"{mode} {op}: output {name!r} has shape {list(t.shape)}, expected {list(want)}"
                )

    # First call: checks the outputs' shapes before any timing and covers
    # torch.compile's compilation (excluded from every phase, as is making
    # the backward's forward graph).
    check(fn(sets[0]))
    sync()
    first_s = time.perf_counter() - t0
    if first_s > 1.0:
        notes.append(f"first call (compilation) took {first_s:.1f} s, excluded")

    timing = measure(fn, sets, samples, single_samples, sample_ms, warmup_ms, notes)

    # The validated outputs: a final call on input set 0.
    final = sets[0]
    if mode == "liger" and (op == "cross_entropy" or backward):
        # Reloaded: Liger's cross entropy writes its gradient over x, and
        # its in-place rmsnorm backward dx over dy.
        final = {
            name: load_npy(path, name, dtype, input_shape(name, rows, n))
            for name, path in paths[0].items()
        }
        if backward:
            final.update(prepare(final))
        else:
            final.update(extra)
    outs = fn(final)
    sync()
    check(outs)
    written = {}
    for name, t in zip(out_names, outs):
        if t.dtype != dtype:
            notes.append(f"output {name!r} came as {t.dtype}; cast to {dtype}")
            t = t.to(dtype)
        path = os.path.join(out_dir, f"{name}.npy")
        save_npy(path, t)
        written[name] = path
    reply = {"ok": True, "mode": mode, "outputs": written}
    reply.update(timing)
    reply["notes"] = notes
    return reply


def serve(proto):
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except ValueError as e:
            reply = {"ok": False, "error": f"bad JSON request: {e}"}
        else:
            if not isinstance(req, dict):
                reply = {"ok": False, "error": "a request must be a JSON object"}
            elif req.get("cmd") == "quit":
                return
            elif req.get("cmd") == "hello":
                try:
                    reply = hello()
                except Exception as e:  # noqa: BLE001
                    reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            elif "cmd" in req:
                reply = {"ok": False, "error": f"unknown cmd {req['cmd']!r}"}
            else:
                reply = run_guarded(req)
        proto.write(json.dumps(reply) + "\n")
        proto.flush()


@contextlib.contextmanager
def case_context(op):
    """A forward case runs under inference_mode. A backward case needs
    autograd, and runs on a side stream: autograd launches each backward op
    on its forward op's stream, and the legacy default stream cannot join a
    CUDA graph capture."""
    if not is_backward(op):
        with torch.inference_mode():
            yield
    elif torch.cuda.is_available():
        with torch.cuda.stream(torch.cuda.Stream()):
            yield
    else:
        yield


def run_guarded(req):
    try:
        if torch is None:
            return run_case(req)
        with case_context(req.get("op")):
            return run_case(req)
    except Refused as e:
        return {"ok": False, "error": str(e)}
    except Exception as e:  # noqa: BLE001 - never crash on a request
        log(traceback.format_exc())
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
    finally:
        if torch is not None:
            try:
                torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001
                pass


def main():
    # The protocol gets a private copy of stdout; fd 1 becomes stderr so no
    # library (or compiler subprocess) can corrupt the protocol stream.
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import_torch()
    if IMPORT_ERROR is not None:
        log(f"import torch failed: {IMPORT_ERROR}")
    serve(proto)
    proto.flush()


if __name__ == "__main__":
    main()
