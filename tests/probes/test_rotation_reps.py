"""The exact rotation representations of S4 and A5 (tasks/rotation_reps.py) and the per-representation
product probe (probes/product_reps.py) on heads built from known reflections.

A head "in representation rho" embeds rho's space in d_k dims with a random orthonormal E and gives
each action the Householder factors of rho(pi) (householder_factors: as many as rho needs, beta = 2;
the rest beta = 0), so its per-token product is E rho(pi) E^T on that subspace.
"""

import random

import numpy as np
import pytest
import torch

from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import Capture
from deltalens.probes.product_reps import reflections_by_type, representation_report, representations
from deltalens.tasks.groups import lex_rank
from deltalens.tasks.representations import _mult, cycle_type, generated_group, irreps
from deltalens.tasks.rotation_reps import (
    cube_rotations,
    householder_factors,
    icosahedron_rotations,
    reflections_needed,
    rotation_irreps,
)
from deltalens.tasks.tokenizers import TokenKind

H = lambda u: np.eye(len(u)) - 2 * np.outer(u, u)  # noqa: E731


@pytest.mark.parametrize("table, order", [(cube_rotations, 24), (icosahedron_rotations, 60)])
def test_rotations_are_a_faithful_homomorphism_into_so3(table, order):
    rho = table()
    assert len(rho) == order
    assert len({tuple(np.round(m, 6).ravel()) for m in rho.values()}) == order  # faithful: distinct matrices
    for g, m in rho.items():
        assert np.allclose(m @ m.T, np.eye(3)) and np.isclose(np.linalg.det(m), 1.0)
        for h, n in rho.items():
            assert np.allclose(rho[_mult(g, h)], m @ n)  # rho(g o h) = rho(g) rho(h)
    assert sorted(map(tuple, generated_group(list(rho)))) == sorted(rho)  # labels: the whole group


def test_rotation_characters_are_the_expected_irreps():
    s4 = generated_group(list(cube_rotations()))
    (cube,) = rotation_irreps(s4)
    named = {r.name: r for r in irreps(s4)}
    trace = lambda r: np.trace(r.matrices, axis1=1, axis2=2)  # noqa: E731
    assert np.allclose(trace(cube), trace(named["standard x sign"]))  # not the standard one
    assert not np.allclose(trace(cube), trace(named["standard"]))
    a5 = generated_group(list(icosahedron_rotations()))
    ico = rotation_irreps(a5)
    three = [r for r in irreps(a5) if r.dim == 3]
    assert len(ico) == 2 and len(three) == 2
    assert sorted(tuple(np.round(trace(r), 4)) for r in ico) == sorted(tuple(np.round(trace(r), 4)) for r in three)
    five_cycles = [i for i, g in enumerate(a5) if cycle_type(g) == (5,)]
    assert {round(float(trace(r)[five_cycles].max()), 3) for r in ico} == {1.618}  # phi on some 5-cycles of each


def test_reflections_needed_per_cycle_type():
    s4 = generated_group(list(cube_rotations()))
    standard, cube = representations(s4)
    assert reflections_by_type(standard, s4) == {"1+1+1+1": 0, "2+1+1": 1, "2+2": 2, "3+1": 2, "4": 3}
    assert reflections_by_type(cube, s4) == {"1+1+1+1": 0, "2+1+1": 2, "2+2": 2, "3+1": 2, "4": 2}
    a5 = generated_group(list(icosahedron_rotations()))
    standard, *ico = representations(a5)
    assert reflections_by_type(standard, a5) == {"1+1+1+1+1": 0, "2+2+1": 2, "3+1+1": 2, "5": 4}
    for rep in ico:
        assert max(reflections_by_type(rep, a5).values()) == 2
    for m in standard.matrices[:20]:
        us = householder_factors(m)
        assert len(us) == reflections_needed(m)
        product = np.eye(len(m))
        for u in us:
            product = product @ H(u)
        assert np.allclose(product, m)
    with pytest.raises(DeltalensError, match="orthogonal"):
        reflections_needed(np.ones((3, 3)))


def test_rotation_irreps_refuse_other_groups():
    with pytest.raises(DeltalensError, match="S4"):
        rotation_irreps([(0, 1, 2), (1, 2, 0), (2, 0, 1)])


