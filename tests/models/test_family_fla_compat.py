"""HookedGatedDeltaNet and HookedDeltaProduct against fla's GatedDeltaNetForCausalLM and
GatedDeltaProductForCausalLM: state dicts, HF save/load both ways, logits and gradients.

As in tests/test_fla_compat.py, fla's own model code runs on CPU with its Triton kernels swapped for
fla's torch references (`naive_recurrent_gated_delta_rule`, `naive_recurrent_gated_delta_product`,
`naive_gdn_gate`; norms, conv and SwiGLU: tests/fla_on_cpu.py). None of our code runs on the fla side.
"""

import contextlib
import json
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from fla.models import (
    GatedDeltaNetConfig,
    GatedDeltaNetForCausalLM,
    GatedDeltaProductConfig,
    GatedDeltaProductForCausalLM,
)
from fla_on_cpu import fla_modules_on_cpu, l2, randomise

from deltalens import models
from deltalens.models.lm.deltaproduct import HookedDeltaProduct
from deltalens.models.lm.gated_deltanet import HookedGatedDeltaNet

BASE = dict(hidden_size=32, num_hidden_layers=2, vocab_size=29, head_dim=8, num_heads=2)
CONFIGS = {
    "gdn-default": ("gated_deltanet", dict()),
    "gdn-gva+neg": ("gated_deltanet", dict(num_v_heads=4, expand_v=1.0, allow_neg_eigval=True)),
    "gdn-sigmoid+noconv+unfused": (
        "gated_deltanet",
        dict(output_gate_activation="sigmoid", use_short_conv=False, fuse_norm=False, fuse_swiglu=False),
    ),
    "gdn-nogate+tied": ("gated_deltanet", dict(use_gate=False, tie_word_embeddings=True, conv_size=2)),
    "gdp-n1": ("deltaproduct", dict(num_householder=1)),
    "gdp-n2-neg": ("deltaproduct", dict(num_householder=2, allow_neg_eigval=True)),
    "gdp-n3-forget-neg": ("deltaproduct", dict(num_householder=3, use_forget_gate=True, allow_neg_eigval=True)),
    "gdp-n2-forget-nooutgate": (
        "deltaproduct",
        dict(num_householder=2, use_forget_gate=True, use_output_gate=False, expand_v=1.0),
    ),
}
FLA = {
    "gated_deltanet": (GatedDeltaNetConfig, GatedDeltaNetForCausalLM, HookedGatedDeltaNet),
    "deltaproduct": (GatedDeltaProductConfig, GatedDeltaProductForCausalLM, HookedDeltaProduct),
}


def fla_model(name, seed=0):
    arch, overrides = CONFIGS[name]
    config_cls, model_cls, _ = FLA[arch]
    torch.manual_seed(seed)
    return randomise(model_cls(config_cls(**BASE, **overrides)), seed)


# ---- fla's model on CPU, kernels swapped for torch references ------------------------------------


def _gdn_kernel(
    q,
    k,
    v,
    g,
    beta,
    initial_state=None,
    output_final_state=False,
    use_qk_l2norm_in_kernel=False,
    use_beta_sigmoid_in_kernel=False,
    allow_neg_eigval=False,
    use_gate_in_kernel=False,
    A_log=None,
    dt_bias=None,
    **unused,
):
    from fla.ops.gated_delta_rule import naive_recurrent_gated_delta_rule
    from fla.ops.gated_delta_rule.gate import naive_gdn_gate

    if use_qk_l2norm_in_kernel:
        q, k = l2(q), l2(k)
    if use_beta_sigmoid_in_kernel:
        beta = beta.float().sigmoid() * (2.0 if allow_neg_eigval else 1.0)
    if use_gate_in_kernel:
        g = naive_gdn_gate(g, A_log, dt_bias)
    if g is None:
        g = beta.new_zeros(beta.shape)
    repeat = v.shape[2] // q.shape[2]  # grouped value heads
    q, k = q.repeat_interleave(repeat, 2), k.repeat_interleave(repeat, 2)
    o, S = naive_recurrent_gated_delta_rule(
        q, k, v, beta, g, initial_state=initial_state, output_final_state=output_final_state
    )
    return o.to(v.dtype), S


