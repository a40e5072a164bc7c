#!/usr/bin/env python3
"""Host cost of one call of lanefold's ops against torch eager and
torch.compile, on small (decode-sized) CUDA tensors where the launch, not
the kernel, sets the pace.

Two numbers per (op, shape, side), each the median of --rounds rounds:
  enqueue_us  host time per call over a burst of --calls calls with no
              synchronize inside (tensor in, launch, tensor out);
  single_us   host time of one call plus torch.cuda.synchronize().
Sides run in a rotating order each round. Prints one JSON object.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import lanefold


def cases(dtype):
    for rows in (1, 32):
        n = 4096
        x = torch.randn(rows, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        b = torch.randn(n, device="cuda", dtype=dtype)
        yield "rms_norm", (rows, n), {
            "lanefold": lambda: lanefold.rms_norm(x, w, eps=1e-6),
            "torch-eager": lambda: F.rms_norm(x, (n,), w, eps=1e-6),
            "torch-compile": torch.compile(lambda: F.rms_norm(x, (n,), w, eps=1e-6)),
        }
        yield "layer_norm", (rows, n), {
            "lanefold": lambda: lanefold.layer_norm(x, w, b, eps=1e-5),
            "torch-eager": lambda: F.layer_norm(x, (n,), w, b, eps=1e-5),
            "torch-compile": torch.compile(lambda: F.layer_norm(x, (n,), w, b, eps=1e-5)),
        }
        yield "softmax", (rows, n), {
            "lanefold": lambda: lanefold.softmax(x, dim=-1),
            "torch-eager": lambda: torch.softmax(x, -1),
            "torch-compile": torch.compile(lambda: torch.softmax(x, -1)),
        }


def enqueue_us(fn, calls):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e6 / calls


def single_us(fn, calls):
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    rows = []
    for op, shape, sides in cases(dtype):
        names = list(sides)
        for fn in sides.values():  # compile and warm up outside the timing
            for _ in range(20):
                fn()
        samples = {s: {"enqueue_us": [], "single_us": []} for s in names}
        for r in range(args.rounds):
            order = names[r % len(names):] + names[: r % len(names)]
            for s in order:
                samples[s]["enqueue_us"].append(enqueue_us(sides[s], args.calls))
                samples[s]["single_us"].append(single_us(sides[s], args.calls // 10))
        for s in names:
            rows.append({
                "op": op, "shape": list(shape), "dtype": args.dtype, "side": s,
                "enqueue_us": statistics.median(samples[s]["enqueue_us"]),
                "single_us": statistics.median(samples[s]["single_us"]),
                "samples": samples[s],
            })
    print(json.dumps({
        "schema": "lanefold-python-overhead/1",
        "torch": torch.__version__, "device": torch.cuda.get_device_name(),
        "rounds": args.rounds, "calls": args.calls, "rows": rows,
    }, indent=1))


if __name__ == "__main__":
    main()
