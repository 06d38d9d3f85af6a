"""The gated delta rule and the delta product (models/ops/gated_delta_rule.py) against fla's torch references
and against each other: outputs, final state, every S_t, and gradients of every input, on the C kernel
and on the chunked torch kernel."""

import pytest
import torch
from fla.ops.gated_delta_product.naive import naive_recurrent_gated_delta_product
from fla.ops.gated_delta_rule import naive_recurrent_gated_delta_rule

from deltalens.models.ops.delta_rule import l2_normalize
from deltalens.models.ops.gated_delta_rule import (
    chunk_gated_delta_rule,
    deinterleave,
    gated_delta_rule_recurrence,
    interleave,
    replay_gated_with_state_edits,
    token_transition,
)
from deltalens.models.ops.native import native_kernels


@pytest.fixture(autouse=True, params=["c-kernel", "torch-kernel"])
def cpu_kernel(request):
    """Every test runs twice: the CPU path on the C kernel (gated or not; the default with a C
    compiler) and on the chunked torch kernels (the fallback)."""
    with native_kernels(request.param == "c-kernel"):
        yield request.param


def inputs(B=2, T=37, H=3, K=8, V=16, n=None, seed=0, decay=2.0):
    gen = torch.Generator().manual_seed(seed)
    shape_k = (B, T, H, K) if n is None else (B, T, H, n, K)
    shape_v = (B, T, H, V) if n is None else (B, T, H, n, V)
    q = l2_normalize(torch.randn(B, T, H, K, generator=gen))
    k = l2_normalize(torch.randn(*shape_k, generator=gen))
    v = torch.randn(*shape_v, generator=gen)
    beta = 2 * torch.rand(*shape_k[:-1], generator=gen)
    g = -decay * torch.rand(B, T, H, generator=gen)
    h0 = torch.randn(B, H, K, V, generator=gen)
    return q, k, v, beta, g, h0


def test_recurrence_matches_fla_reference():
    q, k, v, beta, g, h0 = inputs()
    o, S, states = gated_delta_rule_recurrence(q, k, v, beta, g, initial_state=h0, output_final_state=True)
    o_ref, S_ref = naive_recurrent_gated_delta_rule(q, k, v, beta, g, initial_state=h0, output_final_state=True)
    assert (o - o_ref).abs().max() <= 1e-5 and (S - S_ref).abs().max() <= 1e-5
    assert torch.equal(states[:, -1], S)


@pytest.mark.parametrize("T, chunk", [(37, 16), (37, 64), (64, 16), (1, 64), (5, 2)])
def test_chunked_kernel_matches_recurrence(T, chunk):
    q, k, v, beta, g, h0 = inputs(T=T)
    o, S, states = gated_delta_rule_recurrence(q, k, v, beta, g, initial_state=h0, output_final_state=True)
    o_c, S_c, states_c = chunk_gated_delta_rule(
        q, k, v, beta, g, initial_state=h0, output_final_state=True, chunk_size=chunk, with_states=True
    )
    assert (o - o_c).abs().max() <= 1e-5
    assert (S - S_c).abs().max() <= 1e-5
    assert (states - states_c).abs().max() <= 1e-5
    o_fast, S_fast, none = chunk_gated_delta_rule(
        q, k, v, beta, g, initial_state=h0, output_final_state=True, chunk_size=chunk
    )
    assert none is None and (o_fast - o).abs().max() <= 1e-5


def test_strong_decay_stays_finite():
    """exp(G_t - G_s) is only formed below the diagonal, so a decay of e^-60 per token cannot overflow."""
    q, k, v, beta, g, h0 = inputs(decay=60.0)
    o, S, _ = chunk_gated_delta_rule(q, k, v, beta, g, initial_state=h0, output_final_state=True, chunk_size=16)
    o_ref, S_ref, _ = gated_delta_rule_recurrence(q, k, v, beta, g, initial_state=h0, output_final_state=True)
    assert torch.isfinite(o).all() and (o - o_ref).abs().max() <= 1e-5 and (S - S_ref).abs().max() <= 1e-5


@pytest.mark.parametrize("gated", [True, False])
def test_chunked_gradients_match_recurrence(gated):
    q, k, v, beta, g, h0 = inputs(T=21)
    g = g if gated else None
    leaves = [x.clone().requires_grad_() for x in (q, k, v, beta, h0)] + ([g.clone().requires_grad_()] if gated else [])

    def grads(kernel):
        for x in leaves:
            x.grad = None
        qq, kk, vv, bb, hh = leaves[:5]
        gg = leaves[5] if gated else None
        o, S = kernel(qq, kk, vv, bb, gg, hh)
        ((o * torch.linspace(-1, 1, o.numel()).view_as(o)).sum() + (S**2).sum()).backward()
        return [x.grad.clone() for x in leaves]

    ref = grads(lambda *a: gated_delta_rule_recurrence(*a[:5], initial_state=a[5], output_final_state=True)[:2])
    got = grads(
        lambda *a: chunk_gated_delta_rule(*a[:5], initial_state=a[5], output_final_state=True, chunk_size=8)[:2]
    )
    for r, c in zip(ref, got):
        assert (r - c).abs().max() <= 1e-4


