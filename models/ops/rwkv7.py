"""RWKV-7's generalised delta rule: a readable recurrence, a chunked pure-torch kernel and the replay of
edited states.

RWKV-7 "Goose" (Peng et al., arXiv 2503.14456; fla's `fla/ops/rwkv7`, which runs it as fla's diagonal-plus-
low-rank rule `chunk_dplr_delta_rule` with a = -kk, b = kk * a). One head, state in fla's [K, V] layout
(RWKV's own [V, K] state is its transpose: S^T_t = S^T_{t-1} (Diag(w_t) - kk_t (kk_t * a_t)^T) + v_t k_t^T):

    w[:, t]   in R^K, <= 0   per-channel log-decay; the decay exp(w_t) is "the gate"
    kk_t      unit vector    the removal key (what the state forgets along)
    a_t       in R^K         the in-context learning rate, per channel (fla's layer: sigmoid, in (0, 1))
    A_t = Diag(exp(w_t)) - (kk_t * a_t) kk_t^T                                  the transition
    S_t = A_t S_{t-1} + k_t v_t^T,    o_t = S_t^T (scale r_t)   (fla's RWKV-7 layer: scale 1)

The removal reads the undecayed state: S_t = Diag(exp(w_t)) S_{t-1} + b_t u_t^T + k_t v_t^T with
b = kk * a and u_t = -S_{t-1}^T kk_t (fla's `dplr_recurrence`). One chunk from S_0, G_t = w_1 + ... + w_t
(per channel, within the chunk), G'_t = G_t - w_t:

    u_t = -(kk_t * exp(G'_t))^T S_0 + sum_{s<t} [P_ts u_s + Q_ts v_s],
        P_ts = -sum_c kk_t[c] b_s[c] exp(G'_t[c] - G_s[c]),  Q_ts likewise with k_s      (s < t)
=>  (I - P) U = Q V - (KK * exp(G')) S_0
    O = (R * exp(G)) S_0 + tril(R~B) U + tril(R~K) V,   R~X_ts = sum_c r_t[c] x_s[c] exp(G_t[c] - G_s[c])
    S_C = Diag(exp(G_C)) S_0 + (B * exp(G_C - G))^T U + (K * exp(G_C - G))^T V

Every exponent is <= 0 (no overflow); chunks run one after another, so memory is one chunk's (B, H, C, C, K)
pair decays, as in models/ops/kda.py.
"""

from __future__ import annotations

from typing import Optional

import torch

from deltalens.models.ops.common import StateEdit, scan_chunks, scan_tokens
from deltalens.models.ops.precision import fp32_recurrence
from deltalens.models.ops.replay import replay_chunked

__all__ = ["rwkv7_recurrence", "chunk_rwkv7", "replay_rwkv7_with_state_edits"]


def _check(r, w, k, v, kk, a, initial_state) -> None:
    if r.ndim != 4 or any(x.shape != r.shape for x in (w, k, kk, a)):
        shapes = ", ".join(str(tuple(x.shape)) for x in (r, w, k, kk, a))
        raise ValueError(f"r, w, k, kk and a must all be [B, T, H, K]; got {shapes}.")
    B, T, H, K = r.shape
    if v.ndim != 4 or v.shape[:3] != (B, T, H):
        raise ValueError(f"v must be [B, T, H, V] = [{B}, {T}, {H}, V]; got {tuple(v.shape)}.")
    if initial_state is not None and initial_state.shape != (B, H, K, v.shape[-1]):
        raise ValueError(f"initial_state must be [B, H, K, V] = [{B}, {H}, {K}, {v.shape[-1]}]; "
                         f"got {tuple(initial_state.shape)}.")  # fmt: skip


