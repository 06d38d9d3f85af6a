"""Qwen3.5-MoE (transformers `qwen3_5_moe_text`, and the text tower of the multimodal `qwen3_5_moe`): Qwen3.5's
Gated DeltaNet and gated attention layers with Qwen3-Next's mixture-of-experts MLPs (a router, routed experts
and a gated shared expert) on every layer, beta in [0, 1]. Qwen3.5-35B-A3B, -122B-A10B, -397B-A17B and the
Qwen3.6 MoE releases are of this type.

The delta-rule layer is Qwen3.5's, input for input (qwen3_5.py's Qwen3_5Inputs says where each comes from).
"""

from __future__ import annotations

from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as modeling
from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeConfig, Qwen3_5MoeTextConfig

from deltalens.models.production.family import LAYERS_3_1, ProductionFamily, tiny_gdn_fields
from deltalens.models.production.hooked_gdn import HookedGatedDeltaNetLayer
from deltalens.models.production.lm import HookedProductionLM
from deltalens.models.production.qwen3_5 import Qwen3_5Inputs, tiny_multimodal

__all__ = ["FAMILY", "HookedQwen3_5Moe", "HookedQwen3_5MoeGatedDeltaNet"]


class HookedQwen3_5MoeGatedDeltaNet(Qwen3_5Inputs, HookedGatedDeltaNetLayer, modeling.Qwen3_5MoeGatedDeltaNet):
    conv_forward = staticmethod(modeling.causal_conv1d_forward)
    mask_padding = staticmethod(modeling.apply_mask_to_padding_states)


def _tiny(vocab_size: int) -> Qwen3_5MoeTextConfig:
    """4 experts, 2 per token, and a shared one on every layer."""
    return Qwen3_5MoeTextConfig(
        head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
        shared_expert_intermediate_size=16, **tiny_gdn_fields(vocab_size, LAYERS_3_1),
    )  # fmt: skip


FAMILY = ProductionFamily(
    arch="qwen3_5_moe",
    lm_class=modeling.Qwen3_5MoeForCausalLM,
    config_class=Qwen3_5MoeTextConfig,
    linear_mixer=HookedQwen3_5MoeGatedDeltaNet,
    layer_types=("linear_attention", "full_attention"),
    tiny=_tiny,
    tiny_multimodal=tiny_multimodal(Qwen3_5MoeConfig, modeling.Qwen3_5MoeForConditionalGeneration),
)


class HookedQwen3_5Moe(HookedProductionLM):
    """transformers' Qwen3.5-MoE causal LM with our hooks (models/production/lm.py)."""

    family = FAMILY
