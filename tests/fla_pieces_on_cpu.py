"""fla's chunk-forward pieces (the Triton functions models/ops/fla_state_rows.py calls) as torch stand-ins,
for the emulated-CUDA tests of the fla_rows path (tests/models/test_emulated_cuda_rows.py).

Each stand-in takes fla 0.6's arguments and returns what fla's function returns, in fla's layout and
dtypes, written from fla's math (independently of deltalens's own chunked code):

    chunk_local_cumsum(g, chunk_size, scale)       the chunk-local cumulative sum of g, times scale, fp32
    prepare_wy_repr_fwd(k, v, beta, chunk_size)     w, u, A: A = (I + strict_tril(diag(beta) K K^T))^-1,
                                                    w = A diag(beta) K, u = A diag(beta) V (k's dtype)
    chunk_gated_delta_rule_fwd_intra(k, v, g, beta) the same with the decay: D_ts = 2^(g_t - g_s) in
                                                    K K^T, w = A diag(beta 2^g) K (g in log2 units)
    chunk_gated_delta_rule_fwd_h(k, w, u, g, h0)    h (the state before each chunk, k's dtype), v_new =
                                                    u - w h (u's dtype), the final state (fp32)
    chunk_fwd_o(q, k, v, h, g, scale)               o = scale (q h 2^g + (tril(q k^T) * D) v_new), v's dtype
"""

import contextlib
from unittest import mock

import torch
from einops import rearrange


class PieceCalls(list):
    """The stand-in calls made: (name, dtype of the first tensor argument)."""

    def names(self):
        return [name for name, _ in self]


def _chunks(x, C):  # [B, T, H, ...] -> [B, H, N, C, ...] (T a multiple of C after padding)
    T = x.shape[1]
    pad = (-T) % C
    if pad:
        x = torch.cat([x, x.new_zeros(x.shape[0], pad, *x.shape[2:])], dim=1)
    if x.ndim == 3:
        return rearrange(x, "b (n c) h -> b h n c", c=C)
    return rearrange(x, "b (n c) h d -> b h n c d", c=C)


def _unchunk(x, T):
    if x.ndim == 4:
        return rearrange(x, "b h n c -> b (n c) h")[:, :T]
    return rearrange(x, "b h n c d -> b (n c) h d")[:, :T]


def _cumulative(g, C):  # chunk-local cumulative g [B, T, H] -> [B, H, N, C], padded with the last value
    pad = (-g.shape[1]) % C  # (fla's kernels read the last real token's value; padding steps decay nothing)
    g = torch.cat([g.float(), g[:, -1:].float().expand(-1, pad, -1)], dim=1) if pad else g.float()
    return _chunks(g, C)


