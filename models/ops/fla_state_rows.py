"""The CUDA capture of S_t at kept rows: fla's forward for o, the kept rows rebuilt from its chunk states.

fla's `chunk_delta_rule` / `chunk_gated_delta_rule` return o and the final state only, but their chunk
forward computes, on the way, exactly what `rebuild_state_rows` (models/ops/state_rows.py) needs: the
WY factors w, u of every chunk and h, the state before every chunk. `fla_state_rows` runs that forward
piece by piece, as fla's own forward does (fla 0.6):

    plain delta rule   w, u = prepare_wy_repr_fwd(k, v, beta)
    gated              G = chunk_local_cumsum(g) / ln 2;  w, u = chunk_gated_delta_rule_fwd_intra(k, v, G, beta)
    both               h, v_new, S_T = chunk_gated_delta_rule_fwd_h(k, w, u, G);  o = chunk_fwd_o(q, k, v_new, h, G)

with the arguments fla's entry points pass, so o is the plain forward's (the same kernels on the same
inputs), and then rebuilds S_t at the kept rows from k, w, u, h and G (fla keeps G in log2 units and h,
w, u in the inputs' dtype: the states o was read from). One forward, no per-token loop, no
[B, T, H, K, V] tensor. fla's gated entry point may dispatch to another backend (FlashQLA at K = V = 128,
`fla_kernels.fla_backend` says which would serve); the pieces are always fla's Triton kernels.

Where fla's fused recurrent kernel serves o (fp32: the chunk kernels refuse it), o comes from that kernel
and the factors from our chunked fp32 torch form (`chunk_state_factors`). No gradient flows through
either path (the kernel selector sends captures that want one elsewhere).
"""

from __future__ import annotations

import contextlib
import math
from typing import Optional

import torch

from deltalens.models.ops.common import l2_normalize
from deltalens.models.ops.fla_kernels import fla_delta_rule, fla_gated_delta_rule
from deltalens.models.ops.precision import fla_dtype
from deltalens.models.ops.state_rows import chunk_state_factors, rebuild_state_rows

__all__ = ["fla_state_rows", "fla_chunk_pieces", "FLA_CHUNK_SIZES"]

FLA_CHUNK_SIZES = (16, 32, 64)  # what fla's chunk kernels take; anything else runs as 64 (as fla_delta_rule)


def fla_state_rows(
    q, k, v, beta, g, scale, initial_state, output_final_state: bool, chunk_size: int, rows, state_every: int = 1,
    use_qk_l2norm: bool = False,
) -> tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor]:  # fmt: skip
    """(o in q's dtype, S_T fp32 or None, S_t at rows (b, t) [n, H, K, V] fp32) on fla (module docstring).

    q, k [B, T, H, K], v [B, T, H, V], beta [B, T, H], g [B, T, H] log-decay or None; scale None =
    K ** -0.5; chunk_size: the plain delta rule's (16, 32 or 64, else 64; the gated rule runs fla's 64).
    state_every = n: step t of rows is the state after step n t + n - 1 (a DeltaProduct's n sub-tokens).
    """
    if rows is None:
        raise ValueError("the fla_rows path keeps some rows' states only: pass rows = (batch, step) indices.")
    b, t = (torch.as_tensor(x, device=q.device).long() for x in rows)
    rows = (b, t * state_every + state_every - 1)
    if use_qk_l2norm:  # fla would normalise inside its kernel; the rebuild needs the keys it used
        q, k = l2_normalize(q), l2_normalize(k)
    if fla_dtype(q, k, v) == torch.float32:  # fla's fused recurrent kernel gives o
        args = (q, k, v, beta)
        if g is None:
            o, S = fla_delta_rule(*args, scale, initial_state, output_final_state, False, chunk_size, recurrent=True)
        else:
            o, S = fla_gated_delta_rule(*args, g, scale, initial_state, output_final_state, recurrent=True)
        h, w, u, G, _ = chunk_state_factors(k, v, beta, g, initial_state, chunk_size)
        return o, S, rebuild_state_rows(k, w, u, h, rows, chunk_size, G)
    C = 64 if g is not None or chunk_size not in FLA_CHUNK_SIZES else chunk_size
    o, S, (k_used, w, u, h, G) = fla_chunk_pieces(q, k, v, beta, g, scale, initial_state, output_final_state, C)
    return o.to(q.dtype), S, rebuild_state_rows(k_used, w, u, h, rows, C, G)


def fla_chunk_pieces(q, k, v, beta, g, scale, initial_state, output_final_state: bool, chunk_size: int):
    """fla's chunk forward piece by piece (module docstring): (o in the call's dtype, S_T or None,
    (k, w, u, h, G)) with G the chunk-local cumulative log-decay in natural-log units, or None."""
    from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_fwd_h
    from fla.ops.common.chunk_o import chunk_fwd_o

    dtype = fla_dtype(q, k, v)  # one dtype for q, k, v and beta, as every fla call here takes them
    q, k, v, beta = (x.to(dtype).contiguous() for x in (q, k, v, beta))
    h0 = None if initial_state is None else initial_state.float().contiguous()
    C = chunk_size
    with _on_device(q):
        if g is None:
            from fla.ops.delta_rule.wy_fast import prepare_wy_repr_fwd

            w, u, _ = prepare_wy_repr_fwd(k=k, v=v, beta=beta, cu_seqlens=None, chunk_size=C)
            g_log2 = None
        else:
            from fla.ops.gated_delta_rule.chunk_fwd import chunk_gated_delta_rule_fwd_intra
            from fla.ops.utils import chunk_local_cumsum

            g_log2 = chunk_local_cumsum(g.float().contiguous(), chunk_size=C, scale=1 / math.log(2), cu_seqlens=None)
            w, u, _ = chunk_gated_delta_rule_fwd_intra(k=k, v=v, g=g_log2, beta=beta, cu_seqlens=None, chunk_size=C)
        h, v_new, S = chunk_gated_delta_rule_fwd_h(
            k=k, w=w, u=u, g=g_log2, initial_state=h0, output_final_state=output_final_state, cu_seqlens=None,
            chunk_size=C,
        )  # fmt: skip
        o = chunk_fwd_o(q=q, k=k, v=v_new, h=h, g=g_log2, scale=scale, cu_seqlens=None, chunk_size=C)
    G = None if g_log2 is None else g_log2 * math.log(2)
    return o, S, (k, w, u, h, G)


def _on_device(x: torch.Tensor):
    """fla's kernels launch on the current CUDA device: make it x's (fla's input_guard does the same)."""
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()
