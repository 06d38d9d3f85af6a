"""interp.interventions and interp.head_sweep on the hand-set swap tracker (answers known)."""

import pandas as pd
import pytest
import torch
from handset import swap_model

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import capture
from deltalens.interp.head_sweep import sweep, sweep_figure
from deltalens.interp.interventions import (
    Intervention,
    ablate_head,
    accuracy_under,
    clip_beta,
    patch_activation,
    patch_state,
    reflect_beta,
    rescale_beta,
    reveal_accuracy,
)
from deltalens.tasks import TokenKind

TRACK = (1, 1)
DECOYS = [(0, 0), (0, 1), (1, 0)]


@pytest.fixture(scope="module")
def hand():
    return swap_model()


@pytest.fixture(scope="module")
def batch(hand):
    return hand.batch(48, seed=7)


def test_baseline_is_perfect(hand, batch):
    assert accuracy_under(hand.model, batch) == 1.0


def test_beta_rescale_breaks_only_the_tracking_head(hand, batch):
    assert accuracy_under(hand.model, batch, rescale_beta(hand.model, *TRACK, to=(0, 1))) < 0.6
    for layer, head in DECOYS:
        assert accuracy_under(hand.model, batch, rescale_beta(hand.model, layer, head, to=(0, 1))) == 1.0
    assert accuracy_under(hand.model, batch) == 1.0  # nothing stays attached to the model
    mixer = hand.model.blocks[1].attn
    assert torch.all(mixer.beta_hi == 2.0) and torch.all(mixer.beta_lo == 0.0)


def test_beta_rescale_equals_set_beta_range(hand, batch):
    model, tokens = hand.model, batch["tokens"]
    with rescale_beta(model, *TRACK, to=(0.0, 1.0)).applied(model):
        hooked = model(tokens)
    with rescale_beta(model, *TRACK, scale=0.5).applied(model):
        scaled = model(tokens)
    model.set_beta_range(*TRACK, 0.0, 1.0)
    try:
        reference = model(tokens)
    finally:
        model.reset_beta_range()
    assert torch.allclose(hooked, reference, atol=1e-5) and torch.allclose(scaled, reference, atol=1e-5)
    assert not torch.allclose(model(tokens), reference, atol=1e-3)


def test_beta_rescale_maps_the_range(hand, batch):
    plain = capture(hand.model, batch, names="beta")["blocks.1.attn.hook_beta"]
    iv = rescale_beta(hand.model, 1, None, to=(0.5, 1.0))  # every head of layer 1
    moved = capture(hand.model, batch, names="beta", hooks=iv.hooks)["blocks.1.attn.hook_beta"]
    assert torch.allclose(moved, 0.5 + plain / 4, atol=1e-6)
    assert "L1 beta [0, 2]->[0.5, 1]" == iv.label
    with pytest.raises(DeltalensError, match="either a target range"):
        rescale_beta(hand.model, 1, 1, to=(0, 1), scale=0.5)
    with pytest.raises(DeltalensError, match="head 7 is out of range"):
        rescale_beta(hand.model, 1, 7)


def test_beta_clip_removes_only_the_part_above_the_ceiling(hand, batch):
    plain = capture(hand.model, batch, names="beta")["blocks.1.attn.hook_beta"]
    clipped = capture(hand.model, batch, names="beta", hooks=clip_beta(hand.model, *TRACK).hooks)
    clipped = clipped["blocks.1.attn.hook_beta"]
    head = TRACK[1]
    assert (plain[..., head] > 1).any()  # the hand-set tracker reflects (beta 2)
    assert torch.equal(clipped[..., head], plain[..., head].clamp(max=1.0))
    others = [h for h in range(plain.shape[-1]) if h != head]
    assert torch.equal(clipped[..., others], plain[..., others])
    # the tracker needs its negative eigenvalue; a decoy does not
    assert accuracy_under(hand.model, batch, clip_beta(hand.model, *TRACK)) < 0.6
    for layer, decoy in DECOYS:
        assert accuracy_under(hand.model, batch, clip_beta(hand.model, layer, decoy)) == 1.0
    # a ceiling of 2 changes nothing
    with clip_beta(hand.model, *TRACK, hi=2.0).applied(hand.model):
        same = hand.model(batch["tokens"])
    assert torch.equal(same, hand.model(batch["tokens"]))
    with pytest.raises(DeltalensError, match="0 <= hi <= 2"):
        clip_beta(hand.model, *TRACK, hi=float("nan"))


