"""How a deltalens model takes its hooks, TransformerLens's way with two differences that matter here.

* A hook name the model does not have is refused in one sentence with the nearest name (TransformerLens
  raises a KeyError deep in `hooks`): an intervention made for a deeper model, a typo.
* A cache of `hook_state` (batch, pos, head, d_k, d_v) is cut along its position axis by `pos_slice` (the
  generic rule would cut d_k), and where a hook edited the states, it keeps the trajectory the layer
  replayed from the edit (models/layers/replayed_states.py), not the unedited states after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, Optional

import torch
from transformer_lens.hook_points import HookPoint
from transformer_lens.utilities import Slice
from transformer_lens.utilities import remove_batch_dim as drop_batch_dim

from deltalens.core.errors import DeltalensError, did_you_mean
from deltalens.models.layers.replayed_states import note_recorder

__all__ = ["LensHooks"]


class LensHooks:
    """Mixin (before HookedRootModule in the bases): checked hook names, hook_state cached as the layer ran it."""

    hook_dict: dict[str, Any]  # HookedRootModule's, by TransformerLens name

    def hooks(self, fwd_hooks: Sequence = (), bwd_hooks: Sequence = (), *args: Any, **kwargs: Any):
        """`HookedRootModule.hooks`, a hook name this model does not have refused in one sentence (not a KeyError)."""
        self._known_hooks([*fwd_hooks, *bwd_hooks])
        return super().hooks(list(fwd_hooks), list(bwd_hooks), *args, **kwargs)  # type: ignore[misc]

    def add_hook(self, name: Any, *args: Any, **kwargs: Any) -> None:
        """`HookedRootModule.add_hook`, an unknown hook name refused as `hooks` refuses it."""
        self._known_hooks([(name, None)])
        super().add_hook(name, *args, **kwargs)  # type: ignore[misc]

    def _known_hooks(self, hooks: Sequence) -> None:
        for name, _ in hooks:
            if isinstance(name, str) and name not in self.hook_dict:
                raise DeltalensError(
                    f"this {type(self).__name__} has no hook named {name!r}{did_you_mean(name, self.hook_dict)} "
                    "(an intervention made for another model, or a misspelt name; its hooks: model.hook_dict)"
                )

    def get_caching_hooks(
        self,
        names_filter=None,
        incl_bwd: bool = False,
        device=None,
        remove_batch_dim: bool = False,
        cache: Optional[dict] = None,
        pos_slice=None,
    ) -> tuple[dict, list, list]:
        """HookedRootModule's caching hooks, except for hook_state: `pos_slice` cuts it along its position
        axis (dim 1 of (batch, pos, head, d_k, d_v); the generic rule would cut d_k), and where a hook edited
        the states, the cache keeps the trajectory the layer replayed (models/layers/replayed_states.py)."""
        cache, fwd_hooks, bwd_hooks = super().get_caching_hooks(  # type: ignore[misc]  # HookedRootModule's
            names_filter, incl_bwd, device, remove_batch_dim=remove_batch_dim, cache=cache, pos_slice=pos_slice
        )
        positions = Slice.unwrap(pos_slice)

        def save_state(tensor: torch.Tensor, hook: HookPoint, is_backward: bool = False) -> None:
            key = hook.name + ("_grad" if is_backward else "")

            def store(states: torch.Tensor) -> None:
                stored = states.detach().to(device)
                if remove_batch_dim:
                    stored = drop_batch_dim(stored)
                cache[key] = positions.apply(stored, dim=-4)

            store(tensor)
            if not is_backward:
                note_recorder(hook, store)

        def swap(hooks: list, is_backward: bool) -> list:
            return [
                (name, partial(save_state, is_backward=is_backward) if name.endswith("hook_state") else fn)
                for name, fn in hooks
            ]

        return cache, swap(fwd_hooks, False), swap(bwd_hooks, True)
