"""Save and restore an AdamW state without pickle: tensors to safetensors, the rest to JSON.

torch's optimizer `state_dict()` is {"state": {param_index: {name: tensor}}, "param_groups": [...]}.
Tensors are stored under "state.{index}.{name}"; everything else is plain JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from deltalens.core.atomic import usual_mode

TENSORS = "optimizer.safetensors"
GROUPS = "optimizer.json"


def save_optimizer(optimizer: torch.optim.Optimizer, directory: Path) -> None:
    state = optimizer.state_dict()
    tensors = {
        f"state.{index}.{name}": value.detach().contiguous().clone()
        for index, entries in state["state"].items()
        for name, value in entries.items()
    }
    save_file(tensors, str(directory / TENSORS))
    usual_mode(directory / TENSORS)  # safetensors writes 0600: the run folder's other files are readable
    (directory / GROUPS).write_text(json.dumps({"param_groups": state["param_groups"]}))


def load_optimizer(optimizer: torch.optim.Optimizer, directory: Path) -> None:
    tensors = load_file(str(directory / TENSORS))
    groups = json.loads((directory / GROUPS).read_text())["param_groups"]
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": groups})
