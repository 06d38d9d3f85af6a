"""The value-gated delta rule: a readable recurrence, and its fast paths through the gated delta rule's.

A DeltaNet whose state is also multiplied on the *value* side by an input-dependent gate (deltalens's
own family, for the PFSA-SR drain question: can a linear recurrence apply a reveal's constraint to the
value's column?). One head, the state in fla's [K, V] layout:

    g[:, t]     g_t = log gamma_t <= 0  (B, T, H, V)   log of the value gate gamma_t in (0, 1]^V
    S           S_t                     (K, V)

    S_t = (I - beta_t k_t k_t^T) S_{t-1} Diag(gamma_t) + beta_t k_t v_t^T,     o_t = S_t^T (scale q_t)

still linear in the state. The key-side transition and the value-side gate act on opposite sides, so they
commute, and column c of the state runs the *gated* delta rule with the scalar decay gamma_t[c]:

    S_t[:, c] = (I - beta_t k_t k_t^T) gamma_t[c] S_{t-1}[:, c] + beta_t k_t v_t[c].

On a CPU the C kernel (models/ops/csrc/delta_rule.c) takes gamma_t as a per-column decay directly,
forward and backward. The chunked torch path spreads every value channel into a head of its own
(H x V heads, value size 1; the query, key and beta repeated), calls `chunk_gated_delta_rule`'s chunked
form, then folds the heads back: d_v times the work, so it serves where the C kernel does not (fla's
kernels are not asked: value size 1 is not a shape they serve). `value_gated_delta_rule_recurrence` is
the token-by-token reference both are tested against.
"""

from __future__ import annotations

from typing import Optional

import torch
from einops import rearrange

from deltalens.models.ops.common import StateEdit, check_shapes, scan_tokens
from deltalens.models.ops.delta_rule_native import native_delta_rule, native_delta_rule_with_states
from deltalens.models.ops.gated_delta_rule import chunk_gated_delta_rule
from deltalens.models.ops.kernel_select import C_STATES, C, KernelChoice, select_kernel_for
from deltalens.models.ops.precision import fp32_recurrence, no_autocast
from deltalens.models.ops.replay import replay_chunked

__all__ = [
    "value_gated_delta_rule_recurrence",
    "chunk_value_gated_delta_rule",
    "replay_value_gated_with_state_edits",
    "select_value_gated_kernel",
    "spread",
]


def _check(q, k, v, beta, g, initial_state) -> None:
    check_shapes(q, k, v, beta, initial_state)
    if g.shape != v.shape:
        raise ValueError(f"g (the value gate's log) must be [B, T, H, V] = {list(v.shape)}; got {tuple(g.shape)}.")


@fp32_recurrence
def value_gated_delta_rule_recurrence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    edit: Optional[StateEdit] = None,
) -> tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
    """The value-gated delta rule token by token (the reference; fp32 inside).

    q, k [B, T, H, K] (normalised), v [B, T, H, V], beta [B, T, H], g [B, T, H, V] the gate's log,
    initial_state [B, H, K, V]. Per step: value gate, delta update, `edit(t, S) -> S`, read.
    Returns (o [B, T, H, V] in q's dtype, S_T or None, states [B, T, H, K, V] fp32)."""
    _check(q, k, v, beta, g, initial_state)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    qs, k, v, beta = q.float() * scale, k.float(), v.float(), beta.float()

    def step(t: int, S: torch.Tensor) -> torch.Tensor:
        S = S * g[:, t].float().exp()[:, :, None, :]  # S_{t-1} Diag(gamma_t)
        k_t = k[:, t]
        u_t = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k_t))
        return S + torch.einsum("bhk,bhv->bhkv", k_t, u_t)

    o, S, states = scan_tokens(step, qs, initial_state, v.shape[-1], edit, q.dtype)
    return o, (S if output_final_state else None), states


