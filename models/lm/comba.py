"""HookedComba: fla's CombaForCausalLM (a scalar decay plus a low-rank correction, beta in [0, 1]), weight for
weight, with TransformerLens hooks.

The language model is models/lm/delta_lm.py's; the mixer is models/layers/comba_mixer.py's (fla's Comba
parameters, our recurrence: models/ops/comba.py). Config: `fla.models.CombaConfig` or its fla-free twin
`CombaSettings` (models/io/configs.py). Hooks are Gated DeltaNet's plus `blocks.{l}.attn.hook_p` (batch, pos,
head, d_k), the correction key. fla runs Comba on Triton only; here it runs on the chunked torch kernel on any
device.
"""

from __future__ import annotations

from deltalens.models.io.configs import CombaSettings
from deltalens.models.layers.comba_mixer import CombaMixer
from deltalens.models.lm.delta_lm import HookedDeltaLM
from deltalens.models.lm.gated_deltanet import GatedMixin

__all__ = ["HookedComba"]


class HookedComba(GatedMixin, HookedDeltaLM):
    """Comba language model with TransformerLens hooks; weights and config.json interchangeable with fla's."""

    mixer_class = CombaMixer
    arch = "comba"
    settings = CombaSettings
