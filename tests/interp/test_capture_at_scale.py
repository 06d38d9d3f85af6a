"""Capture at scale: layer and position filters, streaming over slices of the batch, the size estimate
(and the refusal above a limit), run_with_cache's layer filter, and hybrids."""

import pytest
import torch
from fla_on_cpu import randomise
from handset import swap_model

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import capture
from deltalens.tasks import TokenKind, TraceSpec
from deltalens.tasks.dataset import make_batch


@pytest.fixture(scope="module")
def hand():
    return swap_model()


@pytest.fixture(scope="module")
def ragged(hand):
    spec = TraceSpec(group="S3", action_set="swaps", actions=(4, 12), spacing=2)
    return make_batch(spec, hand.tokenizer, 6, seed=3)


def test_kind_layer_and_position_filters_keep_exactly_those_rows(hand, ragged):
    full = capture(hand.model, ragged, names=("beta", "state", "resid"))
    kept = capture(hand.model, ragged, names=("beta", "state", "resid"), layers=[1], kinds=(2, TokenKind.REVEAL))
    assert kept.names == [
        "blocks.1.attn.hook_beta",
        "blocks.1.attn.hook_state",
        "hook_embed",
        "blocks.1.hook_resid_post",
    ]
    rows = torch.isin(full.labels["kind"], torch.tensor([2, 4]))
    assert 0 < len(kept) == int(rows.sum()) < len(full)
    for name in kept.names:
        assert torch.equal(kept[name], full[name][rows]), name
    assert torch.equal(kept.labels["position"], full.labels["position"][rows])
    assert torch.equal(kept.states, full.states[rows])

    # positions: any (B, T) mask, e.g. the tokens whose next token is a reveal
    mask = ragged["reveal_mask"]
    at = capture(hand.model, ragged, names="beta", positions=mask)
    assert len(at) == int(mask.sum()) and torch.all(mask[at.labels["trace"], at.labels["position"]])
    with pytest.raises(DeltalensError, match="positions must be a bool tensor"):
        capture(hand.model, ragged, names="beta", positions=mask.long())
    with pytest.raises(DeltalensError, match="layer indices of this 2-layer model"):
        capture(hand.model, ragged, names="beta", layers=[2])


def test_streaming_over_slices_gives_the_same_capture(hand, ragged):
    whole = capture(hand.model, ragged, names=("beta", "state", "z"), with_logits=True)
    assert whole.slices == 1
    sliced = capture(hand.model, ragged, names=("beta", "state", "z"), with_logits=True, batch_size=4)
    assert sliced.slices == 2
    for name in whole.names:
        assert torch.allclose(sliced[name], whole[name], atol=1e-5), name
    assert torch.allclose(sliced.logits, whole.logits, atol=1e-5)
    with pytest.raises(DeltalensError, match="batch_size must be a whole number"):
        capture(hand.model, ragged, names="beta", batch_size=0)


def test_the_estimate_is_the_capture_s_size_and_a_limit_refuses_or_chunks(hand, ragged):
    cap = capture(hand.model, ragged, names=("beta", "state"), kinds=TokenKind.REVEAL, with_logits=True)
    assert cap.estimated_bytes == cap.nbytes > 0
    # above the limit: one sentence with the estimate and the limit
    with pytest.raises(DeltalensError, match=r"would keep .* MB .* more than the 0\.0 MB limit \(max_bytes\)"):
        capture(hand.model, ragged, names=("beta", "state"), max_bytes=1000)
    # a limit just above the result: the batch is streamed in slices that fit beside it
    full = capture(hand.model, ragged, names="state")
    tight = capture(hand.model, ragged, names="state", max_bytes=full.estimated_bytes + 20_000)
    assert tight.slices > 1
    assert torch.equal(tight["blocks.1.attn.hook_state"], full["blocks.1.attn.hook_state"])


def test_a_24_layer_model_s_states_at_reveals_fit_where_all_states_do_not():
    model = models.build("deltanet", vocab_size=40, hidden_size=64, num_heads=2, num_hidden_layers=24)
    tokens = torch.randint(3, 40, (8, 64), generator=torch.Generator().manual_seed(0))
    kinds = torch.zeros(8, 64, dtype=torch.long)
    kinds[:, 10::16] = int(TokenKind.REVEAL)
    batch = {"tokens": tokens, "lengths": torch.full((8,), 64), "kinds": kinds}
    limit = 8 * 64 * 24 * 2 * 32 * 32 * 4 // 4  # a quarter of what every state of every layer takes
    with pytest.raises(DeltalensError, match="would keep"):
        capture(model, batch, names="state", max_bytes=limit)
    cap = capture(model, batch, names=("beta", "state"), kinds=TokenKind.REVEAL, max_bytes=limit)
    assert cap["blocks.23.attn.hook_state"].shape == (8 * 4, 2, 32, 32)
    assert cap.nbytes == cap.estimated_bytes < limit


def test_run_with_cache_takes_a_layer_filter(hand, ragged):
    _, cache = hand.model.run_with_cache(
        ragged["tokens"], layers=[1], names_filter=lambda n: "beta" in n or n == "hook_embed"
    )
    assert sorted(cache.keys()) == ["blocks.1.attn.hook_beta", "blocks.1.attn.hook_beta_logit", "hook_embed"]
    _, cache = hand.model.run_with_cache(ragged["tokens"], layers=[-1])
    assert not any(name.startswith("blocks.0.") for name in cache.keys()) and "blocks.1.attn.hook_state" in cache.keys()
    with pytest.raises(DeltalensError, match="layer indices"):
        hand.model.run_with_cache(ragged["tokens"], layers=[5])


def test_a_hybrid_s_capture_has_beta_on_delta_layers_and_patterns_on_attention_layers():
    attn = {"layers": [1], "num_heads": 4}
    model = randomise(
        models.build("deltanet", hidden_size=32, num_heads=2, num_hidden_layers=3, vocab_size=37, attn=attn)
    )
    tokens = torch.randint(3, 37, (3, 20), generator=torch.Generator().manual_seed(0))
    batch = {"tokens": tokens, "lengths": torch.tensor([20, 12, 7])}
    cap = capture(model, batch, names=("beta", "z", "blocks.1.attn.hook_pattern"), batch_size=2)
    assert [n for n in cap.names if "beta" in n] == ["blocks.0.attn.hook_beta", "blocks.2.attn.hook_beta"]
    pattern = cap["blocks.1.attn.hook_pattern"]
    assert pattern.shape == (39, 4, 20)  # rows x heads x keys (padded to the batch's T)
    assert torch.allclose(pattern.sum(-1), torch.ones(39, 4))
    _, cache = model.run_with_cache(tokens[:1])
    assert torch.allclose(pattern[:20], cache["blocks.1.attn.hook_pattern"][0].transpose(0, 1), atol=1e-6)
    assert cap.nbytes == cap.estimated_bytes
