#!/usr/bin/env python3
"""Forward and backward of lanefold's PyTorch package (rms_norm, layer_norm,
softmax, cross_entropy through autograd) against torch eager, torch.compile,
Liger-Kernel and Quack, on training shapes.

A step is one layer's share of a training step: the forward on x (weight
and bias are parameters: x, weight and bias all require grad), then
torch.autograd.grad of the output, with a fixed upstream gradient dy, with
respect to x, weight and bias; cross_entropy's output is its mean loss
(ignore_index -100, every eighth row ignored), differentiated with respect
to the logits.

Timing: CUDA events around a batch of steps (sized so one sample takes
about --sample-ms), --samples rounds with the sides in a rotating order;
warm-up and torch.compile's compilation excluded. With --graphs the batch
is captured once in a CUDA graph and replayed between the events; a side
whose capture fails (one that synchronizes, e.g. Liger's cross entropy)
runs eager and says so. Every sample is kept (per step: total_us / batch).

Effective bandwidth (TB/s) = step bytes / p50 step time, where step bytes
is the unfused minimum, the same for every side: the forward reads its
inputs and writes its output once, the backward reads the forward's input
(softmax: its output) and the upstream gradient and writes the input
gradients once, each in the storage dtype (targets as 8 bytes); per-row
statistics (mean, rstd, lse) are not counted. rms_norm: 5 row tensors and
3 column vectors; layer_norm: 5 and 5; softmax: 5; cross_entropy: 3 row
tensors (x twice, dx) and the targets twice.

Peak memory: torch.cuda.reset_peak_memory_stats(), then one step:
max_memory_allocated() minus the memory allocated just before it, i.e.
what the step needs beyond its resident inputs (each side has its own
copies of x, dy and the parameters).

--check: one step per side on fresh inputs; the output and every gradient
against float64 torch autograd (normwise relative error); exit 1 past the
tolerance. With --device cpu it runs on the CPU (lanefold's executor and
torch; Liger and Quack need CUDA).

Writes results.json (raw samples, environment) and results.md into
--output and prints the table. Exit 2 without CUDA (timing) or on bad
arguments.
"""

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_common as common  # noqa: E402

OPS = ("rms_norm", "layer_norm", "softmax", "cross_entropy")
SIDES = ("lanefold", "torch-eager", "torch-compile", "liger", "quack")
DTYPES = ("bf16", "f32")
RMS_EPS = 1e-6
LN_EPS = 1e-5
IGNORE_INDEX = -100
TOLERANCE = {"f32": 1e-4, "bf16": 2e-2}

torch = None
F = None


def parse_shapes(text, what):
    shapes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            rows, n = (int(v) for v in part.lower().split("x"))
        except ValueError:
            common.die(f"{what}: {part!r} is not ROWSxN (e.g. 16384x4096)")
        if rows < 1 or n < 1:
            common.die(f"{what}: {part!r} needs positive rows and n")
        shapes.append((rows, n))
    if not shapes:
        common.die(f"{what}: no shapes given")
    return shapes


def dtype_of(name):
    return {"bf16": torch.bfloat16, "f32": torch.float32}[name]


def step_bytes(op, rows, n, elem):
    """The unfused minimum bytes of one step (see the module's docstring)."""
    rn = rows * n * elem
    if op == "rms_norm":
        return 5 * rn + 3 * n * elem
    if op == "layer_norm":
        return 5 * rn + 5 * n * elem
    if op == "softmax":
        return 5 * rn
    return 3 * rn + 2 * 8 * rows


def make_inputs(op, rows, n, dtype, device, seed):
    """x in [-2, 2), weight in [0.5, 1.5), bias in [-0.5, 0.5), dy in [-1, 1),
    targets in range with every eighth row ignored."""
    g = torch.Generator(device=device).manual_seed(seed)

    def uniform(shape, lo, hi):
        return (torch.rand(shape, generator=g, device=device) * (hi - lo) + lo).to(dtype)

    a = {"x": uniform((rows, n), -2.0, 2.0)}
    if op in ("rms_norm", "layer_norm"):
        a["weight"] = uniform((n,), 0.5, 1.5)
    if op == "layer_norm":
        a["bias"] = uniform((n,), -0.5, 0.5)
    if op == "cross_entropy":
        t = torch.randint(0, n, (rows,), generator=g, device=device)
        t[::8] = IGNORE_INDEX
        a["target"] = t
    else:
        a["dy"] = uniform((rows, n), -1.0, 1.0)
    return a


