#!/usr/bin/env bash
# One-step set-up on a fresh machine: the CPU build of torch first (a plain `torch` requirement
# would pull a CUDA build of several GB), then deltalens and its packages, then Debian's chromium
# and chromedriver (the dashboard's browser test drives them; plotly's PNG export uses chromium).
#   bash scripts/setup.sh --png   also installs kaleido, which `deltalens reproduce` needs to write
#                                 PNG figures (HTML figures need nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "[setup] torch is absent: installing the CPU build torch==2.13.0" >&2
    "$PY" -m pip install --quiet "torch==2.13.0"
fi
# checked from / so that the current directory cannot stand in for a missing or stale editable install
if ! (cd / && "$PY" -c "import deltalens.cli.main, fla, transformer_lens, sparsify, pytest, ruff, nbclient, ipykernel, ipywidgets, selenium, jedi, mypy, submitit, mkdocs, material, mkdocstrings_handlers.python" >/dev/null 2>&1) \
   || [ pyproject.toml -nt .setup-stamp ]; then
    echo "[setup] installing deltalens (editable) with its packages" >&2
    "$PY" -m pip install --quiet -e ".[test,slurm]"  # slurm: submitit, pure Python (--executor slurm)
    touch .setup-stamp
fi
# a C compiler builds the CPU kernels on first use (models/ops/native.py); without one the slower torch
# kernels run instead
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
    echo "[setup] installing gcc (apt-get) for the CPU kernels" >&2
    apt-get install -y -qq gcc libc6-dev >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq gcc libc6-dev >/dev/null; } \
        || echo "[setup] warning: could not install gcc; the torch kernels will run (slower)" >&2
fi
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    echo "[setup] installing chromium and chromium-driver (apt-get)" >&2
    apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; } \
        || echo "[setup] warning: could not install chromium; the dashboard's browser test will fail" >&2
fi
if [ "${1:-}" = "--png" ] && ! "$PY" -c "import kaleido" >/dev/null 2>&1; then
    echo "[setup] installing kaleido for PNG figures" >&2
    "$PY" -m pip install --quiet kaleido
fi
