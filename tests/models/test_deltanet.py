"""HookedDeltaNet: hook names, caching, beta ranges and edits that propagate (CPU, no fla kernels)."""

import pytest
import torch
import torch.nn.functional as F
from fla.models import DeltaNetConfig

import deltalens.models.layers.deltanet_mixer as mixer_module
from deltalens.core.errors import DeltalensError
from deltalens.models.lm.deltanet import HookedDeltaNet
from deltalens.models.lm.hook_names import deltanet_hook_names
from deltalens.models.ops.delta_rule import delta_rule_recurrence

VOCAB, T = 23, 40


def make_model(seed=0, **overrides):
    kwargs = dict(
        hidden_size=32, num_heads=2, num_hidden_layers=2, vocab_size=VOCAB, allow_neg_eigval=True, initializer_range=0.2
    )  # larger than fla's 0.02 so that beta, conv and norms all matter
    kwargs.update(overrides)
    torch.manual_seed(seed)
    return HookedDeltaNet(DeltaNetConfig(**kwargs)).eval()


def tokens(batch=2, length=T, seed=0):
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def maxerr(a, b):
    return (a - b).abs().max().item()


# ---- names -----------------------------------------------------------------------------------


def test_hook_dict_uses_transformer_lens_names():
    model = make_model()
    expected = deltanet_hook_names(2)
    assert set(model.hook_dict) == set(expected)
    assert "blocks.1.attn.hook_state" in expected and "ln_final.hook_normalized" in expected
    for name, hook_point in model.hook_dict.items():
        assert hook_point.name == name
        assert model.mod_dict[name] is hook_point
    assert not any(name.startswith("model.") for name in model.mod_dict)
    assert model.mod_dict["blocks.0.attn"] is model.model.layers[0].attn
    assert model.mod_dict["ln_final"] is model.model.norm
    assert (model.cfg.n_layers, model.cfg.n_heads, model.cfg.d_k, model.cfg.d_vocab) == (2, 2, 16, VOCAB)


def test_run_with_cache_keys_and_shapes():
    model = make_model()
    toks = tokens()
    with torch.no_grad():
        logits, cache = model.run_with_cache(toks)
        plain = model(toks)
    B, H, dk, dv, d = 2, 2, 16, 16, 32
    assert logits.shape == (B, T, VOCAB)
    assert maxerr(logits, plain) <= 1e-5  # capturing states does not change the result
    assert set(cache) == set(deltanet_hook_names(2))
    shapes = {
        "hook_embed": (B, T, d),
        "blocks.0.hook_resid_pre": (B, T, d),
        "blocks.0.attn.hook_q": (B, T, H, dk),
        "blocks.0.attn.hook_k": (B, T, H, dk),
        "blocks.0.attn.hook_v": (B, T, H, dv),
        "blocks.0.attn.hook_beta_logit": (B, T, H),
        "blocks.0.attn.hook_beta": (B, T, H),
        "blocks.0.attn.hook_state": (B, T, H, dk, dv),
        "blocks.0.attn.hook_z": (B, T, H, dv),
        "blocks.1.hook_attn_out": (B, T, d),
        "blocks.1.hook_resid_mid": (B, T, d),
        "blocks.1.hook_mlp_out": (B, T, d),
        "blocks.1.hook_resid_post": (B, T, d),
        "ln_final.hook_normalized": (B, T, d),
    }
    for name, shape in shapes.items():
        assert tuple(cache[name].shape) == shape, name
    # residual bookkeeping holds between the hooks
    assert (
        maxerr(cache["blocks.0.hook_resid_mid"], cache["blocks.0.hook_resid_pre"] + cache["blocks.0.hook_attn_out"])
        < 1e-6
    )
    assert maxerr(cache["blocks.1.hook_resid_pre"], cache["blocks.0.hook_resid_post"]) == 0
    # hook_q / hook_k are what the recurrence uses: unit vectors
    assert maxerr(cache["blocks.0.attn.hook_k"].norm(dim=-1), torch.ones(B, T, H)) < 1e-3