def torch_forward(op, n):
    if op == "rms_norm":
        return lambda d: F.rms_norm(d["x"], (n,), d["weight"], eps=RMS_EPS)
    if op == "layer_norm":
        return lambda d: F.layer_norm(d["x"], (n,), d["weight"], d["bias"], LN_EPS)
    if op == "softmax":
        return lambda d: torch.softmax(d["x"], -1)
    return lambda d: F.cross_entropy(d["x"], d["target"], reduction="mean", ignore_index=IGNORE_INDEX)


def quack_layer_norm():
    """Quack has LayerNorm kernels but no autograd function: its forward
    (saving mean and rstd) and backward (dx, dweight, dbias) as one."""
    from quack.rmsnorm import layernorm_bwd, layernorm_fwd

    class QuackLayerNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            y, rstd, mean = layernorm_fwd(x, w, b, eps=LN_EPS, return_rstd=True, return_mean=True)
            ctx.save_for_backward(x, w, rstd, mean)
            return y

        @staticmethod
        def backward(ctx, dy):
            x, w, rstd, mean = ctx.saved_tensors
            dx, dw, db = layernorm_bwd(x, w, dy.contiguous(), rstd, mean, has_bias=True)
            return dx, dw, db

    return lambda d: QuackLayerNorm.apply(d["x"], d["weight"], d["bias"])


def side_forward(side, op, n, notes, device):
    """(forward(d) -> output, parameter dtype or None): the side's forward,
    the function autograd differentiates. Raises RuntimeError with the
    reason where the side cannot run op."""
    if side == "lanefold":
        import lanefold

        notes.append(f"lanefold.{op}")
        if op == "rms_norm":
            return (lambda d: lanefold.rms_norm(d["x"], d["weight"], eps=RMS_EPS)), None
        if op == "layer_norm":
            return (lambda d: lanefold.layer_norm(d["x"], d["weight"], d["bias"], LN_EPS)), None
        if op == "softmax":
            return (lambda d: lanefold.softmax(d["x"], dim=-1)), None
        return (
            lambda d: lanefold.cross_entropy(d["x"], d["target"], ignore_index=IGNORE_INDEX)
        ), None
    if side == "torch-eager":
        return torch_forward(op, n), None
    if side == "torch-compile":
        # Fresh Dynamo caches per case: the forward lambdas share code
        # objects, and the recompile limit would fall back to eager.
        torch._dynamo.reset()
        notes.append("torch.compile(dynamic=False) of the eager forward")
        return torch.compile(torch_forward(op, n), dynamic=False), None
    if side == "liger":
        lk, why = common.optional_module("liger_kernel.transformers.functional")
        if lk is None:
            raise RuntimeError(why)
        if op == "rms_norm":
            notes.append("liger_rms_norm (casting 'llama', in_place=True: dx written over dy)")
            return (lambda d: lk.liger_rms_norm(d["x"], d["weight"], RMS_EPS)), None
        if op == "layer_norm":
            notes.append("liger_layer_norm")
            return (lambda d: lk.liger_layer_norm(d["x"], d["weight"], d["bias"], LN_EPS)), None
        if op == "softmax":
            from liger_kernel.ops.softmax import LigerSoftmaxFunction

            notes.append("LigerSoftmaxFunction")
            return (lambda d: LigerSoftmaxFunction.apply(d["x"])), None
        notes.append(
            "liger_cross_entropy(reduction='mean'): the gradient computed in the "
            "forward and written over x"
        )
        return (
            lambda d: lk.liger_cross_entropy(
                d["x"], d["target"], ignore_index=IGNORE_INDEX, reduction="mean"
            )
        ), None
    if side == "quack":
        if device.type != "cuda":
            raise RuntimeError("Quack needs CUDA")
        q, why = common.optional_module("quack")
        if q is None:
            raise RuntimeError(why)
        if op == "rms_norm":
            from quack.rmsnorm import rmsnorm

            notes.append("quack.rmsnorm.rmsnorm")
            return (lambda d: rmsnorm(d["x"], d["weight"], eps=RMS_EPS)), None
        if op == "layer_norm":
            notes.append(
                "quack.rmsnorm.layernorm_fwd / layernorm_bwd in an autograd function; "
                "weight and bias float32 (Quack's LayerNorm takes no other)"
            )
            return quack_layer_norm(), torch.float32
        if op == "softmax":
            from quack.softmax import softmax

            notes.append("quack.softmax.softmax")
            return (lambda d: softmax(d["x"])), None
        from quack.cross_entropy import cross_entropy

        notes.append("quack.cross_entropy.cross_entropy(reduction='mean') (float32 loss)")
        return (
            lambda d: cross_entropy(d["x"], d["target"], ignore_index=IGNORE_INDEX, reduction="mean")
        ), None
    raise ValueError(side)


