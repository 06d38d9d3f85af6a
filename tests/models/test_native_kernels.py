"""The C kernels of the CPU path (models/ops/csrc, models/ops/native.py): parity with the torch reference
(outputs, final state, gradients), the model end to end, and the fallback when no compiler exists."""

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from deltalens.models.layers.short_conv import ShortConvolution, short_conv_ref
from deltalens.models.ops.delta_rule import chunk_delta_rule, chunk_delta_rule_with_states, delta_rule_recurrence
from deltalens.models.ops.delta_rule_native import (
    native_delta_rule,
    native_delta_rule_with_states,
    native_kernel_available,
    native_kernel_error,
)
from deltalens.models.ops.gated_delta_rule import gated_delta_rule_recurrence
from deltalens.models.ops.native import library_error, native_kernels

TOL = 1e-4


def test_the_kernels_build_on_this_machine():
    # setup.sh installs a C compiler; without it every other test here would test the fallback only
    assert native_kernel_available(), native_kernel_error()
    assert library_error("short_conv") is None


def _inputs(B, T, H, K, V, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=g) * K**-0.5
    k = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    v = torch.randn(B, T, H, V, generator=g)
    beta = torch.rand(B, T, H, generator=g) * 2
    S0 = torch.randn(B, H, K, V, generator=g)
    return [x.requires_grad_() for x in (q, k, v, beta, S0)]


@pytest.mark.parametrize(
    "shape",
    [
        (2, 1, 3, 16, 16),
        (2, 15, 2, 16, 16),
        (2, 16, 1, 16, 16),
        (3, 50, 4, 16, 16),
        (1, 37, 2, 8, 5),
        (2, 70, 2, 32, 32),
        (1, 33, 1, 64, 64),
    ],
)
def test_c_delta_rule_matches_the_recurrence_forward_and_backward(shape):
    ours = _inputs(*shape)
    ref = [x.detach().clone().requires_grad_() for x in ours]
    o, S = native_delta_rule(*ours)
    o_ref, S_ref, _ = delta_rule_recurrence(*ref[:4], scale=1.0, initial_state=ref[4], output_final_state=True)
    assert (o - o_ref).abs().max() <= TOL and (S - S_ref).abs().max() <= TOL
    g = torch.Generator().manual_seed(1)
    w_o, w_S = torch.randn(o.shape, generator=g), torch.randn(S.shape, generator=g)
    ((o * w_o).sum() + (S * w_S).sum()).backward()
    ((o_ref * w_o).sum() + (S_ref * w_S).sum()).backward()
    for name, a, b in zip(["q", "k", "v", "beta", "S0"], ours, ref):
        scale = max(1.0, b.grad.abs().max().item())
        assert (a.grad - b.grad).abs().max().item() <= TOL * scale, name


def test_c_delta_rule_gradient_of_the_output_alone_and_of_the_state_alone():
    for use_o in (True, False):
        ours = _inputs(2, 20, 2, 16, 16, seed=3)
        ref = [x.detach().clone().requires_grad_() for x in ours]
        o, S = native_delta_rule(*ours)
        o_ref, S_ref, _ = delta_rule_recurrence(*ref[:4], scale=1.0, initial_state=ref[4], output_final_state=True)
        (o.sum() if use_o else S.sum()).backward()
        (o_ref.sum() if use_o else S_ref.sum()).backward()
        for a, b in zip(ours, ref):
            expected = torch.zeros_like(b) if b.grad is None else b.grad  # q does not reach S_T
            assert (a.grad - expected).abs().max().item() <= TOL * max(1.0, expected.abs().max().item())


def test_chunk_delta_rule_dispatches_to_the_c_kernel_and_back():
    q, k, v, beta, S0 = (x.detach() for x in _inputs(2, 40, 4, 16, 16))
    with native_kernels(True):
        o_c, S_c = chunk_delta_rule(q, k, v, beta, initial_state=S0, output_final_state=True)
    with native_kernels(False):
        o_t, S_t = chunk_delta_rule(q, k, v, beta, initial_state=S0, output_final_state=True)
        with pytest.raises(RuntimeError, match="native=True"):
            chunk_delta_rule(q, k, v, beta, native=True)
    assert (o_c - o_t).abs().max() <= TOL and (S_c - S_t).abs().max() <= TOL
    with pytest.raises(RuntimeError, match="renorm_every=0"):
        chunk_delta_rule(q, k, v, beta, renorm_every=4, native=True)
    # renormalisation is not in the C kernel: the torch path serves it, same answer either way
    with native_kernels(True):
        o_r, _ = chunk_delta_rule(q, k, v, beta, renorm_every=4)
    with native_kernels(False):
        assert (chunk_delta_rule(q, k, v, beta, renorm_every=4)[0] - o_r).abs().max() <= TOL


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("activation", ["silu", None])
@pytest.mark.parametrize("T", [1, 3, 29])
def test_c_short_conv_matches_the_reference(bias, activation, T):
    conv = ShortConvolution(24, 4, bias=bias, activation=activation)
    if bias:
        torch.nn.init.normal_(conv.bias)
    x = torch.randn(3, T, 24, requires_grad=True)
    w = torch.randn(3, T, 24)
    (conv(x) * w).sum().backward()
    grads = [x.grad.clone(), conv.weight.grad.clone()] + ([conv.bias.grad.clone()] if bias else [])
    x.grad = None
    conv.zero_grad()
    y_ref = short_conv_ref(x, conv.weight, conv.bias, activation)
    assert (conv(x) - y_ref).abs().max() <= 1e-5
    (y_ref * w).sum().backward()
    for a, b in zip(grads, [x.grad, conv.weight.grad] + ([conv.bias.grad] if bias else [])):
        assert (a - b).abs().max() <= 1e-4


