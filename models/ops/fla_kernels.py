"""fla's Triton kernels on CUDA, called in fla's [B, T, H, D] layout (flash-linear-attention, optional).

Which of them runs (the chunk kernel or the fused recurrent one) is the kernel selector's decision
(models/ops/kernel_select.py); these functions only call the one they are told to:

    fla_delta_rule         fla.ops.delta_rule: chunk_delta_rule / fused_recurrent_delta_rule
    fla_delta_rule_renorm  the same with the state renormalised after every R-th token: one fla call
                           for all segments at once (below), a short loop over segments in torch
    fla_gated_delta_rule   fla.ops.gated_delta_rule: chunk_gated_delta_rule / fused_recurrent_gated_delta_rule
    fla_kda                fla.ops.kda: chunk_kda / fused_recurrent_kda (KDA, a log-decay per key channel)

Every call takes q, k, v and beta in one dtype (fla asserts q, k, v agree and picks its kernel from
q's): `fla_dtype` (models/ops/precision.py) names it, the same rule the kernel selector reads, and o
comes back in the caller's q dtype. States go in and come out fp32.

Renormalisation in one call. The delta rule is linear in (S_0, v): a segment of R tokens run from S_0
gives S_t = P_t S_0 + Z_t and o_t = Z_t^T q'_t + S_0^T (P_t^T q'_t) (q' = scale q), with P_t the
product of its transitions and Z_t the run from zero. Running every segment from zero, side by side in
the batch dimension, with v widened by K zero columns and the initial state [0 | I_K], returns Z_t and
P_t together (the state [Z_t | P_t], the read-out [Z_t^T q' | P_t^T q']). A loop over the T / R
segments then carries S_0 -> renormalise(P_R S_0 + Z_R) with K x K matmuls and adds S_0's read-out:
one fla launch instead of T / R sequential ones, at twice the value width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from deltalens.models.ops.common import renorm_denominator
from deltalens.models.ops.precision import fla_dtype, no_autocast

__all__ = ["fla_kernels_available", "fla_delta_rule", "fla_delta_rule_renorm", "fla_gated_delta_rule", "fla_kda"]


def fla_kernels_available() -> bool:
    """True when fla's Triton delta-rule kernels can run here (CUDA device and fla importable)."""
    if not torch.cuda.is_available():
        return False
    try:
        import fla.ops.delta_rule  # noqa: F401
    except Exception:  # fla is optional at run time; any import failure means "no kernels"
        return False
    return True


FLA_OPERATIONS = ("delta_rule", "gated_delta_rule", "kda")  # the fla entry points deltalens calls


def fla_backend(operation: str) -> str:
    """Which implementation fla's entry points for `operation` (one of FLA_OPERATIONS) would dispatch to
    here: "triton" (fla's own kernels), another registered backend's name (e.g. "flash_qla" for the gated
    delta rule at K = V = 128, "flash_kda"), or "dispatch disabled" under FLA_DISABLE_BACKEND_DISPATCH=1.
    Call-time checks (head size, dtype, allow_neg_eigval) can still send a call back to Triton."""
    if operation not in FLA_OPERATIONS:
        raise ValueError(f"fla_backend: {operation!r} is not one of {', '.join(FLA_OPERATIONS)}.")
    try:  # fla 0.6's registry (private names: another version may differ)
        import fla.backends as backends

        if backends._DISPATCH_DISABLED:
            return "dispatch disabled"
        if operation == "delta_rule":
            return "triton"  # fla 0.6 registers no other backend for the plain delta rule's entry points
        active = backends._load_operation_registry(operation).get_active()
    except Exception as error:  # a fact to report, not a reason to fail
        return f"unknown ({type(error).__name__}: {error})"
    return "triton" if active is None else str(active.backend_type)


def _one_dtype(q, k, v, beta):
    """q, k, v, beta in the dtype the fla call takes (`fla_dtype`)."""
    dtype = fla_dtype(q, k, v)
    return tuple(x.to(dtype) for x in (q, k, v, beta))


def _fp32_state(S):
    return None if S is None else S.float()


def fla_delta_rule(
    q, k, v, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, chunk_size, recurrent=False
):
    """fla's delta rule: the fused recurrent kernel if `recurrent` (its chunk kernel refuses fp32), else the
    chunk kernel (chunk size 16, 32 or 64; anything else runs as 64). o in q's dtype."""
    from fla.ops.delta_rule import chunk_delta_rule as fla_chunk
    from fla.ops.delta_rule import fused_recurrent_delta_rule as fla_recurrent

    out_dtype = q.dtype
    q, k, v, beta = _one_dtype(q, k, v, beta)
    common = dict(
        scale=scale,
        initial_state=_fp32_state(initial_state),
        output_final_state=output_final_state,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
    )
    if recurrent:
        o, S = fla_recurrent(q, k, v, beta, **common)
    else:
        o, S = fla_chunk(q, k, v, beta, chunk_size=chunk_size if chunk_size in (16, 32, 64) else 64, **common)
    return o.to(out_dtype), S


