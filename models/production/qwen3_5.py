"""Qwen3.5 (transformers `qwen3_5_text`, and the text tower of the multimodal `qwen3_5`): three Gated
DeltaNet layers to one gated softmax-attention layer, beta in [0, 1]. The smallest release is
Qwen/Qwen3.5-0.8B.

Its delta-rule layer fuses q, k and v into one projection (in_proj_qkv) before one short conv; the
output gate z (in_proj_z) enters the gated RMSNorm; beta = sigmoid(in_proj_b(x)); the decay reads
in_proj_a(x).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as modeling
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5Config, Qwen3_5TextConfig

from deltalens.models.production.family import LAYERS_3_1, ProductionFamily, tiny_gdn_fields
from deltalens.models.production.hooked_gdn import HookedGatedDeltaNetLayer
from deltalens.models.production.lm import HookedProductionLM

__all__ = ["FAMILY", "HookedQwen3_5", "HookedQwen3_5GatedDeltaNet", "Qwen3_5Inputs", "tiny_multimodal"]


class Qwen3_5Inputs:
    """Where Qwen3.5's delta-rule layer keeps each input (Qwen3.5-MoE's layer is the same layer)."""

    # the transformers layer's modules this reads (declared for the type checker; transformers is read as Any)
    in_proj_qkv: Any
    in_proj_z: Any
    in_proj_a: Any
    in_proj_b: Any
    norm: Any
    out_proj: Any
    head_v_dim: int

    conv_forward = staticmethod(modeling.causal_conv1d_forward)
    mask_padding = staticmethod(modeling.apply_mask_to_padding_states)

    @property
    def a_proj(self):  # the decay's input projection, under the name our gate code reads
        return self.in_proj_a

    def _mixed_qkv(self, x: torch.Tensor) -> torch.Tensor:
        return self.in_proj_qkv(x)

    def _beta_logit(self, x: torch.Tensor) -> torch.Tensor:
        return self.in_proj_b(x)

    def _read_out(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        B, T = x.shape[:2]
        z = self.in_proj_z(x).reshape(-1, self.head_v_dim)
        return self.out_proj(self.norm(o.reshape(-1, self.head_v_dim), z).reshape(B, T, -1))


class HookedQwen3_5GatedDeltaNet(Qwen3_5Inputs, HookedGatedDeltaNetLayer, modeling.Qwen3_5GatedDeltaNet):
    pass


def tiny_multimodal(config_class: Any, model_class: Any) -> Callable[[Any], Any]:
    """text config -> the multimodal model around that tiny text tower, a one-block vision tower beside it
    (Qwen3.5's and Qwen3.5-MoE's, built from their config and model classes)."""

    def build(text):
        vision = dict(depth=1, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64)
        tokens = dict(image_token_id=300, video_token_id=301, vision_start_token_id=302, vision_end_token_id=303)
        config = config_class(text_config=text.to_dict(), vision_config=vision, **tokens)
        config._attn_implementation = "eager"
        return model_class(config)

    return build


FAMILY = ProductionFamily(
    arch="qwen3_5",
    lm_class=modeling.Qwen3_5ForCausalLM,
    config_class=Qwen3_5TextConfig,
    linear_mixer=HookedQwen3_5GatedDeltaNet,
    layer_types=("linear_attention", "full_attention"),
    tiny=lambda vocab_size: Qwen3_5TextConfig(head_dim=16, **tiny_gdn_fields(vocab_size, LAYERS_3_1)),
    tiny_multimodal=tiny_multimodal(Qwen3_5Config, modeling.Qwen3_5ForConditionalGeneration),
)


class HookedQwen3_5(HookedProductionLM):
    """transformers' Qwen3.5 causal LM with our hooks (models/production/lm.py)."""

    family = FAMILY
