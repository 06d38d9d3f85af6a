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
        assert cache["blocks.1.attn.hook_state"].shape[:3] == (2, 200, ours.cfg.n_heads)
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


# ---- issue 30 point 7: the CUDA model against the CPU model, the paths a GPU takes -------------------

FAMILY = {
    "deltanet": dict(arch="deltanet", hidden_size=64, num_heads=2, allow_neg_eigval=True),
    "deltanet-renorm": dict(arch="deltanet", hidden_size=64, num_heads=2, allow_neg_eigval=True, state_norm_every=8),
    "gated_deltanet": dict(arch="gated_deltanet", hidden_size=64, num_heads=2, head_dim=32, allow_neg_eigval=True),
    "deltaproduct": dict(
        arch="deltaproduct", hidden_size=64, num_heads=2, head_dim=32, num_householder=2, use_forget_gate=True
    ),
    "kda": dict(arch="kda", hidden_size=64, num_heads=2, head_dim=32, allow_neg_eigval=True),  # fla's chunk_kda
}


def _pair(name, seed=0):
    """(cpu model, the same weights on CUDA), eval mode, fp32."""
    import copy

    from deltalens import models

    config = dict(FAMILY[name])
    arch = config.pop("arch")
    torch.manual_seed(seed)
    cpu = models.build(arch, vocab_size=40, num_hidden_layers=2, **config).eval()
    return cpu, copy.deepcopy(cpu).cuda().eval()


def _toks(T=150, B=2):
    return torch.randint(0, 40, (B, T), generator=torch.Generator().manual_seed(0))


def _paths(model):
    return {m.last_kernel.path for m in model.modules() if getattr(m, "last_kernel", None) is not None}


@pytest.mark.parametrize("name", FAMILY)
def test_cuda_model_matches_cpu_model(name):
    cpu, gpu = _pair(name)
    toks = _toks()
    with torch.no_grad():
        ref, got = cpu(toks), gpu(toks.cuda())
    assert _paths(gpu) <= {"fla_recurrent", "fla_chunk"}
    assert err_ratio(ref, got.cpu()) <= 1e-4 and (ref - got.cpu()).abs().max() <= 2e-3


@pytest.mark.parametrize("name", FAMILY)
def test_cuda_training_gradients_match_cpu(name):
    """DeltaNet's fp32 gradients run through fla's fused-recurrent backward (renormalised: one call for all
    segments); the gated family's through fla's chunk kernel (TF32 dots: a looser bound)."""
    cpu, gpu = _pair(name)
    toks = _toks(T=100)
    cpu.train()(toks, return_type="loss").backward()
    gpu.train()(toks.cuda(), return_type="loss").backward()
    limit = 1e-3 if name.startswith("deltanet") else 2e-2
    for (n, p), (_, q) in zip(cpu.named_parameters(), gpu.named_parameters()):
        assert err_ratio(p.grad, q.grad.cpu()) <= limit, n


@pytest.mark.parametrize("name", FAMILY)
def test_cuda_capture_states_and_plain_logits(name):
    """Captured S_t on CUDA equal the CPU model's; the capture's logits are the plain CUDA forward's, bit for bit."""
    cpu, gpu = _pair(name)
    toks = _toks()
    names = lambda n: n.endswith(("hook_state", "hook_beta"))  # noqa: E731
    with torch.no_grad():
        _, ref_cache = cpu.run_with_cache(toks, names_filter=names)
        plain = gpu(toks.cuda())
        logits, cache = gpu.run_with_cache(toks.cuda(), names_filter=names)
    assert torch.equal(logits, plain)
    for key in ("blocks.0.attn.hook_state", "blocks.1.attn.hook_state", "blocks.1.attn.hook_beta"):
        assert cache[key].dtype == torch.float32
        assert err_ratio(ref_cache[key], cache[key].cpu()) <= 1e-4, key


