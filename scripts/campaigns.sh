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
# which has no L2 to rotate past). Paths given are from the caller's
# folder. Exit 2 on a missing campaign or binary.
# On the device, with the binary carried in .device:
#   TAR_TO=$OUT BIN=.device/lanefold bash scripts/campaigns.sh NAME:150 OTHER
[ $# -gt 0 ] || { echo "usage: campaigns.sh NAME[:UNTIL_S]..." >&2; exit 2; }
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
dir=bench/campaigns
[ -z "${CAMPAIGNS_DIR:-}" ] || dir=$(lf_path "$CAMPAIGNS_DIR")
root=$(lf_path "${OUT_ROOT:-/tmp}")
[ -z "${TAR_TO:-}" ] || TAR_TO=$(lf_path "$TAR_TO")
for arg in "$@"; do
  [ -f "$dir/${arg%%:*}.txt" ] || lf_die "no $dir/${arg%%:*}.txt"
done
left=$#
for arg in "$@"; do
  name=${arg%%:*}
  if [ "$arg" != "$name" ]; then
    until_s=${arg##*:}
  else
    until_s=$((SECONDS + (lf_budget - SECONDS) / left))
  fi
  left=$((left - 1))
  l2=${L2:-cold-inputs}
  [ -z "${L2:-}" ] && grep -q '^#.*L2=warm' "$dir/$name.txt" && l2=warm
  echo "== $name: L2 $l2, until ${until_s} s of $lf_budget"
  L2=$l2 BUDGET_S=$((until_s - SECONDS)) BIN=$bin bash scripts/abba.sh "$root/$name-$lf_tag" \
    "$dir/$name.txt" || echo "campaigns.sh: $name ended with an error" >&2
done
