#!/usr/bin/env bash
# The CUDA selftest on a machine with an NVIDIA GPU, with the evidence the
# README promises: device, driver, the binary's SHA-256, the full log.
# Usage: scripts/gpu-selftest.sh [OUTPUT_DIR]   (LANEFOLD_BIN overrides the binary;
# QUICK=1 skips the long rows, which took more than 4 minutes on the H200 device;
# LONG_ONLY=1 runs only them, so QUICK=1 and LONG_ONLY=1 make the full
# selftest in two device calls; VARIANTS_ONLY=1 runs only the
# variant checks; SKIP_VARIANTS=1 leaves them out, for a quick half that
# fits one call beside a VARIANTS_ONLY=1 call)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${LANEFOLD_BIN:-target/release/lanefold}
if [ ! -x "$bin" ]; then
  cargo build --release
fi
out=${1:-bench/results/$(date -u +%Y-%m-%d)-selftest-$(hostname -s)}
mkdir -p "$out"
{
  echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "binary_sha256: $(sha256sum "$bin" | cut -d' ' -f1)"
  echo "git: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  # The commit the binary was built from: a device's copy of the checkout
  # may show an older HEAD above.
  echo "binary_version: $("$bin" --version)"
  nvidia-smi --query-gpu=name,driver_version,uuid,clocks.sm,clocks.mem --format=csv
} > "$out/environment.txt"
set +e
"$bin" selftest --backend cuda ${QUICK:+--quick} ${LONG_ONLY:+--long-shapes-only} ${VARIANTS_ONLY:+--variants-only} \
  ${SKIP_VARIANTS:+--skip-variants} \
  2>&1 | tee "$out/selftest.log"
status=${PIPESTATUS[0]}
if [ -z "${QUICK:-}${LONG_ONLY:-}${VARIANTS_ONLY:-}" ]; then
  "$bin" speed --output "$out/speed" 2>&1 | tee "$out/speed.log"
fi
exit "$status"
