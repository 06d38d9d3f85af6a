"""The gated delta rule and the delta product: a readable recurrence, a chunked pure-torch kernel,
and fla's kernels on CUDA.

Gated DeltaNet (Yang, Kautz, Hatamizadeh, "Gated Delta Networks", ICLR 2025, arXiv 2412.06464)
multiplies the state by a decay alpha_t = exp(g_t) in (0, 1] before the delta update; DeltaProduct
(Siems, Carstensen, Zela, Hutter, Pontil, Grazzi, "DeltaProduct: Improving State-Tracking in Linear
RNNs via Householder Products", arXiv 2502.10297) applies n_h delta updates per token, so one token's
transition is a product of n_h generalised Householder reflections. Code symbol -> paper notation
(one head, state in fla's [K, V] layout, as models/ops/delta_rule.py):

    g[:, t]          g_t <= 0           log-decay; alpha_t = exp(g_t) ("the gate"), None = no decay
    k[:, t, j]       k_{t,j}            the key of factor j = 0 .. n_h - 1 (unit norm)
    beta[:, t, j]    beta_{t,j}         its write strength, in [0, 1] or [0, 2]
    S                S_t                (K, V)

    one token:  S <- alpha_t S                                              (decay first, as fla)
                for j in 0 .. n_h - 1:  S <- (I - beta_{t,j} k_{t,j} k_{t,j}^T) S + beta_{t,j} k_{t,j} v_{t,j}^T
                o_t = S_t^T (scale q_t)                                     (read after all factors)

so S_t = A_t S_{t-1} + (writes) with the per-token transition
A_t = (I - beta_{t,n-1} k k^T) ... (I - beta_{t,0} k k^T) alpha_t  (`token_transition`).

A product of n_h factors is the gated delta rule on a sequence n_h times longer (`interleave`):
sub-token (t, j) carries k_{t,j}, v_{t,j}, beta_{t,j}; the decay sits on sub-token (t, 0), the query
on sub-token (t, n_h - 1) (zero elsewhere); outputs are read at the last sub-token. fla's
GatedDeltaProduct does exactly this, so DeltaNet, Gated DeltaNet and DeltaProduct share one kernel:

* `gated_delta_rule_recurrence`: the reference, token by token, every S_t, an optional `edit`.
* `chunk_gated_delta_rule`: the fast path. On a CPU the C kernel (models/ops/csrc/delta_rule.c, which
  takes the decay), else the chunked WY/UT torch form below (without decay: the plain delta rule's);
  on CUDA fla's Triton `chunk_gated_delta_rule` / `fused_recurrent_gated_delta_rule`.
  `with_states=True` also returns every S_t (the C kernel copies them out when no gradient is
  wanted; else the torch form). Which path runs is `select_kernel`'s decision (models/ops/kernel_select.py).

Chunked form with decay, one chunk from S_0, G_t = g_1 + ... + g_t (within the chunk), D_ts = exp(G_t - G_s)
for s <= t (0 above the diagonal):
    u_t = beta_t (v_t - exp(G_t) S_0^T k_t - sum_{s<t} D_ts (k_s . k_t) u_s)
=>  (I + strict_tril(diag(beta) (K K^T * D))) U = diag(beta) V - diag(beta exp(G)) K S_0
=>  U = U0 - W S_0,   O = (Q * exp(G)) S_0 + (tril(Q K^T) * D) U,
    S_C = exp(G_C) S_0 + (K * exp(G_C - G))^T U.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F
from einops import rearrange

from deltalens.models.ops.common import StateEdit, check_shapes, check_state_every, scan_tokens
from deltalens.models.ops.delta_rule import chunk_delta_rule, chunk_delta_rule_with_states
from deltalens.models.ops.delta_rule_native import native_delta_rule, native_delta_rule_with_states
from deltalens.models.ops.fla_kernels import fla_gated_delta_rule
from deltalens.models.ops.fla_state_rows import fla_state_rows
from deltalens.models.ops.kernel_select import (
    C_STATES,
    CHUNKED,
    CHUNKED_STATES,
    FLA_CHUNK,
    FLA_RECURRENT,
    FLA_ROWS,
    GATED_FLA_NEEDS,
    C,
    KernelChoice,
    select_kernel_for,
)
from deltalens.models.ops.precision import fp32_recurrence, no_autocast
from deltalens.models.ops.replay import replay_segments

__all__ = [
    "gated_delta_rule_recurrence",
    "chunk_gated_delta_rule",
    "interleave",
    "deinterleave",
    "token_transition",
    "replay_gated_with_state_edits",
    "StateEdit",  # defined in models/ops/common.py; importable from here as before
]


def _check(q, k, v, beta, g, initial_state) -> None:
    """The delta rule's shape checks, plus the log-decay's."""
    check_shapes(q, k, v, beta, initial_state)
    if g is not None and g.shape != beta.shape:
        raise ValueError(f"g (the log-decay) must be [B, T, H] = {list(beta.shape)} or None; got {tuple(g.shape)}.")


@fp32_recurrence
def gated_delta_rule_recurrence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    edit: Optional[StateEdit] = None,
) -> tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
    """The gated delta rule token by token (readable reference; fp32 inside).

    q, k [B, T, H, K] (already normalised), v [B, T, H, V], beta [B, T, H], g [B, T, H] log-decay
    or None, scale default K ** -0.5, initial_state [B, H, K, V]. Per step: decay, delta update,
    `edit(t, S) -> S`, read. Returns (o [B, T, H, V] in q's dtype, S_T or None, states [B, T, H, K, V]).
    """
    _check(q, k, v, beta, g, initial_state)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    qs, k, v, beta = q.float() * scale, k.float(), v.float(), beta.float()

    def step(t: int, S: torch.Tensor) -> torch.Tensor:
        if g is not None:
            S = S * g[:, t].float().exp()[..., None, None]  # alpha_t S_{t-1}
        k_t = k[:, t]
        u_t = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k_t))
        return S + torch.einsum("bhk,bhv->bhkv", k_t, u_t)

    o, S, states = scan_tokens(step, qs, initial_state, v.shape[-1], edit, q.dtype)
    return o, (S if output_final_state else None), states


def _chunk_gated(q, k, v, beta, g, S, chunk_size: int, with_states: bool):
    """Chunked gated delta rule on fp32 inputs (q scaled), T > 0. See the module docstring."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    C = min(chunk_size, T)
    pad = (-T) % C
    if pad:  # zero keys, beta and log-decay: identity steps
        q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
        beta, g = F.pad(beta, (0, 0, 0, pad)), F.pad(g, (0, 0, 0, pad))
    L = T + pad
    N = L // C
    qc, kc, vc = (rearrange(x, "b (n c) h d -> b h n c d", c=C) for x in (q, k, v))  # (B, H, N, C, D)
    bc = rearrange(beta, "b (n c) h -> b h n c 1", c=C)
    G = rearrange(g, "b (n c) h -> b h n c", c=C).cumsum(-1)  # (B, H, N, C) cumulative log-decay
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    diff = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf"))
    D = diff.exp()  # (B, H, N, C, C): exp(G_t - G_s) for s <= t, else 0

    A = torch.tril((kc * bc) @ kc.transpose(-1, -2) * D, diagonal=-1)
    rhs = torch.cat([vc * bc, kc * bc * G[..., None].exp()], dim=-1)
    U0, W = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True).split([V, K], dim=-1)

    G_last = G[..., -1:]  # (B, H, N, 1)
    k_dec = kc * (G_last - G)[..., None].exp()  # (B, H, N, C, K): k_s exp(G_C - G_s)
    KtU0 = k_dec.transpose(-1, -2) @ U0  # (B, H, N, K, V)
    KtW = k_dec.transpose(-1, -2) @ W  # (B, H, N, K, K)
    decay_chunk = G_last[..., None].exp()  # (B, H, N, 1, 1)
    starts = []
    for n in range(N):  # the only sequential part: chunk to chunk
        starts.append(S)
        S = decay_chunk[:, :, n] * S + KtU0[:, :, n] - KtW[:, :, n] @ S
    S_start = torch.stack(starts, dim=2)  # (B, H, N, K, V)
    U = U0 - W @ S_start
    o = (qc * G[..., None].exp()) @ S_start + (torch.tril(qc @ kc.transpose(-1, -2)) * D) @ U
    o = rearrange(o, "b h n c d -> b (n c) h d")[:, :T]
    states = None
    if with_states:  # S_t = alpha_t S_{t-1} + k_t u_t^T inside each chunk, all chunks at once
        alpha = rearrange(g, "b (n c) h -> b h n c", c=C).exp()
        prev, rows = S_start, []
        for c in range(C):
            prev = alpha[:, :, :, c, None, None] * prev + kc[:, :, :, c, :, None] * U[:, :, :, c, None, :]
            rows.append(prev)
        states = rearrange(torch.stack(rows, dim=3), "b h n c k v -> b (n c) h k v")[:, :T]
    return o, S, states


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
    use_fla: Optional[bool] = None,
    with_states: bool = False,
    native: Optional[bool] = None,
    state_every: int = 1,
    kernel: Optional[KernelChoice] = None,
    rows: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
) -> tuple[torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]]:
    """The gated delta rule, chunked. Argument order as `gated_delta_rule_recurrence` (beta before g;
    fla's `chunk_gated_delta_rule` takes g before beta).

    use_fla: None = fla's Triton kernels for CUDA tensors when fla imports, else ours; with_states
    also returns every S_t (the C kernel without gradients on a CPU, else the chunked torch kernel),
    or with state_every = n the state after every n-th step ([B, T / n, ...]: one per DeltaProduct
    token). native: the CPU path's kernel, as `chunk_delta_rule`'s (None = the C kernel, with the
    decay, when it builds here; False = the chunked torch kernel). kernel: the path to run, as
    `select_kernel` chose it for these inputs (None = choose here); g None runs the plain delta rule's
    entry points, which choose (or take `kernel`) the same way. rows = (b, step) with with_states: only
    those states, [len(b), H, K, V] (the C kernel writes only them; the chunked one indexes; kernel
    fla_rows, CUDA: fla's forward, only those rows rebuilt from its chunk states).
    Returns (o in q's dtype, S_T or None, states or None).
    """
    _check(q, k, v, beta, g, initial_state)
    if with_states:
        check_state_every(state_every, q.shape[1])
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    common: dict[str, Any] = dict(chunk_size=chunk_size, native=native, kernel=kernel)
    if g is None:  # the plain delta rule: its own kernels (the C one on CPU)
        if with_states:
            return chunk_delta_rule_with_states(
                q, k, v, beta, scale, initial_state, output_final_state, state_every=state_every, rows=rows, **common
            )
        o, S = chunk_delta_rule(q, k, v, beta, scale, initial_state, output_final_state, use_fla=use_fla, **common)
        return o, S, None
    if with_states and use_fla:
        raise RuntimeError(GATED_FLA_NEEDS)  # fla's kernels return no states
    if kernel is None:
        kernel = select_kernel_for(
            q, k, v, beta, g, initial_state, wants_states=with_states, use_fla=use_fla, native=native
        )
    kernel.require(
        (C_STATES, CHUNKED_STATES, FLA_ROWS) if with_states else (FLA_CHUNK, FLA_RECURRENT, C, CHUNKED),
        f"chunk_gated_delta_rule(with_states={with_states})",
    )
    if kernel.path == FLA_ROWS:  # fla's forward for o, the kept rows rebuilt (models/ops/fla_state_rows.py)
        args = (q, k, v, beta, g, scale, initial_state, output_final_state, chunk_size)
        return fla_state_rows(*args, rows, state_every)
    if kernel.path in (FLA_CHUNK, FLA_RECURRENT):
        recurrent = kernel.path == FLA_RECURRENT
        o, S = fla_gated_delta_rule(q, k, v, beta, g, scale, initial_state, output_final_state, recurrent=recurrent)
        return o, S, None
    with no_autocast():  # the recurrence in fp32 (models/ops/precision.py)
        return _torch_gated(
            q, k, v, beta, g, scale, initial_state, output_final_state, chunk_size, with_states, state_every, kernel,
            rows,
        )  # fmt: skip


