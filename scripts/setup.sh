#!/usr/bin/env bash
# One-step set-up on a fresh machine: the CPU build of torch first (a plain `torch`
# requirement would pull a CUDA build of several GB), then deltalens and its packages.
#   bash scripts/setup.sh --png   also installs Debian's chromium, which plotly's kaleido needs to
#                                 write the PNG figures of `deltalens reproduce` (HTML needs nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "[setup] torch is absent: installing the CPU build torch==2.13.0" >&2
    "$PY" -m pip install --quiet "torch==2.13.0"
fi
# checked from / so that the current directory cannot stand in for a missing or stale editable install
if ! (cd / && "$PY" -c "import deltalens.cli.main, fla, transformer_lens, pytest, ruff, nbclient, ipykernel, ipywidgets" >/dev/null 2>&1) \
   || [ pyproject.toml -nt .setup-stamp ]; then
    echo "[setup] installing deltalens (editable) with its packages" >&2
    "$PY" -m pip install --quiet -e ".[test]"
    touch .setup-stamp
fi
if [ "${1:-}" = "--png" ] && ! command -v chromium >/dev/null 2>&1; then
    echo "[setup] installing chromium for PNG figures (apt-get)" >&2
    apt-get install -y -qq chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }
fi
