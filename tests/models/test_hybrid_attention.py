"""Hybrids: fla's `attn` config (softmax attention on the listed layers of a DeltaNet or Gated DeltaNet)
against fla's own model, saved and loaded both ways, with TransformerLens hooks on the attention layers.

fla's side runs its own model code on a CPU: the delta-rule kernels, norms and convs as in the other
fla compatibility tests, its attention layer with a torch flash-attn stand-in and fla's torch rotary
reference (tests/fla_attention_on_cpu.py). None of our code runs on the fla side.
"""

import contextlib
import json

import pytest
import torch
from fla.models import DeltaNetConfig, DeltaNetForCausalLM, GatedDeltaNetConfig, GatedDeltaNetForCausalLM
from fla_attention_on_cpu import fla_attention_on_cpu
from fla_on_cpu import randomise
from test_family_fla_compat import fla_runs_on_cpu as gated_runs_on_cpu
from test_fla_compat import fla_runs_on_cpu as deltanet_runs_on_cpu

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.models.lm.chunked import forward_in_chunks
from deltalens.models.lm.delta_lm import HookedDeltaLM

CASES = {
    # one attention layer between two DeltaNet layers, fla's defaults filled in by the config
    "deltanet": (
        DeltaNetConfig,
        DeltaNetForCausalLM,
        deltanet_runs_on_cpu,
        dict(hidden_size=32, num_heads=2, num_hidden_layers=3, vocab_size=37, attn={"layers": [1], "num_heads": 4}),
    ),
    # two specs: grouped kv heads + biases + a window on layer 0, another rope base on layer 2
    "gated_deltanet": (
        GatedDeltaNetConfig,
        GatedDeltaNetForCausalLM,
        gated_runs_on_cpu,
        dict(
            hidden_size=32,
            num_heads=2,
            head_dim=8,
            num_hidden_layers=3,
            vocab_size=29,
            attn=[
                {"layers": [0], "num_heads": 4, "num_kv_heads": 2, "qkv_bias": True, "window_size": 5},
                {"layers": [2], "num_heads": 2, "rope_theta": 500.0},
            ],
        ),
    ),
}


@contextlib.contextmanager
def fla_on_cpu(runner):
    with fla_attention_on_cpu(), runner():
        yield


def fla_hybrid(name, seed=0):
    config_cls, model_cls, runner, kwargs = CASES[name]
    torch.manual_seed(seed)
    with fla_attention_on_cpu():  # fla builds its Attention only when flash-attn "imports"
        return randomise(model_cls(config_cls(**kwargs)), seed)


TOKENS = torch.randint(0, 29, (2, 40), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", list(CASES))
def test_fla_saved_hybrid_loads_here_with_identical_tensors_and_logits(tmp_path, name):
    theirs = fla_hybrid(name)
    assert any(type(layer.attn).__name__ == "Attention" for layer in theirs.model.layers)
    theirs.save_pretrained(tmp_path)
    ours = models.load(tmp_path)
    assert isinstance(ours, HookedDeltaLM) and ours.arch == name
    mine, fla_sd = ours.state_dict(), theirs.state_dict()
    assert sorted(mine) == sorted(fla_sd)  # (the gated mixer registers a_proj and b_proj in another order)
    for key in fla_sd:
        assert torch.equal(mine[key], fla_sd[key]), key
    with torch.no_grad(), fla_on_cpu(CASES[name][2]):
        ref = theirs(TOKENS).logits
    with torch.no_grad():
        got = ours(TOKENS)
    assert ref.abs().max() > 1.0
    assert (got - ref).abs().max() <= 1e-4
    # negative control: a rotary base that is not fla's shows up
    layer = ours.attention_layers[-1]
    ours.blocks[layer].attn.rope_theta = 123.0
    with torch.no_grad():
        assert (ours(TOKENS) - ref).abs().max() > 1e-3


@pytest.mark.parametrize("name", list(CASES))
def test_our_saved_hybrid_loads_in_fla(tmp_path, name):
    config_cls, model_cls, runner, kwargs = CASES[name]
    arch_kwargs = {k: v for k, v in kwargs.items()}
    ours = randomise(models.build(name, **arch_kwargs))
    ours.save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())["attn"]
    with fla_attention_on_cpu():
        theirs = model_cls.from_pretrained(tmp_path).eval()
    assert written == theirs.config.attn == config_cls(**kwargs).attn  # the same defaults, the same form
    for key, tensor in ours.state_dict().items():
        assert torch.equal(theirs.state_dict()[key], tensor), key
    with torch.no_grad(), fla_on_cpu(runner):
        ref = theirs(TOKENS).logits
    with torch.no_grad():
        assert (ours(TOKENS) - ref).abs().max() <= 1e-4


def hybrid(**attn):
    spec = {"layers": [1], "num_heads": 4, **attn}
    return randomise(
        models.build("deltanet", hidden_size=32, num_heads=2, num_hidden_layers=3, vocab_size=37, attn=spec)
    )


