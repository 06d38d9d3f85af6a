"""A run's training history (its evaluations during training) read from the files it keeps, without torch.

A run's `last/` keeps it in trainer_state.json (written by loop.py at each checkpoint); an export keeps
it in config.json's "deltalens" section. The dashboard's first page draws these curves before torch has
loaded, so this module imports only the torch-free checkpoint reader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deltalens import models
from deltalens.core.errors import DeltalensError

TRAINER_STATE = "trainer_state.json"


def training_history(folder) -> list[dict[str, Any]]:
    """A checkpoint's evaluations during training (step, reveal_accuracy, ...): its trainer_state.json
    (a run's last/), else the history an export keeps in its metadata; [] when it keeps none."""
    folder = Path(folder)
    try:
        return list(json.loads((folder / TRAINER_STATE).read_text())["history"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        return list((models.read_checkpoint_meta(folder).get("training") or {}).get("history") or [])
    except DeltalensError:
        return []
