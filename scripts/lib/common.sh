# shellcheck shell=bash
# Sourced by the device scripts beside it (never run alone): the lanefold
# binary, the names of the results directories a run writes, the peers'
# Python packages and scratch space, the time left in one device command,
# and the closing audit.
#
# Every results directory a script writes is named PREFIX[-ROLE]-TAG:
# PREFIX is the script's OUT_PREFIX argument (default
# bench/results/DATE-<what it reproduces>), TAG the GPU's short name
# (h200), as the committed directories are. A script refuses to start when
# one of its directories exists (RESUME=1 continues where a script says so).
#
# Environment:
#   BIN          the lanefold binary (default target/release/lanefold)
#   BUDGET_S     seconds the whole script may take (default 540: one
#                10-minute device command, less the copies around it)
#   ROUNDS       replay rounds where a script replays (default 4)
#   GPU_TAG      the directories' suffix (default from nvidia-smi: h200)
#   LIGER_WHEEL  a Liger-Kernel wheel, or a folder of wheels, installed
#                into /tmp/lanefold-site for the Python peer
#   NO_LIGER=1   go on where Liger cannot be imported (the replay records
#                it missing with the reason)
#   TAR_TO       also write one gzipped tar of the results into this
#                folder (on the device tool: TAR_TO=$OUT)
set -euo pipefail

lf_caller_pwd=$PWD
lf_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
lf_script=$(basename "$0")
lf_start=$SECONDS
lf_budget=${BUDGET_S:-540}
lf_rounds=${ROUNDS:-4}
# Every committed replay and search measured this way: p50 of 3 samples of
# about 5 ms per side, gpu phase, L2 warm.
lf_phases=(--samples 3 --sample-ms 5 --warmup-ms 20)

lf_die() {
  echo "$lf_script: $*" >&2
  exit 2
}

# A path given relative to where the script started, as a path relative to
# the repository root where it lies inside it (results record the paths
# they were given).
lf_path() {
  local p=$1
  case $p in /*) ;; *) p=$lf_caller_pwd/$p ;; esac
  realpath -m --relative-base="$lf_root" "$p"
}

if [ -n "${BIN:-}" ]; then bin=$(lf_path "$BIN"); else bin=target/release/lanefold; fi
case $bin in */*) ;; *) bin=./$bin ;; esac
cd "$lf_root"
[ -x "$bin" ] || lf_die "no lanefold binary at $bin: build it (cargo build --release) or set BIN"

lf_tag=${GPU_TAG:-}
if [ -z "$lf_tag" ] && command -v nvidia-smi > /dev/null 2>&1; then
  # "NVIDIA H200" -> h200: the first word with a letter and a digit.
  lf_tag=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -n 1 |
    tr ' ' '\n' | grep -m 1 -E '[A-Za-z].*[0-9]|[0-9].*[A-Za-z]' || true)
fi
lf_tag=$(echo "${lf_tag:-$(hostname -s)}" | tr '[:upper:]' '[:lower:]' | tr -c 'a-z0-9\n' '-')

# lf_prefix DEFAULT_NAME [USER_PREFIX]: the results directories' prefix.
lf_prefix() {
  if [ -n "${2:-}" ]; then
    lf_pre=$(lf_path "$2")
  else
    lf_pre=bench/results/$(date -u +%F)-$1
  fi
}

# lf_dir [ROLE]: PREFIX-ROLE-TAG (PREFIX-TAG without a role).
lf_dir() { echo "$lf_pre${1:+-$1}-$lf_tag"; }

# lf_claim DIR...: refuse to write over any of them.
lf_claim() {
  local d
  for d in "$@"; do
    [ ! -e "$d" ] || lf_die "$d exists; give another OUT_PREFIX (results are never written over)"
  done
}

lf_left() { echo $((lf_budget - (SECONDS - lf_start))); }
lf_step() { echo "== $* ($((SECONDS - lf_start)) s in, $(lf_left) s left)"; }

