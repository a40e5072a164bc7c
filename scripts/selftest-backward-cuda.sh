#!/usr/bin/env bash
# The backward operators on a GPU in one device call: `lanefold selftest
# --backend cuda --backward` (their layout matrix in f32 and bf16, seed and
# long shapes, every output against float64; the norms' dweight and dbias
# kernels bit for bit against the CPU's), compute-sanitizer memcheck
# of each backward kernel on an odd shape, and the Python package's CUDA
# tests (autograd through the backward kernels) from a prebuilt wheel.
#
# Build here (no cargo on the device):
#   cargo build --release && mkdir -p .device && cp target/release/lanefold .device/
#   maturin build --release -m crates/python/Cargo.toml -o .device
# then on the device, with carry [".device"]:
#   OUT_DIR=$OUT bash scripts/selftest-backward-cuda.sh
#
# Env: BIN (default .device/lanefold), WHEEL (default the newest
# .device/lanefold-*.whl), OUT_DIR (logs; default /tmp/lanefold-backward),
# BUDGET_S (default 540). Exit 1 if any part failed, 2 on bad setup.
# Device time: about 3-5 minutes.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
bin=${BIN:-.device/lanefold}
wheel=${WHEEL:-}
if [ -z "$wheel" ]; then
  for w in .device/lanefold-*.whl; do [ -f "$w" ] && wheel=$w; done
fi
out=${OUT_DIR:-/tmp/lanefold-backward}
budget=${BUDGET_S:-540}
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
[ -x "$bin" ] || {
  echo "no lanefold binary at $bin (set BIN)" >&2
  exit 2
}
mkdir -p "$out"
failed=()
{
  echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "binary_sha256: $(sha256sum "$bin" | cut -d' ' -f1)"
  echo "binary_version: $("$bin" --version)"
  echo "wheel: ${wheel:-none}"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
} | tee "$out/environment.txt"

echo "== selftest --backend cuda --backward"
timeout "$(left)" "$bin" selftest --backend cuda --backward 2>&1 | tee "$out/selftest.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || failed+=("selftest")

echo "== compute-sanitizer memcheck, one odd shape per backward operator"
sanitizer=$(command -v compute-sanitizer || true)
for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [ -n "$sanitizer" ] || { [ -x "$c" ] && sanitizer=$c; }
done
if [ -n "$sanitizer" ]; then
  for op in rmsnorm_backward layernorm_backward residual_layernorm_backward softmax_backward cross_entropy_backward cross_entropy_backward_recompute cross_entropy_with_grad cross_entropy_with_lse; do
    [ "$(left)" -gt 30 ] || break
    timeout "$(left)" "$sanitizer" --tool memcheck --error-exitcode 9 \
      "$bin" run --backend cuda --op "$op" --shape 17x257 --dtype bf16 >> "$out/memcheck.log" 2>&1
    rc=$?
    echo "$op: exit $rc" | tee -a "$out/memcheck.log"
    [ "$rc" -eq 0 ] || failed+=("memcheck $op")
  done
else
  echo "no compute-sanitizer (PATH, /usr/local/cuda)" | tee "$out/memcheck.log"
  failed+=("memcheck (no compute-sanitizer)")
fi

echo "== Python CUDA tests"
if [ -n "$wheel" ] && [ -f "$wheel" ]; then
  site=$(mktemp -d /tmp/lanefold-site-XXXX)
  trap 'rm -rf "$site"' EXIT
  # A wheel is a zip: unpacked, it is importable (no pip needed).
  python3 -m zipfile -e "$wheel" "$site"
  # From the tests folder, so that `import lanefold` is the unpacked wheel.
  (cd crates/python/tests &&
    PYTHONPATH=$site python3 -c "import lanefold; print('lanefold from', lanefold.__file__)" &&
    PYTHONPATH=$site timeout "$(left)" python3 -m pytest -q -p no:cacheprovider test_cuda.py) 2>&1 |
    tee "$out/pytest-cuda.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed+=("pytest test_cuda.py")
  if [ -n "$sanitizer" ] && [ "$(left)" -gt 150 ]; then
    echo "== compute-sanitizer memcheck of the column-gradient kernels (through torch)"
    PYTHONPATH=$site timeout "$(left)" "$sanitizer" --tool memcheck --error-exitcode 9 python3 -c "
import torch, lanefold
x = torch.randn(70, 300, device='cuda', dtype=torch.bfloat16, requires_grad=True)
w = torch.rand(300, device='cuda', dtype=torch.bfloat16, requires_grad=True)
b = torch.rand(300, device='cuda', dtype=torch.bfloat16, requires_grad=True)
lanefold.layer_norm(x, w, b).sum().backward()
lanefold.rms_norm(x, w).sum().backward()
torch.cuda.synchronize()
print('column kernels: memcheck run done')
" >> "$out/memcheck.log" 2>&1
    rc=$?
    tail -n 3 "$out/memcheck.log"
    [ "$rc" -eq 0 ] || failed+=("memcheck column kernels (exit $rc)")
  fi
else
  echo "no wheel (set WHEEL, or build one into .device)" | tee "$out/pytest-cuda.log"
  failed+=("pytest (no wheel)")
fi

echo "== elapsed $((SECONDS - start)) s; logs in $out"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all backward checks passed"
