"""TransformerLens habits on every architecture: cache[name, layer] with deltalens's short names,
stack_activation, the residual decompositions with the final norm's scale frozen, a TL-style cfg,
W_E / W_U, to_single_token, and generate with hooks active."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import deltalens as dl
from deltalens.core.errors import DeltalensError

REPO = Path(__file__).resolve().parents[2]
SHORT_NAME = {
    "s3-deltanet-neg-statement": "beta",
    "s4-deltaproduct-n3-full": "beta",
    "s3-lstm-statement-prob": "hidden",
    "s3-transformer-statement": "pattern",
}


@pytest.fixture(scope="module", params=sorted(SHORT_NAME))
def opened(request):
    model = dl.load(request.param)
    batch = model.checkpoint.batch(4, seed=3)
    logits, cache = model.run_with_cache(batch["tokens"])
    return request.param, model, batch, logits, cache


def test_short_names_with_a_layer_index_the_cache(opened):
    name, model, _, _, cache = opened
    short = SHORT_NAME[name]
    full = dl.act_name(short, 1)
    assert torch.equal(cache[short, 1], cache[full]) and torch.equal(cache[short, -1], cache[full])
    stacked = cache.stack_activation(short)
    assert stacked.shape == (model.cfg.n_layers, *cache[full].shape)
    assert torch.equal(stacked[0], cache[dl.act_name(short, 0)])


def test_the_config_speaks_transformer_lens(opened):
    _, model, batch, _, _ = opened
    cfg = model.cfg
    assert cfg.n_layers == 2 and cfg.d_model == 64 and cfg.normalization_type in ("RMS", "LN")
    assert model.W_E.shape == (cfg.d_vocab, cfg.d_model) and model.W_U.shape == (cfg.d_model, cfg.d_vocab)
    piece = model.to_str_tokens(batch["tokens"][0])[5]
    assert model.to_single_token(piece) == int(batch["tokens"][0, 5])


@pytest.mark.parametrize("name", ["s3-deltanet-neg-statement", "s4-deltaproduct-n3-full"])
def test_the_decomposed_residual_reproduces_the_logits(name):
    model = dl.load(name)
    logits, cache = model.run_with_cache(model.checkpoint.batch(4)["tokens"])
    parts, labels = cache.decompose_resid(apply_ln=True, return_labels=True)
    assert labels == ["embed", "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out"]
    assert (parts.sum(0) @ model.W_U - logits).abs().max() <= 1e-4
    accumulated = cache.accumulated_resid(apply_ln=True)
    assert (accumulated[-1] @ model.W_U - logits).abs().max() <= 1e-4
    answer = model.checkpoint.batch(4)["tokens"][:, -1]  # each part's share of the last token's logit
    attrs = cache.logit_attrs(cache.decompose_resid(pos_slice=-2), tokens=answer, pos_slice=-2)
    assert (attrs.sum(0) - logits[torch.arange(4), -2, answer]).abs().max() <= 1e-4


def test_an_lstm_has_no_residual_stream_to_decompose():
    model = dl.load("s3-lstm-statement-prob")
    _, cache = model.run_with_cache(model.checkpoint.batch(2)["tokens"])
    with pytest.raises(DeltalensError, match="no sum of layer outputs to decompose"):
        cache.decompose_resid(apply_ln=True)


def test_generate_continues_a_trace_with_the_revealed_value():
    model = dl.load("s3-deltanet-neg-statement")
    batch = model.checkpoint.batch(4, seed=3)
    for row in range(4):
        position = int(batch["reveal_mask"][row].nonzero()[0])
        prompt = model.to_string(batch["tokens"][row, :position])
        text = model.generate(prompt, max_new_tokens=1)
        assert text.startswith(prompt) and model.to_tokens(text)[0, -1] == batch["tokens"][row, position]
        ids = model.generate(batch["tokens"][row, :position][None], max_new_tokens=1)
        assert torch.equal(ids[0], batch["tokens"][row, : position + 1])


def test_generate_runs_with_hooks_and_refuses_bad_options():
    model = dl.load("s3-deltanet-neg-statement")
    batch = model.checkpoint.batch(2, seed=3)
    position = int(batch["reveal_mask"][0].nonzero()[0])
    prompt = batch["tokens"][0, :position][None]
    plain = model.generate(prompt, max_new_tokens=1)
    ablated = [(dl.act_name("beta", layer), lambda beta, hook: beta * 0) for layer in range(2)]
    with model.hooks(fwd_hooks=ablated):
        hooked_logits = model(prompt)
        hooked = model.generate(prompt, max_new_tokens=3, stop_at_newline=False)
    assert not torch.allclose(hooked_logits, model(prompt))  # the hooks were active while generating
    assert hooked.shape == (1, position + 3) and torch.equal(plain[0, :position], hooked[0, :position])
    assert hooked[0, position] == hooked_logits[0, -1].argmax()
    with pytest.raises(DeltalensError, match="max_new_tokens"):
        model.generate(prompt, max_new_tokens=-1)
    with pytest.raises(DeltalensError, match="is 2 tokens, not one"):
        model.to_single_token(model.to_string(batch["tokens"][0, 1:3]))


def test_a_folder_without_a_tokenizer_gets_the_right_advice(tmp_path):
    folder = tmp_path / "fla-folder"
    model = dl.load("s3-deltanet-neg-statement")
    model.save_pretrained(folder)  # fla's layout: no deltalens section, so no tokenizer
    opened = dl.load(folder)
    with pytest.raises(DeltalensError, match="has no tokenizer, .* copy the tokenizer.json .* beside its config.json"):
        opened.to_tokens(">>> a = 1\n")
    assert opened(torch.tensor([[1, 2, 3]])).shape == (1, 3, model.cfg.d_vocab)
    shutil.rmtree(folder)


def test_a_hook_name_the_model_lacks_is_refused_in_words(shipped_s3, shipped_s3_batch):
    """An intervention made for a deeper model, or a misspelt name: one sentence, not TransformerLens's KeyError."""
    hybrid = dl.load("s3-deltanet-hybrid-statement")
    deeper = dl.rescale_beta(hybrid, hybrid.cfg.n_layers - 1, 0)  # a layer shipped_s3 does not have
    assert hybrid.cfg.n_layers > shipped_s3.cfg.n_layers
    with pytest.raises(DeltalensError, match=r"has no hook named 'blocks\.2\.attn\.hook_beta'"):
        dl.accuracy_under(shipped_s3, shipped_s3_batch, deeper)
    with pytest.raises(DeltalensError, match=r"did you mean 'blocks\.0\.attn\.hook_beta'"):
        shipped_s3.run_with_hooks(shipped_s3_batch["tokens"][:1], fwd_hooks=[("blocks.0.attn.hook_betaa", print)])
    with pytest.raises(DeltalensError, match="has no hook named"):
        shipped_s3.add_hook("blocks.0.hook_nothing", print)
    assert not any(hook.has_hooks() for hook in shipped_s3.hook_dict.values())  # nothing left attached
