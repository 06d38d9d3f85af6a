"""The delta rule's chunked (WY/UT) pure-torch kernel: a triangular solve per chunk, a loop over chunks.

Tokens are cut into chunks of C; inside a chunk the C updates fold into one triangular solve (the
WY/UT form, DeltaNet paper sec. 3, arXiv 2406.06484), across chunks a short Python loop carries S
(T / C steps). Differentiable. Notation as models/ops/delta_rule.py. For one chunk with starting
state S_0 and rows t = 1..C:

    u_t = beta_t (v_t - S_0^T k_t - sum_{s<t} (k_s . k_t) u_s)
=>  (I + strict_tril(diag(beta) K K^T)) U = diag(beta) V - diag(beta) K S_0
=>  U = U0 - W S_0     with  A U0 = diag(beta) V,  A W = diag(beta) K,  A = I + strict_tril(...)
    O = Q S_0 + tril(Q K^T) U            (tril includes the diagonal: o_t reads S_t, not S_{t-1})
    S_C = S_0 + K^T U = S_0 + K^T U0 - (K^T W) S_0

With renorm_every = R > 0 the sequence runs as segments of R tokens (chunk size min(chunk_size, R),
chunks never straddling a segment boundary), the carried state renormalised between segments.
Every S_t, when asked for, comes vectorised per chunk (S_t = S_chunk_start + cumsum of k_s u_s^T).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from einops import rearrange

from deltalens.models.ops.common import renorm_denominator

__all__ = ["chunk_forward"]


def chunk_forward(
    q, k, v, beta, initial_state, chunk_size: int, with_states: bool, renorm_every: int = 0, phase: int = 0
):
    """Chunked delta rule on prepared fp32 inputs (q already scaled). See the module docstring.

    renorm_every > 0 renormalises the state after every renorm_every-th token; `phase` says how many
    tokens of the first renormalisation segment came before q[:, 0] (0 <= phase < renorm_every),
    so that token i here is token phase + i of the segment grid.

    Returns (o [B, T, H, V], final_state [B, H, K, V], states [B, T, H, K, V] or None).
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    S = q.new_zeros(B, H, K, V) if initial_state is None else initial_state.float()
    if T == 0:
        return v.new_zeros(B, 0, H, V), S, (v.new_zeros(B, 0, H, K, V) if with_states else None)
    if renorm_every:
        return _chunk_forward_renorm(q, k, v, beta, S, chunk_size, with_states, renorm_every, phase)
    C = min(chunk_size, T)  # a short sequence is one chunk, not one padded to chunk_size
    pad = (-T) % C
    if pad:
        # Zero keys and zero beta make the padded steps the identity on S: u = 0, S unchanged.
        q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
        beta = F.pad(beta, (0, 0, 0, pad))
    o, S, states = _chunk_core(q, k, v, beta, S, C, with_states)
    return o[:, :T], S, (states[:, :T] if with_states else None)


def _chunk_core(q, k, v, beta, S, C: int, with_states: bool, renorm_after: Optional[list] = None):
    """The chunked WY/UT kernel on a length that is a multiple of C, from state S.

    renorm_after[n] True renormalises the carried state after chunk n; the last position of such a
    chunk then reads (and, with states, shows) the renormalised state.
    Returns (o [B, L, H, V], final_state [B, H, K, V], states [B, L, H, K, V] or None).
    """
    B, L, H, K = q.shape
    V = v.shape[-1]
    N = L // C

    qc, kc, vc = (rearrange(x, "b (n c) h d -> b h n c d", c=C) for x in (q, k, v))  # (B, H, N, C, D)
    bc = rearrange(beta, "b (n c) h -> b h n c 1", c=C)  # (B, H, N, C, 1)
    k_beta, v_beta = kc * bc, vc * bc

    # A = I + strict_tril(diag(beta) K K^T); unitriangular=True supplies the unit diagonal.
    A = torch.tril(k_beta @ kc.transpose(-1, -2), diagonal=-1)  # (B, H, N, C, C)
    X = torch.linalg.solve_triangular(A, torch.cat([v_beta, k_beta], dim=-1), upper=False, unitriangular=True)
    U0, W = X.split([V, K], dim=-1)  # (B, H, N, C, V), (B, H, N, C, K)

    # Chunk-to-chunk carry: S_{n+1} = S_n + K_n^T U0_n - (K_n^T W_n) S_n. Only this loop is sequential.
    kt = kc.transpose(-1, -2)  # (B, H, N, K, C)
    KtU0 = kt @ U0  # (B, H, N, K, V)
    KtW = kt @ W  # (B, H, N, K, K)
    starts, denominators = [], []
    for n in range(N):
        starts.append(S)
        S = S + KtU0[:, :, n] - KtW[:, :, n] @ S
        if renorm_after is not None:
            d = renorm_denominator(S) if renorm_after[n] else S.new_ones(B, H, 1, 1)  # (B, H, 1, 1)
            S = S / d if renorm_after[n] else S
            denominators.append(d)
    S_start = torch.stack(starts, dim=2)  # (B, H, N, K, V): state before each chunk

    U = U0 - W @ S_start  # (B, H, N, C, V): the values actually written, u_t
    attn = torch.tril(qc @ kc.transpose(-1, -2))  # (B, H, N, C, C), diagonal kept
    o = qc @ S_start + attn @ U  # (B, H, N, C, V)
    if renorm_after is not None:
        # The last token of a renormalised chunk reads S_t after the renormalisation: o_t / d.
        d = torch.stack(denominators, dim=2)  # (B, H, N, 1, 1)
        o = torch.cat([o[:, :, :, : C - 1], o[:, :, :, C - 1 :] / d], dim=3)
    o = rearrange(o, "b h n c d -> b (n c) h d")

    states = None
    if with_states:
        k_n = rearrange(kc, "b h n c d -> b n c h d")
        u_n = rearrange(U, "b h n c d -> b n c h d")
        S_n = rearrange(S_start, "b h n k v -> b n h k v")
        states = _chunk_prefix_states(k_n, u_n, S_n)  # (B, N, C, H, K, V)
        if renorm_after is not None:
            d_n = rearrange(d, "b h n 1 1 -> b n 1 h 1 1")
            states = torch.cat([states[:, :, : C - 1], states[:, :, C - 1 :] / d_n], dim=2)
        states = states.reshape(B, N * C, H, K, V)
    return o, S, states


