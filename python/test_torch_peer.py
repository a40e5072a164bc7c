#!/usr/bin/env python3
"""End-to-end checks of python/torch_peer.py through its JSON-lines protocol.

Run with plain `python3 python/test_torch_peer.py`. Without PyTorch (or
without a CUDA device) only the protocol checks that need no torch run, and
the rest is skipped with a message; the exit status is 0 unless a check
fails.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "torch_peer.py")


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
        r = peer.ask({"op": "rmsnorm", "mode": "quack"})
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


def main():
    hello = check_protocol_without_torch()
    if not hello.get("ok"):
        print(f"SKIP: the peer is unavailable here ({hello.get('error')})")
        return 0
    import numpy as np
    import torch
    import torch.nn.functional as F

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

    def reference(op, a):
        x = a["x"].double()
        w = a.get("weight")
        b = a.get("bias")
        w = None if w is None else w.double()
        b = None if b is None else b.double()
        if op == "sum":
            return {"y": x.sum(-1)}
        if op == "softmax":
            return {"y": torch.softmax(x, -1)}
        if op == "rmsnorm":
            return {"y": F.rms_norm(x, (n,), w, eps=1e-6)}
        if op == "layernorm":
            return {"y": F.layer_norm(x, (n,), w, b, 1e-5)}
        if op == "residual_layernorm":
            h = x + a["residual"].double()
            return {"h": h, "y": F.layer_norm(h, (n,), w, b, 1e-5)}
        if op == "cross_entropy":
            return {"loss": F.cross_entropy(x, a["target"], reduction="none", ignore_index=-100)}
        if op == "add":
            return {"y": x + a["residual"].double()}
        raise ValueError(op)

    tolerance = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
    names = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
    ops = {
        "sum": ["x"],
        "softmax": ["x"],
        "rmsnorm": ["x", "weight"],
        "layernorm": ["x", "weight", "bias"],
        "residual_layernorm": ["x", "residual", "weight", "bias"],
        "cross_entropy": ["x", "target"],
        "add": ["x", "residual"],
    }
    cases = [(op, dt, "eager", 1) for op in ops for dt in (torch.float32, torch.bfloat16)]
    cases += [("rmsnorm", torch.float16, "eager", 3), ("softmax", torch.float32, "compile", 2)]
    if hello.get("liger"):
        cases += [("rmsnorm", torch.bfloat16, "liger", 1), ("cross_entropy", torch.float32, "liger", 1)]
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
    failures = []
    peer = Peer()
    for op, dtype, mode, nsets in cases:
        sets, paths = [], []
        for s in range(nsets):
            d = os.path.join(tmp, f"{op}-{names[dtype]}-{mode}-set{s}")
            os.makedirs(d, exist_ok=True)
            a, p = {}, {}
            for name in ops[op]:
                if name == "target":
                    t = torch.randint(0, n, (rows,), generator=g)
                    t[::8] = -100
                elif name in ("weight", "bias"):
                    t = (torch.rand(n, generator=g) + 0.5).to(dtype)
                else:
                    t = (torch.rand(rows, n, generator=g) * 4 - 2).to(dtype)
                a[name] = t
                p[name] = save(name, t, d)
            sets.append(a)
            paths.append(p)
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
        want = reference(op, sets[0])
        for name, ref in want.items():
            got = load(r["outputs"][name], dtype)
            rel = float((got - ref).norm() / ref.norm().clamp_min(1e-30))
            ok = rel <= tolerance[dtype] and got.shape == ref.shape
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
    if quack:
        # What Quack has no form of (with these semantics) is refused.
        for op, dtype_name in (("sum", "f32"), ("residual_layernorm", "bf16")):
            req = {"op": op, "dtype": dtype_name, "rows": rows, "n": n, "mode": "quack",
                   "inputs": {name: os.path.join(tmp, "absent.npy") for name in ops[op]},
                   "outputs_dir": tmp, "samples": 1, "sample_ms": 1.0, "warmup_ms": 0.0}
            r = peer.ask(req)
            assert r["ok"] is False and "Quack" in r["error"], r
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
