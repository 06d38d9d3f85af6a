"""Where the dashboard reads checkpoints and keeps its cache: light on purpose (no torch, no pandas),
so Home.py can draw the navigation before the library loads."""

from __future__ import annotations

import os
from pathlib import Path

ENV_DIR = "DELTALENS_APP_CHECKPOINTS"  # set by `deltalens app --checkpoints DIR`
ENV_CACHE = "DELTALENS_CACHE"
PAPER_MODEL = "s3-deltanet-neg-statement"  # the paper's model: what every page opens on
SHIPPED = Path(__file__).resolve().parents[1] / "checkpoints"  # app/ sits beside checkpoints/


def checkpoint_dir() -> Path:
    return Path(os.environ.get(ENV_DIR) or SHIPPED)


def cache_dir() -> Path:
    """$DELTALENS_CACHE, else ~/.cache/deltalens (read at each call: tests point it elsewhere)."""
    return Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "deltalens")
