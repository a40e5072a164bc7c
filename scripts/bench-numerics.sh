#!/usr/bin/env bash
# Paired speed check of the numerics change, in one session (A B B A, so
# drift cancels): the old binary (A) against the new one (B) with the
# same default schedules, and the new one with (B, the default) and
# without (C, `no-cold-path`) the norms' cold path (B C C B). Each run is a `lanefold bench` of
# the GPU phase (3 samples of 5 ms); compare the p50s of matching cases
# across the runs (results.md in each directory).
#
# Usage: bash scripts/bench-numerics.sh PART
#   PART: norms  rmsnorm, layernorm, residual_layernorm at 4096x8192,
#                1024x4096, 16384x4096; A B B A
#         long   the same norms at 1024x131072; A B B A
#         online softmax, cross_entropy at 4096x8192, 1024x4096,
#                1024x131072; A B B A
#         cold   the norms of `norms`, B C C B, C with `--schedule no-cold-path`
#   Env: OLD (default .device/lanefold-old), NEW (default .device/lanefold),
#   OUT (default /tmp/bench-numerics), SHAPES and DTYPES (override the
#   part's; default f32,bf16), RUN_S (seconds a run may take, default 140).
# Each PART fits one 10-minute device call (about 5-7 minutes).
set -u
part=${1:?usage: bench-numerics.sh norms|long|online|cold}
old=${OLD:-.device/lanefold-old}
new=${NEW:-.device/lanefold}
out=${OUT:-/tmp/bench-numerics}
norm_shapes=4096x8192,1024x4096,16384x4096
dtypes=${DTYPES:-f32,bf16}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$out/gpu.txt" 2>&1
for b in "$old" "$new"; do echo "$b $(sha256sum "$b" | cut -d' ' -f1) $("$b" --version)"; done > "$out/binaries.txt"
norms=rmsnorm,layernorm,residual_layernorm
ab=("a1:$old:" "b1:$new:" "b2:$new:" "a2:$old:")
case $part in
  norms) ops=$norms shapes=$norm_shapes order=("${ab[@]}") ;;
  long) ops=$norms shapes=1024x131072 order=("${ab[@]}") ;;
  online) ops=softmax,cross_entropy shapes=4096x8192,1024x4096,1024x131072 order=("${ab[@]}") ;;
  cold) ops=$norms shapes=$norm_shapes order=("b1:$new:" "c1:$new:no-cold-path" "c2:$new:no-cold-path" "b2:$new:") ;;
  *) echo "unknown PART $part (norms, long, online, cold)" >&2; exit 2 ;;
esac
shapes=${SHAPES:-$shapes}
common=(--shapes "$shapes" --dtypes "$dtypes" --samples 3 --sample-ms 5 --warmup-ms 20 --backend cuda --quiet)
t0=$(date +%s)
for run in "${order[@]}"; do
  IFS=: read -r name bin schedule <<< "$run"
  extra=()
  [ -n "$schedule" ] && extra=(--schedule "$schedule")
  d="$out/$part-$name"
  timeout "${RUN_S:-140}" "$bin" bench --ops "$ops" "${common[@]}" "${extra[@]}" --output "$d" > "$d.txt" 2>&1
  echo "rc=$? after $(($(date +%s) - t0)) s" >> "$d.txt"
  echo "[$(($(date +%s) - t0)) s] $part $name ($bin ${schedule:-default})"
done
dirs=()
for d in "$out/$part"-*; do [ -d "$d" ] && dirs+=("$(basename "$d")"); done
tar -C "$out" -czf "$out/$part.tar.gz" "${dirs[@]}" 2> /dev/null
grep -h "rc=" "$out/$part"-*.txt
