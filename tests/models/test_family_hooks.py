"""Hooks and interventions of HookedGatedDeltaNet and HookedDeltaProduct: names, shapes, and that an
edit at a hook changes exactly what it should."""

import pytest
import torch

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import capture, expand_names
from deltalens.interp.interventions import clamp_gate, patch_state, rescale_beta
from deltalens.models.lm.hook_names import ACT_NAMES, act_name, deltanet_hook_names
from deltalens.models.ops.gated_delta_rule import interleave, token_transition

BASE = dict(vocab_size=23, hidden_size=32, num_hidden_layers=2, num_heads=2, head_dim=8)


def build(arch="deltaproduct", seed=0, **overrides):
    torch.manual_seed(seed)
    config = dict(BASE, allow_neg_eigval=True)
    if arch == "deltaproduct":
        config.update(num_householder=3, use_forget_gate=True)
    config.update(overrides)
    return models.build(arch, **config).eval()


TOKENS = torch.randint(1, 23, (3, 19), generator=torch.Generator().manual_seed(5))


@pytest.mark.parametrize("arch, gated", [("gated_deltanet", True), ("deltaproduct", True), ("deltaproduct", False)])
def test_hook_names_and_shapes(arch, gated):
    model = build(arch, **({} if arch == "gated_deltanet" else {"use_forget_gate": gated}))
    assert set(model.hook_dict) == set(deltanet_hook_names(2, gated=gated))
    _, cache = model.run_with_cache(TOKENS)
    assert set(cache.keys()) == set(model.hook_dict)
    B, T, H, K = 3, 19, 2, 8
    n = (3,) if arch == "deltaproduct" else ()
    a = "blocks.1.attn."
    assert cache[a + "hook_q"].shape == (B, T, H, K)
    assert cache[a + "hook_k"].shape == (B, T, H, *n, K)
    assert cache[a + "hook_beta"].shape == (B, T, H, *n)
    assert cache[a + "hook_state"].shape == (B, T, H, K, model.cfg.d_v)
    assert cache[a + "hook_z"].shape == (B, T, H, model.cfg.d_v)
    if gated:
        alpha = cache[a + "hook_gate"]
        assert alpha.shape == (B, T, H) and bool(((alpha > 0) & (alpha <= 1)).all())
    beta = cache[a + "hook_beta"]
    assert bool(((beta >= 0) & (beta <= 2)).all()) and beta.max() > 1  # [0, 2]
    for short in ACT_NAMES[arch]:
        if short == "gate" and not gated:
            continue
        assert act_name(short, 0) in cache or act_name(short, 0) == "ln_final.hook_normalized"


def test_hook_state_is_the_recurrence_state_and_o_reads_it(tiny_models):
    """S_t from the hook, rebuilt from hook_k/v/beta/gate: S_t = A_t S_{t-1} + writes; o_t = S_t^T q_t / sqrt(K)."""
    model = tiny_models["deltaproduct"]  # = build()
    _, cache = model.run_with_cache(TOKENS)
    a = "blocks.0.attn."
    q, k, v, beta, alpha = (cache[a + h] for h in ("hook_q", "hook_k", "hook_v", "hook_beta", "hook_gate"))
    states = cache[a + "hook_state"]
    t = 7
    A = token_transition(k[:, t], beta[:, t], alpha[:, t].log())  # (B, H, K, K) without the writes
    with_zero_values = torch.zeros_like(v[:, t : t + 1])
    from deltalens.models.ops.gated_delta_rule import chunk_gated_delta_rule

    _, S_lin, _ = chunk_gated_delta_rule(
        *interleave(q[:, t : t + 1], k[:, t : t + 1], with_zero_values, beta[:, t : t + 1], alpha[:, t : t + 1].log()),
        initial_state=states[:, t - 1],
        output_final_state=True,
    )
    assert (S_lin - A @ states[:, t - 1]).abs().max() <= 1e-5
    _, S_all, _ = chunk_gated_delta_rule(
        *interleave(q[:, t : t + 1], k[:, t : t + 1], v[:, t : t + 1], beta[:, t : t + 1], alpha[:, t : t + 1].log()),
        initial_state=states[:, t - 1],
        output_final_state=True,
    )
    assert (S_all - states[:, t]).abs().max() <= 1e-5
    o = torch.einsum("bhkv,bhk->bhv", states[:, t], q[:, t]) * model.cfg.d_k**-0.5
    assert (o - cache[a + "hook_z"][:, t]).abs().max() <= 1e-5


@pytest.mark.parametrize("arch", ["gated_deltanet", "deltaproduct"])
def test_patching_a_state_equals_the_state_edit_recurrence(arch, tiny_models):
    """hook_state edits replace S_t (replacement semantics); the same edit through state_edit agrees."""
    model = tiny_models[arch]  # = build(arch)
    other = torch.randint(1, 23, TOKENS.shape, generator=torch.Generator().manual_seed(9))
    _, source = model.run_with_cache(other)
    patched = patch_state(1, 0, source, positions=[6])
    with patched.applied(model):
        got = model(TOKENS)
    src = source["blocks.1.attn.hook_state"]

    def edit(t, S):
        if t != 6:
            return S
        S = S.clone()
        S[:, 0] = src[:, 6, 0]
        return S

    with model.state_edit(1, edit):
        want = model(TOKENS)
    plain = model(TOKENS)
    assert (got - want).abs().max() <= 1e-4
    assert (got[:, :6] - plain[:, :6]).abs().max() <= 1e-5  # before the patch: unchanged
    assert (got[:, 6:] - plain[:, 6:]).abs().max() > 1e-3  # after it: moved


