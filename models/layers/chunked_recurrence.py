"""The `Recurrence` of a family whose kernels are our torch ones (Comba, RWKV-7, KDA), written once.

Such a family's ops module (models/ops/comba.py, kda.py, rwkv7.py) has three functions called the same
way on the layer's prepared inputs, `inputs`:

    recurrence(*inputs, initial_state=S0, edit=edit) -> (o, S_T, states)      the token-by-token reference
    chunked(*inputs, initial_state=S0, chunk_size=C, with_states=...) -> (o, S_T, states or None)
    replay(*inputs, original, edited, chunk_size=C) -> (o, the trajectory followed)

so the reference / fast / with_states / replay closures that models/layers/hooked_recurrence.py runs, and
the carry between chunks (models/layers/carry.py) around each, are the same for all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from torch import Tensor

from deltalens.models.layers.carry import Carry, keep_final, keep_last, replay_kept
from deltalens.models.layers.hooked_recurrence import Recurrence
from deltalens.models.ops.common import StateEdit
from deltalens.models.ops.kernel_select import FLA_CHUNK, FLA_RECURRENT, KernelChoice

__all__ = ["chunked_recurrence"]


def chunked_recurrence(
    inputs: tuple[Tensor, ...],
    *,
    carry: Optional[Carry],
    initial_state: Optional[Tensor],
    chunk_size: int,
    recurrence: Callable[..., tuple[Tensor, Tensor, Tensor]],
    chunked: Callable[..., tuple[Tensor, Tensor, Optional[Tensor]]],
    replay: Callable[..., tuple[Tensor, Tensor]],
    select: Callable[..., KernelChoice],
    fla: Optional[Callable[[KernelChoice], tuple[Tensor, Optional[Tensor]]]] = None,
    read_out: Optional[Callable[[Tensor], Tensor]] = None,
) -> Recurrence:
    """The layer's `Recurrence` on `inputs`, continuing from `initial_state` (None: zeros) and keeping the
    final state in `carry` (None: no chunks). fla(kernel) -> (o, S_T or None) runs the fla paths the
    selector may choose (FLA_CHUNK, FLA_RECURRENT); without it `select` never chooses them."""

    def reference(edit: Optional[StateEdit]) -> tuple[Tensor, Tensor]:
        o, _, states = recurrence(*inputs, initial_state=initial_state, edit=edit)
        return o, states

    def fast(kernel: KernelChoice) -> Tensor:
        if fla is not None and kernel.path in (FLA_CHUNK, FLA_RECURRENT):
            o, final = fla(kernel)
        else:
            o, final, _ = chunked(*inputs, initial_state=initial_state, chunk_size=chunk_size)
        return keep_final(carry, o, final)

    def with_states(kernel: KernelChoice) -> tuple[Tensor, Tensor]:
        o, _, states = chunked(*inputs, initial_state=initial_state, chunk_size=chunk_size, with_states=True)
        return o, keep_last(carry, states)

    def replay_from(original: Tensor, seen: Tensor) -> tuple[Tensor, Tensor]:
        return replay_kept(carry, *replay(*inputs, original, seen, chunk_size=chunk_size))

    return Recurrence(
        select=select, reference=reference, fast=fast, with_states=with_states, replay=replay_from, read_out=read_out
    )
