#!/usr/bin/env bash
# Issue 6 on an H200: why f32 rmsnorm and layernorm 32768x4096 run 3% behind
# torch.compile (bench/NOTES.md, campaign 4). Dumps Inductor's generated
# code and Triton cubin for each, compiles lanefold's kernel for the same
# problem with nvcc at NVRTC's options, and writes the SASS of both, for
# reading side by side. About 30 s. Results go to one tar in $OUT (or
# /tmp/sass-dump.tar).
# Usage: scripts/h200-sass.sh [LANEFOLD_BIN]   (CASES overrides the list)
set -euo pipefail
bin=${1:-.gpu/lanefold}
cases=${CASES:-rmsnorm:f32:32768x4096 layernorm:f32:32768x4096}
work=$(mktemp -d)
for c in $cases; do
  IFS=: read -r op dtype shape <<< "$c"
  d=$work/$op-$dtype-$shape
  mkdir -p "$d"
  python3 python/inductor_dump.py "$op" "$dtype" "$shape" "$d/inductor" || echo "inductor dump failed: $c"
  for cubin in "$d"/inductor/triton/*.cubin; do
    [ -e "$cubin" ] && cuobjdump -sass "$cubin" > "${cubin%.cubin}.sass" || true
  done
  # lanefold's default plan for the problem, its CUDA C and SASS.
  "$bin" plan --op "$op" --dtype "$dtype" --shape "$shape" --target h200 > "$d/lanefold-plan.txt"
  "$bin" bench --backend cuda --ops "$op" --dtypes "$dtype" --shapes "$shape" --samples 1 \
    --sample-ms 1 --warmup-ms 1 --capture-sources --output "$d/lanefold-bench" > /dev/null
  for cu in "$d"/lanefold-bench/sources/*.cu; do
    nvcc -cubin -arch=sm_90 -std=c++17 --fmad=true --prec-div=true --prec-sqrt=true \
      --ftz=false -o "${cu%.cu}.cubin" "$cu" && cuobjdump -sass "${cu%.cu}.cubin" > "${cu%.cu}.sass"
  done
done
tar cf "${OUT:-/tmp}/sass-dump.tar" -C "$work" .
echo "wrote ${OUT:-/tmp}/sass-dump.tar"
