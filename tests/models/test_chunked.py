"""A long sequence in chunks with the state carried (S_t, the short convolutions' last inputs, an
LSTM's (h, c)) gives the unchunked forward: logits, cached activations and predictions."""

from __future__ import annotations

import pytest
import torch

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.models.lm.chunked import argmax_in_chunks, carried, forward_in_chunks

BUILDS = {
    "deltanet": ("deltanet", dict(hidden_size=32, num_hidden_layers=2, num_heads=2, allow_neg_eigval=True)),
    "deltanet-noconv": ("deltanet", dict(hidden_size=32, num_hidden_layers=1, num_heads=2, use_short_conv=False)),
    "renormalised": ("deltanet", dict(hidden_size=32, num_hidden_layers=2, num_heads=2, state_norm_every=6)),
    "gated_deltanet": ("gated_deltanet", dict(hidden_size=32, num_hidden_layers=2, num_heads=2, head_dim=8)),
    "deltaproduct": (
        "deltaproduct",
        dict(hidden_size=32, num_hidden_layers=2, num_heads=2, head_dim=8, num_householder=2, use_forget_gate=True),
    ),
    "lstm": ("lstm", dict(d_model=32, n_layers=2)),
    "m2rnn": ("m2rnn", dict(hidden_size=32, num_hidden_layers=2, num_heads=2)),
    # M²RNN in the middle: a chunk's DeltaNet layers above it read what its carried state gives
    "deltanet_m2rnn": ("deltanet_m2rnn", dict(hidden_size=32, num_hidden_layers=3, num_heads=2, nonlinear_every=2)),
}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def model(request):
    torch.manual_seed(0)
    arch, config = BUILDS[request.param]
    return models.build(arch, vocab_size=24, **config).eval()


TOKENS = torch.randint(0, 24, (2, 131), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("chunk", [1, 7, 64])
@torch.no_grad()
def test_chunked_logits_equal_the_whole_forward(model, chunk):
    whole = model(TOKENS)
    assert (forward_in_chunks(model, TOKENS, chunk_size=chunk) - whole).abs().max() <= 1e-5
    assert torch.equal(argmax_in_chunks(model, TOKENS, chunk_size=chunk), whole.argmax(-1))


@pytest.mark.parametrize("name", [name for name in sorted(BUILDS) if name != "lstm"])  # LSTM: refused, below
@torch.no_grad()
def test_chunked_capture_equals_run_with_cache(name):
    arch, config = BUILDS[name]
    model = models.build(arch, vocab_size=24, **config).eval()
    wanted = ("hook_state", "hook_beta", "hook_resid_post")  # M²RNN layers have no beta
    _, whole = model.run_with_cache(TOKENS, names_filter=lambda name: name.endswith(wanted))
    _, chunked = forward_in_chunks(model, TOKENS, chunk_size=40, names_filter=lambda name: name.endswith(wanted))
    betas = len(getattr(model, "delta_layers", range(model.cfg.n_layers)))
    assert set(chunked) == set(whole.keys()) and len(chunked) == 2 * model.cfg.n_layers + betas
    for name, value in chunked.items():
        assert value.shape == whole[name].shape and (value - whole[name]).abs().max() <= 1e-5, name


def test_a_renormalised_model_is_chunked_on_its_grid():
    model = models.build(
        "deltanet", vocab_size=24, hidden_size=32, num_hidden_layers=1, num_heads=2, state_norm_every=6
    )
    with torch.no_grad(), carried(model):
        model(TOKENS[:, :12])  # two whole segments: the next chunk starts on the grid
        with pytest.raises(DeltalensError, match="renormalisation grid"):
            model(TOKENS[:, :5])  # ends off the grid ...
            model(TOKENS[:, :5])  # ... so the next chunk cannot start


def test_what_cannot_run_in_chunks_is_refused():
    deltanet = models.build("deltanet", vocab_size=24, hidden_size=32, num_hidden_layers=1, num_heads=2)
    with deltanet.state_edit(0, lambda t, S: S), pytest.raises(DeltalensError, match="sequence whole"):
        forward_in_chunks(deltanet, TOKENS, chunk_size=50)
    lstm = models.build("lstm", vocab_size=24, d_model=16, n_layers=1)
    with pytest.raises(DeltalensError, match="run it whole"):
        forward_in_chunks(lstm, TOKENS, chunk_size=50, names_filter=lambda name: name.endswith("hook_cell"))
    assert all(block.carry is None for block in lstm.blocks)  # the carry never outlives the call


@torch.no_grad()
def test_a_model_with_a_layer_that_cannot_carry_runs_whole():
    """Such a layer (a production hybrid's own attention) would restart from nothing in every chunk."""
    torch.manual_seed(0)
    model = models.build(
        "qwen3_5", vocab_size=24, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, linear_key_head_dim=16, linear_value_head_dim=8, linear_num_key_heads=1,
        linear_num_value_heads=2, layer_types=["linear_attention", "full_attention"], bos_token_id=1, pad_token_id=0,
    ).eval()  # fmt: skip
    whole = model(TOKENS)
    assert not hasattr(model.blocks[1].attn, "carry")  # transformers' own attention layer
    assert torch.equal(forward_in_chunks(model, TOKENS, chunk_size=7), whole)
    assert torch.equal(argmax_in_chunks(model, TOKENS, chunk_size=7), whole.argmax(-1))
