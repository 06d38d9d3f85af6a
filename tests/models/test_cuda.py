"""GPU checks: fla's Triton kernels against our pure-torch kernel and model (run with `pytest -m cuda`).

Tolerances follow fla's own tests/ops/test_delta.py: relative RMS error ("err ratio") <= 0.006 for
outputs and final states, <= 0.008 for gradients, in bf16.
"""

import pytest
import torch
import torch.nn.functional as F

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def err_ratio(ref, got):
    """fla's get_err_ratio: RMS of the difference over RMS of the reference."""
    ref, got = ref.detach().float(), got.detach().float()
    return ((ref - got).square().mean().sqrt() / (ref.square().mean().sqrt() + 1e-8)).item()


def _inputs(B, T, H, D, dtype, beta_max, seed=42):
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(B, T, H, D, generator=g)
    k = F.normalize(torch.randn(B, T, H, D, generator=g), p=2, dim=-1)
    v = torch.randn(B, T, H, D, generator=g)
    beta = torch.rand(B, T, H, generator=g) * beta_max
    h0 = torch.randn(B, H, D, D, generator=g)
    lowp = [x.to("cuda", dtype).requires_grad_() for x in (q, k, v, beta)]
    return lowp + [h0.cuda().requires_grad_()]


def _run(fn, inputs, do, dht):
    for x in inputs:
        x.grad = None
    o, ht = fn(*inputs)
    ((o.float() * do).sum() + (ht.float() * dht).sum()).backward()
    return [o, ht] + [x.grad.clone() for x in inputs]


@pytest.mark.parametrize("T", [63, 300])
@pytest.mark.parametrize("D", [32, 64])
@pytest.mark.parametrize("beta_max", [1.0, 2.0])
def test_fla_chunk_kernel_bf16_matches_torch_kernel(T, D, beta_max):
    from deltalens.models.ops.delta_rule import chunk_delta_rule

    inputs = _inputs(2, T, 2, D, torch.bfloat16, beta_max)
    do = torch.rand(2, T, 2, D, device="cuda")
    dht = torch.rand(2, 2, D, D, device="cuda")

    def fla(q, k, v, b, h0):
        return chunk_delta_rule(q, k, v, b, scale=1.0, initial_state=h0, output_final_state=True, use_fla=True)

    def ours(q, k, v, b, h0):  # fp32 math on the same bf16 inputs
        return chunk_delta_rule(q, k, v, b, scale=1.0, initial_state=h0, output_final_state=True, use_fla=False)

    tri = _run(fla, inputs, do, dht)
    ref = _run(ours, inputs, do, dht)
    names = ["o", "ht", "dq", "dk", "dv", "dbeta", "dh0"]
    for name, r, t in zip(names, ref, tri):
        limit = 0.006 if name in ("o", "ht") else 0.008
        assert err_ratio(r, t) <= limit, f"{name}: err ratio {err_ratio(r, t):.5f} > {limit}"


def test_fla_dispatch_fp32_uses_fused_recurrent_and_matches():
    from deltalens.models.ops.delta_rule import chunk_delta_rule

    q, k, v, b, h0 = (x.detach().float() for x in _inputs(2, 100, 2, 32, torch.float32, 2.0))
    o_fla, ht_fla = chunk_delta_rule(q, k, v, b, initial_state=h0, output_final_state=True)  # auto: fla
    o_ref, ht_ref = chunk_delta_rule(q, k, v, b, initial_state=h0, output_final_state=True, use_fla=False)
    assert (o_fla - o_ref).abs().max() <= 1e-3 and (ht_fla - ht_ref).abs().max() <= 1e-3


