"""Sparse dictionaries of delta-rule sites (probes/sparse_dictionary.py, probes/dictionary_scores.py,
interp/dictionary_splice.py, `deltalens sae`): the scorer on facts whose answer is known, training and sparsify's
folder format, the splice as a state edit that propagates, and the pipeline on a production stand-in."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import deltalens as dl
from deltalens.cli.main import main
from deltalens.core.errors import DeltalensError
from deltalens.probes.dictionary_scores import arrangement_table, fact_table


def test_the_scorer_finds_the_latent_that_is_a_fact_and_the_arrangement_it_is():
    rng = np.random.default_rng(0)
    states = np.stack([rng.permutation(3) for _ in range(600)])  # rows x variables, values 0 .. 2
    on = np.zeros((600, 3), dtype=bool)
    on[:, 0] = states[:, 0] == 1  # latent 0: exactly "a holds 2"
    on[:, 1] = (states == [0, 1, 2]).all(1)  # latent 1: exactly the arrangement a=1 b=2 c=3
    on[:, 2] = rng.random(600) < 0.3  # latent 2: noise
    precision, recall, f1 = fact_table(on, states, 3)
    assert f1[0, 0, 1] == 1.0 and precision[0, 0, 1] == recall[0, 0, 1] == 1.0
    assert f1[2].max() < 0.5  # noise matches no fact
    assert precision[1, 0, 0] == 1.0 and recall[1, 0, 0] == pytest.approx(0.5, abs=0.1)  # one of a=1's two
    table = arrangement_table(on, states).set_index("arrangement")
    assert table.loc["a=1 b=2 c=3", "latent"] == 1 and table.loc["a=1 b=2 c=3", "f1"] == 1.0
    assert len(table) == 6 and table["rows"].sum() == 600


@pytest.fixture(scope="module")
def paper():
    model = dl.load("s3-deltanet-neg-statement")
    batch = model.checkpoint.batch(64, seed=0)
    cap = dl.capture(model, batch, names=("blocks.0.attn.hook_state", "blocks.0.attn.hook_z"))
    dictionary = dl.train_sae(cap, site="state", layer=0, head=3, num_latents=64, k=4, steps=150, progress_bar=False)
    return model, batch, cap, dictionary


def test_a_dictionary_learns_the_state_and_round_trips_through_sparsify_s_folder(paper, tmp_path):
    from sparsify import SparseCoder

    _, _, cap, d = paper
    assert d.meta["train_fvu"] < 0.5 and d.meta["train_rows"] > 0  # far below the 1.0 of predicting the mean
    score = dl.score_sae(d, cap)
    assert score.fvu < 0.5 and score.rows > 0 and len(score.features) == 64
    d.save(tmp_path / "d")
    theirs = SparseCoder.load_from_disk(tmp_path / "d")  # sparsify's own loader opens the folder
    assert theirs.num_latents == 64 and theirs.cfg.k == 4
    for key, value in d.coder.state_dict().items():
        assert torch.equal(value, theirs.state_dict()[key]), key
    again = dl.load_sae(tmp_path / "d")
    x = cap.layer("state", 0)[:, 3].flatten(1)[:50]
    assert torch.equal(again.reconstruct(x), d.reconstruct(x)) and again.site == "state" and again.head == 3
    with pytest.raises(DeltalensError, match="not a saved dictionary"):
        dl.load_sae(tmp_path)
    prints = dl.score_sae(d, cap, kinds=("print",))  # only the print lines' tokens
    kinds = cap.labels["kind"][cap.labels["trace"] % 2 == 1]
    assert prints.rows == int((kinds == 3).sum()) < score.rows
    with pytest.raises(DeltalensError, match="unknown token kind 'prints'"):
        dl.score_sae(d, cap, kinds=("prints",))


def test_the_splice_is_a_state_edit_that_propagates(paper):
    model, batch, _, d = paper
    tokens = batch["tokens"][:4]
    splice = dl.splice_sae(model, d)
    with torch.no_grad(), model.hooks(fwd_hooks=list(splice)):
        spliced = model(tokens)
    assert model.blocks[0].attn.state_edit is None  # disarmed after the layer ran

    def edit(t, S):  # the same reconstruction, inside the recurrence: S_t from the reconstructed past
        S = S.clone()
        S[:, 3] = d.reconstruct(S[:, 3].flatten(1)).reshape(S[:, 3].shape)
        return S

    with torch.no_grad(), model.state_edit(0, edit):
        want = model(tokens)
    assert (spliced - want).abs().max() <= 1e-4
    with torch.no_grad():
        plain = model(tokens)
    assert (spliced - plain).abs().max() > 1e-3  # the reconstruction is not the state


def test_splice_accuracy_and_a_fact_ablation(paper):
    model, _, cap, d = paper
    test = model.checkpoint.batch(32, seed=5)
    report = dl.splice_report(model, d, test, dl.score_sae(d, cap), fact=(0, 1))
    assert report.baseline == 1.0 and report.spliced > 0.8  # a 150-step dictionary keeps most of the tracking
    assert report.dropped and report.fact_reveals > 0
    everything = dl.accuracy_under(model, test, dl.splice_sae(model, d, drop=range(64)))  # b_dec alone
    assert everything < report.spliced - 0.3
    with pytest.raises(DeltalensError, match="latents to drop"):
        dl.splice_sae(model, d, drop=[64])


def test_the_other_sites_and_their_refusals(paper):
    model, batch, cap, _ = paper
    z = dl.train_sae(cap, site="z", layer=0, head=3, num_latents=16, k=2, steps=20, progress_bar=False)
    assert z.coder.d_in == model.cfg.d_v and 0 <= dl.accuracy_under(model, batch, dl.splice_sae(model, z)) <= 1
    rows = dl.train_sae(cap, site="state_rows", layer=0, head=3, num_latents=16, k=2, steps=20, progress_bar=False)
    assert (
        rows.coder.d_in == model.cfg.d_v and dl.score_sae(rows, cap).rows == model.cfg.d_k * dl.score_sae(z, cap).rows
    )
    with pytest.raises(DeltalensError, match="capture lacks blocks.0.attn.hook_beta"):
        dl.train_sae(cap, site="write", layer=0, head=3, steps=5)
    write = dl.train_sae(model, batch, site="write", layer=0, head=3, num_latents=16, k=2, steps=5, progress_bar=False)
    with pytest.raises(DeltalensError, match="no hook of its own"):
        dl.splice_sae(model, write)
    with pytest.raises(DeltalensError, match="unknown site"):
        dl.train_sae(cap, site="states", layer=0, head=3)
    with pytest.raises(DeltalensError, match="k=9 latents per row cannot exceed"):
        dl.train_sae(cap, site="z", layer=0, head=3, num_latents=8, k=9)
    with pytest.raises(DeltalensError, match="head 7 is out of range"):
        dl.train_sae(cap, site="z", layer=0, head=7)


def test_the_command_prints_scores_and_saves(tmp_path, capsys):
    argv = ["sae", "s3-deltanet-neg-statement", "--layer", "0", "--head", "3", "--latents", "32", "--k", "4"]
    argv += ["--steps", "30", "--n-traces", "16", "--fact", "a=2", "--out", str(tmp_path / "d"), "--json"]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["score"]["n_facts"] == 9 and record["splice"]["fact"] == [0, 1] and record["num_latents"] == 32
    assert (tmp_path / "d" / "cfg.json").is_file() and dl.load_sae(tmp_path / "d").meta["checkpoint"]
    assert main(["sae", "s3-deltanet-neg-statement", "--layer", "0", "--steps", "5"]) == 2
    assert "give --head" in capsys.readouterr().err
    assert main(["sae", "s3-deltanet-neg-statement", "--layer", "0", "--head", "3", "--fact", "d=9"]) == 2
    assert "--fact takes VARIABLE=VALUE" in capsys.readouterr().err
    head = ["sae", "s3-deltanet-neg-statement", "--layer", "0", "--head", "3", "--steps", "100000"]  # refused at once
    for extra, why in [
        (["--score-at", "nope"], "unknown token kind 'nope'"),
        (["--n-traces", "1"], "trains on even traces"),
        (["--site", "write", "--fact", "a=2"], "'write' dictionary is not spliced"),
        (["--out", str(tmp_path / "d")], "exists and is not empty"),  # the dictionary saved above
    ]:
        assert main(head + extra) == 2 and why in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["qwen3_5_text", "olmo_hybrid", "kimi_linear"])
def test_on_a_production_stand_in_its_states_and_writes_are_coded_and_scored(kind, tmp_path, monkeypatch):
    """transformers' Qwen3.5, OLMo-Hybrid and Kimi Linear (hybrids: 3 delta-rule layers, 1 attention layer),
    offline, asked S3 traces."""
    from production_standin import put_standin

    repo, _ = put_standin(kind, tmp_path / "hub")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    checkpoint = dl.open_checkpoint(repo)
    batch = checkpoint.batch(8, seed=0)
    layer = checkpoint.model.delta_layers[0]
    for site in ("state", "write"):
        d = dl.train_sae(checkpoint.model, batch, site=site, layer=layer, head=0, num_latents=32, k=4, steps=20,
                         progress_bar=False)  # fmt: skip
        score = dl.score_sae(d, checkpoint.model, batch)
        assert score.n_facts == 9 and score.rows > 0 and np.isfinite(score.fvu)
    report = dl.splice_report(checkpoint.model, d if site == "state" else dl.train_sae(
        checkpoint.model, batch, site="state", layer=layer, head=0, num_latents=32, k=4, steps=20, progress_bar=False
    ), batch)  # fmt: skip
    assert 0.0 <= report.spliced <= 1.0


def test_a_dictionary_of_another_model_and_a_bad_lr_are_refused_before_any_work(paper):
    model, batch, cap, _ = paper
    d = dl.train_sae(cap, site="state", layer=0, head=3, num_latents=16, k=2, steps=5, progress_bar=False)
    other = dl.build("deltanet", vocab_size=model.cfg.d_vocab, hidden_size=24, num_hidden_layers=1, num_heads=3)
    with pytest.raises(DeltalensError, match="codes state at layer 0, head 3, which this model .* does not have"):
        dl.splice_report(other, d, batch)
    assert other(batch["tokens"][:2]).shape[:2] == batch["tokens"][:2].shape  # the refused splice left nothing set
    for lr in (float("nan"), -1.0, float("inf")):
        with pytest.raises(DeltalensError, match="lr must be a finite learning rate > 0"):
            dl.train_sae(cap, site="state", layer=0, head=3, num_latents=16, k=2, steps=5, lr=lr)
    with pytest.raises(DeltalensError, match="training diverged"):
        dl.train_sae(cap, site="state", layer=0, head=3, num_latents=16, k=2, steps=30, lr=1e30, progress_bar=False)


def test_saved_weights_are_as_readable_as_the_other_files(paper, tmp_path):
    """safetensors writes 0600; the dictionary's and the optimizer's weights get the mode an ordinary write gets."""
    import os

    import torch

    from deltalens.training.optimizer_state import save_optimizer

    _, _, cap, _ = paper
    d = dl.train_sae(cap, site="state", layer=0, head=3, num_latents=16, k=2, steps=2, progress_bar=False)
    folder = d.save(tmp_path / "sae")
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.AdamW([weight])
    weight.sum().backward()
    optimizer.step()
    (tmp_path / "opt").mkdir()
    save_optimizer(optimizer, tmp_path / "opt")
    umask = os.umask(0)
    os.umask(umask)
    usual = 0o666 & ~umask
    for path in (folder / "sae.safetensors", folder / "cfg.json", tmp_path / "opt" / "optimizer.safetensors"):
        assert path.stat().st_mode & 0o777 == usual, path