@pytest.mark.parametrize("name", FAMILY)
def test_cuda_hook_edits_state_edit_and_ranges_match_cpu(name):
    cpu, gpu = _pair(name)
    toks = _toks(T=80)

    def zero_at_20(x, hook):
        x = x.clone()
        x[:, 20] = 0
        return x

    def run(model, t):
        edit = [("blocks.0.attn.hook_state", zero_at_20)]
        out = [model.run_with_hooks(t, fwd_hooks=edit)]
        with model.state_edit(1, lambda step, S: S * 0.5 if step == 10 else S):
            out.append(model(t))
        model.set_beta_range(0, 0, 0.0, 1.0)
        if hasattr(model, "set_gate_range"):
            model.set_gate_range(1, None, 0.9, 1.0)
        out.append(model(t))
        beta = model.run_with_cache(t, names_filter=lambda n: n.endswith("hook_beta"))[1]["blocks.0.attn.hook_beta"]
        assert float(beta[:, :, 0].min()) >= 0.0 and float(beta[:, :, 0].max()) <= 1.0
        return [o.float().cpu() for o in out]

    with torch.no_grad():
        for ref, got in zip(run(cpu, toks), run(gpu, toks.cuda())):
            assert err_ratio(ref, got) <= 1e-3


@pytest.mark.parametrize("name", FAMILY)
def test_cuda_bf16_autocast_forward_capture_and_edit(name):
    """bf16 autocast on CUDA: fla's chunk kernels for the forward, the torch kernels (fp32 inside) for
    capture and edits; all within the precision policy's tolerance of the fp32 CPU model."""
    cpu, gpu = _pair(name)
    toks = _toks()
    names = lambda n: n.endswith("hook_state")  # noqa: E731
    edit = [("blocks.1.attn.hook_state", lambda x, hook: x * 0.8)]
    with torch.no_grad():
        ref, ref_cache = cpu.run_with_cache(toks, names_filter=names)
        ref_edit = cpu.run_with_hooks(toks, fwd_hooks=edit)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        plain = gpu(toks.cuda())
        assert "fla_chunk" in _paths(gpu)
        logits, cache = gpu.run_with_cache(toks.cuda(), names_filter=names)  # with gradients
        with torch.no_grad():
            edited = gpu.run_with_hooks(toks.cuda(), fwd_hooks=edit)
            with gpu.state_edit(0, lambda t, S: S * 0.9):
                stepped = gpu(toks.cuda())
    assert torch.equal(logits.detach(), plain.detach()) and torch.isfinite(stepped).all()
    assert err_ratio(ref, plain.detach().float().cpu()) <= 2e-2
    assert err_ratio(ref_cache["blocks.1.attn.hook_state"], cache["blocks.1.attn.hook_state"].cpu()) <= 5e-2
    assert err_ratio(ref_edit, edited.float().cpu()) <= 2e-2


def test_cuda_mixed_dtype_hook_reaches_fla_in_one_dtype():
    cpu, gpu = _pair("deltanet")
    toks = _toks().cuda()
    with torch.no_grad():
        low = gpu.bfloat16()
        out = low.run_with_hooks(toks, fwd_hooks=[("blocks.0.attn.hook_q", lambda x, hook: x.float())])
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("arch", ["deltanet", "gated_deltanet", "transformer", "lstm"])
def test_cuda_train_loop(tmp_path, arch, precision):
    """The train loop on the GPU, fp32 and bf16 (the baselines too): finite losses, a checkpoint that opens."""
    from tiny_runs import tiny_config

    from deltalens import models
    from deltalens.training.config import TrainConfig
    from deltalens.training.loop import train

    base = tiny_config("deltanet" if arch == "gated_deltanet" else arch, steps=3).to_dict()
    if arch == "gated_deltanet":
        base["model"] = {"arch": "gated_deltanet", "hidden_size": 32, "num_heads": 2, "head_dim": 16}
    base["run"]["precision"] = precision
    result = train(TrainConfig.from_dict(base), tmp_path / "run", progress=False)
    assert result.step == 3 and 0.0 <= result.history[-1]["reveal_accuracy"] <= 1.0
    assert models.load(result.checkpoint) is not None


@pytest.mark.parametrize("arch", ["transformer", "lstm"])
def test_cuda_baselines_match_cpu(arch):
    import copy

    from deltalens import models

    torch.manual_seed(0)
    kwargs = dict(d_model=32, n_layers=2) | (dict(n_heads=2, n_ctx=256) if arch == "transformer" else {})
    cpu = models.build(arch, vocab_size=40, **kwargs).eval()
    gpu = copy.deepcopy(cpu).to("cuda").eval()
    toks = _toks()
    with torch.no_grad():
        assert err_ratio(cpu(toks), gpu(toks.cuda()).cpu()) <= 1e-4


