"""Every cell's accuracy beside the predictors without memory (tasks/baselines.py): chance, the
last-reveal guess and the window-W predictor, at each length. W is the evaluation spacing k and at
least MIN_WINDOW: at k = 1 a one-action window sees a single printed value, while four actions see
about three of them, which on S3 pins the state down (0.99) with no long-range memory.

"Beyond the window" is the verdict that matters for tracking: the seed mean, and at least two thirds
of the seeds, score at least MARGIN above the window predictor on the same held-out traces. A cell
that beats chance but not the window has learned something a short look-back explains. Beside it,
"window matching": the shortest look-back (in actions) whose predictor scores as well as the model;
close to the trace length, only memory of the whole trace explains the accuracy.
"""

from __future__ import annotations

import functools
from typing import Any

from deltalens.core.errors import DeltalensError
from deltalens.reports.claims import accuracy_at, seeds_needed, spread
from deltalens.reports.figures import ARCH_LABELS
from deltalens.tasks.baselines import BaselineScores, baseline_scores
from deltalens.tasks.traces import TraceSpec

MARGIN = 0.05  # above the window predictor: more than sampling noise on 512 traces (about 0.01)
MIN_WINDOW = 4
CANNOT_TELL = "cannot tell"


@functools.lru_cache(maxsize=256)
def _scores(group: str, action_set: str, actions: int, spacing: int, n_traces: int, seed: int) -> BaselineScores:
    spec = TraceSpec(group=group, action_set=action_set, actions=actions, spacing=spacing, reveal="one")
    window = max(spacing, MIN_WINDOW)
    return baseline_scores(spec, n_traces=n_traces, seed=seed, window=window, curve=list(range(actions + 1)))


def cell_baselines(result: dict[str, Any], multiple: float) -> BaselineScores | None:
    """The baselines on the traces a result was evaluated on at `multiple` x its training length."""
    evaluation = result["eval"]
    if evaluation.get("reveal", "one") != "one":
        return None  # probabilistic or reveal-all evaluations: not this table's question
    row = next((r for r in evaluation["lengths"] if r.get("x_train") == multiple), None)
    if row is None:
        return None
    task = result.get("config", {}).get("task")
    if task is None or "spacing" not in evaluation or "n_traces" not in evaluation:
        return None  # a result that does not say how it was evaluated
    try:
        return _scores(
            task["group"],
            task["action_set"],
            row["actions"],
            evaluation["spacing"],
            evaluation["n_traces"],
            evaluation.get("seed", 0),
        )
    except DeltalensError:  # a group too large to enumerate, or traces with nothing to score
        return None


def beyond_window(runs: list[dict[str, Any]], multiple: float) -> bool | str | None:
    """The verdict of the module docstring (None: a seed lacks a result or a baseline there;
    CANNOT_TELL: the window predictor is within MARGIN of perfect, so no model can beat it by MARGIN)."""
    margins = []
    for run in runs:
        accuracy, base = accuracy_at(run, multiple), cell_baselines(run, multiple)
        if accuracy is None or base is None:
            return None
        if base.window > 1 - MARGIN:
            return CANNOT_TELL
        margins.append(accuracy - base.window)
    mean_margin = sum(margins) / len(margins)
    return mean_margin >= MARGIN and sum(m >= MARGIN for m in margins) >= seeds_needed(len(margins))


def _matching(base: BaselineScores, accuracy: float) -> str:
    w = base.window_matching(accuracy)
    return "–" if w is None else str(w)


def baseline_lines(results: list[dict[str, Any]]) -> list[str]:
    """The report's table (no lines when no result says how it was evaluated)."""
    cells = [c for c in spread(results) if c["runs"] and c["runs"][0]["eval"].get("reveal", "one") == "one"]
    rows = []
    for cell in sorted(cells, key=lambda c: (c["group"], c["tokenizer"], c["arch"], c["spacing"])):
        for row in cell["eval"]["lengths"]:
            base = cell_baselines(cell["runs"][0], row["x_train"]) if "reveal_accuracy" in row else None
            if base is None:
                continue
            accuracy = f"{row['reveal_accuracy']:.3f}"
            if row["n"] > 1:
                accuracy += f" [{row['min']:.3f}–{row['max']:.3f}]"
            verdict = {True: "yes", False: "no", None: "–", CANNOT_TELL: CANNOT_TELL}[
                beyond_window(cell["runs"], row["x_train"])
            ]
            rows.append(
                f"| {cell['group']} | {cell['tokenizer']} | {ARCH_LABELS.get(cell['arch'], cell['arch'])} "
                f"| {cell['spacing']} | {row['actions']} ({row['x_train']:g}x) | {accuracy} | {base.chance:.3f} "
                f"| {base.last_reveal:.3f} | {base.window:.3f} ({base.window_size}) | {verdict} "
                f"| {_matching(base, row['reveal_accuracy'])} |"
            )
    if not rows:
        return []
    return [
        "## Baselines beside every cell",
        "",
        "Reveal accuracy (seed mean [min–max]) beside three predictors without memory, on the same held-out "
        "traces: chance (1/n), the last-reveal guess (the value the variable showed last, actions ignored) "
        f"and the window-W predictor (the best guess from the last W = max(k, {MIN_WINDOW}) actions and the "
        f"values printed since). **beyond window**: the mean and two thirds of the seeds are ≥ {MARGIN:g} "
        "above the window predictor (*cannot tell* where the window predictor itself is within that margin of "
        "1, as at k = 1). **window matching**: the shortest look-back W whose window predictor "
        "scores as well as the model (the trace's length: only memory of the whole trace does).",
        "",
        "| group | tokenizer | architecture | k | length | accuracy | chance | last reveal | window (W) "
        "| beyond window | window matching |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
