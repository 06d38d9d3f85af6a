"""Activation patching and path patching over heads, on the delta-rule family and the Transformer."""

import pytest
import torch

from deltalens.core.errors import DeltalensError
from deltalens.interp.interventions import patch_activation
from deltalens.interp.patching import patch_grid_figure, patch_heads, path_patch
from tests.conftest import DELTA_RULE_ARCHS


def _pair(seed=0, B=2, T=10):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 23, (B, T), generator=g), torch.randint(0, 23, (B, T), generator=g)


def _last_logit(logits):  # a metric read at the last position only
    return logits[:, -1, 5].mean()


@pytest.mark.parametrize("arch", DELTA_RULE_ARCHS)
def test_grid_matches_a_hand_patch(tiny_models, arch):
    model = tiny_models[arch]
    clean, corrupt = _pair()
    grid = patch_heads(model, clean, corrupt, _last_logit, site="z", progress=False)
    assert grid.values.shape == (2, 2)
    with torch.no_grad():
        assert grid.clean == pytest.approx(float(_last_logit(model(clean))), abs=1e-6)
        _, cache = model.run_with_cache(clean)
        iv = patch_activation("blocks.1.attn.hook_z", cache, head=1)
        with model.hooks(fwd_hooks=iv.hooks):
            by_hand = float(_last_logit(model(corrupt)))
    assert grid.values[1, 1] == pytest.approx(by_hand, abs=1e-6)
    assert grid.values[1, 1] != pytest.approx(grid.corrupt, abs=1e-9)
    assert grid.n_forwards == 2 * 2 + 2


def test_positions_and_state_semantics(tiny_models):
    model = tiny_models["deltanet"]
    clean, corrupt = _pair(1)
    z = patch_heads(model, clean, corrupt, _last_logit, site="z", per_position=True, progress=False)
    state = patch_heads(model, clean, corrupt, _last_logit, site="state", per_position=True, progress=False)
    assert z.values.shape == (2, 2, 10)
    # the last layer's read-out at an earlier position never reaches the last position's logits ...
    assert torch.allclose(z.values[1, :, :-1], torch.full((2, 9), z.corrupt, dtype=torch.float64), atol=1e-6)
    # ... but its state does: the recurrence continues from the patched S_t
    assert (state.values[1, :, :-1] - state.corrupt).abs().max() > 1e-6


def test_same_inputs_restore_nothing(tiny_models):
    model = tiny_models["gated_deltanet"]
    clean, _ = _pair(2)
    grid = patch_heads(model, clean, clean, _last_logit, site="beta", progress=False)
    assert torch.allclose(grid.values, torch.full_like(grid.values, grid.clean), atol=1e-6)
    with pytest.raises(DeltalensError):
        grid.normalised()


@pytest.mark.parametrize("via", ["q", "k", "v", "beta"])
def test_path_patching(tiny_models, via):
    model = tiny_models["deltaproduct"]
    clean, corrupt = _pair(3)
    grid = path_patch(model, clean, corrupt, _last_logit, sender=None, receiver=(1, 0), via=via, progress=False)
    assert torch.isnan(grid.values[1]).all() and not torch.isnan(grid.values[0]).any()
    one = path_patch(model, clean, corrupt, _last_logit, sender=(0, 1), receiver=(1, 0), via=via, progress=False)
    assert one == pytest.approx(float(grid.values[0, 1]), abs=1e-6)
    assert abs(one - grid.corrupt) > 1e-7  # the path carries something
    # a sender whose clean output equals its corrupted one carries nothing
    same = path_patch(model, clean, clean, _last_logit, sender=(0, 1), receiver=(1, 0), via=via, progress=False)
    assert same == pytest.approx(float(_last_logit(model(clean).detach())), abs=1e-6)
    with pytest.raises(DeltalensError):
        path_patch(model, clean, corrupt, _last_logit, sender=(1, 0), receiver=(1, 1), via=via)


