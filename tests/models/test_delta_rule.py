"""Delta-rule kernels: our recurrence, chunked kernel and state materialisation vs fla's naive reference."""

import pytest
import torch
import torch.nn.functional as F

from deltalens.models.ops.delta_rule import (
    chunk_delta_rule,
    chunk_delta_rule_with_states,
    delta_rule_recurrence,
    l2_normalize,
    replay_with_state_edits,
)
from deltalens.models.ops.native import native_kernels

TOL = 1e-4  # fp32 max abs error allowed between any two of our paths / fla's naive reference


@pytest.fixture(autouse=True, params=["c-kernel", "torch-kernel"])
def cpu_kernel(request):
    """Every test here runs twice: chunk_delta_rule on the C kernel (the default on a CPU with a C
    compiler) and on the chunked torch kernel (the fallback)."""
    with native_kernels(request.param == "c-kernel"):
        yield request.param


def make_inputs(B=2, T=50, H=3, K=16, V=8, beta_max=2.0, seed=0, normalize_k=True, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=g)
    k = torch.randn(B, T, H, K, generator=g)
    if normalize_k:
        k = F.normalize(k, dim=-1)  # unit keys: the transition's eigenvalues stay in [-1, 1]
    v = torch.randn(B, T, H, V, generator=g)
    beta = torch.rand(B, T, H, generator=g) * beta_max
    h0 = torch.randn(B, H, K, V, generator=g)
    tensors = [q, k, v, beta, h0]
    if requires_grad:
        tensors = [t.requires_grad_() for t in tensors]
    return tensors


def fla_naive(q, k, v, beta, initial_state=None):
    """fla's reference takes [B, H, T, D] (head-first) and scales q by K ** -0.5 itself."""
    from fla.ops.delta_rule.naive import delta_rule_recurrence as naive

    o, S = naive(*(x.transpose(1, 2) for x in (q, k, v, beta)), initial_state=initial_state, output_final_state=True)
    return o.transpose(1, 2), S


def maxerr(a, b):
    return (a - b).abs().max().item()


# ---- parity with fla -----------------------------------------------------------------------


@pytest.mark.parametrize("beta_max", [1.0, 2.0])
@pytest.mark.parametrize("with_h0", [False, True])
def test_recurrence_matches_fla_naive(beta_max, with_h0):
    q, k, v, beta, h0 = make_inputs(T=40, beta_max=beta_max)
    h0 = h0 if with_h0 else None
    ref_o, ref_S = fla_naive(q, k, v, beta, h0)
    o, S, states = delta_rule_recurrence(q, k, v, beta, initial_state=h0, output_final_state=True)
    assert maxerr(o, ref_o) <= TOL
    assert maxerr(S, ref_S) <= TOL
    assert maxerr(states[:, -1], S) == 0.0


@pytest.mark.parametrize("T", [1, 37, 64, 130])
@pytest.mark.parametrize("chunk_size", [16, 64])
def test_chunk_matches_fla_naive(T, chunk_size):
    q, k, v, beta, h0 = make_inputs(T=T, beta_max=2.0, seed=T)
    ref_o, ref_S = fla_naive(q, k, v, beta, h0)
    o, S = chunk_delta_rule(q, k, v, beta, initial_state=h0, output_final_state=True, chunk_size=chunk_size)
    assert o.shape == (2, T, 3, 8) and S.shape == (2, 3, 16, 8)
    assert maxerr(o, ref_o) <= TOL
    assert maxerr(S, ref_S) <= TOL


