"""GLM-5 Next (transformers `glm5_next`, GLM-5.3-Flash: KDA, latent attention with a sparse-attention indexer,
MoE, hyper-connections) opened by Hub id offline, against transformers' own model loaded from the same snapshot.

The stand-in is tests/production_standin.py's tiny random model: transformers' multimodal class (the type's only
language model) with a one-block vision tower, KDA on layers 0, 1, 3, indexed latent attention on 2 (its indexer
keeps 2 pools of 4 tokens and the tail, so the 55-token traces see sparse attention), 4 residual streams. The
reference recurrence is written here token by token: S_t = (I - beta k k^T) Diag(alpha_t) S_{t-1} + beta k v^T.
"""

from __future__ import annotations

import json

import pytest
import torch
from production_standin import put_standin  # noqa: E402

import deltalens as dl
from deltalens.core.errors import DeltalensError
from deltalens.models.production.glm5_next import FAMILY, HookedGlm5Next

TEXT = ">>> a = 1\n>>> b = 2\n>>> a, b = b, a\n>>> print('a', a)\na 2\n>>> c = 3\n"


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    """(ours by Hub id, transformers' own from the snapshot, tokens), loaded offline."""
    from transformers.models.glm5_next.modeling_glm5_next import Glm5NextForConditionalGeneration

    home = tmp_path_factory.mktemp("hf")
    repo, snapshot = put_standin("glm5_next", home / "hub")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_HOME", str(home))
        env.delenv("HF_HUB_CACHE", raising=False)
        env.setenv("HF_HUB_OFFLINE", "1")
        ours = dl.load(repo)
    theirs = Glm5NextForConditionalGeneration.from_pretrained(snapshot, attn_implementation="eager").eval()
    return ours, theirs, ours.to_tokens([TEXT, TEXT[::-1]])


@pytest.fixture(scope="module")
def cached(opened):
    ours, _, tokens = opened
    with torch.no_grad():
        return ours.run_with_cache(tokens)


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


def test_opens_the_multimodal_class_by_hub_id_with_equal_logits(opened):
    from transformers.models.glm5_next import modeling_glm5_next as modeling

    ours, theirs, tokens = opened
    assert ours.arch == "glm5_next" and ours.tokenizer is not None and ours.residual_streams == 4
    assert isinstance(ours.hf, modeling.Glm5NextForConditionalGeneration) and hasattr(ours.model, "visual")
    assert (ours.delta_layers, ours.attention_layers) == ([0, 1, 3], [2])
    assert isinstance(ours.text_model.layers[2].self_attn.indexer, modeling.Glm5NextTextIndexer)
    assert sum(isinstance(layer.mlp, modeling.Glm5NextTextMoE) for layer in ours.text_model.layers) == 3
    assert ours.cfg.positional_embedding_type == "none" and ours.cfg.d_vocab == 320
    with torch.no_grad():
        want = theirs(tokens).logits
        got = ours(tokens)
    assert ((got - want).norm() / want.norm()).item() < 1e-4 and (got - want).abs().max() < 1e-4


def test_the_indexer_makes_the_latent_attention_sparse(cached, opened):
    """Each query of layer 2 sees at most 2 pools of 4 keys and its own partial pool (index_topk 8, kpool 4)."""
    _, cache = cached
    pattern = cache["pattern", 2]  # (B, H, query, key)
    seen = (pattern > 0).sum(-1)
    assert seen.max() <= 8 + 3 and seen[..., -1].max() < pattern.shape[-1] // 2  # sparse, not causal-full


def test_final_state_equals_transformers_cache_and_states_replay(opened, cached):
    ours, theirs, tokens = opened
    _, cache = cached
    with torch.no_grad():
        their_cache = theirs(tokens, use_cache=True).cache
    B, T = tokens.shape
    for layer in ours.delta_layers:
        gate, states = cache["gate", layer], cache["state", layer]
        assert gate.shape == (B, T, 4, 16) and states.shape == (B, T, 4, 16, 16)  # alpha per key channel
        # transformers' GLM-5 forget gate with its lower bound: g = -5 sigmoid(...), alpha in (e^-5, 1)
        assert gate.min() > torch.exp(torch.tensor(-5.0)) - 1e-6 and gate.max() < 1 and gate.std(-1).max() > 1e-3
        final = their_cache.get_recurrent_state(layer, state_idx=0)  # (B, H, d_k, d_v)
        assert (states[:, -1] - final).abs().max() < 1e-4
        z, replayed = _reference_kda(*_inputs(cache, layer))
        assert (replayed - states).abs().max() < 1e-4 and (z - cache["z", layer]).abs().max() < 1e-4
    beta = torch.cat([cache["beta", layer].flatten() for layer in ours.delta_layers])
    assert beta.max() <= 1 and beta.min() >= 0 and beta.max() > 0.9  # sigmoid: [0, 1]


