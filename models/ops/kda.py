"""Kimi Delta Attention (KDA): the gated delta rule with a per-channel decay, a readable recurrence, a
chunked pure-torch kernel and the replay of edited states.

KDA (Kimi Team, "Kimi Linear", arXiv 2510.26692; fla's `fla/ops/kda/naive.py`) decays every key channel
of the state by its own gate before the delta update. One head, state in fla's [K, V] layout:

    g[:, t]          g_t in R^K, <= 0    per-channel log-decay; alpha_t = exp(g_t) ("the gate")
    S_t = (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} + beta_t k_t v_t^T,    o_t = S_t^T (scale q_t)

With one alpha for all channels this is Gated DeltaNet (models/ops/gated_delta_rule.py); here Diag(alpha_t)
does not commute with k_t k_t^T, so the chunked form keeps a decay per pair of positions and channel.
One chunk from S_0, G_t = g_1 + ... + g_t (per channel, within the chunk), u_t the write of step t:

    D_t S_{t-1} = Diag(exp(G_t)) S_0 + sum_{s<t} (k_s * exp(G_t - G_s)) u_s^T,   S_t = D_t S_{t-1} + k_t u_t^T
    u_t = beta_t (v_t - (D_t S_{t-1})^T k_t)
=>  (I + strict_tril(diag(beta) P)) U = diag(beta) V - diag(beta) (K * exp(G)) S_0,
    P_ts = sum_c k_t[c] k_s[c] exp(G_t[c] - G_s[c])          (every exponent <= 0: no overflow)
    O = (Q * exp(G)) S_0 + tril(Q~K) U,   S_C = Diag(exp(G_C)) S_0 + (K * exp(G_C - G))^T U

Chunks run one after another, so memory is one chunk's (B, H, C, C, K) pair decays.
"""

from __future__ import annotations

from typing import Optional

import torch

from deltalens.models.ops.common import StateEdit, check_shapes, scan_chunks, scan_tokens
from deltalens.models.ops.precision import fp32_recurrence
from deltalens.models.ops.replay import replay_chunked

__all__ = ["kda_recurrence", "chunk_kda", "replay_kda_with_state_edits"]


def _check(q, k, v, beta, g, initial_state) -> None:
    check_shapes(q, k, v, beta, initial_state)
    if g.shape != k.shape:
        raise ValueError(f"g (the per-channel log-decay) must be [B, T, H, K] = {list(k.shape)}; got {tuple(g.shape)}.")


@fp32_recurrence
def kda_recurrence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    edit: Optional[StateEdit] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """KDA token by token (the reference; fp32 inside). q, k [B, T, H, K] (normalised), v [B, T, H, V],
    beta [B, T, H], g [B, T, H, K]; per step: decay, delta update, `edit(t, S) -> S`, read.
    Returns (o [B, T, H, V] in q's dtype, S_T [B, H, K, V], states [B, T, H, K, V])."""
    _check(q, k, v, beta, g, initial_state)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    qs, k, v, beta, alpha = q.float() * scale, k.float(), v.float(), beta.float(), g.float().exp()

    def step(t: int, S: torch.Tensor) -> torch.Tensor:
        S = alpha[:, t, :, :, None] * S  # Diag(alpha_t) S_{t-1}
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t]))
        return S + k[:, t, :, :, None] * u[:, :, None, :]

    return scan_tokens(step, qs, initial_state, v.shape[-1], edit, q.dtype)


def _chunk(q, k, v, beta, g, S, with_states: bool):
    """One chunk (B, H, C, .) in fp32, q scaled, from S (B, H, K, V): (o, S_C, states or None)."""
    C = q.shape[2]
    G = g.cumsum(2)  # (B, H, C, K)
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    pair = (G[:, :, :, None] - G[:, :, None, :]).masked_fill(~causal[:, :, None], float("-inf")).exp()  # t, s, K
    P = torch.einsum("bhtk,bhsk,bhtsk->bhts", k, k, pair)
    A = torch.tril(beta[..., None] * P, diagonal=-1)
    b = beta[..., None]
    rhs = torch.cat([v * b, k * b * G.exp()], dim=-1)
    U0, W = torch.linalg.solve_triangular(
        A + torch.eye(C, dtype=A.dtype, device=A.device), rhs, upper=False, unitriangular=True
    ).split([v.shape[-1], k.shape[-1]], dim=-1)
    U = U0 - W @ S
    QK = torch.einsum("bhtk,bhsk,bhtsk->bhts", q, k, pair)  # zero above the diagonal (pair is 0 there)
    o = (q * G.exp()) @ S + QK @ U
    states = None
    if with_states:  # S_t = Diag(alpha_t) S_{t-1} + k_t u_t^T inside the chunk
        alpha, prev, rows = g.exp(), S, []
        for c in range(C):
            prev = alpha[:, :, c, :, None] * prev + k[:, :, c, :, None] * U[:, :, c, None, :]
            rows.append(prev)
        states = torch.stack(rows, dim=2)  # (B, H, C, K, V)
    G_last = G[:, :, -1:]  # (B, H, 1, K)
    S = G_last.transpose(-1, -2).exp() * S + (k * (G_last - G).exp()).transpose(-1, -2) @ U
    return o, S, states


@fp32_recurrence
def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    chunk_size: int = 64,
    with_states: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """KDA, chunked (module docstring); arguments as `kda_recurrence`. Returns (o [B, T, H, V] in q's
    dtype, S_T [B, H, K, V] fp32, every S_t [B, T, H, K, V] fp32 with with_states, else None)."""
    _check(q, k, v, beta, g, initial_state)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    inputs = (q * scale, k, v, beta, g)
    o, S, all_states = scan_chunks(_chunk, inputs, initial_state, v.shape[-1], chunk_size, with_states)
    return o.to(q.dtype), S, all_states


@fp32_recurrence
def replay_kda_with_state_edits(
    q, k, v, beta, g, original_states: torch.Tensor, edited_states: torch.Tensor, scale=None, chunk_size: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Continue KDA from every state a hook changed (replacement semantics, as
    `replay_gated_with_state_edits`): (o [B, T, H, V] in q's dtype, the trajectory followed [B, T, H, K, V])."""

    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return replay_chunked(chunk_kda, (q, k, v, beta, g), original_states, edited_states, q, scale, chunk_size)
