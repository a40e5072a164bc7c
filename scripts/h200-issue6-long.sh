#!/usr/bin/env bash
# Issue 6 on an H200, long rows (target 2): on 4096x131072 the default
# 4-group clusters of 512 threads ran 2.3-3.0 TB/s with one group per SM
# (bench/NOTES.md). Searches W (streamed W=1024 against 4- and 8-group
# clusters) with the default 512-thread groups and with 256-thread groups,
# which let two groups share an SM, for softmax and rmsnorm; then audit.
# Usage: scripts/h200-issue6-long.sh DATE [LANEFOLD_BIN]   (OPS, SHAPES,
# DTYPES override; about 4 minutes)
set -euo pipefail
date=${1:?date}
bin=${2:-target/release/lanefold}
ops=${OPS:-softmax,rmsnorm}
shapes=${SHAPES:-4096x131072}
dtypes=${DTYPES:-f32,bf16}
s="--samples ${SAMPLES:-3} --sample-ms ${SAMPLE_MS:-5} --warmup-ms ${WARMUP_MS:-20}"
for g in 512 256; do
  out=bench/results/$date-long-rows-search-g$g-h200
  $bin search --backend cuda --ops "$ops" --shapes "$shapes" --dtypes "$dtypes" \
    --tune-workers 1024,2048,4096 --tune-pack 4,8 --cluster-group-threads $g \
    --tuning-metric gpu $s --capture-sources --output "$out"
  $bin audit "$out"
done
