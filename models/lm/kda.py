"""HookedKDA: fla's KDAForCausalLM (Kimi Delta Attention: the gated delta rule with a decay per key
channel, beta in [0, 1] or [0, 2]), weight for weight, with TransformerLens hooks.

The language model is models/lm/delta_lm.py's; the mixer is models/layers/kda_mixer.py's (fla's
KimiDeltaAttention parameters, our recurrence: models/ops/kda.py). Config: `fla.models.KDAConfig` or its
fla-free twin `KDASettings` (models/io/configs.py). Hooks are Gated DeltaNet's, with hook_gate
(batch, pos, head, d_k): the decay alpha_t of each key channel. fla runs KDA on Triton only; here it
runs on the chunked torch kernel on any device.
"""

from __future__ import annotations

from deltalens.models.io.configs import KDASettings
from deltalens.models.layers.kda_mixer import KDAMixer
from deltalens.models.lm.delta_lm import HookedDeltaLM
from deltalens.models.lm.gated_deltanet import GatedMixin

__all__ = ["HookedKDA"]


class HookedKDA(GatedMixin, HookedDeltaLM):
    """KDA language model with TransformerLens hooks; weights and config.json interchangeable with fla's."""

    mixer_class = KDAMixer
    arch = "kda"
    settings = KDASettings
