#!/usr/bin/env bash
# Target 2, long rows: today's default layouts of one operator on
# 4096x131072 and 1024x262144, f32 and bf16 (4 cases), benched (lanefold
# alone), then replayed A/A -- the control: both sides the same kernel,
# position-balanced, fresh inputs each round -- for 4 rounds with torch
# eager, torch.compile and Liger-Kernel measured beside it every round
# (Liger refuses rows over 65536 except cross_entropy: recorded missing).
# The 16 cases of bench/STANDING.md's target 2 are the four parts.
#
# Usage: BIN=path/to/lanefold bash scripts/reproduce-long.sh PART [OUT_PREFIX]
#   PART: softmax, rmsnorm, layernorm or cross_entropy (a comma list runs
#   several; size it to the budget).
#   Writes OUT_PREFIX-ref-h200 (the bench) and OUT_PREFIX-aa-h200 (the
#   replay); OUT_PREFIX defaults to bench/results/DATE-long-PART.
#   Env: see scripts/lib/common.sh (LIGER_WHEEL, ROUNDS, BUDGET_S, RESUME,
#   TAR_TO, GPU_TAG).
#
# Device time, one call per part (4 rounds): layernorm 7.4 minutes
# measured on the H200 with lanefold f048c66d (bench 24 s,
# rounds of about 100 s); softmax and rmsnorm move the same bytes, about
# 7.5; cross_entropy reads only its logits, about 5 (the committed
# 2026-12-01-drift-long-aa ran 8 softmax and cross_entropy cases x 2
# rounds in about 305 s). Add 1-2 minutes for the machine's start.
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
part=${1:?"usage: reproduce-long.sh PART [OUT_PREFIX]  (PART: softmax, rmsnorm, layernorm, cross_entropy)"}
for op in ${part//,/ }; do
  case $op in
    softmax | rmsnorm | layernorm | cross_entropy) ;;
    *) lf_die "unknown PART $op" ;;
  esac
done
lf_prefix "long-${part//,/-}" "${2:-}"
ref=$(lf_dir ref)
aa=$(lf_dir aa)
lf_peers liger
lf_defaults_aa "$ref" "$aa" "--torch --torch-compile --liger" \
  --ops "$part" --shapes 4096x131072,1024x262144 --dtypes f32,bf16
lf_finish "$ref" "$aa"
