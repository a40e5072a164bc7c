#!/usr/bin/env bash
# Issue 6 on an H200, one operator per device call (each fits the 10-minute
# limit): bench the seed mapping (reference) and the default mapping
# (candidate) on the large shapes, then a 4-round frozen replay against
# torch eager, torch.compile and Liger-Kernel, then audit.
# Liger is not on the device image: put its wheel (pure Python) in a carried
# folder, e.g. `pip download --no-deps liger-kernel==0.8.5 -d .gpu`, and set
# LIGER_WHEEL=.gpu/liger_kernel-0.8.5-py3-none-any.whl.
# Usage: scripts/h200-issue6-final.sh DATE OP [LANEFOLD_BIN]
set -euo pipefail
date=${1:?date}
op=${2:?operator}
bin=${3:-target/release/lanefold}
shapes=${SHAPES:-32768x4096,16384x8192,4096x32768}
s="--samples ${SAMPLES:-5} --sample-ms ${SAMPLE_MS:-10} --warmup-ms ${WARMUP_MS:-50}"
if [ -n "${LIGER_WHEEL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$LIGER_WHEEL"
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
r=bench/results/$date-$op-large
$bin bench --backend cuda --ops "$op" --shapes "$shapes" --dtypes f32,bf16 --mapper seed $s --capture-sources --output "$r-seed-h200"
$bin bench --backend cuda --ops "$op" --shapes "$shapes" --dtypes f32,bf16 $s --capture-sources --output "$r-auto-h200"
$bin replay --backend cuda --reference "$r-seed-h200/results.json" --candidate "$r-auto-h200/results.json" \
  --rounds 4 $s --torch --torch-compile --liger --output "$r-replay-h200"
$bin audit "$r-seed-h200" "$r-auto-h200" "$r-replay-h200"
