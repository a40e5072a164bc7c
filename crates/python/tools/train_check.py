#!/usr/bin/env python3
"""Does training with lanefold's norms and loss track torch's loss curve?

A small transformers LlamaForCausalLM (random init from a LlamaConfig,
nothing downloaded) is trained for --steps steps of AdamW on synthetic
tokens (a fixed random successor table over --active-vocab tokens, each
token replaced by a random one with probability --noise: a pattern the
model can learn, so the loss falls), from the same initial weights and the
same batches, in up to three runs:

  torch     the model as it is, its loss as transformers computes it
            (logits upcast to float32, F.cross_entropy, mean);
  lanefold  lanefold.nn.swap_norms(model) (every LlamaRMSNorm becomes
            lanefold's RMSNorm, forward and backward lanefold's kernels)
            and lanefold.cross_entropy on the logits as they are (per-row
            losses in the logits' dtype, averaged in float32, so that the
            recorded loss is not rounded to bfloat16);
  twin      the same two changes with torch's kernels (F.rms_norm,
            F.cross_entropy on the logits as they are, averaged alike):
            how far another correct implementation lands from the torch
            run, the noise floor the lanefold run is judged against
            (--no-twin skips it).

Precision (--precision): bf16 (parameters, activations and AdamW state in
bfloat16; the default, so lanefold's bfloat16 kernels run) or autocast
(float32 parameters, bfloat16 matmuls; the norms then run in float32).

The verdict: max over steps (from the first full window on) of |moving
average (--window) of the lanefold losses minus that of the torch losses|
must not exceed max(--tolerance, 2 x the same for the twin). Exit 1 when it
does, 2 on bad setup (no CUDA, transformers or lanefold missing).

Writes losses.csv (step, torch_loss, lanefold_loss, twin_loss) and
summary.json (configuration, environment, wall time and first step per run,
the differences, the verdict) into --output. --plot DIR renders DIR's
losses.csv into DIR/loss.png with matplotlib (imported only there; run it
where matplotlib is installed) and trains nothing.
"""

import argparse
import copy
import csv
import os
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_common as common  # noqa: E402

RUNS = ("torch", "lanefold", "twin")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--intermediate", type=int, default=1376)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--active-vocab", type=int, default=1024,
                    help="tokens the synthetic data uses (the model's vocabulary stays --vocab)")
    ap.add_argument("--noise", type=float, default=0.1, help="probability of a random token")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup-steps", type=int, default=20, help="linear learning-rate warm-up")
    ap.add_argument("--precision", choices=("bf16", "autocast"), default="bf16")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: lanefold's CPU executor, for a tiny configuration")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--window", type=int, default=20, help="moving-average window, steps")
    ap.add_argument("--tolerance", type=float, default=0.05,
                    help="floor of the allowed moving-average difference (loss units)")
    ap.add_argument("--no-twin", action="store_true", help="skip the twin run")
    ap.add_argument("--output", default="train-check", help="folder for losses.csv and summary.json")
    ap.add_argument("--plot", metavar="DIR", help="render DIR/losses.csv into DIR/loss.png and exit")
    args = ap.parse_args()
    positive = ("steps", "batch", "seq", "hidden", "layers", "heads", "intermediate", "vocab",
                "active_vocab", "window")
    bad = [k for k in positive if getattr(args, k) < 1]
    if bad:
        common.die(f"--{bad[0].replace('_', '-')} must be >= 1")
    if args.active_vocab > args.vocab:
        common.die("--active-vocab must not exceed --vocab")
    if args.hidden % args.heads:
        common.die("--hidden must be a multiple of --heads")
    if not 0.0 <= args.noise <= 1.0 or args.lr <= 0 or args.tolerance < 0:
        common.die("--noise in [0, 1], --lr > 0, --tolerance >= 0")
    return args