def test_beta_reflect_mirrors_the_eigenvalue(hand, batch):
    plain = capture(hand.model, batch, names="beta")["blocks.1.attn.hook_beta"]
    iv = reflect_beta(hand.model, *TRACK)
    reflected = capture(hand.model, batch, names="beta", hooks=iv.hooks)["blocks.1.attn.hook_beta"]
    head = TRACK[1]
    # eigenvalue 1 - beta becomes beta - 1: same size, opposite sign
    assert torch.allclose(1 - reflected[..., head], -(1 - plain[..., head]), atol=1e-6)
    others = [h for h in range(plain.shape[-1]) if h != head]
    assert torch.equal(reflected[..., others], plain[..., others])
    assert iv.label == "L1H1 beta -> 2 - beta"
    # the tracker's reflections (beta 2) become beta 0: tracking goes; a decoy's do not matter
    assert accuracy_under(hand.model, batch, iv) < 0.6
    for layer, decoy in DECOYS:
        assert accuracy_under(hand.model, batch, reflect_beta(hand.model, layer, decoy)) == 1.0
    result = sweep(hand.model, batch, "beta-reflect", progress=False)
    assert (result.frame.iloc[0]["layer"], result.frame.iloc[0]["head"]) == TRACK
    assert result.intervention == "beta-reflect" and (result.frame.iloc[1:]["accuracy"] == 1.0).all()
    with pytest.raises(DeltalensError, match="head 7 is out of range"):
        reflect_beta(hand.model, 1, 7)


def test_ablations(hand, batch):
    model = hand.model
    assert accuracy_under(model, batch, ablate_head(model, *TRACK, "zero")) == 0.0  # read-out gone
    assert accuracy_under(model, batch, ablate_head(model, *TRACK, "zero", site="state")) == 0.0
    assert accuracy_under(model, batch, ablate_head(model, *TRACK, "mean", reference=batch)) < 0.6
    for layer, head in DECOYS:
        assert accuracy_under(model, batch, ablate_head(model, layer, head, "zero")) == 1.0
        assert (
            accuracy_under(model, batch, ablate_head(model, layer, head, "mean", site="state", reference=batch)) == 1.0
        )
    with pytest.raises(DeltalensError, match="reference batch"):
        ablate_head(model, *TRACK, "mean")
    with pytest.raises(DeltalensError, match="'zero' or 'mean'"):
        ablate_head(model, *TRACK, "half")


def _predicted_values(hand, logits, batch):
    reveal = batch["reveal_mask"][:, 1:]
    predicted = logits[:, :-1].argmax(-1)[reveal]
    return torch.tensor([int(hand.tokenizer.token_of(i)) for i in predicted.tolist()]), reveal


def test_state_patching_moves_the_tracked_value(hand, batch):
    """Patch S_t of the tracking head at every print token from another trace: each reveal then
    shows the other trace's value of the printed variable."""
    model = hand.model
    source = {key: value.roll(1, 0) for key, value in batch.items()}  # trace b gets trace b-1's states
    _, cache = model.run_with_cache(source["tokens"], names_filter=lambda name: name.endswith("hook_state"))
    prints = batch["kinds"] == TokenKind.PRINT
    with patch_state(*TRACK, cache, positions=prints).applied(model):
        logits = model(batch["tokens"])
    values, reveal = _predicted_values(hand, logits, batch)
    variables = batch["reveal_vars"][:, 1:][reveal]
    source_values = source["states"][:, 1:][reveal].gather(1, variables[:, None])[:, 0]
    own_values = batch["answers"][:, 1:][reveal]
    assert torch.equal(values, source_values)
    assert (source_values != own_values).any()  # so the test can tell the two apart
    # patching a decoy's state moves nothing
    with patch_state(1, 0, cache, positions=prints).applied(model):
        assert accuracy_under(model, batch) == 1.0


def test_patching_is_causal_in_time(hand, batch):
    """A patch at position t leaves every earlier position's output unchanged."""
    model, t = hand.model, 20
    source = batch["tokens"].roll(1, 0)
    _, cache = model.run_with_cache(source, names_filter=lambda name: name == "blocks.1.attn.hook_state")
    clean = model(batch["tokens"])
    with patch_activation("blocks.1.attn.hook_state", cache, positions=[t], head=1).applied(model):
        patched = model(batch["tokens"])
    assert torch.allclose(patched[:, :t], clean[:, :t], atol=1e-5)  # kernels differ by float round-off
    assert not torch.allclose(patched[:, t:], clean[:, t:])
    bad = patch_activation("blocks.1.attn.hook_state", cache["blocks.1.attn.hook_state"][:2], positions=[t])
    with pytest.raises(DeltalensError, match="same batch size"):
        reveal_accuracy(model, batch, bad)


