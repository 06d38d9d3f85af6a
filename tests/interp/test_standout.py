"""Patching fractions only above a floor, and a "top head" only when one stands out, its sign named (issue 55)."""

import pytest
import torch

import deltalens as dl
from deltalens.core.errors import DeltalensError
from deltalens.interp.circuit import method_agreement
from deltalens.interp.patching import SPAN_FLOOR, standout_head, standout_sentence


def test_a_near_zero_span_gives_a_sentence_not_a_blown_up_fraction():
    grid = dl.PatchGrid(torch.tensor([[0.0, 0.02], [0.01, 0.0]]), clean=0.015, corrupt=0.0, site="z", n_forwards=6)
    assert not grid.span_ok and f"under the floor of {SPAN_FLOOR:g}" in grid.span_sentence()
    with pytest.raises(DeltalensError, match="under the floor"):
        grid.normalised()
    fig = dl.patch_grid_figure(grid)  # drawn as the raw change, not as a fraction of 0.015
    assert fig.data[0].z.max() == pytest.approx(0.02)
    sentence = method_agreement(grid, torch.tensor([[0.0, 0.01], [0.0, 0.0]])).sentence()
    assert "stands out" in sentence or "no head stands out" in sentence
    assert "restores" not in sentence


def test_a_top_head_is_named_only_when_it_stands_out_with_its_sign():
    assert standout_head(torch.tensor([[0.0, -0.9], [0.1, 0.05]])) == (0, 1, pytest.approx(-0.9))
    assert standout_head(torch.tensor([[0.3, 0.25], [0.1, 0.0]])) is None  # 0.30 is not twice 0.25
    assert standout_head(torch.tensor([[-0.0004, 0.0], [0.0, 0.0]])) is None  # -0.000: negligible
    assert "lowers the metric (-0.900" in standout_sentence(torch.tensor([[0.0, -0.9], [0.1, 0.05]]), "effect")
    assert standout_sentence(torch.tensor([[0.3, 0.25]]), "effect").startswith("no head stands out")
    grid = dl.PatchGrid(torch.tensor([[0.0, 2.0], [0.1, 0.0]]), clean=2.0, corrupt=0.0, site="z", n_forwards=6)
    assert grid.summary().startswith("L0H1 stands out: it raises the metric")
