"""probes.eigenvalues, probes.subspace, probes.linear_probes on models whose answer is known."""

import math

import numpy as np
import pytest
import torch
from handset import swap_model

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import capture
from deltalens.probes.eigenvalues import (
    beta_heatmap,
    eigenvalue_histogram,
    eigenvalue_report,
    product_eigenvalue_figure,
    transition_eigenvalues,
    transition_products,
)
from deltalens.probes.linear_probes import linear_probes, probe_accuracy_figure, probe_targets
from deltalens.probes.subspace import (
    effective_rank,
    numerical_rank,
    pca_dims,
    pca_figure,
    singular_value_figure,
    subspace_report,
)
from deltalens.tasks import TokenKind, TraceSpec, make_tokenizer
from deltalens.tasks.dataset import make_batch

TRACK = (1, 1)


@pytest.fixture(scope="module")
def hand():
    return swap_model()


@pytest.fixture(scope="module")
def cap(hand):
    return capture(hand.model, hand.batch(48, seed=5), names=("beta", "k", "state", "resid"))


# ---- eigenvalues ------------------------------------------------------------------------------


def test_reflection_head_is_found(cap):
    report = eigenvalue_report(cap)
    assert report.tracking_head() == TRACK
    heads = report.heads.set_index(["layer", "head"])
    assert heads.loc[TRACK, "reflection_fraction"] == 1.0
    assert heads.loc[TRACK, "neg_eig_fraction"] == 1.0
    assert heads.loc[TRACK, "mean_beta_action"] == pytest.approx(2.0, abs=1e-6)
    assert heads.loc[TRACK, "min_eigenvalue"] == pytest.approx(-1.0, abs=1e-5)
    others = heads.drop(index=TRACK)
    assert (others["reflection_fraction"] == 0).all() and (others["neg_eig_fraction_all"] == 0).all()
    # init lines overwrite with beta = 1: eigenvalue 0, for every head
    init = report.by_kind[report.by_kind["kind"] == "init"]
    assert np.allclose(init["mean_eigenvalue"], 0.0, atol=1e-6)
    # each swap is one token (statement tokenizer): product = that reflection, det -1 = odd permutation
    assert heads.loc[TRACK, "product_reflection_fraction"] == 1.0
    assert heads.loc[TRACK, "parity_agreement"] == 1.0
    assert heads.loc[TRACK, "tokens_per_action"] == 1.0
    eigs = report.product_eigenvalues
    mine = eigs[(eigs["layer"] == 1) & (eigs["head"] == 1)]
    assert np.allclose(mine["real"], -1.0, atol=1e-5) and np.allclose(mine["imag"], 0.0)
    assert len(mine) == heads.loc[TRACK, "n_action_tokens"]


def test_eigenvalue_is_one_minus_beta_for_unit_keys():
    beta = torch.tensor([[0.0, 1.0, 2.0]])
    k = torch.nn.functional.normalize(torch.randn(1, 3, 4), dim=-1)
    assert torch.allclose(transition_eigenvalues(beta, k), torch.tensor([[1.0, 0.0, -1.0]]), atol=1e-6)
    assert torch.allclose(transition_eigenvalues(beta, torch.zeros(1, 3, 4)), torch.ones(1, 3))


def _reflection(k):
    return torch.eye(len(k), dtype=torch.float64) - 2 * torch.outer(k, k)


def test_transition_products_known_answers():
    e = torch.eye(4, dtype=torch.float64)
    k01, k12 = (e[0] - e[1]) / math.sqrt(2), (e[1] - e[2]) / math.sqrt(2)
    # group 0: reflections k01 then k12 (= a 3-cycle); group 1: one reflection among beta-0 tokens;
    # a token with group -1 is ignored
    beta = torch.tensor([[2.0], [2.0], [0.0], [2.0], [0.0], [2.0]], dtype=torch.float64)
    k = torch.stack([k01, k12, e[3], k01, e[2], k12])[:, None]  # (N, H=1, d)
    group = torch.tensor([0, 0, 1, 1, 1, -1])
    P, ids = transition_products(beta, k, group)
    assert ids.tolist() == [0, 1]
    assert torch.allclose(P[0, 0], _reflection(k12) @ _reflection(k01))  # later token on the left
    assert not torch.allclose(P[0, 0], _reflection(k01) @ _reflection(k12))
    cycle = torch.linalg.eigvals(P[0, 0])
    angles = sorted(round(float(a), 6) for a in torch.angle(cycle))
    assert angles == pytest.approx(sorted([0.0, 0.0, 2 * math.pi / 3, -2 * math.pi / 3]), abs=1e-6)
    assert torch.allclose(P[1, 0], _reflection(k01))
    assert sorted(torch.linalg.eigvals(P[1, 0]).real.tolist()) == pytest.approx([-1, 1, 1, 1])


