"""Baselines and the one way in: models.build for every architecture, hooks, causal edits, training.

Unit tests of the Transformer (TransformerLens's native model through TransformerBridge) and the
HookedLSTM, plus a DeltaNet smoke test through the same `build` call.
"""

import json

import pytest
import torch

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.models.lm.transformer import TransformerConfig

# Two shared cores: one intra-op thread avoids OpenMP oversubscription (tens of times faster here).

VOCAB = 11
SMALL = {
    "lstm": dict(d_vocab=VOCAB, d_model=32, n_layers=2, seed=0),
    "transformer": dict(d_vocab=VOCAB, d_model=32, n_layers=2, n_heads=4, n_ctx=24, seed=0),
    "transformer-learned": dict(
        d_vocab=VOCAB, d_model=32, n_layers=2, n_heads=4, n_ctx=24, positional_embedding_type="standard", seed=0
    ),
}


def arch_of(name):
    return name.split("-")[0]


@pytest.fixture(scope="module", params=sorted(SMALL))
def small(request):
    return request.param, models.build(arch_of(request.param), **SMALL[request.param])


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, VOCAB, (3, 16), generator=torch.Generator().manual_seed(1))


# ----------------------------------------------------------------------------- build


def test_forward_shapes_and_attributes(small, tokens):
    name, model = small
    logits = model(tokens)
    assert logits.shape == (3, 16, VOCAB)
    assert logits.dtype == torch.float32
    assert torch.isfinite(logits).all()
    assert model(tokens[0]).shape == (1, 16, VOCAB)  # one unbatched sequence
    assert model.arch == arch_of(name)


def test_model_config_is_json_and_rebuilds_the_same_model(small, tokens):
    name, model = small
    config = json.loads(json.dumps(model.model_config))  # JSON-able
    rebuilt = models.build(model.arch, **config)
    assert rebuilt.model_config == model.model_config
    # Same seed in the config -> the very same initial weights.
    assert torch.equal(rebuilt(tokens), model(tokens))


def test_transformer_defaults_resolved():
    config = TransformerConfig(d_vocab=5)
    assert (config.d_head, config.d_mlp, config.positional_embedding_type) == (16, 256, "rotary")
    learned = TransformerConfig(d_vocab=5, positional_embedding_type="learned")
    assert learned.positional_embedding_type == "standard"


@pytest.mark.parametrize(
    "arch, config, fragment",
    [
        ("gru", {}, "unknown architecture 'gru'"),
        ("lstm", {"d_modle": 8}, "unknown lstm config key(s) 'd_modle'"),
        ("transformer", {"n_layer": 1}, "unknown transformer config key(s) 'n_layer'"),
        ("transformer", {"positional_embedding_type": "alibi"}, "positional_embedding_type 'alibi'"),
        ("transformer", {"d_model": 30, "n_heads": 4}, "not divisible by n_heads"),
        ("transformer", {"normalization_type": "BN"}, "normalization_type 'BN' is not supported"),
        ("transformer", {"act_fn": "tanhh"}, "Unsupported act_fn='tanhh'"),
    ],
)
def test_build_rejects_bad_requests_in_one_sentence(arch, config, fragment):
    with pytest.raises(DeltalensError) as info:
        models.build(arch, **config)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


# ----------------------------------------------------------------------------- hooks


