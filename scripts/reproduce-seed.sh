#!/usr/bin/env bash
# The seed experiment: rmsnorm f32 on the seed's four shapes (1x127,
# 17x257, 64x4096, 1024x4096). The reference is the seed's mapping
# (automatic W, V=1); a search over W in {auto, 32, 128, 256} x V in
# {1, 2, 4} (gpu objective, 12 candidates) finds the candidates; a frozen
# replay of reference against the search's winners, 4 rounds with torch
# eager beside them, measures the gain, and an A/A replay of the
# reference, 4 rounds, is its control.
#
# Usage: BIN=path/to/lanefold bash scripts/reproduce-seed.sh [OUT_PREFIX]
#   Writes OUT_PREFIX-{reference,search,replay,aa}-h200; OUT_PREFIX
#   defaults to bench/results/DATE-seed-rmsnorm. SAMPLES, SAMPLE_MS and
#   WARMUP_MS (default 5, 10, 50: the committed experiment's) set the
#   phases; ROUNDS the replays' rounds (default 4).
#   Env: see scripts/lib/common.sh (ROUNDS, TAR_TO, GPU_TAG).
#
# Device time, one call: about 2 minutes (the committed
# 2026-11-29-rmsnorm-{reference,search,replay,aa}-h200 started within 32 s
# of each other, the A/A replay 11 s after the replay; plus start-up).
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
lf_prefix seed-rmsnorm "${1:-}"
reference=$(lf_dir reference)
search=$(lf_dir search)
replay=$(lf_dir replay)
aa=$(lf_dir aa)
lf_claim "$reference" "$search" "$replay" "$aa"
lf_peers
shapes=1x127,17x257,64x4096,1024x4096
s=(--samples "${SAMPLES:-5}" --sample-ms "${SAMPLE_MS:-10}" --warmup-ms "${WARMUP_MS:-50}")
lf_step "reference: the seed's mapping -> $reference"
"$bin" bench --backend cuda --ops rmsnorm --shapes "$shapes" --dtypes f32 --schedule mapper=seed "${s[@]}" \
  --capture-sources --output "$reference"
lf_step "search -> $search"
"$bin" search --backend cuda --ops rmsnorm --shapes "$shapes" --dtypes f32 --tune-workers 0,32,128,256 \
  --tune-pack 1,2,4 --tune-unroll 1 --tuning-metric gpu --max-candidates 12 "${s[@]}" \
  --capture-sources --output "$search"
lf_step "replay: reference against the winners, with torch eager -> $replay"
"$bin" replay --backend cuda --reference "$reference/results.json" --candidate "$search/results.json" \
  --rounds "$lf_rounds" "${s[@]}" --torch --output "$replay"
lf_step "A/A control of the reference -> $aa"
"$bin" replay --backend cuda --reference "$reference/results.json" --aa --rounds "$lf_rounds" "${s[@]}" \
  --output "$aa"
"$bin" scorecard "$replay" "$aa" || true
lf_finish "$reference" "$search" "$replay" "$aa"
