"""The Transformer's fused training attention (models/fused_attention.py): the same function as
TransformerLens's attention, taken only when nobody watches the pattern."""
import pytest
import torch

import deltalens.models.fused_attention as fused
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
    (logits ** 2).mean().backward()
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
