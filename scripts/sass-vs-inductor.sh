#!/usr/bin/env bash
# lanefold's kernel beside torch.compile's for the same problems, as SASS:
# Inductor's generated code and Triton cubins (python/inductor_dump.py),
# lanefold's default plan and its captured CUDA source compiled with nvcc
# at NVRTC's options, each disassembled with cuobjdump, for reading side
# by side (bench/inductor holds what such a dump showed).
#
# Usage: BIN=path/to/lanefold bash scripts/sass-vs-inductor.sh [OUT_DIR]
#   CASES="op:dtype:shape ..." (default the f32 rmsnorm and layernorm
#   at 32768x4096). Writes OUT_DIR/OP-DTYPE-SHAPE/{inductor,
#   lanefold-plan.txt,lanefold-bench}; OUT_DIR defaults to
#   /tmp/lanefold-sass-DATE. TAR_TO: also one gzipped tar there.
#
# Device time, one call: about 1 minute for two cases.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${BIN:-$root/target/release/lanefold}
out=${1:-/tmp/lanefold-sass-$(date -u +%F)}
cases=${CASES:-rmsnorm:f32:32768x4096 layernorm:f32:32768x4096}
[ ! -e "$out" ] || { echo "sass-vs-inductor.sh: $out exists" >&2; exit 2; }
benches=()
for c in $cases; do
  IFS=: read -r op dtype shape <<< "$c"
  d=$out/$op-$dtype-$shape
  mkdir -p "$d"
  python3 "$root/python/inductor_dump.py" "$op" "$dtype" "$shape" "$d/inductor" || echo "inductor dump failed: $c"
  for cubin in "$d"/inductor/triton/*.cubin; do
    [ -e "$cubin" ] && cuobjdump -sass "$cubin" > "${cubin%.cubin}.sass" || true
  done
  "$bin" plan --op "$op" --dtype "$dtype" --shape "$shape" --target h200 > "$d/lanefold-plan.txt"
  "$bin" bench --backend cuda --ops "$op" --dtypes "$dtype" --shapes "$shape" --samples 1 \
    --sample-ms 1 --warmup-ms 1 --capture-sources --output "$d/lanefold-bench" > /dev/null
  benches+=("$d/lanefold-bench")
  for cu in "$d"/lanefold-bench/sources/*.cu; do
    nvcc -cubin -arch=sm_90 -std=c++17 --fmad=true --prec-div=true --prec-sqrt=true \
      --ftz=false -o "${cu%.cu}.cubin" "$cu" && cuobjdump -sass "${cu%.cu}.cubin" > "${cu%.cu}.sass"
  done
done
"$bin" audit "${benches[@]}"
if [ -n "${TAR_TO:-}" ]; then
  tar czf "$TAR_TO/$(basename "$out").tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
  echo "tarred into $TAR_TO/$(basename "$out").tar.gz"
fi
echo "results: $out"