def test_hooked_deltanet_on_cuda_matches_fla_model():
    from fla.models import DeltaNetConfig, DeltaNetForCausalLM

    from deltalens.models.lm.deltanet import HookedDeltaNet

    cfg = DeltaNetConfig(
        hidden_size=128, num_heads=2, num_hidden_layers=2, vocab_size=64, allow_neg_eigval=True, use_gate=True
    )
    torch.manual_seed(0)
    theirs = DeltaNetForCausalLM(cfg).cuda().eval()
    ours = HookedDeltaNet.from_fla(theirs).eval()
    toks = torch.randint(0, 64, (2, 200), device="cuda")
    with torch.no_grad():
        # fp32, T <= 64: fla's model takes its fused recurrent kernel, so does ours (fp32 dispatch)
        short = toks[:, :48]
        assert (theirs(short).logits - ours(short)).abs().max() <= 1e-3
        # bf16, T > 64: fla's chunk kernel on both sides
        theirs_bf, ours_bf = theirs.bfloat16(), ours.bfloat16()
        ref = theirs_bf(toks).logits
        assert err_ratio(ref, ours_bf(toks)) <= 0.01
        ours_bf.set_kernel(use_fla=False)  # our torch kernel on the GPU agrees too
        assert err_ratio(ref, ours_bf(toks)) <= 0.02
        ours_bf.set_kernel(use_fla=None)
        logits, cache = ours_bf.run_with_cache(toks, names_filter=lambda n: n.endswith("hook_state"))
        assert cache["blocks.1.attn.hook_state"].shape == (2, 200, 2, 64, 64)
        assert err_ratio(ref, logits) <= 0.02


@pytest.mark.parametrize(
    "arch, overrides",
    [
        ("gated_deltanet", dict(num_v_heads=4, allow_neg_eigval=True)),
        ("deltaproduct", dict(num_householder=3, use_forget_gate=True, allow_neg_eigval=True)),
        ("deltaproduct", dict(num_householder=2, use_forget_gate=False)),
    ],
)
def test_gated_family_on_cuda_matches_fla_models(arch, overrides):
    """HookedGatedDeltaNet / HookedDeltaProduct on fla's kernels, and on our torch kernels on the GPU,
    against fla's GatedDeltaNetForCausalLM / GatedDeltaProductForCausalLM (its own Triton kernels)."""
    from deltalens import models

    torch.manual_seed(0)
    ours = (
        models.build(arch, vocab_size=64, hidden_size=128, num_hidden_layers=2, num_heads=2, head_dim=32, **overrides)
        .cuda()
        .eval()
    )
    theirs = ours.to_fla().cuda().eval()
    toks = torch.randint(0, 64, (2, 200), device="cuda")
    with torch.no_grad():
        short = toks[:, :48]  # fp32, fla's fused recurrent path
        assert (theirs(short).logits - ours(short)).abs().max() <= 2e-3
        theirs_bf, ours_bf = theirs.bfloat16(), ours.bfloat16()
        ref = theirs_bf(toks).logits  # bf16, fla's chunk kernels
        assert err_ratio(ref, ours_bf(toks)) <= 0.02
        ours_bf.set_kernel(use_fla=False)
        assert err_ratio(ref, ours_bf(toks)) <= 0.02
        ours_bf.set_kernel(use_fla=None)
        logits, cache = ours_bf.run_with_cache(toks, names_filter=lambda n: n.endswith("hook_state"))
        assert cache["blocks.1.attn.hook_state"].shape[:3] == (2, 200, ours.n_heads)
        assert err_ratio(ref, logits) <= 0.02
    # training step on fla's kernels: gradients agree with our torch kernels on the GPU
    ours_f = ours.float().train()
    ours_f(toks[:, :100], return_type="loss").backward()
    fla_grads = {n: p.grad.clone() for n, p in ours_f.named_parameters()}
    ours_f.zero_grad()
    ours_f.set_kernel(use_fla=False)
    ours_f(toks[:, :100], return_type="loss").backward()
    for name, p in ours_f.named_parameters():
        assert err_ratio(p.grad, fla_grads[name]) <= 0.01, name