@pytest.mark.parametrize("n, gated", [(2, True), (3, True), (3, False), (1, True)])
def test_product_matches_fla_reference_with_gradients(n, gated):
    q, k, v, beta, g, h0 = inputs(T=19, n=n)
    g = g if gated else None
    leaves = [x.clone().requires_grad_() for x in (q, k, v, beta)]

    def ours():
        qi, ki, vi, bi, gi = interleave(*leaves, g)
        o, S, _ = chunk_gated_delta_rule(qi, ki, vi, bi, gi, initial_state=h0, output_final_state=True, chunk_size=8)
        return deinterleave(o, n), S

    def theirs():
        qq, kk, vv, bb = leaves
        flat = lambda x: x.transpose(2, 3).flatten(1, 2)  # (B, T, H, n, ...) -> (B, T*n, H, ...)  # noqa: E731
        return naive_recurrent_gated_delta_product(
            qq,
            flat(kk),
            flat(vv),
            g,
            flat(bb),
            q.shape[-1] ** -0.5,
            initial_state=h0,
            output_final_state=True,
            num_householder=n,
        )

    results = []
    for run in (ours, theirs):
        for x in leaves:
            x.grad = None
        o, S = run()
        (o.sum() + (S * S).sum()).backward()
        results.append((o.detach(), S.detach(), [x.grad.clone() for x in leaves]))
    (o1, S1, g1), (o2, S2, g2) = results
    assert (o1 - o2).abs().max() <= 1e-5 and (S1 - S2).abs().max() <= 1e-5
    for a, b in zip(g1, g2):
        assert (a - b).abs().max() <= 1e-4


@pytest.mark.parametrize("n, gated", [(3, True), (2, False), (1, True)])
def test_replaying_state_edits_equals_the_edited_recurrence(n, gated):
    """An edited per-token state is what the layer continues from (sequences edited at different
    steps, one at the first and one at the last token), chunked between edits; the recurrence with
    the same edit is the reference."""
    q, k, v, beta, g, _ = inputs(T=23, n=n)
    g = g if gated else None
    B, T = q.shape[:2]
    qi, ki, vi, bi, gi = interleave(q, k, v, beta, g)
    states = deinterleave(gated_delta_rule_recurrence(qi, ki, vi, bi, gi)[2], n)
    patch = torch.randn_like(states[:, 0])
    at = {0: [0, 9], 1: [9, 22]}  # sequence -> the tokens whose state is replaced

    def edit(s, S):  # on the sub-token recurrence: after each token's last factor
        t, last = divmod(s, n)
        if last != n - 1:
            return S
        rows = torch.tensor([t in at[b] for b in range(B)])
        return torch.where(rows.view(B, 1, 1, 1), patch, S)

    o_want, _, states_want = gated_delta_rule_recurrence(qi, ki, vi, bi, gi, edit=edit)
    edited = states.clone()
    for b, times in at.items():
        edited[b, times] = patch[b]
    o, followed = replay_gated_with_state_edits(q, k, v, beta, g, states, edited, chunk_size=4)
    assert (followed - deinterleave(states_want, n)).abs().max() <= 1e-4
    assert (o - deinterleave(o_want, n)).abs().max() <= 1e-4
    assert (followed[1, :9] - states[1, :9]).abs().max() <= 1e-5  # before its first edit: the original
    o_same, _ = replay_gated_with_state_edits(q, k, v, beta, g, states, states.clone())
    assert (o_same - deinterleave(gated_delta_rule_recurrence(qi, ki, vi, bi, gi)[0], n)).abs().max() <= 1e-5
    with pytest.raises(ValueError, match="must return the shape"):
        replay_gated_with_state_edits(q, k, v, beta, g, states, states[:, :-1])


def test_token_transition_is_the_linear_part_of_one_token():
    """With zero values nothing is written, so S_t = A_t S_{t-1} exactly."""
    n = 3
    q, k, v, beta, g, h0 = inputs(B=1, T=1, n=n)
    _, S, _ = chunk_gated_delta_rule(
        *interleave(q, k, torch.zeros_like(v), beta, g), initial_state=h0, output_final_state=True
    )
    A = token_transition(k[0, 0], beta[0, 0], g[0, 0])  # (H, K, K)
    assert (A @ h0[0] - S[0]).abs().max() <= 1e-5
    # beta = 2 and unit keys: a product of reflections is orthogonal
    R = token_transition(k[0, 0], torch.full_like(beta[0, 0], 2.0))
    eye = torch.eye(R.shape[-1]).expand_as(R)
    assert (R @ R.transpose(-1, -2) - eye).abs().max() <= 1e-5


def test_shapes_are_checked():
    q, k, v, beta, g, h0 = inputs()
    with pytest.raises(ValueError, match="log-decay"):
        chunk_gated_delta_rule(q, k, v, beta, g[:, :3])
    with pytest.raises(ValueError, match="beta"):
        gated_delta_rule_recurrence(q, k, v, beta[..., :1], g)
