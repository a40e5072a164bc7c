#!/usr/bin/env bash
# CI for the Python package (no GPU): installs what it needs from PyPI,
# builds and installs the package with pip, runs its tests (the CUDA ones
# skip themselves without a device). Called by .ci/run from the repo root.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
pip() { "$PY" -m pip --disable-pip-version-check "$@"; }

echo "== python: $("$PY" --version)"
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  # The CPU wheel where that index answers, else PyPI's torch.
  pip install --quiet --index-url https://download.pytorch.org/whl/cpu torch \
    || pip install --quiet torch
fi
pip install --quiet "maturin>=1.7,<2" numpy pytest
# Build (release, abi3 for CPython 3.9+) and install this tree's package.
pip install --quiet --force-reinstall --no-deps ./crates/python
# From the tests folder, so that `import lanefold` is the installed package.
cd crates/python/tests
"$PY" -c "import torch, lanefold; print('== torch', torch.__version__, '| lanefold', lanefold.__file__)"
"$PY" -m pytest -q -p no:cacheprovider .
