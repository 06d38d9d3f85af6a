"""The paper's experiment grid: read the sweep file, then train, evaluate and record one cell at a time.

Siems et al. (2026) compare DeltaNet with beta in [0, 2] (`deltanet-neg`: eigenvalues of the
transition I - beta k k^T in [-1, 1]) and beta in [0, 1] (`deltanet-pos`), a Transformer and an
LSTM, by how sparse the reveals may be (spacing k: one print every k actions) and whether tracking
holds on traces longer than those trained on. The protocol, the same for every architecture:

    search  per group and architecture, one run per learning rate of the [search] grid at k = 1
            (dense reveals, where every architecture should learn); the lr whose held-out
            *validation* accuracy (eval-split traces of `validation_seed`, never the test traces)
            peaks highest is chosen: results_dir/search/<run>.json keep the validation curves
    cell    one (group, arch, k, tokenizer, seed), trained with its architecture's chosen lr:
    train   the curriculum ending at k: spacing 1, then spacing drawn per trace from 1..k, then k
            alone, stage starts as fractions of the budget; stops early once validation accuracy
            reaches `early_stop_accuracy`
    eval    test traces (eval seed 0) at spacing k, 1x / 2x / 4x the training length, reveal `one`
    record  results_dir/<cell>.json: config, steps, wall time, validation curve, accuracy per length

The result files are the durable record (runs/ is scratch and git-ignored). A cell counts as done
when its result file holds exactly the config the sweep asks for now, so a changed budget retrains
instead of mixing budgets in one table. A killed cell resumes from its run directory, which is
named by a hash of its config for the same reason.

    sweep = load_sweep("sweep/paper.toml")
    searches = read_search(sweep, "reports/sweep")           # train the missing ones first
    sweep = with_choices(sweep, choose_lrs(sweep, searches))
    for status in read_results(sweep, "reports/sweep"):
        if status.result is None:
            run_cell(status.cell, sweep, "runs/sweep", "reports/sweep")

Judging the paper's claims from the results and drawing them is the reports room's job
(reports/claims.py, reports/figures.py).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import hashlib
import json
import math
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tomllib
import torch

from deltalens import models
from deltalens.core.atomic import write_json_atomic
from deltalens.core.display import progress as progress_bar
from deltalens.core.errors import DeltalensError
from deltalens.models.architecture import ARCHITECTURES
from deltalens.training.config import TrainConfig
from deltalens.training.data import TrainingData
from deltalens.training.evaluate import evaluate_checkpoint
from deltalens.training.lanes import run_in_lanes
from deltalens.training.loop import LAST, TRAINER_STATE, train, validation_seed

# per-cell task fields: the sweep file may not set them in [task]
_CELL_TASK_KEYS = {"group", "tokenizer", "spacing", "spacing_schedule", "eval_spacing"}


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
class Sweep:
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


# ---------------------------------------------------------------------------------------------
# the sweep file


def load_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep file; every cell's TrainConfig is built once here, so a bad key
    fails now with one sentence rather than hours into the sweep."""
    path = Path(path)
    if not path.is_file():
        raise DeltalensError(f"sweep file {path} does not exist; pass --sweep (the paper's sweep is sweep/paper.toml)")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise DeltalensError(f"sweep file {path} is not valid TOML: {err}") from None
    where = f"sweep file {path}"
    _check_keys(data, {"sweep", "grid", "curriculum", "thresholds", "task", "optim", "run", "models", "search"}, where)
    head = _table(data, "sweep", where)
    _check_keys(
        head,
        {
            "title",
            "claims",
            "steps",
            "steps_by_arch",
            "eval_multiples",
            "eval_traces",
            "eval_seed",
            "seeds",
            "validation_seed",
            "early_stop_accuracy",
        },
        f"{where} [sweep]",
    )
    stages = _table(data, "curriculum", where)
    _check_keys(stages, {"mixed_from", "sparse_from"}, f"{where} [curriculum]")
    thresholds = _table(data, "thresholds", where)
    _check_keys(thresholds, {"learned", "extrapolates"}, f"{where} [thresholds]")
    task, run = _table(data, "task", where), _table(data, "run", where)
    if _CELL_TASK_KEYS & set(task):
        raise DeltalensError(f"{where}: [task] may not set {sorted(_CELL_TASK_KEYS & set(task))}; each cell sets them")
    if {"steps", "early_stop_accuracy", "seed", "validation_seed"} & set(run):
        # one budget and one stopping rule for every cell, in [sweep]; seeds are per cell
        raise DeltalensError(
            f"{where}: [run] may not set steps, early_stop_accuracy, seed or validation_seed; "
            "they are [sweep] keys (steps, early_stop_accuracy, seeds, validation_seed)"
        )
    model_tables = _table(data, "models", where)
    for key, table in model_tables.items():
        if not isinstance(table, dict) or "arch" not in table:
            raise DeltalensError(f"{where}: [models.{key}] needs an `arch` ({', '.join(ARCHITECTURES)})")
    seeds = [
        _number(x, int, "[sweep] seeds", where, lo=0) for x in _list(head.get("seeds", [0]), "[sweep] seeds", where)
    ]
    if len(set(seeds)) != len(seeds):
        raise DeltalensError(f"{where}: [sweep] seeds repeat a seed: {seeds}")
    cells = _grid_cells(data.get("grid"), model_tables, where, seeds)
    multiples = _list(head.get("eval_multiples", [1, 2, 4]), "[sweep] eval_multiples", where)
    sweep = Sweep(
        path=path,
        title=str(head.get("title", PAPER_TITLE)),
        judge_claims=_flag(head.get("claims", True), "[sweep] claims", where),
        cells=cells,
        models=model_tables,
        task=task,
        optim=_table(data, "optim", where),
        run=run,
        steps=_number(head.get("steps", 1600), int, "[sweep] steps", where, lo=1),
        steps_by_arch=_steps_by_arch(head.get("steps_by_arch", {}), model_tables, where),
        eval_multiples=[_number(m, int, "[sweep] eval_multiples", where, lo=1) for m in multiples],
        eval_traces=_number(head.get("eval_traces", 512), int, "[sweep] eval_traces", where, lo=1),
        eval_seed=_number(head.get("eval_seed", 0), int, "[sweep] eval_seed", where, lo=0),
        mixed_from=_number(stages.get("mixed_from", 0.375), float, "[curriculum] mixed_from", where, lo=0, hi=1),
        sparse_from=_number(stages.get("sparse_from", 0.625), float, "[curriculum] sparse_from", where, lo=0, hi=1),
        thresholds=Thresholds(
            **{k: _number(v, float, f"[thresholds] {k}", where, lo=0, hi=1) for k, v in thresholds.items()}
        ),
        seeds=seeds,
        validation_seed=_number(head.get("validation_seed", -1), int, "[sweep] validation_seed", where, lo=-1),
        early_stop_accuracy=_number(
            head.get("early_stop_accuracy", 0.0), float, "[sweep] early_stop_accuracy", where, lo=0, hi=1
        ),
        search=_search(data, where),
    )
    own_seeds = set(sweep.seeds) | ({sweep.search.seed} if sweep.search else set())
    if sweep.validation_seed == sweep.eval_seed or (
        sweep.validation_seed == -1 and sweep.eval_seed in own_seeds and (sweep.search or sweep.early_stop_accuracy)
    ):
        raise DeltalensError(
            f"{where}: [sweep] validation_seed must differ from eval_seed ({sweep.eval_seed}): "
            "the traces that choose the learning rate and the stopping step may not be test traces"
            + (" (-1 means each run's own seed, and a seed here equals it)" if sweep.validation_seed == -1 else "")
        )
    if sweep.mixed_from > sweep.sparse_from:
        raise DeltalensError(f"{where}: [curriculum] mixed_from must not exceed sparse_from")
    check_sweep(sweep)
    return sweep


