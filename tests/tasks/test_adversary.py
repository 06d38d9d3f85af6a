"""tasks.adversary: the stated decay rate 1 - p/h is what the linear marginal filter shows, the exact
posterior does not move, and the underflow cycle per dtype is where the law puts it (probes.belief_decay)."""

import math

import numpy as np
import pytest
import torch

from deltalens.core.errors import DeltalensError
from deltalens.tasks.adversary import AdversarySpec, adversarial_sequence, predicted_underflow_cycle
from deltalens.tasks.belief_decay import marginal_decay, marginal_decay_figure, smallest_subnormal
from deltalens.tasks.pfsa import (
    PFSA,
    Observation,
    joint_filter,
    marginal_filter,
    point_marginals,
    run_linear_joint,
    run_linear_marginal,
)
from deltalens.tasks.probabilistic import parse_prob_trace


def chosen_masses(seq, dtype=None):
    m0 = None if dtype is None else torch.from_numpy(point_marginals(seq.q0)).to(dtype)
    run = run_linear_marginal(seq.spec.n, seq.q0, seq.events, m0=m0)
    return np.array(
        [seq.chosen_mass(run.marginals[0])] + [seq.chosen_mass(run.marginals[e + 1]) for e in seq.reveal_events]
    )


@pytest.mark.parametrize("n, block, p", [(3, 2, 0.5), (3, 2, 0.9), (4, 3, 0.3), (5, 3, 0.75), (6, 4, 0.5)])
def test_measured_decay_is_the_stated_rate(n, block, p):
    seq = adversarial_sequence(n=n, block=block, p=p, cycles=30)
    assert math.isclose(seq.rate, 1 - p / block)
    masses = chosen_masses(seq)
    assert np.allclose(masses[1:] / masses[:-1], seq.rate, rtol=1e-12, atol=0)  # every cycle, from the first
    assert np.allclose(masses, seq.predicted_mass(np.arange(31)), rtol=1e-12)
    # only reveals remove mass: the mix and the leak move it
    run = run_linear_marginal(n, seq.q0, seq.events)
    for e, event in enumerate(seq.events):
        if not isinstance(event, Observation):
            assert math.isclose(run.mass[e + 1], run.mass[e], rel_tol=1e-12)


def test_only_partial_reveals_of_the_probe_no_full_reset():
    seq = adversarial_sequence(n=4, block=2, p=0.5, cycles=10)
    reveals = [e for e in seq.events if isinstance(e, Observation)]
    assert len(reveals) == 10 and all(r.variables == (seq.probe,) and not r.is_full(4) for r in reveals)
    assert all(v != seq.probe for v, _ in seq.chosen)


def test_exact_posterior_does_not_move_while_the_linear_one_drains():
    seq = adversarial_sequence(n=4, block=3, p=0.6, cycles=25)
    exact = joint_filter(PFSA(4, seq.q0), seq.events)
    for e in seq.reveal_events:
        block = exact.marginals[e + 1][:3, :3]
        assert np.allclose(block, 1 / 3, atol=1e-12)  # every chosen entry stays 1/h
    assert all(math.isclose(p.probability, 1 - 0.6) for p in exact.reveals)
    # the Sinkhorn marginal filter is exact on this sequence
    assert np.allclose(marginal_filter(4, seq.q0, seq.events).marginals, exact.marginals, atol=1e-10)
    # the unnormalised joint drains at 1 - p per cycle, faster than the marginal's 1 - p/h
    run = run_linear_joint(PFSA(4, seq.q0), seq.events, full_reset=False)
    joint = run.mass[[0] + [e + 1 for e in seq.reveal_events]]
    assert np.allclose(joint[1:] / joint[:-1], seq.spec.joint_rate, rtol=1e-12)


@pytest.mark.parametrize("p", [0.75, 0.9])
def test_underflow_cycle_per_dtype_is_near_the_law(p):
    result = marginal_decay(cycles=260, p=p, random_reveals=60, dtypes=("float32", "bfloat16", "float16"))
    assert math.isclose(result.measured_rate, 1 - p / 2, rel_tol=1e-12)
    for name in ("float32", "bfloat16", "float16"):
        measured, predicted = result.underflow[("adversarial", name)], result.predicted[("adversarial", name)]
        assert predicted is not None and measured is not None
        assert predicted - 3 <= measured <= predicted, (name, measured, predicted)
        assert result.underflow[("random", name)] is None  # random reveals keep re-pinning rows
    spec = AdversarySpec(3, 2, p, 10)
    # fp16's 2^-24 floor is reached long before fp32's 2^-149
    assert (
        predicted_underflow_cycle(spec, smallest_subnormal("float16"))
        < predicted_underflow_cycle(spec, smallest_subnormal("bfloat16"))
        < predicted_underflow_cycle(spec, smallest_subnormal("float32"))
    )


def test_half_leak_stalls_at_a_rounding_fixed_point_instead_of_zero():
    seq = adversarial_sequence(n=3, block=2, p=0.5, cycles=150)
    masses = chosen_masses(seq, torch.float16)
    assert masses[-1] > 0 and np.all(masses[-50:] == masses[-1])  # stuck ...
    assert masses[-1] < 16 * 2.0**-24  # ... a few units of the subnormal
    assert seq.predicted_mass(150) < 2.0**-60  # where the law has long gone


def test_random_sequences_keep_their_marginal_mass():
    result = marginal_decay(cycles=20, p=0.75, random_reveals=300, dtypes=("float16",))
    rows = result.frame[result.frame.sequence == "random"]
    assert len(rows) == 300 and rows.min_row_mass.min() > 1e-3  # bounded away from 0, no exponential trend
    late, early = rows.min_row_mass.iloc[150:].mean(), rows.min_row_mass.iloc[:150].mean()
    assert late > 0.5 * early


def test_text_parses_back_and_has_no_seed():
    seq = adversarial_sequence(n=4, block=3, p=0.25, cycles=5)
    text = seq.text()
    assert text.startswith(">>> import random\n>>> a = 1\n") and "seed" not in text
    assert "random.choice([(a, b, c), (b, c, a), (c, a, b)])" in text
    assert ">>> c, d = (d, c) if random.random() < 0.25 else (c, d)\n>>> print('d', d)\nd 4\n" in text
    program = parse_prob_trace(text)
    assert program.events == seq.events and program.python_seed is None


def test_bad_adversaries_are_refused():
    for kwargs in (dict(n=2, block=2), dict(block=1), dict(p=1.0), dict(p=0.0), dict(cycles=0)):
        with pytest.raises(DeltalensError):
            AdversarySpec(**kwargs)


def test_marginal_decay_figure():
    result = marginal_decay(cycles=60, p=0.9, random_reveals=30, dtypes=("float16", "float32"))
    fig = marginal_decay_figure(result)
    names = [t.name for t in fig.data]
    assert names[-1].startswith("law") and {"adversarial float16", "random float32"} <= set(names)
    assert fig.data[-1].legendrank < min(t.legendrank or 1000 for t in fig.data[:-1])  # on top, listed first
    assert len(fig.layout.shapes) == 1  # fp16 hits 0 within 60 cycles, fp32 does not
    assert result.summary().loc[("adversarial", "float16"), "underflow"] == result.underflow[("adversarial", "float16")]