class Side:
    """One side of a case: its own leaves (x, parameters) and dy, its step."""

    def __init__(self, name, op, n, inputs):
        self.name, self.op, self.notes = name, op, []
        device = inputs["x"].device
        self.forward, param_dtype = side_forward(name, op, n, self.notes, device)
        d = {}
        for k, v in inputs.items():
            if k in ("weight", "bias") and param_dtype is not None:
                v = v.to(param_dtype)
            # Own copies: some sides write over x (Liger's cross entropy) or
            # dy (Liger's rmsnorm).
            d[k] = v if k == "target" else v.detach().clone()
        self.wrt = [k for k in ("x", "weight", "bias") if k in d]
        for k in self.wrt:
            d[k].requires_grad_()
        self.d = d

    def step(self):
        out = self.forward(self.d)
        grads = torch.autograd.grad(out, [self.d[k] for k in self.wrt], self.d.get("dy"))
        return out, grads


def reference(op, n, inputs):
    """(output, {name: gradient}) in float64 by torch autograd."""
    d = {k: (v if k == "target" else v.detach().double()) for k, v in inputs.items()}
    wrt = [k for k in ("x", "weight", "bias") if k in d]
    for k in wrt:
        d[k].requires_grad_()
    out = torch_forward(op, n)(d)
    grads = torch.autograd.grad(out, [d[k] for k in wrt], d.get("dy"))
    return out.detach(), dict(zip(wrt, grads))