def spread(q, k, v, beta, g, initial_state=None):
    """One head per value channel: q, k [B, T, H*V, K], v [B, T, H*V, 1], beta and g [B, T, H*V], the
    state [B, H*V, K, 1] (channel c of head h is head h*V + c)."""
    V = v.shape[-1]
    heads = lambda x: x.repeat_interleave(V, dim=2)  # noqa: E731
    state = None if initial_state is None else rearrange(initial_state, "b h k v -> b (h v) k 1")
    return (
        heads(q),
        heads(k),
        rearrange(v, "b t h v -> b t (h v) 1"),
        heads(beta),
        rearrange(g, "b t h v -> b t (h v)"),
        state,
    )


def _fold_states(states: torch.Tensor, V: int) -> torch.Tensor:
    """[..., H*V, K, 1] -> [..., H, K, V]."""
    return rearrange(states, "... (h v) k 1 -> ... h k v", v=V)


def select_value_gated_kernel(q, k, v, beta, g, initial_state=None, **flags) -> KernelChoice:
    """The gated delta rule's kernel choice (the facts it reads, device, dtype, gradients and length, are the
    spread inputs' too), never fla's (module docstring)."""
    flags.pop("use_fla", None)
    return select_kernel_for(q, k, v, beta, g, initial_state, use_fla=False, **flags)


def chunk_value_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
    with_states: bool = False,
    kernel: Optional[KernelChoice] = None,
    rows: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
) -> tuple[torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]]:
    """The value-gated delta rule on the gated delta rule's kernels (module docstring); arguments as
    `value_gated_delta_rule_recurrence`'s, plus `chunk_gated_delta_rule`'s with_states / kernel / rows.
    Returns (o [B, T, H, V] in q's dtype, S_T [B, H, K, V] or None, states [B, T, H, K, V] (or the rows'
    [n, H, K, V]) or None)."""
    _check(q, k, v, beta, g, initial_state)
    V = v.shape[-1]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if kernel is None:
        kernel = select_value_gated_kernel(q, k, v, beta, g, initial_state, wants_states=with_states)
    if kernel.path in (C, C_STATES):
        with no_autocast():  # the recurrence in fp32 (models/ops/precision.py)
            return _native(q, k, v, beta, g, scale, initial_state, output_final_state, kernel.path == C_STATES, rows)
    qs, ks, vs, bs, gs, s0 = spread(q, k, v, beta, g, initial_state)
    o, final, states = chunk_gated_delta_rule(
        qs, ks, vs, bs, gs, scale, s0, output_final_state, chunk_size=chunk_size, use_fla=False,
        with_states=with_states, kernel=kernel, rows=rows,
    )  # fmt: skip
    o = rearrange(o, "b t (h v) 1 -> b t h v", v=V)
    final = None if final is None else _fold_states(final, V)
    states = None if states is None else _fold_states(states, V)
    return o, final, states


def _native(q, k, v, beta, g, scale, initial_state, output_final_state, with_states, rows):
    """The C kernel with gamma_t = exp(g_t) as its per-column decay; (o in q's dtype, S_T or None, states or None)."""
    B, T, H, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1], dtype=torch.float32) if initial_state is None else initial_state.float()
    prepared = (q.float() * scale, k.float(), v.float(), beta.float())
    if with_states:
        o, S, states = native_delta_rule_with_states(*prepared, S, alpha=g.float().exp(), rows=rows)
    else:
        (o, S), states = native_delta_rule(*prepared, S, alpha=g.float().exp()), None
    return o.to(q.dtype), (S if output_final_state else None), states


@fp32_recurrence
def replay_value_gated_with_state_edits(
    q, k, v, beta, g, original_states: torch.Tensor, edited_states: torch.Tensor, scale=None, chunk_size: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Continue the value-gated delta rule from every state an edit changed ("replacement" semantics,
    models/ops/replay.py), its chunked kernel between the edits. Returns (o in q's dtype, the trajectory
    followed [B, T, H, K, V] fp32)."""

    scale = q.shape[-1] ** -0.5 if scale is None else scale
    inputs = (q, k, v, beta, g)
    return replay_chunked(chunk_value_gated_delta_rule, inputs, original_states, edited_states, q, scale, chunk_size)
