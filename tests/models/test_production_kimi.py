"""Kimi Linear (transformers `kimi_linear`: Kimi Delta Attention with a per-channel decay, latent attention,
MoE) opened by Hub id offline, against transformers' own model loaded from the same snapshot.

The stand-in is tests/production_standin.py's tiny random model (KDA on layers 0, 1, 3, MLA on 2, a
dense MLP on layer 0 and MoE after it). The reference recurrence below is written here, token by token,
from fla's `naive_recurrent_kda`: S_t = (I - beta k k^T) Diag(alpha_t) S_{t-1} + beta k v^T.
"""

from __future__ import annotations

import pytest
import torch
from production_standin import put_standin  # noqa: E402

import deltalens as dl
from deltalens.core.errors import DeltalensError

TEXT = ">>> a = 1\n>>> b = 2\n>>> a, b = b, a\n>>> print('a', a)\na 2\n>>> c = 3\n"


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    """(ours by Hub id, transformers' own from the snapshot, tokens), loaded offline."""
    from transformers import AutoModelForCausalLM

    home = tmp_path_factory.mktemp("hf")
    repo, snapshot = put_standin("kimi_linear", home / "hub")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_HOME", str(home))
        env.delenv("HF_HUB_CACHE", raising=False)
        env.setenv("HF_HUB_OFFLINE", "1")
        ours = dl.load(repo)
    theirs = AutoModelForCausalLM.from_pretrained(snapshot, attn_implementation="eager").eval()
    return ours, theirs, ours.to_tokens([TEXT, TEXT[::-1]])


def _reference_kda(q, k, v, beta, alpha, edit_at=None, edit=None):
    """KDA token by token, fp32; q, k (B, T, H, d_k) normalised, alpha (B, T, H, d_k); `edit` at step `edit_at`."""
    B, T, H, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1])
    outs, states = [], []
    for t in range(T):
        S = alpha[:, t, :, :, None] * S
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t]))
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, t], u)
        if t == edit_at:
            S = edit(S)
        states.append(S)
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]) * K**-0.5)
    return torch.stack(outs, 1), torch.stack(states, 1)


def _inputs(cache, layer):
    return [cache[name, layer] for name in ("q", "k", "v", "beta", "gate")]


def test_opens_by_hub_id_with_moe_and_latent_attention_and_equal_logits(opened):
    from transformers.models.kimi_linear import modeling_kimi_linear as modeling

    ours, theirs, tokens = opened
    assert ours.arch == "kimi_linear" and ours.tokenizer is not None
    assert (ours.delta_layers, ours.attention_layers) == ([0, 1, 3], [2])
    assert isinstance(ours.model.layers[2].self_attn, modeling.KimiLinearAttention)  # MLA, hooked
    assert sum(isinstance(layer.mlp, modeling.KimiLinearMoE) for layer in ours.model.layers) == 3
    assert ours.cfg.positional_embedding_type == "none"  # its MLA has no rotary embedding
    with torch.no_grad():
        error = (ours(tokens) - theirs(tokens).logits).abs().max().item()
    assert error < 1e-4, error


def test_final_state_equals_transformers_cache_and_states_replay(opened):
    ours, theirs, tokens = opened
    with torch.no_grad():
        their_cache = theirs(tokens, use_cache=True).past_key_values
        _, cache = ours.run_with_cache(tokens)
    B, T = tokens.shape
    for layer in ours.delta_layers:
        gate, states = cache["gate", layer], cache["state", layer]
        assert gate.shape == (B, T, 4, 16) and states.shape == (B, T, 4, 16, 16)  # alpha per key channel
        assert gate.std(-1).max() > 1e-3  # the channels do decay differently
        final = their_cache.get_recurrent_state(layer, state_idx=0)  # (B, H, d_k, d_v)
        assert (states[:, -1] - final).abs().max() < 1e-4
        z, replayed = _reference_kda(*_inputs(cache, layer))
        assert (replayed - states).abs().max() < 1e-4 and (z - cache["z", layer]).abs().max() < 1e-4
    beta = torch.cat([cache["beta", layer].flatten() for layer in ours.delta_layers])
    assert beta.max() <= 1 and beta.min() >= 0 and beta.max() > 0.9  # transformers' KDA: sigmoid, [0, 1]
    assert set(cache["pattern", 2].shape) == {B, 4, T}  # the MLA layer's attention hooks


