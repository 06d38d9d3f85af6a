"""fla's Triton kernels on CUDA, called in fla's [B, T, H, D] layout (flash-linear-attention, optional).

Which of them runs (the chunk kernel or the fused recurrent one) is the kernel selector's decision
(models/ops/kernel_select.py); these functions only call the one they are told to:

    fla_delta_rule         fla.ops.delta_rule: chunk_delta_rule / fused_recurrent_delta_rule
    fla_delta_rule_renorm  the same one segment of R tokens at a time, renormalising S between segments
    fla_gated_delta_rule   fla.ops.gated_delta_rule: chunk_gated_delta_rule / fused_recurrent_gated_delta_rule
"""

from __future__ import annotations

import torch
from einops import rearrange

from deltalens.models.ops.common import renorm_denominator

__all__ = ["fla_kernels_available", "fla_delta_rule", "fla_delta_rule_renorm", "fla_gated_delta_rule"]


def fla_kernels_available() -> bool:
    """True when fla's Triton delta-rule kernels can run here (CUDA device and fla importable)."""
    if not torch.cuda.is_available():
        return False
    try:
        import fla.ops.delta_rule  # noqa: F401
    except Exception:  # fla is optional at run time; any import failure means "no kernels"
        return False
    return True


def fla_delta_rule(
    q, k, v, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, chunk_size, recurrent=False
):
    """fla's delta rule: the fused recurrent kernel if `recurrent` (its chunk kernel refuses fp32), else the
    chunk kernel (chunk size 16, 32 or 64; anything else runs as 64)."""
    from fla.ops.delta_rule import chunk_delta_rule as fla_chunk
    from fla.ops.delta_rule import fused_recurrent_delta_rule as fla_recurrent

    common = dict(
        scale=scale,
        initial_state=initial_state,
        output_final_state=output_final_state,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
    )
    if recurrent:
        return fla_recurrent(q, k, v, beta.to(q.dtype), **common)
    return fla_chunk(q, k, v, beta.to(q.dtype), chunk_size=chunk_size if chunk_size in (16, 32, 64) else 64, **common)


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
    """fla's kernels one segment of R tokens at a time, renormalising the state between segments."""
    B, T, H, _ = q.shape
    S = initial_state
    outputs = []
    for start in range(0, T, R):
        stop = min(start + R, T)
        o_seg, S = fla_delta_rule(
            *(x[:, start:stop].contiguous() for x in (q, k, v, beta)),
            scale,
            S,
            True,
            use_qk_l2norm_in_kernel,
            min(chunk_size, R),
            recurrent=recurrent,
        )
        if stop - start == R:  # a complete segment: renormalise; its last token reads the result
            d = renorm_denominator(S)  # (B, H, 1, 1)
            S = S.float() / d
            last = (o_seg[:, -1:].float() / rearrange(d, "b h 1 1 -> b 1 h 1")).to(o_seg.dtype)
            o_seg = torch.cat([o_seg[:, :-1], last], dim=1)
        outputs.append(o_seg)
    o = torch.cat(outputs, dim=1) if outputs else q.new_zeros(*q.shape[:3], v.shape[-1])
    if output_final_state and S is None:  # T == 0 and no initial state
        S = q.new_zeros(B, H, q.shape[-1], v.shape[-1], dtype=torch.float32)
    return o, (S if output_final_state else None)


def fla_gated_delta_rule(q, k, v, beta, g, scale, initial_state, output_final_state, recurrent=False):
    """fla's gated delta rule (q, k already normalised): the fused recurrent kernel if `recurrent` (fp32
    inference only: it has no backward), else the chunk kernel."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_recurrent

    kernel = fla_recurrent if recurrent else fla_chunk
    return kernel(
        q,
        k,
        v,
        g=g.float(),
        beta=beta.to(q.dtype),
        scale=scale,
        initial_state=initial_state,
        output_final_state=output_final_state,
    )