@fp32_recurrence
def rwkv7_recurrence(
    r: torch.Tensor,
    w: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kk: torch.Tensor,
    a: torch.Tensor,
    scale: float = 1.0,
    initial_state: Optional[torch.Tensor] = None,
    edit: Optional[StateEdit] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """RWKV-7 token by token (the reference; fp32 inside). r, w, k, kk, a [B, T, H, K], v [B, T, H, V]; per
    step: S_t = Diag(exp(w_t)) S_{t-1} - (kk_t * a_t)(kk_t^T S_{t-1}) + k_t v_t^T, `edit(t, S) -> S`, read.
    Returns (o [B, T, H, V] in r's dtype, S_T [B, H, K, V], states [B, T, H, K, V])."""
    _check(r, w, k, v, kk, a, initial_state)
    rs, decay, k, v, kk, a = r.float() * scale, w.float().exp(), k.float(), v.float(), kk.float(), a.float()

    def step(t: int, S: torch.Tensor) -> torch.Tensor:
        removed = torch.einsum("bhkv,bhk->bhv", S, kk[:, t])  # kk_t^T S_{t-1}, before the decay
        S = decay[:, t, :, :, None] * S - (kk[:, t] * a[:, t])[..., None] * removed[:, :, None, :]
        return S + k[:, t, :, :, None] * v[:, t, :, None, :]

    return scan_tokens(step, rs, initial_state, v.shape[-1], edit, r.dtype)


def _pairs(x, y, G_row, G_col, mask):
    """sum_c x_t[c] y_s[c] exp(G_row_t[c] - G_col_s[c]) where mask[t, s], else 0: (B, H, C, C)."""
    decay = (G_row[:, :, :, None] - G_col[:, :, None, :]).masked_fill(~mask[:, :, None], float("-inf")).exp()
    return torch.einsum("bhtk,bhsk,bhtsk->bhts", x, y, decay)


def _chunk(r, w, k, v, kk, b, S, with_states: bool):
    """One chunk (B, H, C, .) in fp32, r scaled, b = kk * a, from S (B, H, K, V): (o, S_C, states or None)."""
    C = r.shape[2]
    G = w.cumsum(2)  # (B, H, C, K)
    G_before = G - w  # G'_t: the decay up to, not including, step t
    strict = torch.ones(C, C, dtype=torch.bool, device=r.device).tril(-1)
    causal = torch.ones(C, C, dtype=torch.bool, device=r.device).tril()
    P = -_pairs(kk, b, G_before, G, strict)  # u_t's dependence on u_s
    Q = -_pairs(kk, k, G_before, G, strict)  # and on v_s
    rhs = torch.cat([Q @ v, -kk * G_before.exp()], dim=-1)
    eye = torch.eye(C, dtype=P.dtype, device=P.device)
    U0, W = torch.linalg.solve_triangular(eye - P, rhs, upper=False, unitriangular=True).split(
        [v.shape[-1], k.shape[-1]], dim=-1
    )
    U = U0 + W @ S  # (B, H, C, V): u_t = -S_{t-1}^T kk_t
    o = (r * G.exp()) @ S + _pairs(r, b, G, G, causal) @ U + _pairs(r, k, G, G, causal) @ v
    states = None
    if with_states:  # S_t = Diag(exp(w_t)) S_{t-1} + b_t u_t^T + k_t v_t^T inside the chunk
        decay, prev, rows = w.exp(), S, []
        for c in range(C):
            prev = decay[:, :, c, :, None] * prev + b[:, :, c, :, None] * U[:, :, c, None, :]
            prev = prev + k[:, :, c, :, None] * v[:, :, c, None, :]
            rows.append(prev)
        states = torch.stack(rows, dim=2)  # (B, H, C, K, V)
    G_last = G[:, :, -1:]  # (B, H, 1, K)
    ahead = (G_last - G).exp()
    S = G_last.transpose(-1, -2).exp() * S + (b * ahead).transpose(-1, -2) @ U + (k * ahead).transpose(-1, -2) @ v
    return o, S, states


@fp32_recurrence
def chunk_rwkv7(
    r: torch.Tensor,
    w: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kk: torch.Tensor,
    a: torch.Tensor,
    scale: float = 1.0,
    initial_state: Optional[torch.Tensor] = None,
    chunk_size: int = 64,
    with_states: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """RWKV-7, chunked (module docstring); arguments as `rwkv7_recurrence`. Returns (o [B, T, H, V] in r's
    dtype, S_T [B, H, K, V] fp32, every S_t [B, T, H, K, V] fp32 with with_states, else None)."""
    _check(r, w, k, v, kk, a, initial_state)
    inputs = (r.float() * scale, w, k, v, kk, kk.float() * a.float())  # b = kk * a, the removal key
    o, S, all_states = scan_chunks(_chunk, inputs, initial_state, v.shape[-1], chunk_size, with_states)
    return o.to(r.dtype), S, all_states


@fp32_recurrence
def replay_rwkv7_with_state_edits(
    r, w, k, v, kk, a, original_states: torch.Tensor, edited_states: torch.Tensor, scale: float = 1.0,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Continue RWKV-7 from every state a hook changed (replacement semantics, as
    `replay_gated_with_state_edits`): (o [B, T, H, V] in r's dtype, the trajectory followed [B, T, H, K, V])."""

    return replay_chunked(chunk_rwkv7, (r, w, k, v, kk, a), original_states, edited_states, r, scale, chunk_size)
