#!/usr/bin/env bash
# The held-out shape corpus against every peer that imports, one half per
# device call: `lanefold bench --corpus bench/corpus.csv --part report`
# with `--l2 cold-inputs` (inputs rotate past the L2, every side writes
# one output set, so no side's outputs sit in the L2 while another's do
# not), 3 samples of 5 ms per side. The card: `bash scripts/standing.sh`.
#
# Usage: bash scripts/corpus-cuda.sh PART [OUT_PREFIX]
#   PART: forward-1, forward-2 (the report part's forwards, every other
#   problem), backward-1, backward-2 (the input gradients of its problems
#   of 512 rows or more).
# Peers: torch eager and torch.compile always; Liger where it imports
# (LIGER_WHEEL installs it; NO_LIGER=1 goes on without); Quack where
# `import quack` works, from QUACK_DIR (default /tmp/quack, unpacked as
# the header of the Quack wheel script says).
# Device time: about 3-4 minutes a forward half, 5-6 a backward half on an
# H100.
# SKIP_MEASURED="DIR ..." leaves out the problems those results directories
# hold, so a half its deadline cut short goes on in another call.
# CORPUS=bench/drawn.csv benches the problems of no list written by
# `lanefold corpus --draw` instead, all of them (it has no split), into
# `...-drawn-cold-inputs-...`; judge them with `lanefold scorecard --corpus
# --corpus-file bench/drawn.csv --part all --gpu NAME DIRS`.
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"

part=${1:?usage: corpus-cuda.sh PART [OUT_PREFIX] (forward-1, forward-2, backward-1, backward-2)}
case $part in
  forward-[12]) select=() ;;
  backward-[12])
    select=(--min-rows 512 --ops
      rmsnorm_backward,layernorm_backward,residual_layernorm_backward,softmax_backward,cross_entropy_backward)
    ;;
  *) lf_die "PART must be forward-1, forward-2, backward-1 or backward-2, not $part" ;;
esac
corpus=${CORPUS:-bench/corpus.csv}
if [ "$corpus" = bench/corpus.csv ]; then
  split=report name=corpus-cold-inputs
else
  split=all name=drawn-cold-inputs
fi
lf_prefix "$name" "${2:-}"
out=$(lf_dir "$part")
lf_claim "$out"

NO_LIGER=${NO_LIGER:-1} lf_peers liger
peers=(--torch --torch-compile)
python3 -c 'import liger_kernel' 2> /dev/null && peers+=(--liger)
quack=${QUACK_DIR:-/tmp/quack}
if [ -d "$quack" ]; then
  export PYTHONPATH=$quack:$quack/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -c 'import quack' 2> /dev/null && peers+=(--quack)

# SKIP_MEASURED: results directories (space-separated) whose problems a
# run their deadline cut short already holds; the bench leaves them out.
skip=()
# shellcheck disable=SC2086 # the list splits on spaces, as documented
for dir in ${SKIP_MEASURED:-}; do skip+=(--skip-measured "$dir"); done

lf_step "corpus $part, peers: ${peers[*]} -> $out"
deadline=$(($(lf_left) - 30))
[ "$deadline" -gt 60 ] || lf_die "too little budget left ($(lf_left) s)"
if ! "$bin" --quiet bench --backend cuda --corpus "$corpus" --part "$split" \
  --shard "${part#*-}/2" "${select[@]}" "${skip[@]}" --l2 cold-inputs "${peers[@]}" "${lf_phases[@]}" \
  --deadline-s "$deadline" --output "$out"; then
  lf_failed="the bench into $out reported an error (invalid outputs or cases it could not run; see above)"
fi
lf_finish "$out"