def _torch_gated(
    q, k, v, beta, g, scale, initial_state, output_final_state, chunk_size, with_states, state_every, kernel,
    rows=None,
):  # fmt: skip
    """`chunk_gated_delta_rule`'s C and chunked torch paths (g given), in fp32."""
    B, T, H, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1], dtype=torch.float32) if initial_state is None else initial_state.float()
    if T == 0:
        states = v.new_zeros(B, 0, H, K, v.shape[-1], dtype=torch.float32) if with_states else None
        return q.new_zeros(B, 0, H, v.shape[-1]), (S if output_final_state else None), states
    prepared = (q.float() * scale, k.float(), v.float(), beta.float())
    if kernel.path == C_STATES:
        o, S, states = native_delta_rule_with_states(*prepared, S, alpha=g.float().exp(), stride=state_every, rows=rows)
        return o.to(q.dtype), (S if output_final_state else None), states
    if kernel.path == C:
        o, S = native_delta_rule(*prepared, S, alpha=g.float().exp())
        return o.to(q.dtype), (S if output_final_state else None), None
    o, S, states = _chunk_gated(*prepared, g.float(), S, chunk_size, with_states)
    if with_states:
        states = states[:, state_every - 1 :: state_every]
        if rows is not None:
            states = states[rows[0].to(states.device), rows[1].to(states.device)]
    return o.to(q.dtype), (S if output_final_state else None), states


