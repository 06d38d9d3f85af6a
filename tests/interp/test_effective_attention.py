"""Effective attention: exact on the three delta-rule families, against the layer's own hook_z."""

import pytest
import torch

from deltalens.core.errors import DeltalensError
from deltalens.interp.effective_attention import (
    EFFECTIVE_PATTERN,
    effective_attention,
    effective_attention_figure,
    effective_pattern,
    layer_inputs,
    reconstruct_z,
    run_with_effective_pattern,
)
from tests.conftest import DELTA_RULE_ARCHS


def _sharpen(model):
    """Large values, keys and betas across the whole [0, 2] range: a random model's z is otherwise ~1e-3."""
    with torch.no_grad():
        for block in model.blocks:
            for name in ("q_proj", "k_proj", "v_proj", "b_proj"):
                getattr(block.attn, name).weight.mul_(40.0)
    return model


@pytest.mark.parametrize("arch", DELTA_RULE_ARCHS)
def test_reconstructs_hook_z(tiny_model, arch):
    model = _sharpen(tiny_model(arch))
    tokens = torch.randint(0, 23, (2, 40), generator=torch.Generator().manual_seed(1))
    _, cache = model.run_with_cache(tokens)
    for layer in range(model.cfg.n_layers):
        A = effective_attention(model, tokens, layer, cache=cache)  # (B, H, Tq, T[, n])
        if arch == "deltaproduct":
            assert A.shape == (2, 2, 40, 40, 3)
        else:
            assert A.shape == (2, 2, 40, 40)
            A = A[..., None]
        inp = layer_inputs(model, cache, layer)
        z = reconstruct_z(A, inp["v"].float())
        assert inp["z"].abs().max() > 0.05  # a real signal to reconstruct
        assert (z - inp["z"]).abs().max() < 1e-5
        upper = torch.ones(40, 40, dtype=torch.bool).triu(1)  # causal: nothing above the diagonal
        assert A[:, :, upper].abs().max() == 0


def test_erase_terms_matter(tiny_model):
    """The exact matrix differs from the erase-free heuristic beta_s q_t . k_s once beta is not 0."""
    model = _sharpen(tiny_model("deltanet"))
    tokens = torch.randint(0, 23, (1, 20), generator=torch.Generator().manual_seed(2))
    _, cache = model.run_with_cache(tokens)
    inp = layer_inputs(model, cache, 0)
    A = effective_attention(model, tokens, 0, head=0, cache=cache)  # (1, T, T)
    naive = torch.einsum("btk,bsk->bts", inp["q"][:, :, 0], inp["k"][:, :, 0, 0]) * inp["beta"][:, None, :, 0, 0]
    naive = naive.tril() * inp["q"].shape[-1] ** -0.5
    assert (A - naive).abs().max() > 1e-3
    assert torch.allclose(A.diagonal(dim1=1, dim2=2), naive.diagonal(dim1=1, dim2=2), atol=1e-6)  # s = t: no erase


def test_query_rows_and_single_head(tiny_model):
    model = _sharpen(tiny_model("gated_deltanet"))
    tokens = torch.randint(0, 23, (1, 30), generator=torch.Generator().manual_seed(3))
    full = effective_attention(model, tokens, 1)
    rows = effective_attention(model, tokens, 1, head=1, queries=[5, 17, 29])
    assert rows.shape == (1, 3, 30)
    assert torch.allclose(rows, full[:, 1, [5, 17, 29]], atol=1e-7)
    with pytest.raises(DeltalensError):
        effective_attention(model, tokens, 1, queries=[17, 5])
    with pytest.raises(DeltalensError):
        effective_attention(model, tokens, 5)


def test_pure_delta_rule_long_sequence():
    """T = 2,048 through the scan directly (a random head with reflections), against the reference recurrence."""
    from deltalens.models.ops.delta_rule import delta_rule_recurrence

    g = torch.Generator().manual_seed(0)
    B, T, H, K = 1, 2048, 1, 8
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    v = torch.randn(B, T, H, K, generator=g)
    beta = 2 * torch.rand(B, T, H, generator=g)
    o, _, _ = delta_rule_recurrence(q, k, v, beta)
    A = effective_pattern(q, k[:, :, :, None], beta[..., None], queries=torch.arange(T - 64, T))
    z = reconstruct_z(A, v[:, :, :, None])
    assert (z - o[:, T - 64 :]).abs().max() < 1e-5


def test_cache_entry_and_figure(tiny_model):
    model = tiny_model("deltaproduct")
    tokens = torch.randint(0, 23, (1, 12))
    _, cache = run_with_effective_pattern(model, tokens, layers=[1])
    entry = cache[EFFECTIVE_PATTERN.format(layer=1)]
    assert entry.shape == (1, 2, 12, 12, 3)
    fig = effective_attention_figure(entry[:, 0], labels=[str(t) for t in tokens[0].tolist()])
    assert fig.data[0].z.shape == (12, 12)


def test_refuses_other_architectures():
    from deltalens import models

    transformer = models.build("transformer", d_vocab=11, d_model=16, n_layers=1, n_heads=2, n_ctx=16)
    with pytest.raises(DeltalensError):
        effective_attention(transformer, torch.zeros(1, 4, dtype=torch.long), 0)


def test_on_a_hybrid_the_default_is_its_delta_rule_layers_and_an_attention_layer_is_named():
    import deltalens as dl
    from deltalens.core.errors import DeltalensError

    model = dl.load("s3-deltanet-hybrid-statement")  # softmax attention at layer 1
    tokens = model.checkpoint.batch(2)["tokens"][:1]
    _, cache = dl.run_with_effective_pattern(model, tokens)
    assert sorted(k for k in cache.keys() if k.endswith("hook_effective_pattern")) == [
        "blocks.0.attn.hook_effective_pattern", "blocks.2.attn.hook_effective_pattern"
    ]  # fmt: skip
    with pytest.raises(DeltalensError, match=r"layer 1 has no delta rule to unroll .* delta-rule layers: \[0, 2\]"):
        dl.effective_attention(model, tokens, 1, 0)