def test_pos_slice_cuts_every_hook_along_its_position_axis():
    model = make_model()
    with torch.no_grad():
        _, full = model.run_with_cache(tokens())
        _, cut = model.run_with_cache(tokens(), pos_slice=7)
    for name in ["blocks.0.attn.hook_state", "blocks.0.attn.hook_beta", "blocks.0.attn.hook_q", "hook_embed"]:
        expected = full[name][:, 7:8]
        assert cut[name].shape == expected.shape and torch.equal(cut[name], expected), name


def test_run_with_hooks_and_hooks_context_see_lens_names():
    model = make_model()
    toks = tokens()
    seen = []

    def record(x, hook):
        seen.append(hook.name)

    with torch.no_grad():
        base = model(toks)
        model.run_with_hooks(toks, fwd_hooks=[(lambda n: n.endswith("hook_beta"), record)])
        assert seen == ["blocks.0.attn.hook_beta", "blocks.1.attn.hook_beta"]
        with model.hooks(fwd_hooks=[("blocks.1.hook_resid_post", lambda x, hook: torch.zeros_like(x))]):
            zeroed = model(toks)
        after = model(toks)
    assert maxerr(zeroed, base) > 1e-2
    assert maxerr(after, base) == 0  # the context removed its hook


def test_states_are_computed_only_when_asked(monkeypatch):
    calls = []
    original = mixer_module.chunk_delta_rule_with_states

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(mixer_module, "chunk_delta_rule_with_states", counting)
    model = make_model()
    toks = tokens()
    with torch.no_grad():
        model(toks)
        model.run_with_cache(toks, names_filter=lambda n: "resid" in n or n.endswith("hook_z"))
        assert calls == []
        _, cache = model.run_with_cache(toks, names_filter="blocks.1.attn.hook_state")
        assert len(calls) == 1 and list(cache) == ["blocks.1.attn.hook_state"]


def test_cached_state_and_z_match_reference_recurrence():
    model = make_model()
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens())
    for layer in range(2):
        a = f"blocks.{layer}.attn."
        o, _, states = delta_rule_recurrence(
            cache[a + "hook_q"], cache[a + "hook_k"], cache[a + "hook_v"], cache[a + "hook_beta"]
        )
        assert maxerr(states, cache[a + "hook_state"]) <= 1e-4
        assert maxerr(o, cache[a + "hook_z"]) <= 1e-4


# ---- beta range ------------------------------------------------------------------------------


def test_default_beta_ranges_follow_allow_neg_eigval():
    for neg, top in [(True, 2.0), (False, 1.0)]:
        model = make_model(allow_neg_eigval=neg)
        with torch.no_grad():
            _, cache = model.run_with_cache(tokens(), names_filter=lambda n: "beta" in n)
        logit, beta = cache["blocks.0.attn.hook_beta_logit"], cache["blocks.0.attn.hook_beta"]
        assert maxerr(beta, top * torch.sigmoid(logit)) <= 1e-6
        assert beta.max() > 0.6 * top  # the range is really used, not just bounded


def test_set_beta_range_per_layer_and_head():
    model = make_model()
    toks = tokens()
    with torch.no_grad():
        base = model(toks)
        model.set_beta_range(1, 0, 0.0, 1.0)  # layer 1, head 0 back to [0, 1]
        model.set_beta_range(0, [1], 0.5, 1.5)
        logits, cache = model.run_with_cache(toks, names_filter=lambda n: "beta" in n)
    sig0 = torch.sigmoid(cache["blocks.0.attn.hook_beta_logit"])
    sig1 = torch.sigmoid(cache["blocks.1.attn.hook_beta_logit"])
    beta0, beta1 = cache["blocks.0.attn.hook_beta"], cache["blocks.1.attn.hook_beta"]
    assert maxerr(beta1[..., 0], sig1[..., 0]) <= 1e-6
    assert maxerr(beta1[..., 1], 2 * sig1[..., 1]) <= 1e-6
    assert maxerr(beta0[..., 1], 0.5 + sig0[..., 1]) <= 1e-6
    assert maxerr(beta0[..., 0], 2 * sig0[..., 0]) <= 1e-6
    assert maxerr(logits, base) > 1e-3
    lo, hi = model.beta_range(0)
    assert lo.tolist() == [0.0, 0.5] and hi.tolist() == [2.0, 1.5]
    assert not any("beta_lo" in k or "beta_hi" in k for k in model.state_dict())
    model.reset_beta_range()
    with torch.no_grad():
        assert maxerr(model(toks), base) == 0
    with pytest.raises(IndexError):
        model.set_beta_range(5, 0, 0.0, 1.0)
    with pytest.raises(IndexError):
        model.set_beta_range(0, 2, 0.0, 1.0)


