"""Open a checkpoint with its task: the model, its tokenizer and its held-out trace spec.

This is the one place a checkpoint's metadata is turned into a tokenizer and a task; evaluation,
export, capture, the probes, the report and the CLI all go through it.

    checkpoint = open_checkpoint("checkpoints/s3-deltanet-neg-statement")
    checkpoint.model, checkpoint.tokenizer, checkpoint.spec     # model, tokenizer, held-out TraceSpec
    checkpoint.eval_spec(actions=64)                           # the same traces, 4x longer
    batch = checkpoint.batch(64)                               # eval-split traces, never trained on

A plain fla DeltaNet folder opens too (model only): whatever needs a task then says so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from deltalens import models
from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError
from deltalens.loading.listing import (  # noqa: F401 (re-exported: the torch-free part, listing.py)
    CARD_NAME,
    DEFAULT_TEXT_SPEC,
    HUB_CARD_NAME,
    MAX_CARD_BYTES,
    CheckpointTable,
    checkpoint_row,
    list_checkpoints,
    read_card,
)
from deltalens.models.architecture import architecture_of, is_delta_rule
from deltalens.models.io.model_folder import ModelFolder, folder_tokenizer
from deltalens.models.io.named_folder import open_model_folder, resolve_checkpoint  # noqa: F401 (re-exported)
from deltalens.models.lm.lens import attach_tokenizer
from deltalens.models.ops.precision import cast_model, resolve_dtype
from deltalens.tasks.dataset import make_batch
from deltalens.tasks.tokenizers import Tokenizer
from deltalens.tasks.tokenizers.hf import HFTokenizer, missing_tokenizer
from deltalens.tasks.traces import TraceSpec
from deltalens.training.config import TaskConfig
from deltalens.training.data import TrainingData


@dataclass(repr=False)
class Checkpoint(Summary):
    """A loaded checkpoint with what is needed to draw its held-out traces.

    >>> checkpoint = model.checkpoint                      # what dl.load attaches
    >>> checkpoint.batch(4)["tokens"].shape[0], checkpoint.spec.group
    (4, 'S3')
    """

    path: Path
    model: Any  # None when opened with load_model=False
    meta: dict[str, Any]  # the checkpoint's "deltalens" section (models.read_checkpoint_meta)
    data: TrainingData | None = None  # its task: tokenizer, eval specs (None: no task recorded)
    tokenizer: Tokenizer | None = None
    spec: Any = None  # TraceSpec (or ProbTraceSpec) of its held-out evaluation traces
    folder: ModelFolder | None = None  # its config.json as read once (models.load(checkpoint.folder) reads no more)

    def title(self) -> str:
        return f"Checkpoint {self.path.name} ({self.arch})"

    def display_frame(self) -> pd.DataFrame:
        """One row per fact: task, model, training, held-out accuracy (from the saved metrics)."""
        facts: dict[str, Any] = {"path": str(self.path), "architecture": self.arch}
        if self.data is not None:
            task = self.data.task
            facts.update(
                group=task.group,
                action_set=task.action_set,
                tokenizer=task.tokenizer,
                train_actions=task.actions[1],
                eval_spacing=task.eval_spacing,
            )
        config = self.meta.get("model_config") or {}
        if is_delta_rule(self.arch):
            facts["beta_range"] = "[0, 2]" if config.get("allow_neg_eigval") else "[0, 1]"
        size = {
            k: config[k]
            for k in (
                "hidden_size",
                "d_model",
                "num_hidden_layers",
                "n_layers",
                "num_heads",
                "n_heads",
                "num_householder",
                "use_forget_gate",
            )
            if k in config
        }
        facts["model"] = ", ".join(f"{k}={v}" for k, v in size.items())
        training = self.meta.get("training") or {}
        if "step" in training:
            facts["steps"] = training["step"]
        for row in ((self.meta.get("metrics") or {}).get("eval") or {}).get("lengths", []):
            facts[f"reveal_accuracy_{row['x_train']:g}x"] = round(row["reveal_accuracy"], 4)
        return pd.DataFrame({"field": list(facts), "value": [str(v) for v in facts.values()]})

    @property
    def arch(self) -> str:
        return architecture_of(self.model) if self.model is not None else self.meta["architecture"]

    @property
    def task(self) -> TaskConfig:
        return self.require_task().task

    def require_task(self) -> TrainingData:
        if self.data is None:
            raise DeltalensError(missing_tokenizer(self.path))
        return self.data

    def eval_spec(self, actions: int | None = None, spacing: int | None = None, reveal: str | None = None):
        """Held-out traces of the checkpoint's task, optionally longer, sparser or revealing otherwise."""
        return self.require_task().eval_spec(actions, spacing, reveal)

    def batch(self, n_traces: int = 64, seed: int = 0, actions: int | None = None, spacing: int | None = None):
        """`n_traces` eval-split traces of the checkpoint's task (optionally longer or sparser)."""
        return checkpoint_batch(self, n_traces=n_traces, seed=seed, actions=actions, spacing=spacing)


def task_config_from_meta(meta: dict[str, Any]) -> TaskConfig:
    """The TaskConfig a checkpoint was trained with (from its deltalens metadata)."""
    task = meta.get("task") or {}
    if "config" not in task:
        raise DeltalensError(
            "this checkpoint does not record the task it was trained on (no deltalens task metadata, "
            "e.g. a plain fla checkpoint); evaluate it with --traces FILE instead"
        )
    return TaskConfig(**task["config"])