def test_cuda_shipped_checkpoints_match_cpu():
    """Every shipped checkpoint on the GPU: logits against the CPU model, the same held-out predictions."""
    import deltalens as dl

    for name in dl.list_checkpoints()["name"]:
        cpu = dl.load(name)
        gpu = dl.load(name, device="cuda")
        batch = cpu.checkpoint.batch(16)
        toks = batch["tokens"]
        with torch.no_grad():
            ref, got = cpu(toks), gpu(toks.cuda()).cpu()
        reveal = batch["reveal_mask"][:, 1:]
        assert err_ratio(ref, got) <= 1e-3, name
        same = (ref[:, :-1].argmax(-1) == got[:, :-1].argmax(-1))[reveal].float().mean()
        assert same >= 0.99, name


# ---- issue 56: S_t at kept rows rebuilt from fla's chunk forward (the fla_rows path) ---------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
def test_fla_rows_match_the_reference_and_the_plain_forward(gated, dtype):
    """fla's real kernels: the kept rows against the token-by-token recurrence, o equal to the plain forward's."""
    from deltalens.models.ops.gated_delta_rule import chunk_gated_delta_rule, gated_delta_rule_recurrence
    from deltalens.models.ops.kernel_select import FLA_ROWS, select_kernel_for

    g = torch.Generator().manual_seed(0)
    B, T, H, D = 2, 300, 2, 64
    q, v = torch.randn(B, T, H, D, generator=g), torch.randn(B, T, H, D, generator=g)
    k = F.normalize(torch.randn(B, T, H, D, generator=g), dim=-1)
    q, k, v = (x.to("cuda", dtype) for x in (q, k, v))
    beta, h0 = (torch.rand(B, T, H, generator=g) * 2).cuda(), (torch.randn(B, H, D, D, generator=g) * 0.3).cuda()
    log_decay = (-torch.rand(B, T, H, generator=g) * 0.3).cuda() if gated else None
    rows = (torch.tensor([0, 1, 1, 0], device="cuda"), torch.tensor([0, 63, 64, T - 1], device="cuda"))
    with torch.no_grad():
        _, _, states = gated_delta_rule_recurrence(q, k, v, beta, log_decay, initial_state=h0)
        kernel = select_kernel_for(q, k, v, beta, log_decay, h0, wants_states=True, rows_only=True)
        o, _, kept = chunk_gated_delta_rule(
            q, k, v, beta, log_decay, initial_state=h0, with_states=True, kernel=kernel, rows=rows
        )
        plain, _, _ = chunk_gated_delta_rule(q, k, v, beta, log_decay, initial_state=h0)
    assert kernel.path == FLA_ROWS
    assert err_ratio(states[rows], kept) <= (0.01 if dtype == torch.bfloat16 else 1e-5)
    from deltalens.models.ops.fla_kernels import fla_backend

    operation = "gated_delta_rule" if gated else "delta_rule"
    if fla_backend(operation) == "triton" or dtype == torch.float32:  # another backend's o is not fla's Triton o
        assert torch.equal(o, plain)


def test_a_reveal_capture_runs_fla_rows_with_the_plain_forward_logits():
    """A capture at the reveal positions on fla (bf16 autocast): the fla_rows path, the CPU's states, and (a
    StateTap on the same batch) the plain forward's logits to the bit."""
    import deltalens as dl
    from deltalens.interp.capture import capture
    from deltalens.models.layers.hooked_recurrence import StateTap
    from deltalens.tasks import TokenKind

    model = dl.load("s3-deltanet-neg-statement", device="cuda")
    batch = model.checkpoint.batch(16)
    ref = capture(dl.load("s3-deltanet-neg-statement"), batch, names=("state",), kinds=TokenKind.REVEAL)
    tokens = batch["tokens"].cuda()
    rows = tuple(x.cuda() for x in (batch["reveal_mask"]).nonzero(as_tuple=True))
    kept = []
    with torch.autocast("cuda", dtype=torch.bfloat16), torch.no_grad():
        cap = capture(model, batch, names=("state",), kinds=TokenKind.REVEAL)
        paths = {block.attn.last_kernel.path for block in model.blocks}
        plain = model(tokens)
        model.blocks[1].attn.state_tap = StateTap(rows, kept.append)
        try:
            tapped = model(tokens)
        finally:
            model.blocks[1].attn.state_tap = None
    assert paths == {"fla_rows"} and model.blocks[1].attn.last_kernel.path == "fla_rows"
    for name in ref.acts:
        assert err_ratio(ref[name], cap[name]) <= 0.02, name
    assert torch.equal(tapped, plain) and kept[0].shape[0] == len(rows[0])


