"""The paper's experiment grid: train, evaluate and record one cell at a time, then judge the claims.

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
    claims = evaluate_claims([s.result for s in read_results(sweep, "reports/sweep") if s.result])
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tasks.errors import DeltalensError
from training.config import TrainConfig
from training.loop import LAST, TRAINER_STATE, train

# How the report names each architecture of the sweep's [models] table (others: the key itself).
ARCH_LABELS = {
    "deltanet-neg": "DeltaNet β∈[0,2]",
    "deltanet-pos": "DeltaNet β∈[0,1]",
    "transformer": "Transformer",
    "lstm": "LSTM",
}
ARCH_COLORS = {"deltanet-neg": "#1f77b4", "deltanet-pos": "#ff7f0e", "transformer": "#2ca02c", "lstm": "#9467bd"}

HOLDS, DOES_NOT_HOLD, NOT_MEASURED = "holds", "does not hold", "not measured"

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
    models = _table(data, "models", where)
    for key, table in models.items():
        if not isinstance(table, dict) or "arch" not in table:
            raise DeltalensError(f"{where}: [models.{key}] needs an `arch` (deltanet, transformer or lstm)")
    cells = _grid_cells(data.get("grid"), models, where)
    multiples = _list(head.get("eval_multiples", [1, 2, 4]), "[sweep] eval_multiples", where)
    sweep = Sweep(
        path=path, cells=cells, models=models, task=task, optim=_table(data, "optim", where), run=run,
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
    from training.data import TrainingData

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
    import models

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


def _grid_cells(grids: Any, models: dict[str, Any], where: str) -> list[Cell]:
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
            if arch not in models:
                raise DeltalensError(f"{label}: arch {arch!r} has no [models.{arch}] table; known: {sorted(models)}")
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


def run_cell(
    cell: Cell, sweep: Sweep, runs_dir: str | Path, results_dir: str | Path, progress: bool = True
) -> dict[str, Any]:
    """Train the cell (resuming a killed run), evaluate it and write results_dir/<cell>.json."""
    import torch

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
    from training.evaluate import evaluate_checkpoint

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


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(staging, path)  # readers see the old file or the new one, never half of one


# ---------------------------------------------------------------------------------------------
# the paper's claims, judged on results


@dataclass
class Claim:
    key: str
    statement: str  # the paper's claim, in words
    setting: str  # the cells it was judged on, e.g. "S3 statement"
    verdict: str  # holds | does not hold | not measured
    evidence: str  # the numbers the verdict rests on, or what is missing


CLAIMS = {
    "neg-sparse": "DeltaNet β∈[0,2] learns to track with sparse reveals",
    "neg-extrapolates": "DeltaNet β∈[0,2] extrapolates to longer traces",
    "pos-fails": "DeltaNet β∈[0,1] fails with sparse reveals",
    "transformer-dense": "the Transformer needs dense reveals",
    "transformer-no-extrapolation": "the Transformer does not extrapolate",
}


def claim_rules(t: Thresholds) -> dict[str, str]:
    """How each verdict is computed, in words, for the report."""
    return {
        "neg-sparse": f"holds if deltanet-neg reaches ≥ {t.learned:g} at 1x at every spacing k > 1",
        "neg-extrapolates": f"holds if every deltanet-neg cell that learned (≥ {t.learned:g} at 1x) stays "
                            f"≥ {t.extrapolates:g} at the longest length",
        "pos-fails": f"holds if deltanet-pos stays < {t.learned:g} at 1x at every spacing k > 1",
        "transformer-dense": f"holds if the Transformer reaches ≥ {t.learned:g} at 1x with k = 1 and stays "
                             f"< {t.learned:g} at every k > 1",
        "transformer-no-extrapolation": f"holds if every Transformer cell that learned (≥ {t.learned:g} at 1x) "
                                        f"falls < {t.extrapolates:g} at the longest length",
    }


def accuracy_at(result: dict[str, Any], multiple: float) -> float | None:
    """Held-out reveal accuracy at `multiple` x the training length (None: not evaluated)."""
    for row in result["eval"]["lengths"]:
        if row.get("x_train") == multiple and "reveal_accuracy" in row:
            return row["reveal_accuracy"]
    return None


def longest_accuracy(result: dict[str, Any]) -> tuple[float, float] | None:
    """(multiple, accuracy) at the longest length beyond 1x that was evaluated."""
    rows = [r for r in result["eval"]["lengths"] if "reveal_accuracy" in r and r.get("x_train", 0) > 1]
    if not rows:
        return None
    row = max(rows, key=lambda r: r["x_train"])
    return row["x_train"], row["reveal_accuracy"]


def evaluate_claims(results: list[dict[str, Any]], thresholds: Thresholds | None = None,
                    settings: list[str] = ()) -> list[Claim]:
    """Judge the paper's claims per setting (group and tokenizer), from result dicts alone;
    `settings` (e.g. "S3 statement") are judged even when none of their cells has a result."""
    t = thresholds or Thresholds()
    by_setting: dict[str, dict[tuple[str, int], dict[str, Any]]] = {name: {} for name in settings}
    for result in results:
        setting = f"{result['group']} {result['tokenizer']}"
        by_setting.setdefault(setting, {})[(result["arch"], result["spacing"])] = result
    claims = []
    for setting, cells in by_setting.items():
        for key, (verdict, evidence) in _judge(cells, t).items():
            claims.append(Claim(key, CLAIMS[key], setting, verdict, evidence))
    return claims


Cells = dict[tuple[str, int], dict[str, Any]]  # (arch, spacing) -> result, within one setting


def _at_1x(cells: Cells, arch: str, sparse: bool) -> list[tuple[int, float]]:
    """[(k, reveal accuracy at 1x)] of `arch`'s sparse (k > 1) or dense (k = 1) cells."""
    return sorted((k, a) for (name, k), r in cells.items()
                  if name == arch and (k > 1) == sparse and (a := accuracy_at(r, 1)) is not None)