def test_a_state_edit_propagates_as_the_reference_recurrence_says(opened):
    ours, _, tokens = opened
    layer, at = ours.delta_layers[-1], 6
    edit = lambda S: -2.0 * S + 0.1  # noqa: E731
    with torch.no_grad():
        plain, cache = ours.run_with_cache(tokens)  # the chunked kernel
        with ours.state_edit(layer, lambda t, S: S):  # the token-by-token reference path, no edit
            unedited = ours(tokens)
        with ours.state_edit(layer, lambda t, S: edit(S) if t == at else S):
            edited, edited_cache = ours.run_with_cache(tokens)

        def hook(states, hook):  # the same edit through hook_state: the replay path
            states = states.clone()
            states[:, at] = edit(states[:, at])
            return states

        hooked = ours.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{layer}.attn.hook_state", hook)])
    want, _ = _reference_kda(*_inputs(cache, layer), at, edit)
    assert (edited_cache["z", layer] - want).abs().max() < 1e-4
    assert torch.equal(edited[:, :at], unedited[:, :at])  # nothing before the edit moves
    assert (unedited - plain).abs().max() < 1e-5  # the reference path and the chunked kernel agree
    assert (edited[:, at:] - plain[:, at:]).abs().amax() > 1e-3  # everything after it can
    assert (hooked - edited).abs().max() < 1e-4


def test_a_gate_hook_reaches_the_recurrence(opened):
    ours, _, tokens = opened
    layer = ours.delta_layers[0]
    ones = lambda alpha, hook: torch.ones_like(alpha)  # noqa: E731  no forgetting in any channel
    with torch.no_grad():
        _, cache = ours.run_with_cache(tokens)
        ours.add_hook(f"blocks.{layer}.attn.hook_gate", ones)
        try:
            _, clamped = ours.run_with_cache(tokens, names_filter=lambda name: name.startswith(f"blocks.{layer}.attn"))
        finally:
            ours.reset_hooks()
    q, k, v, beta, _ = _inputs(clamped, layer)
    want, _ = _reference_kda(q, k, v, beta, torch.ones_like(clamped["gate", layer]))
    assert (clamped["z", layer] - want).abs().max() < 1e-4
    assert (clamped["z", layer] - cache["z", layer]).abs().max() > 1e-3


