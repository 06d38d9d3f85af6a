"""S_t at chosen (batch, position) rows only, rebuilt from a chunked forward's chunk-start states and WY factors.

A chunked delta-rule forward (ours, or fla's chunk kernels on CUDA: models/ops/fla_state_rows.py) keeps,
for every chunk of C tokens, the state before the chunk S_0 = h[n] and the chunk's WY factors w, u:

    A W = diag(beta exp(G)) K,   A U = diag(beta) V,   A = I + strict_tril(diag(beta) (K K^T * D))

with G the chunk-local cumulative log-decay (G_t = g_1 + ... + g_t inside the chunk; 0 without a gate)
and D_ts = exp(G_t - G_s) for s <= t. A is unit lower-triangular, so rows <= i of W and U depend on the
chunk's tokens <= i only, and row s of U - W S_0 is u_s, the value token s actually wrote. The state
after the chunk's i-th token is therefore

    S_i = exp(G_i) S_0 + sum_{s <= i} exp(G_i - G_s) k_s (u_s - w_s^T S_0)^T

(models/ops/gated_delta_rule.py's chunked form, cut at row i). `rebuild_state_rows` evaluates this for
the kept rows only, all at once (batched gathers and one contraction over the chunk; no loop over
tokens), so no [B, T, H, K, V] tensor exists: a kept row costs O(C H (K + V) + C H K V) multiply-adds.
It is exact in fp32 against the token-by-token recurrence (tests/models/test_state_rows_rebuild.py); with
fla's factors (stored in the inputs' dtype, bf16) it reproduces the states fla's own o was read from.

`chunk_state_factors` is our chunked WY form's h, w, u and G, in fp32 torch, in fla's layout: the
factors where fla's chunk kernels do not serve (fp32 on CUDA, where fla's fused recurrent kernel gives
o) and the reference the rebuild is tested with.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from einops import rearrange

from deltalens.models.ops.precision import no_autocast

__all__ = ["rebuild_state_rows", "chunk_state_factors"]

ROW_BLOCK_ELEMENTS = 1 << 25  # fp32 elements gathered per block of kept rows (128 MiB): bounds the memory


def rebuild_state_rows(
    k: torch.Tensor,
    w: torch.Tensor,
    u: torch.Tensor,
    h: torch.Tensor,
    rows: tuple[torch.Tensor, torch.Tensor],
    chunk_size: int,
    G: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """S_t at rows (b, t) from the chunk-start states and the WY factors (module docstring).

    k, w [B, T, H, K]; u [B, T, H, V]; h [B, N, H, K, V], N = ceil(T / chunk_size), h[:, n] the state
    before chunk n; G [B, T, H] the chunk-local cumulative natural-log decay, or None (no gate); rows: two
    integer tensors of length n. Returns [n, H, K, V] fp32.
    """
    B, T, H, K = k.shape
    V = u.shape[-1]
    C = chunk_size
    N = h.shape[1]
    if N * C < T or h.shape != (B, N, H, K, V):
        want = [B, -(-T // C), H, K, V]
        raise ValueError(f"h must be [B, ceil(T / {C}), H, K, V] = {want}; got {list(h.shape)}.")
    b, t = (torch.as_tensor(x, device=k.device).long().reshape(-1) for x in rows)
    if b.numel() != t.numel():
        raise ValueError(f"rows must be two index tensors of one length; got {b.numel()} and {t.numel()}.")
    if b.numel() and (int(b.min()) < 0 or int(b.max()) >= B or int(t.min()) < 0 or int(t.max()) >= T):
        raise ValueError(f"rows must name batch entries in [0, {B}) and positions in [0, {T}).")
    pad = N * C - T
    with no_autocast():
        kc, wc, uc = (_chunked(x, pad, C) for x in (k, w, u))  # (B, N, C, H, D)
        Gc = None if G is None else rearrange(F.pad(G.float(), (0, 0, 0, pad)), "b (n c) h -> b n c h", c=C)
        out = kc.new_empty(b.numel(), H, K, V)
        block = max(1, ROW_BLOCK_ELEMENTS // (C * H * (2 * K + 2 * V) + H * K * V))
        for lo in range(0, b.numel(), block):  # blocks of kept rows, each all at once
            sl = slice(lo, lo + block)
            out[sl] = _rows_block(kc, wc, uc, Gc, h, b[sl], t[sl], C)
    return out


def _chunked(x: torch.Tensor, pad: int, C: int) -> torch.Tensor:
    return rearrange(F.pad(x.float(), (0, 0, 0, 0, 0, pad)), "b (n c) h d -> b n c h d", c=C)


def _rows_block(kc, wc, uc, Gc, h, b, t, C: int) -> torch.Tensor:
    """`rebuild_state_rows` for one block of rows: chunked inputs [B, N, C, H, D], G [B, N, C, H] or None."""
    chunk, i = t // C, t % C
    S0 = h[b, chunk].float()  # (m, H, K, V): the state before each row's chunk
    k_rows = kc[b, chunk]  # (m, C, H, K): the row's chunk
    written = uc[b, chunk] - torch.einsum("mchk,mhkv->mchv", wc[b, chunk], S0)  # u_s = U - W S_0, (m, C, H, V)
    upto = torch.arange(C, device=t.device)[None, :] <= i[:, None]  # (m, C): tokens s <= i of the chunk
    if Gc is None:
        weight = upto.to(k_rows.dtype)[..., None]  # (m, C, 1)
        start = S0
    else:
        Gw = Gc[b, chunk]  # (m, C, H)
        G_i = Gw.gather(1, i[:, None, None].expand(-1, 1, Gw.shape[-1]))  # (m, 1, H)
        weight = (G_i - Gw).masked_fill(~upto[..., None], float("-inf")).exp()  # exp(G_i - G_s), 0 past i
        start = S0 * G_i[:, 0, :, None, None].exp()
    return start + torch.einsum("mchk,mchv->mhkv", k_rows * weight[..., None], written)


def chunk_state_factors(
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: Optional[torch.Tensor] = None,
    initial_state: Optional[torch.Tensor] = None,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
    """Our chunked WY form's pieces, in fp32 and fla's layout (module docstring).

    k [B, T, H, K] (normalised), v [B, T, H, V], beta [B, T, H], g [B, T, H] log-decay or None,
    initial_state [B, H, K, V] or None. Returns (h [B, N, H, K, V] the state before each chunk,
    w [B, T, H, K], u [B, T, H, V], G [B, T, H] chunk-local cumulative log-decay or None, S_T).
    The only loop is the chunk-to-chunk carry (N = ceil(T / chunk_size) steps).
    """
    B, T, H, K = k.shape
    V = v.shape[-1]
    C = chunk_size
    N = -(-T // C)
    pad = N * C - T  # zero keys, beta and log-decay: identity steps
    with no_autocast():
        kc, vc = (rearrange(F.pad(x.float(), (0, 0, 0, 0, 0, pad)), "b (n c) h d -> b h n c d", c=C) for x in (k, v))
        bc = rearrange(F.pad(beta.float(), (0, 0, 0, pad)), "b (n c) h -> b h n c 1", c=C)
        KKt = (kc * bc) @ kc.transpose(-1, -2)  # (B, H, N, C, C)
        G = None
        k_w = kc * bc
        if g is not None:
            G = rearrange(F.pad(g.float(), (0, 0, 0, pad)), "b (n c) h -> b h n c", c=C).cumsum(-1)
            causal = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
            KKt = KKt * (G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf")).exp()
            k_w = k_w * G[..., None].exp()
        A = torch.tril(KKt, diagonal=-1)
        rhs = torch.cat([vc * bc, k_w], dim=-1)
        u, w = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True).split([V, K], dim=-1)
        k_end = kc if G is None else kc * (G[..., -1:] - G)[..., None].exp()  # k_s exp(G_C - G_s)
        decay = None if G is None else G[..., -1, None, None].exp()  # (B, H, N, 1, 1)
        S = k.new_zeros(B, H, K, V, dtype=torch.float32) if initial_state is None else initial_state.float()
        starts = []
        for n in range(N):  # the chunk-to-chunk carry: S <- exp(G_C) S + K_end^T (U - W S)
            starts.append(S)
            written = u[:, :, n] - w[:, :, n] @ S
            S = (S if decay is None else decay[:, :, n] * S) + k_end[:, :, n].transpose(-1, -2) @ written
        h = torch.stack(starts, dim=1)  # (B, N, H, K, V)
        w_, u_ = (rearrange(x, "b h n c d -> b (n c) h d")[:, :T] for x in (w, u))
        G_ = None if G is None else rearrange(G, "b h n c -> b (n c) h")[:, :T]
    return h, w_, u_, G_, S
