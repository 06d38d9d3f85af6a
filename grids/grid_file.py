"""Reading a grid file: every table and key checked, every cell expanded from the [[grid]] tables.

A bad key, value or combination fails in ``load_grid`` with one sentence naming the file, rather
than hours into the sweep. The file's tables: [sweep] (budgets, seeds, evaluation), [curriculum],
[thresholds], [task] / [optim] / [run] (shared by every cell), [models.<arch>], [[grid]] and an
optional [search].
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

from deltalens.core.errors import DeltalensError
from deltalens.grids.cells import PAPER_TITLE, Cell, Grid, Search, Thresholds, check_grid
from deltalens.models.architecture import ARCHITECTURES

# per-cell task fields: the grid file may not set them in [task]
_CELL_TASK_KEYS = {"group", "tokenizer", "spacing", "spacing_schedule", "eval_spacing"}


def load_grid(path: str | Path) -> Grid:
    """Read and check a grid file; every cell's TrainConfig is built once here, so a bad key
    fails now with one sentence rather than hours into the sweep."""
    path = Path(path)
    data = _read_toml(path)
    where = f"grid file {path}"
    head, stages, thresholds, task, run, model_tables = _checked_tables(data, where)
    seeds = [
        _number(x, int, "[sweep] seeds", where, lo=0) for x in _list(head.get("seeds", [0]), "[sweep] seeds", where)
    ]
    if len(set(seeds)) != len(seeds):
        raise DeltalensError(f"{where}: [sweep] seeds repeat a seed: {seeds}")
    cells = _grid_cells(data.get("grid"), model_tables, where, seeds)
    multiples = _list(head.get("eval_multiples", [1, 2, 4]), "[sweep] eval_multiples", where)
    sweep = Grid(
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
    _check_splits(sweep, where)
    check_grid(sweep)
    return sweep


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise DeltalensError(f"grid file {path} does not exist; pass --grid (the paper's grid is lab/grids/paper.toml)")
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise DeltalensError(f"grid file {path} is not valid TOML: {err}") from None


def _checked_tables(data: dict[str, Any], where: str) -> tuple[dict[str, Any], ...]:
    """([sweep], [curriculum], [thresholds], [task], [run], [models]) with their keys checked:
    no unknown key, no per-cell key in [task] or [run], an `arch` in every [models] table."""
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
    return head, stages, thresholds, task, run, model_tables


def _check_splits(sweep: Grid, where: str) -> None:
    """Validation traces apart from the test traces; the curriculum's stages in order."""
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


# a grid file's grid is a product of lists: a cap keeps a typo (or a hostile file) from asking for millions
MAX_CELLS = 10_000


def _grid_cells(grids: Any, model_tables: dict[str, Any], where: str, seeds: list[int]) -> list[Cell]:
    if not isinstance(grids, list) or not grids:
        raise DeltalensError(f"{where} has no [[grid]] tables; each lists groups, archs, spacings and a tokenizer")
    cells: dict[Cell, None] = {}  # insertion-ordered and deduplicated in constant time per cell
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
                        cells[cell] = None
                        if len(cells) > MAX_CELLS:
                            raise DeltalensError(
                                f"{where} expands to more than {MAX_CELLS:,} cells; split it into several grid files"
                            )
    return list(cells)


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
