"""Production delta-rule LMs from transformers (Qwen3.5, Qwen3.5-MoE, OLMo-Hybrid, Qwen3-Next), opened by Hub id
offline.

Each stand-in is transformers' own tiny random model (tests/production_standin.py) in a local Hub
cache; the reference is transformers' own model loaded from the same snapshot, never ours. Measured:
logits, the final recurrent state against transformers' cache, every S_t replayed from the hooks, an
edit of S_t propagating as a reference recurrence says, and greedy generation.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from production_standin import put_standin  # noqa: E402

import deltalens as dl
from deltalens.core.errors import DeltalensError

# qwen3_5, qwen3_5_moe: the multimodal models, their text towers opened
KINDS = ("qwen3_5_text", "qwen3_5", "qwen3_5_moe_text", "qwen3_5_moe", "olmo_hybrid", "qwen3_next")
MULTIMODAL = {  # the library's class of each multimodal kind: the reference opens the whole model
    "qwen3_5": ("transformers.models.qwen3_5.modeling_qwen3_5", "Qwen3_5ForConditionalGeneration"),
    "qwen3_5_moe": ("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration"),
}
TEXT = ">>> a = 1\n>>> b = 2\n>>> a, b = b, a\n>>> print('a', a)\na 2\n>>> c = 3\n"
# 32 layers, three Gated DeltaNet layers to one attention layer, at the 7B scale (fields as transformers names them)
_SHAPE = dict(
    vocab_size=100352, hidden_size=3840, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=30,
    num_key_value_heads=30, linear_num_key_heads=30, linear_num_value_heads=30, linear_key_head_dim=96,
    linear_value_head_dim=192, layer_types=["linear_attention"] * 3 + ["full_attention"], tie_word_embeddings=False,
)  # fmt: skip
SEVEN_B = {
    kind: {**_SHAPE, "model_type": kind, "layer_types": _SHAPE["layer_types"] * 8, **extra}
    for kind, extra in (("qwen3_5_text", {"head_dim": 128}), ("olmo_hybrid", {"linear_allow_neg_eigval": True}))
}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    home = tmp_path_factory.mktemp("hf")
    return home, {kind: put_standin(kind, home / "hub") for kind in KINDS}


@pytest.fixture(scope="module")
def opened(hub):
    """(ours by Hub id, transformers' own from the snapshot, tokens) per kind, loaded offline."""
    from transformers import AutoModelForCausalLM

    home, standins = hub
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_HOME", str(home))
        env.delenv("HF_HUB_CACHE", raising=False)
        env.setenv("HF_HUB_OFFLINE", "1")
        out = {}
        for kind, (repo, snapshot) in standins.items():
            ours = dl.load(repo)
            if kind in MULTIMODAL:
                module, name = MULTIMODAL[kind]
                theirs_class = getattr(importlib.import_module(module), name)
            else:
                theirs_class = AutoModelForCausalLM
            theirs = theirs_class.from_pretrained(snapshot, attn_implementation="eager").eval()
            out[kind] = (ours, theirs, ours.to_tokens([TEXT, TEXT[::-1]]))
    return out


def _reference_gdn(q, k, v, beta, alpha, edit_at=None, edit=None):
    """The gated delta rule token by token, fp32: S_t = alpha_t (I - beta_t k k^T) S_{t-1} + beta_t k v^T,
    o_t = S_t^T q_t / sqrt(d_k); q, k (B, T, H, d_k) normalised; `edit` applied to S at step `edit_at`."""
    B, T, H, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1])
    outs, states = [], []
    for t in range(T):
        S = alpha[:, t, :, None, None] * S
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t]))
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, t], u)
        if t == edit_at:
            S = edit(S)
        states.append(S)
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]) * K**-0.5)
    return torch.stack(outs, 1), torch.stack(states, 1)


@pytest.mark.parametrize("kind", KINDS)
def test_opens_by_hub_id_with_its_tokenizer_and_equal_logits(opened, kind):
    ours, theirs, tokens = opened[kind]
    assert ours.arch == kind.removesuffix("_text") and ours.tokenizer is not None
    assert ours.cfg.n_layers == 4 and not hasattr(ours.model, "visual")  # the text tower alone
    with torch.no_grad():
        error = (ours(tokens) - theirs(tokens).logits).abs().max().item()
    assert error < 1e-4, error


