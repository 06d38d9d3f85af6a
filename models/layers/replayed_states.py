"""What a cache of hook_state shows when a hook edited the states: the trajectory the layer ran.

A hook that changes S_t at some steps makes the layer replay the recurrence from the edited states
(models/layers/hooked_recurrence.py), so every later S_t changes too. The hooks saw the states before
that replay; a cache that kept what they returned would show the edited steps and, after them, the
unedited states the read-out no longer used. So a recorder (run_with_cache's caching hook, a capture)
notes on the HookPoint how to store a trajectory, and the layer hands it the replayed one:

    with recording(mixer.hook_state) as replayed:   # the layer, around its hook_state call
        seen = mixer.hook_state(states)              # a recorder stores `seen` and calls note_recorder
        ... replay ...
        replayed(trajectory)                         # each recorder stores the trajectory instead

Hooks other than recorders still see what they always saw: the states before the replay.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from torch import Tensor
from transformer_lens.hook_points import HookPoint

__all__ = ["note_recorder", "recording"]

_ATTRIBUTE = "_deltalens_state_recorders"  # set on a HookPoint only while its layer runs it


def note_recorder(hook: HookPoint, store: Callable[[Tensor], None]) -> None:
    """Called by a recorder inside its hook: `store(trajectory)` replaces what it kept, should the layer replay."""
    recorders = getattr(hook, _ATTRIBUTE, None)
    if recorders is not None:
        recorders.append(store)


@contextlib.contextmanager
def recording(hook: HookPoint) -> Iterator[Callable[[Tensor], None]]:
    """Around one forward's call of `hook`: yields replayed(trajectory), which hands the replayed states to
    every recorder that ran in it. The recorders are dropped on leaving, so none outlives the forward."""
    recorders: list[Callable[[Tensor], None]] = []
    setattr(hook, _ATTRIBUTE, recorders)

    def replayed(trajectory: Tensor) -> None:
        for store in recorders:
            store(trajectory.detach())

    try:
        yield replayed
    finally:
        setattr(hook, _ATTRIBUTE, None)
