"""tasks.pfsa: exact filtering against brute force, the linear (unnormalised) filters, marginal exactness,
and the 1/2-per-reveal law with its underflow step per dtype (probes.belief_decay)."""

import math
import random

import numpy as np
import pytest
import torch

from deltalens.core.errors import DeltalensError
from deltalens.tasks.belief_decay import (
    halving_decay,
    halving_sequence,
    joint_decay_figure,
    predicted_halving_underflow,
    smallest_subnormal,
)
from deltalens.tasks.groups import apply_permutation, lex_rank
from deltalens.tasks.pfsa import (
    PFSA,
    Action,
    Observation,
    enumerate_posteriors,
    joint_filter,
    marginal_filter,
    marginal_mask,
    marginal_transition,
    point_marginals,
    run_linear_joint,
    run_linear_marginal,
    sinkhorn,
)
from deltalens.tasks.probabilistic import ProbTraceSpec, generate_prob_trace


def random_perm(rng, n):
    p = list(range(n))
    rng.shuffle(p)
    return tuple(p)


def random_events(rng, n, length, branches=3):
    """Arbitrary kernels (uneven weights, repeated branches) and reveals sampled from one run."""
    q0 = tuple(v + 1 for v in random_perm(rng, n))
    state, events = q0, []
    for _ in range(length):
        if rng.random() < 0.65:
            k = rng.randint(1, branches)
            perms = [random_perm(rng, n) for _ in range(k)]
            weights = [rng.random() + 0.05 for _ in range(k)]
            probs = tuple(w / sum(weights) for w in weights)
            probs = probs[:-1] + (1.0 - sum(probs[:-1]),)
            action = Action(tuple(perms), probs)
            state = apply_permutation(state, rng.choices(perms, probs)[0])
            events.append(action)
        else:
            shown = tuple(rng.sample(range(n), rng.choice([1, 1, 2, n])))
            events.append(Observation(shown, tuple(state[v] for v in shown)))
    return q0, events


def flat(result):
    return [post.predictive for post in result.reveals]


def test_joint_filter_equals_enumeration_of_hidden_outcomes():
    rng = random.Random(0)
    checked = 0
    for _trial in range(60):
        n = rng.choice([2, 3, 3, 4])
        q0, events = random_events(rng, n, rng.randint(3, 11))
        exact = joint_filter(PFSA(n, q0), events)
        brute = enumerate_posteriors(q0, events)
        assert len(brute) == len(exact.reveals)
        for a, b in zip(brute, flat(exact)):
            assert np.allclose(a, b, atol=1e-9, rtol=0)
            assert math.isclose(b.sum(), 1.0, abs_tol=1e-12)
        checked += len(brute)
        # the likelihood is the product of the predictive probabilities of what was shown
        assert math.isclose(exact.log_likelihood, sum(math.log(p.probability) for p in exact.reveals))
    assert checked > 100


def test_joint_filter_on_generated_traces_equals_enumeration():
    spec = ProbTraceSpec(group="S4", actions=9, mix=(0.3, 0.4, 0.3), spacing=2, full_reveal_prob=0.3)
    for seed in range(25):
        trace = generate_prob_trace(spec, seed)
        brute = enumerate_posteriors(trace.q0, trace.events)
        posts = [p.predictive for line in trace.posteriors for p in line]
        assert len(posts) == len(brute) and all(np.allclose(a, b, atol=1e-9) for a, b in zip(brute, posts))


def test_full_reveal_is_read_left_to_right():
    # after a uniform shuffle of a, b, c: P(a)=1/3, then P(b | a)=1/2, then P(c | a, b)=1
    rotations = [(0, 1, 2), (1, 2, 0), (2, 0, 1)]
    swaps = Action.choice([(0, 1, 2), (1, 0, 2)])
    events = [Action.choice(rotations), swaps, Observation((0, 1, 2), (2, 1, 3))]
    result = joint_filter(PFSA(3), events)
    assert [round(p.probability, 12) for p in result.reveals] == [round(1 / 3, 12), 0.5, 1.0]
    assert np.allclose(result.belief, PFSA(3).initial_belief() * 0 + (np.arange(6) == PFSA(3).index((2, 1, 3))))


def test_delta_is_row_stochastic_and_agrees_with_the_gathered_transition():
    rng = random.Random(1)
    for n in (2, 3, 4):
        pfsa = PFSA(n, tuple(range(1, n + 1)))
        for _ in range(5):
            action = Action.choice([random_perm(rng, n) for _ in range(3)])
            d = pfsa.delta(action)
            assert np.allclose(d.sum(axis=1), 1.0)
            b = np.random.default_rng(0).random(pfsa.num_states)
            assert np.allclose(b @ d, pfsa.transition(b, action), atol=1e-14)
        # a deterministic action is a permutation matrix that moves q to q o p
        p = random_perm(rng, n)
        d = pfsa.delta(Action.deterministic(p))
        for i, q in enumerate(pfsa.states):
            assert d[i, pfsa.index(apply_permutation(tuple(q), p))] == 1.0