def test_greedy_generation_equals_transformers(opened):
    ours, theirs, _ = opened
    prompt = ours.to_tokens(">>> a = 1\n>>> b = 2\n")  # no padding: generate would mask it
    with torch.no_grad():
        want = theirs.generate(prompt, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert torch.equal(ours.generate(prompt, max_new_tokens=6, stop_at_newline=False), want)  # no cache
    assert torch.equal(ours.hf_generate(prompt, max_new_tokens=6), want)  # transformers' cache, our layers


def test_exact_effective_attention_reconstructs_every_kda_layer(opened):
    ours, _, tokens = opened
    with torch.no_grad():
        _, cache = ours.run_with_cache(tokens)
    for layer in ours.delta_layers:
        A = dl.effective_attention(ours, tokens, layer, cache=cache)  # (B, H, query, key), fp32
        z = cache["z", layer]
        rebuilt = torch.einsum("bhqk,bkhd->bqhd", A, cache["v", layer])
        assert (rebuilt - z).norm() / z.norm() < 1e-5


def test_the_channel_wise_decay_sits_after_the_erase_in_the_backward_scan():
    """effective_pattern against the recurrence on inputs where Diag(alpha) and k k^T do not commute."""
    from deltalens.interp.effective_attention import effective_pattern

    torch.manual_seed(0)
    B, T, H, K, V = 2, 12, 3, 6, 5
    q, k = (torch.nn.functional.normalize(torch.randn(B, T, H, K, dtype=torch.float64), dim=-1) for _ in range(2))
    v, beta, g = torch.randn(B, T, H, V, dtype=torch.float64), torch.rand(B, T, H) + 0.5, -3 * torch.rand(B, T, H, K)
    z, _ = _reference_kda(q, k, v.double(), beta.double(), g.double().exp())
    A = effective_pattern(q, k[:, :, :, None], beta[..., None], g)[..., 0]  # (B, H, T, T)
    assert (torch.einsum("bhqs,bshd->bqhd", A, v) - z).abs().max() < 1e-10
    A_wrong = effective_pattern(q, k[:, :, :, None], beta[..., None], g.mean(-1))[..., 0]  # one alpha per head
    assert (torch.einsum("bhqs,bshd->bqhd", A_wrong, v) - z).abs().max() > 1e-3


def test_census_runs_with_the_per_channel_eigenvalue(opened):
    from deltalens.probes.census import per_channel_min_eigenvalue

    ours, _, tokens = opened
    result = dl.census(ours, tokens)
    heads = result.heads
    assert sorted(set(heads["layer"])) == ours.delta_layers and len(heads) == 3 * 4
    assert (heads["beta_gt1"] == 0).all() and heads["neg_gate"].isna().all()  # beta in [0, 1]; alpha > 0
    assert (heads["effective_rank"] >= 1).all() and heads["min_eigenvalue"].between(-1, 1).all()
    torch.manual_seed(0)
    alpha, beta, k = torch.rand(5, 8), torch.rand(5) * 2, torch.nn.functional.normalize(torch.randn(5, 8), dim=-1)
    full = (torch.eye(8) - beta[:, None, None] * k[:, :, None] * k[:, None, :]) @ torch.diag_embed(alpha)
    eigen = torch.linalg.eigvals(full.double())
    assert eigen.imag.abs().max() < 1e-9  # real, as the similarity says
    assert torch.allclose(per_channel_min_eigenvalue(alpha, beta, k), eigen.real.min(-1).values.float(), atol=1e-5)


def test_the_chunked_kernel_equals_transformers_recurrence():
    from transformers.models.kimi_linear.modeling_kimi_linear import recurrent_kimi_delta_attention

    from deltalens.models.ops.kda import chunk_kda, kda_recurrence

    torch.manual_seed(0)
    B, T, H, K, V = 2, 37, 3, 8, 6
    q, k = (torch.nn.functional.normalize(torch.randn(B, T, H, K), dim=-1) for _ in range(2))
    v, beta, g, S0 = torch.randn(B, T, H, V), torch.rand(B, T, H), -3 * torch.rand(B, T, H, K), torch.randn(B, H, K, V)
    g[:, 5, :, :3] = -200.0  # a channel wiped out: no overflow in the chunked form
    want, final = recurrent_kimi_delta_attention(q, k, v, g, beta, S0, True)
    o, S, states = kda_recurrence(q, k, v, beta, g, initial_state=S0)
    assert (o - want).abs().max() < 1e-5 and (S - final).abs().max() < 1e-5
    for chunk in (1, 8, 64):
        o_c, S_c, states_c = chunk_kda(q, k, v, beta, g, initial_state=S0, chunk_size=chunk, with_states=True)
        assert (o_c - want).abs().max() < 1e-4 and (S_c - final).abs().max() < 1e-4
        assert (states_c - states).abs().max() < 1e-4


def test_unsupported_options_are_refused_by_name_and_the_release_config_reads():
    from deltalens.models.production.kimi_linear import HookedKimiLinear

    make_config = HookedKimiLinear.make_config

    base = {"model_type": "kimi_linear", "num_hidden_layers": 4}
    for key, value in (("mla_use_nope", False), ("moe_router_activation_func", "softmax"), ("moe_layer_freq", 2)):
        with pytest.raises(DeltalensError, match=key):
            make_config({**base, key: value})
    with pytest.raises(DeltalensError, match="allow_neg_eigval"):
        make_config({**base, "linear_attn_config": {"allow_neg_eigval": True}})
    with pytest.raises(DeltalensError, match="quantization_config"):
        make_config({**base, "quantization_config": {"quant_method": "fp8"}})
    with pytest.raises(DeltalensError, match="'sliding_attention'"):
        make_config({**base, "layer_types": ["sliding_attention"] * 4})
    release = {  # the checkpoint's own fields: 1-indexed layer lists, first_k_dense_replace
        **base, "mla_use_nope": True, "moe_router_activation_func": "sigmoid", "moe_layer_freq": 1,
        "first_k_dense_replace": 1, "linear_attn_config": {
            "full_attn_layers": [4], "kda_layers": [1, 2, 3], "head_dim": 32, "num_heads": 2,
            "short_conv_kernel_size": 4,
        },
    }  # fmt: skip
    config = make_config(release)
    assert config.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    assert config.mlp_layer_types == ["dense", "sparse", "sparse", "sparse"]
    assert (config.linear_head_dim, config.linear_num_heads) == (32, 2)


def test_our_model_holds_exactly_transformers_parameters_on_the_meta_device():
    """Kimi-Linear-48B-A3B's shape counted on the meta device: wrapping and hooks add no parameter."""
    from deltalens.models.production import kimi_linear
    from deltalens.models.production.family import footprint

    shape = dict(
        model_type="kimi_linear", vocab_size=163840, hidden_size=2304, intermediate_size=9216,
        moe_intermediate_size=1024, num_hidden_layers=27, num_attention_heads=32, num_key_value_heads=32,
        num_experts=256, num_experts_per_token=8,
        kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, first_k_dense_replace=1,
        linear_attn_config={"full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "kda_layers": [
            i for i in range(1, 28) if i not in (4, 8, 12, 16, 20, 24, 27)], "head_dim": 128, "num_heads": 32},
    )  # fmt: skip
    config = kimi_linear.HookedKimiLinear.make_config(shape)
    with torch.device("meta"):
        ours = kimi_linear.HookedKimiLinear.from_config(config)
    count = sum(p.numel() for p in {id(p): p for p in ours.parameters()}.values())
    assert count == footprint(kimi_linear.FAMILY, config).parameters > 40 * 10**9
    assert len(ours.delta_layers) == 20 and len(ours.attention_layers) == 7


