#!/usr/bin/env python3
"""End-to-end checks of python/torch_peer.py through its JSON-lines protocol.

Run with plain `python3 python/test_torch_peer.py`. Without PyTorch only
the protocol checks that need no torch run. With PyTorch (a CPU build is
enough) the backward operators' eager and torch.compile forms are also
checked in this process against float64 autograd, and a missing Liger or
Quack must refuse them by name. The cases through the protocol need a CUDA
device and are skipped without one, with a message; the exit status is 0
unless a check fails.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "torch_peer.py")

# op -> its inputs, as lanefold's programs name them.
OPS = {
    "sum": ["x"],
    "softmax": ["x"],
    "rmsnorm": ["x", "weight"],
    "layernorm": ["x", "weight", "bias"],
    "residual_layernorm": ["x", "residual", "weight", "bias"],
    "cross_entropy": ["x", "target"],
    "add": ["x", "residual"],
    "rmsnorm_backward": ["x", "dy", "weight"],
    "layernorm_backward": ["x", "dy", "weight"],
    "residual_layernorm_backward": ["h", "dy", "dh", "weight"],
    "softmax_backward": ["y", "dy"],
    "cross_entropy_backward": ["x", "target", "lse", "dloss"],
    "cross_entropy_backward_recompute": ["x", "target", "dloss"],
}
BACKWARD = [op for op in OPS if "_backward" in op]


class Peer:
    def __init__(self):
        self.p = subprocess.Popen(
            [sys.executable, "-u", SCRIPT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, obj):
        line = obj if isinstance(obj, str) else json.dumps(obj)
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        reply = self.p.stdout.readline()
        assert reply, "the peer closed its output"
        return json.loads(reply)

    def close(self):
        self.p.stdin.write('{"cmd": "quit"}\n')
        self.p.stdin.flush()
        assert self.p.wait(timeout=60) == 0


def check_protocol_without_torch():
    peer = Peer()
    assert peer.ask("not json")["ok"] is False
    assert peer.ask("[1, 2]")["ok"] is False
    assert peer.ask({"cmd": "nope"})["ok"] is False
    r = peer.ask({"op": "bogus"})
    assert r["ok"] is False and r["error"], r
    hello = peer.ask({"cmd": "hello"})
    assert "ok" in hello
    if hello.get("ok"):
        assert "quack" in hello, hello
    if not quack_importable():
        # Refused, naming Quack, before any torch or CUDA check.
        for op in ("rmsnorm", "rmsnorm_backward"):
            r = peer.ask({"op": op, "mode": "quack"})
            assert r["ok"] is False and "Quack" in r["error"], r
            assert "not installed" in r["error"], r
    peer.close()
    print("protocol checks: ok")
    return hello


def quack_importable():
    """Can this interpreter import quack? (In a child: importing it loads
    the CUTLASS DSL.)"""
    if importlib.util.find_spec("quack") is None:
        return False
    return subprocess.run([sys.executable, "-c", "import quack"], capture_output=True).returncode == 0


def random_inputs(op, rows, n, dtype, g):
    """Every input of op: values in [-2, 2), weights in [0.5, 1.5), targets
    in range with every eighth row ignored (-100)."""
    import torch

    a = {}
    for name in OPS[op]:
        if name == "target":
            t = torch.randint(0, n, (rows,), generator=g)
            t[::8] = -100
        elif name in ("weight", "bias"):
            t = (torch.rand(n, generator=g) + 0.5).to(dtype)
        elif name == "dloss":
            t = (torch.rand(rows, generator=g) * 4 - 2).to(dtype)
        elif name == "lse":
            # The forward's saved statistic (f32), which the peers ignore.
            t = torch.logsumexp(a["x"].float(), -1)
        else:
            t = (torch.rand(rows, n, generator=g) * 4 - 2).to(dtype)
        a[name] = t
    return a


def reference(op, a, n):
    """op's outputs in float64: PyTorch's forms, a gradient by float64
    autograd of its forward (softmax's from y by its definition)."""
    import torch
    import torch.nn.functional as F

    d = {k: (v if k == "target" else v.double()) for k, v in a.items()}
    w, b = d.get("weight"), d.get("bias")
    if op == "sum":
        return {"y": d["x"].sum(-1)}
    if op == "softmax":
        return {"y": torch.softmax(d["x"], -1)}
    if op == "rmsnorm":
        return {"y": F.rms_norm(d["x"], (n,), w, eps=1e-6)}
    if op == "layernorm":
        return {"y": F.layer_norm(d["x"], (n,), w, b, 1e-5)}
    if op == "residual_layernorm":
        h = d["x"] + d["residual"]
        return {"h": h, "y": F.layer_norm(h, (n,), w, b, 1e-5)}
    if op == "cross_entropy":
        return {"loss": F.cross_entropy(d["x"], d["target"], reduction="none", ignore_index=-100)}
    if op == "add":
        return {"y": d["x"] + d["residual"]}
    if op == "softmax_backward":
        y, dy = d["y"], d["dy"]
        return {"dx": y * (dy - (y * dy).sum(-1, keepdim=True))}
    row = "h" if op == "residual_layernorm_backward" else "x"
    x = d[row].clone().requires_grad_()
    if op == "rmsnorm_backward":
        outs, grads = [F.rms_norm(x, (n,), w, eps=1e-6)], [d["dy"]]
    elif op == "layernorm_backward":
        outs, grads = [F.layer_norm(x, (n,), w, None, 1e-5)], [d["dy"]]
    elif op == "residual_layernorm_backward":
        # h receives dh as well as LayerNorm's gradient.
        outs, grads = [x * 1.0, F.layer_norm(x, (n,), w, None, 1e-5)], [d["dh"], d["dy"]]
    elif op in ("cross_entropy_backward", "cross_entropy_backward_recompute"):
        loss = F.cross_entropy(x, d["target"], reduction="none", ignore_index=-100)
        outs, grads = [loss], [d["dloss"]]
    else:
        raise ValueError(op)
    (dx,) = torch.autograd.grad(outs, x, grads)
    return {"dx": dx}


TOLERANCE = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}


