"""Activation vs attribution patching compared in one sentence, a short AttributionResult, and an automaton
that says when its head does not track (issue 44)."""

from __future__ import annotations

import pytest
import torch

from deltalens.interp.attribution_patching import AttributionResult
from deltalens.interp.circuit import method_agreement
from deltalens.interp.patching import PatchGrid
from deltalens.probes.automaton import Automaton


def grid(values) -> PatchGrid:
    return PatchGrid(torch.tensor(values, dtype=torch.float64), clean=2.0, corrupt=0.0, site="z", n_forwards=6)


def test_agreement_reads_ranks_top_heads_and_sizes_in_one_sentence():
    exact = grid([[0.0, 1.996], [0.002, 0.004]])  # L0H1 restores 0.998 of the span
    small = torch.tensor([[0.0, 0.048], [0.001, 0.002]])  # same ranking, fifty times smaller
    same = method_agreement(exact, small)
    assert same.spearman == pytest.approx(1.0) and same.top_exact == same.top_estimate == (0, 1)
    assert same.exact_at_top == pytest.approx(0.998) and same.estimate_at_top == pytest.approx(0.024)
    assert "same top head" in same.sentence() and "restores 0.998" in same.sentence() and "0.024" in same.sentence()
    other = method_agreement(exact, torch.tensor([[0.5, 0.0], [0.3, 0.1]]))
    assert other.spearman < 0 and other.top_estimate == (0, 0) and "different top heads" in other.sentence()
    with pytest.raises(Exception, match="different heads"):
        method_agreement(exact, torch.zeros(3, 2))
    nan = float("nan")  # a hybrid's attention layer has no state: NaN in both grids, never the top head
    hybrid = method_agreement(grid([[0.4, 1.9], [nan, nan]]), torch.tensor([[0.1, 0.9], [nan, nan]]))
    assert hybrid.top_exact == hybrid.top_estimate == (0, 1) and "nan" not in hybrid.sentence()


def test_attribution_result_prints_a_summary_not_tensors():
    grids = {"z": torch.randn(2, 4, 300), "beta": torch.randn(2, 4, 300)}
    grids["z"][0, 3] += 5.0
    result = AttributionResult(grids, clean=18.3, corrupt=-18.4, seconds=2.0, forward_seconds=1.0)
    text = repr(result)
    assert text.splitlines()[0].startswith("AttributionResult (hook_z, hook_beta): metric clean 18.300")
    assert "L0H3" in text.splitlines()[0] and "tensor(" not in text and len(text.splitlines()) <= 10
    assert "<table" in result._repr_html_() and "tensor(" not in result._repr_html_()


def automaton(n_states: int, purity: float) -> Automaton:
    return Automaton(
        layer=1, head=1, k=2, scores={2: 0.1}, n_states=n_states, labels=[(1, 2, 3)] * n_states,
        transitions={}, determinism=1.0, agreement=0.0, isomorphic=False, n_arrangements=6, actions=[1, 2, 5],
        centroids=torch.zeros(2, 4), cluster_to_state=[0, 0], cluster_labels=[(1, 2, 3)] * 2, purity=purity,
    )  # fmt: skip


def test_an_automaton_of_a_head_that_does_not_track_says_so():
    flat = automaton(n_states=1, purity=0.17)
    assert not flat.tracks()
    assert flat.verdict().startswith("L1H1 does not track") and "1 state for 6 arrangements" in flat.verdict()
    assert automaton(n_states=6, purity=1.0).tracks() and not automaton(n_states=6, purity=0.3).tracks()