# lf_peers [liger]: scratch for the peers' inputs and outputs in RAM where
# /dev/shm has room (hundreds of MB per large case and side; a replay's
# wall time is mostly this traffic), and with `liger`, Liger-Kernel
# importable or a reason to go on without it.
lf_peers() {
  local shm_kb
  shm_kb=$(df -Pk /dev/shm 2> /dev/null | awk 'NR == 2 { print $4 }')
  if [ "${shm_kb:-0}" -gt $((16 * 1024 * 1024)) ]; then
    export TMPDIR=/dev/shm/lanefold-tmp
    mkdir -p "$TMPDIR"
  fi
  echo "scratch: ${TMPDIR:-/tmp}"
  [ "${1:-}" = liger ] || return 0
  if [ -n "${LIGER_WHEEL:-}" ]; then
    local wheels=("$(lf_path "$LIGER_WHEEL")")
    [ -d "${wheels[0]}" ] && wheels=("${wheels[0]}"/*.whl)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/lanefold-site "${wheels[@]}"
    export PYTHONPATH=/tmp/lanefold-site${PYTHONPATH:+:$PYTHONPATH}
  fi
  if ! python3 -c 'import liger_kernel' 2> /dev/null; then
    [ -n "${NO_LIGER:-}" ] ||
      lf_die "Liger-Kernel cannot be imported: carry its wheel and set LIGER_WHEEL (or NO_LIGER=1 to go on without it)"
    echo "warning: no Liger-Kernel; the replay records it missing"
  fi
}

# lf_rounds_done DIR: the rounds a replay directory holds.
lf_rounds_done() {
  python3 - "$1" << 'PY'
import gzip, json, os, sys
d = sys.argv[1]
p = os.path.join(d, "results.json")
f = open(p) if os.path.exists(p) else gzip.open(p + ".gz", "rt")
print(json.load(f)["rounds_done"])
PY
}

# lf_defaults_aa REF AA PEER_FLAGS BENCH_OPTIONS...: today's default layouts
# of the cases BENCH_OPTIONS select, benched (lanefold alone) into REF,
# then REF replayed against itself (the A/A control: both sides the same
# kernel, position-balanced, fresh inputs each round) with the peers
# beside it, ROUNDS rounds, into AA, starting no round that would end past
# the budget. RESUME=1 continues AA (same binary) or starts it from REF.
lf_defaults_aa() {
  local ref=$1 aa=$2 peers=$3 resume=() rounds_done deadline
  shift 3
  if [ -n "${RESUME:-}" ]; then
    [ -d "$ref" ] || lf_die "RESUME=1: $ref does not exist"
    [ -d "$aa" ] && resume=(--resume)
  else
    lf_claim "$ref" "$aa"
    lf_step "bench of today's default layouts -> $ref"
    "$bin" bench --backend cuda "$@" "${lf_phases[@]}" --capture-sources --output "$ref"
  fi
  lf_step "A/A replay, $lf_rounds rounds, peers: $peers -> $aa"
  deadline=$(($(lf_left) - 20))
  [ "$deadline" -gt 30 ] || deadline=30
  # shellcheck disable=SC2086
  if ! "$bin" replay --backend cuda --reference "$ref/results.json" --aa --rounds "$lf_rounds" \
    "${lf_phases[@]}" $peers "${resume[@]}" --deadline-s "$deadline" --output "$aa"; then
    lf_failed="the replay into $aa failed"
    return 0
  fi
  "$bin" scorecard "$aa" || true
  rounds_done=$(lf_rounds_done "$aa")
  if [ "$rounds_done" -lt "$lf_rounds" ]; then
    lf_partial="$aa holds $rounds_done of $lf_rounds rounds: run the same command again with RESUME=1 (same binary) to continue it"
  fi
}

# lf_tar_logs LOG_DIR SUMMARY_NAME: where TAR_TO says, one gzipped tar of
# a log folder and a copy of its summary.txt as SUMMARY_NAME.
lf_tar_logs() {
  [ -n "${TAR_TO:-}" ] || return 0
  local dest tar
  dest=$(lf_path "$TAR_TO")
  mkdir -p "$dest"
  tar=$dest/$(basename "$1")-$lf_tag.tar.gz
  tar czf "$tar" -C "$(dirname "$1")" "$(basename "$1")"
  cp "$1/summary.txt" "$dest/$2"
  echo "tarred into $tar"
}

# lf_finish DIR...: audit what was written (the directories that exist),
# tar it where TAR_TO says, say where it went. Exit status: 1 if a step
# failed (lf_failed) or the audit did, 3 if the budget cut a run short
# (lf_partial), else 0.
lf_finish() {
  local status=0 d dirs=()
  for d in "$@"; do [ -e "$d" ] && dirs+=("$d"); done
  set -- "${dirs[@]}"
  [ $# -gt 0 ] || lf_die "nothing was written${lf_failed:+ ($lf_failed)}"
  lf_step "audit"
  "$bin" audit "$@" || status=1
  if [ -n "${lf_failed:-}" ]; then
    echo "FAILED: $lf_failed"
    status=1
  fi
  if [ -n "${TAR_TO:-}" ]; then
    local tar
    # Named for its first directory: two runs of one prefix in one call
    # (a corpus's halves) must not write the same tar over each other.
    tar=$(lf_path "$TAR_TO")/$(basename "$1").tar.gz
    [ ! -e "$tar" ] || tar=$(lf_path "$TAR_TO")/$(basename "$1")-$$.tar.gz
    tar czf "$tar" "$@"
    echo "tarred into $tar"
  fi
  echo "results:"
  for d in "$@"; do echo "  $d"; done
  echo "to keep them: bash scripts/compress-results.sh DIR...; then BIN=$bin bash scripts/standing.sh"
  if [ -n "${lf_partial:-}" ]; then
    echo "PARTIAL: $lf_partial"
    [ "$status" -ne 0 ] || status=3
  fi
  echo "done in $((SECONDS - lf_start)) s"
  exit "$status"
}
