"""The paper's experiment grid: read the sweep file, then train, evaluate and record one cell at a time.

Siems et al. (2026) compare DeltaNet with beta in [0, 2] (`deltanet-neg`: eigenvalues of the
transition I - beta k k^T in [-1, 1]) and beta in [0, 1] (`deltanet-pos`), a Transformer and an
LSTM, by how sparse the reveals may be (spacing k: one print every k actions) and whether tracking
holds on traces longer than those trained on. A cell is one (group, arch, k, tokenizer):

    train   the shipped recipe's curriculum ending at k: spacing 1, then spacing drawn per trace
            from 1..k, then k alone; stage starts are fractions of the budget (600, 1000 of 1600)
    eval    held-out traces at spacing k, 1x / 2x / 4x the training length, reveal `one`
    record  results_dir/<cell>.json: config, steps, wall time, accuracy per length

The result files are the durable record (runs/ is scratch and git-ignored). A cell counts as done
when its result file holds exactly the config the sweep asks for now, so a changed budget retrains
instead of mixing budgets in one table. A killed cell resumes from its run directory, which is
named by a hash of its config for the same reason.

    sweep = load_sweep("sweep/paper.toml")
    for status in read_results(sweep, "reports/sweep"):
        if status.result is None:
            run_cell(status.cell, sweep, "runs/sweep", "reports/sweep")

Judging the paper's claims from the results and drawing them is the reports room's job
(reports/claims.py, reports/figures.py).
"""
from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tomllib
import torch

from deltalens import models
from deltalens.models.atomic import write_json_atomic
from deltalens.tasks.display import progress as progress_bar
from deltalens.tasks.errors import DeltalensError
from deltalens.training.config import TrainConfig
from deltalens.training.data import TrainingData
from deltalens.training.evaluate import evaluate_checkpoint
from deltalens.training.loop import LAST, TRAINER_STATE, train

# per-cell task fields: the sweep file may not set them in [task]
_CELL_TASK_KEYS = {"group", "tokenizer", "spacing", "spacing_schedule", "eval_spacing"}


@dataclass(frozen=True)
class Cell:
    group: str  # permutation group, e.g. S3
    arch: str  # a key of the sweep's [models] table, e.g. deltanet-neg
    spacing: int  # reveal spacing k of the last curriculum stage and of the evaluation
    tokenizer: str  # statement | code

    @property
    def name(self) -> str:
        return f"{self.group.lower()}-{self.arch}-{self.tokenizer}-k{self.spacing}"

    @property
    def setting(self) -> str:
        """The group of cells a report table and the claims are computed over."""
        return f"{self.group} {self.tokenizer}"


@dataclass
class Thresholds:
    learned: float = 0.9  # reveal accuracy at 1x at or above which a model has learned to track
    extrapolates: float = 0.9  # reveal accuracy at the longest evaluated length for "extrapolates"


@dataclass
class Sweep:
    path: Path
    cells: list[Cell]
    models: dict[str, dict[str, Any]]  # arch key -> [model] table (with its models.build `arch`)
    task: dict[str, Any] = field(default_factory=dict)  # shared [task] keys
    optim: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    steps: int = 1600  # training budget of every cell
    eval_multiples: list[int] = field(default_factory=lambda: [1, 2, 4])
    eval_traces: int = 512
    eval_seed: int = 0
    mixed_from: float = 0.375  # fraction of the budget where spacing 1..k starts
    sparse_from: float = 0.625  # fraction of the budget where spacing k alone starts
    thresholds: Thresholds = field(default_factory=Thresholds)


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
    _check_keys(data, {"sweep", "grid", "curriculum", "thresholds", "task", "optim", "run", "models"}, where)
    head = _table(data, "sweep", where)
    _check_keys(head, {"steps", "eval_multiples", "eval_traces", "eval_seed"}, f"{where} [sweep]")
    stages = _table(data, "curriculum", where)
    _check_keys(stages, {"mixed_from", "sparse_from"}, f"{where} [curriculum]")
    thresholds = _table(data, "thresholds", where)
    _check_keys(thresholds, {"learned", "extrapolates"}, f"{where} [thresholds]")
    task, run = _table(data, "task", where), _table(data, "run", where)
    if _CELL_TASK_KEYS & set(task):
        raise DeltalensError(f"{where}: [task] may not set {sorted(_CELL_TASK_KEYS & set(task))}; each cell sets them")
    if {"steps", "early_stop_accuracy"} & set(run):
        # one budget for every cell: steps live in [sweep], and no cell may stop early
        raise DeltalensError(f"{where}: [run] may not set steps or early_stop_accuracy; the budget is [sweep] steps")
    model_tables = _table(data, "models", where)
    for key, table in model_tables.items():
        if not isinstance(table, dict) or "arch" not in table:
            raise DeltalensError(f"{where}: [models.{key}] needs an `arch` (deltanet, transformer or lstm)")
    cells = _grid_cells(data.get("grid"), model_tables, where)
    multiples = _list(head.get("eval_multiples", [1, 2, 4]), "[sweep] eval_multiples", where)
    sweep = Sweep(
        path=path, cells=cells, models=model_tables, task=task, optim=_table(data, "optim", where), run=run,
        steps=_number(head.get("steps", 1600), int, "[sweep] steps", where, lo=1),
        eval_multiples=[_number(m, int, "[sweep] eval_multiples", where, lo=1) for m in multiples],
        eval_traces=_number(head.get("eval_traces", 512), int, "[sweep] eval_traces", where, lo=1),
        eval_seed=_number(head.get("eval_seed", 0), int, "[sweep] eval_seed", where, lo=0),
        mixed_from=_number(stages.get("mixed_from", 0.375), float, "[curriculum] mixed_from", where, lo=0, hi=1),
        sparse_from=_number(stages.get("sparse_from", 0.625), float, "[curriculum] sparse_from", where, lo=0, hi=1),
        thresholds=Thresholds(**{k: _number(v, float, f"[thresholds] {k}", where, lo=0, hi=1)
                                 for k, v in thresholds.items()}),
    )
    if sweep.mixed_from > sweep.sparse_from:
        raise DeltalensError(f"{where}: [curriculum] mixed_from must not exceed sparse_from")
    check_sweep(sweep)
    return sweep