def _learned_longest(cells: Cells, arch: str, t: Thresholds) -> list[tuple[int, float, float]]:
    """[(k, multiple, accuracy at the longest length)] of `arch`'s cells that learned at 1x."""
    rows = []
    for (name, k), r in sorted(cells.items()):
        a, longest = accuracy_at(r, 1), longest_accuracy(r)
        if name == arch and a is not None and a >= t.learned and longest is not None:
            rows.append((k, *longest))
    return rows


def _judge(cells: Cells, t: Thresholds) -> dict[str, tuple[str, str]]:
    """claim key -> (verdict, evidence) for one setting; the rules are `claim_rules`."""
    def listing(pairs) -> str:
        return "1x: " + ", ".join(f"k={k}: {a:.3f}" for k, a in pairs)

    def long_listing(rows) -> str:
        return ", ".join(f"k={k}: {a:.3f} at {m:g}x" for k, m, a in rows)

    def verdict(ok: bool) -> str:
        return HOLDS if ok else DOES_NOT_HOLD

    out = {}
    sparse = _at_1x(cells, "deltanet-neg", sparse=True)
    out["neg-sparse"] = ((verdict(all(a >= t.learned for _, a in sparse)), listing(sparse)) if sparse else
                         (NOT_MEASURED, "no deltanet-neg result with spacing k > 1"))
    rows = _learned_longest(cells, "deltanet-neg", t)
    out["neg-extrapolates"] = ((verdict(all(a >= t.extrapolates for *_, a in rows)), long_listing(rows)) if rows else
                               (NOT_MEASURED, "no deltanet-neg result that learned at 1x and was evaluated beyond it"))
    sparse = _at_1x(cells, "deltanet-pos", sparse=True)
    out["pos-fails"] = ((verdict(all(a < t.learned for _, a in sparse)), listing(sparse)) if sparse else
                        (NOT_MEASURED, "no deltanet-pos result with spacing k > 1"))
    dense, sparse = _at_1x(cells, "transformer", sparse=False), _at_1x(cells, "transformer", sparse=True)
    if dense and sparse:
        ok = dense[0][1] >= t.learned and all(a < t.learned for _, a in sparse)
        out["transformer-dense"] = (verdict(ok), listing(dense + sparse))
    else:
        missing = " and ".join(n for n, got in (("k = 1", dense), ("k > 1", sparse)) if not got)
        out["transformer-dense"] = (NOT_MEASURED, f"no Transformer result with {missing}")
    rows = _learned_longest(cells, "transformer", t)
    out["transformer-no-extrapolation"] = (
        (verdict(all(a < t.extrapolates for *_, a in rows)), long_listing(rows)) if rows else
        (NOT_MEASURED, "no Transformer result that learned at 1x and was evaluated beyond it"))
    return out


