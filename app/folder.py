"""Where the dashboard reads checkpoints and keeps its cache: light on purpose (no torch, no pandas),
so Home.py can draw the navigation before the library loads."""

from __future__ import annotations

import os
from pathlib import Path

ENV_DIR = "DELTALENS_APP_CHECKPOINTS"  # set by `deltalens app --checkpoints ...`: one source a line
ENV_CACHE = "DELTALENS_CACHE"
PAPER_MODEL = "s3-deltanet-neg-statement"  # the paper's model: what every page opens on
SHIPPED = Path(__file__).resolve().parents[1] / "checkpoints"  # app/ sits beside checkpoints/


def checkpoint_sources() -> list[str]:
    """What the dashboard shows, one entry each: a folder of checkpoints, one model folder, or a Hugging
    Face Hub id (org/name[@revision]); $DELTALENS_APP_CHECKPOINTS holds them one a line."""
    given = [line.strip() for line in os.environ.get(ENV_DIR, "").splitlines() if line.strip()]
    return given or [str(SHIPPED)]


def checkpoint_dir() -> Path:
    """The first source when it is a folder, else the shipped checkpoints (where cards and sweeps live)."""
    first = Path(checkpoint_sources()[0])
    return first if first.is_dir() else SHIPPED


def sources_label() -> str:
    return ", ".join(checkpoint_sources())


def cache_dir() -> Path:
    """$DELTALENS_CACHE, else ~/.cache/deltalens (read at each call: tests point it elsewhere)."""
    return Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "deltalens")
