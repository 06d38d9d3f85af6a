"""Qwen3-Next (transformers `qwen3_next`): Gated DeltaNet layers and gated softmax-attention layers, with
mixture-of-experts MLPs (a router, experts and a shared expert), beta in [0, 1].

Its delta-rule layer fuses q, k, v and the output gate z into one projection (in_proj_qkvz) and beta's
and the decay's logits into another (in_proj_ba), both grouped by key head; transformers'
`fix_query_key_value_ordering` ungroups them, and we call it for every piece we read.
"""

from __future__ import annotations

import torch
from transformers.models.qwen3_next import modeling_qwen3_next as modeling
from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig

from deltalens.models.production.family import LAYERS_3_1, ProductionFamily, tiny_gdn_fields
from deltalens.models.production.hooked_gdn import HookedGatedDeltaNetLayer
from deltalens.models.production.lm import HookedProductionLM

__all__ = ["FAMILY", "HookedQwen3Next", "HookedQwen3NextGatedDeltaNet"]


class HookedQwen3NextGatedDeltaNet(HookedGatedDeltaNetLayer, modeling.Qwen3NextGatedDeltaNet):
    conv_forward = staticmethod(modeling.causal_conv1d_forward)
    mask_padding = staticmethod(modeling.apply_mask_to_padding_states)

    def _pieces(self, x: torch.Tensor):  # q, k, v, z (B, T, H, d), b, a (B, T, H_v), ungrouped
        return self.fix_query_key_value_ordering(self.in_proj_qkvz(x), self.in_proj_ba(x))

    @property
    def a_proj(self):  # the decay's logits, under the name our gate code reads
        return lambda x: self._pieces(x)[5]

    def _mixed_qkv(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (p.reshape(*p.shape[:2], -1) for p in self._pieces(x)[:3])
        return torch.cat((q, k, v), dim=-1)

    def _beta_logit(self, x: torch.Tensor) -> torch.Tensor:
        return self._pieces(x)[4]

    def _read_out(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        B, T = x.shape[:2]
        z = self._pieces(x)[3].reshape(-1, self.head_v_dim)
        return self.out_proj(self.norm(o.reshape(-1, self.head_v_dim), z).reshape(B, T, -1))


FAMILY = ProductionFamily(
    arch="qwen3_next",
    lm_class=modeling.Qwen3NextForCausalLM,
    config_class=Qwen3NextConfig,
    linear_mixer=HookedQwen3NextGatedDeltaNet,
    layer_types=("linear_attention", "full_attention"),
    # mixture-of-experts MLPs on every layer: 4 experts, 2 per token, a shared one
    tiny=lambda vocab_size: Qwen3NextConfig(
        head_dim=16,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
        **tiny_gdn_fields(vocab_size, LAYERS_3_1),
    ),  # fmt: skip
)


class HookedQwen3Next(HookedProductionLM):
    """transformers' Qwen3-Next causal LM with our hooks (models/production/lm.py)."""

    family = FAMILY