# --------------------------------------------------------------------------------------------
# DeltaProduct: n_h factors per token as n_h sub-tokens.
# --------------------------------------------------------------------------------------------


def interleave(q, k, v, beta, g):
    """Per-token factors -> one sub-token per factor.

    q [B, T, H, K]; k [B, T, H, n, K]; v [B, T, H, n, V]; beta [B, T, H, n]; g [B, T, H] or None ->
    q, k [B, T*n, H, K], v [B, T*n, H, V], beta [B, T*n, H], g [B, T*n, H] or None: the query on the
    last sub-token of each token, the decay on the first, zeros elsewhere.
    """
    n = k.shape[3]
    zeros_q = q.new_zeros(*q.shape[:2], n - 1, *q.shape[2:])  # (B, T, n-1, H, K)
    q_i = rearrange(torch.cat([zeros_q, q[:, :, None]], dim=2), "b t n h d -> b (t n) h d")
    k_i = rearrange(k, "b t h n d -> b (t n) h d")
    v_i = rearrange(v, "b t h n d -> b (t n) h d")
    beta_i = rearrange(beta, "b t h n -> b (t n) h")
    g_i = None
    if g is not None:
        zeros_g = g.new_zeros(*g.shape[:2], n - 1, g.shape[2])
        g_i = rearrange(torch.cat([g[:, :, None], zeros_g], dim=2), "b t n h -> b (t n) h")
    return q_i, k_i, v_i, beta_i, g_i