@pytest.mark.parametrize("form", [lambda mask: mask, lambda mask: mask.tolist(), lambda mask: mask.numpy()])
def test_a_bool_mask_patches_the_positions_it_marks_in_any_form(hand, batch, form):
    """A list or array of bools is a mask (not the indices 0 and 1); the same positions as their indices."""
    model, t = hand.model, 20
    tokens = batch["tokens"][:4]
    _, cache = model.run_with_cache(tokens.roll(1, 0), names_filter="blocks.1.attn.hook_state")
    mask = torch.zeros(tokens.shape[1], dtype=torch.bool)
    mask[t] = True
    with patch_state(*TRACK, cache, positions=[t]).applied(model):
        by_index = model(tokens)
    with patch_state(*TRACK, cache, positions=form(mask)).applied(model):
        by_mask = model(tokens)
    assert torch.equal(by_mask, by_index) and not torch.equal(by_mask[:, t:], model(tokens)[:, t:])


def test_positions_that_are_not_whole_numbers_are_refused(hand, batch):
    _, cache = hand.model.run_with_cache(batch["tokens"][:2], names_filter="blocks.1.attn.hook_state")
    with pytest.raises(DeltalensError, match="whole numbers"):
        with patch_state(*TRACK, cache, positions=[1.5]).applied(hand.model):
            hand.model(batch["tokens"][:2])


@pytest.mark.parametrize("to", [1.0, (0.0, 1.0, 2.0), "01", (0.0,)])
def test_a_target_range_that_is_not_a_pair_is_refused(hand, to):
    with pytest.raises(DeltalensError, match=r"to= is a target range \(lo, hi\)"):
        rescale_beta(hand.model, *TRACK, to=to)


def test_sweep_ranks_the_tracking_head_first(hand, batch):
    result = sweep(hand.model, batch, "beta-range", batch_size=16, progress=False)
    assert result.baseline == 1.0 and result.n_traces == 48
    first = result.frame.iloc[0]
    assert (first["layer"], first["head"]) == TRACK and first["accuracy"] < 0.6
    assert (result.frame.iloc[1:]["accuracy"] == 1.0).all()
    assert first["drop"] == pytest.approx(1.0 - first["accuracy"])
    payload = result.to_dict()
    assert payload["baseline"] == 1.0 and {"layer", "head", "accuracy"} <= set(payload["heads"][0])
    assert len(sweep_figure(result).data) == 1


def test_sweep_resumes_and_takes_callables(hand, batch):
    calls = []

    def zero(model, layer, head):
        calls.append((layer, head))
        return ablate_head(model, layer, head, "zero")

    done = pd.DataFrame(
        [{"layer": 0, "head": 0, "label": "earlier", "accuracy": 1.0, "trace_accuracy": 1.0, "drop": 0.0}]
    )
    result = sweep(hand.model, [batch], zero, done=done, progress=False)
    assert sorted(calls) == [(0, 1), (1, 0), (1, 1)]  # (0, 0) was already done
    assert len(result.frame) == 4 and result.frame.iloc[0]["accuracy"] == 0.0


def test_other_architectures(hand, batch):
    vocab = hand.tokenizer.vocab_size
    lstm = models.build("lstm", vocab_size=vocab, d_model=8, n_layers=1)
    with pytest.raises(DeltalensError, match="an LSTM, which has no beta"):
        sweep(lstm, batch, "beta-range", progress=False)
    with pytest.raises(DeltalensError, match="no attention heads"):
        sweep(lstm, batch, "zero-z", progress=False)
    transformer = models.build("transformer", vocab_size=vocab, d_model=16, n_layers=1, n_heads=2, n_ctx=64)
    with pytest.raises(DeltalensError, match="a Transformer, which has no beta"):
        rescale_beta(transformer, 0, 0)
    clean = transformer(batch["tokens"][:4])
    iv = ablate_head(transformer, 0, 1, "zero")
    assert isinstance(iv, Intervention)
    with iv.applied(transformer):
        ablated = transformer(batch["tokens"][:4])
    assert not torch.allclose(clean, ablated)
    result = sweep(transformer, batch, "mean-z", progress=False)
    assert len(result.frame) == 2