def test_code_tokenizer_products_over_action_lines():
    torch.manual_seed(0)
    tokenizer = make_tokenizer("code", 3)
    model = models.build(
        "deltanet",
        vocab_size=tokenizer.vocab_size,
        hidden_size=16,
        num_hidden_layers=1,
        num_heads=2,
        allow_neg_eigval=True,
    )
    spec = TraceSpec(group="S3", action_set="swaps", actions=3, spacing=3)
    report = eigenvalue_report(model, make_batch(spec, tokenizer, 2))
    products = report.products
    assert len(products) == 2 * 3 * 2  # traces x actions x heads
    assert (products["n_tokens"] == 9).all()  # ">>> a, b = b, a\n" is 9 code tokens
    assert (report.heads["tokens_per_action"] == 9).all()
    # det P = product of the 9 per-token eigenvalues, checked against the tokens frame
    tokens = report.tokens
    row = products.iloc[1]
    first_action = tokens[
        (tokens["trace"] == row["trace"]) & (tokens["head"] == row["head"]) & (tokens["kind"] == "action")
    ]
    line = first_action.iloc[9 * int(row["action_pos"]) : 9 * int(row["action_pos"]) + 9]
    assert row["det"] == pytest.approx(float(np.prod(line["eigenvalue"])), rel=1e-4)


def test_eigenvalues_need_a_deltanet(hand):
    lstm = models.build("lstm", vocab_size=hand.tokenizer.vocab_size, d_model=8, n_layers=1)
    with pytest.raises(DeltalensError, match="an LSTM, which has no beta"):
        eigenvalue_report(lstm, hand.batch(2))
    with pytest.raises(DeltalensError, match="capture with names"):
        eigenvalue_report(capture(hand.model, hand.batch(2), names="beta"))


# ---- subspace ---------------------------------------------------------------------------------


def test_effective_rank_and_numerical_rank_units():
    assert effective_rank(torch.diag(torch.tensor([3.0, 3.0, 0.0]))).item() == pytest.approx(2.0)
    assert effective_rank(torch.outer(torch.ones(3), torch.arange(3.0))).item() == pytest.approx(1.0)
    assert math.isnan(effective_rank(torch.zeros(3, 3)).item())
    x = torch.randn(50, 2) @ torch.randn(2, 6)
    rank, dim90, dim99, sigma = numerical_rank(x)
    assert rank == 2 and dim99 <= 2 and sigma[0] == 1.0
    (d90, d99), ratio = pca_dims(torch.randn(400, 3) @ torch.randn(3, 10) + 5.0)
    assert d99 == 3 and ratio.sum() == pytest.approx(1.0)


def test_state_subspace_of_the_hand_set_head(cap):
    report = subspace_report(cap, kinds=TokenKind.ACTION)
    heads = report.heads.set_index(["layer", "head"])
    # tracking state = 30 x (3 x 3 permutation matrix): three equal singular values
    assert heads.loc[TRACK, "effective_rank"] == pytest.approx(3.0, abs=1e-6)
    # keys e_i - e_j span the 2-dim sum-zero plane; permutation matrices span (n - 1)^2 = 4 dims
    assert heads.loc[TRACK, "key_rank"] == 2 and heads.loc[TRACK, "key_dim_99"] == 2
    assert heads.loc[TRACK, "pca_dim_99"] == 4
    # decoys: a rank-1 memory of the last init value, and no keys written on actions
    others = heads.drop(index=TRACK)
    assert np.allclose(others["effective_rank"], 1.0) and (others["key_rank"] == 0).all()
    spectrum = report.spectra[(report.spectra["layer"] == 1) & (report.spectra["head"] == 1)]
    assert np.allclose(spectrum["singular_value"].iloc[:3], 1.0) and np.allclose(
        spectrum["singular_value"].iloc[3:], 0.0
    )