def _task_of(meta: dict[str, Any], tokenizer: Tokenizer | None) -> tuple[TrainingData | None, Tokenizer | None, Any]:
    """(task data, tokenizer, held-out spec) recorded in a checkpoint's metadata, beside the tokenizer its
    folder gave (models/io/model_folder.py:folder_tokenizer); None where absent. A model with its own (hf)
    tokenizer and no task gets DEFAULT_TEXT_SPEC."""
    task = meta.get("task") or {}
    if "config" in task:
        given = tokenizer if isinstance(tokenizer, HFTokenizer) else None
        data = TrainingData(task_config_from_meta(meta), seed=0, tokenizer=given)
        if tokenizer is not None and tokenizer.fingerprint() != data.tokenizer.fingerprint():
            raise DeltalensError(
                f"this checkpoint records a {tokenizer.describe()} tokenizer but was trained with the "
                f"{data.tokenizer.describe()} one its task builds; its config.json is inconsistent: export it again"
            )
        return data, tokenizer or data.tokenizer, data.eval_spec()
    if task.get("eval_spec") and tokenizer is not None:  # metadata without the training task config
        return None, tokenizer, TraceSpec.from_dict(dict(task["eval_spec"]))
    if isinstance(tokenizer, HFTokenizer):
        return None, tokenizer, DEFAULT_TEXT_SPEC
    return None, tokenizer, None


def _loaded(folder: ModelFolder, dtype):
    """models.load with the precision set before the weights arrive (a bf16 file never held in fp32):
    "auto" chosen from the folder's estimate before the build (models/io/load_dtype.py); a named one
    then goes through cast_model, which warns where bf16 is slower on this CPU."""
    if isinstance(dtype, str) and dtype.strip().lower() == "auto":
        return models.load(folder, dtype="auto")
    return cast_model(models.load(folder, dtype=resolve_dtype(dtype)), dtype)


def open_checkpoint(path, load_model: bool = True, revision: str | None = None, dtype="auto") -> Checkpoint:
    """Load checkpoint `path` (a folder, a shipped checkpoint's name, a ModelFolder already read, or a
    Hugging Face Hub id "org/name", pinned by `revision` or "org/name@revision") with its tokenizer and held-out trace
    spec; the model gets the tokenizer too (model.to_tokens, ...). `dtype` ("auto", "fp32", "bf16" or a torch
    dtype; None = fp32) is the weights' dtype, "auto" chosen for this CPU and its memory before the load
    (models/io/load_dtype.py; small models stay fp32); the recurrence stays fp32 (models/ops/precision.py).

    >>> checkpoint = dl.open_checkpoint("s3-deltanet-neg-statement", load_model=False)
    >>> checkpoint.spec.group, checkpoint.model is None
    ('S3', True)
    """
    folder = open_model_folder(path, revision)  # the kind decided once; config.json read and checked once
    meta = folder.meta
    data, tokenizer, spec = _task_of(meta, folder_tokenizer(meta, folder.path))  # checked before any weight is read
    model = attach_tokenizer(_loaded(folder, dtype), tokenizer) if load_model else None
    return Checkpoint(folder.path, model, meta, data, tokenizer, spec, folder)


def load(
    name_or_path,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = "auto",
    revision: str | None = None,
):
    """The model of a checkpoint, TransformerLens style, with its tokenizer and task attached.

    `name_or_path`: a shipped checkpoint's name (`list_checkpoints()`), a checkpoint folder, a
    plain fla/HF folder of the delta-rule family, or a Hugging Face Hub id ("org/name", fetched into
    the HF cache; `revision` pins a branch, tag or commit). The model has `model.tokenizer` (the
    folder's own tokenizer.json / tokenizer.model when it has one; None for a bare fla folder) and
    `model.checkpoint` (the Checkpoint: metadata, held-out spec, `.batch(n)`). `dtype`: "auto" (fp32 for
    small models; for big ones the faster precision on this CPU that fits in memory, printed with the
    estimate before the load), "fp32" or "bf16".

    >>> model = dl.load("s3-deltanet-neg-statement")       # a shipped name, a folder or a Hub id
    >>> model.cfg.n_layers, model.cfg.n_heads
    (2, 4)
    """
    checkpoint = open_checkpoint(name_or_path, revision=revision, dtype=dtype)  # "bf16": bf16 matmuls, fp32 state
    model = checkpoint.model
    if device is not None:
        model = model.to(device)
    model.checkpoint = checkpoint
    return model


def checkpoint_batch(
    checkpoint, n_traces: int = 64, seed: int = 0, actions: int | None = None, spacing: int | None = None
) -> dict[str, torch.Tensor]:
    """Eval-split traces for a checkpoint (a Checkpoint, a path, or its metadata dict)."""
    where: Path | str  # what the refusal below names
    if isinstance(checkpoint, Checkpoint):
        tokenizer, spec, where = checkpoint.tokenizer, checkpoint.spec, checkpoint.path
    elif isinstance(checkpoint, dict):
        _, tokenizer, spec = _task_of(checkpoint, folder_tokenizer(checkpoint, None))
        where = "this checkpoint"
    else:
        folder = resolve_checkpoint(checkpoint)
        meta = models.read_checkpoint_meta(folder)  # the section alone: no weights, no memory check
        _, tokenizer, spec = _task_of(meta, folder_tokenizer(meta, folder))
        where = checkpoint
    if tokenizer is None or spec is None:
        raise DeltalensError(missing_tokenizer(where))
    if isinstance(n_traces, bool) or not isinstance(n_traces, int) or n_traces < 1:
        raise DeltalensError(f"the number of traces must be a whole number >= 1, got {n_traces!r}.")
    changes = {k: v for k, v in (("actions", actions), ("spacing", spacing)) if v is not None}
    if changes:
        spec = dataclasses.replace(spec, **changes)
    return make_batch(spec, tokenizer, n_traces, seed=seed, split="eval")
