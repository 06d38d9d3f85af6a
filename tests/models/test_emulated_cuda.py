"""The CUDA glue on a CPU: fla's Triton entry points replaced by fla's own naive recurrences behind fla's
checks, and the dispatch told every tensor is on CUDA (tests/fla_on_cpu.py: `emulated_cuda`).

What runs here is everything deltalens does around an fla kernel on a GPU: which kernel the selector
picks for each dtype, the arguments and layouts it is called with, the dtypes unified before the call,
the renormalised variant's one-call segments, the gated and product families, hooks that return other
dtypes, hook edits and state_edit, capture, autocast, a training step. Each test names the defect of
issue 30 it catches on the code before that issue (autocast crash, mixed-dtype fla call, capture logits
drifting from the plain forward, the renormalised variant's one call per segment).
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from fla_on_cpu import emulated_cuda

from deltalens.models.ops.delta_rule import chunk_delta_rule
from deltalens.models.ops.gated_delta_rule import chunk_gated_delta_rule
from deltalens.models.ops.kernel_select import FLA_RECURRENT
from tests.conftest import DELTA_RULE_ARCHS, build_tiny

# KDA (fla's chunk_kda / fused_recurrent_kda) too; its kernel table: tests/models/test_emulated_cuda_kda.py
FAMILY = [*DELTA_RULE_ARCHS, "deltanet-renorm"]


def _model(name, seed=0):
    if name == "deltanet-renorm":
        return build_tiny("deltanet", seed=seed, state_norm_every=5)
    return build_tiny(name, seed=seed)


def _tokens(T=23, B=2, seed=1):
    return torch.randint(0, 23, (B, T), generator=torch.Generator().manual_seed(seed))


def _inputs(B=2, T=21, H=2, K=8, V=8, seed=0, dtype=torch.float32, grad=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=g)
    k = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    v = torch.randn(B, T, H, V, generator=g)
    beta = torch.rand(B, T, H, generator=g) * 2
    h0 = torch.randn(B, H, K, V, generator=g) * 0.3
    out = [x.to(dtype).requires_grad_(grad) for x in (q, k, v, beta)]
    return out + [h0.requires_grad_(grad)]


def _kernels_of(model):
    return {m.last_kernel.path for m in model.blocks.modules() if hasattr(m, "last_kernel") and m.last_kernel}


# ---- argument binding: the kernels against the CPU path -----------------------------------------------


@pytest.mark.parametrize(
    "dtype, expected", [(torch.float32, "fused_recurrent_delta_rule"), (torch.bfloat16, "chunk_delta_rule")]
)
def test_delta_rule_binds_to_fla_by_dtype_and_matches_cpu(dtype, expected):
    q, k, v, beta, h0 = _inputs(dtype=dtype, grad=True)
    o_cpu, S_cpu = chunk_delta_rule(q, k, v, beta, initial_state=h0, output_final_state=True, use_fla=False)
    with emulated_cuda() as calls:
        o, S = chunk_delta_rule(q, k, v, beta, initial_state=h0, output_final_state=True)
    assert calls.names() == [expected] and o.dtype == dtype and S.dtype == torch.float32
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert (o.float() - o_cpu.float()).abs().max() <= tol and (S - S_cpu).abs().max() <= tol * 5
    if dtype == torch.float32:  # gradients through fla's (stand-in) backward
        grads = torch.autograd.grad(o.sum() + S.sum(), (q, k, v, beta, h0))
        refs = torch.autograd.grad(o_cpu.sum() + S_cpu.sum(), (q, k, v, beta, h0))
        for got, ref in zip(grads, refs):
            assert (got - ref).abs().max() <= 1e-4


@pytest.mark.parametrize("T, R, dtype", [(21, 5, torch.float32), (20, 5, torch.float32), (21, 4, torch.bfloat16)])
def test_renormalised_fla_path_is_one_call_and_matches_cpu(T, R, dtype):
    """Renormalisation on fla: all T / R segments in one fla call (issue 30: one call per segment), the same
    o, final state and gradients as the CPU kernel."""
    q, k, v, beta, h0 = _inputs(T=T, dtype=dtype, grad=True)
    o_cpu, S_cpu = chunk_delta_rule(
        q, k, v, beta, initial_state=h0, output_final_state=True, renorm_every=R, use_fla=False
    )
    with emulated_cuda() as calls:
        o, S = chunk_delta_rule(q, k, v, beta, initial_state=h0, output_final_state=True, renorm_every=R)
    assert len(calls) == 1
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    assert (o.float() - o_cpu.float()).abs().max() <= tol and (S - S_cpu).abs().max() <= tol
    if dtype == torch.float32:
        grads = torch.autograd.grad((o * o.detach()).sum() + S.sum(), (q, k, v, beta, h0))
        refs = torch.autograd.grad((o_cpu * o_cpu.detach()).sum() + S_cpu.sum(), (q, k, v, beta, h0))
        for got, ref in zip(grads, refs):
            assert (got - ref).abs().max() <= 1e-4


def test_gated_delta_rule_binds_by_dtype_and_gradient():
    q, k, v, beta, h0 = _inputs(grad=True)
    g = -torch.rand(*beta.shape, generator=torch.Generator().manual_seed(3))
    o_cpu, S_cpu, _ = chunk_gated_delta_rule(q, k, v, beta, g, initial_state=h0, output_final_state=True, use_fla=False)
    with emulated_cuda() as calls:
        with torch.no_grad():  # fp32 inference: the fused recurrent kernel
            o_inf, _, _ = chunk_gated_delta_rule(q, k, v, beta, g, initial_state=h0, output_final_state=True)
        o, S, _ = chunk_gated_delta_rule(q, k, v, beta, g, initial_state=h0, output_final_state=True)
        # a gradient through fp32: the chunk kernel (the fused recurrent one has no backward)
        grads = torch.autograd.grad(o.sum() + S.sum(), (q, k, v, beta, h0))
    assert calls.names() == ["fused_recurrent_gated_delta_rule", "chunk_gated_delta_rule"]
    refs = torch.autograd.grad(o_cpu.sum() + S_cpu.sum(), (q, k, v, beta, h0))
    assert (o_inf - o_cpu).abs().max() <= 1e-5 and (o - o_cpu).abs().max() <= 1e-5
    for got, ref in zip(grads, refs):
        assert (got - ref).abs().max() <= 1e-4


# ---- models: the family on the fla path ---------------------------------------------------------------


@pytest.mark.parametrize("name", FAMILY)
def test_family_logits_on_fla_match_cpu(name):
    model, toks = _model(name), _tokens()
    model.set_beta_range(0, 0, 0.0, 2.0)  # an intervened range reaches fla's beta too
    with torch.no_grad():
        ref = model(toks)
        with emulated_cuda() as calls:
            got = model(toks)
    assert calls and _kernels_of(model) == {FLA_RECURRENT}
    assert (got - ref).abs().max() <= 1e-4


OPERATION = {"deltanet": "delta_rule", "deltanet-renorm": "delta_rule", "kda": "kda"}  # else gated_delta_rule


@pytest.mark.parametrize("name", FAMILY)
def test_last_kernel_names_the_backend_fla_dispatches_to(name, monkeypatch):
    """Each layer's last_kernel ends with fla's dispatch for its entry points (issue 56), and says so when
    FLA_DISABLE_BACKEND_DISPATCH switched dispatch off."""
    import fla.backends

    from deltalens.models.ops.fla_kernels import fla_backend

    model, toks = _model(name), _tokens()
    layers = [m for m in model.blocks.modules() if getattr(m, "fla_operation", None)]
    assert layers and {m.fla_operation for m in layers} == {OPERATION.get(name, "gated_delta_rule")}
    for disabled in (False, True):
        monkeypatch.setattr(fla.backends, "_DISPATCH_DISABLED", disabled)
        with torch.no_grad(), emulated_cuda():
            model(toks)
        backend = "dispatch disabled" if disabled else fla_backend(layers[0].fla_operation)
        assert not backend.startswith("unknown")
        assert all(m.last_kernel.reason.endswith(f"; fla dispatch: {backend}") for m in layers)


@pytest.mark.parametrize("name", FAMILY)
def test_capture_gives_the_plain_forward_logits(name):
    """Defect 3: with a hook on hook_state the forward used to run the torch kernel instead of fla's, so a
    capture's logits drifted from the plain forward's; now o comes from the same fla call, bit for bit."""
    model, toks = _model(name), _tokens()
    names = lambda n: n.endswith("hook_state")  # noqa: E731
    with torch.no_grad():
        cpu_logits, cpu_cache = model.run_with_cache(toks, names_filter=names)
        for dtype in (torch.float32, torch.bfloat16):
            m = copy.deepcopy(model).to(dtype)
            with emulated_cuda():
                plain = m(toks)
                logits, cache = m.run_with_cache(toks, names_filter=names)
            assert torch.equal(logits, plain), dtype
            key = "blocks.1.attn.hook_state"
            assert cache[key].dtype == torch.float32
            tol = 1e-4 if dtype == torch.float32 else 0.1
            assert (cache[key] - cpu_cache[key]).abs().max() <= tol


@pytest.mark.parametrize("name", FAMILY)
def test_hooks_returning_another_dtype_reach_fla_in_one_dtype(name):
    """Defect 2: fla asserts q, k, v share a dtype; a hook returning fp32 q in a bf16 model (or under autocast)
    used to reach it as is. Now the call takes one dtype, the one the selector chose from."""
    model, toks = _model(name), _tokens()
    up = [("blocks.0.attn.hook_q", lambda x, hook: x.float())]
    with torch.no_grad(), emulated_cuda() as calls:
        bf16 = copy.deepcopy(model).to(torch.bfloat16)
        wide = bf16.run_with_hooks(toks, fwd_hooks=up)  # bf16 model, fp32 q: an fp32 call
        with torch.autocast("cpu", dtype=torch.bfloat16):
            auto = model.run_with_hooks(toks, fwd_hooks=up)  # autocast's dtype wins
    assert torch.isfinite(wide).all() and torch.isfinite(auto).all()
    assert {dtype for _, dtype, _ in calls} == {torch.float32, torch.bfloat16}


@pytest.mark.parametrize("name", FAMILY)
def test_hook_edits_and_state_edit_on_the_fla_path_match_cpu(name):
    model, toks = _model(name), _tokens()

    def zero_state(x, hook):  # an edit at one step: replayed from there
        x = x.clone()
        x[:, 7] = 0
        return x

    def halve(t, S):
        return S * 0.5 if t == 4 else S

    edit = [("blocks.0.attn.hook_state", zero_state)]
    with torch.no_grad():
        ref_hook = model.run_with_hooks(toks, fwd_hooks=edit)
        with model.state_edit(1, halve):
            ref_edit = model(toks)
        with emulated_cuda():
            got_hook = model.run_with_hooks(toks, fwd_hooks=edit)
            with model.state_edit(1, halve):
                got_edit = model(toks)
    assert (got_hook - ref_hook).abs().max() <= 1e-4 and (got_edit - ref_edit).abs().max() <= 1e-4
    assert (got_hook - model(toks)).abs().max() > 1e-3  # the edit did something


@pytest.mark.parametrize("name", FAMILY)
def test_autocast_capture_and_edit_on_the_fla_path(name):
    """Defect 1: under bf16 autocast the torch kernel (every capture, replay and state_edit on CUDA) crashed in
    torch.linalg.solve_triangular ("not implemented for 'BFloat16'"); now it runs in fp32 inside."""
    model, toks = _model(name), _tokens()
    names = lambda n: n.endswith("hook_state")  # noqa: E731
    edit = [("blocks.0.attn.hook_state", lambda x, hook: x * 0.9)]
    with torch.no_grad():
        ref, ref_cache = model.run_with_cache(toks, names_filter=names)
        ref_edit = model.run_with_hooks(toks, fwd_hooks=edit)
    with emulated_cuda(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits, cache = model.run_with_cache(toks, names_filter=names)  # with gradients: chunked_states
        with torch.no_grad():
            edited = model.run_with_hooks(toks, fwd_hooks=edit)
            with model.state_edit(0, lambda t, S: S * 0.9):
                stepped = model(toks)
    assert cache["blocks.0.attn.hook_state"].dtype == torch.float32
    assert (logits.float() - ref).abs().max() <= 0.1
    assert (cache["blocks.1.attn.hook_state"] - ref_cache["blocks.1.attn.hook_state"]).abs().max() <= 0.1
    assert (edited.float() - ref_edit).abs().max() <= 0.1 and torch.isfinite(stepped).all()


@pytest.mark.parametrize("name", FAMILY)
def test_training_step_on_the_fla_path(name):
    """One AdamW step's gradients on the fla path (fp32) equal the CPU kernels'; under bf16 autocast the
    step runs fla's chunk kernels and its loss is within bf16 rounding of fp32's."""
    model, toks = _model(name).train(), _tokens(T=17)

    def grads(m):
        m.zero_grad()
        loss = m(toks, return_type="loss")
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}

    ref_loss, ref = grads(model)
    with emulated_cuda() as calls:
        loss, got = grads(model)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16_loss, _ = grads(model)
    assert (loss - ref_loss).abs() <= 1e-5 and set(got) == set(ref)
    for n in ref:
        assert (got[n] - ref[n]).abs().max() <= 1e-4 * (1 + ref[n].abs().max()), n
    assert any(dtype == torch.bfloat16 and "chunk" in n for n, dtype, _ in calls)
    assert (bf16_loss - ref_loss).abs() <= 0.05


def test_training_loop_bf16_runs_fla_chunk_kernels(tmp_path):
    """`deltalens train --precision bf16` on a (emulated) GPU: autocast, fla's chunk kernels, a finite loss."""
    from deltalens.training.config import load_config
    from deltalens.training.loop import train

    config = load_config(
        None,
        [
            "model.arch=deltanet",
            "model.hidden_size=32",
            "model.num_heads=2",
            "model.num_hidden_layers=1",
            "run.steps=2",
            "run.eval_traces=4",
            "optim.batch_size=2",
            "task.actions=[4, 4]",
            "run.precision=bf16",
        ],
    )
    with emulated_cuda() as calls:
        result = train(config, tmp_path / "run", progress=False)
    assert result.step == 2
    assert ("chunk_delta_rule", torch.bfloat16) in {(n, d) for n, d, _ in calls}


def test_the_short_conv_checks_every_tensor_s_device():
    """Issue 30 point 6: a CPU input with weights elsewhere must not reach the C kernel (a GPU pointer)."""
    from unittest import mock

    from deltalens.models.ops import short_conv

    x = torch.randn(1, 5, 4)
    weight = torch.randn(4, 1, 3, device="meta")
    with mock.patch.object(short_conv._NativeShortConv, "apply", side_effect=AssertionError("C kernel called")) as c:
        try:  # torch's conv1d decides what a meta weight gives (a meta tensor or its device error)
            short_conv.short_conv(x, weight, None, True, 2)
        except RuntimeError:
            pass
    assert not c.called
    assert short_conv.short_conv(x, torch.randn(4, 1, 3), None, True, 2).shape == x.shape
