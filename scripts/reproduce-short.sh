#!/usr/bin/env bash
# Target 3, short rows: today's default layouts of the six operators on
# 1x127, 17x257, 1x4096, 8x4096, 32x4096, 64x4096 and 1024x4096, f32 and
# bf16 (84 cases), benched (lanefold alone), then replayed A/A -- the
# control: both sides the same kernel, position-balanced, fresh inputs
# each round -- for 4 rounds with torch eager and torch.compile measured
# beside it every round (the gpu phase and synchronized single calls, as
# target 3 asks). The 84 cases of bench/STANDING.md's target 3.
#
# Usage: BIN=path/to/lanefold bash scripts/reproduce-short.sh [OUT_PREFIX]
#   Writes OUT_PREFIX-ref-h200 (the bench) and OUT_PREFIX-aa-h200 (the
#   replay); OUT_PREFIX defaults to bench/results/DATE-short.
#   Env: see scripts/lib/common.sh (ROUNDS, BUDGET_S, RESUME, TAR_TO,
#   GPU_TAG).
#
# Device time, one call: about 4.5 minutes (the committed bench and
# 3-round A/A replay of the 84 cases with both torch peers took 202 s of
# one call, 2026-12-01-short-all-s18: about 50 s a round). Add 1-2
# minutes for the machine's start.
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
lf_prefix short "${1:-}"
ref=$(lf_dir ref)
aa=$(lf_dir aa)
lf_peers
lf_defaults_aa "$ref" "$aa" "--torch --torch-compile" \
  --ops all --shapes 1x127,17x257,1x4096,8x4096,32x4096,64x4096,1024x4096 --dtypes f32,bf16
lf_finish "$ref" "$aa"