def test_beta_per_factor_and_the_range_intervention(tiny_model):
    model = tiny_model("deltaproduct")  # a copy of build(): set_beta_range edits it
    iv = rescale_beta(model, 0, 1, to=(0.0, 1.0), factor=2)
    _, before = model.run_with_cache(TOKENS)
    with iv.applied(model):
        _, after = model.run_with_cache(TOKENS)
    b0, b1 = before["blocks.0.attn.hook_beta"], after["blocks.0.attn.hook_beta"]
    assert torch.allclose(b1[:, :, 1, 2], b0[:, :, 1, 2] / 2)
    untouched = torch.ones_like(b0, dtype=torch.bool)
    untouched[:, :, 1, 2] = False
    assert torch.equal(b1[untouched], b0[untouched])
    # the hook equals the model's own per-factor range
    model.set_beta_range(0, 1, 0.0, 1.0, factor=2)
    _, ranged = model.run_with_cache(TOKENS)
    assert (ranged["blocks.0.attn.hook_beta"] - b1).abs().max() <= 1e-6
    model.reset_beta_range()
    with pytest.raises(DeltalensError, match="factor"):
        rescale_beta(model, 0, 1, factor=3)


def test_gate_clamp_switches_forgetting_off(tiny_model):
    model = tiny_model("gated_deltanet")  # a copy of build("gated_deltanet"): gate_range edits it
    iv = clamp_gate(model, 0, None, 1.0, 1.0)
    with iv.applied(model):
        _, cache = model.run_with_cache(TOKENS)
        by_hook = model(TOKENS)
    assert torch.equal(cache["blocks.0.attn.hook_gate"], torch.ones_like(cache["blocks.0.attn.hook_gate"]))
    with model.gate_range(0, None, 1.0, 1.0):
        by_range = model(TOKENS)
    assert (by_hook - by_range).abs().max() <= 1e-5
    assert (by_hook - model(TOKENS)).abs().max() > 1e-4  # the gate mattered
    with pytest.raises(DeltalensError, match="decay"):
        clamp_gate(build(use_forget_gate=False), 0, 0)


def test_capture_shorthands_cover_the_family(tiny_models):
    model = tiny_models["deltaproduct"]  # = build()
    assert expand_names(model, ["gate"]) == ["blocks.0.attn.hook_gate", "blocks.1.attn.hook_gate"]
    with pytest.raises(DeltalensError, match="decay gate"):
        expand_names(build(use_forget_gate=False), ["gate"])
    batch = {"tokens": TOKENS, "lengths": torch.tensor([19, 12, 5])}
    cap = capture(model, batch, names=("beta", "k", "gate"))
    assert cap.layer("beta", 0).shape == (36, 2, 3) and cap.layer("k", 1).shape == (36, 2, 3, 8)


@pytest.mark.parametrize("arch", ["deltanet", "gated_deltanet", "deltaproduct"])
def test_an_in_place_state_edit_with_gradients_on_equals_the_state_edit(arch, tiny_models):
    """A hook that zeroes S_5 in place (returning None) while autograd is on: only step 5 counts as edited
    (the states the hook was shown are recomputed by the same numerical path), as with state_edit."""
    model = tiny_models[arch]  # = build(arch); DeltaNet: the same sizes, no head_dim

    def zero_in_place(states, hook):
        states[:, 5] = 0.0

    edited = model.run_with_hooks(TOKENS, fwd_hooks=[("blocks.0.attn.hook_state", zero_in_place)])
    with model.state_edit(0, lambda t, S: torch.zeros_like(S) if t == 5 else S):
        reference = model(TOKENS)
    assert torch.is_grad_enabled() and (edited - reference).abs().max() <= 1e-5
    assert (edited - model(TOKENS)).abs().max() > 1e-3


@pytest.mark.parametrize("arch", ["deltanet", "gated_deltanet", "deltaproduct"])
def test_capturing_states_without_gradients_takes_the_c_kernel_and_changes_nothing(arch, tiny_models):
    """Under no_grad the C kernel copies hook_state out as it runs: the logits are the plain forward's
    to the bit, and the states are the chunked torch kernel's."""
    from deltalens.models.ops.native import native_kernels

    model = tiny_models[arch]  # = build(arch); DeltaNet: the same sizes, no head_dim
    only_states = dict(names_filter=lambda name: name.endswith("hook_state"))
    with torch.no_grad():
        plain = model(TOKENS)
        logits, cache = model.run_with_cache(TOKENS, **only_states)
        with native_kernels(False):
            torch_logits, torch_cache = model.run_with_cache(TOKENS, **only_states)
    assert torch.equal(logits, plain)
    assert (logits - torch_logits).abs().max() <= 1e-4
    for name in torch_cache.keys():
        assert (cache[name] - torch_cache[name]).abs().max() <= 1e-5, name


@pytest.mark.parametrize("arch", ["gated_deltanet", "deltaproduct"])
def test_patching_a_state_without_gradients_equals_the_state_edit_recurrence(arch, tiny_models):
    """The C-kernel capture and replay (no_grad) give the state_edit recurrence's output too."""
    model = tiny_models[arch]  # = build(arch)
    other = torch.randint(1, 23, TOKENS.shape, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        _, source = model.run_with_cache(other)
        with patch_state(1, 1, source, positions=[4, 11]).applied(model):
            got = model(TOKENS)
        src = source["blocks.1.attn.hook_state"]

        def edit(t, S):
            if t not in (4, 11):
                return S
            S = S.clone()
            S[:, 1] = src[:, t, 1]
            return S

        with model.state_edit(1, edit):
            want = model(TOKENS)
    assert (got - want).abs().max() <= 1e-4 and (got - model(TOKENS)).abs().max() > 1e-3
