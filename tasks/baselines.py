"""Predictors without memory of the whole trace: what a reveal accuracy must beat to show tracking.

* ``chance``: a uniform guess over the n values (1/n per revealed value).
* ``last_reveal``: the value this variable showed last (an init line or a print), actions ignored.
* ``window``: the best guess from the lines after action t - W alone (the last W actions and every
  value printed since; W = the reveal spacing by default). It starts from every arrangement of 1..n,
  keeps those that agree with what the window shows, applies the window's actions and answers with
  the most common value (ties shared); a window that reaches the init lines knows the state. A
  model that tracks the state beats it; one that reads a short window of recent lines does not.
  At k = 1 on S3 a window of 4 actions sees about three printed values, which pins the state down:
  it scores 0.99 with no long-range memory at all.

Scores are expected accuracies per revealed value (a tie among j values counts 1/j when the true
value is among them), over held-out traces drawn exactly as the model's evaluation draws them.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

from deltalens.core.errors import DeltalensError
from deltalens.tasks.dataset import trace_seed
from deltalens.tasks.groups import get_group
from deltalens.tasks.permutations import apply_permutation
from deltalens.tasks.traces import Trace, TraceSpec, generate_trace

BASELINES = ("chance", "last_reveal", "window")
MAX_N_FOR_WINDOW = 7  # the window predictor enumerates n! arrangements (5,040 at n = 7)


@dataclass(frozen=True)
class BaselineScores:
    chance: float
    last_reveal: float
    window: float
    window_size: int
    n_values: int  # revealed values scored

    def to_dict(self) -> dict:
        return {
            "chance": self.chance,
            "last_reveal": self.last_reveal,
            "window": self.window,
            "window_size": self.window_size,
            "n_values": self.n_values,
        }


def _shared_credit(counts: Counter, truth: int) -> float:
    best = max(counts.values())
    winners = [value for value, count in counts.items() if count == best]
    return 1.0 / len(winners) if truth in winners else 0.0


def trace_baselines(trace: Trace, window: int) -> tuple[float, float, int]:
    """(last-reveal credit, window credit, values scored), summed over the trace's revealed values."""
    n = trace.n
    arrangements = list(itertools.permutations(range(1, n + 1)))
    last_seen = list(trace.states[0])  # the init lines show every value
    # values shown after each action t (1-based): [(variable, value), ...] in print order
    shown_after: dict[int, list[tuple[int, int]]] = {}
    for reveal in trace.reveals:
        shown_after.setdefault(reveal.after_action, []).extend(zip(reveal.variables, reveal.values))
    last_credit = window_credit = 0.0
    scored = 0
    for reveal in trace.reveals:
        t = reveal.after_action
        start = max(0, t - window)
        # candidates for the state after action `start`: every arrangement, or the known start state
        candidates = [trace.states[0]] if start == 0 else arrangements
        for step in range(start, t):
            if step > start or start > 0:  # the prints after action `start` and inside the window
                for variable, value in shown_after.get(step, ()):
                    candidates = [s for s in candidates if s[variable] == value]
            candidates = [apply_permutation(s, trace.actions[step]) for s in candidates]
        for variable, value in zip(reveal.variables, reveal.values):
            last_credit += 1.0 if last_seen[variable] == value else 0.0
            window_credit += _shared_credit(Counter(s[variable] for s in candidates), value)
            scored += 1
            # a print of several values shows the earlier ones before the later ones are predicted
            candidates = [s for s in candidates if s[variable] == value]
            last_seen[variable] = value
    return last_credit, window_credit, scored


def baseline_scores(spec: TraceSpec, n_traces: int = 512, seed: int = 0, window: int | None = None) -> BaselineScores:
    """The three baselines on the held-out traces `evaluate(..., seed=seed)` scores a model on."""
    if spec.schedule == "never":
        raise DeltalensError("these traces reveal nothing after the init lines; there is nothing to score.")
    n = get_group(spec.group).n
    if n > MAX_N_FOR_WINDOW:
        raise DeltalensError(f"the window baseline enumerates n! arrangements; n = {n} is above {MAX_N_FOR_WINDOW}.")
    window = window if window is not None else (spec.spacing or 1)
    if window < 0:
        raise DeltalensError(f"the window must be a number of actions >= 0, got {window}.")
    last = win = 0.0
    total = 0
    for i in range(n_traces):
        # the evaluation's seeds: batch b of 64 draws traces with seed*1_000_003 + 64*b as its dataset seed
        start = i - i % 64
        trace = generate_trace(spec, trace_seed(seed * 1_000_003 + start, "eval", i - start))
        a, b, c = trace_baselines(trace, window)
        last, win, total = last + a, win + b, total + c
    if total == 0:
        raise DeltalensError("the traces drawn reveal no values; use longer traces or a smaller spacing.")
    return BaselineScores(1.0 / n, last / total, win / total, window, total)