def test_states_are_in_lex_order_and_rho_keeps_the_consistent_ones():
    pfsa = PFSA(4, (2, 4, 1, 3))
    assert [lex_rank(tuple(int(v) - 1 for v in q)) for q in pfsa.states] == list(range(24))
    assert pfsa.initial_belief()[pfsa.index((2, 4, 1, 3))] == 1.0 and pfsa.initial_belief().sum() == 1.0
    mask = pfsa.rho(Observation((1, 3), (4, 2)))
    assert mask.sum() == 2 and all(q[1] == 4 and q[3] == 2 for q in pfsa.states[mask])


def test_unnormalised_joint_loses_nothing_in_exact_arithmetic():
    """b~ / ||b~|| is the exact posterior and ||b~|| = P(all reveals): only finite precision hurts."""
    rng = random.Random(2)
    for _ in range(20):
        n = rng.choice([3, 4])
        q0, events = random_events(rng, n, 12)
        pfsa = PFSA(n, q0)
        exact = joint_filter(pfsa, events)
        run = run_linear_joint(pfsa, events, full_reset=False)
        assert math.isclose(run.mass[-1], exact.probability, rel_tol=1e-10)
        assert np.allclose(run.belief / run.belief.sum(), exact.belief, atol=1e-12)
        # transitions never change the mass; reveals only shrink it
        for e, event in enumerate(events):
            if isinstance(event, Action):
                assert math.isclose(run.mass[e + 1], run.mass[e], rel_tol=1e-12)
            else:
                assert run.mass[e + 1] <= run.mass[e] + 1e-15


def test_full_reset_restores_unit_mass():
    q0, events = halving_sequence(5)
    events = (
        events + [Observation((0, 1, 2), (1, 2, 3))]
        if events[-1].values[0] == 1
        else events + [Observation((0, 1, 2), (2, 1, 3))]
    )
    pfsa = PFSA(3, q0)
    assert run_linear_joint(pfsa, events, full_reset=True).mass[-1] == 1.0
    assert run_linear_joint(pfsa, events, full_reset=False).mass[-1] == 2.0**-5
    assert np.isclose(run_linear_marginal(3, q0, events).mass[-1], 3.0)


def test_marginal_transitions_are_exact():
    rng = random.Random(3)
    for n in (3, 4, 5):
        q0, events = random_events(rng, n, 15)
        actions = [e for e in events if isinstance(e, Action)]
        joint = joint_filter(PFSA(n, q0), actions)
        marginal = marginal_filter(n, q0, actions)
        assert np.allclose(joint.marginals, marginal.marginals, atol=1e-12)
        assert np.allclose(marginal.marginals.sum(axis=1), 1) and np.allclose(marginal.marginals.sum(axis=2), 1)


def test_marginal_filter_is_exact_for_two_variables():
    rng = random.Random(4)
    for _ in range(20):
        q0, events = random_events(rng, 2, 12)
        joint, marginal = joint_filter(PFSA(2, q0), events), marginal_filter(2, q0, events)
        assert np.allclose(flat(joint), flat(marginal), atol=1e-12)
        assert np.allclose(joint.marginals, marginal.marginals, atol=1e-12)


def test_marginal_filter_is_not_exact_when_correlations_matter():
    """A random rotation of a, b, c has uniform marginals, as a uniform shuffle does, but seeing a pins b."""
    rotate = Action.choice([(0, 1, 2), (1, 2, 0), (2, 0, 1)])
    events = [rotate, Observation((0,), (1,)), Observation((1,), (2,))]
    joint, marginal = joint_filter(PFSA(3), events), marginal_filter(3, (1, 2, 3), events)
    assert np.allclose(flat(joint)[0], 1 / 3) and np.allclose(flat(marginal)[0], 1 / 3)  # first reveal: exact
    assert np.allclose(flat(joint)[1], [0, 1, 0])  # truth: b = 2 surely
    assert np.allclose(flat(marginal)[1], [0, 0.5, 0.5])  # marginal: a coin flip
    # the first value of a full reveal is exact, later values of the same line are not
    events = [rotate, Observation((0, 1, 2), (1, 2, 3))]
    joint, marginal = joint_filter(PFSA(3), events), marginal_filter(3, (1, 2, 3), events)
    assert np.allclose(flat(joint)[0], flat(marginal)[0]) and not np.allclose(flat(joint)[1], flat(marginal)[1])
    assert np.allclose(joint.marginals[-1], marginal.marginals[-1])  # but the state after the line is exact


