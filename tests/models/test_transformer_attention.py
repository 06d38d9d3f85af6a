"""The Transformer's attention forward (models/layers/transformer_attention.py): the fused kernel in unwatched
training steps, the same function as TransformerLens's attention; real pre-softmax hook_attn_scores."""

import pytest
import torch

import deltalens.models.layers.transformer_attention as fused
from deltalens import models

TOKENS = torch.randint(0, 30, (3, 40), generator=torch.Generator().manual_seed(0))


@pytest.fixture
def calls(monkeypatch):
    """How often the fused kernel ran."""
    count = {"n": 0}
    kernel = torch.nn.functional.scaled_dot_product_attention

    def counting(*args, **kwargs):
        count["n"] += 1
        return kernel(*args, **kwargs)

    monkeypatch.setattr(fused.F, "scaled_dot_product_attention", counting)
    return count


def model():
    return models.build("transformer", d_vocab=30, d_model=32, n_heads=4, n_layers=2, n_ctx=64, seed=3)


def forward_and_grads(m):
    m.zero_grad()
    logits = m(TOKENS)
    (logits**2).mean().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in m.named_parameters()}


def test_training_steps_take_the_fused_kernel_and_compute_the_same_function(calls):
    m = model()
    assert not m.training  # built in eval mode: forward and run_with_cache agree to the bit
    slow_logits, slow_grads = forward_and_grads(m)
    assert calls["n"] == 0
    m.train()
    fast_logits, fast_grads = forward_and_grads(m)
    assert calls["n"] == 2  # one per layer
    assert (fast_logits - slow_logits).abs().max() <= 1e-5
    for name, grad in slow_grads.items():
        assert (fast_grads[name] - grad).abs().max() <= 1e-5 * (1 + grad.abs().max()), name


def test_a_watched_pattern_takes_transformer_lens_path_and_its_edits_count(calls):
    m = model().train()
    clean = m(TOKENS).detach()
    calls["n"] = 0

    def uniform(pattern, hook):
        causal = torch.ones_like(pattern).tril()
        return causal / causal.sum(-1, keepdim=True)

    edited = m.run_with_hooks(TOKENS, fwd_hooks=[("blocks.0.attn.hook_pattern", uniform)])
    assert calls["n"] == 1  # layer 0 is watched, layer 1 is not
    assert (edited - clean).abs().max() > 1e-3
    _, cache = m.run_with_cache(TOKENS)  # a cache reads every pattern: no fused layer
    assert calls["n"] == 1 and cache["blocks.1.attn.hook_pattern"].shape == (3, 4, 40, 40)


def test_hooks_around_the_fused_kernel_still_fire_and_edit(calls):
    m = model()

    def zero_head(z, hook):
        z = z.clone()
        z[:, :, 1] = 0.0
        return z

    seen = []
    hooks = [("blocks.1.attn.hook_z", zero_head), ("blocks.0.attn.hook_q", lambda q, hook: seen.append(q.shape))]
    reference = m.run_with_hooks(TOKENS, fwd_hooks=hooks)  # eval mode: TransformerLens's attention
    m.train()
    fused_run = m.run_with_hooks(TOKENS, fwd_hooks=hooks)
    assert calls["n"] == 2 and len(seen) == 2
    assert (fused_run - reference).abs().max() <= 1e-5
    assert (fused_run - m(TOKENS)).abs().max() > 1e-3  # the ablation took effect in the fused run


def test_the_state_dict_and_module_tree_stay_transformer_lens_s():
    m = model()
    keys = list(m.state_dict())
    assert not any("scores_hook" in k for k in keys)
    assert not any(name.endswith("_scores_hook") for name, _ in m.named_modules())
    copy = models.build("transformer", **m.model_config)
    copy.load_state_dict(m.state_dict())
    assert torch.equal(copy(TOKENS), m(TOKENS))


def test_hook_attn_scores_sees_and_edits_the_pre_softmax_scores():
    m = model()
    _, cache = m.run_with_cache(TOKENS)
    scores, pattern = cache["blocks.0.attn.hook_attn_scores"], cache["blocks.0.attn.hook_pattern"]
    T = TOKENS.shape[1]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    assert torch.isinf(scores[..., future]).all() and torch.isfinite(scores[..., ~future]).all()
    torch.testing.assert_close(torch.softmax(scores, -1), pattern)  # the pattern is their softmax
    assert (scores[..., ~future] - pattern[..., ~future]).abs().max() > 0.1  # not the pattern itself

    def only_first_token(s, hook):  # every query attends to token 0 alone
        s = torch.full_like(s, float("-inf"))
        s[..., 0] = 0.0
        return s

    clean = m(TOKENS)
    edited = m.run_with_hooks(TOKENS, fwd_hooks=[("blocks.1.attn.hook_attn_scores", only_first_token)])
    assert (edited - clean).abs().max() > 1e-3

    def keep_pattern(p, hook):
        seen.append(p)

    seen = []
    m.run_with_hooks(
        TOKENS,
        fwd_hooks=[("blocks.1.attn.hook_attn_scores", only_first_token), ("blocks.1.attn.hook_pattern", keep_pattern)],
    )
    assert torch.equal(seen[0][..., 0], torch.ones_like(seen[0][..., 0]))  # the edit flowed into the softmax


def test_the_explicit_path_is_transformer_lens_s_to_the_bit():
    from transformer_lens.model_bridge.sources.native.model import NativeAttention

    m = model()
    ours = m(TOKENS)
    for block in m.blocks:
        block.attn.original_component.__class__ = NativeAttention
    assert torch.equal(ours, m(TOKENS))
