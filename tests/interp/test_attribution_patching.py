"""Attribution patching: the state adjoint is the true gradient; estimates rank the heads as patching does."""

import pytest
import torch
from scipy.stats import spearmanr

from deltalens.interp.attribution_patching import (
    attribution_of_intervention,
    attribution_patching,
    reveal_margin,
    state_adjoint,
)
from deltalens.models.ops.gated_delta_rule import gated_delta_rule_recurrence, interleave
from tests.conftest import DELTA_RULE_ARCHS


@pytest.mark.parametrize("n_factors,gated", [(1, False), (1, True), (2, True)])
def test_state_adjoint_is_the_replacement_gradient(n_factors, gated):
    g = torch.Generator().manual_seed(0)
    B, T, H, K, V = 1, 7, 2, 4, 3
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, n_factors, K, generator=g), dim=-1)
    v = torch.randn(B, T, H, n_factors, V, generator=g)
    beta = 2 * torch.rand(B, T, H, n_factors, generator=g)
    log_gate = -torch.rand(B, T, H, generator=g) if gated else None
    weight = torch.randn(B, T, H, V, generator=g)  # metric = sum <weight_t, o_t>, so g_t = weight_t
    t0 = 2
    delta = torch.zeros(B, H, K, V, requires_grad=True)
    qi, ki, vi, bi, gi = interleave(q, k, v, beta, log_gate)
    n = n_factors
    o, _, _ = gated_delta_rule_recurrence(qi, ki, vi, bi, gi, edit=lambda s, S: S + delta if s == t0 * n + n - 1 else S)
    metric = (o[:, n - 1 :: n] * weight).sum()
    (grad,) = torch.autograd.grad(metric, delta)
    lam = state_adjoint(q, k, beta, log_gate, weight)
    assert torch.allclose(lam[:, t0].float(), grad, atol=1e-5)


@pytest.mark.parametrize("arch", DELTA_RULE_ARCHS)
def test_estimates_are_first_order(tiny_models, arch):
    """A corrupted run one token away: the estimates follow the true effects of patching (correlated)."""
    from deltalens.interp.patching import patch_heads

    model = tiny_models[arch]
    clean = torch.randint(0, 23, (2, 10), generator=torch.Generator().manual_seed(5))
    corrupt = clean.clone()
    corrupt[:, 4] = (corrupt[:, 4] + 1) % 23

    def metric(logits):
        return logits[:, -1, 5].mean()

    ap = attribution_patching(model, clean, corrupt, metric, sites=("z", "beta", "state"))
    assert ap.grids["state"].shape == (2, 2, 10)
    assert ap.clean != ap.corrupt
    assert ap.grids["z"][:, :, :4].abs().max() < 1e-3 * ap.grids["z"].abs().max()  # nothing differs before it
    for site in ("z", "state"):
        truth = patch_heads(model, clean, corrupt, metric, site=site, per_position=True, progress=False)
        effect = (truth.values - truth.corrupt).flatten()
        estimate = ap.grids[site].flatten()
        correlation = torch.corrcoef(torch.stack([estimate, effect]))[0, 1]
        assert correlation > 0.7, (site, float(correlation))


def test_shipped_s3_top_head_and_sweep(shipped_s3, shipped_s3_batch):
    from deltalens.interp.head_sweep import sweep
    from deltalens.interp.interventions import rescale_beta
    from deltalens.interp.patching import patch_heads
    from deltalens.interp.trace_pairs import reveal_metric, trace_pair

    clean, corrupt = trace_pair(shipped_s3, 8)
    metric = reveal_metric(clean, corrupt)
    ap = attribution_patching(shipped_s3, clean, corrupt, metric)
    grid = patch_heads(shipped_s3, clean, corrupt, metric, progress=False)
    assert ap.top() == grid.top() == (0, 3)
    assert spearmanr(ap.per_head().flatten(), grid.per_head().flatten())[0] > 0.3
    estimate = attribution_of_intervention(
        shipped_s3, shipped_s3_batch, lambda m, layer, head: rescale_beta(m, layer, head, to=(0, 1))
    )
    assert divmod(int(estimate.flatten().argmin()), 4) == (0, 3)  # the largest predicted loss
    result = sweep(shipped_s3, shipped_s3_batch, "beta-range", top_k=2, progress=False)
    assert len(result.frame) == 2 and "attribution" in result.frame
    assert result.highlight() == (0, 3)
    with torch.no_grad():
        assert float(reveal_margin(shipped_s3_batch)(shipped_s3(shipped_s3_batch["tokens"]))) > 5


def test_transformer_estimates_are_not_zero():
    """TransformerLens's bridge ignores a hook's input unless the hook returns a tensor: the gradient at hook_z
    was None and every Transformer head was estimated at exactly 0."""
    from deltalens import models
    from deltalens.interp.patching import patch_heads

    model = models.build("transformer", d_vocab=30, d_model=32, n_heads=4, n_layers=2, n_ctx=64, seed=3).eval()
    clean = torch.randint(0, 30, (2, 12), generator=torch.Generator().manual_seed(1))
    corrupt = clean.clone()
    corrupt[:, 3] = (corrupt[:, 3] + 1) % 30

    def metric(logits):
        return logits[:, -1, 5].mean()

    ap = attribution_patching(model, clean, corrupt, metric, sites=("z",))
    truth = patch_heads(model, clean, corrupt, metric, per_position=True, progress=False)
    effect, estimate = (truth.values - truth.corrupt).flatten(), ap.grids["z"].flatten()
    assert estimate.abs().max() > 0
    assert torch.corrcoef(torch.stack([estimate, effect]))[0, 1] > 0.7
