#!/usr/bin/env bash
# Issue 5 on an H200: for softmax, layernorm and cross_entropy on 64x4096,
# 1024x4096 and 32768x4096 in f32 and bf16: reference (automatic V=1),
# 12-candidate gpu-objective search, 4-round frozen replay with torch.
# Usage: [OPS="softmax ..."] scripts/h200-issue5-sweeps.sh DATE [LANEFOLD_BIN]
set -euo pipefail
date=${1:?date}
bin=${2:-target/release/lanefold}
shapes=64x4096,1024x4096,32768x4096
s="--samples ${SAMPLES:-5} --sample-ms ${SAMPLE_MS:-10} --warmup-ms ${WARMUP_MS:-50}"
for op in ${OPS:-softmax layernorm cross_entropy}; do
  r=bench/results/$date-$op
  $bin bench --backend cuda --ops $op --shapes $shapes --dtypes f32,bf16 --mapper seed $s --capture-sources --output $r-reference-h200
  $bin search --backend cuda --ops $op --shapes $shapes --dtypes f32,bf16 --tune-workers 0,32,128,256 \
    --tune-pack 1,2,4 --tune-unroll 1 --tuning-metric gpu --max-candidates 12 $s --capture-sources --output $r-search-h200
  $bin replay --backend cuda --reference $r-reference-h200/results.json --candidate $r-search-h200/results.json \
    --rounds 4 $s --torch --output $r-replay-h200
  $bin audit $r-reference-h200 $r-search-h200 $r-replay-h200
done
