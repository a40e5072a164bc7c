#!/usr/bin/env bash
# Several prepared campaigns of bench/campaigns/ in one device command,
# each through abba.sh (A B B A per case) with the L2 state its header asks
# for (`L2=warm`, else cold-inputs), into OUT_ROOT/NAME-TAG, and with
# TAR_TO one gzipped tar per campaign there.
#
# Usage: bash scripts/campaigns.sh NAME[:UNTIL_S]...
#   NAME: a file CAMPAIGNS_DIR/NAME.txt. UNTIL_S: the second of the
#   whole command by which that campaign must end (a run that would start
#   later is skipped and named); without it, the time left is shared
#   evenly among the campaigns still to run.
# Env: BIN, BACKEND (cuda), BUDGET_S (540), OUT_ROOT (/tmp), TAR_TO,
# GPU_TAG (see lib/common.sh), CAMPAIGNS_DIR (bench/campaigns), L2 (every
# campaign's L2 state instead of its header's: `warm` on the CPU backend,
# which has no L2 to rotate past). Relative paths are from the repository
# root. Exit 2 on a missing campaign or binary.
# On the device, with the binary carried in .device:
#   TAR_TO=$OUT BIN=.device/lanefold bash scripts/campaigns.sh NAME:150 OTHER
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: campaigns.sh NAME[:UNTIL_S]..." >&2; exit 2; }
bin=${BIN:-target/release/lanefold}
dir=${CAMPAIGNS_DIR:-bench/campaigns}
budget=${BUDGET_S:-540}
root=${OUT_ROOT:-/tmp}
for arg in "$@"; do
  [ -f "$dir/${arg%%:*}.txt" ] || { echo "campaigns.sh: no $dir/${arg%%:*}.txt" >&2; exit 2; }
done
[ -x "$bin" ] || { echo "campaigns.sh: no lanefold binary at $bin" >&2; exit 2; }
tag=${GPU_TAG:-}
if [ -z "$tag" ] && command -v nvidia-smi > /dev/null 2>&1; then
  tag=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -n 1 |
    tr ' ' '\n' | grep -m 1 -E '[A-Za-z].*[0-9]|[0-9].*[A-Za-z]' || true)
fi
tag=$(echo "${tag:-$(hostname -s)}" | tr '[:upper:]' '[:lower:]' | tr -c 'a-z0-9\n' '-')
left=$#
for arg in "$@"; do
  name=${arg%%:*}
  if [ "$arg" != "$name" ]; then
    until_s=${arg##*:}
  else
    until_s=$((SECONDS + (budget - SECONDS) / left))
  fi
  left=$((left - 1))
  l2=${L2:-cold-inputs}
  [ -z "${L2:-}" ] && grep -q '^#.*L2=warm' "$dir/$name.txt" && l2=warm
  echo "== $name: L2 $l2, until ${until_s} s of $budget"
  L2=$l2 BUDGET_S=$((until_s - SECONDS)) BIN=$bin bash scripts/abba.sh "$root/$name-$tag" \
    "$dir/$name.txt" || echo "campaigns.sh: $name ended with an error" >&2
done
