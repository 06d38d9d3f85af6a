#!/usr/bin/env bash
# One-step set-up on a fresh machine: the CPU build of torch first (a plain `torch`
# requirement would pull a CUDA build of several GB), then deltalens and its packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "[setup] torch is absent: installing the CPU build torch==2.13.0" >&2
    "$PY" -m pip install --quiet "torch==2.13.0"
fi
if ! "$PY" -c "import interp.cli, fla, transformer_lens, pytest" >/dev/null 2>&1 \
   || [ pyproject.toml -nt .setup-stamp ]; then
    echo "[setup] installing deltalens (editable) with its packages" >&2
    "$PY" -m pip install --quiet -e ".[test]"
    touch .setup-stamp
fi
