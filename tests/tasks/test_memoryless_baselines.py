"""The predictors without memory (tasks/baselines.py) against cases whose answer is known exactly."""

import itertools
from collections import Counter

import pytest

from deltalens.core.errors import DeltalensError
from deltalens.tasks.baselines import baseline_scores, trace_baselines, window_curve
from deltalens.tasks.permutations import apply_permutation
from deltalens.tasks.traces import TraceSpec, generate_trace, parse_trace

S3_ONE = TraceSpec(group="S3", action_set="swaps", actions=24, spacing=2, reveal="one")


def test_a_window_that_reaches_the_init_lines_knows_the_state():
    for seed in range(20):
        trace = generate_trace(S3_ONE, seed)
        _, [window], scored = trace_baselines(trace, trace.num_actions)
        assert scored == len(trace.reveals) and window == scored


def test_an_empty_window_is_chance_on_single_reveals():
    scores = baseline_scores(S3_ONE, n_traces=32, window=0)
    assert scores.window == pytest.approx(1 / 3)
    assert scores.chance == pytest.approx(1 / 3)


def test_a_window_starting_at_a_full_print_knows_the_state():
    # reveal "all" every k actions: a window of k actions starts right after a print of every value
    spec = TraceSpec(group="S5", action_set="swaps", actions=20, spacing=4, reveal="all")
    assert baseline_scores(spec, n_traces=16).window == pytest.approx(1.0)
    # one action less and it does not (swaps move values within the window)
    assert baseline_scores(spec, n_traces=16, window=3).window < 0.99


def test_the_window_predictor_gains_from_a_longer_window():
    spec = TraceSpec(group="S3", action_set="swaps", actions=32, spacing=1, reveal="one")
    by_window = [baseline_scores(spec, n_traces=64, window=w).window for w in (1, 2, 4)]
    assert by_window[0] < by_window[1] < by_window[2] and by_window[2] > 0.95


def test_the_last_reveal_guess_ignores_actions():
    text = (
        ">>> a = 1\n>>> b = 2\n>>> c = 3\n"
        ">>> a, b = b, a\n>>> print('a', a)\na 2\n"  # a's last shown value was 1 (init): wrong
        ">>> b, c = c, b\n>>> print('a', a)\na 2\n"  # a showed 2 last: right
    )
    trace = parse_trace(text, group="S3", action_set="swaps")
    last, [window], scored = trace_baselines(trace, 1)
    assert (last, scored) == (1.0, 2)
    # window 1: the first reveal's window reaches the init lines (1.0); the second starts after the
    # first action with a = 2 printed there, and the swap of b and c leaves a alone (1.0)
    assert window == 2.0


def forward_window(trace, window: int) -> float:
    """The window predictor written the slow, obvious way: every arrangement at the window's start,
    filtered by the prints inside it, pushed forward through its actions."""
    credit = 0.0
    shown = {r.after_action: list(zip(r.variables, r.values)) for r in trace.reveals}
    for reveal in trace.reveals:
        t = reveal.after_action
        start = max(0, t - window)
        states = [trace.states[0]] if start == 0 else list(itertools.permutations(range(1, trace.n + 1)))
        for step in range(start, t):
            states = [s for s in states if all(s[v] == x for v, x in shown.get(step, ()))]
            states = [apply_permutation(s, trace.actions[step]) for s in states]
        for variable, value in zip(reveal.variables, reveal.values):
            counts = Counter(s[variable] for s in states)
            winners = [x for x, c in counts.items() if c == max(counts.values())]
            credit += 1 / len(winners) if value in winners else 0.0
            states = [s for s in states if s[variable] == value]
    return credit


@pytest.mark.parametrize("group,reveal", [("S3", "one"), ("S4", "one"), ("A4", "all"), ("S4", "all")])
def test_one_backward_pass_equals_the_forward_definition_for_every_window(group, reveal):
    action_set = "swaps" if group.startswith("S") else "cycles"
    spec = TraceSpec(group=group, action_set=action_set, actions=14, reveal_prob=0.4, spacing=None, reveal=reveal)
    windows = list(range(16))
    for seed in range(12):
        trace = generate_trace(spec, seed)
        _, credits, _ = trace_baselines(trace, windows)
        assert credits == pytest.approx([forward_window(trace, w) for w in windows])


def test_the_curve_rises_to_one_at_the_trace_length():
    spec = TraceSpec(group="S3", action_set="swaps", actions=16, spacing=4, reveal="one")
    curve = window_curve(spec, [0, 4, 8, 16], n_traces=32)
    assert curve[0] < curve[4] < curve[8] < curve[16] == pytest.approx(1.0)
    assert curve[4] == pytest.approx(baseline_scores(spec, n_traces=32).window)


def test_bad_windows_and_silent_traces_are_refused():
    with pytest.raises(DeltalensError, match="window"):
        baseline_scores(S3_ONE, n_traces=2, window=-1)
    with pytest.raises(DeltalensError, match="reveal nothing"):
        baseline_scores(TraceSpec(group="S3", actions=8, spacing=None), n_traces=2)