def test_marginal_filter_errs_on_random_traces_and_stays_doubly_stochastic():
    spec = ProbTraceSpec(group="S4", actions=16, mix=(0.2, 0.4, 0.4), spacing=2, full_reveal_prob=0.0)
    worst = 0.0
    for seed in range(30):
        trace = generate_prob_trace(spec, seed)
        marginal = marginal_filter(4, trace.q0, trace.events)
        exact = [p.predictive for line in trace.posteriors for p in line]
        worst = max(worst, max(np.abs(a - b.predictive).max() for a, b in zip(exact, marginal.reveals)))
        final = marginal.marginals[-1]
        assert np.allclose(final.sum(axis=0), 1, atol=1e-9) and np.allclose(final.sum(axis=1), 1, atol=1e-9)
    assert worst > 0.05


def test_sinkhorn_prunes_entries_on_no_perfect_matching():
    m = np.array([[0.5, 0.5, 0.0], [0.5, 0.0, 0.0], [0.2, 0.3, 0.5]])  # (0,0) and (2,0),(2,1) lie on no matching
    out = sinkhorn(m)
    assert np.allclose(out, [[0, 1, 0], [1, 0, 0], [0, 0, 1]], atol=1e-12)
    with pytest.raises(DeltalensError):
        sinkhorn(np.array([[1.0, 0.0], [1.0, 0.0]]))


def test_inconsistent_reveals_are_refused_with_their_line():
    events = [Action.swap(3, 0, 1, 0.3, line=5), Observation((0,), (3,), line=7)]
    for run in (lambda: joint_filter(PFSA(3), events), lambda: marginal_filter(3, (1, 2, 3), events)):
        with pytest.raises(DeltalensError, match="line 7: .*a = 3"):
            run()
    with pytest.raises(DeltalensError):
        enumerate_posteriors((1, 2, 3), events)


def test_bad_automata_are_refused():
    with pytest.raises(DeltalensError, match="entries"):
        PFSA(9)
    with pytest.raises(DeltalensError, match="q0"):
        PFSA(3, (1, 1, 2))
    with pytest.raises(DeltalensError, match="sum to 1"):
        Action(((0, 1), (1, 0)), (0.5, 0.6))
    with pytest.raises(DeltalensError):
        PFSA(3).transition(PFSA(3).initial_belief(), Action.deterministic((1, 0)))


def test_linear_steps_run_in_torch_dtypes():
    rng = random.Random(5)
    q0, events = random_events(rng, 4, 20)
    pfsa = PFSA(4, q0)
    ref = run_linear_joint(pfsa, events)
    got = run_linear_joint(pfsa, events, b0=torch.from_numpy(pfsa.initial_belief()).float())
    assert got.belief.dtype == torch.float32
    assert np.allclose(got.mass, ref.mass, rtol=1e-5)
    m = torch.from_numpy(point_marginals(q0)).to(torch.bfloat16)
    out = marginal_mask(marginal_transition(m, Action.swap(4, 0, 1, 0.5)), 0, q0[1])
    assert out.dtype == torch.bfloat16 and out[0, q0[1] - 1] == 1 and out[1, q0[1] - 1] == 0


# --- (a): the 1/2 law and its underflow -------------------------------------------------------------


def test_halving_law_and_underflow_step_per_dtype():
    result = halving_decay(reveals=1100)
    assert result.underflow == {"float64": 1075, "float32": 150, "bfloat16": 134, "float16": 25}
    assert result.underflow == result.predicted == result.lost
    assert {name: predicted_halving_underflow(name) for name in result.underflow} == result.underflow
    assert smallest_subnormal("float16") == 2.0**-24
    frame = result.frame
    for name, k0 in result.underflow.items():
        part = frame[frame.dtype == name].set_index("reveal")
        before = part.loc[: k0 - 1]
        assert (before.mass == 2.0 ** -before.index.to_numpy(dtype=float)).all()  # exactly 1/2, 1/4, 1/8 ...
        assert (part.loc[k0:].mass == 0).all()
    assert (frame.log2_law == -frame.reveal).all()


def test_swap_probability_other_than_half_does_not_halve():
    q0, events = halving_sequence(40, p=0.3, seed=1)
    pfsa = PFSA(3, q0)
    run = run_linear_joint(pfsa, events)
    factors = run.mass[2::2] / run.mass[:-2:2]
    assert np.allclose(np.sort(np.unique(np.round(factors, 12))), [0.3, 0.7])


def test_joint_decay_figure_has_law_dtypes_and_underflow_marks():
    fig = joint_decay_figure(halving_decay(reveals=160, dtypes=("float32", "float16")))
    names = [t.name for t in fig.data]
    assert names[-1].startswith("law") and set(names[:-1]) == {"float32", "float16"}  # the law drawn on top
    assert fig.data[-1].legendrank < min(t.legendrank or 1000 for t in fig.data[:-1])  # and listed first
    assert len(fig.layout.shapes) == 2 and fig.layout.yaxis.type == "log"