def test_transformer_through_its_own_hooks():
    from deltalens import models

    model = models.build("transformer", d_vocab=23, d_model=16, n_layers=2, n_heads=2, n_ctx=16, seed=0)
    clean, corrupt = _pair(4)
    grid = patch_heads(model, clean, corrupt, _last_logit, progress=False)
    assert (grid.values - grid.corrupt).abs().max() > 1e-6
    assert patch_grid_figure(grid).data[0].z.shape == (2, 2)
    value = path_patch(model, clean, corrupt, _last_logit, sender=(0, 0), receiver=(1, 1), via="k", progress=False)
    assert isinstance(value, float)
    with pytest.raises(DeltalensError):
        patch_heads(model, clean, corrupt, _last_logit, site="beta")
    with pytest.raises(DeltalensError):
        path_patch(model, clean, corrupt, _last_logit, sender=(0, 0), receiver=(1, 1), via="beta")


def test_shipped_s3_tracking_head_carries_the_answer(shipped_s3):
    from deltalens.interp.trace_pairs import reveal_metric, trace_pair

    clean, corrupt = trace_pair(shipped_s3, 8)
    grid = patch_heads(shipped_s3, clean, corrupt, reveal_metric(clean, corrupt), progress=False)
    assert grid.clean > 5 > -5 > grid.corrupt
    assert grid.top() == (0, 3)
    assert float(grid.normalised()[0, 3]) > 0.9


def test_reveal_metric_needs_a_pair_whose_answers_differ(shipped_s3):
    import deltalens as dl

    clean, corrupt = dl.trace_pair(shipped_s3, 2)
    assert float(dl.reveal_metric(clean, corrupt)(shipped_s3(clean["tokens"]))) > 0
    with pytest.raises(DeltalensError, match="reveal the same values, so the metric is 0"):
        dl.reveal_metric(clean, clean)
    with pytest.raises(DeltalensError, match=r"must be a pair: .* got tokens \(2, \d+\) and \(1, \d+\)$"):
        dl.reveal_metric(clean, {key: value[:1] for key, value in corrupt.items()})


def test_tools_that_read_the_reveals_refuse_token_ids_in_one_sentence(shipped_s3):
    import deltalens as dl

    clean, corrupt = dl.trace_pair(shipped_s3, 2)
    for call in (
        lambda: dl.patch_grid(shipped_s3, clean["tokens"], corrupt["tokens"], progress=False),
        lambda: dl.head_attribution(shipped_s3, clean["tokens"], corrupt),
    ):
        with pytest.raises(DeltalensError, match="takes a batch of traces with their labels"):
            call()
    _, cache = shipped_s3.run_with_cache(clean["tokens"])
    positions, answer, _ = dl.reveal_rows(clean)
    with pytest.raises(DeltalensError, match="answer token ids must lie in"):
        dl.logit_attribution(shipped_s3, cache, positions, answer * 0 + 999)


def test_a_metric_that_is_not_one_number_and_a_path_with_no_sender_are_refused(shipped_s3):
    import deltalens as dl

    clean, corrupt = dl.trace_pair(shipped_s3, 2)
    per_reveal = dl.reveal_metric(clean, corrupt, reduce=False)
    for call in (
        lambda: dl.patch_heads(shipped_s3, clean, corrupt, per_reveal, progress=False),
        lambda: dl.attribution_patching(shipped_s3, clean, corrupt, per_reveal),
    ):
        with pytest.raises(DeltalensError, match="it must return one number"):
            call()
    with pytest.raises(DeltalensError, match="sites names no site"):
        dl.attribution_patching(shipped_s3, clean, corrupt, dl.reveal_metric(clean, corrupt), sites=())
    with pytest.raises(DeltalensError, match="no earlier layer has a head to send"):
        dl.path_patch(shipped_s3, clean, corrupt, dl.reveal_metric(clean, corrupt), None, (0, 3), progress=False)
