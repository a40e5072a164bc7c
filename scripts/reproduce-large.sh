#!/usr/bin/env bash
# Target 1, large shapes: today's default layouts of one operator on
# 32768x4096, 16384x8192 and 4096x32768, f32 and bf16 (6 cases), benched
# (lanefold alone), then replayed A/A -- the control: both sides the same
# kernel, position-balanced, fresh inputs each round -- for 4 rounds with
# torch eager, torch.compile and Liger-Kernel measured beside it every
# round. `lanefold scorecard` judges each case from those rounds; the
# 36 cases of bench/STANDING.md's target 1 are the six parts.
#
# Usage: BIN=path/to/lanefold bash scripts/reproduce-large.sh PART [OUT_PREFIX]
#   PART: sum, softmax, rmsnorm, layernorm, residual_layernorm or
#   cross_entropy (a comma list runs several; size it to the budget).
#   Writes OUT_PREFIX-ref-h200 (the bench) and OUT_PREFIX-aa-h200 (the
#   replay); OUT_PREFIX defaults to bench/results/DATE-large-PART.
#   Env: see scripts/lib/common.sh (LIGER_WHEEL, ROUNDS, BUDGET_S, RESUME,
#   TAR_TO, GPU_TAG).
#
# Device time, one call per part (measured on the H200 with lanefold
# f048c66d, 4 rounds): sum 2.1 minutes, residual_layernorm 7.5
# (the heaviest: 2 GB a f32 case; Liger has neither op); softmax, rmsnorm
# and layernorm about 6 and cross_entropy about 3, scaled by bytes moved
# and by the committed A/A replays with Liger (2026-11-30-large-v14-aa: 12
# such cases x 2 rounds inside 316 s). Add 1-2 minutes for the machine's
# start.
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
part=${1:?"usage: reproduce-large.sh PART [OUT_PREFIX]  (PART: sum, softmax, rmsnorm, layernorm, residual_layernorm, cross_entropy)"}
for op in ${part//,/ }; do
  case $op in
    sum | softmax | rmsnorm | layernorm | residual_layernorm | cross_entropy) ;;
    *) lf_die "unknown PART $op" ;;
  esac
done
lf_prefix "large-${part//,/-}" "${2:-}"
ref=$(lf_dir ref)
aa=$(lf_dir aa)
lf_peers liger
lf_defaults_aa "$ref" "$aa" "--torch --torch-compile --liger" \
  --ops "$part" --shapes 32768x4096,16384x8192,4096x32768 --dtypes f32,bf16
lf_finish "$ref" "$aa"