def _steps_by_arch(table: Any, model_tables: dict[str, Any], where: str) -> dict[str, int]:
    label = f"{where} [sweep] steps_by_arch"
    if not isinstance(table, dict):
        raise DeltalensError(f"{label} must be a table such as {{ transformer = 8000 }}")
    unknown = set(table) - set(model_tables)
    if unknown:
        raise DeltalensError(f"{label}: {sorted(unknown)} have no [models] table; known: {sorted(model_tables)}")
    return {arch: _number(steps, int, arch, label, lo=1) for arch, steps in table.items()}


def _search(data: dict[str, Any], where: str) -> Search | None:
    if "search" not in data:
        return None
    table = _table(data, "search", where)
    label = f"{where} [search]"
    _check_keys(table, {"lrs", "seed", "steps", "eval_every"}, label)
    lrs = [_number(x, float, "lrs", label, lo=1e-8, hi=10) for x in _list(table.get("lrs"), "lrs", label)]
    if len({f"{lr:g}" for lr in lrs}) != len(lrs):  # a run's name carries its lr as :g
        raise DeltalensError(f"{label}: lrs repeat a value (as run names write them): {lrs}")
    return Search(
        lrs=lrs,
        seed=_number(table.get("seed", 1), int, "seed", label, lo=0),
        steps=_number(table.get("steps", 0), int, "steps", label, lo=0),
        eval_every=_number(table.get("eval_every", 250), int, "eval_every", label, lo=1),
    )


