"""interp.split_interventions: each against a per-step reference recurrence with separate transition
and write betas (random tiny models of the three delta-rule families), and end to end on the hand-set
swap tracker (answers known)."""

import pytest
import torch
from handset import swap_model

from deltalens.core.errors import DeltalensError
from deltalens.interp.head_sweep import sweep
from deltalens.interp.interventions import accuracy_under, clip_beta
from deltalens.interp.split_interventions import (
    FLOOR,
    abs_eigenvalue,
    clip_transition,
    clip_write,
    rescale_transition,
    scale_write,
)

HEAD = 1
TOKENS = torch.randint(1, 23, (3, 40), generator=torch.Generator().manual_seed(5))


def reference_z(q, k, v, transition, write, alpha):
    """o_t = S_t^T q_t / sqrt(d_k), token by token in float64:
    S <- alpha_t S; then per factor j: S <- (I - a_j k_j k_j^T) S + b_j k_j v_j^T."""
    q, k, v, a, b = (x.double() for x in (q, k, v, transition, write))
    B, T, H, n, K = k.shape
    S = torch.zeros(B, H, K, v.shape[-1], dtype=torch.float64)
    out = []
    for t in range(T):
        if alpha is not None:
            S = alpha[:, t, :, None, None].double() * S
        for j in range(n):
            kj = k[:, t, :, j]
            read = torch.einsum("bhk,bhkv->bhv", kj, S)
            S = S + torch.einsum("bhk,bhv->bhkv", kj, b[:, t, :, j, None] * v[:, t, :, j] - a[:, t, :, j, None] * read)
        out.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]) * K**-0.5)
    return torch.stack(out, 1)


def close(got, want, tolerance=1e-4) -> bool:
    """Equal up to `tolerance` of the largest |want| (a random tiny model's z is ~1e-3)."""
    want = want.double()
    return float((got.double() - want).abs().max()) <= tolerance * float(want.abs().max())


def layer0(model, hooks=()):
    """Layer 0's recurrence inputs, with a factor axis for every family, and its z, under `hooks`."""
    names = [f"blocks.0.attn.hook_{x}" for x in ("q", "k", "v", "beta", "gate", "z")]
    with torch.no_grad(), model.hooks(fwd_hooks=list(hooks)):
        _, cache = model.run_with_cache(TOKENS, names_filter=lambda name: name in names)
    got = {name.split("hook_")[1]: cache[name] for name in names if name in cache}
    if got["beta"].ndim == 3:  # no factor axis: DeltaNet, Gated DeltaNet
        got["k"], got["v"], got["beta"] = got["k"][:, :, :, None], got["v"][:, :, :, None], got["beta"][..., None]
    return got


def saturate(logit, hook):
    """Spread beta over [0, 2] with some exact 0s and 2s (a saturated sigmoid): the cases that need care."""
    out = logit * 6.0
    out[:, ::5] = 40.0
    out[:, 2::7] = -1000.0  # sigmoid = 0 exactly in fp32
    return out


SPLITS = {
    "clip": (lambda m, f: clip_transition(m, 0, HEAD, hi=1.0, factor=f), lambda b: (b.clamp(max=1.0), b)),
    "range": (lambda m, f: rescale_transition(m, 0, HEAD, to=(0.0, 1.0), factor=f), lambda b: (b / 2, b)),
    "abs": (lambda m, f: abs_eigenvalue(m, 0, HEAD, factor=f), lambda b: (1 - (1 - b).abs(), b)),
    "write": (lambda m, f: scale_write(m, 0, HEAD, scale=0.5, factor=f), lambda b: (b, b / 2)),
    "write-clip": (lambda m, f: clip_write(m, 0, HEAD, hi=1.0, factor=f), lambda b: (b, b.clamp(max=1.0))),
}


@pytest.mark.parametrize("states", [False, True], ids=["fast", "with-states"])
@pytest.mark.parametrize("kind", sorted(SPLITS))
@pytest.mark.parametrize(
    "arch,factor", [("deltanet", None), ("gated_deltanet", None), ("deltaproduct", None), ("deltaproduct", 1)]
)
def test_split_matches_the_reference_recurrence(tiny_models, arch, factor, kind, states):
    model = tiny_models[arch]
    logit = [("blocks.0.attn.hook_beta_logit", saturate)]
    # a hook on hook_state makes the layer run its states kernel instead of the fast one
    watch = [("blocks.0.attn.hook_state", lambda s, hook: None)] if states else []
    clean = layer0(model, logit)
    beta = clean["beta"]
    assert (beta == 2).any() and (beta == 0).any() and ((beta > 1) & (beta < 2)).any()
    alpha = clean.get("gate")
    z = reference_z(clean["q"], clean["k"], clean["v"], beta, beta, alpha)
    assert close(clean["z"], z)  # the reference is the model's recurrence

    build, target = SPLITS[kind]
    iv = build(model, factor)
    got = layer0(model, [*watch, *logit, *iv.hooks])["z"]
    a, b = beta.clone(), beta.clone()
    where = (slice(None), slice(None), HEAD) + ((factor,) if factor is not None else ())
    a[where], b[where] = target(beta[where])
    want = reference_z(clean["q"], clean["k"], clean["v"], a, b, alpha)
    assert close(got, want)
    # and it is neither the plain recurrence nor the beta edit that changes both uses
    assert not close(got, clean["z"], 1e-2)
    if not kind.startswith("write"):
        assert not close(got, reference_z(clean["q"], clean["k"], clean["v"], a, a, alpha), 1e-2)