def _chunk_forward_renorm(q, k, v, beta, S, chunk_size: int, with_states: bool, R: int, phase: int):
    """`chunk_forward` with renormalisation after every R-th token (T > 0, S already fp32).

    Layout: `phase` identity steps are put in front, so that the renormalisation points fall at the
    ends of segments of R steps. Each complete segment is front-padded with identity steps (zero
    q, k, v and beta: u = 0, S unchanged) to a multiple of C = min(chunk_size, R), so its last token
    ends a chunk and the state is renormalised in the chunk-to-chunk carry; the incomplete last
    segment (if any) is end-padded to a multiple of C and not renormalised. One kernel call.
    """
    B, T, H, K = q.shape
    C = min(chunk_size, R)
    L_seg = -(-R // C) * C  # segment length after padding: a multiple of C
    front = L_seg - R
    total = phase + T
    n_full = total // R
    tail = total - n_full * R

    def layout(x: torch.Tensor) -> torch.Tensor:  # (B, T, ...) -> (B, n_full * L_seg + tail padded, ...)
        extra = (0, 0) * (x.ndim - 2)
        x = F.pad(x, (*extra, phase, 0))
        pieces = []
        if n_full:
            full = x[:, : n_full * R].unflatten(1, (n_full, R))  # (B, n_full, R, ...)
            full = F.pad(full, (*extra, front, 0))  # (B, n_full, L_seg, ...)
            pieces.append(full.flatten(1, 2))
        if tail:
            pieces.append(F.pad(x[:, n_full * R :], (*extra, 0, (-tail) % C)))
        return torch.cat(pieces, dim=1) if len(pieces) > 1 else pieces[0]

    def unlayout(x: torch.Tensor) -> torch.Tensor:  # inverse of layout, dropping the padding
        pieces = []
        if n_full:
            full = x[:, : n_full * L_seg].unflatten(1, (n_full, L_seg))[:, :, front:]
            pieces.append(full.flatten(1, 2))
        if tail:
            pieces.append(x[:, n_full * L_seg : n_full * L_seg + tail])
        x = torch.cat(pieces, dim=1) if len(pieces) > 1 else pieces[0]
        return x[:, phase:]

    per_seg = L_seg // C
    renorm_after = [(n + 1) % per_seg == 0 for n in range(n_full * per_seg)]
    renorm_after += [False] * (-(-tail // C))
    o, S, states = _chunk_core(
        layout(q), layout(k), layout(v), layout(beta), S, C, with_states, renorm_after=renorm_after
    )
    return unlayout(o), S, (unlayout(states) if with_states else None)


def _chunk_prefix_states(k_n: torch.Tensor, u_n: torch.Tensor, S_start: torch.Tensor) -> torch.Tensor:
    """S_t = S_start + sum_{s <= t} k_s u_s^T for every position t of every chunk.

    k_n (B, N, C, H, K), u_n (B, N, C, H, V), S_start (B, N, H, K, V) -> (B, N, C, H, K, V), laid out
    so that merging (N, C) into T is a view. Every operation covers all N chunks at once.
    """
    B, N, C, H, K = k_n.shape
    V = u_n.shape[-1]
    if torch.is_grad_enabled() and any(t.requires_grad for t in (k_n, u_n, S_start)):
        # Differentiable: all outer products, then the within-chunk prefix sum as one matmul with
        # a lower-triangular ones matrix (torch.cumsum over a middle dim is ~10x slower on CPU).
        outer = torch.einsum("bnchk,bnchv->bnchkv", k_n, u_n)  # (B, N, C, H, K, V)
        outer[:, :, 0] += S_start
        ones_tril = torch.ones(C, C, dtype=outer.dtype, device=outer.device).tril()
        return (ones_tril @ outer.reshape(B, N, C, H * K * V)).reshape(B, N, C, H, K, V)
    # Inference: write each position's state once, S_c = S_{c-1} + k_c u_c^T, as fused
    # multiply-adds straight into the output (C steps, each over all chunks, batch and heads).
    states = k_n.new_empty(B, N, C, H, K, V)
    prev = S_start
    for c in range(C):
        torch.addcmul(prev, k_n[:, :, c, :, :, None], u_n[:, :, c, :, None, :], out=states[:, :, c])
        prev = states[:, :, c]
    return states
