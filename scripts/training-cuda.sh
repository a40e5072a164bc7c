#!/usr/bin/env bash
# Training-speed evidence in one device command per PART:
#   peer-test       python/test_torch_peer.py: every peer mode's forward and
#                   backward cases against float64 (and the backward forms on
#                   the CPU)
#   backward DTYPE  `lanefold bench` of the five backward operators on shapes
#                   larger than the L2 against torch eager, torch.compile,
#                   Liger and Quack (DTYPE bf16 or f32), then `lanefold audit`
#   train-bench DTYPE  crates/python/tools/train_bench.py: its --check, then
#                   forward and backward through autograd, the package
#                   against the four peers, CUDA graphs
#   train-check     crates/python/tools/train_check.py: a small Llama trained
#                   300 steps with torch's and with lanefold's norms and loss
#
# Build here (no cargo on the device), with carry [".device"]:
#   cargo build --release && mkdir -p .device && cp target/release/lanefold .device/
#   maturin build --release --zig --compatibility manylinux_2_28 -m crates/python/Cargo.toml -o .device/wheels
# Liger's wheel in .device/liger/ (LIGER_WHEEL), transformers and its
# dependencies as wheels in .device/wheels/transformers/ (train-check only;
# pip download transformers --python-version 3.12 --only-binary=:all:
# --platform manylinux_2_28_x86_64 -d .device/wheels/transformers, less
# numpy), Quack importable through QUACK_PYTHONPATH (prepended to
# PYTHONPATH; see python/torch_peer.py).
# Then on the device: OUT_DIR=$OUT bash scripts/training-cuda.sh PART
#
# Env: BIN (default .device/lanefold), WHEEL (default the newest
# .device/wheels/lanefold-*.whl), LIGER_WHEEL (default .device/liger),
# QUACK_PYTHONPATH, OUT_DIR (default /tmp/lanefold-training), BUDGET_S
# (default 540). Exit 1 if the part failed, 2 on bad setup.
# Device time (estimates, not yet measured): peer-test 4-6 min, backward
# 3-6 per dtype, train-bench 4-7 per dtype, train-check 1-2.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
part=${1:-}
bin=${BIN:-.device/lanefold}
out=${OUT_DIR:-/tmp/lanefold-training}
budget=${BUDGET_S:-540}
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
die() {
  echo "training-cuda.sh: $*" >&2
  exit 2
}
case $part in
  peer-test | backward | train-bench | train-check) ;;
  *) die "PART must be peer-test, backward DTYPE, train-bench DTYPE or train-check" ;;
esac
dtype=${2:-}
case $part:$dtype in
  backward:bf16 | backward:f32 | train-bench:bf16 | train-bench:f32 | peer-test: | train-check:) ;;
  *) die "$part ${dtype:-(no DTYPE)}: backward and train-bench take DTYPE bf16 or f32, the others none" ;;
esac
mkdir -p "$out" || die "cannot create $out"

pipi() {
  python3 -m pip install -q --no-index --no-deps --no-compile "$@" 2> /dev/null ||
    python3 -m pip install -q --no-index --no-deps --no-compile --break-system-packages "$@"
}
wheel=${WHEEL:-}
if [ -z "$wheel" ]; then
  for w in .device/wheels/lanefold-*.whl; do [ -f "$w" ] && wheel=$w; done
fi
if [ "$part" != backward ]; then
  [ -n "$wheel" ] && [ -f "$wheel" ] || die "no lanefold wheel (set WHEEL, or build one into .device/wheels)"
  pipi --force-reinstall "$wheel" || die "cannot install $wheel"
fi
site=/tmp/lanefold-site
liger=${LIGER_WHEEL:-.device/liger}
if [ -d "$liger" ]; then liger_wheels=("$liger"/*.whl); else liger_wheels=("$liger"); fi
if [ -f "${liger_wheels[0]}" ]; then
  pipi --upgrade --target "$site" "${liger_wheels[@]}" || die "cannot unpack ${liger_wheels[*]}"
fi
if [ "$part" = train-check ] && ! python3 -c "import transformers" 2> /dev/null; then
  [ -d .device/wheels/transformers ] || die "no transformers here and no .device/wheels/transformers"
  pipi --upgrade --target /tmp/lanefold-tf .device/wheels/transformers/*.whl || die "cannot unpack transformers"
  site=$site:/tmp/lanefold-tf
fi
export PYTHONPATH=$site${QUACK_PYTHONPATH:+:$QUACK_PYTHONPATH}${PYTHONPATH:+:$PYTHONPATH}
{
  echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ) part: $*"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
  python3 -c "import torch; print('torch', torch.__version__)" 2>&1
  for m in lanefold liger_kernel quack transformers; do
    python3 -c "import $m, sys; print('$m', getattr($m, '__version__', ''), $m.__file__)" 2>&1 | tail -n 1
  done
} | tee "$out/environment-$part.txt"

status=0
case $part in
  peer-test)
    timeout "$(left)" python3 python/test_torch_peer.py 2>&1 | tee "$out/peer-test.log"
    status=${PIPESTATUS[0]}
    ;;
  backward)
    [ -x "$bin" ] || die "no lanefold binary at $bin (set BIN)"
    shm_kb=$(df -Pk /dev/shm 2> /dev/null | awk 'NR == 2 { print $4 }')
    if [ "${shm_kb:-0}" -gt $((16 * 1024 * 1024)) ]; then
      export TMPDIR=/dev/shm/lanefold-tmp
      mkdir -p "$TMPDIR"
    fi
    dir=$out/bench-backward-$dtype
    [ ! -e "$dir" ] || die "$dir exists"
    # Rows of 4096 for the norms and softmax, a 32000 vocabulary for the
    # loss: every case's tensors are several times the 60 MB L2.
    bench() {
      local deadline=$(($(left) - 30))
      [ "$deadline" -gt 30 ] || deadline=30
      timeout "$(left)" "$bin" --quiet bench --backend cuda --ops "$1" --dtypes "$dtype" --shapes "$2" \
        --torch --torch-compile --liger --quack --samples 5 --sample-ms 10 --warmup-ms 50 \
        --deadline-s "$deadline" --output "$3" 2>&1 | tee -a "$out/bench-backward-$dtype.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    }
    bench rmsnorm_backward,layernorm_backward,residual_layernorm_backward,softmax_backward 16384x4096 "$dir-rows"
    bench cross_entropy_backward,cross_entropy_backward_recompute 4096x32000 "$dir-loss"
    "$bin" audit "$dir"-* || status=1
    ;;
  train-bench)
    timeout "$(left)" python3 crates/python/tools/train_bench.py --check --dtypes "$dtype" \
      --sides lanefold,torch-eager,liger,quack --shapes 4096x4096 --ce-shapes 4096x32000 \
      --output "$out/train-bench-check-$dtype" 2>&1 | tee "$out/train-bench-check-$dtype.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    timeout "$(left)" python3 crates/python/tools/train_bench.py --dtypes "$dtype" \
      --shapes 16384x4096,65536x4096 --ce-shapes 8192x32000,8192x128256 --graphs \
      --output "$out/train-bench-$dtype" 2>&1 | tee "$out/train-bench-$dtype.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    ;;
  train-check)
    timeout "$(left)" python3 crates/python/tools/train_check.py --output "$out/train-check" 2>&1 |
      tee "$out/train-check.log"
    status=${PIPESTATUS[0]}
    ;;
esac
echo "== $part: exit $status after $((SECONDS - start)) s; logs and results in $out"
exit "$status"
