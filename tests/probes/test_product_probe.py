"""probes/products.py on heads whose answer is known by construction.

A head "that implements the permutation" is built from reflections: embed the n variables in d_k
dims with a random orthonormal E, write the action's permutation as transpositions (i j), and give
each one factor k = E (e_i - e_j) / sqrt 2 with beta = 2 (unused factors: beta = 0). Its per-token
product is then E Pi E^T on the variables' subspace. Control heads: random keys and betas.
"""

import itertools
import random

import numpy as np
import pytest
import torch

from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import Capture, capture
from deltalens.probes.products import cycle_type, product_report, spectral_cycle_type, standard_rep
from deltalens.tasks.groups import lex_rank
from deltalens.tasks.tokenizers import TokenKind


def transpositions(perm):
    """Transpositions whose product (first applied first) is perm (images of 0..n-1)."""
    perm, swaps = list(perm), []
    for i in range(len(perm)):
        while perm[i] != i:
            j = perm[i]
            swaps.append((i, j))
            perm[i], perm[j] = perm[j], perm[i]
    return swaps[::-1]


def fake_capture(n=4, factors=3, d=12, traces=40, actions=6, seed=0, perms=None):
    """A Capture of a 1-layer, 2-head model: head 0 implements each action by reflections, head 1 is random."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    E = torch.linalg.qr(torch.randn(d, n, generator=gen, dtype=torch.float64))[0]
    perms = perms or [p for p in itertools.permutations(range(n)) if len(transpositions(p)) <= factors]
    rows = []
    for t in range(traces):
        for a in range(actions):
            rows.append((t, a, rng.choice(perms)))
    N = len(rows)
    beta = torch.zeros(N, 2, factors)
    k = torch.zeros(N, 2, factors, d)
    for r, (_, _, p) in enumerate(rows):
        for j, (a_, b_) in enumerate(transpositions(p)):
            vec = (E[:, a_] - E[:, b_]) / np.sqrt(2)
            k[r, 0, j] = vec.float()
            beta[r, 0, j] = 2.0
        unused = factors - len(transpositions(p))  # random keys with beta 0: identity factors
        k[r, 0, factors - unused :] = torch.nn.functional.normalize(torch.randn(unused, d, generator=gen), dim=-1)
    k[:, 1] = torch.nn.functional.normalize(torch.randn(N, factors, d, generator=gen), dim=-1)
    beta[:, 1] = 2 * torch.rand(N, factors, generator=gen)
    labels = {
        "trace": torch.tensor([t for t, _, _ in rows]),
        "position": torch.tensor([a for _, a, _ in rows]),
        "token": torch.zeros(N, dtype=torch.long),
        "kind": torch.full((N,), int(TokenKind.ACTION)),
        "action_pos": torch.tensor([a for _, a, _ in rows]),
        "perm_id": torch.tensor([lex_rank(p) for _, _, p in rows]),
    }
    for key in ("answer", "reveal_var", "state_step"):
        labels[key] = torch.full((N,), -1)
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


def test_cycle_types_and_spectra():
    assert cycle_type((1, 2, 0, 3)) == (3, 1)
    assert cycle_type((1, 0, 3, 2)) == (2, 2)
    three_cycle = np.array([np.exp(2j * np.pi / 3), np.exp(-2j * np.pi / 3), 1, 1, 1])
    assert spectral_cycle_type(three_cycle, 4)[0] == (3, 1)
    assert spectral_cycle_type(np.array([-1, 1, 1, 1.0]), 4)[0] == (2, 1, 1)
    # three reflections (det -1) applying an even 3-cycle: the parity sits in one more dimension
    parity_fixed = np.array([np.exp(2j * np.pi / 3), np.exp(-2j * np.pi / 3), -1, 1, 1])
    assert spectral_cycle_type(parity_fixed, 4)[0] == (3, 1)
    # ... and det +1 with the same spectrum but the -1 is no parity fix: the closest odd type, a 4-cycle
    assert spectral_cycle_type(np.array([np.exp(2j * np.pi / 3), np.exp(-2j * np.pi / 3), -1, -1, 1]), 4)[0] != (3, 1)
    rho = standard_rep([(1, 2, 0, 3), (0, 1, 2, 3)])
    assert np.allclose(rho[1], np.eye(3)) and np.isclose(np.trace(rho[0]), 1 - 1)  # fixed points - 1


def test_a_head_built_from_reflections_implements_the_permutations():
    report = product_report(fake_capture())
    heads = report.heads.set_index("head")
    assert heads.loc[0, "implements"] and heads.loc[0, "decoded_accuracy"] == 1.0
    assert heads.loc[0, "heldout_residual"] < 1e-4 and heads.loc[0, "spectral_agreement"] == 1.0
    assert heads.loc[0, "rep"] == "standard" and heads.loc[0, "faithful"] and heads.loc[0, "context_spread"] < 1e-6
    assert heads.loc[1, "context_spread"] > 0.1
    assert not heads.loc[1, "implements"] and heads.loc[1, "decoded_accuracy"] < 0.5
    assert report.tracking_head() == (0, 0)
    assert "implements" in report.verdict()


def test_one_reflection_cannot_apply_a_three_cycle():
    """DeltaNet's single factor: the probe finds the transpositions but not the 3-cycles."""
    perms = [p for p in itertools.permutations(range(4)) if len(transpositions(p)) <= 2]
    cap = fake_capture(factors=2, perms=perms)
    # keep only each token's first factor, as a DeltaNet head has
    cap.acts = {
        "blocks.0.attn.hook_beta": cap.acts["blocks.0.attn.hook_beta"][..., 0],
        "blocks.0.attn.hook_k": cap.acts["blocks.0.attn.hook_k"][:, :, 0],
    }
    report = product_report(cap)
    row = report.heads.set_index("head").loc[0]
    assert not row["implements"]
    actions = report.actions[report.actions["head"] == 0]
    one_reflection = actions["cycle_type"].isin(["2+1+1", "1+1+1+1"])  # a transposition, or the identity
    assert (~one_reflection).sum() > 20
    assert (actions.loc[~one_reflection, "spectral_cycle_type"] != actions.loc[~one_reflection, "cycle_type"]).all()
    assert (actions.loc[one_reflection, "spectral_cycle_type"] == actions.loc[one_reflection, "cycle_type"]).all()