def test_model_outputs_and_gradients_agree_with_and_without_the_c_kernels():
    from deltalens import models

    torch.manual_seed(0)
    model = models.build(
        "deltanet", vocab_size=20, hidden_size=64, num_hidden_layers=2, num_heads=4, allow_neg_eigval=True
    )
    tokens = torch.randint(0, 20, (4, 45))
    results = []
    for enabled in (True, False):
        with native_kernels(enabled):
            model.zero_grad()
            logits = model(tokens)
            logits.logsumexp(-1).mean().backward()
            results.append((logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (l1, g1), (l2, g2) = results
    assert (l1 - l2).abs().max() <= 1e-4
    for name in g1:
        assert (g1[name] - g2[name]).abs().max() <= 1e-4 * max(1.0, g2[name].abs().max().item()), name


def test_without_a_compiler_the_torch_kernels_run(tmp_path):
    script = (
        "import torch\n"
        "from deltalens.models.ops.delta_rule import chunk_delta_rule\n"
        "from deltalens.models.ops.delta_rule_native import native_kernel_available, native_kernel_error\n"
        "q = torch.randn(1, 5, 2, 4); o, _ = chunk_delta_rule(q, q, q, torch.rand(1, 5, 2))\n"
        "print(native_kernel_available(), o.shape, native_kernel_error())\n"
    )
    env = {**os.environ, "CC": "no-such-compiler", "PATH": str(tmp_path), "DELTALENS_CACHE": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("False torch.Size([1, 5, 2, 4]) no C compiler found"), out.stdout


def test_kernels_are_built_into_the_cache_folder(tmp_path):
    script = "from deltalens.models.ops.native import library; print(library('delta_rule') is not None)"
    env = {**os.environ, "DELTALENS_CACHE": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip() == "True", out.stderr
    built = list((tmp_path / "kernels").glob("delta_rule-*.so"))
    assert len(built) == 1 and not [p for p in (tmp_path / "kernels").iterdir() if p.is_dir()]


def test_a_damaged_cached_library_is_built_again(tmp_path):
    script = "from deltalens.models.ops.native import library; print(library('short_conv') is not None)"
    env = {**os.environ, "DELTALENS_CACHE": str(tmp_path)}
    assert (
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
        ).stdout.strip()
        == "True"
    )
    [built] = (tmp_path / "kernels").glob("short_conv-*.so")
    built.write_bytes(b"not a shared object")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip() == "True", out.stderr
    assert built.read_bytes()[:4] == b"\x7fELF"


def test_the_c_kernel_refuses_what_it_cannot_read_and_second_derivatives():
    q, k, v, beta, S0 = _inputs(1, 5, 2, 4, 4)
    with pytest.raises(ValueError, match="float32 CPU"):
        native_delta_rule(q.double(), k, v, beta, S0)
    with pytest.raises(ValueError, match="shapes"):
        native_delta_rule(q, k, v[:, :4], beta, S0)
    o, _ = native_delta_rule(q, k, v, beta, S0)
    (grad,) = torch.autograd.grad(o.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError):  # once_differentiable: no silent wrong second derivative
        grad.sum().backward()
    # through chunk_delta_rule an fp64 initial state still works (it is upcast like the inputs)
    o64, _ = chunk_delta_rule(q.detach(), k.detach(), v.detach(), beta.detach(), initial_state=S0.detach().double())
    assert o64.dtype == torch.float32


def test_a_second_derivative_through_the_c_short_conv_raises():
    """The C backward builds no graph, so without @once_differentiable a second derivative would drop
    the conv's term silently whenever another path keeps the gradient differentiable (here x^3)."""
    conv = ShortConvolution(8, 4, bias=True, activation="silu")
    x = torch.randn(2, 7, 8, requires_grad=True)
    y = conv(x)
    assert type(y.grad_fn).__name__ == "_NativeShortConvBackward"  # fp32 CPU: the C kernel ran
    # y^2, not y: an upstream gradient that itself requires grad reaches the C backward
    (g,) = torch.autograd.grad(y.square().sum() + x.pow(3).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        g.sum().backward()


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize(
    "shape, stride", [((2, 15, 2, 16, 16), 1), ((2, 21, 3, 16, 16), 3), ((1, 8, 2, 8, 5), 4), ((1, 6, 1, 32, 32), 2)]
)
def test_c_kernel_states_are_the_recurrence_states(shape, stride, gated):
    """The states the C kernel copies out (every stride-th step) are the reference recurrence's."""
    with torch.no_grad():
        q, k, v, beta, S0 = (x.detach() for x in _inputs(*shape))
        g = -torch.rand(shape[:3], generator=torch.Generator().manual_seed(2)) if gated else None
        o, S, states = native_delta_rule_with_states(
            q, k, v, beta, S0, alpha=None if g is None else g.exp(), stride=stride
        )
        o_ref, S_ref, states_ref = gated_delta_rule_recurrence(
            q, k, v, beta, g, scale=1.0, initial_state=S0, output_final_state=True
        )
    assert states.shape == (shape[0], shape[1] // stride, shape[2], shape[3], shape[4])
    assert (states - states_ref[:, stride - 1 :: stride]).abs().max() <= TOL
    assert (o - o_ref).abs().max() <= TOL and (S - S_ref).abs().max() <= TOL
    o_plain, S_plain = native_delta_rule(q, k, v, beta, S0, alpha=None if g is None else g.exp())
    assert torch.equal(o, o_plain) and torch.equal(S, S_plain)  # the same forward, states or not


def test_c_kernel_states_refuse_gradients_and_a_stride_that_does_not_divide_t():
    q, k, v, beta, S0 = _inputs(1, 6, 2, 4, 4)
    with pytest.raises(RuntimeError, match="no graph"):
        native_delta_rule_with_states(q, k, v, beta, S0)
    with torch.no_grad(), pytest.raises(ValueError, match="divide"):
        native_delta_rule_with_states(q, k, v, beta, S0, stride=4)
    # chunk_delta_rule_with_states takes the torch kernel when gradients are wanted, and they flow
    o, _, states = chunk_delta_rule_with_states(q, k, v, beta, scale=1.0, initial_state=S0, state_every=2)
    states.sum().backward()
    assert states.shape[1] == 3 and v.grad.abs().sum() > 0 and k.grad.abs().sum() > 0


def test_a_conv_given_the_wrong_channel_count_raises_instead_of_reading_past_its_weights():
    conv = ShortConvolution(24, 4, bias=True)
    with pytest.raises(RuntimeError):
        conv(torch.randn(2, 5, 48))


@pytest.mark.parametrize("shape", [(2, 37, 2, 16, 16), (1, 21, 3, 8, 5), (1, 17, 1, 32, 32)])
def test_c_kernel_per_column_decay_is_the_value_gated_recurrence(shape):
    """alpha [B, T, H, V]: S_{t-1} Diag(alpha_t), forward (o, S_T, kept states) and backward to every input,
    against autograd through the value-gated reference; T not a multiple of the kernel's 16-token block."""
    from deltalens.models.ops.value_gated_delta_rule import value_gated_delta_rule_recurrence

    q, k, v, beta, S0 = _inputs(*shape)
    B, T, H, _, V = shape
    g = F.logsigmoid(torch.randn(B, T, H, V, generator=torch.Generator().manual_seed(3)) + 2).requires_grad_()
    twins = [x.detach().clone().requires_grad_() for x in (q, k, v, beta, g, S0)]
    o, S = native_delta_rule(q, k, v, beta, S0, alpha=g.exp())
    o_ref, S_ref, states_ref = value_gated_delta_rule_recurrence(
        *twins[:5], scale=1.0, initial_state=twins[5], output_final_state=True
    )
    assert (o - o_ref).abs().max() <= TOL and (S - S_ref).abs().max() <= TOL
    weights = (torch.randn_like(o), torch.randn_like(S))
    ((o * weights[0]).sum() + (S * weights[1]).sum()).backward()
    ((o_ref * weights[0]).sum() + (S_ref * weights[1]).sum()).backward()
    for fast, ref in zip((q, k, v, beta, g, S0), twins):
        assert (fast.grad - ref.grad).abs().max() <= TOL * max(1.0, ref.grad.abs().max().item())
    with torch.no_grad():
        rows = (torch.tensor([0, 0]), torch.tensor([shape[1] - 1, 3]))
        _, _, kept = native_delta_rule_with_states(q, k, v, beta, S0, alpha=g.exp(), rows=rows)
    assert (kept - states_ref.detach()[rows]).abs().max() <= TOL
    with pytest.raises(ValueError, match="alpha"):
        native_delta_rule(q, k, v, beta, S0, alpha=g.exp()[..., :-1])
