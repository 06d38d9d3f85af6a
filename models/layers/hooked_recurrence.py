"""Run -> hook_state -> replay: how every delta-rule mixer (DeltaNet, Gated DeltaNet, DeltaProduct)
computes its read-out o_t and shows its states S_t, written once.

One forward of the recurrence, after the kernel selector (models/ops/kernel_select.py) has chosen:

* `reference` (a state_edit is set): the token-by-token recurrence with edit(t, S) -> S after every
  token (exact per-step semantics); hook_state then shows the edited trajectory, read-only: a hook
  that changes it is refused (edit through one of them, not both).
* no hook on hook_state: the fast kernel (fla, C or chunked); no S_t is materialised.
* a hook on hook_state: a kernel that returns every S_t (c_states or chunked_states), passed through
  hook_state. Where the plain forward runs fla (CUDA), o still comes from that same fla call and the
  states kernel supplies only S_t, so a capture's logits are the plain forward's, bit for bit. If the
  hook changed any state (returned another tensor, or edited it in place and returned None: detected
  by the tensor's `_version`), the layer replays: the edited S_t is what o_t
  reads and what step t + 1 continues from ("replacement" semantics). For an in-place edit, what the
  hook was shown is recomputed by the same path, so that its rounding equals the shown tensor's and
  only the edited steps count as changed.

A capture that keeps S_t at some positions only (interp/capture.py) sets `mixer.state_tap`, a
`StateTap` naming the (batch, position) rows and where to deliver them, instead of hooking hook_state:
with no hook on hook_state and no state_edit, the layer runs `with_state_rows`, whose C kernel writes
only those rows (a reveal-position capture never holds the layer's (B, T, H, d_k, d_v) states); on CUDA
with fla's kernels and no gradient wanted (the selector's `fla_rows`), the plain forward's fla kernel
gives o and the kept rows are rebuilt from its chunk-start states and WY factors
(models/ops/fla_state_rows.py): a capture there costs the plain forward plus the rows. Otherwise the
tap receives the kept rows of whatever states the path above computed (after a hook that changed them, the
trajectory the layer replayed, which a cache of hook_state shows too: models/layers/replayed_states.py).
State edits (state_edit, a hook that changes hook_state) keep the reference and replay paths above: an
edited S_t is what the recurrence continues from.

Each mixer supplies its kernels as a `Recurrence` of closures over its prepared inputs, and records
the path that ran as `mixer.last_kernel` (a KernelChoice), also logged on "deltalens.kernels".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from torch import Tensor

from deltalens.models.layers.replayed_states import recording
from deltalens.models.ops.common import StateEdit
from deltalens.models.ops.fla_kernels import fla_backend
from deltalens.models.ops.kernel_select import FLA_CHUNK, FLA_RECURRENT, FLA_ROWS, REFERENCE, KernelChoice

__all__ = ["Recurrence", "HookedRecurrenceMixin", "StateTap", "logger"]

logger = logging.getLogger("deltalens.kernels")


@dataclass(frozen=True)
class Recurrence:
    """One layer's recurrence on its prepared inputs; every o is what the layer reads, (B, T, H, d_v),
    and every states tensor is per token, (B, T, H, d_k, d_v).

    select(**flags) -> KernelChoice: `select_kernel_for` on the layer's inputs, given wants_states,
        state_edit and hook_edited.
    reference(edit) -> (o, states): token by token with `edit` after every token (None: no edit).
    fast(kernel) -> o: the chosen fast path. with_states(kernel) -> (o, states): the chosen states path.
    replay(original, edited) -> (o, states): continue from every state `edited` changed; the trajectory run.
    read_out(states) -> o: o_t = S_t^T (scale q_t) from the hooked states, so that backward hooks on
        hook_state receive dL/dS_t; None = keep the kernel's o.
    """

    select: Callable[..., KernelChoice]
    reference: Callable[[Optional[StateEdit]], tuple[Tensor, Tensor]]
    fast: Callable[[KernelChoice], Tensor]
    with_states: Callable[[KernelChoice], tuple[Tensor, Tensor]]
    replay: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]
    read_out: Optional[Callable[[Tensor], Tensor]] = None
    with_state_rows: Optional[Callable[[KernelChoice, tuple[Tensor, Tensor]], tuple[Tensor, Tensor]]] = None
    """with_state_rows(kernel, (b, t)) -> (o, states of those rows (n, H, d_k, d_v)); None: index with_states."""


@dataclass(frozen=True)
class StateTap:
    """Keep S_t at rows (b, t) of this forward's batch only and hand them, (n, H, d_k, d_v), to deliver."""

    rows: tuple[Tensor, Tensor]
    deliver: Callable[[Tensor], None]

    def take(self, states: Tensor) -> None:
        b, t = (x.to(states.device) for x in self.rows)
        self.deliver(states[b, t])


