"""HookedDeltaNet against fla's DeltaNetForCausalLM: state_dict, HF save/load both ways, numerics.

fla's model cannot run on CPU as shipped (its short conv, norms, SwiGLU and delta rule are Triton
kernels). For the numerical test we run fla's own model code (its module wiring, residuals,
activation choices, gating, fla's mode switch at 64 tokens) with those kernels swapped for torch
stand-ins: fla's own torch references where fla has them (`fla.ops.delta_rule.naive`,
`fla.modules.norm.layernorm.rms_norm_ref`, `fla.modules.norm.layernorm_gated.rms_norm_ref`) and
two-line torch equivalents of the Triton conv and SwiGLU (nn.Conv1d's forward on fla's own
parameters; silu(x) * y). None of our code is used on the fla side.
"""

import contextlib
import json
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from fla.models import DeltaNetConfig, DeltaNetForCausalLM
from fla_on_cpu import fla_modules_on_cpu, l2, randomise

from deltalens.models.layers.rms_norm import RMSNorm, RMSNormGated, rms_norm_ref
from deltalens.models.layers.short_conv import ShortConvolution, short_conv_ref
from deltalens.models.lm.deltanet import HookedDeltaNet

CONFIGS = {
    "default": dict(),
    "gate+neg": dict(use_gate=True, allow_neg_eigval=True),
    "noconv+relu+unfused": dict(use_short_conv=False, qk_activation="relu", fuse_norm=False, fuse_swiglu=False),
    "sum+elu+nobeta+tied": dict(qk_norm="sum", qk_activation="elu", use_beta=False, tie_word_embeddings=True),
    "expand+conv2+identity": dict(
        expand_k=0.5, expand_v=2.0, conv_size=2, qk_activation="identity", intermediate_size=48, allow_neg_eigval=True
    ),
}


def config(**overrides):
    kwargs = dict(hidden_size=32, num_heads=2, num_hidden_layers=2, vocab_size=37)
    kwargs.update(overrides)
    return DeltaNetConfig(**kwargs)


def fla_model(cfg, seed=0):
    """fla's model with weights large enough that every part of the layer moves the output."""
    torch.manual_seed(seed)
    return randomise(DeltaNetForCausalLM(cfg), seed)


# ---- fla's model on CPU, kernels swapped for torch references ------------------------------------


def _naive_delta_rule(
    q, k, v, beta, initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=False, **unused
):
    from fla.ops.delta_rule.naive import delta_rule_recurrence

    if use_qk_l2norm_in_kernel:
        q, k = l2(q), l2(k)
    o, S = delta_rule_recurrence(
        *(x.transpose(1, 2) for x in (q, k, v, beta)),
        initial_state=initial_state,
        output_final_state=output_final_state,
    )
    return o.transpose(1, 2), S


@contextlib.contextmanager
def fla_runs_on_cpu():
    import fla.layers.delta_net as fla_layer

    with contextlib.ExitStack() as stack:
        stack.enter_context(fla_modules_on_cpu())
        stack.enter_context(mock.patch.object(fla_layer, "chunk_delta_rule", _naive_delta_rule))
        stack.enter_context(mock.patch.object(fla_layer, "fused_recurrent_delta_rule", _naive_delta_rule))
        yield


# ---- tests ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_state_dict_keys_and_shapes_equal_fla(name):
    cfg = config(**CONFIGS[name])
    ours = HookedDeltaNet(cfg).state_dict()
    theirs = DeltaNetForCausalLM(cfg).state_dict()
    assert list(ours) == list(theirs)
    for key in theirs:
        assert ours[key].shape == theirs[key].shape and ours[key].dtype == theirs[key].dtype, key
    assert ("model.layers.0.attn.g_proj.weight" in ours) == cfg.use_gate
    assert ("model.layers.0.attn.q_conv1d.weight" in ours) == cfg.use_short_conv


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_match_fla_model_run_on_torch_references(name):
    cfg = config(**CONFIGS[name])
    theirs = fla_model(cfg)
    ours = HookedDeltaNet.from_fla(theirs)
    toks = torch.randint(0, cfg.vocab_size, (2, 80), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), fla_runs_on_cpu():
        ref_long = theirs(toks).logits  # fla's "chunk" mode (T > 64)
        ref_short = theirs(toks[:, :30]).logits  # fla's "fused_recurrent" mode (T <= 64)
    with torch.no_grad():
        got = ours(toks)
    assert ref_long.abs().max() > 1.0  # not a degenerate near-zero comparison
    assert (got - ref_long).abs().max() <= 1e-4
    assert (got[:, :30] - ref_short).abs().max() <= 1e-4
    # negative control: a different beta range must show up as a mismatch
    ours.set_beta_range(None, None, 0.0, 0.5)
    with torch.no_grad():
        assert (ours(toks) - ref_long).abs().max() > 1e-3


