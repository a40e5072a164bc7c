#!/usr/bin/env bash
# compute-sanitizer synccheck on the pushed cluster reduction, one cluster
# size at a time, each kernel in its own process (a report stops the kernel
# and poisons the context, so one bad launch would fail every later one).
#
# Why: under synccheck, the sanitize run reported "Missing wait" only in
# kernels of 16-CTA clusters, at the arm of the init, only in CTAs of rank
# 8 or 9, while a pushed 8-CTA kernel of the same group passed clean. This
# separates the protocol from the cluster size:
#   1. scripts/synccheck-clusters.cu, the protocol alone (nvcc), at 2, 4, 8
#      and 16 CTAs, pushing to every CTA (as lanefold) and to itself only;
#   2. lanefold's pushed softmax at 2, 4, 8 and 16 CTAs, and at 8 and 16
#      through other group sizes (the same W at another cluster size).
# Usage: BIN=path/to/lanefold TAR_TO=$OUT bash scripts/synccheck-clusters.sh
#   Env (besides scripts/lib/common.sh's BIN, BUDGET_S, TAR_TO, GPU_TAG):
#     SANITIZER  compute-sanitizer (default /usr/local/cuda/bin/compute-sanitizer)
#     NVCC       nvcc (default /usr/local/cuda/bin/nvcc, else on PATH)
#     LOG_DIR    where logs go (default .cache/synccheck-clusters-DATE)
# Writes LOG_DIR/CASE.log, CASE.sanitizer.log and summary.txt: per case,
# the run's exit status, the synccheck error count and the CTA ranks
# (block % C) reported.
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

sanitizer=${SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
[ -x "$sanitizer" ] || sanitizer=$(command -v compute-sanitizer) || lf_die "no compute-sanitizer (set SANITIZER)"
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
[ -x "$nvcc" ] || nvcc=$(command -v nvcc) || lf_die "no nvcc (set NVCC)"
log_dir=${LOG_DIR:-.cache/synccheck-clusters-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$log_dir"
# The probe's binary stays out of the logs (they are committed).
probe=$(mktemp -d)/synccheck-clusters

{
  echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "binary_sha256: $(sha256sum "$bin" | cut -d' ' -f1)"
  echo "binary_version: $("$bin" --version)"
  echo "sanitizer: $("$sanitizer" --version | tail -n 1)"
  echo "nvcc: $("$nvcc" --version | tail -n 1)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2> /dev/null || true
} > "$log_dir/environment.txt"

lf_step "nvcc the probe"
"$nvcc" -O2 -arch=sm_90a -o "$probe" scripts/synccheck-clusters.cu

lines=()
# check NAME C CMD...: CMD plain (its verdict), then under synccheck.
check() {
  local name=$1 c=$2 rc src n ranks
  shift 2
  if [ "$(lf_left)" -lt 15 ]; then
    lines+=("$name: not run (out of time)")
    return
  fi
  lf_step "$name"
  set +e
  timeout --kill-after=5 60 "$@" > "$log_dir/$name.log" 2>&1
  rc=$?
  timeout --kill-after=5 120 "$sanitizer" --tool synccheck --print-limit 64 \
    --log-file "$log_dir/$name.sanitizer.log" "$@" > "$log_dir/$name.synccheck.log" 2>&1
  src=$?
  set -e
  n=$(sed -n 's/^========= ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log_dir/$name.sanitizer.log" | tail -n 1)
  ranks=$(sed -n 's/.*by thread ([0-9,]*) in block (\([0-9]*\),.*/\1/p' "$log_dir/$name.sanitizer.log" |
    awk -v c="$c" '{ print $1 % c }' | sort -n | uniq | paste -sd, -)
  lines+=("$name: plain exit $rc; synccheck exit $src, ${n:-?} errors${ranks:+, at ranks $ranks}")
  echo "  ${lines[-1]}"
}

for c in 2 4 8 16; do
  check "probe-c$c-push-all" "$c" "$probe" "$c" 0
  check "probe-c$c-push-self" "$c" "$probe" "$c" 1
done

# Softmax f32 16x65536, pushed: the cluster is W / group-threads CTAs.
run_case() {
  local name=$1 c=$2 schedule=$3
  check "lanefold-$name" "$c" "$bin" run --backend cuda --op softmax --dtype f32 \
    --shape 16x65536 --schedule "$schedule"
}
run_case c2 2 "W=512 V=4 push-reduce split-groups group-threads=256"
run_case c4 4 "W=1024 V=4 push-reduce split-groups group-threads=256"
run_case c8 8 "W=2048 V=4 push-reduce group-threads=256"
run_case c8-g512 8 "W=4096 V=4 push-reduce group-threads=512"
run_case c16 16 "W=4096 V=4 push-reduce group-threads=256"
run_case c16-g128 16 "W=2048 V=4 push-reduce group-threads=128"

printf '%s\n' "${lines[@]}" > "$log_dir/summary.txt"
echo "logs: $log_dir"
lf_tar_logs "$log_dir" synccheck-clusters-summary.txt
echo "done in $((SECONDS - lf_start)) s"
cat "$log_dir/summary.txt"
