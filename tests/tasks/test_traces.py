"""tasks.traces: traces are real Python, carry correct ground truth, and the knobs do what they say."""

import json
import math
import random
from collections import Counter

import pytest

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import MAX_N, VARIABLE_NAMES, apply_permutation, get_action_set, valid_action_sets
from deltalens.tasks.traces import (
    LINE_ACTION,
    LINE_INIT,
    LINE_OUTPUT,
    LINE_PRINT,
    TraceSpec,
    generate_trace,
    parse_action_count,
    replay_transcript,
)

GROUP_NAMES = [f"{f}{n}" for f in "SAZD" for n in range(2, MAX_N + 1) if not (f in "AD" and n == 2)]


def random_spec(rng: random.Random) -> TraceSpec:
    """A spec drawn across every group, action set and knob."""
    group = rng.choice(GROUP_NAMES)
    actions = rng.randint(1, 30) if rng.random() < 0.5 else tuple(sorted((rng.randint(1, 30), rng.randint(1, 30))))
    schedule = rng.choice(["every", "prob", "never"])
    return TraceSpec(
        group=group,
        action_set=rng.choice(valid_action_sets(group)),
        actions=actions,
        spacing=rng.randint(1, 8) if schedule == "every" else None,
        reveal_prob=rng.choice([0.05, 0.3, 0.5, 1.0]) if schedule == "prob" else None,
        reveal=rng.choice(["one", "all"]),
        identity_init=rng.random() < 0.3,
    )


def check_ground_truth(trace):
    """Execute the statements ourselves and compare every state and reveal with the trace's labels."""
    spec, n = trace.spec, trace.n
    names = VARIABLE_NAMES[:n]
    assert all(line.endswith("\n") and line.count("\n") == 1 for line in trace.lines)
    assert len(trace.lines) == len(trace.line_info)
    assert len(trace.states) == trace.num_actions + 1
    actions = get_action_set(spec.group, spec.action_set)
    env: dict = {}
    t = 0
    reveal_lines = {r.line: r for r in trace.reveals}
    for index, (line, info) in enumerate(zip(trace.lines, trace.line_info)):
        if info.kind == LINE_OUTPUT:
            reveal = reveal_lines[index]
            shown = tuple(env[names[v]] for v in reveal.variables)
            assert reveal.values == shown == tuple(trace.states[t][v] for v in reveal.variables)
            continue
        assert line.startswith(">>> ")
        exec(line[4:], {}, env)
        if info.kind == LINE_ACTION:
            t += 1
            p = trace.actions[info.action]
            assert info.action == t - 1 and actions.contains(p)
            assert trace.states[t] == apply_permutation(trace.states[t - 1], p)
            assert tuple(env[x] for x in names) == trace.states[t]
        assert info.actions_done == t
    assert t == trace.num_actions
    assert sorted(trace.states[0]) == list(range(1, n + 1))
    assert len(reveal_lines) == sum(info.kind == LINE_OUTPUT for info in trace.line_info)


def test_traces_replay_exactly_in_a_real_repl():
    rng = random.Random(2024)
    seen_groups, seen_sets = set(), set()
    for i in range(1200):
        spec = random_spec(rng)
        trace = generate_trace(spec, seed=i)
        assert replay_transcript(trace.text) == trace.text, (spec, i)
        check_ground_truth(trace)
        lo, hi = (spec.actions, spec.actions) if isinstance(spec.actions, int) else spec.actions
        assert lo <= trace.num_actions <= hi
        seen_groups.add(spec.group)
        seen_sets.add(spec.action_set)
    assert len(seen_groups) == len(GROUP_NAMES)
    assert seen_sets == {"swaps", "cycles", "full", "generators"}


def test_replay_catches_a_wrong_output_line():
    trace = generate_trace(TraceSpec(actions=8, spacing=2), 0)
    lines = list(trace.lines)
    line = trace.reveals[0].line
    name, value = lines[line].split()
    lines[line] = f"{name} {int(value) % 5 + 1}\n"
    assert replay_transcript("".join(lines)) != "".join(lines)
    assert "NameError" in replay_transcript(">>> print(zz)\n")