def run_check(args, device):
    failures, rows_out = [], []
    for op, dtype_name, (rows, n) in cases(args):
        inputs = make_inputs(op, rows, n, dtype_of(dtype_name), device, args.seed)
        want_out, want_grads = reference(op, n, inputs)
        for name in args.sides:
            label = f"{op} {dtype_name} {rows}x{n} {name}"
            try:
                side = Side(name, op, n, inputs)
                out, grads = side.step()
            except Exception as e:  # noqa: BLE001 - reported, the rest goes on
                print(f"{label}: skipped ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
                rows_out.append({"case": label, "skipped": f"{type(e).__name__}: {e}"})
                continue
            errs = {"output": common.rel_err(out.float(), want_out)}
            for k, g in zip(side.wrt, grads):
                errs["d" + k] = common.rel_err(g.float(), want_grads[k])
            tol = TOLERANCE[dtype_name]
            ok = all(math.isfinite(e) and e <= tol for e in errs.values())
            text = ", ".join(f"{k} {e:.2e}" for k, e in errs.items())
            print(f"{label}: {text} (tolerance {tol:g}) {'ok' if ok else 'FAIL'}")
            rows_out.append({"case": label, "rel_err": errs, "tolerance": tol, "pass": ok})
            if not ok:
                failures.append(label)
    return failures, rows_out


def cases(args):
    for op in args.ops:
        for dtype_name in args.dtypes:
            for shape in args.ce_shapes if op == "cross_entropy" else args.shapes:
                yield op, dtype_name, shape


# --- timing -----------------------------------------------------------------


def events_us(fn):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def steps(side, count):
    def run():
        for _ in range(count):
            out, grads = side.step()
            del out, grads

    return run


def prepare_timing(side, args):
    """Warm-up (the first step, compilation included, timed apart), peak
    memory, batch size and, with --graphs, the captured batch."""
    t0 = time.perf_counter()
    steps(side, 1)()
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    if first_s > 1.0:
        side.notes.append(f"first step (compilation) took {first_s:.1f} s, excluded")
    deadline = time.perf_counter() + args.warmup_ms / 1e3
    while time.perf_counter() < deadline:
        # Synchronized: the host must not queue seconds of steps ahead.
        steps(side, 1)()
        torch.cuda.synchronize()

    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    steps(side, 1)()
    torch.cuda.synchronize()
    side.peak_bytes = torch.cuda.max_memory_allocated() - base
    side.resident_bytes = base

    target_us = args.sample_ms * 1e3
    probe = 1
    while True:
        t = events_us(steps(side, probe))
        if t >= min(1000.0, target_us / 4) or probe >= 4096:
            break
        probe *= 2
    side.batch = max(1, min(20000, round(target_us / (t / probe))))
    side.graph = None
    if args.graphs:
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                steps(side, 3)()
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                steps(side, side.batch)()
            torch.cuda.synchronize()
            side.graph = g
        except Exception as e:  # noqa: BLE001 - that side runs eager
            first = str(e).splitlines()[0] if str(e) else ""
            side.notes.append(f"CUDA graph capture failed ({type(e).__name__}: {first}); eager")
            torch.cuda.synchronize()


def sample_us(side):
    if side.graph is not None:
        return events_us(side.graph.replay)
    return events_us(steps(side, side.batch))


def run_timing(args, device):
    results = []
    for op, dtype_name, (rows, n) in cases(args):
        dtype = dtype_of(dtype_name)
        case = {
            "op": op, "dtype": dtype_name, "rows": rows, "n": n,
            "step_bytes": step_bytes(op, rows, n, torch.finfo(dtype).bits // 8),
            "sides": {},
        }
        inputs = make_inputs(op, rows, n, dtype, device, args.seed)
        if "lanefold" in args.sides:
            import lanefold

            lf = {"rms_norm": "rmsnorm", "layer_norm": "layernorm"}.get(op, op)
            case["lanefold_plans"] = {
                "forward": lanefold.describe_plan(lf, inputs["x"]),
                "backward": lanefold.describe_plan(lf + "_backward", inputs["x"]),
            }
        live = []
        for name in args.sides:
            try:
                side = Side(name, op, n, inputs)
                prepare_timing(side, args)
                live.append(side)
            except Exception as e:  # noqa: BLE001 - recorded, the rest goes on
                first = str(e).splitlines()[0] if str(e) else ""
                case["sides"][name] = {"error": f"{type(e).__name__}: {first}"}
                print(f"{op} {dtype_name} {rows}x{n} {name}: did not run ({type(e).__name__}: {first})",
                      file=sys.stderr)
        samples = {s.name: [] for s in live}
        for r in range(args.samples):
            k = r % len(live) if live else 0
            for side in live[k:] + live[:k]:
                samples[side.name].append({"batch": side.batch, "total_us": sample_us(side)})
        for side in live:
            per_step = [s["total_us"] / s["batch"] for s in samples[side.name]]
            p50 = statistics.median(per_step)
            case["sides"][side.name] = {
                "samples": samples[side.name],
                "p50_us": p50,
                "min_us": min(per_step),
                "max_us": max(per_step),
                "tb_s": case["step_bytes"] / (p50 * 1e-6) / 1e12,
                "peak_bytes": side.peak_bytes,
                "resident_bytes": side.resident_bytes,
                "graph": side.graph is not None,
                "notes": side.notes,
            }
            side.graph = None
        del live
        torch.cuda.empty_cache()
        results.append(case)
        print(markdown([case], header=len(results) == 1), end="", flush=True)
    return results


def markdown(results, header=True):
    lines = []
    if header:
        lines += [
            "| op | dtype | rows x n | side | p50 µs/step | range µs | TB/s | peak extra MiB | vs lanefold | graph |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
    for c in results:
        lf = c["sides"].get("lanefold", {}).get("p50_us")
        for name, s in c["sides"].items():
            shape = f"{c['rows']}x{c['n']}"
            if "error" in s:
                lines.append(f"| {c['op']} | {c['dtype']} | {shape} | {name} | — | — | — | — | — | {s['error']} |")
                continue
            ratio = f"{s['p50_us'] / lf:.3f}" if lf else "—"
            lines.append(
                f"| {c['op']} | {c['dtype']} | {shape} | {name} | {s['p50_us']:.1f} | "
                f"{s['min_us']:.1f}–{s['max_us']:.1f} | {s['tb_s']:.2f} | "
                f"{s['peak_bytes'] / 2**20:.1f} | {ratio} | {'yes' if s['graph'] else 'no'} |"
            )
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Bytes, peak memory and phases: see the module docstring (python3 -c "
        "'import train_bench; help(train_bench)' from this folder).",
    )
    ap.add_argument("--ops", default=",".join(OPS), help=f"comma separated, of {', '.join(OPS)}")
    ap.add_argument("--dtypes", default="bf16,f32", help="bf16 and/or f32")
    ap.add_argument("--shapes", default="4096x4096,16384x4096,65536x4096",
                    help="ROWSxN list for the norms and softmax")
    ap.add_argument("--ce-shapes", default="4096x32000,16384x32000,8192x128256",
                    help="ROWSxVOCAB list for cross_entropy")
    ap.add_argument("--sides", default=",".join(SIDES),
                    help=f"comma separated, of {', '.join(SIDES)} (a side that cannot run says why)")
    ap.add_argument("--samples", type=int, default=7, help="rounds (samples per side)")
    ap.add_argument("--sample-ms", type=float, default=20.0, help="GPU time of one sample")
    ap.add_argument("--warmup-ms", type=float, default=100.0)
    ap.add_argument("--graphs", action="store_true", help="replay each batch as a CUDA graph")
    ap.add_argument("--check", action="store_true",
                    help="compare outputs and gradients with float64 torch instead of timing")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: only with --check (lanefold's CPU executor and torch)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", help="folder for results.json and results.md")
    args = ap.parse_args()
    for key, allowed in (("ops", OPS), ("dtypes", DTYPES), ("sides", SIDES)):
        got = [v.strip() for v in getattr(args, key).split(",") if v.strip()]
        bad = [v for v in got if v not in allowed]
        if bad or not got:
            common.die(f"--{key}: {', '.join(bad) or 'nothing given'} (expected some of {', '.join(allowed)})")
        setattr(args, key, got)
    args.shapes = parse_shapes(args.shapes, "--shapes")
    args.ce_shapes = parse_shapes(args.ce_shapes, "--ce-shapes")
    if args.samples < 1 or args.sample_ms <= 0 or args.warmup_ms < 0:
        common.die("--samples must be >= 1, --sample-ms > 0, --warmup-ms >= 0")
    if args.device == "cpu" and not args.check:
        common.die("timing needs CUDA (events, graphs); --device cpu runs --check only")

    global torch, F
    torch = common.import_torch()
    import torch.nn.functional as functional

    F = functional
    device = common.device_of(args.device)
    _, why = common.optional_module("lanefold")
    if why and "lanefold" in args.sides:
        common.die(f"{why}; install the package (e.g. pip install --no-deps lanefold-*.whl)")
    if args.output:
        os.makedirs(args.output, exist_ok=True)
    env = common.environment(device)
    q, _ = common.optional_module("quack") if "quack" in args.sides and args.device == "cuda" else (None, None)
    if q is not None and env["quack"] is None:
        env["quack"] = str(getattr(q, "__version__", "unknown"))
    doc = {
        "schema": "lanefold-train-bench/1",
        "environment": env,
        "config": {k: v for k, v in vars(args).items() if k != "output"},
    }
    if args.check:
        failures, checks = run_check(args, device)
        doc["check"] = checks
        if args.output:
            common.write_json(os.path.join(args.output, "check.json"), doc)
        if failures:
            print(f"FAILED: {len(failures)} past the tolerance: " + "; ".join(failures))
            return 1
        checked = sum("pass" in c for c in checks)
        if not checked:
            print("FAILED: no side could run (see the reasons above)")
            return 1
        print(f"all {checked} checked sides within tolerance")
        return 0
    doc["bytes_rule"] = (
        "unfused minimum per step, storage dtype: forward inputs read and output "
        "written once, backward reads the forward's input (softmax: output) and the "
        "upstream gradient and writes the input gradients once; per-row statistics "
        "not counted"
    )
    doc["cases"] = run_timing(args, device)
    if args.output:
        common.write_json(os.path.join(args.output, "results.json"), doc)
        with open(os.path.join(args.output, "results.md"), "w") as f:
            f.write(f"# train_bench: {env['device']}, torch {env['torch']}\n\n")
            f.write(markdown(doc["cases"]))
            f.write(f"\nTB/s: {doc['bytes_rule']}. Peak extra: max_memory_allocated "
                    "during one step minus the memory allocated before it.\n")
        print(f"wrote {args.output}/results.json and results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