# ---------------------------------------------------------------------------------------------
# figures (plotly; the command writes them as HTML and PNG)


def _settings(results: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(f"{r['group']} {r['tokenizer']}" for r in results))


def _arch_order(results: list[dict[str, Any]]) -> list[str]:
    known = [a for a in ARCH_LABELS if any(r["arch"] == a for r in results)]
    return known + sorted({r["arch"] for r in results} - set(known))


def spacing_figure(results: list[dict[str, Any]], thresholds: Thresholds | None = None):
    """Reveal accuracy at 1x the training length vs reveal spacing, one line per architecture."""
    from plotly.subplots import make_subplots

    t = thresholds or Thresholds()
    settings = _settings(results) or ["no results"]
    fig = make_subplots(rows=1, cols=len(settings), subplot_titles=settings, shared_yaxes=True)
    for arch in _arch_order(results):
        for col, setting in enumerate(settings, 1):
            points = sorted((r["spacing"], a) for r in results if r["arch"] == arch
                            and f"{r['group']} {r['tokenizer']}" == setting and (a := accuracy_at(r, 1)) is not None)
            if points:
                fig.add_scatter(x=[k for k, _ in points], y=[a for _, a in points], mode="lines+markers",
                                row=1, col=col, name=ARCH_LABELS.get(arch, arch), legendgroup=arch,
                                line={"color": ARCH_COLORS.get(arch)})
    fig.add_hline(y=t.learned, line_dash="dot", line_color="grey")
    ticks = sorted({r["spacing"] for r in results}) or None
    fig.update_xaxes(title_text="reveal spacing k", type="log", tickvals=ticks)
    fig.update_yaxes(range=[0, 1.02])
    fig.update_yaxes(title_text="reveal accuracy at 1x", col=1)
    fig.update_layout(title="Held-out reveal accuracy vs reveal spacing (training length)", template="plotly_white",
                      width=max(500, 380 * len(settings)), height=420)
    _dedupe_legend(fig)
    return fig


def length_figure(results: list[dict[str, Any]], thresholds: Thresholds | None = None):
    """Reveal accuracy vs trace length (extrapolation): rows = settings, columns = spacings."""
    from plotly.subplots import make_subplots

    t = thresholds or Thresholds()
    settings = _settings(results) or ["no results"]
    spacings = sorted({r["spacing"] for r in results}) or [1]
    titles = [f"{s}, k={k}" for s in settings for k in spacings]
    fig = make_subplots(rows=len(settings), cols=len(spacings), subplot_titles=titles, shared_yaxes=True)
    for arch in _arch_order(results):
        for row, setting in enumerate(settings, 1):
            for col, k in enumerate(spacings, 1):
                for r in results:
                    if r["arch"] == arch and r["spacing"] == k and f"{r['group']} {r['tokenizer']}" == setting:
                        points = [(x["actions"], x["reveal_accuracy"]) for x in r["eval"]["lengths"]
                                  if "reveal_accuracy" in x]
                        fig.add_scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers",
                                        row=row, col=col, name=ARCH_LABELS.get(arch, arch), legendgroup=arch,
                                        line={"color": ARCH_COLORS.get(arch)})
    fig.add_hline(y=t.extrapolates, line_dash="dot", line_color="grey")
    fig.update_xaxes(type="log", title_text="actions per trace")
    fig.update_yaxes(range=[0, 1.02])
    fig.update_yaxes(title_text="reveal accuracy", col=1)
    fig.update_layout(title="Extrapolation: held-out reveal accuracy vs trace length", template="plotly_white",
                      width=max(500, 320 * len(spacings)), height=max(380, 300 * len(settings)))
    _dedupe_legend(fig)
    return fig


def _dedupe_legend(fig) -> None:
    seen = set()
    for trace in fig.data:
        trace.showlegend = trace.legendgroup not in seen
        seen.add(trace.legendgroup)
