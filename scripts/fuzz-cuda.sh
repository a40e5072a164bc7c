#!/usr/bin/env bash
# Differential fuzzing on the GPU in one device call: `lanefold selftest
# --backend cuda --fuzz N --seed S` (drawn operators, dtypes, shapes up to
# 70,000 elements a row, legal plans with and without the norms' cold
# path, values at the numerical corners), each case against the float64
# oracle. Progress is printed every 256 cases, so a run cut short by the
# time limit still says how many cases ran and passed.
#
# Usage: bash scripts/fuzz-cuda.sh [CASES] [SEED]   (defaults 10000, 1)
#   Env: BIN (default .device/lanefold), OUT (default /tmp/fuzz-cuda),
#   LIMIT_S (default 560: the seconds the fuzz may run).
set -u
bin=${BIN:-.device/lanefold}
out=${OUT:-/tmp/fuzz-cuda}
cases=${1:-10000}
seed=${2:-1}
mkdir -p "$out"
{
  echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "binary_sha256: $(sha256sum "$bin" | cut -d' ' -f1)"
  echo "binary_version: $("$bin" --version)"
  echo "command: lanefold --quiet selftest --backend cuda --fuzz $cases --seed $seed"
  nvidia-smi --query-gpu=name,driver_version,uuid,clocks.sm,clocks.mem --format=csv
} > "$out/environment.txt" 2>&1
start=$(date +%s)
timeout "${LIMIT_S:-560}" "$bin" --quiet selftest --backend cuda --fuzz "$cases" --seed "$seed" > "$out/fuzz-cuda.log" 2>&1
rc=$?
echo "rc=$rc seconds=$(($(date +%s) - start))" >> "$out/fuzz-cuda.log"
failed=$(grep -c '^FAIL' "$out/fuzz-cuda.log")
echo "failed cases: $failed" >> "$out/fuzz-cuda.log"
tail -3 "$out/fuzz-cuda.log"
exit "$rc"
