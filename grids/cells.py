"""A sweep as data, and the training config of each of its jobs.

``Grid`` is what ``load_grid`` (grids.grid_file) reads from a grid file; its ``cells``
are the (group, arch, k, tokenizer, seed) of the grid, its ``search_runs`` the k = 1 runs of the
learning-rate search. ``cell_config`` and ``search_config`` turn a job into the ``TrainConfig``
it is trained with (the protocol: training.grid's module docstring); ``config_hash`` names its
run directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.training.config import TrainConfig
from deltalens.training.data import TrainingData
from deltalens.training.loop import validation_seed


@dataclass(frozen=True)
class Cell:
    group: str  # permutation group, e.g. S3
    arch: str  # a key of the sweep's [models] table, e.g. deltanet-neg
    spacing: int  # reveal spacing k of the last curriculum stage and of the evaluation
    tokenizer: str  # statement | code
    seed: int = 0  # training seed (initialisation and data order)

    @property
    def name(self) -> str:
        return f"{self.family}-s{self.seed}"

    @property
    def family(self) -> str:
        """The cell without its seed: what a report row aggregates over seeds."""
        return f"{self.group.lower()}-{self.arch}-{self.tokenizer}-k{self.spacing}"

    @property
    def setting(self) -> str:
        """The group of cells a report table and the claims are computed over."""
        return f"{self.group} {self.tokenizer}"


@dataclass(frozen=True)
class SearchRun:
    """One learning rate of the search for (group, arch): k = 1, the statement tokenizer."""

    group: str
    arch: str
    lr: float

    @property
    def name(self) -> str:
        return f"search-{self.group.lower()}-{self.arch}-lr{self.lr:g}"


@dataclass
class Search:
    """The [search] table: the learning-rate grid tried per group and architecture at k = 1."""

    lrs: list[float]
    seed: int = 1  # training seed of the search runs
    steps: int = 0  # budget of a search run (0 = the sweep's steps)
    eval_every: int = 250  # steps between validation evaluations (the curves that choose)


@dataclass
class Thresholds:
    learned: float = 0.9  # reveal accuracy at 1x at or above which a model has learned to track
    extrapolates: float = 0.9  # reveal accuracy at the longest evaluated length for "extrapolates"


PAPER_TITLE = 'Reproduction: Siems et al. (2026), "Learning State-Tracking from Code Using Linear RNNs"'


@dataclass
class Grid:
    path: Path
    cells: list[Cell]
    models: dict[str, dict[str, Any]]  # arch key -> [model] table (with its models.build `arch`)
    task: dict[str, Any] = field(default_factory=dict)  # shared [task] keys
    optim: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    steps: int = 1600  # training budget of every cell (but those of steps_by_arch)
    steps_by_arch: dict[str, int] = field(default_factory=dict)  # arch -> its own budget
    eval_multiples: list[int] = field(default_factory=lambda: [1, 2, 4])
    eval_traces: int = 512
    eval_seed: int = 0
    mixed_from: float = 0.375  # fraction of the budget where spacing 1..k starts
    sparse_from: float = 0.625  # fraction of the budget where spacing k alone starts
    thresholds: Thresholds = field(default_factory=Thresholds)
    seeds: list[int] = field(default_factory=lambda: [0])  # training seeds of every cell
    validation_seed: int = -1  # eval-split seed of the validation traces (-1 = each run's own seed)
    early_stop_accuracy: float = 0.0  # a cell stops once validation accuracy reaches this (0 = never)
    search: Search | None = None  # the learning-rate search; None = every cell uses [optim] lr
    chosen_lr: dict[tuple[str, str], float] = field(default_factory=dict)  # (group, arch) -> the search's lr
    title: str = PAPER_TITLE  # the report's heading ([sweep] title)
    judge_claims: bool = True  # whether the report judges the paper's claims ([sweep] claims)


def budget(sweep: Grid, arch: str) -> int:
    """The step budget of a cell of `arch`."""
    return sweep.steps_by_arch.get(arch, sweep.steps)


def curriculum(spacing: int, steps: int, mixed_from: float = 0.375, sparse_from: float = 0.625) -> list[list[int]]:
    """[[from_step, lo, hi], ...]: dense reveals, then mixed 1..k, then k (training.config)."""
    if spacing == 1:
        return [[0, 1, 1]]
    return [[0, 1, 1], [round(steps * mixed_from), 1, spacing], [round(steps * sparse_from), spacing, spacing]]


def cell_config(cell: Cell, sweep: Grid, lr: float | None = None) -> TrainConfig:
    """The cell's training config; its lr is `lr`, else the search's choice, else [optim] lr."""
    if lr is None and sweep.search is not None:
        if (cell.group, cell.arch) not in sweep.chosen_lr:
            raise DeltalensError(
                f"{cell.name}: no learning rate chosen yet for {cell.group} {cell.arch} "
                "(its k = 1 search runs have no results)"
            )
        lr = sweep.chosen_lr[(cell.group, cell.arch)]
    task = {
        **sweep.task,
        "group": cell.group,
        "tokenizer": cell.tokenizer,
        "spacing": [cell.spacing, cell.spacing],
        "spacing_schedule": curriculum(cell.spacing, budget(sweep, cell.arch), sweep.mixed_from, sweep.sparse_from),
        "eval_spacing": cell.spacing,
    }
    optim = dict(sweep.optim) if lr is None else {**sweep.optim, "lr": lr}
    return TrainConfig.from_dict(
        {
            "task": task,
            "model": dict(sweep.models[cell.arch]),
            "optim": optim,
            "run": {
                **sweep.run,
                "steps": budget(sweep, cell.arch),
                "seed": cell.seed,
                "validation_seed": sweep.validation_seed,
                "early_stop_accuracy": sweep.early_stop_accuracy,
            },
        }
    )


def search_runs(sweep: Grid) -> list[SearchRun]:
    """One run per (group, arch) of the grid and learning rate of the search (none without one)."""
    if sweep.search is None:
        return []
    pairs = dict.fromkeys((c.group, c.arch) for c in sweep.cells)
    return [SearchRun(group, arch, lr) for group, arch in pairs for lr in sweep.search.lrs]


def search_config(run: SearchRun, sweep: Grid) -> TrainConfig:
    """k = 1 throughout on the statement tokenizer, the search's seed, budget and cadence, no early stop."""
    assert sweep.search is not None
    task = {
        **sweep.task,
        "group": run.group,
        "tokenizer": "statement",
        "spacing": [1, 1],
        "spacing_schedule": [],
        "eval_spacing": 1,
    }
    every = sweep.search.eval_every
    return TrainConfig.from_dict(
        {
            "task": task,
            "model": dict(sweep.models[run.arch]),
            "optim": {**sweep.optim, "lr": run.lr},
            "run": {
                **sweep.run,
                "steps": sweep.search.steps or sweep.steps,
                "seed": sweep.search.seed,
                "validation_seed": sweep.validation_seed,
                "eval_every": every,
                "checkpoint_every": every,
            },
        }
    )


