"""Belief probes and state norms (probes/belief_probes.py) on small random models."""

import numpy as np
import pytest

from deltalens import models
from deltalens.probes.belief_probes import exact_beliefs, fit_belief_probes, state_names, state_norms
from deltalens.tasks import make_tokenizer
from deltalens.tasks.hidden_block import hidden_block_adversary
from deltalens.tasks.probabilistic import ProbTraceSpec, generate_prob_trace
from tests.conftest import build_tiny

SPEC = ProbTraceSpec(group="S4", actions=(8, 16), mix=(0.75, 0.25, 0.0), swap_prob=0.3, hidden_block=3)
RANDOM = ProbTraceSpec(group="S3", actions=12, swap_prob=0.3)


@pytest.mark.parametrize("spec", [SPEC, RANDOM])
def test_exact_beliefs_match_the_posteriors_of_every_reveal(spec):
    for seed in range(10):
        trace = generate_prob_trace(spec, seed)
        joint, marginal = exact_beliefs(trace)
        assert np.allclose(joint.sum(1), 1) and np.allclose(marginal.sum(2), 1)
        firsts = [line[0] for line in trace.posteriors]  # the first printed value's predictive of each reveal
        for m, post in zip(marginal, firsts):
            assert np.allclose(m[post.variable], post.predictive)


def test_probes_and_norms_on_a_small_deltanet():
    tokenizer = make_tokenizer("statement-prob", SPEC)
    model = build_tiny("deltanet", vocab_size=tokenizer.vocab_size)
    traces = [generate_prob_trace(SPEC, seed) for seed in range(30)]
    result = fit_belief_probes(model, tokenizer, traces)
    assert result["features"] == 2 * 2 * 16 * 16  # every layer's and head's d_k x d_v state
    assert result["r2_joint"] <= 1 and result["r2_marginal"] <= 1
    norms = state_norms(model, tokenizer, [hidden_block_adversary(SPEC, 12, s) for s in range(3)], [1, 6, 12])
    assert sorted(norms) == ["L0H0", "L0H1", "L1H0", "L1H1"]
    assert all(len(v) == 3 and all(x > 0 for x in v) for v in norms.values())


def test_the_lstm_state_is_its_hidden_and_cell():
    tokenizer = make_tokenizer("statement-prob", SPEC)
    lstm = models.build("lstm", vocab_size=tokenizer.vocab_size, d_model=16, n_layers=2).eval()
    assert sorted(state_names(lstm)) == sorted(
        f"blocks.{l}.{h}" for l in range(2) for h in ("hook_hidden", "hook_cell")
    )
    norms = state_norms(lstm, tokenizer, [hidden_block_adversary(SPEC, 8, 0)], [1, 8])
    assert sorted(norms) == ["L0", "L1"]
