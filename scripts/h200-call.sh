#!/usr/bin/env bash
# One device call of the issue-6 plan (bench/NOTES.md, "Next device
# session"), each step bounded so the call ends inside the device tool's
# 10-minute limit, and every results directory tarred into $OUT as soon as
# its step ends (the tool returns at most 8 files and keeps nothing else).
# Usage on the device: scripts/h200-call.sh CALL DATE
#   CALL 1: quick CUDA selftest, then the load-policy A/B
#   CALL 2: large-shape replay of rmsnorm, layernorm, residual_layernorm
#           and sum against the campaign-1 default, all three peers
#   CALL 3: long-row W search (512- and 256-thread cluster groups)
#   CALL 4: short rows of sum, layernorm, residual_layernorm; bf16 softmax
#           W x V search
# Env: BIN (default .gpu/lanefold), LIGER_WHEEL (a carried wheel), BUDGET_S
# (default 540), OUT (the device tool's output folder; unset: no tarring).
set -uo pipefail
call=${1:?call number}
date=${2:?date}
bin=${BIN:-.gpu/lanefold}
budget=${BUDGET_S:-540}
s="--samples 3 --sample-ms 5 --warmup-ms 20"
if [ -n "${LIGER_WHEEL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$LIGER_WHEEL"
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
left() { echo $((budget - SECONDS - 20)); }
keep() { # tar the named results directories into $OUT
  [ -n "${OUT:-}" ] || return 0
  local name=$1; shift
  tar cf "$OUT/$name.tar" "$@" 2>/dev/null || true
}
step() { echo "== $* (at ${SECONDS}s, $(left)s left)"; }
r=bench/results/$date
case $call in
1)
  step selftest
  QUICK=1 LANEFOLD_BIN=$bin timeout 150 bash scripts/gpu-selftest.sh "$r-selftest-quick-h200" > "${OUT:-/tmp}/selftest.log" 2>&1
  echo "selftest rc=$?"; keep selftest "$r-selftest-quick-h200"
  step load policies
  OPS=rmsnorm,layernorm,softmax SHAPES=32768x4096,1024x4096 BUDGET_S=$(left) \
    timeout "$(left)" bash scripts/h200-issue6-hints.sh "$date" "$bin" > "${OUT:-/tmp}/loads.log" 2>&1
  echo "loads rc=$?"; keep loads "$r"-loads-*
  ;;
2)
  step bench
  timeout "$(left)" "$bin" bench --backend cuda --ops rmsnorm,layernorm,residual_layernorm,sum \
    --shapes 32768x4096,16384x8192,4096x32768 --dtypes f32,bf16 $s --capture-sources \
    --deadline-s 120 --output "$r-large-final-h200" > "${OUT:-/tmp}/bench.log" 2>&1
  echo "bench rc=$?"; keep bench "$r-large-final-h200"
  step replay
  timeout "$(left)" "$bin" replay --backend cuda --reference bench/results/2026-11-29-large-auto-h200/results.json \
    --candidate "$r-large-final-h200/results.json" --rounds 3 $s --torch --torch-compile --liger \
    --deadline-s "$(( $(left) - 30 ))" --output "$r-large-final-replay-h200" > "${OUT:-/tmp}/replay.log" 2>&1
  echo "replay rc=$?"; keep replay "$r-large-final-replay-h200"
  ;;
3)
  step long-row search
  timeout "$(left)" bash scripts/h200-issue6-long.sh "$date" "$bin" > "${OUT:-/tmp}/long.log" 2>&1
  echo "long rc=$?"; keep long "$r"-long-rows-search-*
  ;;
4)
  step short rows
  timeout 200 "$bin" bench --backend cuda --ops sum,layernorm,residual_layernorm \
    --shapes 1x127,17x257,1x4096,8x4096,32x4096,64x4096,1024x4096 --dtypes f32,bf16 \
    --torch --torch-compile $s --capture-sources --deadline-s 180 --output "$r-short-rows-2-h200" > "${OUT:-/tmp}/short.log" 2>&1
  echo "short rc=$?"; keep short "$r-short-rows-2-h200"
  step bf16 softmax search
  timeout "$(left)" "$bin" search --backend cuda --ops softmax --shapes 32768x4096,16384x8192 --dtypes bf16 \
    --tune-workers 64,128,256,512 --tune-pack 4,8 --tuning-metric gpu $s --capture-sources \
    --output "$r-softmax-bf16-search-h200" > "${OUT:-/tmp}/search.log" 2>&1
  echo "search rc=$?"; keep search "$r-softmax-bf16-search-h200"
  ;;
*) echo "unknown call $call (1-4)"; exit 2 ;;
esac
echo "done at ${SECONDS}s"
