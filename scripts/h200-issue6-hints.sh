#!/usr/bin/env bash
# Issue 6 on an H200: do evict-first cache hints (--streaming-hints) close
# the last ~3% to torch.compile on the large shapes (bench/NOTES.md,
# campaign 3)? Benches the default mapping without and with the hints, then
# a frozen replay of the two against torch.compile and Liger, then audit.
# Usage: scripts/h200-issue6-hints.sh DATE [LANEFOLD_BIN]   (OPS, SHAPES,
# ROUNDS override; DEADLINE_S ends the replay after the last round that
# fits; LIGER_WHEEL as in h200-issue6-final.sh)
set -euo pipefail
date=${1:?date}
bin=${2:-target/release/lanefold}
ops=${OPS:-rmsnorm,layernorm,sum,softmax}
shapes=${SHAPES:-32768x4096,16384x8192}
s="--samples ${SAMPLES:-3} --sample-ms ${SAMPLE_MS:-5} --warmup-ms ${WARMUP_MS:-20}"
if [ -n "${LIGER_WHEEL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$LIGER_WHEEL"
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
r=bench/results/$date-hints
$bin bench --backend cuda --ops "$ops" --shapes "$shapes" --dtypes f32,bf16 $s --capture-sources --output "$r-off-h200"
$bin bench --backend cuda --ops "$ops" --shapes "$shapes" --dtypes f32,bf16 --streaming-hints $s --capture-sources --output "$r-on-h200"
$bin replay --backend cuda --reference "$r-off-h200/results.json" --candidate "$r-on-h200/results.json" \
  --rounds "${ROUNDS:-3}" $s --torch-compile --liger ${DEADLINE_S:+--deadline-s $DEADLINE_S} --output "$r-replay-h200"
$bin audit "$r-off-h200" "$r-on-h200" "$r-replay-h200"
