"""A stand-in for torch_peer.py in tests (CI has no GPU and no PyTorch).

Speaks the same JSON-lines protocol with the standard library only:
- hello / quit as the real peer;
- op "die": exits (a dead peer);
- with FAKE_PEER_NO_GRAPH set: every reply says its graph capture failed;
- with FAKE_PEER_STARTS set to a path: a line appended to it at each hello;
- with FAKE_PEER_OOM_ONCE set to a path that does not exist: the first
  case is refused as out of device memory and the path is created, so
  one refusal spans a restarted peer;
- modes "liger" and "quack": refused, as the real peer does when
  Liger-Kernel or Quack is not installed;
- ops "sum" and "softmax_backward", f32: answered in every other mode with
  fixed timings per mode. When input set 0's files exist the output is
  really computed (row sums as y.npy; y * (dy - sum(y * dy)) from y.npy
  and dy.npy as dx.npy), so a bench or replay validates it; otherwise it
  is only named (protocol tests).
"""

import ast
import json
import os
import struct
import sys

# Per-op µs by mode, so the sides differ.
PER_OP_US = {"eager": 20.0, "compile": 10.0}


def read_f32(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", path
    major = data[6]
    if major == 1:
        (hlen,), start = struct.unpack("<H", data[8:10]), 10
    else:
        (hlen,), start = struct.unpack("<I", data[8:12]), 12
    header = ast.literal_eval(data[start : start + hlen].decode("latin1"))
    if header["descr"] != "<f4" or header["fortran_order"]:
        raise ValueError(f"{path}: only C-order <f4, got {header}")
    body = data[start + hlen :]
    return header["shape"], struct.unpack(f"<{len(body) // 4}f", body)


def write_f32(path, values, shape=None):
    dims = shape or (len(values),)
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s,), }" % ", ".join(map(str, dims))
    pad = 64 - (10 + len(header) + 1) % 64
    header = (header + " " * pad + "\n").encode("latin1")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
        f.write(struct.pack(f"<{len(values)}f", *values))


def run(req):
    mode = req["mode"]
    if mode == "liger":
        return {"ok": False, "error": "mode 'liger': Liger-Kernel is not installed (fake peer)"}
    if mode == "quack":
        return {"ok": False, "error": "mode 'quack': Quack (quack-kernels) is not installed (fake peer)"}
    op = req.get("op")
    if op not in ("sum", "softmax_backward"):
        return {"ok": False, "error": "only sum and softmax_backward"}
    files = (req.get("input_sets") or [req.get("inputs", {})])[0]
    if op == "sum":
        out = {"y": os.path.join(req["outputs_dir"], "y.npy")}
        if os.path.isfile(files.get("x", "")):
            (rows, n), v = read_f32(files["x"])
            write_f32(out["y"], [sum(v[r * n : (r + 1) * n]) for r in range(rows)])
    else:
        out = {"dx": os.path.join(req["outputs_dir"], "dx.npy")}
        if os.path.isfile(files.get("y", "")) and os.path.isfile(files.get("dy", "")):
            (rows, n), y = read_f32(files["y"])
            _, dy = read_f32(files["dy"])
            dx = []
            for r in range(rows):
                yr, gr = y[r * n : (r + 1) * n], dy[r * n : (r + 1) * n]
                s = sum(a * b for a, b in zip(yr, gr))
                dx.extend(a * (b - s) for a, b in zip(yr, gr))
            write_f32(out["dx"], dx, (rows, n))
    us = PER_OP_US.get(mode, 15.0)
    k = max(1, int(req.get("samples", 1)))
    singles = max(1, int(req.get("single_samples", k)))
    print("noise on stdout")
    return {
        "ok": True,
        "mode": mode,
        "outputs": out,
        # Sample i is i µs slower, so one changed sample moves a median.
        "gpu": [{"batch": 10, "total_us": 10 * (us + i)} for i in range(k)],
        "gpu_graph": not os.environ.get("FAKE_PEER_NO_GRAPH"),
        "e2e": [{"batch": 5, "total_us": 5 * (us + 5.0 + i)} for i in range(k)],
        "e2e_enqueue_us": [30.0] * k,
        "single": [{"gpu_us": us / 10 + i, "host_us": us + 9.0 + i} for i in range(singles)],
        "extra": 1,
    }


for line in sys.stdin:
    req = json.loads(line)
    if req.get("cmd") == "hello":
        if os.environ.get("FAKE_PEER_STARTS"):
            with open(os.environ["FAKE_PEER_STARTS"], "a") as f:
                f.write("hello\n")
        out = {"ok": True, "torch": "fake", "cuda": None, "device": "none", "liger": None, "quack": None}
    elif req.get("cmd") == "quit":
        break
    elif os.environ.get("FAKE_PEER_OOM_ONCE") and not os.path.exists(
        os.environ["FAKE_PEER_OOM_ONCE"]
    ):
        open(os.environ["FAKE_PEER_OOM_ONCE"], "w").close()
        out = {"ok": False, "error": "OutOfMemoryError: CUDA out of memory (fake)"}
    elif req.get("op") == "die":
        print("dying on purpose", file=sys.stderr)
        sys.exit(3)
    else:
        out = run(req)
    print(json.dumps(out), flush=True)
