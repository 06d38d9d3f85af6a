"""What every delta-rule kernel shares: the `StateEdit` callback, input checks and preparation, and the
renormalisation step S <- S / max(||S||_F, eps) of the renormalised delta rule (models/ops/delta_rule.py), and
the two loops the kernels run their own step in: token by token (`scan_tokens`, every reference recurrence) and
chunk by chunk (`scan_chunks`, the KDA, Comba and RWKV-7 chunked kernels).

Tensors in fla's layout: q, k [B, T, H, K], v [B, T, H, V], beta [B, T, H], states [B, H, K, V].
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Optional

import torch

from deltalens.core.errors import DeltalensError

__all__ = [
    "StateEdit",
    "RENORM_EPS",
    "l2_normalize",
    "renormalise_state",
    "renorm_denominator",
    "check_renorm_every",
    "check_shapes",
    "check_state_every",
    "prepare",
    "scan_chunks",
    "scan_tokens",
]

StateEdit = Callable[[int, torch.Tensor], torch.Tensor]
"""`edit(t, S_t) -> S_t`: called after step t with the state [B, H, K, V]; what it returns is S_t."""

RENORM_EPS = 1e-12  # floor of the Frobenius norm in `renormalise_state` (as F.normalize's eps)


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim, in fp32, returned in x's dtype.

    This is fla's `l2norm` (used by `use_qk_l2norm_in_kernel`), not `F.normalize`, which clamps the
    norm at eps instead of adding eps under the square root.
    """
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.square().sum(-1, keepdim=True) + eps)).to(x.dtype)


def _at_least_fp32(S: torch.Tensor) -> torch.Tensor:
    return S if S.dtype in (torch.float32, torch.float64) else S.float()


def renorm_denominator(S: torch.Tensor, eps: float = RENORM_EPS) -> torch.Tensor:
    """max(||S||_F, eps) over the last two dims (in fp32 or fp64), keepdim: shape (..., 1, 1)."""
    return torch.linalg.vector_norm(_at_least_fp32(S), dim=(-2, -1), keepdim=True).clamp_min(eps)


def renormalise_state(S: torch.Tensor, eps: float = RENORM_EPS) -> torch.Tensor:
    """S / max(||S||_F, eps) per matrix: unit Frobenius norm over the last two dims (K, V).

    S is [..., K, V] (e.g. a state [B, H, K, V]); computed in fp32 (fp64 stays fp64) and returned
    in S's dtype. A zero state stays zero; a state with norm below eps is divided by eps instead
    (no inf or NaN; its gradient there is 1 / eps). Differentiable. This is the non-linear step of
    the renormalised delta rule (`renorm_every`).
    """
    return (_at_least_fp32(S) / renorm_denominator(S, eps)).to(S.dtype)


def check_renorm_every(renorm_every) -> int:
    """renorm_every as an int >= 0 (0 = never renormalise), refused otherwise."""
    try:
        value = operator.index(renorm_every) if not isinstance(renorm_every, bool) else -1
    except TypeError:
        value = -1
    if value < 0:
        raise ValueError(
            f"renorm_every must be a non-negative integer (0 = never renormalise the state), got {renorm_every!r}."
        )
    return value


def check_shapes(q, k, v, beta, initial_state) -> None:
    if q.ndim != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must both be [B, T, H, K]; got {tuple(q.shape)} and {tuple(k.shape)}.")
    B, T, H, _ = q.shape
    if v.ndim != 4 or v.shape[:3] != (B, T, H):
        raise ValueError(f"v must be [B, T, H, V] = [{B}, {T}, {H}, V]; got {tuple(v.shape)}.")
    if beta.shape != (B, T, H):
        raise ValueError(
            f"beta must be [B, T, H] = [{B}, {T}, {H}] (one scalar per head and token); got {tuple(beta.shape)}."
        )
    if initial_state is not None and initial_state.shape != (B, H, q.shape[-1], v.shape[-1]):
        raise ValueError(
            f"initial_state must be [B, H, K, V] = [{B}, {H}, {q.shape[-1]}, {v.shape[-1]}]; "
            f"got {tuple(initial_state.shape)}."
        )


