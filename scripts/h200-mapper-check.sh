#!/usr/bin/env bash
# Issue 6, item 4, on an H200: does the cost-model mapping (--mapper model)
# reach 90% of the searched winner without tuning? Bench the model mapping
# on the seed's rmsnorm shapes and replay it against the committed search.
# Usage: scripts/h200-mapper-check.sh DATE [LANEFOLD_BIN]
set -euo pipefail
date=${1:?date}
bin=${2:-target/release/lanefold}
s="--samples ${SAMPLES:-5} --sample-ms ${SAMPLE_MS:-10} --warmup-ms ${WARMUP_MS:-50}"
r=bench/results/$date-rmsnorm-model-mapper
$bin bench --backend cuda --ops rmsnorm --shapes 1x127,17x257,64x4096,1024x4096 --dtypes f32 --mapper model \
  $s --capture-sources --output $r-h200
$bin replay --backend cuda --reference bench/results/2026-11-29-rmsnorm-search-h200/results.json \
  --candidate $r-h200/results.json --rounds 4 $s --output $r-replay-h200
$bin audit $r-h200 $r-replay-h200