def test_the_paper_figure_shape():
    trace = generate_trace(TraceSpec(group="S3", actions=3, spacing=1, identity_init=True), 5)
    assert trace.lines[:3] == [">>> a = 1\n", ">>> b = 2\n", ">>> c = 3\n"]
    assert [info.kind for info in trace.line_info[3:]] == [LINE_ACTION, LINE_PRINT, LINE_OUTPUT] * 3
    print_line, output_line = trace.lines[4], trace.lines[5]
    name = print_line[len(">>> print('")]
    assert print_line == f">>> print('{name}', {name})\n"
    assert output_line == f"{name} {trace.states[1]['abc'.index(name)]}\n"


def test_reveal_all_prints_every_value_in_order():
    trace = generate_trace(TraceSpec(group="S4", actions=6, spacing=3, reveal="all"), 3)
    assert len(trace.reveals) == 2
    for reveal in trace.reveals:
        assert trace.lines[reveal.line - 1] == ">>> print(a, b, c, d)\n"
        state = trace.states[reveal.after_action]
        assert trace.lines[reveal.line] == " ".join(map(str, state)) + "\n"
        assert reveal.variables == (0, 1, 2, 3) and reveal.values == state


def test_same_seed_same_trace_and_streams_are_independent():
    spec = TraceSpec(group="S6", action_set="full", actions=(5, 40), spacing=3)
    assert generate_trace(spec, 7).text == generate_trace(spec, 7).text
    assert len({generate_trace(spec, s).text for s in range(20)}) == 20
    # the reveal schedule, target and start do not change the actions (nor the length)
    base = generate_trace(spec, 11)
    for other in (
        TraceSpec(group="S6", action_set="full", actions=(5, 40), spacing=None, reveal_prob=0.5),
        TraceSpec(group="S6", action_set="full", actions=(5, 40), spacing=None, reveal="all"),
        TraceSpec(group="S6", action_set="full", actions=(5, 40), spacing=2, identity_init=True),
    ):
        trace = generate_trace(other, 11)
        assert trace.actions == base.actions
        if not other.identity_init:
            assert trace.states == base.states


@pytest.mark.parametrize("k", [1, 2, 3, 4, 7])
def test_spacing_reveals_exactly_every_k_actions(k):
    for seed in range(40):
        m = 1 + (seed * 7) % 37
        trace = generate_trace(TraceSpec(group="S5", actions=m, spacing=k), seed)
        assert len(trace.reveals) == m // k
        assert [r.after_action for r in trace.reveals] == list(range(k, m + 1, k))
        for r in trace.reveals:
            # print line right after the line of action t, output line right after the print
            action_line = trace.line_info[r.line - 2]
            assert action_line.kind == LINE_ACTION and action_line.actions_done == r.after_action
            assert trace.line_info[r.line - 1].kind == LINE_PRINT
        assert sum(line.startswith(">>> print(") for line in trace.lines) == m // k


@pytest.mark.parametrize("p", [0.1, 0.25, 0.5, 0.9])
def test_reveal_probability_matches_empirical_rate(p):
    spec = TraceSpec(group="S5", actions=50, spacing=None, reveal_prob=p)
    reveals = sum(len(generate_trace(spec, seed).reveals) for seed in range(300))
    trials = 300 * 50
    rate = reveals / trials
    assert abs(rate - p) < 4 * math.sqrt(p * (1 - p) / trials)  # 4 standard errors


def test_reveal_probability_one_reveals_after_every_action():
    trace = generate_trace(TraceSpec(actions=20, spacing=None, reveal_prob=1.0), 0)
    assert [r.after_action for r in trace.reveals] == list(range(1, 21))


def test_no_reveals_means_no_prints():
    for seed in range(50):
        trace = generate_trace(TraceSpec(group="A6", action_set="cycles", actions=30, spacing=None), seed)
        assert trace.reveals == []
        assert not any("print" in line for line in trace.lines)
        assert all(line.startswith(">>> ") for line in trace.lines)


def test_revealed_variable_is_uniform():
    counts = Counter()
    for seed in range(400):
        trace = generate_trace(TraceSpec(group="S4", actions=12, spacing=2), seed)
        counts.update(r.variables[0] for r in trace.reveals)
    assert set(counts) == {0, 1, 2, 3}
    assert max(counts.values()) / min(counts.values()) < 1.25  # 2400 draws, 600 expected each