def deinterleave(x: torch.Tensor, n: int) -> torch.Tensor:
    """Per-sub-token [B, T*n, ...] -> per-token [B, T, ...]: the value after each token's last factor."""
    return x[:, n - 1 :: n]


@fp32_recurrence
def replay_gated_with_state_edits(
    q,
    k,
    v,
    beta,
    g,
    original_states: torch.Tensor,
    edited_states: torch.Tensor,
    scale: Optional[float] = None,
    chunk_size: int = 64,
):
    """`delta_rule.replay_with_state_edits` for DeltaProduct / Gated DeltaNet: re-run the layer so that
    every per-token state an edit changed is what the recurrence continues from (replacement
    semantics), the chunked kernel between edits.

    Per-token inputs as `interleave` takes them (q [B, T, H, K], k [B, T, H, n, K], ...); states
    [B, T, H, K, V] after each token's last factor. Returns (o [B, T, H, V] in q's dtype, the
    trajectory followed [B, T, H, K, V] fp32)."""
    n = k.shape[3]
    qi, ki, vi, bi, gi = interleave(q, k, v, beta, g)

    def run_segment(start: int, stop: int, S: torch.Tensor) -> torch.Tensor:
        sub = slice(start * n, stop * n)  # the segment's sub-tokens, from its first token's decay on
        return chunk_gated_delta_rule(
            qi[:, sub],
            ki[:, sub],
            vi[:, sub],
            bi[:, sub],
            None if gi is None else gi[:, sub],
            initial_state=S,
            chunk_size=chunk_size,
            with_states=True,
            state_every=n,
        )[2]

    states = replay_segments(original_states, edited_states, run_segment)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o = torch.einsum("bthkv,bthk->bthv", states, q.float() * scale)  # the query reads the last factor's state
    return o.to(q.dtype), states


@fp32_recurrence
def token_transition(k: torch.Tensor, beta: torch.Tensor, g: Optional[torch.Tensor] = None) -> torch.Tensor:
    """A_t = (I - beta_{n-1} k_{n-1} k_{n-1}^T) ... (I - beta_0 k_0 k_0^T) * exp(g): the matrix one token
    applies to the state (S_t = A_t S_{t-1} + writes).

    k [..., n, K], beta [..., n], g [...] or None -> [..., K, K] (fp32). For DeltaNet n = 1.
    """
    K = k.shape[-1]
    A = torch.eye(K, dtype=torch.float32, device=k.device).expand(*k.shape[:-2], K, K)
    for j in range(k.shape[-2]):
        kj = k[..., j, :].float()
        factor = torch.eye(K, dtype=torch.float32, device=k.device) - beta[..., j, None, None].float() * (
            kj[..., :, None] * kj[..., None, :]
        )
        A = factor @ A
    if g is not None:
        A = A * g.float().exp()[..., None, None]
    return A
