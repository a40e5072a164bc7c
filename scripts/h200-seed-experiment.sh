#!/usr/bin/env bash
# The seed's experiment on an H200: rmsnorm f32 on the seed's four shapes.
# Reference = automatic V=1; search W in {auto,32,128,256} x V in {1,2,4},
# gpu objective, 12 candidates; 4-round frozen replay with torch; A/A control.
# Usage: scripts/h200-seed-experiment.sh DATE [LANEFOLD_BIN]
set -euo pipefail
date=${1:?date}
bin=${2:-target/release/lanefold}
shapes=1x127,17x257,64x4096,1024x4096
s="--samples ${SAMPLES:-5} --sample-ms ${SAMPLE_MS:-10} --warmup-ms ${WARMUP_MS:-50}"
r=bench/results/$date-rmsnorm
$bin bench --backend cuda --ops rmsnorm --shapes $shapes --dtypes f32 --mapper seed $s --capture-sources --output $r-reference-h200
$bin search --backend cuda --ops rmsnorm --shapes $shapes --dtypes f32 --tune-workers 0,32,128,256 \
  --tune-pack 1,2,4 --tune-unroll 1 --tuning-metric gpu --max-candidates 12 $s --capture-sources --output $r-search-h200
$bin replay --backend cuda --reference $r-reference-h200/results.json --candidate $r-search-h200/results.json \
  --rounds 4 $s --torch --output $r-replay-h200
$bin replay --backend cuda --reference $r-reference-h200/results.json --aa --rounds 4 $s --output $r-aa-h200
$bin audit $r-reference-h200 $r-search-h200 $r-replay-h200 $r-aa-h200