def test_use_beta_false_has_constant_beta_and_no_logit_hook():
    model = make_model(use_beta=False)
    assert "blocks.0.attn.hook_beta_logit" not in model.hook_dict
    assert set(model.hook_dict) == set(deltanet_hook_names(2, use_beta=False))
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens(), names_filter=lambda n: n.endswith("hook_beta"))
    assert torch.all(cache["blocks.0.attn.hook_beta"] == 2.0)


# ---- edits propagate ---------------------------------------------------------------------------


def _split_effect(edited, base, t):
    before = maxerr(edited[:, :t], base[:, :t])
    after = (edited[:, t:] - base[:, t:]).abs().amax(dim=(0, 2))  # per position from t on
    return before, after


def test_beta_edit_at_step_t_changes_outputs_from_t_on_only():
    model = make_model()
    toks = tokens()
    t = 17

    def flip(beta, hook):
        beta = beta.clone()
        beta[:, t] = 2.0 - beta[:, t]
        return beta

    with torch.no_grad():
        base = model(toks)
        edited = model.run_with_hooks(toks, fwd_hooks=[("blocks.0.attn.hook_beta", flip)])
    before, after = _split_effect(edited, base, t)
    assert before <= 1e-6
    assert after[0] > 1e-4 and after[1:].min() > 1e-6  # at t and at every later step


@pytest.mark.parametrize("in_place", [False, True])
def test_state_edit_at_step_t_changes_outputs_from_t_on_only(in_place):
    model = make_model()
    toks = tokens()
    t = 9

    def zero_state(states, hook):
        if in_place:
            states[:, t] = 0.0  # edit in place and return None, a common TransformerLens idiom
            return None
        states = states.clone()
        states[:, t] = 0.0
        return states

    with torch.no_grad():
        base = model(toks)
        edited = model.run_with_hooks(toks, fwd_hooks=[("blocks.0.attn.hook_state", zero_state)])
    before, after = _split_effect(edited, base, t)
    assert before <= 1e-5
    assert after[0] > 1e-4 and after[1:].min() > 1e-6


def test_state_edit_is_what_the_recurrence_continues_from():
    model = make_model()
    toks = tokens()
    t = 13
    patch = torch.randn(2, 2, 16, 16)

    def put(states, hook):
        states = states.clone()
        states[:, t] = patch
        return states

    with torch.no_grad(), model.hooks(fwd_hooks=[("blocks.0.attn.hook_state", put)]):
        _, cache = model.run_with_cache(toks, names_filter=lambda n: n.startswith("blocks.0.attn"))
    a = "blocks.0.attn."
    expected_o, _, expected_states = delta_rule_recurrence(
        cache[a + "hook_q"],
        cache[a + "hook_k"],
        cache[a + "hook_v"],
        cache[a + "hook_beta"],
        edit=lambda step, S: patch if step == t else S,
    )
    assert maxerr(cache[a + "hook_z"], expected_o) <= 1e-4
    # the cache hook ran after the edit hook, so it holds the edited tensor as the hook returned it
    assert torch.equal(cache[a + "hook_state"][:, t], patch)
    assert maxerr(cache[a + "hook_state"][:, :t], expected_states[:, :t]) <= 1e-4


