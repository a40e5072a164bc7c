#!/usr/bin/env bash
# Target 4, automatic mapping: the layout searches bench/STANDING.md's
# target 4 cites, run again with this binary. Each search measures every
# candidate of its grid (validated, gpu phase) and today's automatic
# mapping beside them; `lanefold scorecard` compares the default pick with
# the searched winner (met at 90%). The grids are those of the cited
# searches, problem by problem (121 problems in four parts).
#
# Usage: BIN=path/to/lanefold bash scripts/reproduce-mapper.sh PART [OUT_PREFIX]
#   PART: short (the 84 short-row problems in four grids), large-f32 (15
#   problems), large-bf16 (14), long (8).
#   Writes one search directory per line below, OUT_PREFIX-OP-DTYPE-SHAPE-h200
#   (OUT_PREFIX-grid-SHAPES-h200 for the grids); OUT_PREFIX defaults to
#   bench/results/DATE-mapper. A search that would start with less than
#   45 s of the budget left is not started: RESUME=1 with the same
#   OUT_PREFIX runs the searches whose directories do not exist yet.
#   Env: see scripts/lib/common.sh (BUDGET_S, RESUME, TAR_TO, GPU_TAG).
#
# Device time, one call per part: short about 4 minutes (the four grids
# took 45, 45, 60 and 63 s), large-f32 and large-bf16 about 4-6 minutes,
# long about 4 (the cited per-problem searches took 4-25 s each).
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
part=${1:?"usage: reproduce-mapper.sh PART [OUT_PREFIX]  (PART: short, large-f32, large-bf16, long)"}
lf_prefix mapper "${2:-}"

# OPS DTYPES SHAPES [grid options] [| schedule tokens every candidate
# takes]; "all" is the six operators.
case $part in
  short) problems="
all f32,bf16 1024x4096 --tune-workers 64,128,256,512,1024 --tune-pack 4,8 --tune-unroll 1,2,4 --max-candidates 31
all f32,bf16 64x4096 --tune-workers 64,128,256,512,1024 --tune-pack 4,8 --tune-unroll 1,2,4 --max-candidates 31
all f32,bf16 1x127,17x257 --tune-workers 16,32,64,128 --tune-pack 1,2,4,8 --tune-unroll 1,2 --max-candidates 25
all f32,bf16 1x4096,8x4096,32x4096 --tune-workers 128,256,512,1024 --tune-pack 4,8 --tune-unroll 1,2 --max-candidates 17" ;;
  large-f32) problems="
sum f32 32768x4096 --tune-workers 256,512,1024 --tune-pack 4 --tune-unroll 2,4,8 --max-candidates 8
sum f32 16384x8192 --tune-workers 256,512,1024 --tune-pack 4 --tune-unroll 2,4,8 --max-candidates 8
sum f32 4096x32768 --tune-workers 256,512,1024 --tune-pack 4 --tune-unroll 2,4,8 --max-candidates 8
softmax f32 32768x4096 --tune-workers 256,512,1024 --tune-pack 4 --tune-unroll 2,4,8 --max-candidates 8
softmax f32 16384x8192 --tune-workers 256,512,1024 --tune-pack 4 --tune-unroll 2,4,8 --max-candidates 8
softmax f32 4096x32768 --tune-workers 256,512,1024 --tune-pack 4 --tune-unroll 2,4,8 --max-candidates 8
rmsnorm f32 32768x4096 --tune-workers 256,512,1024 --tune-pack 4 --tune-unroll 2,4,8 --max-candidates 8
rmsnorm f32 16384x8192 --tune-workers 256,512,1024 --tune-pack 4 --tune-unroll 2,4,8 --max-candidates 8
rmsnorm f32 4096x32768 --tune-workers 512,1024 --tune-pack 4 --tune-unroll 4,8 --tune-residency stream --max-candidates 6 | reread-hints
layernorm f32 32768x4096 --tune-workers 256,512,1024 --tune-pack 4 --tune-unroll 1,2,4 --tune-residency registers,stream --max-candidates 20 | one-pass-moments reread-hints
layernorm f32 16384x8192 --tune-workers 256,512,1024 --tune-pack 4 --tune-unroll 2,4,8 --max-candidates 8
layernorm f32 4096x32768 --tune-workers 512,1024 --tune-pack 4 --tune-unroll 4,8 --tune-residency stream --max-candidates 6 | one-pass-moments reread-hints
residual_layernorm f32 32768x4096 --tune-workers 256,512,1024 --tune-pack 4 --tune-unroll 2,4,8 --max-candidates 8
residual_layernorm f32 4096x32768 --tune-workers 4096 --tune-pack 4 --tune-unroll 1 --max-candidates 3 | push-reduce
cross_entropy f32 32768x4096 --tune-workers 256,512,1024 --tune-pack 4 --tune-unroll 2,4,8 --max-candidates 8" ;;
  large-bf16) problems="
