"""The precision policy (models/ops/precision.py): bf16 matmuls, the recurrence and its state in fp32.

Stated tolerances (the policy's docstring repeats them): bf16 weights or bf16 autocast against fp32, logits
within 5e-2 absolute and an RMS error ratio <= 2e-2 on random tiny models, states within 5e-2; on the shipped
S3 checkpoint logits at the reveals within 0.25 (measured 0.09), the same predicted values, RMS ratio <= 3e-2;
every torch kernel of the recurrence gives under autocast exactly what it gives without.
"""

import json

import pytest
import torch
import torch.nn.functional as F

from deltalens.core.errors import DeltalensError
from deltalens.models.ops import precision
from deltalens.models.ops.delta_rule import chunk_delta_rule, chunk_delta_rule_with_states, delta_rule_recurrence
from deltalens.models.ops.gated_delta_rule import (
    chunk_gated_delta_rule,
    gated_delta_rule_recurrence,
    replay_gated_with_state_edits,
    token_transition,
)
from deltalens.models.ops.replay import replay_with_state_edits
from tests.conftest import DELTA_RULE_ARCHS, build_tiny

LOGIT_TOL, RATIO_TOL, STATE_TOL = 5e-2, 2e-2, 5e-2
FAMILY = [*DELTA_RULE_ARCHS, "deltanet-renorm"]


def err_ratio(ref, got):
    ref, got = ref.float(), got.float()
    return ((ref - got).square().mean().sqrt() / ref.square().mean().sqrt()).item()


def _model(name):
    if name == "deltanet-renorm":
        return build_tiny("deltanet", state_norm_every=5)
    return build_tiny(name)


def _tokens(T=33):
    return torch.randint(0, 23, (2, T), generator=torch.Generator().manual_seed(5))


def test_precision_names():
    assert precision.resolve_dtype("bf16") is torch.bfloat16 and precision.resolve_dtype("float32") is torch.float32
    assert precision.resolve_dtype(torch.bfloat16) is torch.bfloat16 and precision.resolve_dtype(None) is None
    assert precision.resolve_dtype(torch.float64) is torch.float64  # torch dtypes pass through, as before
    assert precision.precision_name(torch.bfloat16) == "bf16"
    with pytest.raises(DeltalensError, match="unknown precision 'fp8'"):
        precision.resolve_dtype("fp8")


def test_fla_dtype_rule():
    bf, fp = torch.zeros(1, dtype=torch.bfloat16), torch.zeros(1)
    assert precision.fla_dtype(bf, bf, bf) is torch.bfloat16
    assert precision.fla_dtype(fp, bf, bf) is torch.float32  # the widest: nothing is silently narrowed
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert precision.fla_dtype(fp, fp, fp) is torch.bfloat16  # autocast's: the caller asked for bf16


def _inputs(B=2, T=19, H=2, K=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=g)
    k = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    v = torch.randn(B, T, H, K, generator=g)
    beta = torch.rand(B, T, H, generator=g) * 2
    g_ = -torch.rand(B, T, H, generator=g)
    return q, k, v, beta, g_


KERNELS = {
    "chunked": lambda q, k, v, b, g: chunk_delta_rule(q, k, v, b, native=False)[0],
    "chunked renorm": lambda q, k, v, b, g: chunk_delta_rule(q, k, v, b, renorm_every=4)[0],
    "with states": lambda q, k, v, b, g: chunk_delta_rule_with_states(q, k, v, b, native=False)[2],
    "recurrence": lambda q, k, v, b, g: delta_rule_recurrence(q, k, v, b)[2],
    "replay": lambda q, k, v, b, g: replay_with_state_edits(
        q,
        k,
        v,
        b,
        *(lambda s: (s, s * torch.linspace(1, 0.5, s.shape[1])[None, :, None, None, None]))(
            delta_rule_recurrence(q, k, v, b)[2]
        ),
    )[0],
    "gated chunked": lambda q, k, v, b, g: chunk_gated_delta_rule(q, k, v, b, g, native=False, with_states=True)[2],
    "gated recurrence": lambda q, k, v, b, g: gated_delta_rule_recurrence(q, k, v, b, g)[0],
    "gated replay": lambda q, k, v, b, g: replay_gated_with_state_edits(
        q,
        k[:, :, :, None],
        v[:, :, :, None],
        b[..., None],
        g,
        *(lambda s: (s, s * 0.5))(gated_delta_rule_recurrence(q, k, v, b, g)[2]),
    )[0],
    "token transition": lambda q, k, v, b, g: token_transition(k[..., None, :], b[..., None], g),
}


@pytest.mark.parametrize("name", KERNELS)
def test_kernels_run_in_fp32_under_autocast(name):
    """Issue 30 defect 1: under bf16 autocast the chunked kernel crashed (solve_triangular has no bf16 kernel)
    and the gated one dropped its matmuls to bf16; now each gives exactly its fp32 result."""
    inputs = _inputs()
    ref = KERNELS[name](*inputs)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = KERNELS[name](*inputs)
    assert got.dtype == ref.dtype and torch.equal(got, ref)