def batches(args, torch):
    """(steps, batch, seq) int64 tokens, the same for every run."""
    g = torch.Generator().manual_seed(args.seed)
    succ = torch.randint(0, args.active_vocab, (args.active_vocab,), generator=g)
    count = args.steps * args.batch
    tokens = torch.empty(count, args.seq, dtype=torch.int64)
    tokens[:, 0] = torch.randint(0, args.active_vocab, (count,), generator=g)
    for t in range(1, args.seq):
        random = torch.randint(0, args.active_vocab, (count,), generator=g)
        keep = torch.rand(count, generator=g) >= args.noise
        tokens[:, t] = torch.where(keep, succ[tokens[:, t - 1]], random)
    return tokens.view(args.steps, args.batch, args.seq)


def build_model(args, torch, device):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    config = LlamaConfig(
        hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.heads, vocab_size=args.vocab,
        max_position_embeddings=args.seq, rms_norm_eps=1e-6, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    return model.to(device=device, dtype=dtype)


def twin_norms(model, F):
    """Every *RMSNorm's forward becomes F.rms_norm with its weight and eps."""
    count = 0
    for m in model.modules():
        if type(m).__name__.endswith("RMSNorm") and hasattr(m, "variance_epsilon"):
            m.forward = types.MethodType(
                lambda self, x: F.rms_norm(x, self.weight.shape, self.weight, self.variance_epsilon), m
            )
            count += 1
    return count


def train(run, base, data, args, torch, device):
    import torch.nn.functional as F

    model = copy.deepcopy(base)
    if run == "lanefold":
        import lanefold

        model = lanefold.nn.swap_norms(model)
        swapped = sum(type(m).__module__.startswith("lanefold") for m in model.modules())

        def loss_of(ids, out):
            v = out.logits.shape[-1]
            rows = lanefold.cross_entropy(
                out.logits[:, :-1].reshape(-1, v), ids[:, 1:].reshape(-1), reduction="none"
            )
            return rows.float().mean()
    elif run == "twin":
        swapped = twin_norms(model, F)

        def loss_of(ids, out):
            v = out.logits.shape[-1]
            rows = F.cross_entropy(
                out.logits[:, :-1].reshape(-1, v), ids[:, 1:].reshape(-1), reduction="none"
            )
            return rows.float().mean()
    else:
        swapped = 0

        def loss_of(ids, out):
            return out.loss

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, args.warmup_steps))
    )
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16)
        if args.precision == "autocast"
        else torch.autocast(device.type, enabled=False)
    )
    losses = []
    first_step_s = None
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for step in range(args.steps):
        ids = data[step].to(device, non_blocking=True)
        with autocast:
            out = model(input_ids=ids, labels=ids if run == "torch" else None)
            loss = loss_of(ids, out)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach().float())
        if step == 0:
            sync()
            first_step_s = time.perf_counter() - t0
    sync()
    wall_s = time.perf_counter() - t0
    values = [float(v) for v in torch.stack(losses).cpu()]
    return {"losses": values, "wall_s": wall_s, "first_step_s": first_step_s, "norms_swapped": swapped}


def moving_average(values, window):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def max_ma_diff(a, b, window):
    ma, mb = moving_average(a, window), moving_average(b, window)
    start = min(window - 1, len(a) - 1)
    return max(abs(x - y) for x, y in zip(ma[start:], mb[start:]))


def write_csv(path, runs):
    names = [r for r in RUNS if r in runs]
    steps = len(runs["torch"]["losses"])
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step"] + [f"{r}_loss" for r in RUNS])
        for s in range(steps):
            w.writerow([s] + [repr(runs[r]["losses"][s]) if r in names else "" for r in RUNS])
    os.replace(tmp, path)


def read_csv(path):
    runs = {}
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        common.die(f"{path} has no rows")
    for r in RUNS:
        col = f"{r}_loss"
        if col in rows[0] and rows[0][col] != "":
            runs[r] = [float(row[col]) for row in rows]
    if "torch" not in runs or "lanefold" not in runs:
        common.die(f"{path} lacks the torch_loss or lanefold_loss column")
    return [int(row["step"]) for row in rows], runs