def check_sweep(sweep: Sweep) -> None:
    """Build every cell's config and tokenizer (cheap), naming the file in any error."""
    seen: set[tuple[str, str]] = set()
    for cell in sweep.cells:
        try:
            config = cell_config(cell, sweep, lr=sweep.optim.get("lr", 3e-3))
            if (cell.group, cell.tokenizer) not in seen:
                seen.add((cell.group, cell.tokenizer))
                TrainingData(config.task, seed=0)  # validates the group, action set and tokenizer
        except DeltalensError as err:
            raise DeltalensError(f"sweep file {sweep.path}, cell {cell.name}: {err}") from None


def check_models(sweep: Sweep, archs: set[str] | None = None) -> None:
    """Build each architecture once (before any training), so a typo in a [models] table stops the
    sweep now instead of failing every cell of that architecture after hours of others."""
    for key in sorted(archs if archs is not None else sweep.models):
        kwargs = {k: v for k, v in sweep.models[key].items() if k != "arch"}
        try:
            models.build(sweep.models[key]["arch"], vocab_size=16, **kwargs)
        except (DeltalensError, TypeError) as err:  # TypeError: a keyword a config class does not take
            raise DeltalensError(f"sweep file {sweep.path}, [models.{key}]: {err}") from None


def with_steps(sweep: Sweep, steps: int) -> Sweep:
    """Every cell's and search run's budget set to `steps` (per-architecture budgets included)."""
    if steps < 1:
        raise DeltalensError(f"--steps must be a positive number of optimiser steps, got {steps}")
    search = dataclasses.replace(sweep.search, steps=steps) if sweep.search else None
    return dataclasses.replace(sweep, steps=steps, steps_by_arch={}, search=search)


def budget(sweep: Sweep, arch: str) -> int:
    """The step budget of a cell of `arch`."""
    return sweep.steps_by_arch.get(arch, sweep.steps)


def curriculum(spacing: int, steps: int, mixed_from: float = 0.375, sparse_from: float = 0.625) -> list[list[int]]:
    """[[from_step, lo, hi], ...]: dense reveals, then mixed 1..k, then k (training.config)."""
    if spacing == 1:
        return [[0, 1, 1]]
    return [[0, 1, 1], [round(steps * mixed_from), 1, spacing], [round(steps * sparse_from), spacing, spacing]]


