"""HookedDeltaNet: fla's DeltaNetForCausalLM, weight for weight, as a TransformerLens HookedRootModule.

The language model around the mixer is models/lm/delta_lm.py's (module tree, hooks, fla interchange,
interventions); the mixer is models/layers/deltanet_mixer.py's. Config: a `fla.models.DeltaNetConfig` or
its fla-free twin `DeltaNetSettings` (models/io/configs.py, what models.build uses), optionally with
deltalens's `state_norm_every` (renormalised delta rule; see the mixer). Hook names and shapes:
models/lm/hook_names.py.
"""

from __future__ import annotations

from deltalens.models.io.configs import DeltaNetSettings
from deltalens.models.layers.deltanet_mixer import DeltaNetMixer
from deltalens.models.lm.delta_lm import DeltaBlock, GatedMLP, HookedDeltaLM

__all__ = ["HookedDeltaNet", "DeltaBlock", "GatedMLP"]


class HookedDeltaNet(HookedDeltaLM):
    """DeltaNet language model with TransformerLens hooks; weights interchangeable with fla's."""

    mixer_class = DeltaNetMixer
    arch = "deltanet"
    settings = DeltaNetSettings
