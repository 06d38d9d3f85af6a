"""interp.capture and loading.opened: activations aligned with trace labels, on every architecture."""

import pytest
import torch
from handset import swap_model

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import Capture, capture, expand_names
from deltalens.interp.interventions import rescale_beta
from deltalens.loading.opened import checkpoint_batch, open_checkpoint
from deltalens.tasks import TokenKind, TraceSpec
from deltalens.tasks.dataset import make_batch


@pytest.fixture(scope="module")
def hand():
    return swap_model()


@pytest.fixture(scope="module")
def ragged(hand):
    # traces of 4..12 actions: different lengths, so the batch has padding
    spec = TraceSpec(group="S3", action_set="swaps", actions=(4, 12), spacing=2)
    batch = make_batch(spec, hand.tokenizer, 6, seed=3)
    assert len(set(batch["lengths"].tolist())) > 1
    return batch


def test_rows_are_real_tokens_with_their_labels(hand, ragged):
    cap = capture(hand.model, ragged, names=("beta", "state", "resid"))
    assert isinstance(cap, Capture)
    assert len(cap) == int(ragged["lengths"].sum())  # padding dropped
    t, p = cap.labels["trace"], cap.labels["position"]
    assert torch.all(p < ragged["lengths"][t])
    assert torch.equal(cap.labels["kind"], ragged["kinds"][t, p])
    assert torch.equal(cap.labels["perm_id"], ragged["perm_ids"][t, p])
    assert torch.equal(cap.states, ragged["states"][t, p])
    assert torch.equal(cap.labels["token"], ragged["tokens"][t, p])
    # rows are in (trace, position) order
    order = t * 1000 + p
    assert torch.all(order[1:] > order[:-1])
    # the action's permutation is known exactly on action tokens and nowhere else
    action = cap.mask(TokenKind.ACTION)
    assert torch.all(cap.labels["perm_id"][action] >= 0) and torch.all(cap.labels["perm_id"][~action] == -1)


def test_values_match_run_with_cache(hand, ragged):
    cap = capture(hand.model, ragged, names=("beta", "state"))
    assert cap.names == [
        "blocks.0.attn.hook_beta",
        "blocks.1.attn.hook_beta",
        "blocks.0.attn.hook_state",
        "blocks.1.attn.hook_state",
    ]
    _, cache = hand.model.run_with_cache(ragged["tokens"])
    t, p = cap.labels["trace"], cap.labels["position"]
    for name in cap.names:
        assert torch.allclose(cap[name], cache[name][t, p].float(), atol=1e-4)  # states are ~30
    state = cap["blocks.1.attn.hook_state"]
    assert state.shape == (len(cap), 2, hand.model.cfg.d_k, hand.model.cfg.d_v)
    padded = cap.padded("blocks.1.attn.hook_beta")
    real = torch.arange(padded.shape[1])[None] < ragged["lengths"][:, None]
    assert torch.allclose(padded[real], cache["blocks.1.attn.hook_beta"][real])
    assert torch.all(padded[~real] == 0)


def test_frame_and_masks(hand, ragged):
    cap = capture(hand.model, ragged, names="beta")
    frame = cap.frame()
    assert len(frame) == len(cap)
    assert set(frame["kind"]) == {"other", "init", "action", "print", "reveal"}
    assert int(cap.mask([TokenKind.INIT, TokenKind.ACTION]).sum()) == int(
        ((ragged["kinds"] == 1) | (ragged["kinds"] == 2)).sum()
    )
    with pytest.raises(DeltalensError, match="was not captured"):
        cap["blocks.0.attn.hook_q"]


def test_capture_under_an_intervention_shows_the_edited_model(hand, ragged):
    plain = capture(hand.model, ragged, names="beta")
    edited = capture(hand.model, ragged, names="beta", hooks=rescale_beta(hand.model, 1, 1, to=(0, 1)).hooks)
    beta, beta_edited = plain["blocks.1.attn.hook_beta"], edited["blocks.1.attn.hook_beta"]
    assert torch.allclose(beta_edited[:, 1], beta[:, 1] / 2)
    assert torch.equal(beta_edited[:, 0], beta[:, 0])


def test_unknown_hook_is_a_clear_error(hand, ragged):
    with pytest.raises(DeltalensError, match="no hook named 'blocks.0.hook_nothing'"):
        capture(hand.model, ragged, names=["blocks.0.hook_nothing"])


@pytest.mark.parametrize(
    "arch,config,article",
    [
        ("lstm", {"d_model": 16, "n_layers": 2}, "an LSTM"),
        ("transformer", {"d_model": 16, "n_layers": 2, "n_heads": 2, "n_ctx": 64}, "a Transformer"),
    ],
)
def test_other_architectures(hand, ragged, arch, config, article):
    model = models.build(arch, vocab_size=hand.tokenizer.vocab_size, **config)
    cap = capture(model, ragged, names="resid")
    site = "hook_hidden" if arch == "lstm" else "hook_resid_post"
    assert cap.names == ["hook_embed", f"blocks.0.{site}", f"blocks.1.{site}"]
    assert cap["blocks.1." + site].shape == (len(cap), 16)
    assert cap.arch == arch
    for name in ("beta", "state", "blocks.0.attn.hook_beta"):
        with pytest.raises(DeltalensError, match=f"{article}, which has no .*beta") as err:
            capture(model, ragged, names=name)
        assert "DeltaNet" in str(err.value)
    if arch == "transformer":
        assert capture(model, ragged, names="z")["blocks.0.attn.hook_z"].shape == (len(cap), 2, 8)
    else:
        with pytest.raises(DeltalensError, match="no attention heads"):
            expand_names(model, ["z"])


def test_checkpoint_batches_come_from_the_eval_split(hand, tmp_path):
    path = hand.save(tmp_path / "hand")
    checkpoint = open_checkpoint(path)
    assert checkpoint.arch == "deltanet" and checkpoint.spec == hand.spec
    batch = checkpoint.batch(5, seed=1)
    assert batch["tokens"].shape[0] == 5
    assert torch.all(batch["trace_seeds"] % 2 == 1)  # lowest seed bit 1: eval split, never training
    longer = checkpoint_batch(path, n_traces=2, actions=24)
    assert int((longer["kinds"][0] == TokenKind.ACTION).sum()) == 24
    assert torch.equal(checkpoint_batch(checkpoint.meta, n_traces=5, seed=1)["tokens"], batch["tokens"])
    with pytest.raises(DeltalensError, match="number of traces"):
        checkpoint.batch(0)


def test_checkpoint_without_task_metadata(hand, tmp_path):
    models.save(hand.model, tmp_path / "bare")
    with pytest.raises(DeltalensError, match="has no tokenizer, .* copy the tokenizer.json"):
        checkpoint_batch(tmp_path / "bare")


def test_a_capture_of_some_layers_is_read_on_those_layers(shipped_s3, shipped_s3_batch):
    """layers=[-1] (the last layer, as Python counts): the probes report that layer, not a missing hook."""
    import deltalens as dl

    cap = dl.capture(shipped_s3, shipped_s3_batch, names=("beta", "k"), layers=[-1])
    assert cap.names == ["blocks.1.attn.hook_beta", "blocks.1.attn.hook_k"]
    report = dl.eigenvalue_report(cap)
    assert set(report.heads["layer"]) == {1}
    full = dl.eigenvalue_report(dl.capture(shipped_s3, shipped_s3_batch, names=("beta", "k")))
    assert report.heads.equals(full.heads[full.heads["layer"] == 1].reset_index(drop=True))
