#!/usr/bin/env bash
# NVIDIA's runtime compiler (NVRTC 13.0, the device's version) from PyPI
# into a git-ignored folder, so generated kernels can be compiled and
# their registers read where no GPU is (`lanefold compile-check`). Prints
# the folder to put on LD_LIBRARY_PATH. Data only: the wheel is unpacked,
# never installed or run.
# Usage: scripts/fetch-nvrtc.sh [DIR]   (default .cache/nvrtc)
set -euo pipefail
dir=${1:-.cache/nvrtc}
if [ ! -e "$dir/lib/libnvrtc.so.13" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --no-deps --quiet --dest "$tmp" "nvidia-cuda-nvrtc==13.0.*" >&2
  python3 -m zipfile -e "$tmp"/nvidia_cuda_nvrtc-*.whl "$tmp/x"
  mkdir -p "$dir/lib"
  cp "$tmp"/x/nvidia/cu13/lib/libnvrtc* "$dir/lib/"
fi
cd "$dir/lib" && pwd
