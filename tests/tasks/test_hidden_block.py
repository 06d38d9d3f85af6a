"""The hidden-block family and its adversary (tasks/hidden_block.py)."""

import math

import numpy as np
import pytest

from deltalens.core.errors import DeltalensError
from deltalens.tasks import make_tokenizer
from deltalens.tasks.hidden_block import hidden_block_adversary, linear_block_mass
from deltalens.tasks.pfsa import Observation
from deltalens.tasks.probabilistic import ProbTraceSpec, generate_prob_trace, parse_prob_trace
from deltalens.tasks.traces import replay_transcript
from deltalens.training.config import TaskConfig
from deltalens.training.data import TrainingData
from deltalens.training.hidden_block_eval import guess_kl

SPEC = ProbTraceSpec(group="S4", actions=(8, 32), mix=(0.75, 0.25, 0.0), swap_prob=0.3, hidden_block=3)


def test_training_traces_replay_in_python_and_encode():
    tokenizer = make_tokenizer("statement-prob", SPEC)
    queries = 0
    for seed in range(40):
        trace = generate_prob_trace(SPEC, seed)
        assert replay_transcript(trace.text) == trace.text  # the hidden outcomes are the REPL's own
        assert len(tokenizer.encode_trace(trace).ids) > len(trace.lines)  # every line has a token
        shown = [r.variables[0] for r in trace.reveals]
        assert all(len(r.variables) == 1 for r in trace.reveals)
        queries += sum(v < 3 for v in shown)
        # the parser (what an observer reads) finds the same statements and reveals
        assert len(parse_prob_trace(trace.text).events) == len(trace.events)
    assert 0 < queries < 40 * 16 * 0.5  # block queries happen, but most reveals print the probe d


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hidden_block": 4}, "2 <= h < n"),
        ({"mix": (0.5, 0.3, 0.2)}, "none on random choices"),
        ({"mix": (1.0, 0.0, 0.0)}, "weight on random swaps"),
        ({"action_set": "cycles"}, "no deterministic swap"),
        ({"query_prob": 1.5}, "query_prob"),
    ],
)
def test_bad_specs_are_refused_in_one_sentence(change, message):
    fields = {**SPEC.to_dict(), **change}
    with pytest.raises(DeltalensError, match=message):
        ProbTraceSpec.from_dict(fields)


@pytest.mark.parametrize("horizon", [5, 60])
def test_adversary_keeps_the_exact_belief_and_drains_the_linear_filter(horizon):
    for seed in range(6):
        trace = hidden_block_adversary(SPEC, horizon, seed)
        probes = trace.reveals[:-1]
        assert len(probes) == horizon and all(r.variables == (3,) and r.values == (4,) for r in probes)
        query = trace.reveals[-1]
        assert query.variables[0] < 3
        # one random swap in the opening: the exact answer is a (0.7, 0.3) pair of block values at any horizon
        p = np.sort(trace.posteriors[-1][0].predictive)
        assert np.allclose(p, [0, 0, 0.3, 0.7])
        # the greedy leaks drain at least a factor 1 - p/h per partial reveal
        mass = linear_block_mass(trace)[:horizon]
        cycles = np.arange(1, horizon + 1)
        assert np.all(mass <= 3 * (1 - 0.3 / 3) ** cycles + 1e-12)
        assert np.all(np.diff(mass) < 0)


def test_adversary_answer_depends_on_the_whole_history():
    """Which two values the query splits between is set by the deterministic swaps long after the
    opening: over seeds at one horizon, the pairs differ."""
    pairs = set()
    for seed in range(12):
        trace = hidden_block_adversary(SPEC, 80, seed)
        support = np.flatnonzero(trace.posteriors[-1][0].predictive) + 1
        pairs.add((trace.reveals[-1].variables[0], tuple(support)))
    assert len(pairs) >= 3


def test_guesses_on_the_adversary():
    guesses = guess_kl(SPEC, horizons=(10, 40), n_traces=8)
    uniform = math.log(4) + 0.7 * math.log(0.7) + 0.3 * math.log(0.3)  # KL((0.7, 0.3, 0, 0) || 1/4)
    block = 0.7 * math.log(0.7 * 3) + 0.3 * math.log(0.3 * 3)  # 1/3 on each value the probe does not hold
    for h in (10, 40):
        assert guesses["by_horizon"][h]["uniform"] == pytest.approx(uniform)
        assert guesses["by_horizon"][h]["block_uniform"] == pytest.approx(block)
        assert guesses["by_horizon"][h]["last_reveal"] <= uniform + 1e-9  # eps = 0.99 is nearly uniform
    assert guesses["by_horizon"][40]["block_mass"] < guesses["by_horizon"][10]["block_mass"]


def test_the_task_config_trains_on_the_hidden_block():
    task = TaskConfig(
        group="S4",
        tokenizer="statement-prob",
        actions=[8, 16],
        mix=[0.75, 0.25, 0.0],
        swap_prob=0.3,
        hidden_block=3,
        query_prob=0.5,
        spacing=[1, 1],
    )
    data = TrainingData(task, seed=0)
    spec = data.eval_spec()
    assert spec.hidden_block == 3 and spec.query_prob == 0.5
    assert ProbTraceSpec.from_dict(spec.to_dict()) == spec  # what a checkpoint records reads back
    batch = data.train_batch(step=0, batch_size=4, total_steps=10)
    assert batch["tokens"].shape[0] == 4
    events = generate_prob_trace(spec, 3).events
    assert sum(isinstance(e, Observation) for e in events) in range(4, 9)  # 8 to 16 actions: 4 to 8 cycles