def test_l2norm_in_kernel_matches_fla_naive_on_normalised_inputs():
    # fla's naive reference does not normalise: feed it q, k normalised by fla's l2norm formula.
    q, k, v, beta, h0 = make_inputs(T=45, normalize_k=False)
    k = k * 3.0  # far from unit norm, so skipping the normalisation would be caught

    def l2(x):
        return x / torch.sqrt(x.square().sum(-1, keepdim=True) + 1e-6)

    ref_o, ref_S = fla_naive(l2(q), l2(k), v, beta, h0)
    o, S = chunk_delta_rule(q, k, v, beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert maxerr(o, ref_o) <= TOL and maxerr(S, ref_S) <= TOL
    o2, S2, _ = delta_rule_recurrence(
        q, k, v, beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    assert maxerr(o2, ref_o) <= TOL and maxerr(S2, ref_S) <= TOL
    assert maxerr(l2_normalize(k), l2(k)) <= 1e-6


# ---- our paths against each other ------------------------------------------------------------


@pytest.mark.parametrize("T,chunk_size", [(1, 8), (29, 8), (64, 32), (100, 64)])
def test_chunk_states_match_recurrence_states(T, chunk_size):
    q, k, v, beta, h0 = make_inputs(T=T, seed=7)
    o_ref, S_ref, states_ref = delta_rule_recurrence(q, k, v, beta, initial_state=h0, output_final_state=True)
    o, S, states = chunk_delta_rule_with_states(
        q, k, v, beta, initial_state=h0, output_final_state=True, chunk_size=chunk_size
    )
    assert states.shape == (2, T, 3, 16, 8)
    assert maxerr(states, states_ref) <= TOL
    assert maxerr(o, o_ref) <= TOL and maxerr(S, S_ref) <= TOL
    # the read-out is S_t^T (scale q_t), position by position
    scale = 16**-0.5
    assert maxerr(torch.einsum("bthkv,bthk->bthv", states, q * scale), o_ref) <= TOL


def test_custom_scale_and_no_initial_state():
    q, k, v, beta, _ = make_inputs(T=33)
    o_ref, _, _ = delta_rule_recurrence(q, k, v, beta, scale=0.3)
    o, S = chunk_delta_rule(q, k, v, beta, scale=0.3, chunk_size=8)
    assert S is None
    assert maxerr(o, o_ref) <= TOL
    o_default, _ = chunk_delta_rule(q, k, v, beta, chunk_size=8)
    assert maxerr(o_default, o_ref) > 1e-2  # the scale really is used


def test_beta_one_writes_value_under_key():
    # With a unit key and beta = 1 the delta rule overwrites: S_t^T k_t == v_t exactly.
    q, k, v, _, h0 = make_inputs(T=20)
    beta = torch.ones(2, 20, 3)
    _, _, states = chunk_delta_rule_with_states(q, k, v, beta, initial_state=h0, chunk_size=8)
    read = torch.einsum("bthkv,bthk->bthv", states, k)
    assert maxerr(read, v) <= TOL


def test_beta_two_is_householder_reflection():
    # beta = 2 and v = 0: S_t = (I - 2 k k^T) S_{t-1}, a reflection; twice with the same key = identity.
    B, H, K, V = 1, 2, 8, 4
    k1 = F.normalize(torch.randn(B, 1, H, K), dim=-1)
    k = torch.cat([k1, k1], dim=1)  # (B, 2, H, K)
    v = torch.zeros(B, 2, H, V)
    beta = torch.full((B, 2, H), 2.0)
    h0 = torch.randn(B, H, K, V)
    _, S, states = chunk_delta_rule_with_states(
        torch.randn(B, 2, H, K), k, v, beta, initial_state=h0, output_final_state=True
    )
    reflection = torch.eye(K) - 2 * torch.einsum("bhk,bhj->bhkj", k1[:, 0], k1[:, 0])
    assert maxerr(states[:, 0], reflection @ h0) <= TOL
    assert maxerr(S, h0) <= TOL


def test_bf16_inputs_are_upcast():
    q, k, v, beta, h0 = make_inputs(T=40)
    o32, _ = chunk_delta_rule(q, k, v, beta, initial_state=h0)
    o16, _ = chunk_delta_rule(q.bfloat16(), k.bfloat16(), v.bfloat16(), beta.bfloat16(), initial_state=h0)
    assert o16.dtype == torch.bfloat16
    assert maxerr(o16.float(), o32) < 0.1


def test_zero_length_and_bad_shapes():
    q, k, v, beta, h0 = make_inputs(T=0)
    o, S = chunk_delta_rule(q, k, v, beta, initial_state=h0, output_final_state=True)
    assert o.shape == (2, 0, 3, 8) and torch.equal(S, h0)
    q, k, v, beta, _ = make_inputs(T=5)
    with pytest.raises(ValueError, match="beta must be"):
        chunk_delta_rule(q, k, v, beta[..., None])
    with pytest.raises(ValueError, match="initial_state"):
        chunk_delta_rule(q, k, v, beta, initial_state=torch.zeros(2, 3, 8, 16))
    with pytest.raises(RuntimeError, match="use_fla=True"):
        chunk_delta_rule(q, k, v, beta, use_fla=True)  # CPU tensors: fla's kernels cannot run


# ---- gradients --------------------------------------------------------------------------------


def _grads(fn, inputs):
    for t in inputs:
        t.grad = None
    out, final = fn(*inputs)
    g = torch.Generator().manual_seed(1)
    (out * torch.randn(out.shape, generator=g)).sum().backward(retain_graph=True)
    (final * torch.randn(final.shape, generator=g)).sum().backward()
    return [t.grad.clone() for t in inputs]


@pytest.mark.parametrize("T,chunk_size", [(45, 16), (64, 64)])
def test_chunk_gradients_match_recurrence(T, chunk_size):
    inputs = make_inputs(T=T, seed=3, requires_grad=True)

    def ref(q, k, v, beta, h0):
        o, S, _ = delta_rule_recurrence(q, k, v, beta, initial_state=h0, output_final_state=True)
        return o, S

    def fast(q, k, v, beta, h0):
        return chunk_delta_rule(q, k, v, beta, initial_state=h0, output_final_state=True, chunk_size=chunk_size)

    for g_ref, g_fast in zip(_grads(ref, inputs), _grads(fast, inputs)):
        assert maxerr(g_ref, g_fast) <= TOL


def test_chunk_gradients_match_fla_naive():
    inputs = make_inputs(T=30, seed=5, requires_grad=True)
    g_ref = _grads(lambda q, k, v, b, h: fla_naive(q, k, v, b, h), inputs)
    g_fast = _grads(
        lambda q, k, v, b, h: chunk_delta_rule(q, k, v, b, initial_state=h, output_final_state=True, chunk_size=8),
        inputs,
    )
    for a, b in zip(g_ref, g_fast):
        assert maxerr(a, b) <= TOL


def test_state_materialisation_is_differentiable():
    q, k, v, beta, h0 = make_inputs(T=21, seed=9, requires_grad=True)
    w = torch.randn(2, 21, 3, 16, 8)
    _, _, st_ref = delta_rule_recurrence(q, k, v, beta, initial_state=h0)
    ref = torch.autograd.grad((st_ref * w).sum(), [q, k, v, beta, h0], allow_unused=True)
    _, _, st = chunk_delta_rule_with_states(q, k, v, beta, initial_state=h0, chunk_size=8)
    fast = torch.autograd.grad((st * w).sum(), [q, k, v, beta, h0], allow_unused=True)
    assert ref[0] is None and fast[0] is None  # states do not depend on q
    for a, b in zip(ref[1:], fast[1:]):
        assert maxerr(a, b) <= TOL


# ---- state edits ------------------------------------------------------------------------------


def test_edit_callback_changes_only_later_steps():
    q, k, v, beta, h0 = make_inputs(T=30)
    o0, _, st0 = delta_rule_recurrence(q, k, v, beta, initial_state=h0)
    t_edit = 12

    def zero_at(t, S):
        return torch.zeros_like(S) if t == t_edit else S

    o1, _, st1 = delta_rule_recurrence(q, k, v, beta, initial_state=h0, edit=zero_at)
    assert torch.equal(o1[:, :t_edit], o0[:, :t_edit]) and torch.equal(st1[:, :t_edit], st0[:, :t_edit])
    assert st1[:, t_edit].abs().max() == 0 and o1[:, t_edit].abs().max() == 0
    assert (o1[:, t_edit + 1 :] - o0[:, t_edit + 1 :]).abs().amax(dim=(0, 2, 3)).min() > 1e-4  # every later step


def test_replay_continues_from_replaced_states():
    q, k, v, beta, h0 = make_inputs(T=40, seed=11)
    _, _, states = chunk_delta_rule_with_states(q, k, v, beta, initial_state=h0)
    patch = torch.randn(3, 16, 8)
    edited = states.clone()
    edited[0, 9] = patch  # sequence 0, step 9
    edited[1, 25] = 0.0  # sequence 1, step 25
    edited[0, 30] = -patch  # sequence 0 again, later

    def reference_edit(t, S):
        S = S.clone()
        if t == 9:
            S[0] = patch
        if t == 25:
            S[1] = 0.0
        if t == 30:
            S[0] = -patch
        return S

    o_ref, _, st_ref = delta_rule_recurrence(q, k, v, beta, initial_state=h0, edit=reference_edit)
    o, st = replay_with_state_edits(q, k, v, beta, states, edited, chunk_size=8)
    assert maxerr(st, st_ref) <= TOL
    assert maxerr(o, o_ref) <= TOL
    # and the replayed trajectory is not just the edited tensor: later states were recomputed
    assert maxerr(st[0, 10], edited[0, 10]) > 1e-3


def test_replay_without_changes_is_the_original():
    q, k, v, beta, h0 = make_inputs(T=17)
    o_ref, _, states = chunk_delta_rule_with_states(q, k, v, beta, initial_state=h0)
    o, st = replay_with_state_edits(q, k, v, beta, states, states.clone())
    assert torch.equal(st, states) and maxerr(o, o_ref) <= TOL