def plot(folder, window):
    path = os.path.join(folder, "losses.csv")
    if not os.path.isfile(path):
        common.die(f"no {path} (write it with a training run's --output)")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        common.die(f"--plot needs matplotlib ({type(e).__name__}: {e})")
    steps, runs = read_csv(path)
    colors = {"torch": "tab:blue", "lanefold": "tab:orange", "twin": "tab:green"}
    styles = {"torch": "-", "lanefold": "--", "twin": ":"}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    for r, values in runs.items():
        top.plot(steps, values, color=colors[r], alpha=0.25, linewidth=0.8)
        top.plot(steps, moving_average(values, window), color=colors[r], linewidth=1.6,
                 linestyle=styles[r], label=f"{r} ({window}-step mean)")
    top.set_ylabel("training loss")
    top.legend()
    top.set_title("LlamaForCausalLM, same init and batches: torch vs lanefold's norms and loss")
    base = moving_average(runs["torch"], window)
    for r in ("lanefold", "twin"):
        if r in runs:
            diff = [a - b for a, b in zip(moving_average(runs[r], window), base)]
            bottom.plot(steps, diff, color=colors[r], label=f"{r} − torch")
    bottom.axhline(0.0, color="black", linewidth=0.6)
    bottom.set_ylabel(f"difference of {window}-step means")
    bottom.set_xlabel("step")
    bottom.legend()
    fig.tight_layout()
    out = os.path.join(folder, "loss.png")
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    return 0


def main():
    args = parse_args()
    if args.plot:
        return plot(args.plot, args.window)
    torch = common.import_torch()
    device = common.device_of(args.device)
    for module, hint in (("transformers", "pip install transformers"),
                         ("lanefold", "install lanefold's wheel")):
        if common.optional_module(module)[0] is None:
            common.die(f"{common.optional_module(module)[1]}; {hint}")
    os.makedirs(args.output, exist_ok=True)
    t0 = time.perf_counter()
    data = batches(args, torch)
    base = build_model(args, torch, device)
    runs = {}
    for run in RUNS:
        if run == "twin" and args.no_twin:
            continue
        runs[run] = train(run, base, data, args, torch, device)
        r = runs[run]
        print(f"{run}: {args.steps} steps in {r['wall_s']:.1f} s (first step {r['first_step_s']:.2f} s), "
              f"loss {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}, norms swapped {r['norms_swapped']}",
              flush=True)
    diff = {r: max_ma_diff(runs[r]["losses"], runs["torch"]["losses"], args.window)
            for r in runs if r != "torch"}
    bound = max(args.tolerance, 2.0 * diff.get("twin", 0.0))
    ok = diff["lanefold"] <= bound
    summary = {
        "schema": "lanefold-train-check/1",
        "environment": common.environment(device),
        "config": {k: v for k, v in vars(args).items() if k not in ("plot",)},
        "runs": {r: {k: v for k, v in runs[r].items() if k != "losses"} for r in runs},
        "final_window_mean": {
            r: sum(runs[r]["losses"][-args.window:]) / min(args.window, args.steps) for r in runs
        },
        "max_moving_average_diff_vs_torch": diff,
        "bound": bound,
        "bound_rule": "max(--tolerance, 2 x the twin's difference)",
        "within_bound": ok,
        "total_s": time.perf_counter() - t0,
    }
    write_csv(os.path.join(args.output, "losses.csv"), runs)
    common.write_json(os.path.join(args.output, "summary.json"), summary)
    twin = f", twin {diff['twin']:.4f}" if "twin" in diff else ""
    print(f"max |{args.window}-step mean - torch's|: lanefold {diff['lanefold']:.4f}{twin}; "
          f"bound {bound:.4f}: {'within' if ok else 'OUTSIDE'}; total {summary['total_s']:.1f} s")
    print(f"wrote {args.output}/losses.csv and summary.json (plot: --plot {args.output})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
