"""The paper's experiment grid: read the grid file, then train, evaluate and record one cell at a time.

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
when its result file holds exactly the config the grid asks for now, so a changed budget retrains
instead of mixing budgets in one table. A killed cell resumes from its run directory, which is
named by a hash of its config for the same reason.

    sweep = load_grid("lab/grids/paper.toml")
    searches = read_search(sweep, "lab/results/grid")           # train the missing ones first
    sweep = with_choices(sweep, choose_lrs(sweep, searches))
    for status in read_results(sweep, "lab/results/grid"):
        if status.result is None:
            run_cell(status.cell, sweep, "runs/grid", "lab/results/grid")

This module runs the jobs; the rest lives beside it, and every name is importable from here:

    grid_file.py     load_grid: the grid file read and checked, the cells expanded
    cells.py         Grid, Cell, SearchRun and each job's TrainConfig (cell_config, search_config)
    grid_results.py  CellStatus: which result files hold this grid's config; choose_lrs

Judging the paper's claims from the results and drawing them is the reports room's job
(reports/claims.py, reports/figures.py).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from deltalens.core.atomic import write_json_atomic
from deltalens.core.display import progress as progress_bar
from deltalens.core.errors import DeltalensError
from deltalens.grids.cells import (
    PAPER_TITLE,
    Cell,
    Grid,
    Search,
    SearchRun,
    Thresholds,
    budget,
    canonical_config,
    cell_config,
    check_grid,
    check_models,
    config_hash,
    curriculum,
    job_config,
    search_config,
    search_runs,
    with_choices,
    with_steps,
)
from deltalens.grids.grid_file import load_grid
from deltalens.grids.grid_results import (
    CellStatus,
    best_validation,
    choose_lrs,
    read_grid,
    read_results,
    read_search,
    result_path,
    select_cells,
)
from deltalens.grids.lanes import run_in_lanes
from deltalens.loading.evaluate_checkpoint import evaluate_checkpoint
from deltalens.training.config import TrainConfig
from deltalens.training.history import read_trainer_state
from deltalens.training.loop import LAST, TRAINER_STATE, train

__all__ = [  # the runner's names and, re-exported, those of the sweep modules it runs
    "Cell",
    "CellStatus",
    "PAPER_TITLE",
    "Search",
    "SearchRun",
    "Grid",
    "GridOutcome",
    "Thresholds",
    "best_validation",
    "budget",
    "canonical_config",
    "cell_config",
    "check_models",
    "check_grid",
    "choose_lrs",
    "config_hash",
    "curriculum",
    "evaluate_lengths",
    "job_config",
    "load_grid",
    "read_results",
    "read_search",
    "read_grid",
    "result_path",
    "run_cell",
    "search_config",
    "search_runs",
    "select_cells",
    "train_missing",
    "with_choices",
    "with_steps",
]


@dataclass
class GridOutcome:
    trained: int = 0
    failed: int = 0
    interrupted: bool = False


def train_missing(
    sweep: Grid,
    todo: list[CellStatus],
    runs_dir: str | Path,
    results_dir: str | Path,
    progress: bool = True,
    lanes: int = 1,
) -> GridOutcome:
    """Train, evaluate and record each cell (or search run) of `todo`, `lanes` at a time.

    One lane runs the cells in turn with a progress bar per training; several lanes run in
    separate processes (one torch thread each, as the configs say) with one bar over cells. A
    cell that fails (a NaN loss, say) is marked and the sweep goes on; Ctrl-C stops after the
    running cells have saved their last checkpoints, so the next call resumes them.
    """
    outcome = GridOutcome()
    if not todo:
        return outcome
    if lanes < 1:
        raise DeltalensError(f"--lanes must be at least 1, got {lanes}")
    lanes = capped_lanes(lanes, len(todo))
    check_models(sweep, {s.cell.arch for s in todo})
    check_output_folders(todo, runs_dir, results_dir)  # before any cell trains
    bar = progress_bar(total=len(todo), enabled=progress, desc="grid", unit="cell")

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


def capped_lanes(lanes: int, cells: int) -> int:
    """At most one lane per core (each runs one torch thread) and per cell; say so when capping."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    capped = max(1, min(lanes, cores, cells))
    if capped < lanes:
        why = f"{cores} core(s) here" if cores <= cells else f"{cells} cell(s) to train"
        print(f"deltalens: note: --lanes {lanes} capped at {capped} ({why})", file=sys.stderr)
    return capped


def check_output_folders(todo: list[CellStatus], runs_dir: str | Path, results_dir: str | Path) -> None:
    """Every folder a cell will write must be a folder (or creatable) and writable, checked up front:
    a --results path that is a file would otherwise be found only after the first cell has trained."""
    folders = {Path(runs_dir), *(result_path(s.cell, results_dir).parent for s in todo)}
    for folder in sorted(folders):
        existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
        if existing is not None and not existing.is_dir():
            raise DeltalensError(f"{existing} is a file, so {folder} cannot hold the grid's output; choose a folder")
        if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
            raise DeltalensError(f"{existing} is not writable, so {folder} cannot hold the grid's output")


def _run_cell_quietly(status: CellStatus, sweep: Grid, runs_dir: str | Path, results_dir: str | Path) -> dict:
    """A lane's work: one cell, no progress bar (the lanes share one bar over cells)."""
    return run_cell(status.cell, sweep, runs_dir, results_dir, progress=False)


def run_cell(
    cell: Cell | SearchRun,
    sweep: Grid,
    runs_dir: str | Path,
    results_dir: str | Path,
    progress: bool = True,
    on_step=None,
) -> dict[str, Any]:
    """Train the cell (resuming a killed run), evaluate it and write its result file. A search
    run's record is its validation curve; a cell's adds the test evaluation at every length.
    `on_step(step, loss)` is passed on to the training (a Slurm job times its first step)."""
    config = job_config(cell, sweep)
    run_dir = Path(runs_dir) / f"{cell.name}-{config_hash(config)}"
    state_file = run_dir / LAST / TRAINER_STATE
    state = read_trainer_state(run_dir / LAST) if state_file.is_file() else None
    finished = state is not None and (state["step"] >= config.run.steps or state.get("stopped_early", False))
    failure = None
    if state is None or not finished:  # (finished implies a state; said here for the type checker)
        try:
            timed = {"on_step": on_step} if on_step is not None else {}
            result = train(config, run_dir, resume=state is not None, progress=progress, **timed)
            steps, wall, history = result.step, result.wall_time_s, result.history
        except DeltalensError as err:
            if not isinstance(cell, SearchRun):
                raise
            # a learning rate that diverges is a search result: recorded with its curve so far, so
            # the choice can be made (and is not retried forever)
            failure = str(err)
            state = read_trainer_state(run_dir / LAST) if state_file.is_file() else None
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
    record["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
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


def evaluate_lengths(checkpoint: Path, config: TrainConfig, sweep: Grid) -> list[dict[str, Any]]:
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


def expected_cells(sweep) -> dict[str, set[tuple[str, int]]]:
    """setting -> the (arch, k) cells the sweep has there: what a claim waits for."""
    expected: dict[str, set[tuple[str, int]]] = {}
    for cell in sweep.cells:
        expected.setdefault(cell.setting, set()).add((cell.arch, cell.spacing))
    return expected