def test_transformer_hook_names_and_shapes(tokens):
    model = models.build("transformer", **SMALL["transformer-learned"])
    logits, cache = model.run_with_cache(tokens)
    assert torch.equal(logits, model(tokens))  # caching does not change the computation
    B, T, D, H = 3, 16, 32, 4
    expected = {
        "hook_embed": (B, T, D),
        "hook_pos_embed": (B, T, D),
        "ln_final.hook_normalized": (B, T, D),
    }
    for layer in range(2):
        for point in ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out"):
            expected[f"blocks.{layer}.{point}"] = (B, T, D)
        expected[f"blocks.{layer}.attn.hook_q"] = (B, T, H, D // H)
        expected[f"blocks.{layer}.attn.hook_z"] = (B, T, H, D // H)
        expected[f"blocks.{layer}.attn.hook_pattern"] = (B, H, T, T)
    for name, shape in expected.items():
        assert name in cache, name
        assert tuple(cache[name].shape) == shape, name
    # The residual stream adds up: resid_post = resid_mid + mlp_out.
    torch.testing.assert_close(
        cache["blocks.1.hook_resid_post"], cache["blocks.1.hook_resid_mid"] + cache["blocks.1.hook_mlp_out"]
    )
    # Attention is causal and normalised.
    pattern = cache["blocks.0.attn.hook_pattern"]
    assert torch.all(pattern.triu(diagonal=1) == 0)
    torch.testing.assert_close(pattern.sum(-1), torch.ones(B, H, T))


def test_lstm_hook_names_and_shapes(tokens):
    model = models.build("lstm", **SMALL["lstm"])
    logits, cache = model.run_with_cache(tokens)
    # Materialising c_t for the cache leaves the fused h_t, hence the logits, bit-identical.
    assert torch.equal(logits, model(tokens))
    expected = {"hook_embed", "ln_final.hook_scale", "ln_final.hook_normalized"}
    expected |= {f"blocks.{l}.hook_{kind}" for l in range(2) for kind in ("hidden", "cell")}
    assert set(cache.keys()) == expected
    for name in expected - {"ln_final.hook_scale"}:
        assert tuple(cache[name].shape) == (3, 16, 32), name
    # h_t = o_t * tanh(c_t) with o_t in (0, 1): |h| < |tanh(c)| elementwise.
    h, c = cache["blocks.1.hook_hidden"], cache["blocks.1.hook_cell"]
    assert torch.all(h.abs() <= torch.tanh(c).abs() + 1e-6)
    # Layer 1 reads layer 0's hidden states; the LayerNorm reads layer 1's.
    lstm1 = model.blocks[1].lstm
    h1, _ = lstm1(cache["blocks.0.hook_hidden"])
    torch.testing.assert_close(h1, h)


def test_lstm_reference_recurrence_matches_fused_lstm(tokens):
    model = models.build("lstm", **SMALL["lstm"])
    block = model.blocks[0]
    x = model.embed(tokens)
    h_fused, (h_last, c_last) = block.lstm(x)
    h_ref, c_ref = block._recur(x)
    torch.testing.assert_close(h_ref, h_fused, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(c_ref[:, -1], c_last[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(block._cells_from_hidden(x, h_fused), c_ref, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- causal edits


def _edit_at(position, value=0.0):
    def edit(activation, hook):
        activation = activation.clone()
        activation[:, position] = value
        return activation

    return edit


EDITS = [
    ("transformer", "blocks.0.hook_resid_post"),
    ("transformer-learned", "blocks.0.attn.hook_z"),
    ("lstm", "blocks.0.hook_hidden"),
    ("lstm", "blocks.0.hook_cell"),
    ("lstm", "blocks.1.hook_cell"),
    ("lstm", "hook_embed"),
]


@pytest.mark.parametrize("name, hook_name", EDITS)
def test_hook_edit_at_t_changes_logits_from_t_on_and_not_before(name, hook_name, tokens):
    model = models.build(arch_of(name), **SMALL[name])
    t = 6
    clean = model(tokens)
    edited = model.run_with_hooks(tokens, fwd_hooks=[(hook_name, _edit_at(t))])
    change = (edited - clean).abs().amax(dim=(0, 2))  # (T,)
    assert change[:t].max() < 1e-6, change
    assert change[t] > 1e-3, change
    assert change[t + 1 :].min() > 1e-4, change  # the edit travels forward in time
    # Hooks are removed afterwards.
    assert torch.equal(model(tokens), clean)


def test_transformer_pattern_edit_reweights_values(tokens):
    model = models.build("transformer", **SMALL["transformer"])
    t = 5

    def attend_to_first_token(pattern, hook):
        pattern = pattern.clone()
        pattern[:, :, t] = 0.0
        pattern[:, :, t, 0] = 1.0
        return pattern

    clean = model(tokens)
    edited = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_pattern", attend_to_first_token)])
    change = (edited - clean).abs().amax(dim=(0, 2))
    assert change[:t].max() < 1e-6 and change[t] > 1e-3
    assert change[t + 1 :].max() < 1e-6  # last layer: only query position t is affected


def test_lstm_cell_edit_travels_through_the_recurrence(tokens):
    model = models.build("lstm", **SMALL["lstm"])
    t = 4
    _, clean = model.run_with_cache(tokens)
    with model.hooks(fwd_hooks=[("blocks.0.hook_cell", _edit_at(t, 3.0))]):
        _, edited = model.run_with_cache(tokens)
    # The cache shows the settled trajectory: c_t pinned, h_t recomputed from it, later steps follow.
    assert torch.all(edited["blocks.0.hook_cell"][:, t] == 3.0)
    hidden_change = (edited["blocks.0.hook_hidden"] - clean["blocks.0.hook_hidden"]).abs().amax(dim=(0, 2))
    assert hidden_change[:t].max() == 0
    assert hidden_change[t:].min() > 1e-4
    torch.testing.assert_close(
        edited["blocks.0.hook_hidden"][:, t],
        torch.sigmoid(_output_gate(model, edited, t)) * torch.tanh(torch.tensor(3.0)),
    )


def _output_gate(model, cache, t):
    lstm = model.blocks[0].lstm
    x, h_prev = cache["hook_embed"][:, t], cache["blocks.0.hook_hidden"][:, t - 1]
    gates = x @ lstm.weight_ih_l0.T + lstm.bias_ih_l0 + h_prev @ lstm.weight_hh_l0.T + lstm.bias_hh_l0
    return gates.chunk(4, dim=-1)[3]


def test_lstm_patching_full_state_at_t_restores_clean_run():
    """Activation patching: h and c of every layer at t from the clean run fix all later logits."""
    model = models.build("lstm", **SMALL["lstm"])
    clean_tokens = torch.randint(0, VOCAB, (2, 14), generator=torch.Generator().manual_seed(3))
    corrupt_tokens = clean_tokens.clone()
    corrupt_tokens[:, :3] = (clean_tokens[:, :3] + 1) % VOCAB  # corrupt only the prefix
    t = 6
    clean_logits, clean = model.run_with_cache(clean_tokens)
    corrupt_logits = model(corrupt_tokens)
    assert (corrupt_logits[:, t:] - clean_logits[:, t:]).abs().max() > 1e-3

    def from_clean(activation, hook):
        activation = activation.clone()
        activation[:, t] = clean[hook.name][:, t]
        return activation

    hidden_only = [(f"blocks.{l}.hook_hidden", from_clean) for l in range(2)]
    full_state = hidden_only + [(f"blocks.{l}.hook_cell", from_clean) for l in range(2)]
    partly = model.run_with_hooks(corrupt_tokens, fwd_hooks=hidden_only)
    patched = model.run_with_hooks(corrupt_tokens, fwd_hooks=full_state)
    # h alone is not the whole state: the corrupted cell state still leaks into later steps.
    assert (partly[:, t + 1 :] - clean_logits[:, t + 1 :]).abs().max() > 1e-4
    torch.testing.assert_close(patched[:, t:], clean_logits[:, t:], atol=1e-5, rtol=1e-5)


def test_lstm_value_dependent_edit_matches_a_step_by_step_reference(tokens):
    """Adding a vector to h_t at every step equals running the LSTM cell by hand with the addition inside."""
    model = models.build("lstm", **SMALL["lstm"])
    steer = torch.randn(32, generator=torch.Generator().manual_seed(4)) * 0.3
    logits = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.hook_hidden", lambda h, hook: h + steer)])

    lstm = model.blocks[0].lstm
    cell = torch.nn.LSTMCell(32, 32)
    cell.load_state_dict({k[:-3]: v for k, v in lstm.state_dict().items()})
    x = model.embed(tokens)
    h, c, hidden = torch.zeros(3, 32), torch.zeros(3, 32), []
    for t in range(tokens.shape[1]):
        h, c = cell(x[:, t], (h, c))
        h = h + steer
        hidden.append(h)
    reference = model.unembed(model.ln_final(model.blocks[1](torch.stack(hidden, dim=1))))
    torch.testing.assert_close(logits, reference, atol=1e-5, rtol=1e-5)


def test_lstm_hook_that_never_settles_raises():
    model = models.build("lstm", **SMALL["lstm"])
    noisy = lambda h, hook: h + torch.randn_like(h)  # noqa: E731  (a different edit on every call)
    with pytest.raises(DeltalensError, match="never settled"):
        model.run_with_hooks(torch.zeros(1, 4, dtype=torch.long), fwd_hooks=[("blocks.0.hook_hidden", noisy)])


def test_lstm_edits_keep_gradients(tokens):
    model = models.build("lstm", **SMALL["lstm"])
    logits = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.hook_cell", _edit_at(3, 1.0))])
    logits.sum().backward()
    assert model.blocks[0].lstm.weight_hh_l0.grad.abs().sum() > 0
    assert model.embed.weight.grad.abs().sum() > 0


# ----------------------------------------------------------------------------- context


@pytest.mark.parametrize("name", ["transformer", "transformer-learned"])
def test_transformer_over_length_is_one_clear_sentence(name):
    model = models.build("transformer", **SMALL[name])
    assert model(torch.zeros(1, 24, dtype=torch.long)).shape == (1, 24, VOCAB)  # exactly n_ctx is fine
    too_long = torch.zeros(2, 25, dtype=torch.long)
    for call in (model, model.run_with_cache, lambda x: model.run_with_hooks(x, fwd_hooks=[])):
        with pytest.raises(DeltalensError) as info:
            call(too_long)
        message = str(info.value)
        assert message.startswith("trace of 25 tokens exceeds the Transformer's context of 24; ")
        assert "\n" not in message
    assert ("retrain with a larger n_ctx" in message) == (name == "transformer-learned")


# ----------------------------------------------------------------------------- training


def _period_two_batch(generator, batch=32, length=16):
    """Sequences a b a b ...: from the second token on, the next token is determined."""
    pair = torch.randint(0, VOCAB, (batch, 2), generator=generator)
    return pair.repeat(1, length // 2)


@pytest.mark.parametrize("name", ["lstm", "transformer"])
def test_a_few_optimizer_steps_reduce_the_loss(name):
    torch.manual_seed(0)
    model = models.build(arch_of(name), **SMALL[name])
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)

    def loss_on(batch):
        logits = model(batch[:, :-1])
        return torch.nn.functional.cross_entropy(logits[:, 1:].reshape(-1, VOCAB), batch[:, 2:].reshape(-1))

    held_out = _period_two_batch(torch.Generator().manual_seed(99))
    with torch.no_grad():
        before = loss_on(held_out).item()
    for _ in range(40):
        optimizer.zero_grad()
        loss = loss_on(_period_two_batch(generator))
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        after = loss_on(held_out).item()
    assert after < 0.5 * before, (before, after)


# ----------------------------------------------------------------------------- deltanet


def test_deltanet_builds_through_the_same_call(tokens):
    model = models.build(
        "deltanet", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_heads=2, allow_neg_eigval=True
    )
    assert model.arch == "deltanet"
    assert model.model_config["allow_neg_eigval"] is True
    json.dumps(model.model_config)
    logits, cache = model.run_with_cache(tokens)
    assert logits.shape == (3, 16, VOCAB)
    assert "blocks.1.attn.hook_beta" in cache and "blocks.0.hook_resid_post" in cache
    with pytest.raises(DeltalensError, match="unknown deltanet config key"):
        models.build("deltanet", vocab_size=VOCAB, num_layers=2)