def job_config(job: Cell | SearchRun, sweep: Grid) -> TrainConfig:
    return search_config(job, sweep) if isinstance(job, SearchRun) else cell_config(job, sweep)


def canonical_config(config: dict[str, Any]) -> dict[str, Any]:
    """A config dict with today's keys (defaults for keys added since it was written) and the
    validation seed spelled out (-1 means the run's seed), for comparing a result with the sweep."""
    parsed = TrainConfig.from_dict(config)
    parsed.run.validation_seed = validation_seed(parsed)
    return parsed.to_dict()


def config_hash(config: TrainConfig) -> str:
    return hashlib.sha1(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()[:8]


def check_grid(sweep: Grid) -> None:
    """Build every cell's config and tokenizer (cheap), naming the file in any error."""
    seen: set[tuple[str, str]] = set()
    for cell in sweep.cells:
        try:
            config = cell_config(cell, sweep, lr=sweep.optim.get("lr", 3e-3))
            if (cell.group, cell.tokenizer) not in seen:
                seen.add((cell.group, cell.tokenizer))
                TrainingData(config.task, seed=0)  # validates the group, action set and tokenizer
        except DeltalensError as err:
            raise DeltalensError(f"grid file {sweep.path}, cell {cell.name}: {err}") from None


def check_models(sweep: Grid, archs: set[str] | None = None) -> None:
    """Build each architecture once (before any training), so a typo in a [models] table stops the
    sweep now instead of failing every cell of that architecture after hours of others."""
    for key in sorted(archs if archs is not None else sweep.models):
        kwargs = {k: v for k, v in sweep.models[key].items() if k != "arch"}
        try:
            models.build(sweep.models[key]["arch"], vocab_size=16, **kwargs)
        except (DeltalensError, TypeError) as err:  # TypeError: a keyword a config class does not take
            raise DeltalensError(f"grid file {sweep.path}, [models.{key}]: {err}") from None


def with_steps(sweep: Grid, steps: int) -> Grid:
    """Every cell's and search run's budget set to `steps` (per-architecture budgets included)."""
    if steps < 1:
        raise DeltalensError(f"--steps must be a positive number of optimiser steps, got {steps}")
    search = dataclasses.replace(sweep.search, steps=steps) if sweep.search else None
    return dataclasses.replace(sweep, steps=steps, steps_by_arch={}, search=search)


def with_choices(sweep: Grid, chosen: dict[tuple[str, str], float]) -> Grid:
    return dataclasses.replace(sweep, chosen_lr=dict(chosen))
