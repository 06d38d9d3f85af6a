"""Attribution patching without the work its metric never reads gives the straightforward computation's scores."""

import pytest
import torch

from deltalens.interp import attribution_runs
from deltalens.interp.attribution_patching import attribution_patching
from deltalens.models.layers.hooked_recurrence import HookedRecurrenceMixin
from tests.conftest import DELTA_RULE_ARCHS

SITES = ("z", "beta")


def straightforward(model, clean, corrupt, metric, sites=SITES):
    """Clean forward (cached), corrupted forward, backward to the hooked activations, (clean - corrupt) . grad."""
    names = [f"blocks.{layer}.attn.hook_{s}" for s in sites for layer in range(model.cfg.n_layers)]
    with torch.no_grad():
        clean_logits, cache = model.run_with_cache(clean, names_filter=lambda name: name in names)
    acts = {}

    def grab(act, hook):
        acts[hook.name] = act.clone()
        return acts[hook.name]

    with torch.enable_grad(), model.hooks(fwd_hooks=[(name, grab) for name in names]):
        value = metric(model(corrupt))
        grads = dict(zip(names, torch.autograd.grad(value, [acts[name] for name in names])))
    grids = {}
    for s in sites:
        per_layer = []
        for layer in range(model.cfg.n_layers):
            name = f"blocks.{layer}.attn.hook_{s}"
            cell = grads[name].double() * (cache[name].double() - acts[name].detach().double())
            per_layer.append(cell.reshape(*cell.shape[:3], -1).sum(-1).sum(0).T)  # (H, T)
        grids[s] = torch.stack(per_layer)
    return float(metric(clean_logits)), float(value.detach()), grids


def pair(T=12, at=5, seed=5, vocab=23):
    clean = torch.randint(0, vocab, (3, T), generator=torch.Generator().manual_seed(seed))
    corrupt = clean.clone()
    corrupt[1, at] = (corrupt[1, at] + 1) % vocab  # one trace differs from `at` on, the others not at all
    return clean, corrupt


METRICS = {
    "last position": lambda logits: logits[:, -1, 5].sum() - logits[:, -1, 7].sum(),
    "reveals, some before the change": lambda logits: logits[[0, 1, 2, 1], [2, 8, 11, 4], [3, 4, 5, 6]].mean(),
    "every position": lambda logits: logits.log_softmax(-1)[..., 2].mean(),
    # the gradient at position 3 is 0, so the stand-in logits do not show that it is read: NaN, then everywhere
    "read with zero gradient": lambda logits: logits[:, -1, 5].sum() + 0 * logits[:, 3, 0].sum(),
}


@pytest.mark.parametrize("arch", DELTA_RULE_ARCHS)
@pytest.mark.parametrize("metric", list(METRICS))
def test_scores_equal_the_straightforward_computation(tiny_models, arch, metric):
    model, metric_fn = tiny_models[arch], METRICS[metric]
    clean, corrupt = pair()
    truth_clean, truth_corrupt, truth = straightforward(model, clean, corrupt, metric_fn)
    ap = attribution_patching(model, clean, corrupt, metric_fn, sites=SITES, time_forward=False)
    assert ap.clean == pytest.approx(truth_clean, rel=1e-6, abs=1e-7)
    assert ap.corrupt == pytest.approx(truth_corrupt, rel=1e-6, abs=1e-7)
    for site in SITES:
        scale = float(truth[site].abs().max())
        assert scale > 0, site
        torch.testing.assert_close(ap.grids[site], truth[site], rtol=1e-5, atol=1e-5 * scale)
        assert not ap.grids[site][:, :, :5].any()  # before the change both runs are the same: exactly 0


@pytest.mark.parametrize("arch", DELTA_RULE_ARCHS)
def test_state_scores_equal_the_whole_runs(tiny_models, arch, monkeypatch):
    """hook_state's estimate (the adjoint scan) on the shortened runs equals the one on the whole runs."""
    from deltalens.interp import attribution_patching as module

    model, metric = tiny_models[arch], METRICS["reveals, some before the change"]
    clean, corrupt = pair()
    starts = []

    def spy(*args):
        runs = attribution_runs.attribution_runs(*args)
        starts.append(runs.start)
        return runs

    monkeypatch.setattr(module, "attribution_runs", spy)
    lean = attribution_patching(model, clean, corrupt, metric, sites=("z", "state"), time_forward=False)
    monkeypatch.setattr(attribution_runs, "_lean", lambda model: False)
    whole = attribution_patching(model, clean, corrupt, metric, sites=("z", "state"), time_forward=False)
    shares = all(isinstance(block.attn, HookedRecurrenceMixin) for block in model.blocks)
    assert starts == [5 if shares else 0, 0]
    for site in ("z", "state"):
        scale = float(whole.grids[site].abs().max())
        assert scale > 0
        torch.testing.assert_close(lean.grids[site], whole.grids[site], rtol=1e-5, atol=1e-5 * scale)


def test_the_lm_head_runs_where_the_metric_reads_and_weights_get_no_gradient(tiny_model):
    model = tiny_model("deltanet")
    heads, mixers = [], []
    hooks = [
        model.lm_head.register_forward_hook(lambda module, args, out: heads.append(tuple(args[0].shape[:2]))),
        model.blocks[0].attn.register_forward_hook(lambda module, args, out: mixers.append(args[0].shape[1])),
    ]
    clean, corrupt = pair(T=12, at=5)
    try:
        attribution_patching(model, clean, corrupt, METRICS["last position"], sites=SITES, time_forward=False)
    finally:
        for hook in hooks:
            hook.remove()
    assert heads == [(3, 1), (3, 1)]  # clean, corrupted: at the one position the metric reads
    assert mixers == [12, 7]  # the clean run whole, the corrupted one from the first position that differs
    assert all(p.requires_grad and p.grad is None for p in model.parameters())


def test_read_positions():
    def read(metric):
        return attribution_runs.read_positions(metric, (2, 6, 5), torch.float32, "cpu")

    assert read(lambda x: x[:, [1, 4], 0].sum()).tolist() == [1, 4]
    assert read(lambda x: x[1, 3].max()).tolist() == [3]
    assert read(lambda x: x.mean()) is None  # every position
    assert read(lambda x: x.shape[0]) is None  # not a tensor: the real run says so
    # positions picked by the logits' values: two random draws disagree, so every position is computed
    assert read(lambda x: torch.where(x[..., 0] > 0, x[..., 1], torch.zeros(())).sum()) is None
