#!/usr/bin/env bash
# The CUDA selftest (`lanefold selftest --backend cuda`: every plan's output
# against the CPU reference, bit-identity and batch-invariance checks) on a
# machine with an NVIDIA GPU, in parts that each fit one device call, with
# the evidence the audit checks: the device, driver, binary SHA-256 and the
# full log.
#
# Usage: BIN=path/to/lanefold bash scripts/selftest-cuda.sh PART... [OUT_PREFIX]
#   PART: quick (every shape but the long rows, without the opt-in
#   variants' checks), variants (only those checks), long (only the
#   long-row shapes). The three make the whole selftest; `quick long` fit
#   one call together. Each part writes OUT_PREFIX-PART-h200
#   (environment.txt, selftest.log); OUT_PREFIX defaults to
#   bench/results/DATE-selftest.
#   Env: see scripts/lib/common.sh (BUDGET_S, TAR_TO, GPU_TAG).
#
# Device time: quick about 1 minute (42-46 s), variants about 6 (218-324 s
# as the checks grew), long about 4 (139-219 s); from the committed logs
# of the selftest halves.
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
parts=()
prefix=
for a in "$@"; do
  case $a in
    quick | variants | long) parts+=("$a") ;;
    *)
      [ -z "$prefix" ] || lf_die "unknown PART $a (quick, variants, long)"
      prefix=$a
      ;;
  esac
done
[ ${#parts[@]} -gt 0 ] || lf_die "usage: selftest-cuda.sh PART... [OUT_PREFIX]  (PART: quick, variants, long)"
lf_prefix selftest "$prefix"
dirs=()
for p in "${parts[@]}"; do dirs+=("$(lf_dir "$p")"); done
lf_claim "${dirs[@]}"

for p in "${parts[@]}"; do
  d=$(lf_dir "$p")
  if [ "$(lf_left)" -lt 30 ]; then
    lf_partial="${lf_partial:+$lf_partial; }selftest $p not run for want of time"
    continue
  fi
  case $p in
    quick) flags=(--quick --skip-variants) ;;
    variants) flags=(--variants-only) ;;
    long) flags=(--long-shapes-only) ;;
  esac
  mkdir -p "$d"
  {
    echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "binary_sha256: $(sha256sum "$bin" | cut -d' ' -f1)"
    echo "git: $(git rev-parse HEAD 2> /dev/null || echo unknown)"
    # The commit the binary was built from: a device's copy of the
    # checkout may show another HEAD above.
    echo "binary_version: $("$bin" --version)"
    echo "command: lanefold selftest --backend cuda ${flags[*]}"
    nvidia-smi --query-gpu=name,driver_version,uuid,clocks.sm,clocks.mem --format=csv
  } > "$d/environment.txt"
  lf_step "selftest $p (${flags[*]}) -> $d"
  set +e
  timeout "$(lf_left)" "$bin" selftest --backend cuda "${flags[@]}" 2>&1 | tee "$d/selftest.log"
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -ne 0 ]; then
    lf_failed="${lf_failed:+$lf_failed; }selftest $p exited $rc$([ "$rc" -eq 124 ] && echo ' (out of time)')"
  fi
done
lf_finish "${dirs[@]}"
