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


def read_trainer_state(folder) -> dict[str, Any]:
    """A run's last/trainer_state.json, or one sentence if it is damaged (a grid marks that cell failed; a resume
    says which file to remove)."""
    path = Path(folder) / TRAINER_STATE
    try:
        state = json.loads(path.read_text())
        if not isinstance(state, dict) or not isinstance(state.get("step"), int) or "config" not in state:
            raise ValueError("no step and config")
    except (OSError, ValueError) as err:
        raise DeltalensError(
            f"{path} is damaged ({str(err).splitlines()[0] or type(err).__name__}): remove the run folder "
            f"{Path(folder).parent} to train it again"
        ) from None
    return state


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
