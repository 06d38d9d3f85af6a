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

import torch

from deltalens import models
from deltalens.models.architecture import architecture_of
from deltalens.tasks.dataset import make_batch
from deltalens.tasks.errors import DeltalensError
from deltalens.tasks.tokenizers import Tokenizer
from deltalens.tasks.traces import TraceSpec
from deltalens.training.config import TaskConfig
from deltalens.training.data import TrainingData


@dataclass
class Checkpoint:
    """A loaded checkpoint with what is needed to draw its held-out traces."""

    path: Path
    model: Any  # None when opened with load_model=False
    meta: dict[str, Any]  # the checkpoint's "deltalens" section (models.read_checkpoint_meta)
    data: TrainingData | None = None  # its task: tokenizer, eval specs (None: no task recorded)
    tokenizer: Tokenizer | None = None
    spec: Any = None  # TraceSpec (or ProbTraceSpec) of its held-out evaluation traces

    @property
    def arch(self) -> str:
        return architecture_of(self.model) if self.model is not None else self.meta["architecture"]

    @property
    def task(self) -> TaskConfig:
        return self.require_task().task

    def require_task(self) -> TrainingData:
        if self.data is None:
            raise DeltalensError(
                f"{self.path} records no tokenizer or task it was trained on (a plain fla checkpoint?); evaluate "
                f"it with --traces FILE, or build a batch with deltalens.tasks.dataset.make_batch(spec, "
                f"tokenizer, n) and pass it to capture()."
            )
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


def _task_of(meta: dict[str, Any]) -> tuple[TrainingData | None, Tokenizer | None, Any]:
    """(task data, tokenizer, held-out spec) recorded in a checkpoint's metadata; None where absent."""
    task = meta.get("task") or {}
    tokenizer = Tokenizer.from_spec(meta["tokenizer"]) if meta.get("tokenizer") else None
    if "config" in task:
        data = TrainingData(task_config_from_meta(meta), seed=0)
        return data, tokenizer or data.tokenizer, data.eval_spec()
    if task.get("eval_spec") and tokenizer is not None:  # metadata without the training task config
        return None, tokenizer, TraceSpec.from_dict(dict(task["eval_spec"]))
    return None, tokenizer, None


def open_checkpoint(path, load_model: bool = True) -> Checkpoint:
    """Load checkpoint `path` (models.load) with its tokenizer and held-out trace spec."""
    meta = models.read_checkpoint_meta(path)
    data, tokenizer, spec = _task_of(meta)
    model = models.load(path) if load_model else None
    return Checkpoint(path=Path(path), model=model, meta=meta, data=data, tokenizer=tokenizer, spec=spec)


def checkpoint_batch(checkpoint, n_traces: int = 64, seed: int = 0, actions: int | None = None,
                     spacing: int | None = None) -> dict[str, torch.Tensor]:
    """Eval-split traces for a checkpoint (a Checkpoint, a path, or its metadata dict)."""
    if isinstance(checkpoint, Checkpoint):
        tokenizer, spec, where = checkpoint.tokenizer, checkpoint.spec, checkpoint.path
    elif isinstance(checkpoint, dict):
        _, tokenizer, spec = _task_of(checkpoint)
        where = "this checkpoint"
    else:
        _, tokenizer, spec = _task_of(models.read_checkpoint_meta(checkpoint))
        where = checkpoint
    if tokenizer is None or spec is None:
        raise DeltalensError(
            f"{where} records no tokenizer or task (a plain fla checkpoint?); build a batch yourself with "
            f"deltalens.tasks.dataset.make_batch(spec, tokenizer, n) and pass it to capture()."
        )
    if isinstance(n_traces, bool) or not isinstance(n_traces, int) or n_traces < 1:
        raise DeltalensError(f"the number of traces must be a whole number >= 1, got {n_traces!r}.")
    changes = {k: v for k, v in (("actions", actions), ("spacing", spacing)) if v is not None}
    if changes:
        spec = dataclasses.replace(spec, **changes)
    return make_batch(spec, tokenizer, n_traces, seed=seed, split="eval")
