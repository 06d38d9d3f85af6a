"""Comba: a scalar decay plus a low-rank correction, a readable recurrence, a chunked pure-torch kernel and
the replay of edited states.

Comba (Hu et al., "Comba: Improving Bilinear RNNs with Closed-loop Control", arXiv 2506.02475; fla's
`fla/ops/comba`) corrects the state with its own key p_t before the write. One head, state in fla's [K, V]
layout:

    g_t <= 0          scalar log-decay; alpha_t = exp(g_t) ("the gate")
    p_t               the correction key (fla's layer: p = l2norm(k_raw * sigmoid(decay)), parallel to k_t)
    u_t = beta_t (v_t - S_{t-1}^T p_t)
    S_t = alpha_t S_{t-1} + k_t u_t^T = (alpha_t I - beta_t k_t p_t^T) S_{t-1} + beta_t k_t v_t^T
    o_t = S_t^T (scale q_t)

This is the order of fla's Triton kernels (the correction reads the state before the decay). fla's
`naive_recurrent_comba` decays first (alpha_t (I - beta_t k_t p_t^T)); its kernels and `naive_chunk_comba`
do not, and the kernels are what fla's layer runs, so that is the recurrence here (tests/models/test_comba.py
holds both facts). The transition's eigenvalues are alpha_t (d_k - 1 times, on p_t's complement) and
alpha_t - beta_t p_t^T k_t along k_t: real, and negative where beta_t p_t^T k_t > alpha_t although beta < 1.

One chunk from S_0, G_t = g_1 + ... + g_t within it (every exponent below <= 0: no overflow):

    (I + strict_tril(diag(beta) P)) U = diag(beta) V - diag(beta) (Pk * exp(G_{t-1})) S_0,
    P_ts = (p_t . k_s) exp(G_{t-1} - G_s)   (s < t)
    O = (Q * exp(G)) S_0 + tril(QK * exp(G_t - G_s)) U,    S_C = exp(G_C) S_0 + (K * exp(G_C - G))^T U
"""

from __future__ import annotations

from typing import Optional

import torch

from deltalens.models.ops.common import StateEdit, check_shapes, scan_chunks, scan_tokens
from deltalens.models.ops.precision import fp32_recurrence
from deltalens.models.ops.replay import replay_chunked

__all__ = ["comba_recurrence", "chunk_comba", "replay_comba_with_state_edits"]


def _check(q, k, v, p, beta, g, initial_state) -> None:
    check_shapes(q, k, v, beta, initial_state)
    if p.shape != k.shape:
        raise ValueError(f"p (the correction key) must be [B, T, H, K] = {list(k.shape)}; got {tuple(p.shape)}.")
    if g.shape != beta.shape:
        raise ValueError(f"g (the log-decay) must be [B, T, H] = {list(beta.shape)}; got {tuple(g.shape)}.")


@fp32_recurrence
def comba_recurrence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    p: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    edit: Optional[StateEdit] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Comba token by token (the reference; fp32 inside). q, k, p [B, T, H, K] (normalised), v [B, T, H, V],
    beta and g [B, T, H]; per step: correction, decay, write, `edit(t, S) -> S`, read.
    Returns (o [B, T, H, V] in q's dtype, S_T [B, H, K, V], states [B, T, H, K, V])."""
    _check(q, k, v, p, beta, g, initial_state)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    qs, k, v, p, beta, alpha = q.float() * scale, k.float(), v.float(), p.float(), beta.float(), g.float().exp()

    def step(t: int, S: torch.Tensor) -> torch.Tensor:
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, p[:, t]))  # reads S_{t-1}
        return alpha[:, t, :, None, None] * S + k[:, t, :, :, None] * u[:, :, None, :]

    return scan_tokens(step, qs, initial_state, v.shape[-1], edit, q.dtype)


def _chunk(q, k, v, p, beta, g, S, with_states: bool):
    """One chunk (B, H, C, .) in fp32, q scaled, from S (B, H, K, V): (o, S_C, states or None)."""
    C = q.shape[2]
    G = g.cumsum(-1)  # (B, H, C)
    G_before = G - g  # G_{t-1}
    strict = torch.ones(C, C, dtype=torch.bool, device=q.device).tril(-1)
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    before = (G_before[..., :, None] - G[..., None, :]).masked_fill(~strict, float("-inf")).exp()  # t, s
    at = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf")).exp()
    b = beta[..., None]
    A = b * (p @ k.transpose(-1, -2)) * before  # strictly lower triangular
    rhs = torch.cat([v * b, p * b * G_before.exp()[..., None]], dim=-1)
    U0, W = torch.linalg.solve_triangular(
        A + torch.eye(C, dtype=A.dtype, device=A.device), rhs, upper=False, unitriangular=True
    ).split([v.shape[-1], k.shape[-1]], dim=-1)
    U = U0 - W @ S
    o = (q * G.exp()[..., None]) @ S + ((q @ k.transpose(-1, -2)) * at) @ U
    states = None
    if with_states:  # S_t = alpha_t S_{t-1} + k_t u_t^T inside the chunk
        alpha, prev, rows = g.exp(), S, []
        for c in range(C):
            prev = alpha[:, :, c, None, None] * prev + k[:, :, c, :, None] * U[:, :, c, None, :]
            rows.append(prev)
        states = torch.stack(rows, dim=2)  # (B, H, C, K, V)
    G_last = G[..., -1:]  # (B, H, 1)
    S = G_last[..., None].exp() * S + (k * (G_last - G).exp()[..., None]).transpose(-1, -2) @ U
    return o, S, states


@fp32_recurrence
def chunk_comba(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    p: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    chunk_size: int = 64,
    with_states: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """Comba, chunked (module docstring); arguments as `comba_recurrence`. Returns (o [B, T, H, V] in q's
    dtype, S_T [B, H, K, V] fp32, every S_t [B, T, H, K, V] fp32 with with_states, else None)."""
    _check(q, k, v, p, beta, g, initial_state)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    inputs = (q * scale, k, v, p, beta, g)
    o, S, all_states = scan_chunks(_chunk, inputs, initial_state, v.shape[-1], chunk_size, with_states)
    return o.to(q.dtype), S, all_states


@fp32_recurrence
def replay_comba_with_state_edits(
    q, k, v, p, beta, g, original_states: torch.Tensor, edited_states: torch.Tensor, scale=None, chunk_size: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Continue Comba from every state a hook changed (replacement semantics, as
    `replay_gated_with_state_edits`): (o [B, T, H, V] in q's dtype, the trajectory followed [B, T, H, K, V])."""

    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return replay_chunked(chunk_comba, (q, k, v, p, beta, g), original_states, edited_states, q, scale, chunk_size)
