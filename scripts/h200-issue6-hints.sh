#!/usr/bin/env bash
# Issue 6 on an H200: do the two load policies close the last ~3% to
# torch.compile on the large shapes (bench/NOTES.md, campaign 3)?
# --streaming-hints (evict-first ld/st.global.cs) and --hoist-columns
# (weight and bias loaded with the row tile). Benches the default mapping
# with neither, each and both (one run each, no peers), then a frozen
# replay of neither against both with torch.compile and Liger, then audit.
# Usage: scripts/h200-issue6-hints.sh DATE [LANEFOLD_BIN]   (OPS, SHAPES,
# ROUNDS override; BUDGET_S, the seconds this script may take, ends each
# bench and the replay after the last case or round that fits; LIGER_WHEEL
# as in h200-issue6-final.sh)
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
# With a budget: each bench may take a ninth of it, the replay what is left.
# (at least 1 s: the first case or round always runs).
deadline() { if [ -n "${BUDGET_S:-}" ]; then echo "--deadline-s $(( $1 > 1 ? $1 : 1 ))"; fi; }
for v in "neither:" "hints:--streaming-hints" "hoist:--hoist-columns" "both:--streaming-hints --hoist-columns"; do
  # shellcheck disable=SC2046,SC2086
  $bin bench --backend cuda --ops "$ops" --shapes "$shapes" --dtypes f32,bf16 ${v#*:} $s --capture-sources \
    $(deadline $(( ${BUDGET_S:-0} / 9 + 1 ))) --output "$r-${v%%:*}-h200"
done
# shellcheck disable=SC2046
$bin replay --backend cuda --reference "$r-neither-h200/results.json" --candidate "$r-both-h200/results.json" \
  --rounds "${ROUNDS:-3}" $s --torch-compile --liger $(deadline $(( ${BUDGET_S:-0} - SECONDS - 30 ))) \
  --output "$r-replay-h200"
$bin audit "$r-neither-h200" "$r-hints-h200" "$r-hoist-h200" "$r-both-h200" "$r-replay-h200"