def test_attention_layers_carry_transformer_lens_hooks():
    model = hybrid(window_size=6)
    T = 12
    logits, cache = model.run_with_cache(TOKENS[:, :T])
    for hook, shape in {
        "hook_q": (2, T, 4, 8),
        "hook_k": (2, T, 4, 8),
        "hook_v": (2, T, 4, 8),
        "hook_rot_q": (2, T, 4, 8),
        "hook_attn_scores": (2, 4, T, T),
        "hook_pattern": (2, 4, T, T),
        "hook_z": (2, T, 4, 8),
    }.items():
        assert cache[f"blocks.1.attn.{hook}"].shape == shape, hook
    pattern = cache["blocks.1.attn.hook_pattern"]
    assert torch.allclose(pattern.sum(-1), torch.ones(2, 4, T))
    assert pattern[..., 0, 1:].abs().max() == 0  # causal
    assert pattern[..., 10, :5].abs().max() == 0 and pattern[..., 10, 5:11].min() > 0  # window of 6
    assert "blocks.1.attn.hook_beta" not in cache and "blocks.0.attn.hook_beta" in cache
    assert model.attention_layers == [1] and model.delta_layers == [0, 2]
    with torch.no_grad():  # the fused path (nobody hooks the pattern) computes the same
        assert (model(TOKENS[:, :T]) - logits).abs().max() <= 1e-5

    def uniform(pattern, hook):  # an edit of the pattern changes the output
        allowed = pattern > 0
        return allowed / allowed.sum(-1, keepdim=True)

    edited = model.run_with_hooks(TOKENS[:, :T], fwd_hooks=[("blocks.1.attn.hook_pattern", uniform)])
    assert (edited - logits).abs().max() > 1e-3


def test_a_hybrid_runs_in_chunks_like_whole():
    for window in (None, 7):
        model = hybrid(window_size=window)
        tokens = torch.randint(0, 37, (2, 50), generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            whole = model(tokens)
            chunked = forward_in_chunks(model, tokens, chunk_size=16)
        assert (chunked - whole).abs().max() <= 1e-5, window


def test_attention_layers_have_no_beta_and_refuse_delta_rule_interventions():
    model = hybrid()
    model.set_beta_range(None, None, 0.0, 1.0)  # every delta-rule layer; the attention layer left out
    with pytest.raises(DeltalensError, match=r"layer 1 of this hybrid is softmax attention.*\[0, 2\]"):
        model.set_beta_range(1, 0, 0.0, 1.0)
    assert model.cfg.n_heads == 2 and model.cfg.d_k == 16


@pytest.mark.parametrize(
    "attn, message",
    [
        ({"layers": [1], "num_heads": 4, "qk_norm": True}, r"option 'qk_norm' is not implemented"),
        ({"layers": [3], "num_heads": 4}, r"layer 3, outside \[0, 3\)"),
        ({"layers": [1], "num_heads": 4, "num_kv_heads": 3}, r"multiple of num_kv_heads"),
        ([{"layers": [1], "num_heads": 4}, {"layers": [1], "num_heads": 2}], r"names layer 1 twice"),
        ({"layers": [1]}, r"needs the field 'num_heads'"),
        ({"layers": [1], "num_heads": 3}, r"multiple of attn num_heads 3"),
    ],
)
def test_attention_options_we_do_not_implement_are_refused_by_name(attn, message):
    with pytest.raises(DeltalensError, match=message):
        models.build("deltanet", hidden_size=32, num_heads=2, num_hidden_layers=3, vocab_size=37, attn=attn)


def test_a_hybrid_s_weight_bytes_count_its_attention_layers():
    config = dict(hidden_size=32, num_heads=2, num_hidden_layers=3, vocab_size=37)
    attn = {"layers": [1], "num_heads": 4, "num_kv_heads": 1}
    model = models.build("deltanet", **config, attn=attn)
    exact = sum(t.numel() * 4 for t in [*model.parameters(), *model.buffers()])
    from deltalens.models.build import weight_bytes

    assert weight_bytes("deltanet", **config, attn=attn) == exact
    from deltalens.models.io.footprint import weights_lower_bound

    assert weights_lower_bound("deltanet", {**config, "attn": attn}) <= exact


def test_a_head_sweep_of_a_hybrid_covers_its_delta_rule_layers():
    from deltalens.interp.head_sweep import sweep
    from deltalens.interp.interventions import rescale_beta
    from deltalens.tasks import TraceSpec, make_tokenizer
    from deltalens.tasks.dataset import make_batch

    spec = TraceSpec(group="S3", action_set="swaps", actions=(4, 6), spacing=2)
    tokenizer = make_tokenizer("statement", spec)
    model = randomise(
        models.build(
            "deltanet", hidden_size=32, num_heads=2, num_hidden_layers=3, vocab_size=tokenizer.vocab_size,
            attn={"layers": [1], "num_heads": 4},
        )
    )  # fmt: skip
    batch = make_batch(spec, tokenizer, 2, seed=0)
    with pytest.raises(DeltalensError, match="layer 1 of this hybrid is softmax attention"):
        rescale_beta(model, 1, 0)
    result = sweep(model, batch, "beta-range")
    assert sorted(set(result.frame["layer"])) == [0, 2]