def test_state_edit_context_applies_fn_after_every_step():
    model = make_model()
    toks = tokens()
    basis = torch.linalg.qr(torch.randn(16, 4))[0]  # 4-dim subspace of key space
    project_out = torch.eye(16) - basis @ basis.T

    def ablate(step, S):  # S (B, H, d_k, d_v): remove the subspace from the key side
        return torch.einsum("ij,bhjv->bhiv", project_out, S)

    with torch.no_grad():
        base = model(toks)
        with model.state_edit(0, ablate):
            edited, cache = model.run_with_cache(toks, names_filter=lambda n: n.startswith("blocks.0.attn"))
        assert model.model.layers[0].attn.state_edit is None  # restored on exit
    a = "blocks.0.attn."
    expected_o, _, _ = delta_rule_recurrence(
        cache[a + "hook_q"], cache[a + "hook_k"], cache[a + "hook_v"], cache[a + "hook_beta"], edit=ablate
    )
    assert maxerr(cache[a + "hook_z"], expected_o) <= 1e-4
    assert torch.einsum("ki,bthkv->bthiv", basis, cache[a + "hook_state"]).abs().max() < 1e-5
    assert maxerr(edited, base) > 1e-4


@pytest.mark.parametrize(
    ("edit", "returned"),
    [
        (lambda t, S: S[:, :1], r"shape \(2, 1, "),  # would broadcast over the heads without a word
        (lambda t, S: S[0], r"shape \(\d+, \d+, \d+\)"),  # the batch axis dropped
        (lambda t, S: None, "NoneType"),  # a forgotten `return S`
    ],
)
def test_a_state_edit_that_returns_another_shape_is_refused(edit, returned):
    model = make_model()
    refused = pytest.raises(DeltalensError, match=f"a state_edit returns .* it returned {returned}")
    with model.state_edit(0, edit), refused:
        model(tokens())


def test_single_step_edit_agrees_between_hook_and_state_edit():
    model = make_model()
    toks = tokens()
    t = 21

    def hook(states, hook):
        states = states.clone()
        states[:, t] *= -1.0
        return states

    with torch.no_grad():
        via_hook = model.run_with_hooks(toks, fwd_hooks=[("blocks.1.attn.hook_state", hook)])
        with model.state_edit(1, lambda step, S: -S if step == t else S):
            via_context = model(toks)
    assert maxerr(via_hook, via_context) <= 1e-5


def test_state_edit_and_editing_state_hook_conflict():
    model = make_model()

    def hook(states, hook):
        return states * 0.5

    with torch.no_grad(), model.state_edit(0, lambda step, S: S):
        with pytest.raises(RuntimeError, match="not both"):
            model.run_with_hooks(tokens(), fwd_hooks=[("blocks.0.attn.hook_state", hook)])


# ---- forward API and training --------------------------------------------------------------------


def test_return_types_and_loss():
    model = make_model()
    toks = tokens()
    with torch.no_grad():
        logits = model(toks)
        loss = model(toks, return_type="loss")
        both = model(toks, return_type="both")
        assert model(toks, return_type=None) is None
    manual = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), toks[:, 1:].reshape(-1))
    assert abs(loss.item() - manual.item()) < 1e-5
    assert torch.equal(both[0], logits) and abs(both[1].item() - loss.item()) < 1e-6
    with pytest.raises(TypeError):
        model(toks.float())
    with pytest.raises(ValueError):
        model(toks, return_type="probs")


def test_backward_reaches_every_parameter_and_state_grad_hook():
    model = make_model(use_gate=True).train()
    loss = model(tokens(), return_type="loss")
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().max() > 0, name
    model.zero_grad()
    _, cache = model.run_with_cache(
        tokens(), return_type="loss", incl_bwd=True, names_filter=lambda n: n.endswith("hook_state")
    )
    grad = cache["blocks.0.attn.hook_state_grad"]
    assert grad.shape == (2, T, 2, 16, 16) and grad.abs().max() > 0