def test_identity_maps_change_nothing(tiny_models):
    model = tiny_models["deltaproduct"]
    plain = model(TOKENS)
    for iv in (clip_transition(model, 0, HEAD, hi=2.0), scale_write(model, 1, 0, scale=1.0)):
        with iv.applied(model):
            assert torch.equal(model(TOKENS), plain)
    with clip_transition(model, 0, None, hi=0.0).applied(model):  # every transition the identity, writes kept
        moved = model(TOKENS)
    assert torch.isfinite(moved).all() and not torch.allclose(moved, plain, atol=1e-3)


def test_splits_compose_on_one_layer(tiny_models):
    model = tiny_models["gated_deltanet"]
    clean = layer0(model)
    beta = clean["beta"]
    iv = clip_transition(model, 0, 0, hi=0.5) + scale_write(model, 0, 1, scale=0.25) + abs_eigenvalue(model, 0, 1)
    got = layer0(model, iv.hooks)["z"]
    a, b = beta.clone(), beta.clone()
    a[:, :, 0] = beta[:, :, 0].clamp(max=0.5)
    a[:, :, 1], b[:, :, 1] = 1 - (1 - beta[:, :, 1]).abs(), beta[:, :, 1] / 4
    want = reference_z(clean["q"], clean["k"], clean["v"], a, b, clean["gate"])
    assert close(got, want) and not close(got, clean["z"], 1e-2)


def test_the_two_halves_of_the_beta_clip(tiny_models):
    model, logit = tiny_models["deltaproduct"], [("blocks.0.attn.hook_beta_logit", saturate)]
    both = layer0(model, [*logit, *clip_beta(model, 0, HEAD).hooks])["z"]
    halves = clip_transition(model, 0, HEAD) + clip_write(model, 0, HEAD)
    assert close(layer0(model, [*logit, *halves.hooks])["z"], both)
    assert not close(layer0(model, [*logit, *clip_transition(model, 0, HEAD).hooks])["z"], both, 1e-2)


def test_errors(tiny_models):
    model = tiny_models["deltanet"]
    iv = clip_transition(model, 0, HEAD)
    with pytest.raises(DeltalensError, match="did not run first"), model.hooks(fwd_hooks=iv.hooks[1:]):
        model(TOKENS)
    with pytest.raises(DeltalensError, match="0 <= hi <= 2"):
        clip_transition(model, 0, HEAD, hi=float("nan"))
    with pytest.raises(DeltalensError, match="write scale"):
        scale_write(model, 0, HEAD, scale=-1)
    with pytest.raises(DeltalensError, match="factor 1 is out of range"):
        abs_eigenvalue(model, 0, HEAD, factor=1)
    with pytest.raises(DeltalensError, match="head 5 is out of range"):
        rescale_transition(model, 0, 5)
    assert 0 < FLOOR < 1e-3


# ---- end to end on the hand-set tracker: it needs the reflection, not the write strength ----------

TRACK = (1, 1)
DECOYS = [(0, 0), (0, 1), (1, 0)]


@pytest.fixture(scope="module")
def hand():
    return swap_model()


@pytest.fixture(scope="module")
def batch(hand):
    return hand.batch(48, seed=7)


def test_the_tracker_needs_the_reflection_not_the_write(hand, batch):
    model = hand.model
    assert accuracy_under(model, batch) == 1.0
    assert accuracy_under(model, batch, clip_transition(model, *TRACK)) < 0.6
    assert accuracy_under(model, batch, abs_eigenvalue(model, *TRACK)) < 0.6
    assert accuracy_under(model, batch, rescale_transition(model, *TRACK)) < 0.6
    # halving the write halves the whole state (every write has beta 1): o_norm reads the same values
    assert accuracy_under(model, batch, scale_write(model, *TRACK, scale=0.5)) == 1.0
    for layer, head in DECOYS:
        for iv in (clip_transition(model, layer, head), abs_eigenvalue(model, layer, head)):
            assert accuracy_under(model, batch, iv) == 1.0
    assert accuracy_under(model, batch, clip_write(model, *TRACK)) == 1.0  # its writes have beta 1
    # with an exact reflection (beta 2, v = 0 on actions) the transition-only clip is the plain clip
    with clip_transition(model, *TRACK).applied(model):
        split = model(batch["tokens"])
    with clip_beta(model, *TRACK).applied(model):
        both = model(batch["tokens"])
    assert torch.allclose(split, both, atol=1e-5)


@pytest.mark.parametrize("name", ["transition-clip", "eigen-abs"])
def test_sweeps_rank_the_tracker_first(hand, batch, name):
    result = sweep(hand.model, batch, name, progress=False)
    assert (int(result.frame.iloc[0]["layer"]), int(result.frame.iloc[0]["head"])) == TRACK
    assert result.intervention == name and (result.frame.iloc[1:]["accuracy"] == 1.0).all()
    halved = sweep(hand.model, batch, "write-half", progress=False)
    assert (halved.frame["accuracy"] == 1.0).all()
    with pytest.raises(DeltalensError, match="pairs two hooks"):
        sweep(hand.model, batch, name, progress=False, top_k=2)
