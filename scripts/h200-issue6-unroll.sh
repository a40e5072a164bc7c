#!/usr/bin/env bash
# Issue 6 on an H200: does stripe unroll U put more loads in flight for the
# read-only sum, where U=1 left it at 0.83-0.98x torch eager
# (bench/NOTES.md)? A gpu-objective search over W x V x U on the large
# shapes, every candidate measured (the cost model does not price U yet).
# Usage: scripts/h200-issue6-unroll.sh DATE [LANEFOLD_BIN]   (about 4 minutes)
set -euo pipefail
date=${1:?date}
bin=${2:-target/release/lanefold}
s="--samples ${SAMPLES:-5} --sample-ms ${SAMPLE_MS:-5} --warmup-ms ${WARMUP_MS:-20}"
r=bench/results/$date-sum-unroll-search-h200
$bin search --backend cuda --ops ${OPS:-sum} --shapes ${SHAPES:-32768x4096,16384x8192,4096x32768} --dtypes f32,bf16 \
  --tune-workers 0,16,32,64,128 --tune-pack 4,8 --tune-unroll 1,2,4 --tuning-metric gpu --max-candidates 30 \
  $s --capture-sources --output $r
$bin audit $r
