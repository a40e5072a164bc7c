#!/usr/bin/env bash
# Issue 6 on an H200: do the two load policies close the last ~3% to
# torch.compile on the large shapes (bench/NOTES.md, campaign 3)?
# --streaming-hints (evict-first ld/st.global.cs) and --hoist-columns
# (weight and bias loaded with the row tile). Benches the default mapping
# with neither, each and both (one run each, no peers), then a frozen
# replay of neither against both with torch.compile and Liger, then audit.
# Usage: scripts/h200-issue6-hints.sh DATE [LANEFOLD_BIN]   (OPS, SHAPES,
# ROUNDS override; DEADLINE_S ends the replay after the last round that
# fits; LIGER_WHEEL as in h200-issue6-final.sh)
set -euo pipefail
date=${1:?date}
bin=${2:-target/release/lanefold}
ops=${OPS:-rmsnorm,layernorm,sum,softmax}
shapes=${SHAPES:-32768x4096,16384x8192,1024x4096,1x127}
s="--samples ${SAMPLES:-3} --sample-ms ${SAMPLE_MS:-5} --warmup-ms ${WARMUP_MS:-20}"
if [ -n "${LIGER_WHEEL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$LIGER_WHEEL"
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
r=bench/results/$date-loads
for v in "neither:" "hints:--streaming-hints" "hoist:--hoist-columns" "both:--streaming-hints --hoist-columns"; do
  # shellcheck disable=SC2086
  $bin bench --backend cuda --ops "$ops" --shapes "$shapes" --dtypes f32,bf16 ${v#*:} $s --capture-sources --output "$r-${v%%:*}-h200"
done
$bin replay --backend cuda --reference "$r-neither-h200/results.json" --candidate "$r-both-h200/results.json" \
  --rounds "${ROUNDS:-3}" $s --torch-compile --liger ${DEADLINE_S:+--deadline-s $DEADLINE_S} --output "$r-replay-h200"
$bin audit "$r-neither-h200" "$r-hints-h200" "$r-hoist-h200" "$r-both-h200" "$r-replay-h200"
