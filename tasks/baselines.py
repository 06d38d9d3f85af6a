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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from deltalens.core.errors import DeltalensError
from deltalens.tasks.dataset import trace_seed
from deltalens.tasks.groups import get_group
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
    curve: dict[int, float] = field(default_factory=dict)  # window size -> accuracy, when asked for

    def window_matching(self, accuracy: float) -> int | None:
        """The smallest window on the curve that scores at least `accuracy` (None: none does)."""
        return next((w for w in sorted(self.curve) if self.curve[w] >= accuracy - 1e-12), None)

    def to_dict(self) -> dict:
        return asdict(self)


def _shared_credit(counts: Counter, truth: int) -> float:
    best = max(counts.values())
    winners = [value for value, count in counts.items() if count == best]
    return 1.0 / len(winners) if truth in winners else 0.0


def trace_baselines(trace: Trace, windows: int | list[int]) -> tuple[float, list[float], int]:
    """(last-reveal credit, window credit per window asked, values scored), summed over the trace's
    revealed values. One backward pass per reveal serves every window: going back one action at a
    time, the prints after that action become constraints on the state at the reveal."""
    windows = [windows] if isinstance(windows, int) else list(windows)
    longest = max(windows)
    arrangements = list(itertools.permutations(range(1, trace.n + 1)))
    last_seen = list(trace.states[0])  # the init lines show every value
    shown_after: dict[int, list[tuple[int, int]]] = {}  # action t -> [(variable, value)] printed after it
    for reveal in trace.reveals:
        shown_after.setdefault(reveal.after_action, []).extend(zip(reveal.variables, reveal.values))
    last_credit, credit, scored = 0.0, [0.0] * (longest + 1), 0
    for reveal in trace.reveals:
        t = reveal.after_action
        same_line: list[tuple[int, int]] = []  # values this print showed before the one predicted
        for variable, value in zip(reveal.variables, reveal.values):
            last_credit += 1.0 if last_seen[variable] == value else 0.0
            last_seen[variable] = value
            scored += 1
            candidates = [s for s in arrangements if all(s[v] == x for v, x in same_line)]
            # back[i]: which variable of the state W actions earlier variable i's value came from
            back = list(range(trace.n))
            for w in range(longest + 1):
                if w >= t:  # the window reaches the init lines: the state is known
                    for rest in range(w, longest + 1):
                        credit[rest] += 1.0
                    break
                if w > 0:
                    action = trace.actions[t - w]  # the action just inside the window's start
                    back = [action[b] for b in back]
                    where = {source: i for i, source in enumerate(back)}
                    for v, x in shown_after.get(t - w, ()):
                        candidates = [s for s in candidates if s[where[v]] == x]
                credit[w] += _shared_credit(Counter(s[variable] for s in candidates), value)
            same_line.append((variable, value))
    return last_credit, [credit[w] for w in windows], scored


def window_curve(spec: TraceSpec, windows: list[int], n_traces: int = 512, seed: int = 0) -> dict[int, float]:
    """The window predictor's accuracy for each window size, on the evaluation's held-out traces."""
    return baseline_scores(spec, n_traces, seed, window=0, curve=list(windows)).curve


def _check(spec: TraceSpec, windows: list[int]) -> None:
    if spec.schedule == "never":
        raise DeltalensError("these traces reveal nothing after the init lines; there is nothing to score.")
    n = get_group(spec.group).n
    if n > MAX_N_FOR_WINDOW:
        raise DeltalensError(f"the window baseline enumerates n! arrangements; n = {n} is above {MAX_N_FOR_WINDOW}.")
    bad = [w for w in windows if isinstance(w, bool) or not isinstance(w, int) or w < 0]
    if bad or not windows:
        raise DeltalensError(f"a window must be a number of actions >= 0, got {bad or windows}.")


def _eval_traces(spec: TraceSpec, n_traces: int, seed: int):
    for i in range(n_traces):
        # the evaluation's seeds: batch b of 64 draws traces with seed*1_000_003 + 64*b as its dataset seed
        start = i - i % 64
        yield generate_trace(spec, trace_seed(seed * 1_000_003 + start, "eval", i - start))


def baseline_scores(
    spec: TraceSpec, n_traces: int = 512, seed: int = 0, window: int | None = None, curve: Sequence[int] = ()
) -> BaselineScores:
    """The three baselines on the held-out traces `evaluate(..., seed=seed)` scores a model on; with
    `curve`, the window predictor's accuracy at each of those window sizes as well (same pass)."""
    window = window if window is not None else (spec.spacing or 1)
    windows = [window, *curve]
    _check(spec, windows)
    last, totals, scored = 0.0, [0.0] * len(windows), 0
    for trace in _eval_traces(spec, n_traces, seed):
        a, credits, count = trace_baselines(trace, windows)
        last, scored = last + a, scored + count
        totals = [x + y for x, y in zip(totals, credits)]
    if scored == 0:
        raise DeltalensError("the traces drawn reveal no values; use longer traces or a smaller spacing.")
    n = get_group(spec.group).n
    by_window = {w: total / scored for w, total in zip(windows[1:], totals[1:])}
    return BaselineScores(1.0 / n, last / scored, totals[0] / scored, window, scored, by_window)