def test_a_model_without_action_labels_is_refused():
    cap = fake_capture()
    cap.labels["perm_id"] = torch.full_like(cap.labels["perm_id"], -1)
    with pytest.raises(Exception, match="permutation"):
        product_report(cap)


def test_between_read_outs_a_hand_set_head_composes_the_permutations():
    """span="readout": the product of every token's transition from one read-out to the next. The hand-set
    head applies each action by reflections and every other token as the identity, so each stretch's
    product is the permutation the stretch composed (several actions at spacing 3); the other head is not."""
    from handset import product_model

    handset = product_model(n=3, factors=2, spacing=3)
    cap = capture(handset.model, handset.batch(48, spacing=3), names=("beta", "k"))
    report = product_report(cap, span="readout")
    heads = report.heads.set_index("head")
    assert heads.loc[1, "implements"] and heads.loc[1, "decoded_accuracy"] == 1.0
    assert heads.loc[1, "heldout_residual"] < 1e-3
    assert not heads.loc[0, "implements"]
    assert "between read-outs" in report.verdict() and "stretches" in report.verdict()
    assert report.verdict().startswith("Layer 0 head 1 implements")
    # decoded right but far from the representation: said so, and not called implementing
    report.heads.loc[report.heads["head"] == 1, ["implements", "heldout_residual"]] = [False, 0.7]
    assert report.verdict().startswith(
        "Layer 0 head 1 decodes the permutations composed between read-outs, but not "
        "cleanly (median residual > 0.25), so no head implements them"
    )
    # the stretches compose several actions: not every stretch's permutation is a single action's
    assert report.actions["perm"].nunique() == 6


def test_a_bad_span_and_a_capture_without_read_outs_are_refused():
    with pytest.raises(DeltalensError, match="span"):
        product_report(fake_capture(), span="tokens")
    with pytest.raises(DeltalensError, match="two reveals"):
        product_report(fake_capture(), span="readout")  # action tokens only: no reveal


def test_irreps_of_small_groups():
    """Characters: S3 has the sign and the 2-dim standard irrep; S4 adds standard x sign and a
    2-dim one that is not faithful; A5 has 3, 3, 4, 5 (all faithful: A5 is simple)."""
    from deltalens.probes.products import generated_group, irreps
    from deltalens.tasks.groups import get_group

    s3 = irreps(list(itertools.permutations(range(3))))
    assert sorted((r.name, r.dim, r.faithful) for r in s3) == [("sign", 1, False), ("standard", 2, True)]
    s4 = irreps(list(itertools.permutations(range(4))))
    assert sorted(r.dim for r in s4) == [1, 2, 3, 3] and {r.name for r in s4} >= {"standard", "standard x sign"}
    a5 = sorted(get_group("A5").elements())
    assert sorted(r.dim for r in irreps(a5)) == [3, 3, 4, 5] and all(r.faithful for r in irreps(a5))
    assert len(generated_group([(1, 2, 0, 3, 4), (0, 1, 3, 4, 2)])) == 60  # two 3-cycles generate A5
    for rep in s4:  # each is a homomorphism: rho(g) rho(h) = rho(g o h)
        elements = sorted(itertools.permutations(range(4)))
        index = {g: i for i, g in enumerate(elements)}
        g, h = elements[5], elements[17]
        gh = tuple(g[i] for i in h)
        assert np.allclose(rep.matrices[index[g]] @ rep.matrices[index[h]], rep.matrices[index[gh]])


def test_a_big_group_falls_back_to_the_standard_representation():
    """S6 actions (720 elements): no regular representation is built; the standard one still decodes."""
    from deltalens.probes.products import generated_group

    assert generated_group([(1, 2, 3, 4, 5, 0), (1, 0, 2, 3, 4, 5)], limit=120) is None
    perms = random.Random(0).sample([p for p in itertools.permutations(range(6)) if len(transpositions(p)) <= 3], 40)
    report = product_report(fake_capture(n=6, factors=3, d=12, traces=30, perms=perms))
    head = report.heads.set_index("head").loc[0]
    assert head["rep"] == "standard" and head["implements"] and head["decoded_accuracy"] == 1.0