def rel_err(got, ref):
    return float((got.double() - ref).norm() / ref.norm().clamp_min(1e-30))


def check_backward_on_cpu():
    """The backward forms torch_peer times, run here on CPU tensors: each
    eager (f32, bf16) and torch.compile (f32) form against float64
    autograd; ignored cross-entropy rows exactly 0; a missing Liger or
    Quack refused by name. Returns the failures."""
    import torch

    sys.path.insert(0, HERE)
    import torch_peer

    torch_peer.import_torch()
    assert torch_peer.IMPORT_ERROR is None, torch_peer.IMPORT_ERROR
    dtypes = {"f32": torch.float32, "bf16": torch.bfloat16}
    rows, n = 19, 301
    g = torch.Generator().manual_seed(1)
    failures = []
    for op in BACKWARD:
        assert torch_peer.OPS[op][2] == ["dx"], op
        for mode, names in (("eager", ("f32", "bf16")), ("compile", ("f32",))):
            for name in names:
                a = random_inputs(op, rows, n, dtypes[name], g)
                notes = []
                torch._dynamo.reset()
                fn, prepare = torch_peer.backward_op(op, mode, n, notes)
                s = dict(a)
                s.update(prepare(s))
                outs = fn(s)
                again = fn(s)  # the graph is kept: a second call works
                assert isinstance(outs, tuple) and len(outs) == 1, (op, mode, outs)
                dx = outs[0]
                want = reference(op, a, n)["dx"]
                err = rel_err(dx, want)
                ok = (
                    dx.dtype == dtypes[name]
                    and tuple(dx.shape) == (rows, n)
                    and err <= TOLERANCE[name]
                    and torch.equal(again[0], dx)
                )
                if op.startswith("cross_entropy_backward"):
                    ignored = a["target"] == -100
                    ok = ok and bool((dx[ignored] == 0).all())
                print(f"cpu {mode} {op} {name}: rel {err:.2e} {'ok' if ok else 'FAIL'} ({notes[0]})")
                if not ok:
                    failures.append(f"cpu {mode} {op} {name}: rel {err:.3e}, dtype {dx.dtype}")
        if importlib.util.find_spec("liger_kernel") is None:
            try:
                torch_peer.backward_op(op, "liger", n, [])
                failures.append(f"liger {op}: not refused without Liger-Kernel")
            except torch_peer.Refused as e:
                assert "Liger-Kernel is not installed" in str(e), e
        if not quack_importable():
            try:
                torch_peer.backward_op(op, "quack", n, [])
                failures.append(f"quack {op}: not refused without Quack")
            except torch_peer.Refused as e:
                assert "Quack" in str(e) and "not installed" in str(e), e
    return failures