def test_identity_and_random_init():
    trace = generate_trace(TraceSpec(group="S7", identity_init=True), 0)
    assert trace.states[0] == tuple(range(1, 8))
    starts = Counter(generate_trace(TraceSpec(group="S3", actions=1), s).states[0] for s in range(1200))
    assert len(starts) == 6 and min(starts.values()) > 140  # 200 expected per start


def test_actions_are_uniform_over_the_action_set():
    counts = Counter()
    for seed in range(100):
        counts.update(generate_trace(TraceSpec(group="S3", actions=30, spacing=None), seed).actions)
    assert len(counts) == 3 and min(counts.values()) > 900  # 1000 expected each


def test_action_ranges_cover_both_ends():
    lengths = Counter(generate_trace(TraceSpec(actions=(3, 6)), s).num_actions for s in range(200))
    assert set(lengths) == {3, 4, 5, 6}


def test_full_writes_all_variables():
    trace = generate_trace(TraceSpec(group="D5", action_set="full", actions=10, spacing=None), 1)
    for line, info in zip(trace.lines, trace.line_info):
        if info.kind == LINE_ACTION:
            assert line.startswith(">>> a, b, c, d, e = ")


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(spacing=0), "spacing must be"),
        (dict(spacing=-2), "spacing must be"),
        (dict(spacing=1.5), "spacing must be"),
        (dict(spacing=True), "spacing must be"),
        (dict(spacing=None, reveal_prob=0.0), "probability must be in (0, 1]"),
        (dict(spacing=None, reveal_prob=-0.1), "probability must be in (0, 1]"),
        (dict(spacing=None, reveal_prob=1.5), "probability must be in (0, 1]"),
        (dict(spacing=None, reveal_prob="0.5"), "probability must be in (0, 1]"),
        (dict(spacing=4, reveal_prob=0.5), "sets both spacing=4 and reveal_prob=0.5"),
        (dict(reveal="some"), "reveal target must be"),
        (dict(actions=0), "number of actions"),
        (dict(actions=(5, 3)), "action range 5-3"),
        (dict(actions=(0, 3)), "action range 0-3"),
        (dict(actions=(1, 2, 3)), "number of actions"),
        (dict(actions="12"), "number of actions"),
        (dict(group="Q5"), "unknown group 'Q5'"),
        (dict(group="S12"), "out of range"),
        (dict(group="A5", action_set="swaps"), "A5 has no transpositions"),
        (dict(action_set="shuffle"), "unknown action set"),
        (dict(identity_init="yes"), "identity_init"),
    ],
)
def test_bad_specs_are_refused(kwargs, words):
    with pytest.raises(DeltalensError) as err:
        TraceSpec(**kwargs)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_bad_seed_is_refused():
    with pytest.raises(DeltalensError):
        generate_trace(TraceSpec(), "0")


def test_spec_round_trips_through_json():
    spec = TraceSpec(
        group="d7",
        action_set="generators",
        actions=[4, 9],
        spacing=None,
        reveal_prob=0.2,
        reveal="all",
        identity_init=True,
    )
    assert spec.group == "D7" and spec.actions == (4, 9)
    data = json.loads(json.dumps(spec.to_dict()))
    assert TraceSpec.from_dict(data) == spec
    assert spec.schedule == "prob" and TraceSpec().schedule == "every" and TraceSpec(spacing=None).schedule == "never"
    with pytest.raises(DeltalensError):
        TraceSpec.from_dict({"group": "S5", "colour": "red"})


@pytest.mark.parametrize("text, expected", [("24", 24), ("16-32", (16, 32)), (" 7 ", 7), ("5-5", (5, 5))])
def test_parse_action_count(text, expected):
    assert parse_action_count(text) == expected


@pytest.mark.parametrize("text", ["", "x", "1-2-3", "0", "9-3", "-4"])
def test_parse_action_count_rejects(text):
    with pytest.raises(DeltalensError):
        parse_action_count(text)


def test_init_lines_name_each_variable_once():
    trace = generate_trace(TraceSpec(group="Z10", action_set="full"), 4)
    inits = [line for line, info in zip(trace.lines, trace.line_info) if info.kind == LINE_INIT]
    assert [line.split()[1] for line in inits] == list("abcdefghij")
    assert sorted(int(line.split()[3]) for line in inits) == list(range(1, 11))
