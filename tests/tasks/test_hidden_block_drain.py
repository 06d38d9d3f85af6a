"""The drain / no-drain pair of hidden-block adversaries and the probe-to-probe leaks of their family."""

import numpy as np
import pytest

from deltalens.core.errors import DeltalensError
from deltalens.tasks import make_tokenizer
from deltalens.tasks.hidden_block import hidden_block_adversary, linear_block_mass
from deltalens.tasks.pfsa import Observation, joint_filter
from deltalens.tasks.probabilistic import ProbTraceSpec, generate_prob_trace, parse_prob_trace
from deltalens.tasks.traces import replay_transcript

SPEC = ProbTraceSpec(group="S5", actions=(8, 32), mix=(0.75, 0.25, 0.0), swap_prob=0.3, hidden_block=3, probe_leak=0.5)


def _kind(line: str) -> str:
    """A line with its variable names blanked: what the two adversaries must share."""
    return "".join("x" if ch in "abcde" else ch for ch in line)


@pytest.mark.parametrize("horizon", [3, 12, 40])
def test_the_two_adversaries_differ_only_in_which_variables_leak(horizon):
    for seed in range(4):
        drain = hidden_block_adversary(SPEC, horizon, seed=seed)
        keep = hidden_block_adversary(SPEC, horizon, seed=seed, drain=False)
        assert [_kind(x) for x in drain.lines] == [_kind(x) for x in keep.lines]
        assert drain.lines[-2:] == keep.lines[-2:]  # the same query
        # "no leak" says nothing about the block: its exact marginals after every reveal are the same, and so
        # is the query's posterior (the probe reveals' own odds differ: the drain's partner is uncertain)
        assert np.allclose(drain.posteriors[-1][0].predictive, keep.posteriors[-1][0].predictive)
        seen = [k + 1 for k, event in enumerate(drain.events) if isinstance(event, Observation)]
        block = [joint_filter(t.pfsa(), t.events).marginals for t in (drain, keep)]
        assert all(np.allclose(block[0][k][:3], block[1][k][:3]) for k in seen)
        leaks = [line for line in keep.lines if "random.random()" in line][1:]  # after the opening block swap
        assert leaks and all(line.startswith(">>> d, e =") for line in leaks[1::2])


def test_only_the_drain_empties_the_linear_filters_block():
    drain = linear_block_mass(hidden_block_adversary(SPEC, 60, seed=1))
    keep = linear_block_mass(hidden_block_adversary(SPEC, 60, seed=1, drain=False))
    assert drain[-2] < 0.05 * drain[0]
    assert np.allclose(keep[:-1], 3.0)  # whole until the query (which itself picks one value)


def test_probe_leaks_appear_at_their_rate_and_the_traces_replay():
    tokenizer = make_tokenizer("statement-prob", SPEC)
    probe_pairs = block_pairs = 0
    for seed in range(30):
        trace = generate_prob_trace(SPEC, seed)
        assert replay_transcript(trace.text) == trace.text
        assert len(parse_prob_trace(trace.text).events) == len(trace.events)
        tokenizer.encode_trace(trace)  # every line is in the vocabulary
        leaks = [line for line, kind in zip(trace.lines[6:], trace.kinds) if kind == "swap"]
        probe = [line.startswith(">>> d, e =") for line in leaks]
        probe_pairs += sum(probe)
        block_pairs += sum((", d =" in line or ", e =" in line) and not p for line, p in zip(leaks, probe))
    assert 0.3 < probe_pairs / (probe_pairs + block_pairs) < 0.6


def test_probe_leaks_and_no_drain_need_two_probes():
    with pytest.raises(DeltalensError, match="two probe variables"):
        ProbTraceSpec(group="S4", mix=(0.75, 0.25, 0.0), swap_prob=0.3, hidden_block=3, probe_leak=0.5)
    one_probe = ProbTraceSpec(group="S4", mix=(0.75, 0.25, 0.0), swap_prob=0.3, hidden_block=3)
    with pytest.raises(DeltalensError, match="two probe variables"):
        hidden_block_adversary(one_probe, 5, seed=0, drain=False)