def test_the_state_adjoint_takes_the_per_channel_decay():
    """attribution patching's dmetric/dS_t (interp/attribution_patching.py) against autograd through KDA."""
    from deltalens.interp.attribution_patching import state_adjoint

    torch.manual_seed(0)
    B, T, H, K, V = 1, 7, 2, 5, 3
    q, k = (torch.nn.functional.normalize(torch.randn(B, T, H, K, dtype=torch.float64), dim=-1) for _ in range(2))
    v, beta, alpha = torch.randn(B, T, H, V).double(), torch.rand(B, T, H).double(), torch.rand(B, T, H, K).double()
    nudge, grad_z = torch.zeros(T, B, H, K, V, dtype=torch.float64, requires_grad=True), torch.randn(B, T, H, V)
    z = _reference_kda_nudged(q, k, v, beta, alpha, nudge)
    (z * grad_z.double()).sum().backward()
    want = nudge.grad.permute(1, 0, 2, 3, 4)  # (B, T, H, K, V)
    got = state_adjoint(q, k[:, :, :, None], beta[..., None], alpha.log(), grad_z)
    assert (got - want).abs().max() < 1e-10


def _reference_kda_nudged(q, k, v, beta, alpha, nudge):
    """_reference_kda's read-out with S_t + nudge[t] as the state after step t."""
    B, T, H, K = q.shape
    S, outs = q.new_zeros(B, H, K, v.shape[-1]), []
    for t in range(T):
        S = alpha[:, t, :, :, None] * S
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t]))
        S = S + k[:, t, :, :, None] * u[:, :, None, :] + nudge[t]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]) * K**-0.5)
    return torch.stack(outs, 1)


def test_router_hooks_show_the_choice_and_an_edit_reaches_the_mlp(opened):
    ours, _, tokens = opened
    B, T = tokens.shape
    layer, k = 1, ours.config.num_experts_per_tok
    name = f"blocks.{layer}.mlp.gate.hook_router_"
    with torch.no_grad():
        logits, cache = ours.run_with_cache(tokens)
        routed_off = ours.run_with_hooks(tokens, fwd_hooks=[(name + "weights", lambda w, hook: torch.zeros_like(w))])
    scores, weights = cache[name + "logits"], cache[name + "weights"]
    assert scores.shape == (B, T, 4) and weights.shape == (B, T, k)
    top = scores.sigmoid().topk(k, dim=-1).values  # one group, no correction bias: the plain top-k
    want = top / top.sum(-1, keepdim=True) * ours.config.routed_scaling_factor
    assert (weights.sort(-1).values - want.sort(-1).values).abs().max() < 1e-6
    assert (routed_off - logits).abs().max() > 1e-3  # the experts' weights drive the output


def test_a_capture_at_chosen_positions_taps_those_states(opened):
    ours, _, tokens = opened
    B, T = tokens.shape
    keep = torch.zeros(B, T, dtype=torch.bool)
    keep[:, [3, T - 1]] = True
    captured = dl.capture(ours, {"tokens": tokens, "lengths": torch.full((B,), T)}, ("state", "gate"), positions=keep)
    with torch.no_grad():
        _, cache = ours.run_with_cache(tokens)
    for layer in ours.delta_layers:
        name = f"blocks.{layer}.attn.hook_state"
        assert captured.acts[name].shape == (2 * B, 4, 16, 16)
        assert torch.equal(captured.acts[name], cache[name][keep])
        assert captured.acts[f"blocks.{layer}.attn.hook_gate"].shape == (2 * B, 4, 16)