def head_capture(elements, rep, factors, d=10, traces=40, actions=6, seed=0):
    """A 1-layer, 2-head Capture: head 0 applies rep(pi) by its Householder factors, head 1 is random.
    An element needing more than `factors` reflections gets only its first `factors` (a wrong product)."""
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    E = torch.linalg.qr(torch.randn(d, rep.dim, generator=gen, dtype=torch.float64))[0].numpy()
    rows = [(t, a, rng.randrange(len(elements))) for t in range(traces) for a in range(actions)]
    N = len(rows)
    beta, k = torch.zeros(N, 2, factors), torch.zeros(N, 2, factors, d)
    k[:, 0] = torch.nn.functional.normalize(torch.randn(N, factors, d, generator=gen), dim=-1)  # beta 0: unused
    for r, (_, _, g) in enumerate(rows):
        # DeltaProduct applies factor 0 first: M = H(u_1) ... H(u_r) applies u_r first
        for j, u in enumerate(list(reversed(householder_factors(rep.matrices[g])))[:factors]):
            k[r, 0, j] = torch.from_numpy(E @ u).float()
            beta[r, 0, j] = 2.0
    k[:, 1] = torch.nn.functional.normalize(torch.randn(N, factors, d, generator=gen), dim=-1)
    beta[:, 1] = 2 * torch.rand(N, factors, generator=gen)
    labels = {
        "trace": torch.tensor([t for t, _, _ in rows]),
        "position": torch.tensor([a for _, a, _ in rows]),
        "token": torch.zeros(N, dtype=torch.long),
        "kind": torch.full((N,), int(TokenKind.ACTION)),
        "action_pos": torch.tensor([a for _, a, _ in rows]),
        "perm_id": torch.tensor([lex_rank(elements[g]) for _, _, g in rows]),
    }
    for key in ("answer", "reveal_var", "state_step"):
        labels[key] = torch.full((N,), -1)
    n = len(elements[0])
    return Capture(
        arch="deltaproduct",
        acts={"blocks.0.attn.hook_beta": beta, "blocks.0.attn.hook_k": k},
        labels=labels,
        states=torch.ones(N, n, dtype=torch.long),
        n_traces=traces,
        n_layers=1,
        n_heads=2,
        lengths=torch.full((traces,), actions),
    )


def test_two_reflections_per_token_apply_the_cube_rotations_not_the_standard_rep():
    s4 = generated_group(list(cube_rotations()))
    standard, cube = representations(s4)
    report = representation_report(head_capture(s4, cube, factors=2))
    rows = report.heads.set_index(["head", "rep"])
    assert rows.loc[(0, cube.name), "applies"] and rows.loc[(0, cube.name), "decoded_accuracy"] == 1.0
    assert rows.loc[(0, cube.name), "heldout_residual"] < 1e-4
    assert not rows.loc[(0, "standard"), "applies"]  # a different (inequivalent) representation
    assert not rows.loc[(1, cube.name), "applies"] and rows.loc[(1, cube.name), "decoded_accuracy"] < 0.5
    assert report.best(cube.name)["head"] == 0
    by_type = report.by_type.set_index(["head", "rep", "cycle_type"])
    assert by_type.loc[(0, cube.name, "4"), "reflections"] == 2
    assert by_type.loc[(0, "standard", "4"), "reflections"] == 3


def test_too_few_reflections_miss_exactly_the_elements_that_need_more():
    s4 = generated_group(list(cube_rotations()))
    standard, _ = representations(s4)
    report = representation_report(head_capture(s4, standard, factors=2, traces=60))
    mine = report.products[(report.products["head"] == 0) & (report.products["rep"] == "standard")]
    right = mine.groupby("most_reflections_of_an_action")["right"].mean()
    assert right.loc[[0, 1, 2]].min() == 1.0 and right.loc[3] < 0.5  # the 4-cycles need 3
    assert (mine["actions"] == 1).all()


def test_three_reflections_in_the_standard_rep_and_the_a5_rotations():
    s4 = generated_group(list(cube_rotations()))
    standard, cube = representations(s4)
    rows = representation_report(head_capture(s4, standard, factors=3)).heads.set_index(["head", "rep"])
    assert rows.loc[(0, "standard"), "applies"] and not rows.loc[(0, cube.name), "applies"]
    a5 = generated_group(list(icosahedron_rotations()))
    standard, first, second = representations(a5)
    rows = representation_report(head_capture(a5, first, factors=2, traces=60)).heads.set_index(["head", "rep"])
    assert rows.loc[(0, first.name), "applies"] and rows.loc[(0, first.name), "decoded_accuracy"] == 1.0
    assert not rows.loc[(0, second.name), "applies"] and not rows.loc[(0, "standard"), "applies"]


def test_context_spread_is_a_mean_distance_and_skips_singletons():
    from deltalens.probes.products import _context_spread

    rng = np.random.default_rng(0)
    P = rng.standard_normal((7, 3, 3))
    index = np.array([0, 0, 1, 1, 1, 2, 3])  # elements 2 and 3 occur once
    expected = []
    for g in (0, 1):
        group = P[index == g]
        expected += [np.linalg.norm(p - group.mean(0)) / np.sqrt(3) for p in group]
    assert np.isclose(_context_spread(P, index, 5), np.mean(expected)) and _context_spread(P, index, 5) > 0
    same = np.repeat(P[:1], 4, axis=0)
    assert _context_spread(same, np.array([0, 0, 1, 1]), 2) == 0.0
    assert np.isnan(_context_spread(P[:2], np.array([0, 1]), 2))  # no element twice: nothing to measure