sum bf16 32768x4096 --tune-workers 64,128,256,512,1024 --tune-pack 8 --tune-unroll 1,2,4,8 --max-candidates 20
sum bf16 16384x8192 --tune-workers 64,128,256,512,1024 --tune-pack 8 --tune-unroll 1,2,4,8 --max-candidates 20
sum bf16 4096x32768 --tune-workers 256,512,1024 --tune-pack 8 --tune-unroll 1,2,4 --max-candidates 8
softmax bf16 32768x4096 --tune-workers 256,512,1024 --tune-pack 8 --tune-unroll 1,2,4 --max-candidates 8
softmax bf16 16384x8192 --tune-workers 256,512,1024 --tune-pack 8 --tune-unroll 1,2,4 --max-candidates 8
softmax bf16 4096x32768 --tune-workers 256,512,1024 --tune-pack 8 --tune-unroll 1,2,4 --max-candidates 8
rmsnorm bf16 32768x4096 --tune-workers 256,512,1024 --tune-pack 8 --tune-unroll 1,2,4 --max-candidates 8
rmsnorm bf16 4096x32768 --tune-workers 256,512,1024 --tune-pack 8 --tune-unroll 1,2,4 --max-candidates 8
layernorm bf16 32768x4096 --tune-workers 128,256,512 --tune-pack 8 --tune-unroll 1,2,4 --tune-residency registers,stream --max-candidates 20 | one-pass-moments reread-hints
layernorm bf16 16384x8192 --tune-workers 256,512,1024 --tune-pack 8 --tune-unroll 1,2,4 --max-candidates 8
layernorm bf16 4096x32768 --tune-workers 256,512,1024 --tune-pack 8 --tune-unroll 2,4 --tune-residency registers --max-candidates 6 | packed-resident ordered-columns one-pass-moments
residual_layernorm bf16 32768x4096 --tune-workers 256,512,1024 --tune-pack 8 --tune-unroll 1,2,4 --max-candidates 8
residual_layernorm bf16 4096x32768 --tune-workers 256,512,1024 --tune-pack 8 --tune-unroll 2,4 --tune-residency registers --max-candidates 6 | packed-resident ordered-columns one-pass-moments rounded-resident occupancy=2
cross_entropy bf16 32768x4096 --tune-workers 256,512,1024 --tune-pack 8 --tune-unroll 1,2,4 --max-candidates 8" ;;
  long) problems="
softmax f32 4096x131072 --tune-workers 2048 --tune-pack 4 --tune-unroll 4 --max-candidates 3 | group-threads=256 push-reduce
softmax bf16 4096x131072 --tune-workers 1024,2048,4096 --tune-pack 8 --tune-unroll 1,2 --max-candidates 6
rmsnorm f32 4096x131072 --tune-workers 4096 --tune-pack 4 --tune-unroll 1 --max-candidates 3 | push-reduce
rmsnorm bf16 4096x131072 --tune-workers 1024,2048,4096 --tune-pack 8 --tune-unroll 1,2 --max-candidates 6
layernorm f32 4096x131072 --tune-workers 1024,2048,4096 --tune-pack 4 --tune-unroll 1,2 --max-candidates 6
layernorm bf16 4096x131072 --tune-workers 1024,2048,4096 --tune-pack 8 --tune-unroll 1,2 --max-candidates 6
layernorm f32 1024x262144 --tune-workers 1024,2048,4096 --tune-pack 4 --tune-unroll 1,2 --max-candidates 6
layernorm bf16 1024x262144 --tune-workers 1024,2048,4096 --tune-pack 8 --tune-unroll 1,2 --max-candidates 6" ;;
  *) lf_die "unknown PART $part (short, large-f32, large-bf16, long)" ;;
esac

# Directory of a line: PREFIX-OP-DTYPE-SHAPE-TAG, a grid PREFIX-grid-SHAPES-TAG.
dir_of() {
  if [ "$1" = all ]; then lf_dir "grid-${3//,/-}"; else lf_dir "$1-$2-$3"; fi
}
dirs=()
while read -r ops dtypes shapes grid; do
  [ -n "$ops" ] || continue
  d=$(dir_of "$ops" "$dtypes" "$shapes")
  [ -n "${RESUME:-}" ] || lf_claim "$d"
  dirs+=("$d")
done <<< "$problems"

skipped=()
while IFS='|' read -r spec schedule; do
  read -r ops dtypes shapes grid <<< "$spec"
  [ -n "$ops" ] || continue
  sched=()
  if [ -n "${schedule// /}" ]; then sched=(--schedule "$schedule"); fi
  d=$(dir_of "$ops" "$dtypes" "$shapes")
  if [ -e "$d" ]; then
    echo "-- $d exists (RESUME=1): not searched again"
    continue
  fi
  if [ "$(lf_left)" -lt 45 ]; then
    skipped+=("$d")
    continue
  fi
  lf_step "search $ops $dtypes $shapes -> $d"
  # shellcheck disable=SC2086
  if ! "$bin" search --backend cuda --ops "$ops" --dtypes "$dtypes" --shapes "$shapes" $grid \
    ${sched[@]+"${sched[@]}"} "${lf_phases[@]}" --tuning-metric gpu --capture-sources --output "$d"; then
    lf_failed="${lf_failed:+$lf_failed; }the search into $d failed"
    continue
  fi
  "$bin" scorecard "$d" | grep -E '^\| [a-z]' || true
done <<< "$problems"
if [ ${#skipped[@]} -gt 0 ]; then
  lf_partial="${#skipped[@]} searches left for want of time (${skipped[*]}): run the same command again with RESUME=1"
fi
lf_finish "${dirs[@]}"
