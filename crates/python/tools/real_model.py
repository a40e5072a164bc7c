#!/usr/bin/env python3
"""Real-model check of the PyTorch package: small Llama-style and
GPT-2-style models built from transformers configs with random weights
(nothing downloaded), their norms swapped for lanefold's
(`lanefold.nn.swap_norms`). Reports the logits' largest difference from
the original model, relative to the logits' largest magnitude, and the
forward time with and without lanefold at a decode and a prefill batch
(CUDA events around --reps forwards, median over --rounds rounds, the two
models' positions alternating). Prints one JSON object; exits 1 if the
logits differ beyond --tolerance.
"""
import argparse
import copy
import json
import statistics
import sys

import torch

from lanefold.nn import swap_norms


def models():
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    llama = LlamaForCausalLM(LlamaConfig(
        hidden_size=2048, intermediate_size=5632, num_hidden_layers=4,
        num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
        max_position_embeddings=4096))
    gpt2 = GPT2LMHeadModel(GPT2Config(
        n_embd=1024, n_layer=4, n_head=16, vocab_size=50257, n_positions=1024))
    return {"llama": llama, "gpt2": gpt2}


def forward_us(model, ids, reps):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    with torch.no_grad():
        start.record()
        for _ in range(reps):
            model(ids)
        end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / reps


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--tolerance", type=float, default=3e-2)
    args = ap.parse_args()
    out = {"schema": "lanefold-real-model/1", "torch": torch.__version__,
           "device": torch.cuda.get_device_name(), "models": []}
    ok = True
    for name, model in models().items():
        base = model.to("cuda", torch.bfloat16).eval()
        swapped = swap_norms(copy.deepcopy(base))
        vocab = base.config.vocab_size
        batches = {"decode": (8, 1), "prefill": (4, 512)}
        entry = {"model": name, "norms_swapped": sum(
            type(m).__module__.startswith("lanefold") for m in swapped.modules())}
        for phase, (b, s) in batches.items():
            ids = torch.randint(0, vocab, (b, s), device="cuda")
            with torch.no_grad():
                want = base(ids).logits.float()
                got = swapped(ids).logits.float()
            rel = ((got - want).abs().max() / want.abs().max()).item()
            ok &= rel <= args.tolerance
            for m in (base, swapped):  # warm-up, kernels compiled
                forward_us(m, ids, 3)
            times = {"torch": [], "lanefold": []}
            for r in range(args.rounds):
                pair = [("torch", base), ("lanefold", swapped)]
                for side, m in pair if r % 2 == 0 else pair[::-1]:
                    times[side].append(forward_us(m, ids, args.reps))
            entry[phase] = {
                "batch": b, "seq": s, "logits_rel_diff": rel,
                "forward_us": {k: statistics.median(v) for k, v in times.items()},
                "samples_us": times,
            }
        out["models"].append(entry)
    out["tolerance"] = args.tolerance
    out["logits_within_tolerance"] = ok
    print(json.dumps(out, indent=1))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