class HookedRecurrenceMixin:
    """For an nn.Module mixer with `hook_state` (a HookPoint), `state_edit` and `layer_idx`."""

    # what the mixer this is mixed into provides (declared for the type checker)
    hook_state: Any
    state_edit: Optional[StateEdit]
    layer_idx: int

    last_kernel: Optional[KernelChoice] = None  # the path the latest forward took
    fla_operation = "delta_rule"  # the fla entry points an fla path calls (fla_kernels.FLA_OPERATIONS)
    state_tap: Optional[StateTap] = None  # set by a capture that keeps some positions' S_t (module docstring)

    def _dispatch(self, path: str) -> str:
        """fla may hand an fla_chunk / fla_recurrent call to another backend: the words that say which."""
        return f"; fla dispatch: {fla_backend(self.fla_operation)}" if path in (FLA_CHUNK, FLA_RECURRENT) else ""

    def _record(self, choice: KernelChoice) -> KernelChoice:
        choice = KernelChoice(choice.path, choice.reason + self._dispatch(choice.path))
        self.last_kernel = choice
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("blocks.%d.attn: %s", self.layer_idx, choice)
        return choice

    def _run_recurrence(self, kernels: Recurrence) -> Tensor:
        """o for this forward, S_t computed only when a hook or an edit asks for them (module docstring)."""
        wants_states = self.hook_state.has_hooks()
        tap = self.state_tap
        if tap is not None and not wants_states and self.state_edit is None:
            return self._tapped(kernels, tap)
        choice = self._record(
            kernels.select(wants_states=wants_states or tap is not None, state_edit=self.state_edit is not None)
        )
        if choice.path == REFERENCE:
            o, states = kernels.reference(self.state_edit)
            if tap is not None:
                tap.take(states)
            if wants_states:
                version = states._version
                if self.hook_state(states) is not states or states._version != version:
                    raise RuntimeError(
                        f"blocks.{self.layer_idx}.attn.hook_state changed the state while a state_edit is "
                        "active; edit through one of them, not both."
                    )
            return o
        if not choice.gives_states:
            return kernels.fast(choice)

        o, states = kernels.with_states(choice)
        plain = kernels.select(wants_states=False, state_edit=False)
        if plain.path in (FLA_CHUNK, FLA_RECURRENT):  # the plain forward's o: capture keeps its logits
            o = kernels.fast(plain)  # after with_states: a chunked run carries fla's final state on
            why = f"{choice.reason}; o from {plain.path}, as the plain forward{self._dispatch(plain.path)}"
            self._record(KernelChoice(choice.path, why))
        with recording(self.hook_state) as replayed:
            version = states._version  # detects hooks that edit in place and return None
            seen = self.hook_state(states)
            untouched = states._version == version
            if seen is states and untouched:
                if tap is not None:
                    tap.take(seen)
                if kernels.read_out is not None and self.hook_state.has_hooks(dir="bwd"):
                    # Read o out of the hooked tensor so backward hooks on hook_state receive dL/dS_t
                    # (the read-out path at step t; the path through later steps is not routed here).
                    o = kernels.read_out(seen)
                return o
            original = states if untouched else kernels.with_states(choice)[1].detach()
            self._record(kernels.select(wants_states=True, state_edit=False, hook_edited=True))
            o, trajectory = kernels.replay(original, seen)
            replayed(trajectory)  # caches show the states the layer ran, not the unedited ones after an edit
            if tap is not None:
                tap.take(trajectory)
            return o

    def _tapped(self, kernels: Recurrence, tap: StateTap) -> Tensor:
        """o, with only the tapped rows' S_t computed (module docstring)."""
        rows_only = {"rows_only": True} if kernels.with_state_rows is not None else {}  # may run fla_rows
        choice = self._record(kernels.select(wants_states=True, state_edit=False, **rows_only))
        if kernels.with_state_rows is not None and choice.path == FLA_ROWS:  # o is the plain forward's already
            o, rows = kernels.with_state_rows(choice, tap.rows)
            tap.deliver(rows)
            return o
        if not choice.gives_states:  # no states kernel here: the reference gives them all
            o, states = kernels.reference(None)
            tap.take(states)
            return o
        if kernels.with_state_rows is not None:
            o, rows = kernels.with_state_rows(choice, tap.rows)
            tap.deliver(rows)
        else:
            o, states = kernels.with_states(choice)
            tap.take(states)
            del states
        plain = kernels.select(wants_states=False, state_edit=False)
        if plain.path in (FLA_CHUNK, FLA_RECURRENT):  # the plain forward's o, as in _run_recurrence
            o = kernels.fast(plain)
        return o
