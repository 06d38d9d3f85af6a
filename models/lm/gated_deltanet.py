"""HookedGatedDeltaNet: fla's GatedDeltaNetForCausalLM, weight for weight, with TransformerLens hooks.

The language model is models/lm/delta_lm.py's; the mixer (decay gate, grouped value heads) is
models/layers/gated_delta_mixer.py's. Config: `fla.models.GatedDeltaNetConfig` or its fla-free twin
`GatedDeltaNetSettings` (models/io/configs.py). Its hooks are DeltaNet's plus
`blocks.{l}.attn.hook_gate` (batch, pos, head), the decay alpha_t in (0, 1].
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from typing import Any, Optional

from deltalens.models.io.configs import GatedDeltaNetSettings
from deltalens.models.layers.gated_delta_mixer import GatedDeltaNetMixer
from deltalens.models.lm.delta_lm import HookedDeltaLM

__all__ = ["HookedGatedDeltaNet", "GatedMixin"]


class GatedMixin:
    """The gate intervention of models whose state decays (alpha_t = exp(g_t))."""

    _mixers: Callable[[Optional[int]], list[Any]]  # HookedDeltaLM's, which this is mixed into

    def set_gate_range(self, layer: Optional[int], head, lo: float, hi: float) -> None:
        """Clamp alpha_t into [lo, hi] for that layer and head (None = all). lo = hi = 1: no forgetting."""
        for mixer in self._mixers(layer):
            mixer.set_gate_range(lo, hi, head)

    def reset_gate_range(self, layer: Optional[int] = None) -> None:
        for mixer in self._mixers(layer):
            if mixer.use_decay:
                mixer.reset_gate_range()

    @contextmanager
    def gate_range(self, layer: Optional[int], head, lo: float, hi: float):
        """`set_gate_range` inside a with-block, restored after it."""
        mixers = self._mixers(layer)
        saved = [(m.gate_lo.clone(), m.gate_hi.clone()) for m in mixers]
        self.set_gate_range(layer, head, lo, hi)
        try:
            yield self
        finally:
            for mixer, (lo_, hi_) in zip(mixers, saved):
                mixer.gate_lo.copy_(lo_)
                mixer.gate_hi.copy_(hi_)


class HookedGatedDeltaNet(GatedMixin, HookedDeltaLM):
    """Gated DeltaNet language model with TransformerLens hooks; weights interchangeable with fla's."""

    mixer_class = GatedDeltaNetMixer
    arch = "gated_deltanet"
    settings = GatedDeltaNetSettings