def test_a_state_edit_propagates_as_the_reference_recurrence_says(opened, cached):
    ours, _, tokens = opened
    plain, cache = cached
    layer, at = ours.delta_layers[-1], 6
    edit = lambda S: -2.0 * S + 0.1  # noqa: E731
    with torch.no_grad():
        with ours.state_edit(layer, lambda t, S: edit(S) if t == at else S):
            edited, edited_cache = ours.run_with_cache(tokens)

        def hook(states, hook):  # the same edit through hook_state: the replay path
            states = states.clone()
            states[:, at] = edit(states[:, at])
            return states

        hooked = ours.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{layer}.attn.hook_state", hook)])
    want, _ = _reference_kda(*_inputs(cache, layer), at, edit)
    assert (edited_cache["z", layer] - want).abs().max() < 1e-4
    assert (edited[:, :at] - plain[:, :at]).abs().max() < 1e-5  # nothing before the edit moves
    assert (edited[:, at:] - plain[:, at:]).abs().amax() > 1e-3  # everything after it can
    assert (hooked - edited).abs().max() < 1e-4


def test_greedy_generation_equals_transformers(opened):
    ours, theirs, _ = opened
    prompt = ours.to_tokens(">>> a = 1\n>>> b = 2\n")  # no padding: generate would mask it
    with torch.no_grad():
        want = theirs.generate(prompt, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert torch.equal(ours.generate(prompt, max_new_tokens=6, stop_at_newline=False), want)  # no cache
    assert torch.equal(ours.hf_generate(prompt, max_new_tokens=6), want)  # transformers' cache, our layers


def test_exact_effective_attention_reconstructs_every_kda_layer(opened, cached):
    ours, _, tokens = opened
    _, cache = cached
    for layer in ours.delta_layers:
        A = dl.effective_attention(ours, tokens, layer, cache=cache)  # (B, H, query, key), fp32
        z = cache["z", layer]
        rebuilt = torch.einsum("bhqk,bkhd->bqhd", A, cache["v", layer])
        assert (rebuilt - z).norm() / z.norm() < 1e-5


def test_the_residual_hooks_show_the_streams_mean(opened, cached):
    """hook_resid_* against transformers' own per-layer streams (output_hidden_states: (B, T, N, d_model))."""
    ours, theirs, tokens = opened
    _, cache = cached
    with torch.no_grad():
        streams = theirs(tokens, output_hidden_states=True).hidden_states  # each layer's input streams
    assert streams[1].shape[2] == 4 and torch.equal(cache["resid_pre", 0], cache["hook_embed"])
    for layer in range(ours.cfg.n_layers):
        assert (cache["resid_pre", layer] - streams[layer].mean(2)).abs().max() < 1e-5
    last = ours.text_model.norm  # the final norm reads the last layer's streams' mean
    assert (last(cache["resid_post", ours.cfg.n_layers - 1]) - cache["ln_final.hook_normalized"]).abs().max() < 1e-5


def test_an_edit_of_the_combined_stream_moves_every_stream_alike(opened):
    """A vector added at hook_resid_pre is what transformers computes with it added to each of the 4 streams."""
    ours, theirs, tokens = opened
    layer, delta = 2, 0.5 * torch.randn(ours.cfg.d_model, generator=torch.Generator().manual_seed(0))

    def every_stream(module, args, kwargs):  # on transformers' own layer: (B, T, N, d_model) + delta
        return (args[0] + delta, *args[1:]), kwargs

    with torch.no_grad():
        plain = theirs(tokens).logits
        handle = theirs.model.language_model.layers[layer].register_forward_pre_hook(every_stream, with_kwargs=True)
        try:
            want = theirs(tokens).logits
        finally:
            handle.remove()
        got = ours.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{layer}.hook_resid_pre", lambda x, hook: x + delta)])
    assert (want - plain).abs().max() > 1e-2 and (got - want).abs().max() < 1e-4


def test_the_hyper_connection_hooks_show_the_mixing_and_an_edit_reaches_it(opened, cached):
    ours, _, tokens = opened
    logits, cache = cached
    B, T = tokens.shape
    post, comb = cache["blocks.1.attn_hc.hook_post"], cache["blocks.1.ffn_hc.hook_comb"]
    assert post.shape == (B, T, 4) and comb.shape == (B, T, 4, 4)
    assert post.min() > 0 and post.max() < 2 and (comb.sum(-2) - 1).abs().max() < 1e-4  # Sinkhorn: columns sum to 1
    eye = lambda c, hook: torch.eye(4).expand_as(c)  # noqa: E731  each stream keeps only itself
    with torch.no_grad():
        unmixed = ours.run_with_hooks(tokens, fwd_hooks=[("blocks.1.ffn_hc.hook_comb", eye)])
    assert (unmixed - logits).abs().max() > 1e-3


def test_the_router_hooks_show_the_choice_and_an_edit_reaches_the_mlp(opened, cached):
    ours, _, tokens = opened
    logits, cache = cached
    B, T = tokens.shape
    name = "blocks.1.mlp.gate.hook_router_"
    assert cache[name + "logits"].shape == (B, T, 4) and cache[name + "weights"].shape == (B, T, 2)
    with torch.no_grad():
        off = ours.run_with_hooks(tokens, fwd_hooks=[(name + "weights", lambda w, hook: torch.zeros_like(w))])
    assert (off - logits).abs().max() > 1e-3


def test_the_tools_that_split_one_residual_stream_refuse_by_name(opened, cached):
    from deltalens.models.capabilities import capabilities_of

    ours, _, tokens = opened
    _, cache = cached
    assert not {"residual", "lens"} & capabilities_of(ours) and {"delta", "householder", "heads"} <= capabilities_of(
        ours
    )
    for call in (
        cache.decompose_resid,
        cache.accumulated_resid,
        cache.stack_head_results,
        lambda: dl.logit_attribution(ours, cache, torch.tensor([[0, 5]]), torch.tensor([3])),
        lambda: ours.mixer_input(0, cache["resid_pre", 0]),
    ):
        with pytest.raises(DeltalensError, match="keeps 4 .*hyper-connections") as err:
            call()
        assert "\n" not in str(err.value)


def test_census_runs_on_the_kda_layers(opened):
    ours, _, tokens = opened
    heads = dl.census(ours, tokens).heads
    assert sorted(set(heads["layer"])) == ours.delta_layers and len(heads) == 3 * 4
    assert (heads["beta_gt1"] == 0).all() and heads["min_eigenvalue"].between(-1, 1).all()


def test_unsupported_options_are_refused_by_name_and_the_release_fields_read():
    make_config = HookedGlm5Next.make_config
    text = {"num_hidden_layers": 4, "hidden_size": 64, "qk_rope_head_dim": 0, "head_dim": 0}
    for key, value in (("mhc", False), ("mla_use_nope", False), ("scoring_func", "softmax"), ("qk_rope_head_dim", 8)):
        with pytest.raises(DeltalensError, match=key):
            make_config({"model_type": "glm5_next", "text_config": {**text, key: value}})
    with pytest.raises(DeltalensError, match="quantization_config"):
        make_config({"model_type": "glm5_next", "quantization_config": {"quant_method": "fp8"}, "text_config": text})
    with pytest.raises(DeltalensError, match="indexer_types"):
        make_config({"model_type": "glm5_next", "text_config": {**text, "indexer_types": ["full"] * 3}})
    with pytest.raises(DeltalensError, match="'sliding_attention'"):
        make_config({"model_type": "glm5_next", "text_config": {**text, "layer_types": ["sliding_attention"] * 4}})
    kinds = ["linear_attention"] * 3 + ["deepseek_sparse_attention"]  # the release's name for the DSA layers
    nested = make_config({"model_type": "glm5_next", "text_config": {**text, "layer_types": kinds}})
    flat = make_config({**text, "layer_types": kinds, "vision_config": {"depth": 1}})  # text fields at the top
    for config in (nested, flat):
        assert config.text_config.layer_types == ["linear_attention"] * 3 + ["indexed_attention"]
        assert config.text_config.hidden_size == 64 and config.text_config.mlp_layer_types[:3] == ["dense"] * 3


def test_the_bound_follows_transformers_dense_layers_where_config_json_lists_none():
    """Without mlp_layer_types transformers makes the first 3 layers dense whatever first_k_dense_replace says;
    the bound counts the same experts (every routed one) and no more than transformers builds."""
    from production_standin import tiny_config

    from deltalens.models.io.footprint import weights_lower_bound

    listed = json.loads(tiny_config("glm5_next").to_json_string())
    text = {**listed["text_config"], "num_hidden_layers": 8}
    text.update(layer_types=None, mlp_layer_types=None, indexer_types=None)  # transformers' defaults for 8 layers
    unlisted = {**listed, "text_config": {**text, "first_k_dense_replace": 0}}  # a field transformers ignores
    config = HookedGlm5Next.make_config(unlisted)
    assert config.text_config.mlp_layer_types == ["dense"] * 3 + ["sparse"] * 5
    with torch.device("meta"):
        model = FAMILY.lm_class(config)
    experts = sum(p.numel() for name, p in model.named_parameters() if ".experts." in name)
    exact = sum(p.numel() for p in model.parameters())
    assert experts < weights_lower_bound("glm5_next", unlisted, 1) <= exact
    flat = {k: v for k, v in unlisted["text_config"].items() if k != "model_type"}  # the same fields at the top
    assert weights_lower_bound("glm5_next", flat, 1) == weights_lower_bound("glm5_next", unlisted, 1)