# ---- issue 56 item 2: KDA on fla's chunk_kda / fused_recurrent_kda ------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("recurrent", [False, True], ids=["chunk", "fused_recurrent"])
def test_fla_kda_matches_the_torch_kernel(dtype, recurrent):
    """fla's KDA kernels on the same (rounded) inputs as our chunked fp32 kernel: o and the final state; the chunk
    kernel's gradients too (the fused recurrent one has none). beta in [0, 2], a natural-log decay per channel."""
    from deltalens.models.ops.fla_kernels import fla_kda
    from deltalens.models.ops.kda import chunk_kda

    B, T, H, D = 2, 300, 2, 64
    g = torch.Generator().manual_seed(0)
    q, k = (F.normalize(torch.randn(B, T, H, D, generator=g), dim=-1) for _ in range(2))
    v, beta = torch.randn(B, T, H, D, generator=g), torch.rand(B, T, H, generator=g) * 2
    decay, h0 = -torch.rand(B, T, H, D, generator=g) * 0.3, torch.randn(B, H, D, D, generator=g) * 0.3
    lowp = [x.to("cuda", dtype).requires_grad_(not recurrent) for x in (q, k, v)]
    rest = [x.cuda().requires_grad_(not recurrent) for x in (beta, decay, h0)]
    inputs = lowp + rest
    o, S = fla_kda(*lowp, rest[0], rest[1], D**-0.5, rest[2], True, recurrent=recurrent)
    same = [x.detach().float().requires_grad_(not recurrent) for x in inputs]
    same[3] = same[3].to(dtype).float().detach().requires_grad_(not recurrent)  # fla takes beta in q's dtype
    o_ref, S_ref, _ = chunk_kda(*same[:3], same[3], same[4], initial_state=same[5])
    limit = 0.006 if dtype == torch.bfloat16 else 1e-3
    assert o.dtype == dtype and S.dtype == torch.float32
    assert err_ratio(o_ref, o) <= limit and err_ratio(S_ref, S) <= limit
    if not recurrent:
        do, dS = torch.randn_like(o_ref), torch.randn_like(S_ref)
        grads = torch.autograd.grad((o.float() * do).sum() + (S * dS).sum(), inputs)
        refs = torch.autograd.grad((o_ref * do).sum() + (S_ref * dS).sum(), same)
        for i, (got, ref) in enumerate(zip(grads, refs)):
            assert err_ratio(ref, got) <= (0.008 if dtype == torch.bfloat16 else 2e-2), i


def test_kimi_linear_standin_on_cuda_matches_cpu(tmp_path):
    """A Kimi Linear stand-in (tests/production_standin.py) on CUDA: its KDA layers run fla's kernels, the
    logits, the cache's recurrent states and a decode step from them equal the CPU model's."""

    from production_standin import put_standin

    import deltalens as dl
    from deltalens.models.production.hooked_kda import HookedKimiDeltaAttention

    repo, _ = put_standin("kimi_linear", tmp_path / "hub")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_HOME", str(tmp_path))
        env.delenv("HF_HUB_CACHE", raising=False)
        env.setenv("HF_HUB_OFFLINE", "1")
        cpu, gpu = dl.load(repo), dl.load(repo, device="cuda")
    toks = torch.randint(0, cpu.hf.config.vocab_size, (2, 150), generator=torch.Generator().manual_seed(3))

    def run(model, t):
        out = model.hf(t[:, :-1], use_cache=True)
        states = [out.past_key_values.get_recurrent_state(i, state_idx=0) for i in model.delta_layers]
        step = model.hf(t[:, -1:], past_key_values=out.past_key_values, use_cache=True).logits
        return [model(t).float().cpu(), torch.stack(states).cpu(), step.float().cpu()]

    with torch.no_grad():
        ref, got = run(cpu, toks), run(gpu, toks.cuda())
    layers = [m for m in gpu.hf.modules() if isinstance(m, HookedKimiDeltaAttention)]
    assert {m.last_kernel.path for m in layers} == {"fla_recurrent"}  # fp32 inference
    for want, have in zip(ref, got):
        assert err_ratio(want, have) <= 1e-3
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        bf16 = gpu(toks.cuda())
    assert {m.last_kernel.path for m in layers} == {"fla_chunk"} and err_ratio(ref[0], bf16.float().cpu()) <= 5e-2