def test_state_subspace_for_four_variables():
    hand4 = swap_model(n=4, n_layers=1, n_heads=2, track=(0, 0))
    report = subspace_report(hand4.model, hand4.batch(16), kinds=TokenKind.ACTION)
    row = report.heads.set_index(["layer", "head"]).loc[(0, 0)]
    assert row["effective_rank"] == pytest.approx(4.0, abs=1e-6) and row["key_rank"] == 3


# ---- linear probes ----------------------------------------------------------------------------


def test_probes_read_the_value_from_the_tracking_state(cap):
    report = linear_probes(cap, seed=0)
    assert report.n_test_traces == 12 and report.n_train_traces == 36
    heads = report.by_head().set_index(["layer", "head"])
    assert heads.loc[TRACK, "probe_accuracy_value"] == 1.0
    assert heads.loc[TRACK, "probe_control_value"] < 0.7
    # decoys store only the last init value: each variable's current value is near chance there
    assert (heads.drop(index=TRACK)["probe_accuracy_value"] < 0.6).all()
    layers = report.by_layer()
    assert list(layers[layers["target"] == "value"]["site"]) == ["embed", "L0", "L1"]


def test_probe_targets():
    hand = swap_model()
    cap = capture(hand.model, hand.batch(3), names="beta")
    value, source = probe_targets(cap, "value"), probe_targets(cap, "source")
    trace = cap.labels["trace"].numpy()
    first = np.array([np.nonzero(trace == t)[0][0] for t in trace])
    assert np.array_equal(np.take_along_axis(value[first], source, 1), value)  # s_t[i] = s_0[source]


def test_probes_on_an_lstm_use_the_residual_stream(hand):
    lstm = models.build("lstm", vocab_size=hand.tokenizer.vocab_size, d_model=8, n_layers=2)
    report = linear_probes(lstm, hand.batch(8), targets=("value",), at="all", max_tokens=200)
    assert set(report.results["kind"]) == {"resid"}
    assert list(report.summary()["site"]) == ["embed", "L0", "L1"]
    with pytest.raises(DeltalensError, match="at least 2 traces"):
        linear_probes(lstm, hand.batch(1))


def test_figures(cap):
    eig, sub = eigenvalue_report(cap), subspace_report(cap)
    probes = linear_probes(cap, targets=("value",), sites=("state",), max_tokens=200)
    for fig in (
        beta_heatmap(eig),
        eigenvalue_histogram(eig),
        product_eigenvalue_figure(eig),
        singular_value_figure(sub),
        singular_value_figure(sub, which="keys"),
        pca_figure(sub),
        probe_accuracy_figure(probes),
    ):
        assert len(fig.data) >= 1
    heat = beta_heatmap(eig)
    assert heat.data[0].z[1][1] == pytest.approx(2.0)  # layer 1 head 1 is the hot cell


def test_majority_rate_is_the_score_of_always_guessing_the_training_majority(cap):
    report = linear_probes(cap, sites=("resid",), targets=("value", "source"))
    rows = report.results
    assert "majority_rate" in rows.columns and "chance" not in rows.columns
    assert ((rows["majority_rate"] > 0) & (rows["majority_rate"] <= 1)).all()
    # a probe reads its target only where it beats both: the swap model's last layer holds every value
    last = report.by_layer()
    best = last[(last["target"] == "value")].sort_values("layer").iloc[-1]
    assert best["accuracy"] > max(best["control_accuracy"], best["majority_rate"])
    assert set(report.summary().columns) >= {"accuracy", "control_accuracy", "majority_rate"}


@pytest.mark.parametrize(
    ("options", "why"),
    [
        (dict(targets=[]), "targets is a list of 'value' and/or 'source'"),
        (dict(targets="value"), "targets is a list"),
        (dict(sites=[]), "sites names no site"),
        (dict(max_tokens=1), "max_tokens must be a whole number >= 2"),
        (dict(seed=-1), "seed must be a whole number >= 0"),
    ],
)
def test_probe_arguments_are_refused_in_words_before_any_work(cap, options, why):
    with pytest.raises(DeltalensError, match=why):
        linear_probes(cap, **options)