def check_sweep(sweep: Sweep) -> None:
    """Build every cell's config and tokenizer (cheap), naming the file in any error."""
    seen: set[tuple[str, str]] = set()
    for cell in sweep.cells:
        try:
            config = cell_config(cell, sweep)
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
    if steps < 1:
        raise DeltalensError(f"--steps must be a positive number of optimiser steps, got {steps}")
    return dataclasses.replace(sweep, steps=steps)


def curriculum(spacing: int, steps: int, mixed_from: float = 0.375, sparse_from: float = 0.625) -> list[list[int]]:
    """[[from_step, lo, hi], ...]: dense reveals, then mixed 1..k, then k (training.config)."""
    if spacing == 1:
        return [[0, 1, 1]]
    return [[0, 1, 1], [round(steps * mixed_from), 1, spacing], [round(steps * sparse_from), spacing, spacing]]


def cell_config(cell: Cell, sweep: Sweep) -> TrainConfig:
    task = {
        **sweep.task,
        "group": cell.group,
        "tokenizer": cell.tokenizer,
        "spacing": [cell.spacing, cell.spacing],
        "spacing_schedule": curriculum(cell.spacing, sweep.steps, sweep.mixed_from, sweep.sparse_from),
        "eval_spacing": cell.spacing,
    }
    return TrainConfig.from_dict({
        "task": task,
        "model": dict(sweep.models[cell.arch]),
        "optim": dict(sweep.optim),
        "run": {**sweep.run, "steps": sweep.steps},
    })