def _decay(g, C):  # g [B, T, H] chunk-local cumulative (log2) -> D [B, H, N, C, C] = 2^(g_t - g_s), s <= t
    G = _cumulative(g, C)
    causal = torch.ones(C, C, dtype=torch.bool).tril()
    return (G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf")).exp2(), G


def _wy(k, v, beta, g, C):
    kc, vc, bc = _chunks(k.float(), C), _chunks(v.float(), C), _chunks(beta.float(), C)[..., None]
    KKt = (kc * bc) @ kc.transpose(-1, -2)
    k_w = kc * bc
    if g is not None:
        D, G = _decay(g, C)
        KKt, k_w = KKt * D, k_w * G[..., None].exp2()
    A = torch.linalg.inv(torch.eye(C) + KKt.tril(-1))
    T = k.shape[1]
    w, u = _unchunk(A @ k_w, T).to(k.dtype), _unchunk(A @ (vc * bc), T).to(k.dtype)
    return w, u, rearrange(A, "b h n c d -> b (n c) h d")[:, :T].to(k.dtype)


@contextlib.contextmanager
def fla_pieces_on_cpu():
    """The five pieces replaced by their stand-ins for the block; yields the list of calls made."""
    import fla.ops.common.chunk_delta_h as chunk_delta_h
    import fla.ops.common.chunk_o as chunk_o
    import fla.ops.delta_rule.wy_fast as wy_fast
    import fla.ops.gated_delta_rule.chunk_fwd as chunk_fwd
    import fla.ops.utils as fla_utils

    calls = PieceCalls()

    def chunk_local_cumsum(g, chunk_size, reverse=False, scale=None, cu_seqlens=None, **kwargs):
        assert not reverse and cu_seqlens is None and g.ndim == 3
        calls.append(("chunk_local_cumsum", g.dtype))
        out = _unchunk(_chunks(g.float(), chunk_size).cumsum(-1), g.shape[1])
        return out * (1.0 if scale is None else scale)

    def prepare_wy_repr_fwd(k, v, beta, cu_seqlens, chunk_indices=None, chunk_size=64):
        assert cu_seqlens is None and k.dtype == v.dtype and chunk_size in (16, 32, 64)
        calls.append(("prepare_wy_repr_fwd", k.dtype))
        return _wy(k, v, beta, None, chunk_size)

    def chunk_gated_delta_rule_fwd_intra(k, v, g=None, beta=None, cu_seqlens=None, chunk_size=64, **kwargs):
        assert cu_seqlens is None and g.dtype == torch.float32 and chunk_size in (16, 32, 64)
        calls.append(("chunk_gated_delta_rule_fwd_intra", k.dtype))
        return _wy(k, v, beta, g, chunk_size)

    def chunk_gated_delta_rule_fwd_h(k, w, u, g=None, gk=None, initial_state=None, output_final_state=False,
                                     chunk_size=64, save_new_value=True, cu_seqlens=None, **kwargs):  # fmt: skip
        assert cu_seqlens is None and gk is None
        calls.append(("chunk_gated_delta_rule_fwd_h", k.dtype))
        B, T, H, K = k.shape
        C, V = chunk_size, u.shape[-1]
        kc, wc, uc = (_chunks(x.float(), C) for x in (k, w, u))
        G = None if g is None else _cumulative(g, C)
        S = k.new_zeros(B, H, K, V, dtype=torch.float32) if initial_state is None else initial_state.float()
        starts, written = [], []
        for n in range(kc.shape[2]):
            S_stored = S.to(k.dtype)  # fla stores h in k's dtype and reads it back for v_new
            starts.append(S_stored)
            v_new = uc[:, :, n] - wc[:, :, n] @ S_stored.float()
            written.append(v_new)
            k_end = kc[:, :, n] if G is None else kc[:, :, n] * (G[:, :, n, -1:] - G[:, :, n]).exp2()[..., None]
            S = (S if G is None else S * G[:, :, n, -1, None, None].exp2()) + k_end.transpose(-1, -2) @ v_new
        h = torch.stack(starts, dim=1)  # (B, N, H, K, V)
        v_new = _unchunk(torch.stack(written, dim=2), T).to(u.dtype)
        return h, v_new, (S if output_final_state else None)

    def chunk_fwd_o(q, k, v, h, g=None, g_gamma=None, scale=None, cu_seqlens=None, chunk_size=64, **kwargs):
        assert cu_seqlens is None and g_gamma is None
        calls.append(("chunk_fwd_o", q.dtype))
        C, T = chunk_size, q.shape[1]
        scale = k.shape[-1] ** -0.5 if scale is None else scale
        qc, kc, vc = (_chunks(x.float(), C) for x in (q, k, v))
        S0 = rearrange(h.float(), "b n h k v -> b h n k v")
        inter, attn = qc @ S0, (qc @ kc.transpose(-1, -2)).tril()
        if g is not None:
            D, G = _decay(g, C)
            inter, attn = inter * G[..., None].exp2(), attn * D
        return (_unchunk(inter + attn @ vc, T) * scale).to(v.dtype)

    with contextlib.ExitStack() as stack:
        for module, function in (
            (fla_utils, chunk_local_cumsum),
            (wy_fast, prepare_wy_repr_fwd),
            (chunk_fwd, chunk_gated_delta_rule_fwd_intra),
            (chunk_delta_h, chunk_gated_delta_rule_fwd_h),
            (chunk_o, chunk_fwd_o),
        ):
            stack.enter_context(mock.patch.object(module, function.__name__, function))
        yield calls
