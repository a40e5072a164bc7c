#!/usr/bin/env python3
"""Cross entropy forward + backward on large vocabularies: lanefold's
fused path (dlogits written by the forward), the same written over the
logits (``inplace_backward=True``), lanefold's per-row path (its backward
re-reads the logits), torch eager and, where installed, Liger.

Per (shape, side, incoming gradient): the median over --rounds rounds of
the GPU time (CUDA events) of one forward plus backward from leaf logits,
and the peak of torch.cuda.max_memory_allocated above what was allocated
before the call (the logits themselves not counted). Sides run in a
rotating order each round. Liger writes its gradient into the logits, so
every side gets a fresh copy of the logits per call (copied outside the
timed region). The in-place side's logits are a copy of a leaf made
before the baseline (autograd refuses a leaf written in place) and its
gradient is taken with respect to them (torch.autograd.grad), so its
peak, like the others', is what the loss adds to existing logits. Prints
one JSON object.
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

import lanefold


def per_row(x, t):
    loss = lanefold.cross_entropy(x, t, reduction="none").float().sum()
    return (loss / (t != -100).sum()).to(x.dtype)


def sides():
    out = {
        "lanefold-fused": lambda x, t: lanefold.cross_entropy(x, t),
        "lanefold-inplace": lambda x, t: lanefold.cross_entropy(x, t, inplace_backward=True),
        "lanefold-per-row": per_row,
        "torch-eager": lambda x, t: F.cross_entropy(x, t),
    }
    try:
        from liger_kernel.transformers.functional import liger_cross_entropy

        out["liger"] = lambda x, t: liger_cross_entropy(x, t)
    except ImportError:
        pass
    return out


# Sides that write over their logits, which must not be a leaf.
NOT_LEAF = {"lanefold-inplace"}


def one(fn, src, t, scale, leaf=True):
    """GPU ms and peak bytes of one forward + backward on a copy of src."""
    x = src.clone().requires_grad_()
    logits = x if leaf else x.clone()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    loss = fn(logits, t)
    out = loss if scale == 1.0 else loss * scale
    if leaf:
        out.backward()
        grad = x.grad
    else:
        # The gradient of the logits themselves: no accumulation into the
        # leaf, which would copy a buffer the logits still reference.
        (grad,) = torch.autograd.grad(out, logits)
    end.record()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    return start.elapsed_time(end), peak, loss.detach().float().item(), grad


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="4096x32000,8192x128256,4096x256000")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--scales", default="1,2", help="incoming gradients of the loss")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    rows_out = []
    for text in args.shapes.split(","):
        rows, n = (int(v) for v in text.split("x"))
        g = torch.Generator(device="cuda").manual_seed(rows + n)
        src = torch.randn((rows, n), generator=g, device="cuda", dtype=torch.float32).to(dtype)
        t = torch.randint(0, n, (rows,), generator=g, device="cuda")
        t[::10] = -100
        fns = sides()
        names = list(fns)
        for scale in (float(s) for s in args.scales.split(",")):
            ref = None
            for name in names:  # compile and warm up outside the timing
                _, _, _, grad = one(fns[name], src, t, scale, name not in NOT_LEAF)
                grad64 = grad.float()
                if ref is None:
                    ref = grad64
                err = ((grad64 - ref).norm() / ref.norm()).item()
                del grad, grad64
                rows_out.append({"shape": [rows, n], "side": name, "scale": scale, "grad_rel_err_vs_first": err})
            del ref
            samples = {s: {"ms": [], "peak_bytes": []} for s in names}
            for r in range(args.rounds):
                for s in names[r % len(names):] + names[: r % len(names)]:
                    ms, peak, _, grad = one(fns[s], src, t, scale, s not in NOT_LEAF)
                    del grad
                    samples[s]["ms"].append(ms)
                    samples[s]["peak_bytes"].append(peak)
            for s in names:
                rows_out.append({
                    "shape": [rows, n], "dtype": args.dtype, "side": s, "scale": scale,
                    "ms": statistics.median(samples[s]["ms"]),
                    "peak_bytes": max(samples[s]["peak_bytes"]),
                    "logits_bytes": src.numel() * src.element_size(),
                    "samples": samples[s],
                })
        del src
        torch.cuda.empty_cache()
    print(json.dumps({
        "schema": "lanefold-python-ce-grad/1",
        "torch": torch.__version__, "device": torch.cuda.get_device_name(),
        "rounds": args.rounds, "rows": rows_out,
    }, indent=1))


if __name__ == "__main__":
    main()
