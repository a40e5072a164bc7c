#!/usr/bin/env bash
# A paired comparison of two forms in one device call, A B B A per case so
# that drift cancels: form A is schedule SCHED_A run by binary A_BIN, form B
# schedule SCHED_B run by B_BIN (both default BIN: one binary, two
# schedules; or one schedule, `auto`, and two binaries). Each run is a
# `lanefold bench` of the gpu phase (3 samples of 5 ms, L2 cold), its
# output validated against float64, in OUT/<case>-{a1,b1,b2,a2}: the
# campaign layout `lanefold audit OUT` reads. Prints the two forms' mean
# p50 per case and their ratio (A over B: above 1, B faster).
#
# Usage: bash scripts/abba.sh OUT CASES
#   CASES: a file of lines `NAME OP DTYPE SHAPE | SCHED_A | SCHED_B`
#   (`#` starts a comment), e.g.
#     sm-bf16-8192x30720 softmax bf16 8192x30720 | auto | W=512 V=8 U=4 G=1 registers online-normalizer
#   Env: BIN (default target/release/lanefold), A_BIN, B_BIN, BACKEND
#   (default cuda), L2 (default cold), BUDGET_S (default 540: a run that
#   would start past it is skipped and named), TAR_TO (also one gzipped
#   tar of OUT in this folder: the device tool returns at most 8 files,
#   so on the device TAR_TO=$OUT with OUT outside it).
# The 2026-12-04 campaigns (aligned-pack stores, 16-bit softmax online)
# ran this way: about 5 s per run on problems of 0.2-1 GB.
set -uo pipefail
out=${1:?usage: abba.sh OUT CASES}
cases=${2:?usage: abba.sh OUT CASES}
bin=${BIN:-target/release/lanefold}
a_bin=${A_BIN:-$bin}
b_bin=${B_BIN:-$bin}
budget=${BUDGET_S:-540}
start=$SECONDS
[ -f "$cases" ] || { echo "abba.sh: no cases file $cases" >&2; exit 2; }
for b in "$a_bin" "$b_bin"; do
  [ -x "$b" ] || { echo "abba.sh: no lanefold binary at $b" >&2; exit 2; }
done
[ -e "$out" ] && { echo "abba.sh: $out exists; an existing directory is never written over" >&2; exit 2; }
mkdir -p "$out"
skipped=()
while IFS='|' read -r head sched_a sched_b; do
  head=${head%%#*}
  read -r name op dtype shape <<< "$head"
  [ -n "${name:-}" ] || continue
  sched_a=$(echo "$sched_a" | xargs)
  sched_b=$(echo "$sched_b" | xargs)
  [ -n "$sched_a" ] && [ -n "$sched_b" ] || { echo "abba.sh: $name: two schedules wanted" >&2; exit 2; }
  for run in a1 b1 b2 a2; do
    case $run in a*) b=$a_bin s=$sched_a ;; *) b=$b_bin s=$sched_b ;; esac
    left=$((budget - (SECONDS - start)))
    if [ "$left" -lt 15 ]; then
      skipped+=("$name-$run")
      continue
    fi
    timeout "$left" "$b" --quiet bench --backend "${BACKEND:-cuda}" --ops "$op" --dtypes "$dtype" \
      --shapes "$shape" --schedule "$s" --samples 3 --sample-ms 5 --warmup-ms 20 \
      --l2 "${L2:-cold}" --output "$out/$name-$run" > "$out/$name-$run.log" 2>&1 ||
      echo "abba.sh: $name-$run failed (exit $?; $out/$name-$run.log)" >&2
    [ -d "$out/$name-$run" ] && rm -f "$out/$name-$run.log"
  done
done < "$cases"
# One line per case: each form's mean p50 over its two runs and A / B.
python3 - "$out" << 'EOF'
import gzip, json, os, re, sys
out = sys.argv[1]
p50 = {}
for run in sorted(os.listdir(out)):
    m = re.fullmatch(r"(.+)-([ab])[12]", run)
    path = os.path.join(out, run, "results.json")
    if not m or not os.path.exists(path):
        continue
    side = json.load(open(path))["cases"][0]["sides"][0]
    # The gpu phase; the CPU executor has none, so its e2e phase there.
    phase = "gpu" if side["summary"].get("gpu") else "e2e"
    summary = side["summary"].get(phase) or {}
    if summary.get("p50") is not None and not side["voided"]:
        p50.setdefault((m.group(1), phase), {}).setdefault(m.group(2), []).append(summary["p50"])
for (name, phase), forms in p50.items():
    a, b = (sum(forms.get(f, [])) / max(len(forms.get(f, [])), 1) for f in "ab")
    ratio = f"{a / b:.3f}" if a and b else "-"
    print(f"{name} ({phase} p50): A {a:.2f} µs, B {b:.2f} µs, A/B {ratio}")
EOF
[ ${#skipped[@]} -eq 0 ] || echo "abba.sh: past the budget, not run: ${skipped[*]}"
if [ -n "${TAR_TO:-}" ]; then
  mkdir -p "$TAR_TO"
  tar czf "$TAR_TO/$(basename "$out").tgz" -C "$(dirname "$out")" "$(basename "$out")" &&
    echo "abba.sh: $TAR_TO/$(basename "$out").tgz"
fi