@pytest.mark.parametrize("tied", [False, True])
def test_our_save_pretrained_loads_in_fla(tmp_path, tied):
    cfg = config(use_gate=True, allow_neg_eigval=True, tie_word_embeddings=tied)
    torch.manual_seed(0)
    ours = HookedDeltaNet(cfg)
    extra = {"deltalens": {"task": "S3 swaps", "tokenizer": {"vocab": ["a", "b"]}}}
    ours.save_pretrained(tmp_path, extra_config=extra)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["deltalens"] == extra["deltalens"] and raw["architectures"] == ["DeltaNetForCausalLM"]

    theirs = DeltaNetForCausalLM.from_pretrained(tmp_path)
    assert theirs.config.deltalens == extra["deltalens"]
    ours_sd, theirs_sd = ours.state_dict(), theirs.state_dict()
    assert list(ours_sd) == list(theirs_sd)
    for key in ours_sd:
        assert torch.equal(ours_sd[key], theirs_sd[key]), key
    if tied:
        assert theirs.lm_head.weight.data_ptr() == theirs.model.embeddings.weight.data_ptr()

    again = HookedDeltaNet.from_pretrained(tmp_path)  # and back, extra section kept on the config
    assert again.config.deltalens == extra["deltalens"]
    for key, value in again.state_dict().items():
        assert torch.equal(value, ours_sd[key]), key


@pytest.mark.parametrize("name", ["default", "sum+elu+nobeta+tied"])
def test_from_pretrained_loads_fla_save_pretrained(tmp_path, name):
    theirs = fla_model(config(**CONFIGS[name]))
    theirs.save_pretrained(tmp_path)
    ours = HookedDeltaNet.from_pretrained(tmp_path)
    theirs_sd = theirs.state_dict()
    assert list(ours.state_dict()) == list(theirs_sd)
    for key, value in ours.state_dict().items():
        assert torch.equal(value, theirs_sd[key]), key
    toks = torch.randint(0, 37, (1, 20))
    with torch.no_grad():
        assert torch.equal(ours(toks), HookedDeltaNet.from_fla(theirs)(toks))


def test_save_pretrained_refuses_to_shadow_config_fields(tmp_path):
    model = HookedDeltaNet(config())
    with pytest.raises(ValueError, match="deltalens"):
        model.save_pretrained(tmp_path, extra_config={"hidden_size": 64})


def test_from_pretrained_errors_are_readable(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        HookedDeltaNet.from_pretrained(tmp_path)
    HookedDeltaNet(config()).save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").rename(tmp_path / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match="pickle"):
        HookedDeltaNet.from_pretrained(tmp_path)


def test_to_fla_round_trip():
    ours = HookedDeltaNet(config(use_gate=True))
    theirs = ours.to_fla()
    assert isinstance(theirs, DeltaNetForCausalLM)
    for key, value in theirs.state_dict().items():
        assert torch.equal(value, ours.state_dict()[key])


@pytest.mark.parametrize("bias,activation", [(False, "silu"), (True, None)])
def test_short_convolution_matches_fla_parameters_and_reference(bias, activation):
    from fla.modules import ShortConvolution as FlaShortConvolution

    torch.manual_seed(0)
    theirs = FlaShortConvolution(hidden_size=12, kernel_size=4, bias=bias, activation=activation)
    ours = ShortConvolution(hidden_size=12, kernel_size=4, bias=bias, activation=activation)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}
    assert ours.weight.shape == (12, 1, 4)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 9, 12)
    y = ours(x)
    assert (y - short_conv_ref(x, theirs.weight, theirs.bias, activation)).abs().max() <= 1e-6
    # fla's kernel convention: y[t] = sum_w weight[:, 0, w] * x[t - (W - 1) + w]; check one entry by hand
    pre = sum(theirs.weight[3, 0, w] * x[1, 5 - 3 + w, 3] for w in range(4)) + (theirs.bias[3] if bias else 0.0)
    expected = F.silu(pre) if activation else pre
    assert abs(y[1, 5, 3].item() - expected.item()) <= 1e-6
    # causal, and blind beyond W - 1 tokens back
    x2 = x.clone()
    x2[:, 4] += 1.0
    changed = (ours(x2) - y).abs().amax(dim=(0, 2)) > 0
    assert changed.tolist() == [False] * 4 + [True] * 4 + [False]