def check_state_every(state_every: int, T: int) -> None:
    """Keeping every n-th state needs n >= 1 dividing the sequence length (a DeltaProduct's n_h sub-tokens)."""
    if state_every < 1 or T % state_every:
        raise ValueError(f"state_every must divide the sequence length T = {T}; got {state_every}.")


def prepare(q, k, v, beta, scale, use_qk_l2norm_in_kernel):
    """fp32 copies of the inputs with q already multiplied by scale (default K ** -0.5)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    q, k, v, beta = q.float(), k.float(), v.float(), beta.float()
    if use_qk_l2norm_in_kernel:
        q, k = l2_normalize(q), l2_normalize(k)
    return q * scale, k, v, beta


def scan_tokens(
    step: Callable[[int, torch.Tensor], torch.Tensor],
    read: torch.Tensor,
    initial_state: Optional[torch.Tensor],
    d_v: int,
    edit: Optional[StateEdit],
    out_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The token loop of every reference recurrence: S_t = step(t, S_{t-1}), then S_t = edit(t, S_t) where an edit
    is given, then o_t = S_t^T read_t, with read the scaled query (B, T, H, K) in fp32 and S_0 the initial state
    (fp32) or zeros. Returns (o (B, T, H, d_v) in out_dtype, S_T, every S_t (B, T, H, K, d_v)), fp32 states."""
    B, T, H, K = read.shape
    S = read.new_zeros(B, H, K, d_v, dtype=torch.float32) if initial_state is None else initial_state.float()
    outputs, states = [], []
    for t in range(T):
        S = step(t, S)
        if edit is not None:
            S = _edited(edit(t, S), S, t)
        states.append(S)
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, read[:, t]))  # o_t = S_t^T (scale q_t)
    if T == 0:
        no_o = read.new_zeros(B, 0, H, d_v, dtype=torch.float32).to(out_dtype)
        return no_o, S, read.new_zeros(B, 0, H, K, d_v, dtype=torch.float32)
    return torch.stack(outputs, 1).to(out_dtype), S, torch.stack(states, 1)


def _edited(edited: object, S: torch.Tensor, t: int) -> torch.Tensor:
    """A state_edit's return value as the state S_t, or one sentence: it must be S's shape (no broadcasting)."""
    if isinstance(edited, torch.Tensor) and edited.shape == S.shape:
        return edited.to(S.dtype)
    got = f"shape {tuple(edited.shape)}" if isinstance(edited, torch.Tensor) else type(edited).__name__
    raise DeltalensError(
        f"a state_edit returns the state it is given, edited: a tensor of shape {tuple(S.shape)} (batch, head, d_k, "
        f"d_v); at step {t} it returned {got}"
    )


def scan_chunks(
    step: Callable,
    inputs: tuple[torch.Tensor, ...],
    initial_state: Optional[torch.Tensor],
    d_v: int,
    chunk_size: int,
    with_states: bool,
):
    """Run `step(*pieces, S, with_states) -> (o, S, states or None)` over the chunks of the time axis of `inputs`
    (B, T, H, ...; the first the scaled query (B, T, H, K)), taken heads first (B, H, T, ...) in fp32, S (B, H, K,
    d_v) carried from chunk to chunk from the initial state (or zeros): (o (B, T, H, d_v), the final S, every S_t
    (B, T, H, K, d_v) or None), all fp32. The chunked loop of the KDA, Comba and RWKV-7 kernels."""
    B, _, H, K = inputs[0].shape
    S = inputs[0].new_zeros(B, H, K, d_v, dtype=torch.float32) if initial_state is None else initial_state.float()
    inputs = tuple(x.float().transpose(1, 2) for x in inputs)
    outs, states = [], []
    for start in range(0, inputs[0].shape[2], chunk_size):
        piece = slice(start, start + chunk_size)
        o, S, st = step(*(x[:, :, piece] for x in inputs), S, with_states)
        outs.append(o)
        if st is not None:
            states.append(st)
    o_all = torch.cat(outs, 2).transpose(1, 2) if outs else S.new_zeros(B, 0, H, d_v)
    if not with_states:
        return o_all, S, None
    return o_all, S, torch.cat(states, 2).transpose(1, 2) if states else S.new_zeros(B, 0, H, K, d_v)
