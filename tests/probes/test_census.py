"""The transition census (probes/census.py, `deltalens census`): on the shipped DeltaNet [0, 2]
checkpoints it must single out the tracking head that the eigenvalue report names independently."""

from __future__ import annotations

import json

import pytest
import torch

import deltalens as dl
from deltalens.cli.main import main
from deltalens.core.errors import DeltalensError


@pytest.mark.parametrize("name", ["s3-deltanet-neg-statement", "s5-deltanet-neg-statement"])
def test_census_singles_out_the_tracking_head(name):
    model = dl.load(name)
    batch = model.checkpoint.batch(32)
    result = dl.census(model, batch)
    assert len(result.heads) == model.cfg.n_layers * model.cfg.n_heads
    tracking = dl.eigenvalue_report(model, batch).tracking_head()  # reflection fraction, from hook_k and hook_beta
    assert result.most_reflecting() == ("reflection_fraction_action", tracking)
    row = result.heads.set_index(["layer", "head"]).loc[tracking]
    others = result.heads.set_index(["layer", "head"]).drop(tracking)
    assert row["reflection_fraction_action"] > 0.9 > others["reflection_fraction_action"].max()
    assert row["beta_gt1_action"] > 0.9  # (another head may have beta > 1 on every action too, short of 2)
    assert row["min_eigenvalue"] < -0.9  # it reflects (eigenvalue near -1)
    report = dl.eigenvalue_report(model, batch).heads.set_index(["layer", "head"])
    # one meaning: the census's min_eigenvalue is the eigenvalue report's, head for head
    assert result.heads.set_index(["layer", "head"])["min_eigenvalue"].to_numpy() == pytest.approx(
        report["min_eigenvalue"].to_numpy(), abs=1e-5
    )
    assert (result.heads["effective_rank"] >= 1).all()
    figure = dl.census_figure(result)
    assert figure.data[0].z.shape == (model.cfg.n_layers, model.cfg.n_heads)


def test_a_zero_one_model_has_no_negative_eigenvalue():
    model = dl.load("s3-deltanet-pos-statement")
    result = dl.census(model, model.checkpoint.batch(8))
    assert result.heads["beta_gt1"].max() == 0 and result.heads["mean_beta"].min() > 0
    assert result.heads["reflection_fraction"].max() == 0 and result.most_reflecting()[1] is None


def test_a_tie_in_the_share_goes_to_the_head_nearer_a_reflection():
    """Two heads with beta > 1 on every action (one at 1.4, one at 2): top() names the one with the larger beta."""
    import pandas as pd

    heads = pd.DataFrame(
        [
            {"layer": 0, "head": 0, "beta_gt1_action": 1.0, "mean_beta": 1.4},
            {"layer": 0, "head": 1, "beta_gt1_action": 1.0, "mean_beta": 2.0},
            {"layer": 1, "head": 0, "beta_gt1_action": 0.2, "mean_beta": 0.9},
        ]
    )
    assert dl.Census(heads, "deltanet").top("beta_gt1_action") == (0, 1)


def test_census_on_token_ids_and_its_refusal_for_a_transformer():
    model = dl.load("s3-deltanet-neg-statement")
    result = dl.census(model, model.to_tokens(">>> a = 1\n>>> b = 2\n>>> a, b = b, a\n"))
    assert result.heads["beta_gt1_action"].isna().all() and result.heads["tokens"].min() > 0
    with pytest.raises(DeltalensError, match="no delta-rule layer"):
        dl.census(dl.load("s3-transformer-statement"), torch.ones(1, 4, dtype=torch.long))


def test_census_command_prints_json_and_the_heatmap(capsys, tmp_path):
    html = tmp_path / "census.html"
    assert main(["census", "s3-deltanet-neg-statement", "--n-traces", "8", "--json", "--html", str(html)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["heads"]) == 8 and report["architecture"] == "deltanet"
    assert html.is_file() and html.stat().st_size > 1000
    assert main(["census", "s3-deltanet-neg-statement", "--n-traces", "8"]) == 0
    assert "most reflecting head: layer 0 head 3" in capsys.readouterr().out


def test_the_census_checks_its_inputs_and_its_size_before_any_work(shipped_s3, monkeypatch):
    """Issue 58: one sentence for ids outside the vocabulary, no tokens, a bad rank_positions or statistic, and a
    census too big for memory (refused before the forward, by its estimate)."""
    model = shipped_s3
    vocab = model.cfg.d_vocab
    for ids, words in (
        (torch.tensor([[1, vocab, 3]]), "outside this model's vocabulary"),
        (torch.tensor([[1, -2, 3]]), "outside this model's vocabulary"),
        (torch.zeros(1, 0, dtype=torch.long), "at least one token"),
        (torch.ones(1, 3), r"token ids \(batch, pos\) of integers"),
    ):
        with pytest.raises(DeltalensError, match=words):
            dl.census(model, ids)
    with pytest.raises(DeltalensError, match="rank_positions must be a whole number"):
        dl.census(model, torch.tensor([[1, 5, 6]]), rank_positions=0)
    result = dl.census(model, torch.tensor([[1, 5, 6, 7]]))
    with pytest.raises(DeltalensError, match="one of the census's statistics"):
        dl.census_figure(result, "nonsense")
    monkeypatch.setenv("DELTALENS_MAX_CAPTURE_GB", "0.001")
    with pytest.raises(DeltalensError, match="would hold about .* GB at once, over the limit"):
        dl.census(model, model.checkpoint.batch(64))


def test_the_census_command_refuses_binary_text_and_too_many_traces_first(tmp_path, capsys, monkeypatch):
    from deltalens.cli.main import main

    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    assert main(["census", "s3-deltanet-neg-statement", "--text", str(binary)]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err
    monkeypatch.setenv("DELTALENS_MAX_CAPTURE_GB", "1")
    assert main(["census", "s3-deltanet-neg-statement", "--n-traces", "1000000"]) == 2
    assert "count fewer traces" in capsys.readouterr().err


def test_beta_above_one_is_called_a_negative_eigenvalue_only_where_one_is():
    """Barely trained keys are short: beta > 1 with 1 - beta ||k||^2 still above 0 (a review found the census
    saying "a negative eigenvalue" beside a smallest eigenvalue of +0.018)."""
    import pandas as pd

    from deltalens.probes.census import Census

    def said(min_eigenvalue: float) -> str:
        heads = pd.DataFrame({"beta_gt1": [0.4], "min_eigenvalue": [min_eigenvalue]})
        return Census.negative_clause(type("C", (), {"heads": heads})())

    assert "no eigenvalue is negative (the smallest 0.018)" in said(0.018)
    assert "a negative eigenvalue (the smallest -0.500)" in said(-0.5)