def fla_delta_rule_renorm(
    q,
    k,
    v,
    beta,
    scale,
    initial_state,
    output_final_state,
    use_qk_l2norm_in_kernel,
    chunk_size,
    R: int,
    recurrent=False,
):
    """fla's kernels with the state renormalised after every R-th token: all segments in one call (module
    docstring), then the segment-to-segment carry in torch. o in q's dtype, the final state fp32."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    S = q.new_zeros(B, H, K, V, dtype=torch.float32) if initial_state is None else initial_state.float()
    if T == 0:
        return q.new_zeros(B, 0, H, V), (S if output_final_state else None)
    n = -(-T // R)
    pad = n * R - T  # zero q, k, v, beta: identity steps that read nothing (the last, incomplete segment)

    def segments(x):  # (B, T, H, ...) -> (B * n, R, H, ...)
        x = F.pad(x, (0, 0) * (x.ndim - 2) + (0, pad))
        return x.reshape(B * n, R, *x.shape[2:])

    v_wide = torch.cat([v, v.new_zeros(*v.shape[:-1], K)], dim=-1)  # [v | 0]
    eye = torch.eye(K, dtype=torch.float32, device=q.device).expand(B * n, H, K, K)
    h0 = torch.cat([eye.new_zeros(B * n, H, K, V), eye], dim=-1)  # [0 | I]
    o_wide, S_wide = fla_delta_rule(
        segments(q),
        segments(k),
        segments(v_wide),
        segments(beta),
        scale,
        h0,
        True,
        use_qk_l2norm_in_kernel,
        min(chunk_size, R),
        recurrent=recurrent,
    )
    with no_autocast():  # the carry is the recurrence: fp32
        o_wide = o_wide.float().reshape(B, n, R, H, V + K)
        S_wide = S_wide.float().reshape(B, n, H, K, V + K)
        Z, P = S_wide[..., :V], S_wide[..., V:]  # (B, n, H, K, V), (B, n, H, K, K)
        starts, denominators = [], []
        for i in range(n):
            starts.append(S)
            S = P[:, i] @ S + Z[:, i]
            complete = i < n - 1 or pad == 0
            d = renorm_denominator(S) if complete else S.new_ones(B, H, 1, 1)  # (B, H, 1, 1)
            S = S / d if complete else S
            denominators.append(d)
        S_start = torch.stack(starts, dim=1)  # (B, n, H, K, V)
        o = o_wide[..., :V] + torch.einsum("bnrhk,bnhkv->bnrhv", o_wide[..., V:], S_start)
        # the last token of a complete segment reads the renormalised state
        d = rearrange(torch.stack(denominators, dim=1), "b n h 1 1 -> b n 1 h 1")
        o = torch.cat([o[:, :, :-1], o[:, :, -1:] / d], dim=2)
        o = o.reshape(B, n * R, H, V)[:, :T]
    return o.to(q.dtype), (S if output_final_state else None)


def fla_gated_delta_rule(q, k, v, beta, g, scale, initial_state, output_final_state, recurrent=False):
    """fla's gated delta rule (q, k already normalised): the fused recurrent kernel if `recurrent` (fp32
    inference only: it has no backward), else the chunk kernel. o in q's dtype; g goes in fp32."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_recurrent

    out_dtype = q.dtype
    q, k, v, beta = _one_dtype(q, k, v, beta)
    kernel = fla_recurrent if recurrent else fla_chunk
    o, S = kernel(
        q,
        k,
        v,
        g=g.float(),
        beta=beta,
        scale=scale,
        initial_state=_fp32_state(initial_state),
        output_final_state=output_final_state,
    )
    return o.to(out_dtype), S


def fla_kda(q, k, v, beta, g, scale, initial_state, output_final_state, chunk_size=64, recurrent=False):
    """fla's KDA (q, k already normalised, one head of q and k per value head): the fused recurrent kernel if
    `recurrent` (inference only: it is no autograd Function, a gradient would silently stop), else the chunk
    kernel (chunk size 32 or 64; anything else runs as 64). g is the natural-log decay per key channel
    (B, T, H, K) in fp32: fla's kernels turn it into log2 units themselves (use_gate_in_kernel=False).
    beta goes in as computed, any range ([0, 2] too): fla's allow_neg_eigval only scales an in-kernel
    sigmoid, which is not used here. o in q's dtype."""
    from fla.ops.kda import chunk_kda as fla_chunk
    from fla.ops.kda import fused_recurrent_kda as fla_recurrent

    out_dtype = q.dtype
    q, k, v, beta = _one_dtype(q, k, v, beta)
    common = dict(
        g=g.float(),
        beta=beta,
        scale=scale,
        initial_state=_fp32_state(initial_state),
        output_final_state=output_final_state,
    )
    if recurrent:
        o, S = fla_recurrent(q, k, v, **common)
    else:
        o, S = fla_chunk(q, k, v, chunk_size=chunk_size if chunk_size in (32, 64) else 64, **common)
    return o.to(out_dtype), S