def main():
    hello = check_protocol_without_torch()
    if importlib.util.find_spec("torch") is None:
        print("SKIP: no PyTorch here; only the protocol was checked")
        return 0
    failures = check_backward_on_cpu()
    if not hello.get("ok"):
        print(f"SKIP: the peer's CUDA cases ({hello.get('error')})")
        if failures:
            print("FAILED:\n  " + "\n  ".join(failures))
            return 1
        print("backward forms on the CPU: all ok")
        return 0
    import numpy as np
    import torch

    print("peer:", json.dumps(hello))
    rows, n = 33, 1001
    tmp = tempfile.mkdtemp(prefix="torch-peer-test-")
    g = torch.Generator().manual_seed(0)

    def save(name, t, d):
        path = os.path.join(d, f"{name}.npy")
        if t.dtype == torch.bfloat16:
            np.save(path, t.view(torch.int16).numpy().view(np.uint16))
        else:
            np.save(path, t.numpy())
        return path

    def load(path, dtype):
        a = np.load(path, allow_pickle=False)
        if dtype == torch.bfloat16:
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).double()
        return torch.from_numpy(a).double()

    names = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
    cases = [(op, dt, "eager", 1) for op in OPS for dt in (torch.float32, torch.bfloat16)]
    cases += [("rmsnorm", torch.float16, "eager", 3), ("softmax", torch.float32, "compile", 2)]
    cases += [(op, torch.bfloat16, "compile", 1) for op in BACKWARD]
    cases += [("rmsnorm_backward", torch.float32, "eager", 3)]
    if hello.get("liger"):
        cases += [("rmsnorm", torch.bfloat16, "liger", 1), ("cross_entropy", torch.float32, "liger", 1)]
        cases += [
            (op, dt, "liger", 1)
            for op in BACKWARD
            if op != "residual_layernorm_backward"
            for dt in (torch.float32, torch.bfloat16)
        ]
    quack = quack_importable()
    if quack:
        cases += [
            ("rmsnorm", torch.bfloat16, "quack", 1),
            ("rmsnorm", torch.float32, "quack", 2),
            ("layernorm", torch.bfloat16, "quack", 1),
            ("layernorm", torch.float32, "quack", 1),
            ("softmax", torch.bfloat16, "quack", 1),
            ("cross_entropy", torch.bfloat16, "quack", 1),
            ("cross_entropy", torch.float32, "quack", 1),
            ("residual_layernorm", torch.float32, "quack", 1),
        ]
        cases += [(op, dt, "quack", 1) for op in BACKWARD for dt in (torch.float32, torch.bfloat16)]
    peer = Peer()
    for op, dtype, mode, nsets in cases:
        sets, paths = [], []
        for s in range(nsets):
            d = os.path.join(tmp, f"{op}-{names[dtype]}-{mode}-set{s}")
            os.makedirs(d, exist_ok=True)
            a = random_inputs(op, rows, n, dtype, g)
            sets.append(a)
            paths.append({name: save(name, t, d) for name, t in a.items()})
        out_dir = os.path.join(tmp, f"{op}-{names[dtype]}-{mode}-out")
        req = {
            "op": op, "dtype": names[dtype], "rows": rows, "n": n,
            "outputs_dir": out_dir, "mode": mode,
            "samples": 3, "single_samples": 5, "sample_ms": 2.0, "warmup_ms": 10.0,
        }
        if nsets == 1:
            req["inputs"] = paths[0]
        else:
            req["input_sets"] = paths
        r = peer.ask(req)
        label = f"{mode} {op} {names[dtype]} sets={nsets}"
        if not r.get("ok"):
            failures.append(f"{label}: {r.get('error')}")
            continue
        for phase, count in (("gpu", 3), ("e2e", 3), ("single", 5)):
            assert len(r[phase]) == count, (label, phase, r[phase])
        assert all(s["total_us"] > 0 and s["batch"] >= 1 for s in r["gpu"] + r["e2e"]), r
        assert all(s["gpu_us"] > 0 and s["host_us"] > 0 for s in r["single"]), r
        want = reference(op, sets[0], n)
        for name, ref in want.items():
            got = load(r["outputs"][name], dtype)
            rel = rel_err(got, ref)
            ok = rel <= TOLERANCE[names[dtype]] and got.shape == ref.shape
            per_op = r["gpu"][1]["total_us"] / r["gpu"][1]["batch"]
            print(f"{label} {name}: rel {rel:.2e} {'ok' if ok else 'FAIL'}; "
                  f"gpu {per_op:.2f} us/op graph={r['gpu_graph']} notes={r.get('notes')}")
            if not ok:
                failures.append(f"{label} {name}: normwise relative error {rel:.3e}")
    # Bad requests are answered, and the peer keeps working.
    bad = peer.ask({"op": "sum", "dtype": "f64", "rows": 1, "n": 1, "inputs": {},
                    "outputs_dir": tmp, "mode": "eager", "samples": 1,
                    "sample_ms": 1.0, "warmup_ms": 0.0})
    assert bad["ok"] is False, bad
    refused = []
    if quack:
        # What Quack has no form of (with these semantics) is refused.
        refused += [("sum", "f32", "quack"), ("residual_layernorm", "bf16", "quack")]
    if hello.get("liger"):
        refused += [("residual_layernorm_backward", "bf16", "liger")]
    for op, dtype_name, mode in refused:
        req = {"op": op, "dtype": dtype_name, "rows": rows, "n": n, "mode": mode,
               "inputs": {name: os.path.join(tmp, "absent.npy") for name in OPS[op]},
               "outputs_dir": tmp, "samples": 1, "sample_ms": 1.0, "warmup_ms": 0.0}
        r = peer.ask(req)
        who = {"quack": "Quack", "liger": "Liger"}[mode]
        assert r["ok"] is False and who in r["error"], r
    assert peer.ask({"cmd": "hello"})["ok"] is True
    peer.close()
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print(f"all {len(cases)} cases ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