@pytest.mark.parametrize("kind", KINDS)
def test_final_state_equals_transformers_cache_and_states_replay(opened, kind):
    ours, theirs, tokens = opened[kind]
    with torch.no_grad():
        their_cache = theirs(tokens, use_cache=True).past_key_values
        _, cache = ours.run_with_cache(tokens)
    assert ours.delta_layers and ours.attention_layers  # a hybrid, as the family is
    for layer in ours.delta_layers:
        states = cache["state", layer]  # (B, T, H, d_k, d_v)
        final = their_cache.get_recurrent_state(layer, state_idx=0)  # (B, H, d_k, d_v)
        assert (states[:, -1] - final).abs().max() < 1e-4
        _, replayed = _reference_gdn(
            cache["q", layer], cache["k", layer], cache["v", layer], cache["beta", layer], cache["gate", layer]
        )
        assert (replayed - states).abs().max() < 1e-4
    beta = torch.cat([cache["beta", layer].flatten() for layer in ours.delta_layers])
    assert (beta.max() > 1) == (kind == "olmo_hybrid")  # OLMo-Hybrid's [0, 2], Qwen3.5's [0, 1]


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_edit_propagates_as_the_reference_recurrence_says(opened, kind):
    ours, _, tokens = opened[kind]
    layer, at = ours.delta_layers[-1], 6
    edit = lambda S: -2.0 * S + 0.1  # noqa: E731
    with torch.no_grad():
        plain, cache = ours.run_with_cache(tokens)
        with ours.state_edit(layer, lambda t, S: edit(S) if t == at else S):
            edited, edited_cache = ours.run_with_cache(tokens)
    want, _ = _reference_gdn(
        cache["q", layer], cache["k", layer], cache["v", layer], cache["beta", layer], cache["gate", layer], at, edit
    )
    assert (edited_cache["z", layer] - want).abs().max() < 1e-4
    assert torch.equal(edited[:, :at], plain[:, :at])  # nothing before the edit moves
    assert (edited[:, at:] - plain[:, at:]).abs().amax() > 1e-3  # everything after it can


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_generation_equals_transformers(opened, kind):
    ours, theirs, tokens = opened[kind]
    prompt = ours.to_tokens(">>> a = 1\n>>> b = 2\n")  # no padding: generate would mask it
    with torch.no_grad():
        want = theirs.generate(prompt, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert torch.equal(ours.generate(prompt, max_new_tokens=6, stop_at_newline=False), want)  # no cache
    assert torch.equal(ours.hf_generate(prompt, max_new_tokens=6), want)  # transformers' cache, our layers


def test_beta_rescale_reaches_the_recurrence(opened):
    ours, _, tokens = opened["olmo_hybrid"]
    layer = ours.delta_layers[0]
    with torch.no_grad():
        plain = ours(tokens)
        ours.set_beta_range(layer, None, 0.0, 1.0)
        try:
            _, cache = ours.run_with_cache(tokens)
            clipped = ours(tokens)
        finally:
            ours.reset_beta_range()
    assert cache["beta", layer].max() <= 1.0 and (clipped - plain).abs().max() > 1e-4


def test_unsupported_options_are_refused_by_name_before_weights(tmp_path):
    from deltalens.models.production.qwen3_5 import HookedQwen3_5

    make_config = HookedQwen3_5.make_config

    with pytest.raises(DeltalensError, match="quantization_config"):
        make_config({"model_type": "qwen3_5_text", "quantization_config": {"quant_method": "fp8"}})
    with pytest.raises(DeltalensError, match="'sliding_attention'"):
        make_config({"model_type": "qwen3_5_text", "num_hidden_layers": 2, "layer_types": ["sliding_attention"] * 2})


@pytest.mark.parametrize("kind", ["qwen3_5_text", "olmo_hybrid"])
def test_our_model_holds_exactly_transformers_parameters_on_the_meta_device(kind):
    """A 7B-sized config counted on the meta device: wrapping and hooks add no parameter."""
    from deltalens.models.production.family import footprint

    family = kind.removesuffix("_text")
    module = importlib.import_module(f"deltalens.models.production.{family}")
    lm = module.HookedQwen3_5 if family == "qwen3_5" else module.HookedOlmoHybrid
    config = lm.make_config(SEVEN_B[kind])
    with torch.device("meta"):
        ours = lm.from_config(config)
    theirs = footprint(module.FAMILY, config)  # transformers' own class on the meta device
    count = sum(p.numel() for p in {id(p): p for p in ours.parameters()}.values())
    assert count == theirs.parameters > 5 * 10**9


@pytest.mark.parametrize("kind", KINDS)
def test_census_counts_beta_above_one_only_where_the_family_allows_it(opened, kind):
    ours, _, tokens = opened[kind]
    result = dl.census(ours, tokens)
    assert sorted(set(result.heads["layer"])) == ours.delta_layers
    assert (result.heads["beta_gt1"].max() > 0) == (kind == "olmo_hybrid")
    assert (result.heads["effective_rank"] >= 1).all()


@pytest.mark.parametrize("kind", KINDS)
def test_exact_effective_attention_reconstructs_every_delta_rule_layer(opened, kind):
    ours, _, tokens = opened[kind]
    with torch.no_grad():
        _, cache = ours.run_with_cache(tokens)
    for layer in ours.delta_layers:
        A = dl.effective_attention(ours, tokens, layer, cache=cache, dtype=torch.float64)  # (B, H, query, key)
        z = cache["z", layer].double()
        rebuilt = torch.einsum("bhqk,bkhd->bqhd", A, cache["v", layer].double())
        assert (rebuilt - z).norm() / z.norm() < 1e-5


def test_a_pad_id_outside_a_small_vocabulary_is_refused_in_words():
    """A family's default pad id (OLMo-Hybrid's 100277) with vocab_size 32 hit an assertion inside torch."""
    import deltalens as dl
    from deltalens.models.production import production_family

    config = production_family("olmo_hybrid").tiny(32).to_dict()
    sizes = {key: config[key] for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
             "num_attention_heads", "num_key_value_heads", "layer_types", "linear_num_key_heads",
             "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim")}  # fmt: skip
    with pytest.raises(dl.DeltalensError, match="pad_token_id 100277 lies outside the vocabulary"):
        dl.build("olmo_hybrid", **sizes)
    assert dl.build("olmo_hybrid", **sizes, pad_token_id=None).cfg.d_vocab == 32
