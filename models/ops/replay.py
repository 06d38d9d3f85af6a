"""State edits: continue the delta rule from states a hook replaced ("replacement" semantics).

`replay_segments` is the bookkeeping every mixer of the family shares (which (sequence, step) a hook
changed, and the segments between them); `replay_with_state_edits` runs it with the plain delta
rule's chunked kernel (models/ops/delta_rule_chunked.py). The Gated DeltaNet / DeltaProduct form is
`replay_gated_with_state_edits` in models/ops/gated_delta_rule.py; `replay_chunked` runs it for the families
whose chunked kernels are called one way (KDA, Comba, RWKV-7, the value-gated delta rule).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch

from deltalens.models.ops.common import check_renorm_every, check_shapes
from deltalens.models.ops.delta_rule_chunked import chunk_forward
from deltalens.models.ops.precision import fp32_recurrence

__all__ = ["replay_chunked", "replay_segments", "replay_with_state_edits"]


def replay_segments(
    original_states: torch.Tensor,
    edited_states: torch.Tensor,
    run_segment: Callable[[int, int, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """The trajectory [B, T, H, K, V] (fp32) that continues from every state an edit changed.

    Wherever (b, t) of `edited_states` differs from `original_states`, S_t := the edited one for that
    sequence and the steps after it are recomputed; steps before the first edit are kept.
    `run_segment(start, stop, S)` gives the states of tokens start .. stop - 1 continuing from S
    (the state after token start - 1): the chunked kernel of the model, so a handful of edits cost
    about one extra forward.
    """
    if original_states.shape != edited_states.shape:
        raise ValueError(
            f"a state hook must return the shape it was given, {tuple(original_states.shape)}; "
            f"got {tuple(edited_states.shape)}."
        )
    B, T = edited_states.shape[:2]
    edited_states = edited_states.float()
    changed = (edited_states != original_states.float()).flatten(2).any(-1)  # (B, T)
    times = torch.nonzero(changed.any(0)).flatten().tolist()
    if not times:
        return edited_states
    pieces = [edited_states[:, : times[0]]]  # untouched prefix (equal to the original there)
    current = edited_states[:, times[0]]  # (B, H, K, V); rows not edited here are original too
    pieces.append(current[:, None])
    for start, stop in zip(times, times[1:] + [T]):
        if start + 1 >= T:
            continue
        seg_states = run_segment(start + 1, stop + 1 if stop < T else T, current)  # (B, L, H, K, V)
        if stop < T:
            # At the next edited step, sequences edited there take the hook's state.
            keep = changed[:, stop].view(B, 1, 1, 1)
            current = torch.where(keep, edited_states[:, stop], seg_states[:, -1])
            seg_states = torch.cat([seg_states[:, :-1], current[:, None]], dim=1)
        pieces.append(seg_states)
    return torch.cat(pieces, dim=1)


def replay_chunked(
    chunked: Callable[..., tuple[torch.Tensor, ...]],
    inputs: tuple[torch.Tensor, ...],
    original_states: torch.Tensor,
    edited_states: torch.Tensor,
    query: torch.Tensor,
    scale: float,
    chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`replay_segments` with a family's chunked kernel, `chunked(*inputs, initial_state=S, chunk_size=C,
    with_states=True) -> (o, S_T, every S_t)`, run on each segment's slice of `inputs` (B, T, ...); the read-out
    o_t = S_t^T (scale query_t). Returns (o [B, T, H, V] in query's dtype, the trajectory followed [B, T, H, K, V])."""

    def run_segment(start: int, stop: int, S: torch.Tensor) -> torch.Tensor:
        part = (x[:, start:stop] for x in inputs)
        return chunked(*part, initial_state=S, chunk_size=chunk_size, with_states=True)[2]

    states = replay_segments(original_states, edited_states, run_segment)
    o = torch.einsum("bthkv,bthk->bthv", states, query.float() * scale)
    return o.to(query.dtype), states


@fp32_recurrence
def replay_with_state_edits(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    original_states: torch.Tensor,
    edited_states: torch.Tensor,
    scale: Optional[float] = None,
    chunk_size: int = 64,
    renorm_every: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Re-run the delta rule so that every state an edit changed is what the recurrence continues from.

    `original_states` is the trajectory [B, T, H, K, V] a hook was shown; `edited_states` is what it
    returned. Wherever (b, t) differs, S_t := edited_states[b, t] for that sequence, the read-out o_t
    uses it, and S_{t+1}, S_{t+2}, ... are recomputed from it (so later entries of `edited_states`
    for that sequence matter only where they too differ from `original_states`: "replacement"
    semantics, exact for patching states in from another run). Steps before the first edit are
    kept. Between edited steps the chunked kernel runs from the edited state, so a handful of edits
    cost about one extra forward; an edit at every step degrades to one tiny segment per token.

    renorm_every must be the one the trajectory was computed with: the replayed steps renormalise
    after token t whenever (t + 1) % renorm_every == 0 (absolute t). An edited S_t is taken as it is
    (it was shown after that step's renormalisation; the edit comes last, as the recurrence's `edit`).

    q, k must be what the recurrence used (already normalised); q is scaled here. The initial state
    needs no argument: it is already folded into `original_states`. Returns
    (o [B, T, H, V] in q's dtype, states [B, T, H, K, V] fp32: the trajectory actually followed).
    """
    check_shapes(q, k, v, beta, None)
    renorm_every = check_renorm_every(renorm_every)
    scale = q.shape[-1] ** -0.5 if scale is None else scale

    def run_segment(start: int, stop: int, S: torch.Tensor) -> torch.Tensor:
        # q's scale does not matter here, only the states are used. The phase puts token `start` at
        # its place on the renormalisation grid.
        q_s, k_s, v_s, beta_s = (x[:, start:stop].float() for x in (q, k, v, beta))
        return chunk_forward(
            q_s,
            k_s,
            v_s,
            beta_s,
            S,
            chunk_size,
            with_states=True,
            renorm_every=renorm_every,
            phase=start % renorm_every if renorm_every else 0,
        )[2]

    states = replay_segments(original_states, edited_states, run_segment)
    o = torch.einsum("bthkv,bthk->bthv", states, q.float() * scale)  # o_t = S_t^T (scale q_t)
    return o.to(q.dtype), states
