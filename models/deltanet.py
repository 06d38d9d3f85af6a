"""HookedDeltaNet: fla's DeltaNetForCausalLM, weight for weight, as a TransformerLens HookedRootModule.

The language model around the mixer is models/delta_lm.py's (module tree, hooks, fla interchange,
interventions); the mixer is models/deltanet_mixer.py's. Config: a `fla.models.DeltaNetConfig` or
its fla-free twin `DeltaNetSettings` (models/fla_config.py, what models.build uses), optionally with
deltalens's `state_norm_every` (renormalised delta rule; see the mixer). Hook names and shapes:
models/hook_names.py.
"""
from __future__ import annotations

from deltalens.models.delta_lm import DeltaBlock, GatedMLP, HookedDeltaLM
from deltalens.models.deltanet_mixer import DeltaNetMixer
from deltalens.models.fla_config import DeltaNetSettings

__all__ = ["HookedDeltaNet", "DeltaBlock", "GatedMLP"]


class HookedDeltaNet(HookedDeltaLM):
    """DeltaNet language model with TransformerLens hooks; weights interchangeable with fla's."""

    mixer_class = DeltaNetMixer
    arch = "deltanet"
    settings = DeltaNetSettings
