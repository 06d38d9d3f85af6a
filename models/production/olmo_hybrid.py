"""OLMo-Hybrid (transformers `olmo_hybrid`): Gated DeltaNet layers with beta in [0, 2]
(`linear_allow_neg_eigval`, eigenvalues 1 - beta in [-1, 1]) between softmax-attention layers; the
largest open LM with negative eigenvalues (allenai's Olmo-Hybrid-7B).

Its delta-rule layer has separate q, k, v projections (concatenated for one short conv), an output
gate g_proj into the gated RMSNorm, beta = 2 * sigmoid(b_proj(x)) when negative eigenvalues are
allowed, and the decay from a_proj(x).
"""

from __future__ import annotations

import torch
from transformers.models.olmo_hybrid import modeling_olmo_hybrid as modeling
from transformers.models.olmo_hybrid.configuration_olmo_hybrid import OlmoHybridConfig

from deltalens.models.production.delta_layer import SeparateProjections
from deltalens.models.production.family import ProductionFamily, tiny_gdn_fields
from deltalens.models.production.hooked_gdn import HookedGatedDeltaNetLayer
from deltalens.models.production.lm import HookedProductionLM

__all__ = ["FAMILY", "HookedOlmoHybrid", "HookedOlmoHybridGatedDeltaNet"]


class HookedOlmoHybridGatedDeltaNet(SeparateProjections, HookedGatedDeltaNetLayer, modeling.OlmoHybridGatedDeltaNet):
    conv_forward = staticmethod(modeling.causal_conv1d_forward)
    mask_padding = staticmethod(modeling.apply_mask_to_padding_states)

    def _read_out(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        B, T = x.shape[:2]
        gate = self.g_proj(x).reshape(-1, self.head_v_dim)
        return self.o_proj(self.o_norm(o.reshape(-1, self.head_v_dim), gate).reshape(B, T, -1))


FAMILY = ProductionFamily(
    arch="olmo_hybrid",
    lm_class=modeling.OlmoHybridForCausalLM,
    config_class=OlmoHybridConfig,
    linear_mixer=HookedOlmoHybridGatedDeltaNet,
    layer_types=("linear_attention", "full_attention"),
    neg_eigval=lambda config: bool(config.linear_allow_neg_eigval),
    tiny=lambda vocab_size: OlmoHybridConfig(  # its attention at layer 1, as the release interleaves it
        **tiny_gdn_fields(vocab_size, ["linear_attention", "full_attention", "linear_attention", "linear_attention"])
    ),
)


class HookedOlmoHybrid(HookedProductionLM):
    """transformers' OLMo-Hybrid causal LM with our hooks (models/production/lm.py)."""

    family = FAMILY