def config_hash(config: TrainConfig) -> str:
    return hashlib.sha1(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()[:8]


def _grid_cells(grids: Any, model_tables: dict[str, Any], where: str) -> list[Cell]:
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
                    cell = Cell(str(group), arch, _number(k, int, "spacings", label, lo=1), tokenizer)
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
    cell: Cell
    result: dict[str, Any] | None = None  # the cell's result file, when it is done
    short: str = ""  # why there is no result, in a few words (for a table cell)
    reason: str = ""  # why there is no result, in full


def read_results(sweep: Sweep, results_dir: str | Path) -> list[CellStatus]:
    """One status per cell: its result when the file holds this sweep's config, else why not."""
    results_dir = Path(results_dir)
    statuses = []
    for cell in sweep.cells:
        path = results_dir / f"{cell.name}.json"
        status = CellStatus(cell)
        if not path.is_file():
            status.short, status.reason = "not trained yet", f"no result file {path}"
        else:
            try:
                result = json.loads(path.read_text())
                recorded = result["config"]
                result["eval"]["lengths"]
            except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
                status.short = "unreadable result"
                status.reason = f"{path} is not a result file ({err}); it is retrained"
            else:
                wanted = cell_config(cell, sweep).to_dict()
                try:  # keys added to the config since the cell ran count with their defaults
                    recorded = TrainConfig.from_dict(recorded).to_dict()
                except DeltalensError:
                    pass  # an unknown key: it stays unequal, so "other config"
                if recorded == wanted:
                    status.result = result
                elif recorded.get("run", {}).get("steps") != wanted["run"]["steps"]:
                    status.short = "other budget"
                    steps = recorded.get("run", {}).get("steps")
                    status.reason = (f"{path} is from a {steps}-step run, the sweep asks for "
                                     f"{wanted['run']['steps']} steps; it is retrained")
                else:
                    status.short = "other config"
                    status.reason = f"{path} was trained with a config other than the sweep's; it is retrained"
        statuses.append(status)
    return statuses


def select_cells(statuses: list[CellStatus], globs: list[str] | None, where: str = "the sweep") -> list[CellStatus]:
    """The cells to train: those without a result whose name matches a glob (all when no globs).
    Cells left out are marked "not selected"; globs that match no cell at all are an error."""
    selected = statuses
    if globs:
        selected = [s for s in statuses if any(fnmatch.fnmatchcase(s.cell.name, g) for g in globs)]
        if not selected:
            names = ", ".join(s.cell.name for s in statuses[:3])
            raise DeltalensError(f"--only {' '.join(globs)} matches no cell of {where}; names look like {names}")
    todo = [s for s in selected if s.result is None]
    chosen = {s.cell for s in todo}
    for status in statuses:
        if status.result is None and status.cell not in chosen:
            status.short, status.reason = "not selected", f"not selected by --only ({status.reason})"
    return todo


@dataclass
class SweepOutcome:
    trained: int = 0
    failed: int = 0
    interrupted: bool = False


def train_missing(sweep: Sweep, todo: list[CellStatus], runs_dir: str | Path, results_dir: str | Path,
                  progress: bool = True) -> SweepOutcome:
    """Train, evaluate and record each cell of `todo` in turn (one progress bar over cells).

    A cell that fails (a NaN loss, say) is marked and the sweep goes on; Ctrl-C stops after the
    running cell has saved its last checkpoint, so the next call resumes it.
    """
    outcome = SweepOutcome()
    if not todo:
        return outcome
    check_models(sweep, {s.cell.arch for s in todo})
    bar = progress_bar(todo, enabled=progress, desc="sweep", unit="cell")
    for status in bar:
        bar.set_postfix_str(status.cell.name)
        try:
            status.result = run_cell(status.cell, sweep, runs_dir, results_dir, progress=progress)
            outcome.trained += 1
        except DeltalensError as err:
            status.short, status.reason = "training failed", f"training failed: {err}"
            outcome.failed += 1
            bar.write(f"deltalens: {status.cell.name}: {status.reason}")
        except KeyboardInterrupt:
            status.short, status.reason = "interrupted", "interrupted; `deltalens reproduce` resumes it"
            outcome.interrupted = True
            break
    bar.close()
    return outcome


def run_cell(
    cell: Cell, sweep: Sweep, runs_dir: str | Path, results_dir: str | Path, progress: bool = True
) -> dict[str, Any]:
    """Train the cell (resuming a killed run), evaluate it and write results_dir/<cell>.json."""
    config = cell_config(cell, sweep)
    run_dir = Path(runs_dir) / f"{cell.name}-{config_hash(config)}"
    state_file = run_dir / LAST / TRAINER_STATE
    state = json.loads(state_file.read_text()) if state_file.is_file() else None
    if state is None or state["step"] < config.run.steps:
        result = train(config, run_dir, resume=state is not None, progress=progress)
        steps, wall, history = result.step, result.wall_time_s, result.history
    else:  # trained, but killed before its result was written
        steps, wall, history = state["step"], state["wall_time_s"], state["history"]
    if config.run.threads:
        torch.set_num_threads(config.run.threads)
    started = time.perf_counter()
    lengths = evaluate_lengths(run_dir / LAST, config, sweep)
    record = {
        "cell": cell.name,
        **dataclasses.asdict(cell),
        "config": config.to_dict(),
        "steps": steps,
        "wall_time_s": round(wall, 1),
        "eval_wall_time_s": round(time.perf_counter() - started, 1),
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "history": history,  # held-out accuracy during training (at spacing k, training length)
        "eval": {"spacing": cell.spacing, "reveal": "one", "n_traces": sweep.eval_traces, "seed": sweep.eval_seed,
                 "lengths": lengths},
    }
    write_json_atomic(Path(results_dir) / f"{cell.name}.json", record)
    return record


def evaluate_lengths(checkpoint: Path, config: TrainConfig, sweep: Sweep) -> list[dict[str, Any]]:
    """Reveal accuracy at each multiple of the training length; a length the model cannot take
    (a Transformer's context) is recorded as an error rather than losing the cell."""
    train_length = config.task.actions[1]
    rows = []
    for multiple in sweep.eval_multiples:
        actions = multiple * train_length
        try:
            report = evaluate_checkpoint(checkpoint, lengths=[actions], spacing=config.task.eval_spacing,
                                         n_traces=sweep.eval_traces, seed=sweep.eval_seed, reveal="one")
            rows.append(report["lengths"][0])
        except DeltalensError as err:
            rows.append({"actions": actions, "x_train": float(multiple), "error": str(err)})
    return rows