@pytest.mark.parametrize("name", FAMILY)
@pytest.mark.parametrize("how", ["weights", "autocast"])
def test_bf16_logits_within_tolerance_of_fp32(name, how):
    model, toks = _model(name), _tokens()
    with torch.no_grad():
        ref = model(toks)
        if how == "weights":
            low = precision.cast_model(build_tiny(name if name != "deltanet-renorm" else "deltanet"), "bf16")
            if name == "deltanet-renorm":
                low = precision.cast_model(_model(name), "bf16")
            got = low(toks)
            _, cache = low.run_with_cache(toks, names_filter=lambda n: n.endswith(("hook_state", "hook_beta")))
            assert cache["blocks.0.attn.hook_state"].dtype == torch.float32  # the state stays fp32
            assert cache["blocks.0.attn.hook_beta"].dtype == torch.float32  # so does beta, which drives it
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                got = model(toks)
    assert (got.float() - ref).abs().max() <= LOGIT_TOL and err_ratio(ref, got) <= RATIO_TOL


@pytest.mark.parametrize("name", FAMILY)
def test_bf16_capture_and_edit_on_cpu_within_tolerance(name):
    """A bf16 (autocast) capture with gradients, a hook_state edit and a state_edit: these crashed for DeltaNet
    before issue 30 (the chunked kernel under autocast); now within the stated tolerance of fp32."""
    model, toks = _model(name), _tokens()
    names = lambda n: n.endswith("hook_state")  # noqa: E731
    edit = [("blocks.1.attn.hook_state", lambda x, hook: x * 0.8)]

    def run():
        logits, cache = model.run_with_cache(toks, names_filter=names)  # with gradients: the chunked kernel
        with torch.no_grad():
            edited = model.run_with_hooks(toks, fwd_hooks=edit)
            with model.state_edit(0, lambda t, S: S * 0.9):
                stepped = model(toks)
        return logits.detach(), cache["blocks.1.attn.hook_state"].detach(), edited, stepped

    ref = run()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = run()
    assert got[1].dtype == torch.float32
    assert (got[1] - ref[1]).abs().max() <= STATE_TOL
    for r, g in zip(ref[::2] + ref[3:], got[::2] + got[3:]):
        assert (g.float() - r).abs().max() <= LOGIT_TOL and err_ratio(r, g) <= RATIO_TOL


def test_shipped_checkpoint_in_bf16(shipped_s3, shipped_s3_batch):
    """dl.load(..., dtype="bf16") on the shipped S3 DeltaNet: logits within tolerance, the same predictions
    at the reveals, and the CLI's --dtype gives the same held-out accuracy."""
    import deltalens as dl

    low = dl.load("s3-deltanet-neg-statement", dtype="bf16")
    assert {p.dtype for p in low.parameters()} == {torch.bfloat16}
    toks = shipped_s3_batch["tokens"]
    with torch.no_grad():
        ref, got = shipped_s3(toks), low(toks)
    # at the reveals (what it was trained to predict; measured 0.09): positions between them are
    # unsupervised, and there bf16 moves a logit by up to ~4.5 (overall RMS ratio measured 0.018)
    reveal = shipped_s3_batch["reveal_mask"][:, 1:]
    assert (got[:, :-1].float() - ref[:, :-1])[reveal].abs().max() <= 0.25 and err_ratio(ref, got) <= 3e-2
    assert torch.equal(got[:, :-1].argmax(-1)[reveal], ref[:, :-1].argmax(-1)[reveal])


def test_cli_dtype_option(capsys):
    from deltalens.cli.main import main

    argv = ["eval", "s3-deltanet-neg-statement", "--lengths", "16", "--n-traces", "16", "--json"]
    assert main([*argv, "--dtype", "bf16"]) == 0
    low = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    ref = json.loads(capsys.readouterr().out)
    assert abs(low["reveal_accuracy"] - ref["reveal_accuracy"]) <= 0.02
    with pytest.raises(SystemExit):
        main([*argv, "--dtype", "fp8"])


def test_bf16_short_conv_runs_the_c_kernel_in_fp32():
    from unittest import mock

    from deltalens.models.ops import short_conv

    assert short_conv._kernels() is not None, "the C short conv did not build (scripts/setup.sh installs gcc)"
    x, w = torch.randn(2, 9, 6), torch.randn(6, 1, 4)
    ref = short_conv.short_conv_ref(x.bfloat16().float(), w.bfloat16().float())
    with mock.patch.object(short_conv.F, "conv1d", side_effect=AssertionError("conv1d ran")):
        got = short_conv.short_conv(x.bfloat16(), w.bfloat16(), None, True, 3)
    assert got.dtype == torch.bfloat16 and (got.float() - ref).abs().max() <= 2e-2