def cell_config(cell: Cell, sweep: Sweep, lr: float | None = None) -> TrainConfig:
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


def search_runs(sweep: Sweep) -> list[SearchRun]:
    """One run per (group, arch) of the grid and learning rate of the search (none without one)."""
    if sweep.search is None:
        return []
    pairs = dict.fromkeys((c.group, c.arch) for c in sweep.cells)
    return [SearchRun(group, arch, lr) for group, arch in pairs for lr in sweep.search.lrs]


def search_config(run: SearchRun, sweep: Sweep) -> TrainConfig:
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


def job_config(job: Cell | SearchRun, sweep: Sweep) -> TrainConfig:
    return search_config(job, sweep) if isinstance(job, SearchRun) else cell_config(job, sweep)


def canonical_config(config: dict[str, Any]) -> dict[str, Any]:
    """A config dict with today's keys (defaults for keys added since it was written) and the
    validation seed spelled out (-1 means the run's seed), for comparing a result with the sweep."""
    config = TrainConfig.from_dict(config)
    config.run.validation_seed = validation_seed(config)
    return config.to_dict()


def config_hash(config: TrainConfig) -> str:
    return hashlib.sha1(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()[:8]


def _grid_cells(grids: Any, model_tables: dict[str, Any], where: str, seeds: list[int]) -> list[Cell]:
    if not isinstance(grids, list) or not grids:
        raise DeltalensError(f"{where} has no [[grid]] tables; each lists groups, archs, spacings and a tokenizer")
    cells: list[Cell] = []
    for i, grid in enumerate(grids, 1):
        label = f"{where} [[grid]] #{i}"
        if not isinstance(grid, dict):
            raise DeltalensError(f"{label} is not a table")
        _check_keys(grid, {"groups", "archs", "spacings", "tokenizer"}, label)
        missing = {"groups", "archs", "spacings"} - set(grid)
        if missing:
            raise DeltalensError(f"{label} needs {sorted(missing)}")
        tokenizer = grid.get("tokenizer", "statement")
        if not isinstance(tokenizer, str):
            raise DeltalensError(f"{label}: tokenizer must be a name such as statement or code")
        for arch in _list(grid["archs"], "archs", label):
            if arch not in model_tables:
                raise DeltalensError(
                    f"{label}: arch {arch!r} has no [models.{arch}] table; known: {sorted(model_tables)}"
                )
        for group in _list(grid["groups"], "groups", label):
            for arch in grid["archs"]:
                for k in _list(grid["spacings"], "spacings", label):
                    for seed in seeds:
                        cell = Cell(str(group), arch, _number(k, int, "spacings", label, lo=1), tokenizer, seed)
                        if cell not in cells:
                            cells.append(cell)
    return cells


def _check_keys(table: dict[str, Any], known: set[str], where: str) -> None:
    unknown = set(table) - known
    if unknown:
        raise DeltalensError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")


def _table(data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise DeltalensError(f"{where}: `{key}` must be a table ([{key}])")
    return value


def _flag(value: Any, name: str, where: str) -> bool:
    if not isinstance(value, bool):
        raise DeltalensError(f"{where}: {name} must be true or false, got {value!r}")
    return value


def _list(value: Any, name: str, where: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise DeltalensError(f"{where}: {name} must be a non-empty list")
    return value


def _number(value: Any, kind: type, name: str, where: str, lo: float | None = None, hi: float | None = None):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (kind is float or isinstance(value, int))
    ok = ok and math.isfinite(value)
    if not ok or (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f" in [{lo}, {hi}]" if hi is not None else (f" >= {lo}" if lo is not None else "")
        what = "an integer" if kind is int else "a number"
        raise DeltalensError(f"{where}: {name} must be {what}{bounds}, got {value!r}")
    return kind(value)


# ---------------------------------------------------------------------------------------------
# running and recording cells


@dataclass
class CellStatus:
    cell: Cell | SearchRun
    result: dict[str, Any] | None = None  # the cell's result file, when it is done
    short: str = ""  # why there is no result, in a few words (for a table cell)
    reason: str = ""  # why there is no result, in full


def result_path(job: Cell | SearchRun, results_dir: str | Path) -> Path:
    folder = Path(results_dir) / "search" if isinstance(job, SearchRun) else Path(results_dir)
    return folder / f"{job.name}.json"


def _status(job: Cell | SearchRun, sweep: Sweep, results_dir: str | Path) -> CellStatus:
    """The job's result when its file holds the config the sweep asks for now, else why not."""
    path = result_path(job, results_dir)
    status = CellStatus(job)
    try:
        wanted = canonical_config(job_config(job, sweep).to_dict())
    except DeltalensError as err:  # a cell whose learning rate is not chosen yet
        status.short, status.reason = "waiting for the lr search", str(err)
        return status
    if not path.is_file():
        status.short, status.reason = "not trained yet", f"no result file {path}"
        return status
    try:
        result = json.loads(path.read_text())
        recorded = result["config"]
        if isinstance(job, Cell):
            result["eval"]["lengths"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
        status.short = "unreadable result"
        status.reason = f"{path} is not a result file ({err}); it is retrained"
        return status
    try:  # keys added to the config since the cell ran count with their defaults
        recorded = canonical_config(recorded)
    except DeltalensError:
        pass  # an unknown key: it stays unequal, so "other config"
    if recorded == wanted:
        status.result = result
    elif recorded.get("run", {}).get("steps") != wanted["run"]["steps"]:
        status.short = "other budget"
        steps = recorded.get("run", {}).get("steps")
        status.reason = (
            f"{path} is from a {steps}-step run, the sweep asks for {wanted['run']['steps']} steps; it is retrained"
        )
    else:
        status.short = "other config"
        status.reason = f"{path} was trained with a config other than the sweep's; it is retrained"
    return status


def read_results(sweep: Sweep, results_dir: str | Path) -> list[CellStatus]:
    """One status per cell: its result when the file holds this sweep's config, else why not.
    With a search, pass the sweep `with_choices` (cells without a chosen lr wait for the search)."""
    return [_status(cell, sweep, results_dir) for cell in sweep.cells]


def read_search(sweep: Sweep, results_dir: str | Path) -> list[CellStatus]:
    """One status per search run (none when the sweep has no [search])."""
    return [_status(run, sweep, results_dir) for run in search_runs(sweep)]


def best_validation(result: dict[str, Any]) -> tuple[float, int]:
    """(highest validation reveal accuracy, first step within 0.005 of it) of a run's history."""
    history = [h for h in result.get("history", []) if "reveal_accuracy" in h]
    if not history:
        return 0.0, 0
    best = max(h["reveal_accuracy"] for h in history)
    return best, min(h["step"] for h in history if h["reveal_accuracy"] >= best - 0.005)


def choose_lrs(sweep: Sweep, searches: list[CellStatus]) -> dict[tuple[str, str], float]:
    """(group, arch) -> the lr whose validation accuracy peaks highest; near-ties (within 0.001)
    go to the run that got there in fewer steps, then to the smaller lr. Only pairs whose every
    search run has a result are chosen."""
    chosen = {}
    pairs = dict.fromkeys((s.cell.group, s.cell.arch) for s in searches)
    for pair in pairs:
        runs = [s for s in searches if (s.cell.group, s.cell.arch) == pair]
        if any(s.result is None for s in runs):
            continue
        scored = [(best_validation(s.result), s.cell.lr) for s in runs]
        top = max(score for (score, _), _ in scored)
        near = [((score, step), lr) for (score, step), lr in scored if score >= top - 0.001]
        chosen[pair] = min(near, key=lambda item: (item[0][1], item[1]))[1]
    return chosen


def with_choices(sweep: Sweep, chosen: dict[tuple[str, str], float]) -> Sweep:
    return dataclasses.replace(sweep, chosen_lr=dict(chosen))


def read_sweep(sweep: Sweep, results_dir: str | Path) -> tuple[Sweep, list[CellStatus], list[CellStatus]]:
    """(the sweep with the search's choices, cell statuses, search statuses): everything a report
    or a dashboard reads, without training anything."""
    searches = read_search(sweep, results_dir)
    sweep = with_choices(sweep, choose_lrs(sweep, searches))
    return sweep, read_results(sweep, results_dir), searches


def select_cells(
    statuses: list[CellStatus], globs: list[str] | None, where: str = "the sweep", require_match: bool = True
) -> list[CellStatus]:
    """The cells to train: those without a result whose name matches a glob (all when no globs).
    Cells left out are marked "not selected"; globs that match no cell at all are an error
    (unless not `require_match`: the caller checked them against more names)."""
    selected = statuses
    if globs:
        selected = [s for s in statuses if any(fnmatch.fnmatchcase(s.cell.name, g) for g in globs)]
        if not selected and require_match:
            names = ", ".join(s.cell.name for s in statuses[:3])
            raise DeltalensError(f"--only {' '.join(globs)} matches no cell of {where}; names look like {names}")
    todo = [s for s in selected if s.result is None and s.short != "waiting for the lr search"]
    chosen = {s.cell for s in todo}
    for status in statuses:
        if status.result is None and status.cell not in chosen and status.short != "waiting for the lr search":
            status.short, status.reason = "not selected", f"not selected by --only ({status.reason})"
    return todo


@dataclass
class SweepOutcome:
    trained: int = 0
    failed: int = 0
    interrupted: bool = False


def train_missing(
    sweep: Sweep,
    todo: list[CellStatus],
    runs_dir: str | Path,
    results_dir: str | Path,
    progress: bool = True,
    lanes: int = 1,
) -> SweepOutcome:
    """Train, evaluate and record each cell (or search run) of `todo`, `lanes` at a time.

    One lane runs the cells in turn with a progress bar per training; several lanes run in
    separate processes (one torch thread each, as the configs say) with one bar over cells. A
    cell that fails (a NaN loss, say) is marked and the sweep goes on; Ctrl-C stops after the
    running cells have saved their last checkpoints, so the next call resumes them.
    """
    outcome = SweepOutcome()
    if not todo:
        return outcome
    if lanes < 1:
        raise DeltalensError(f"--lanes must be at least 1, got {lanes}")
    check_models(sweep, {s.cell.arch for s in todo})
    bar = progress_bar(total=len(todo), enabled=progress, desc="sweep", unit="cell")

    def record(status: CellStatus, call, any_error: bool = False) -> None:
        try:
            status.result = call()
            outcome.trained += 1
        except Exception as err:
            if not (any_error or isinstance(err, DeltalensError)):
                raise  # in-process: a bug shows its traceback; in a lane a crash is that cell's failure
            text = str(err) if isinstance(err, DeltalensError) else f"{type(err).__name__}: {err}"
            status.short, status.reason = "training failed", f"training failed: {text}"
            outcome.failed += 1
            bar.write(f"deltalens: {status.cell.name}: {status.reason}", file=sys.stderr)
        bar.update(1)

    running: list[CellStatus] = []  # what a Ctrl-C interrupts (cells not started keep their status)
    try:
        if lanes == 1:
            for status in todo:
                bar.set_postfix_str(status.cell.name)
                running[:] = [status]
                record(status, lambda s=status: run_cell(s.cell, sweep, runs_dir, results_dir, progress=progress))
        else:

            def record_lane(status: CellStatus, call) -> None:
                bar.set_postfix_str(status.cell.name)
                record(status, call, any_error=True)

            work = functools.partial(_run_cell_quietly, sweep=sweep, runs_dir=runs_dir, results_dir=results_dir)
            run_in_lanes(todo, lanes, work, running, record_lane)
    except KeyboardInterrupt:
        for status in running:
            if status.result is None and status.short != "training failed":
                status.short, status.reason = "interrupted", "interrupted; `deltalens reproduce` resumes it"
        outcome.interrupted = True
    bar.close()
    return outcome


def _run_cell_quietly(status: CellStatus, sweep: Sweep, runs_dir: str | Path, results_dir: str | Path) -> dict:
    """A lane's work: one cell, no progress bar (the lanes share one bar over cells)."""
    return run_cell(status.cell, sweep, runs_dir, results_dir, progress=False)


def run_cell(
    cell: Cell | SearchRun, sweep: Sweep, runs_dir: str | Path, results_dir: str | Path, progress: bool = True
) -> dict[str, Any]:
    """Train the cell (resuming a killed run), evaluate it and write its result file. A search
    run's record is its validation curve; a cell's adds the test evaluation at every length."""
    config = job_config(cell, sweep)
    run_dir = Path(runs_dir) / f"{cell.name}-{config_hash(config)}"
    state_file = run_dir / LAST / TRAINER_STATE
    state = json.loads(state_file.read_text()) if state_file.is_file() else None
    finished = state is not None and (state["step"] >= config.run.steps or state.get("stopped_early", False))
    failure = None
    if not finished:
        try:
            result = train(config, run_dir, resume=state is not None, progress=progress)
            steps, wall, history = result.step, result.wall_time_s, result.history
        except DeltalensError as err:
            if not isinstance(cell, SearchRun):
                raise
            # a learning rate that diverges is a search result: recorded with its curve so far, so
            # the choice can be made (and is not retried forever)
            failure = str(err)
            state = json.loads(state_file.read_text()) if state_file.is_file() else None
            steps, wall, history = (state["step"], state["wall_time_s"], state["history"]) if state else (0, 0.0, [])
    else:  # trained, but killed before its result was written
        steps, wall, history = state["step"], state["wall_time_s"], state["history"]
    if config.run.threads:
        torch.set_num_threads(config.run.threads)
    record = {
        "cell": cell.name,
        **dataclasses.asdict(cell),
        "config": config.to_dict(),
        "steps": steps,
        "stopped_early": steps < config.run.steps,
        "wall_time_s": round(wall, 1),
    }
    if failure:
        record["failed"] = failure
    if isinstance(cell, Cell):
        started = time.perf_counter()
        lengths = evaluate_lengths(run_dir / LAST, config, sweep)
        record["eval_wall_time_s"] = round(time.perf_counter() - started, 1)
    record["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    # held-out accuracy during training: validation traces (validation_seed) at spacing k, training length
    record["history"] = history
    if isinstance(cell, Cell):
        record["eval"] = {
            "spacing": cell.spacing,
            "reveal": "one",
            "n_traces": sweep.eval_traces,
            "seed": sweep.eval_seed,
            "lengths": lengths,
        }
    write_json_atomic(result_path(cell, results_dir), record)
    return record


def evaluate_lengths(checkpoint: Path, config: TrainConfig, sweep: Sweep) -> list[dict[str, Any]]:
    """Reveal accuracy at each multiple of the training length; a length the model cannot take
    (a Transformer's context) is recorded as an error rather than losing the cell."""
    train_length = config.task.actions[1]
    rows = []
    for multiple in sweep.eval_multiples:
        actions = multiple * train_length
        try:
            report = evaluate_checkpoint(
                checkpoint,
                lengths=[actions],
                spacing=config.task.eval_spacing,
                n_traces=sweep.eval_traces,
                seed=sweep.eval_seed,
                reveal="one",
            )
            rows.append(report["lengths"][0])
        except DeltalensError as err:
            rows.append({"actions": actions, "x_train": float(multiple), "error": str(err)})
    return rows
