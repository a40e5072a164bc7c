#!/usr/bin/env bash
# compute-sanitizer over a small subset of the CUDA selftest that reaches
# every kernel family: register plans (the layout matrix: every W, V and
# ragged N; exact-order sums up to W=1024), streamed plans and load
# policies, clusters of groups, staged columns, the pushed cluster
# reduction, two rows per cluster, persistent clusters, prefetched rows
# (alone and in persistent clusters) and shared-memory chunks. Each check
# group runs as its own `lanefold selftest --backend cuda --variant GROUP
# --ops OPS --max-rows MAX_ROWS` under each tool, with a fair share of the
# tool's time, so one slow group cannot starve the others.
#
# Usage: BIN=path/to/lanefold TAR_TO=$OUT bash scripts/sanitize-cuda.sh TOOL...
#   TOOL: plain (no sanitizer: the baseline, and it fills the kernel
#   cache), memcheck, racecheck, synccheck, initcheck. The budget
#   (BUDGET_S, default 540) is split evenly between the TOOLs given.
#   Env (besides scripts/lib/common.sh's BIN, BUDGET_S, TAR_TO, GPU_TAG):
#     OPS        operators (default softmax,residual_layernorm,cross_entropy:
#                one row input, two row inputs and columns, an index input)
#     MAX_ROWS   rows per check at most (default 64)
#     CHECK_GROUPS  check groups, space-separated (default: the list below)
#     SANITIZER  the compute-sanitizer binary (default
#                /usr/local/cuda/bin/compute-sanitizer, else on PATH)
#     LOG_DIR    where logs go (default .cache/sanitize-DATE-TOOLS)
# Writes LOG_DIR/TOOL-GROUP.log (lanefold's output), TOOL-GROUP.sanitizer.log
# (the tool's report) and summary.txt; with TAR_TO, one tar of them there
# and a copy of summary.txt. Ends with one line:
#   sanitize: memcheck 0 errors in 12/12 groups; ... (selftest failures: 0)
# Exit status: 0 clean, 1 errors or selftest failures, 3 a group cut short.
#
# Suggested device calls (one 10-minute call each):
#   BIN=.device/lanefold TAR_TO=$OUT bash scripts/sanitize-cuda.sh plain memcheck
#   BIN=.device/lanefold TAR_TO=$OUT bash scripts/sanitize-cuda.sh racecheck
#   BIN=.device/lanefold TAR_TO=$OUT bash scripts/sanitize-cuda.sh synccheck initcheck
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

tools=()
for a in "$@"; do
  case $a in
    plain | memcheck | racecheck | synccheck | initcheck) tools+=("$a") ;;
    *) lf_die "unknown TOOL $a (plain, memcheck, racecheck, synccheck, initcheck)" ;;
  esac