def test_rms_norms_match_fla_torch_references():
    from fla.modules import FusedRMSNormGated
    from fla.modules import RMSNorm as FlaRMSNorm
    from fla.modules.norm.layernorm import rms_norm_ref as fla_rms_ref
    from fla.modules.norm.layernorm_gated import rms_norm_ref as fla_gated_ref

    torch.manual_seed(0)
    norm = RMSNorm(16, eps=1e-6)
    gated = RMSNormGated(16, eps=1e-5)
    assert set(norm.state_dict()) == set(FlaRMSNorm(16).state_dict()) == {"weight"}
    assert set(gated.state_dict()) == set(FusedRMSNormGated(16).state_dict()) == {"weight"}
    with torch.no_grad():
        norm.weight.normal_()
        gated.weight.normal_()
    x, res, g = torch.randn(3, 5, 16), torch.randn(3, 5, 16), torch.randn(3, 5, 16)
    out, summed = norm(x, res, prenorm=True)
    ref_out, ref_sum = fla_rms_ref(x, norm.weight, None, residual=res, eps=1e-6, prenorm=True, upcast=True)
    assert (out - ref_out).abs().max() <= 1e-5 and torch.equal(summed, ref_sum)
    assert (norm(x) - rms_norm_ref(x, norm.weight, eps=1e-6)).abs().max() <= 1e-5
    assert (gated(x, g) - fla_gated_ref(x, gated.weight, None, z=g, eps=1e-5)).abs().max() <= 1e-5
    assert norm(x.bfloat16()).dtype == torch.bfloat16


def test_unsupported_configs_fail_clearly():
    with pytest.raises(NotImplementedError, match="attnres"):
        HookedDeltaNet(config(attnres_block_size=2))


def test_the_fla_free_config_has_fla_s_fields_and_defaults():
    """models/deltanet_config.py mirrors fla's DeltaNetConfig; fla stays the source of truth."""
    import inspect

    from deltalens.models.io.configs import FLA_DEFAULTS, DeltaNetSettings, to_fla_config

    params = inspect.signature(DeltaNetConfig.__init__).parameters.values()
    fla_defaults = {p.name: p.default for p in params if p.name != "self" and p.kind is not p.VAR_KEYWORD}
    assert FLA_DEFAULTS == fla_defaults
    ours = DeltaNetSettings(vocab_size=37, hidden_size=32, num_heads=2, num_hidden_layers=2, allow_neg_eigval=True)
    theirs = to_fla_config(ours)
    for key in FLA_DEFAULTS:
        assert getattr(theirs, key) == getattr(ours, key), key


def test_opening_a_deltanet_checkpoint_on_cpu_does_not_import_fla(tmp_path):
    import subprocess
    import sys

    from deltalens import models

    model = models.build("deltanet", vocab_size=12, hidden_size=16, num_heads=2, num_hidden_layers=1)
    models.save(model, tmp_path / "m")
    code = (
        "import sys, torch; from deltalens import models; m = models.load(sys.argv[1]); m(torch.tensor([[1, 2]])); "
        "print(sorted(k for k in sys.modules if k == 'fla' or k.startswith('fla.')))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m")], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
