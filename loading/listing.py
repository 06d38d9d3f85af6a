"""Checkpoints listed and described from their saved files alone: no weights, no torch.

    list_checkpoints(root)       one row per checkpoint: task, beta range, steps, saved accuracy
    checkpoint_row(folder)       one such row
    read_card(folder)            its CARD.md (a Hub model's README.md)

What a list or a card needs is config.json's "deltalens" section and a few small files, so this module
imports pandas and the torch-free readers only (models.read_checkpoint_meta, the registry): the
dashboard's first page shows the list before torch and TransformerLens have loaded. opened.py, which
opens a model, re-exports these names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.models.architecture import is_delta_rule
from deltalens.models.io.hf_folder import CONFIG_NAME
from deltalens.models.io.named_folder import NO_SHIPPED, checkpoint_dirs, no_shipped_checkpoints
from deltalens.tasks.tokenizers.hf import has_tokenizer
from deltalens.tasks.traces import TraceSpec

# the held-out traces of a model that records no task (a pretrained LM with its own tokenizer):
# short S3 swap traces with frequent reveals, what `deltalens eval` asks such a model by default
DEFAULT_TEXT_SPEC = TraceSpec(group="S3", action_set="swaps", actions=12, spacing=2, reveal="one")

CARD_NAME = "CARD.md"
HUB_CARD_NAME = "README.md"
MAX_CARD_BYTES = 1 << 20  # a model card is prose; a bigger file is not one


def read_card(folder) -> str | None:
    """The checkpoint's CARD.md (a Hub model's README.md) as text, None when it has none.

    Only a plain file inside the folder is read: a symlink (which could point anywhere readable, and
    the dashboard may be served to others) or a card that is not UTF-8 is refused with a sentence."""
    card = Path(folder) / CARD_NAME
    if not os.path.lexists(card) and os.path.lexists(Path(folder) / HUB_CARD_NAME):
        card = Path(folder) / HUB_CARD_NAME  # a model from the Hub: its README is its card
    if not os.path.lexists(card):
        return None
    if card.is_symlink() or not card.is_file():
        raise DeltalensError(f"{card} is not a plain file inside the checkpoint folder (a link?), so it is not shown.")
    if card.stat().st_size > MAX_CARD_BYTES:
        raise DeltalensError(f"{card} is over {MAX_CARD_BYTES >> 20} MB, too big for a model card; not shown.")
    try:
        return card.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise DeltalensError(f"{card} is not UTF-8 text (byte {err.start}); re-save it as UTF-8.") from None


def list_checkpoints(root: str | Path | None = None, skip_unreadable: bool = False) -> pd.DataFrame:
    """Every checkpoint under `root` (default: the shipped ones), one row each, from its saved
    metadata (no weights read): name, architecture, group, tokenizer, beta range, steps and
    held-out reveal accuracy at 1x / 2x / 4x the training length. With `skip_unreadable`, a
    folder whose metadata cannot be read is left out and its error sentence kept in
    `frame.attrs["skipped"]` (name -> sentence) instead of raising.

    >>> table = dl.list_checkpoints()                      # printed whole, every column
    >>> "s3-deltanet-neg-statement" in set(table["name"])
    True
    """
    if root is not None and not Path(root).is_dir():
        raise DeltalensError(f"checkpoint folder {root} does not exist or is not a folder.")
    if root is None and no_shipped_checkpoints():
        raise DeltalensError(f"{NO_SHIPPED} as `root`.")
    paths = (
        [
            Path(root) / name
            for name in sorted(os.listdir(root))
            if not name.startswith(".") and (Path(root) / name / CONFIG_NAME).is_file()
        ]
        if root is not None
        else checkpoint_dirs()
    )
    rows, skipped = [], {}
    for path in paths:
        try:
            rows.append(checkpoint_row(path))
        except DeltalensError as err:
            if not skip_unreadable:
                raise
            skipped[path.name] = str(err)
    frame = CheckpointTable(rows)
    frame.attrs["skipped"] = skipped
    return frame


def checkpoint_row(path: Path, name: str | None = None) -> dict[str, Any]:
    """One row of list_checkpoints for checkpoint folder `path` (from its metadata; no weights read).
    A model that records no task but has its own tokenizer is named with the task it is asked by default."""
    meta = models.read_checkpoint_meta(path)
    config = (meta.get("task") or {}).get("config") or {}
    model_config = meta.get("model_config") or {}
    group, tokenizer = config.get("group"), config.get("tokenizer")
    if not config and has_tokenizer(path):  # what open_checkpoint asks it: DEFAULT_TEXT_SPEC, its own tokenizer
        group, tokenizer = f"{DEFAULT_TEXT_SPEC.group} (default)", "its own"
    row = {
        "name": name or path.name,
        "architecture": meta["architecture"],
        "group": group,
        "tokenizer": tokenizer,
        "beta_range": ("[0, 2]" if model_config.get("allow_neg_eigval") else "[0, 1]")
        if is_delta_rule(meta["architecture"])
        else None,
        "steps": (meta.get("training") or {}).get("step"),
    }
    for length in ((meta.get("metrics") or {}).get("eval") or {}).get("lengths", []):
        row[f"acc_{length['x_train']:g}x"] = length["reveal_accuracy"]
    return row


class CheckpointTable(pd.DataFrame):
    """list_checkpoints' frame: printed whole (every column, however narrow the terminal), not elided."""

    @property
    def _constructor(self):
        return CheckpointTable

    def __repr__(self) -> str:
        return self.to_string(index=False, max_rows=200, float_format=lambda x: f"{x:.3f}")
