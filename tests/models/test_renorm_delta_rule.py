"""Renormalised delta rule: S <- S / ||S||_F after every R-th token, on every kernel path and in the model."""

import json

import pytest
import torch
import torch.nn.functional as F

import deltalens.models.ops.fla_kernels as fla_kernels_module
from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.models.ops.delta_rule import (
    chunk_delta_rule,
    chunk_delta_rule_with_states,
    delta_rule_recurrence,
    renormalise_state,
    replay_with_state_edits,
)
from deltalens.models.ops.fla_kernels import fla_delta_rule_renorm

TOL = 1e-5  # fp32 max abs error between the chunked paths and the reference (states have norm ~1)
GRAD_TOL = 1e-4


def make_inputs(B=2, T=23, H=2, K=6, V=4, seed=0, requires_grad=False, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=g, dtype=dtype)
    k = F.normalize(torch.randn(B, T, H, K, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(B, T, H, V, generator=g, dtype=dtype)
    beta = torch.rand(B, T, H, generator=g, dtype=dtype) * 2.0
    h0 = torch.randn(B, H, K, V, generator=g, dtype=dtype)
    tensors = [q, k, v, beta, h0]
    if requires_grad:
        tensors = [t.requires_grad_() for t in tensors]
    return tensors


def maxerr(a, b):
    return (a.float() - b.float()).abs().max().item()


def frob(S):  # (..., K, V) -> (...)
    return torch.linalg.vector_norm(S.float(), dim=(-2, -1))


def renorm_points(T, R):
    return [t for t in range(T) if (t + 1) % R == 0]


# ---- (a) chunked == reference -------------------------------------------------------------------


@pytest.mark.parametrize("R", [1, 3, 5, 16])
@pytest.mark.parametrize("chunk_size", [4, 64])
@pytest.mark.parametrize("T", [23, 30])  # 23: no multiple of 3, 5, 16; 30: ends on a point for 1, 3, 5
def test_chunked_paths_match_reference_recurrence(R, chunk_size, T):
    q, k, v, beta, h0 = make_inputs(T=T, seed=R * 100 + T)
    ref_o, ref_S, ref_states = delta_rule_recurrence(
        q, k, v, beta, initial_state=h0, output_final_state=True, renorm_every=R
    )
    o, S = chunk_delta_rule(
        q, k, v, beta, initial_state=h0, output_final_state=True, chunk_size=chunk_size, renorm_every=R
    )
    o_w, S_w, states = chunk_delta_rule_with_states(
        q, k, v, beta, initial_state=h0, output_final_state=True, chunk_size=chunk_size, renorm_every=R
    )
    assert o.shape == ref_o.shape and states.shape == ref_states.shape
    assert maxerr(o, ref_o) <= TOL and maxerr(S, ref_S) <= TOL
    assert maxerr(o_w, ref_o) <= TOL and maxerr(S_w, ref_S) <= TOL
    assert maxerr(states, ref_states) <= TOL
    assert maxerr(states[:, -1], S_w) <= TOL


def test_fla_segment_loop_matches_reference(monkeypatch):
    # fla's kernels need CUDA; check the per-segment loop around them with our kernel standing in.
    def stand_in(
        q, k, v, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, chunk_size, recurrent=False
    ):
        return chunk_delta_rule(
            q,
            k,
            v,
            beta,
            scale=scale,
            initial_state=initial_state,
            output_final_state=output_final_state,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
            chunk_size=chunk_size,
            use_fla=False,
        )

    monkeypatch.setattr(fla_kernels_module, "fla_delta_rule", stand_in)
    q, k, v, beta, h0 = make_inputs(T=23)
    for R, init in [(4, h0), (5, None), (23, h0)]:
        ref_o, ref_S, _ = delta_rule_recurrence(
            q, k, v, beta, initial_state=init, output_final_state=True, renorm_every=R
        )
        o, S = fla_delta_rule_renorm(q, k, v, beta, None, init, True, False, 64, R)
        assert maxerr(o, ref_o) <= TOL and maxerr(S, ref_S) <= TOL


def test_l2norm_in_kernel_and_custom_scale_with_renorm():
    q, k, v, beta, h0 = make_inputs(T=19)
    k = k * 3.0
    kwargs = dict(scale=0.7, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True, renorm_every=3)
    ref_o, ref_S, _ = delta_rule_recurrence(q, k, v, beta, **kwargs)
    o, S = chunk_delta_rule(q, k, v, beta, chunk_size=4, **kwargs)
    assert maxerr(o, ref_o) <= TOL and maxerr(S, ref_S) <= TOL


# ---- (b) renorm_every = 0 is the plain delta rule ---------------------------------------------------


def test_renorm_every_zero_is_exactly_the_plain_delta_rule():
    q, k, v, beta, h0 = make_inputs(T=37)
    common = dict(initial_state=h0, output_final_state=True)
    for fn, extra in [
        (delta_rule_recurrence, {}),
        (chunk_delta_rule, dict(chunk_size=16)),
        (chunk_delta_rule_with_states, dict(chunk_size=16)),
    ]:
        plain = fn(q, k, v, beta, **common, **extra)
        zero = fn(q, k, v, beta, **common, **extra, renorm_every=0)
        for a, b in zip(plain, zero):
            assert torch.equal(a, b)
    # A period longer than the sequence never renormalises: the same numbers as the plain chunked
    # torch kernel (the renormalised path's; without native=False the plain one would take the C kernel).
    plain = chunk_delta_rule_with_states(q, k, v, beta, chunk_size=16, native=False, **common)
    never = chunk_delta_rule_with_states(q, k, v, beta, chunk_size=16, renorm_every=1000, **common)
    for a, b in zip(plain, never):
        assert torch.equal(a, b)


def test_bad_renorm_every_is_refused():
    q, k, v, beta, _ = make_inputs(T=5)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="renorm_every"):
            chunk_delta_rule(q, k, v, beta, renorm_every=bad)
        with pytest.raises(ValueError, match="renorm_every"):
            delta_rule_recurrence(q, k, v, beta, renorm_every=bad)


# ---- (c) unit norm at every renormalisation point ---------------------------------------------------


def test_renormalise_state_unit_norm_and_zero_stays_zero():
    S = torch.randn(2, 3, 4, 5, dtype=torch.float64) * 7.0
    S[1, 2] = 0.0
    out = renormalise_state(S)
    assert out.dtype == torch.float64
    norms = frob(out)
    assert torch.allclose(norms[0], torch.ones(3, dtype=torch.float32), atol=1e-6)
    assert torch.equal(out[1, 2], torch.zeros(4, 5, dtype=torch.float64))
    assert torch.allclose(out[0, 0] * frob(S[0, 0]), S[0, 0].float().to(torch.float64), atol=1e-9)


@pytest.mark.parametrize("R", [1, 4, 7])
def test_state_norm_is_one_after_each_renormalisation(R):
    q, k, v, beta, h0 = make_inputs(T=30, seed=R)
    _, _, plain = delta_rule_recurrence(q, k, v, beta, initial_state=h0)
    _, _, ref_states = delta_rule_recurrence(q, k, v, beta, initial_state=h0, renorm_every=R)
    _, _, states = chunk_delta_rule_with_states(q, k, v, beta, initial_state=h0, chunk_size=4, renorm_every=R)
    points = renorm_points(30, R)
    for trajectory in (ref_states, states):
        assert (frob(trajectory[:, points]) - 1.0).abs().max() <= 1e-5
    assert (frob(plain[:, points]) - 1.0).abs().max() > 0.1  # so the assertion above can fail
    if R > 1:  # between the points the norm drifts again
        between = [t for t in range(30) if t not in points]
        assert (frob(ref_states[:, between]) - 1.0).abs().max() > 1e-3


# ---- (d) gradients ------------------------------------------------------------------------------------


@pytest.mark.parametrize("R, chunk_size", [(3, 4), (5, 64), (1, 4)])
def test_gradients_flow_and_match_reference(R, chunk_size):
    def grads(run):
        q, k, v, beta, h0 = make_inputs(T=17, seed=3, requires_grad=True)
        g = torch.Generator().manual_seed(9)
        o, S, states = run(q, k, v, beta, h0)
        loss = (o * torch.randn(o.shape, generator=g)).sum() + (S * torch.randn(S.shape, generator=g)).sum()
        if states is not None:
            loss = loss + (states * torch.randn(states.shape, generator=g)).sum()
        loss.backward()
        return [t.grad for t in (q, k, v, beta, h0)]

    def ref(q, k, v, beta, h0, states=False):
        o, S, st = delta_rule_recurrence(q, k, v, beta, initial_state=h0, output_final_state=True, renorm_every=R)
        return o, S, (st if states else None)

    ref_grads = grads(ref)
    chunk_grads = grads(
        lambda q, k, v, beta, h0: (
            *chunk_delta_rule(
                q, k, v, beta, initial_state=h0, output_final_state=True, chunk_size=chunk_size, renorm_every=R
            ),
            None,
        )
    )
    for a, b in zip(chunk_grads, ref_grads):
        assert a is not None and torch.isfinite(a).all()
        assert maxerr(a, b) <= GRAD_TOL
    ref_grads = grads(lambda *x: ref(*x, states=True))
    state_grads = grads(
        lambda q, k, v, beta, h0: chunk_delta_rule_with_states(
            q, k, v, beta, initial_state=h0, output_final_state=True, chunk_size=chunk_size, renorm_every=R
        )
    )
    for a, b in zip(state_grads, ref_grads):
        assert torch.isfinite(a).all() and maxerr(a, b) <= GRAD_TOL


# ---- edits and replay -----------------------------------------------------------------------------------


def test_edit_comes_after_renormalisation():
    q, k, v, beta, h0 = make_inputs(T=12)
    seen = {}

    def edit(t, S):
        seen[t] = frob(S).clone()
        return S * 3.0 if t == 3 else S

    _, _, states = delta_rule_recurrence(q, k, v, beta, initial_state=h0, edit=edit, renorm_every=4)
    assert (seen[3] - 1.0).abs().max() <= 1e-5  # the edit sees the renormalised state ...
    assert (frob(states[:, 3]) - 3.0).abs().max() <= 1e-5  # ... and has the last word
    assert (frob(states[:, 7]) - 1.0).abs().max() <= 1e-5  # the next point renormalises again


@pytest.mark.parametrize("edit_steps", [[3], [6], [2, 9], [0, 1, 11]])
def test_replay_respects_renormalisation(edit_steps):
    q, k, v, beta, h0 = make_inputs(T=14, seed=5)
    R = 4
    _, _, original = delta_rule_recurrence(q, k, v, beta, initial_state=h0, renorm_every=R)
    g = torch.Generator().manual_seed(1)
    replacements = {t: torch.randn(original[:, t].shape, generator=g) for t in edit_steps}
    edited = original.clone()
    for t, S in replacements.items():
        edited[:, t] = S

    o, states = replay_with_state_edits(q, k, v, beta, original, edited, chunk_size=4, renorm_every=R)
    ref_o, _, ref_states = delta_rule_recurrence(
        q, k, v, beta, initial_state=h0, renorm_every=R, edit=lambda t, S: replacements.get(t, S)
    )
    assert maxerr(states, ref_states) <= TOL
    assert maxerr(o, ref_o) <= TOL


# ---- (g) the decay that renormalisation removes ---------------------------------------------------------


def test_plain_state_underflows_renormalised_state_keeps_unit_norm():
    # beta = 1 projects the key's direction out of S; with values zero nothing is written back.
    # Keys alternating between two unit vectors 60 degrees apart halve ||S|| at every step, so after
    # 300 steps the plain state is 2^-299 ~ 1e-90: below float32's smallest subnormal, i.e. zero.
    T, R = 300, 4
    angle = torch.tensor(torch.pi / 3)
    k1, k2 = torch.tensor([1.0, 0.0]), torch.stack([torch.cos(angle), torch.sin(angle)])
    k = torch.stack([k1 if t % 2 == 0 else k2 for t in range(T)]).view(1, T, 1, 2)
    q = torch.ones(1, T, 1, 2)
    v = torch.zeros(1, T, 1, 2)
    beta = torch.ones(1, T, 1)
    h0 = torch.tensor([[0.0, 0.0], [1.0, 0.0]]).view(1, 1, 2, 2)  # unit norm, orthogonal to k1

    o_plain, S_plain, plain = delta_rule_recurrence(q, k, v, beta, initial_state=h0, output_final_state=True)
    assert frob(plain[0, 20, 0]) < 1e-5  # orders of magnitude down after 20 steps
    assert frob(S_plain).max() == 0.0  # underflowed: the state, and so every read-out, is gone
    assert o_plain[0, -1].abs().max() == 0.0

    points = renorm_points(T, R)
    o_ref, _, ref = delta_rule_recurrence(q, k, v, beta, initial_state=h0, renorm_every=R)
    _, _, chunked = chunk_delta_rule_with_states(q, k, v, beta, initial_state=h0, chunk_size=64, renorm_every=R)
    for states in (ref, chunked):
        assert (frob(states[0, points, 0]) - 1.0).abs().max() <= 1e-5
        assert frob(states[0, :, 0]).min() > 1e-2  # at most R steps of halving between points
    assert o_ref[0, -1].abs().max() > 1e-2


# ---- (e, f) the model ----------------------------------------------------------------------------------


def build(state_norm_every=None, seed=0):
    kwargs = dict(
        vocab_size=13, hidden_size=32, num_heads=2, num_hidden_layers=2, allow_neg_eigval=True, initializer_range=0.2
    )
    if state_norm_every is not None:
        kwargs["state_norm_every"] = state_norm_every
    torch.manual_seed(seed)
    return models.build("deltanet", **kwargs).eval()


def tokens(T=40, seed=0):
    return torch.randint(0, 13, (2, T), generator=torch.Generator().manual_seed(seed))


def test_model_config_round_trip_and_same_parameters(tmp_path):
    model = build(4)
    plain = build()
    assert model.model_config["state_norm_every"] == 4 and "state_norm_every" not in plain.model_config
    assert model.cfg.state_norm_every == 4 and plain.cfg.state_norm_every == 0
    assert all(block.attn.state_norm_every == 4 for block in model.blocks)
    sd, plain_sd = model.state_dict(), plain.state_dict()
    assert list(sd) == list(plain_sd)
    assert all(sd[key].shape == plain_sd[key].shape for key in sd)

    models.save(model, tmp_path / "renorm")
    config = json.loads((tmp_path / "renorm" / "config.json").read_text())
    assert config["state_norm_every"] == 4
    assert config["deltalens"]["model_config"]["state_norm_every"] == 4
    loaded = models.load(tmp_path / "renorm")
    assert loaded.state_norm_every == 4 and loaded.model_config["state_norm_every"] == 4

    # The same weights in a plain model (and back): they load, and the logits differ.
    plain.load_state_dict(model.state_dict())
    toks = tokens()
    with torch.no_grad():
        logits, loaded_logits, plain_logits = model(toks), loaded(toks), plain(toks)
        overridden = models.load(tmp_path / "renorm", state_norm_every=0)(toks)
    assert torch.equal(logits, loaded_logits)
    assert maxerr(plain_logits, overridden) == 0.0
    assert maxerr(logits, plain_logits) > 1e-2
    # Before the first renormalisation point (t < 4) nothing differs.
    assert maxerr(logits[:, :3], plain_logits[:, :3]) <= 1e-5


def test_build_refuses_bad_state_norm_every():
    for bad in (-2, 1.5, "4"):
        with pytest.raises(DeltalensError, match="state_norm_every"):
            build(bad)


@pytest.mark.parametrize("R, chunk_size", [(4, 64), (5, 4)])
def test_hook_state_matches_reference_recurrence(R, chunk_size):
    model = build(R)
    model.set_kernel(use_fla=False, chunk_size=chunk_size)
    toks = tokens(T=23)
    with torch.no_grad():
        logits, cache = model.run_with_cache(toks)
        plain_logits = model(toks)
    assert maxerr(logits, plain_logits) <= 1e-5  # with-states path == chunked path
    for layer in range(2):
        a = f"blocks.{layer}.attn."
        ref_o, _, ref_states = delta_rule_recurrence(
            cache[a + "hook_q"], cache[a + "hook_k"], cache[a + "hook_v"], cache[a + "hook_beta"], renorm_every=R
        )
        assert maxerr(cache[a + "hook_state"], ref_states) <= TOL
        assert maxerr(cache[a + "hook_z"], ref_o) <= TOL
        norms = frob(cache[a + "hook_state"][:, renorm_points(23, R)])
        assert (norms - 1.0).abs().max() <= 1e-5


@pytest.mark.parametrize("t", [6, 7])  # inside a segment, and at a renormalisation point (R = 4)
@pytest.mark.parametrize("in_place", [False, True])
def test_state_patching_on_renormalised_model_agrees_with_state_edit(t, in_place):
    model = build(4)
    toks = tokens(T=20)

    def hook(states, hook):
        if in_place:
            states[:, t] *= -2.0
            return None
        states = states.clone()
        states[:, t] *= -2.0
        return states

    with torch.no_grad():
        base = model(toks)
        via_hook = model.run_with_hooks(toks, fwd_hooks=[("blocks.1.attn.hook_state", hook)])
        with model.state_edit(1, lambda step, S: S * -2.0 if step == t else S):
            via_context = model(toks)
        with model.state_edit(1, lambda step, S: S):
            identity = model(toks)
    assert maxerr(identity, base) <= 1e-5  # the recurrence path renormalises too
    assert maxerr(via_hook, via_context) <= 1e-5
    assert maxerr(via_hook[:, :t], base[:, :t]) <= 1e-5
    assert maxerr(via_hook[:, t:], base[:, t:]) > 1e-4
