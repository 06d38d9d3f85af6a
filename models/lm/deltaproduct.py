"""HookedDeltaProduct: fla's GatedDeltaProductForCausalLM (n_h Householder factors per token, with or
without the forget gate, beta in [0, 1] or [0, 2]), weight for weight, with TransformerLens hooks.

The language model is models/lm/delta_lm.py's; the mixer is models/layers/gated_delta_mixer.py's. Config:
`fla.models.GatedDeltaProductConfig` or its fla-free twin `GatedDeltaProductSettings`
(models/io/configs.py). Hooks are DeltaNet's names with a factor axis where a token has one value
per factor: hook_k (batch, pos, head, factor, d_k), hook_v (..., factor, d_v), hook_beta_logit /
hook_beta (batch, pos, head, factor); hook_gate (batch, pos, head) when gated; hook_state is the
state after each token's last factor. The probe of each token's product of factors is probes/products.py.
"""

from __future__ import annotations

from deltalens.models.io.configs import GatedDeltaProductSettings
from deltalens.models.layers.gated_delta_mixer import DeltaProductMixer
from deltalens.models.lm.delta_lm import HookedDeltaLM
from deltalens.models.lm.gated_deltanet import GatedMixin

__all__ = ["HookedDeltaProduct"]


class HookedDeltaProduct(GatedMixin, HookedDeltaLM):
    """DeltaProduct language model with TransformerLens hooks; weights interchangeable with fla's."""

    mixer_class = DeltaProductMixer
    arch = "deltaproduct"
    settings = GatedDeltaProductSettings