def _gdp_kernel(
    q,
    k,
    v,
    g,
    beta,
    num_householder=1,
    initial_state=None,
    output_final_state=False,
    use_qk_l2norm_in_kernel=False,
    **unused,
):
    from fla.ops.gated_delta_product.naive import naive_recurrent_gated_delta_product

    if use_qk_l2norm_in_kernel:
        q, k = l2(q), l2(k)
    o, S = naive_recurrent_gated_delta_product(
        q,
        k,
        v,
        g,
        beta,
        q.shape[-1] ** -0.5,
        initial_state=initial_state,
        output_final_state=output_final_state,
        num_householder=num_householder,
    )
    return o, S


@contextlib.contextmanager
def fla_runs_on_cpu():
    import fla.layers.gated_deltanet as gdn_layer
    import fla.layers.gated_deltaproduct as gdp_layer

    def fused_conv(x, weight, bias=None, activation=None, **unused):  # GDN's one conv over q, k and v
        W = weight.shape[-1]
        y = F.conv1d(x.transpose(1, 2), weight[:, None], bias, padding=W - 1, groups=weight.shape[0])
        y = y[..., : x.shape[1]].transpose(1, 2)
        return (F.silu(y) if activation else y), None

    def gdp_recurrent(
        q, k, v, g, beta, initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=False, **unused
    ):  # fla's DeltaProduct fused path: q and g already interleaved
        from fla.ops.gated_delta_rule import naive_recurrent_gated_delta_rule

        if use_qk_l2norm_in_kernel:
            q, k = l2(q), l2(k)
        g = beta.new_zeros(beta.shape) if g is None else g
        o, S = naive_recurrent_gated_delta_rule(
            q, k, v, beta, g, initial_state=initial_state, output_final_state=output_final_state
        )
        return o.to(v.dtype), S

    with contextlib.ExitStack() as stack:
        stack.enter_context(fla_modules_on_cpu())
        for name in ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"):
            stack.enter_context(mock.patch.object(gdn_layer, name, _gdn_kernel))
        stack.enter_context(mock.patch.object(gdn_layer, "causal_conv1d", fused_conv))
        stack.enter_context(mock.patch.object(gdp_layer, "chunk_gated_delta_product", _gdp_kernel))
        stack.enter_context(mock.patch.object(gdp_layer, "fused_recurrent_gated_delta_rule", gdp_recurrent))
        yield


# ---- tests ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_state_dict_keys_shapes_and_dtypes_equal_fla(name):
    arch, overrides = CONFIGS[name]
    ours = models.build(arch, **BASE, **overrides).state_dict()
    theirs = fla_model(name).state_dict()
    assert sorted(ours) == sorted(theirs)
    for key in theirs:
        assert ours[key].shape == theirs[key].shape and ours[key].dtype == theirs[key].dtype, key


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_and_gradients_match_fla_model_run_on_torch_references(name):
    theirs = fla_model(name)
    ours = FLA[CONFIGS[name][0]][2].from_fla(theirs)
    toks = torch.randint(0, BASE["vocab_size"], (2, 80), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), fla_runs_on_cpu():
        ref_long = theirs(toks).logits  # fla's "chunk" mode (T > 64)
        ref_short = theirs(toks[:, :30]).logits  # fla's "fused_recurrent" mode (T <= 64)
    with torch.no_grad():
        got = ours(toks)
    assert ref_long.abs().max() > 1.0  # not a degenerate near-zero comparison
    assert (got - ref_long).abs().max() <= 1e-4
    assert (got[:, :30] - ref_short).abs().max() <= 1e-4

    # gradients of every parameter (fla's chunk mode under autograd)
    with fla_runs_on_cpu():
        logits = theirs(toks[:, :40]).logits
        F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), toks[:, 1:40].reshape(-1)).backward()
    ours(toks[:, :40], return_type="loss").backward()
    fla_grads = dict(theirs.named_parameters())
    for key, p in ours.named_parameters():
        ref = fla_grads[key].grad
        assert ref is not None and p.grad is not None, key
        assert (p.grad - ref).abs().max() <= 1e-4 * max(1.0, ref.abs().max().item()), key

    # negative control: a different beta range must show up as a mismatch
    ours.set_beta_range(None, None, 0.0, 0.5)
    with torch.no_grad():
        assert (ours(toks) - ref_long).abs().max() > 1e-3