done
[ ${#tools[@]} -gt 0 ] || lf_die "usage: sanitize-cuda.sh TOOL...  (plain, memcheck, racecheck, synccheck, initcheck)"

ops=${OPS:-softmax,residual_layernorm,cross_entropy}
max_rows=${MAX_ROWS:-64}
# Families: register (layout-matrix, exact-sums), streamed (load-policy),
# cluster (cluster-groups, staged-columns, cluster-rows), pushed reduction
# (pushed-reduce), persistent (persistent-clusters), prefetch
# (prefetch-rows, prefetched-clusters), shared memory (shared-chunks).
read -r -a groups <<< "${CHECK_GROUPS:-layout-matrix exact-sums load-policy cluster-groups staged-columns pushed-reduce cluster-rows persistent-clusters prefetch-rows prefetched-clusters shared-chunks}"
sanitizer=${SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
if [ ! -x "$sanitizer" ] && [ "${tools[*]}" != plain ]; then
  sanitizer=$(command -v compute-sanitizer) || lf_die "no compute-sanitizer at /usr/local/cuda/bin or on PATH (set SANITIZER)"
fi
log_dir=${LOG_DIR:-.cache/sanitize-$(date -u +%Y%m%dT%H%M%SZ)-$(
  IFS=-
  echo "${tools[*]}"
)}
mkdir -p "$log_dir"

# The error count in a sanitizer log: its summary line, else (a run cut
# short) the error records printed so far, as ">=N".
errors_in() {
  local log=$1 n
  [ -s "$log" ] || {
    echo "?"
    return
  }
  n=$(sed -n 's/^========= ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log" | tail -n 1)
  if [ -z "$n" ]; then
    n=$(sed -n 's/^========= RACECHECK SUMMARY: .*(\([0-9]*\) error.*/\1/p' "$log" | tail -n 1)
  fi
  if [ -n "$n" ]; then
    echo "$n"
  else
    echo ">=$(grep -cE '^========= (Invalid|Error|Race|Barrier|Uninitialized|Program hit|Out-of-range|Misaligned|Malformed)' "$log")"
  fi
}

# racecheck's warnings (possible hazards, counted apart from its errors):
# reported, not failed on.
warnings_in() {
  sed -n 's/^========= RACECHECK SUMMARY: .*, \([0-9]*\) warning.*/\1/p' "$1" 2> /dev/null | tail -n 1
}

{
  echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "binary_sha256: $(sha256sum "$bin" | cut -d' ' -f1)"
  echo "binary_version: $("$bin" --version)"
  echo "sanitizer: $([ -x "$sanitizer" ] && "$sanitizer" --version | tail -n 1)"
  echo "ops: $ops  max_rows: $max_rows  groups: ${groups[*]}"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2> /dev/null || true
} > "$log_dir/environment.txt"

summary=()
total_failed=0
status=0
ntools=${#tools[@]}
for ti in "${!tools[@]}"; do
  tool=${tools[$ti]}
  # This tool's share of what is left; a group's, of what the tool has left.
  tool_end=$((SECONDS + $(lf_left) / (ntools - ti)))
  opts=()
  case $tool in
    plain) ;;
    *)
      opts=(--tool "$tool" --error-exitcode 86 --print-limit 100)
      # Padding after each allocation turns an overrun into a neighbouring
      # buffer into an error; not every version has it.
      if [ "$tool" = memcheck ] && "$sanitizer" --help 2>&1 | grep -q -- '--padding'; then
        opts+=(--padding 256)
      fi
      ;;
  esac
  errors=0 warnings=0 cut=0 done_groups=0 failed=0 unknown=0
  for gi in "${!groups[@]}"; do
    group=${groups[$gi]}
    left=$((tool_end - SECONDS))
    share=$((left / (${#groups[@]} - gi)))
    log=$log_dir/$tool-$group.log
    slog=$log_dir/$tool-$group.sanitizer.log
    if [ "$share" -lt 5 ]; then
      echo "not run: out of time" > "$log"
      cut=$((cut + 1))
      continue
    fi
    lf_step "$tool $group (up to $share s)"
    cmd=("$bin" selftest --backend cuda --variant "$group" --ops "$ops" --max-rows "$max_rows")
    [ "$tool" = plain ] || cmd=("$sanitizer" "${opts[@]}" --log-file "$slog" "${cmd[@]}")
    set +e
    # timeout signals the whole process group: the tool and lanefold.
    timeout --kill-after=10 "$share" "${cmd[@]}" > "$log" 2>&1
    rc=$?
    set -e
    echo "exit status: $rc" >> "$log"
    tail -n 3 "$log"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      cut=$((cut + 1))
      echo "  cut short after $share s"
    else
      done_groups=$((done_groups + 1))
    fi
    # The selftest's own verdict: its last line, N passed, N failed.
    f=$(sed -n 's/^[0-9]* passed, \([0-9]*\) failed$/\1/p' "$log" | tail -n 1)
    if [ -n "$f" ]; then
      failed=$((failed + f))
    elif [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ]; then
      failed=$((failed + 1))
      echo "  no selftest verdict (exit status $rc)"
    fi
    if [ "$tool" != plain ]; then
      e=$(errors_in "$slog")
      echo "  $tool: $e errors"
      case $e in
        \? | ">="*)
          unknown=$((unknown + 1))
          e=${e#>=}
          [ "$e" = "?" ] && e=0
          ;;
      esac
      errors=$((errors + e))
      w=$(warnings_in "$slog")
      warnings=$((warnings + ${w:-0}))
    fi
  done
  line="$tool"
  [ "$tool" = plain ] || line+=" $errors errors"
  [ "$warnings" -eq 0 ] || line+=" ($warnings warnings)"
  line+=" in $done_groups/${#groups[@]} groups"
  [ "$cut" -eq 0 ] || line+=" ($cut cut short)"
  [ "$unknown" -eq 0 ] || line+=" ($unknown without a summary)"
  line+=", $failed selftest failures"
  summary+=("$line")
  total_failed=$((total_failed + failed))
  if [ "$errors" -gt 0 ] || [ "$failed" -gt 0 ]; then
    status=1
  elif [ "$cut" -gt 0 ] && [ "$status" -eq 0 ]; then
    status=3
  fi
done

joined=$(printf '%s; ' "${summary[@]}")
result="sanitize: ${joined%; } (ops $ops, at most $max_rows rows)"
echo "$result" > "$log_dir/summary.txt"
echo "logs: $log_dir"
lf_tar_logs "$log_dir" sanitize-summary.txt
echo "done in $((SECONDS - lf_start)) s"
echo "$result"
exit "$status"
