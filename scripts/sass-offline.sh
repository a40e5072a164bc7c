#!/usr/bin/env bash
# SASS of generated kernels without a GPU: NVRTC (scripts/fetch-nvrtc.sh)
# compiles them (`lanefold compile-check --cubin-dir`), and cuobjdump from
# NVIDIA's PyPI wheel (unpacked into a git-ignored folder, never
# installed) disassembles each binary to DIR/<kernel>.sass.
# Usage: scripts/sass-offline.sh DIR [compile-check options...]
#   e.g. scripts/sass-offline.sh /tmp/sass --ops layernorm --shapes 4096x131072
set -euo pipefail
out=${1:?output folder}; shift
tools=.cache/cuobjdump
# cuobjdump calls nvdisasm, a wheel of its own.
for tool in cuobjdump nvdisasm; do
  if [ ! -x "$tools/bin/$tool" ]; then
    tmp=$(mktemp -d)
    python3 -m pip download --no-deps --quiet --dest "$tmp" "nvidia-cuda-$tool" >&2
    python3 -m zipfile -e "$tmp"/nvidia_cuda_"$tool"-*.whl "$tmp/x"
    mkdir -p "$tools/bin"
    cp "$tmp"/x/nvidia/cu*/bin/"$tool" "$tools/bin/"
    chmod +x "$tools/bin/$tool"
    rm -rf "$tmp"
  fi
done
export PATH=$PWD/$tools/bin:$PATH
lib=$(bash scripts/fetch-nvrtc.sh)
bin=${BIN:-target/release/lanefold}
LD_LIBRARY_PATH=$lib "$bin" compile-check --cubin-dir "$out" "$@" | tail -n 1
for cubin in "$out"/*.cubin; do
  "$tools/bin/cuobjdump" -sass "$cubin" > "${cubin%.cubin}.sass"
done
ls "$out"/*.sass
