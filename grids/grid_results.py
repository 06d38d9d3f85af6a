"""A sweep's result files: which job is done, which waits and why, and the learning rates the search chose.

A job counts as done when its result file holds exactly the config the grid asks for now
(``canonical_config``: today's keys, the validation seed spelled out), so a changed budget
retrains instead of mixing budgets in one table.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltalens.core.errors import DeltalensError
from deltalens.grids.cells import (
    Cell,
    Grid,
    SearchRun,
    canonical_config,
    job_config,
    search_runs,
    with_choices,
)


@dataclass
class CellStatus:
    cell: Cell | SearchRun
    result: dict[str, Any] | None = None  # the cell's result file, when it is done
    short: str = ""  # why there is no result, in a few words (for a table cell)
    reason: str = ""  # why there is no result, in full


def result_path(job: Cell | SearchRun, results_dir: str | Path) -> Path:
    folder = Path(results_dir) / "search" if isinstance(job, SearchRun) else Path(results_dir)
    return folder / f"{job.name}.json"


def _status(job: Cell | SearchRun, sweep: Grid, results_dir: str | Path) -> CellStatus:
    """The job's result when its file holds the config the grid asks for now, else why not."""
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
            f"{path} is from a {steps}-step run, the grid asks for {wanted['run']['steps']} steps; it is retrained"
        )
    else:
        status.short = "other config"
        status.reason = f"{path} was trained with a config other than the grid's; it is retrained"
    return status


def read_results(sweep: Grid, results_dir: str | Path) -> list[CellStatus]:
    """One status per cell: its result when the file holds this sweep's config, else why not.
    With a search, pass the sweep `with_choices` (cells without a chosen lr wait for the search)."""
    return [_status(cell, sweep, results_dir) for cell in sweep.cells]


def read_search(sweep: Grid, results_dir: str | Path) -> list[CellStatus]:
    """One status per search run (none when the sweep has no [search])."""
    return [_status(run, sweep, results_dir) for run in search_runs(sweep)]


def best_validation(result: dict[str, Any]) -> tuple[float, int]:
    """(highest validation reveal accuracy, first step within 0.005 of it) of a run's history."""
    history = [h for h in result.get("history", []) if "reveal_accuracy" in h]
    if not history:
        return 0.0, 0
    best = max(h["reveal_accuracy"] for h in history)
    return best, min(h["step"] for h in history if h["reveal_accuracy"] >= best - 0.005)


def _lr_of(job: Cell | SearchRun) -> float:
    if not isinstance(job, SearchRun):
        raise DeltalensError(f"{job.name} is a grid cell, not a run of the learning-rate search; it has no lr")
    return job.lr


def choose_lrs(sweep: Grid, searches: list[CellStatus]) -> dict[tuple[str, str], float]:
    """(group, arch) -> the lr whose validation accuracy peaks highest; near-ties (within 0.001)
    go to the run that got there in fewer steps, then to the smaller lr. Only pairs whose every
    search run has a result are chosen."""
    chosen = {}
    pairs = dict.fromkeys((s.cell.group, s.cell.arch) for s in searches)
    for pair in pairs:
        runs = [s for s in searches if (s.cell.group, s.cell.arch) == pair]
        if any(s.result is None for s in runs):
            continue
        scored = [(best_validation(s.result), _lr_of(s.cell)) for s in runs if s.result is not None]
        top = max(score for (score, _), _ in scored)
        near = [((score, step), lr) for (score, step), lr in scored if score >= top - 0.001]
        chosen[pair] = min(near, key=lambda item: (item[0][1], item[1]))[1]
    return chosen


def read_grid(sweep: Grid, results_dir: str | Path) -> tuple[Grid, list[CellStatus], list[CellStatus]]:
    """(the sweep with the search's choices, cell statuses, search statuses): everything a report
    or a dashboard reads, without training anything."""
    searches = read_search(sweep, results_dir)
    sweep = with_choices(sweep, choose_lrs(sweep, searches))
    return sweep, read_results(sweep, results_dir), searches


def select_cells(
    statuses: list[CellStatus], globs: list[str] | None, where: str = "the grid", require_match: bool = True
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