@pytest.mark.parametrize("name", ["gdn-gva+neg", "gdn-nogate+tied", "gdp-n3-forget-neg", "gdp-n2-neg"])
def test_save_pretrained_loads_in_fla_and_back(tmp_path, name):
    arch, overrides = CONFIGS[name]
    _, fla_cls, ours_cls = FLA[arch]
    torch.manual_seed(0)
    ours = models.build(arch, **BASE, **overrides)
    extra = {"deltalens": {"task": "S4 full"}}
    ours.save_pretrained(tmp_path, extra_config=extra)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["architectures"] == [fla_cls.__name__] and raw["model_type"] == fla_cls.config_class.model_type
    theirs = fla_cls.from_pretrained(tmp_path)
    assert theirs.config.deltalens == extra["deltalens"]
    for key, value in ours.state_dict().items():
        assert torch.equal(value, theirs.state_dict()[key]), key
    again = ours_cls.from_pretrained(tmp_path)
    for key, value in again.state_dict().items():
        assert torch.equal(value, ours.state_dict()[key]), key


@pytest.mark.parametrize("name", ["gdn-default", "gdp-n2-forget-nooutgate"])
def test_fla_save_pretrained_opens_as_the_right_architecture(tmp_path, name):
    theirs = fla_model(name)
    theirs.save_pretrained(tmp_path)
    ours = models.load(tmp_path)  # a plain fla folder: no deltalens section
    assert ours.arch == CONFIGS[name][0]
    assert models.read_checkpoint_meta(tmp_path)["architecture"] == CONFIGS[name][0]
    for key, value in ours.state_dict().items():
        assert torch.equal(value, theirs.state_dict()[key]), key
    back = ours.to_fla()
    assert type(back) is type(theirs)


@pytest.mark.parametrize("name", ["gdn-gva+neg", "gdp-n3-forget-neg"])
def test_models_save_and_load_keep_arch_config_and_weights(tmp_path, name):
    arch, overrides = CONFIGS[name]
    model = models.build(arch, **BASE, **overrides)
    models.save(model, tmp_path / "m", extra={"task": {"group": "S4"}})
    again = models.load(tmp_path / "m")
    assert again.arch == arch and again.model_config == model.model_config
    toks = torch.randint(0, BASE["vocab_size"], (1, 17))
    with torch.no_grad():
        assert torch.equal(again(toks), model.eval()(toks))


def test_the_fla_free_configs_have_fla_s_fields_and_defaults():
    import inspect

    from deltalens.models.io.configs import to_fla_config
    from deltalens.models.registry import family

    for arch, (config_cls, _, _) in FLA.items():
        params = inspect.signature(config_cls.__init__).parameters.values()
        fla_defaults = {p.name: p.default for p in params if p.name != "self" and p.kind is not p.VAR_KEYWORD}
        settings = family(arch).settings
        assert settings.defaults == fla_defaults, arch
        ours = settings(**BASE, allow_neg_eigval=True)
        theirs = to_fla_config(ours)
        assert type(theirs) is config_cls and theirs.model_type == settings.model_type == family(arch).model_types[0]
        for key in fla_defaults:
            assert getattr(theirs, key) == getattr(ours, key), key


def test_unknown_config_keys_are_refused():
    from deltalens.core.errors import DeltalensError

    with pytest.raises(DeltalensError, match="num_householders"):
        models.build("deltaproduct", **BASE, num_householders=2)
    with pytest.raises(DeltalensError, match="num_householder"):
        models.build("gated_deltanet", **BASE, num_householder=2)  # a DeltaProduct field
    for bad in (0, 2.5, True):
        with pytest.raises(DeltalensError, match="whole number >= 1"):
            models.build("deltaproduct", **BASE, num_householder=bad)
    with pytest.raises(DeltalensError, match="multiple of num_heads"):
        models.build("gated_deltanet", **BASE, num_v_heads=3)
