"""Kimi Linear (transformers `kimi_linear`): Kimi Delta Attention (KDA: the gated delta rule with a decay
per key channel) between multi-head latent attention (MLA, no positional encoding) layers, dense and
mixture-of-experts MLPs (a sigmoid top-k router, experts and shared experts), beta in [0, 1]. The released
model is moonshotai/Kimi-Linear-48B-A3B-Instruct.

Its KDA layer has separate q, k, v projections (concatenated for one short conv), a low-rank forget gate
(f_a_proj, f_b_proj, A_log, dt_bias: one log-decay per key channel), beta = sigmoid(b_proj(x)) and a
low-rank output gate (g_a_proj, g_b_proj) into the sigmoid-gated RMSNorm. Both layer kinds sit under
`self_attn`; the hooked recurrence is models/production/hooked_kda.py.
"""

from __future__ import annotations

from typing import Any

import torch
from transformer_lens.hook_points import HookPoint
from transformers.models.kimi_linear import modeling_kimi_linear as modeling
from transformers.models.kimi_linear.configuration_kimi_linear import KimiLinearConfig

from deltalens.core.errors import DeltalensError
from deltalens.models.production.delta_layer import SeparateProjections
from deltalens.models.production.family import LAYERS_3_1, ProductionFamily, check_config
from deltalens.models.production.hooked_kda import HookedKimiDeltaAttention
from deltalens.models.production.lm import HookedProductionLM

__all__ = ["FAMILY", "HookedKimiLinear", "HookedKimiLinearDeltaAttention", "KimiLinearInputs", "hook_router"]


class KimiLinearInputs(SeparateProjections):
    """Where Kimi Linear's KDA layer keeps each input (GLM-5 Next's KDA layer has the same names)."""

    # the library layer's modules (declared for the type checker)
    forget_gate: Any
    g_a_proj: Any
    g_b_proj: Any
    o_norm: Any
    o_proj: Any
    head_v_dim: int

    conv_forward = staticmethod(modeling.causal_conv1d_forward)
    mask_padding = staticmethod(modeling.apply_mask_to_padding_states)

    def _raw_log_decay(self, x: torch.Tensor) -> torch.Tensor:
        return self.forget_gate(x)  # transformers' own: -exp(A_log) * softplus(f_b(f_a(x)) + dt_bias)

    def _read_out(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        B, T = x.shape[:2]
        gate = self.g_b_proj(self.g_a_proj(x)).view(B, T, -1, self.head_v_dim)
        return self.o_proj(self.o_norm(o, gate).reshape(B, T, -1))


class HookedKimiLinearDeltaAttention(KimiLinearInputs, HookedKimiDeltaAttention, modeling.KimiLinearDeltaAttention):
    pass


# config.json fields (the checkpoint's own, which transformers' config does not read) whose other values
# transformers' model would silently not honour: field -> (the value it implements, why)
_IMPLEMENTED: dict[str, tuple[Any, str]] = {
    "mla_use_nope": (True, "transformers' MLA applies no rotary embedding"),
    "moe_router_activation_func": ("sigmoid", "transformers' router scores with a sigmoid"),
    "moe_layer_freq": (1, "transformers places MoE on every layer after first_k_dense_replace"),
}


def _check_kimi(raw: dict[str, Any], where: str = "config.json") -> None:
    """check_config, then the fields transformers' KimiLinear reads no other value of, refused by name."""
    check_config(FAMILY, raw, where)
    for key, (value, why) in _IMPLEMENTED.items():
        if raw.get(key, value) != value:
            raise DeltalensError(f"{where} sets {key}={raw[key]!r}, which deltalens does not open: {why}")
    linear = raw.get("linear_attn_config") or {}
    if linear.get("allow_neg_eigval"):
        raise DeltalensError(
            f"{where} sets linear_attn_config.allow_neg_eigval, which deltalens does not open: transformers' "
            "KDA keeps beta in [0, 1]"
        )


FAMILY = ProductionFamily(
    arch="kimi_linear",
    lm_class=modeling.KimiLinearForCausalLM,
    config_class=KimiLinearConfig,
    linear_mixer=HookedKimiLinearDeltaAttention,
    layer_types=("linear_attention", "full_attention"),
    positions="none",  # its MLA layers use no rotary embedding (mla_use_nope); KDA orders the tokens
    tiny=lambda vocab_size: _tiny(vocab_size),
)


def _tiny(vocab_size: int) -> KimiLinearConfig:
    """KDA (4 heads of 16) and one MLA layer (4 heads, rank-16 latent); a dense MLP on layer 0 and MoE after it
    (4 experts, 2 per token, one shared), as the release's first_k_dense_replace = 1."""
    return KimiLinearConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=96, moe_intermediate_size=16, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=8, num_local_experts=4, num_experts_per_tok=2, n_shared_experts=1,
        linear_head_dim=16, linear_num_heads=4, linear_conv_kernel_dim=4, layer_types=LAYERS_3_1,
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"], bos_token_id=1, pad_token_id=0, eos_token_id=None,
        tie_word_embeddings=False,
    )  # fmt: skip


def hook_router(router: torch.nn.Module) -> None:
    """A MoE router's scores and chosen experts' weights through hook points, as (batch, pos, ...):
    hook_router_logits (experts; what the choice reads, shown only) and hook_router_weights (top-k; what
    the experts' outputs are multiplied by, so an edit there reaches the MLP's output)."""
    router.hook_router_logits = HookPoint()
    router.hook_router_weights = HookPoint()

    def show(module, args, out):
        logits, weights, index = out
        lead = args[0].shape[:-1]
        module.hook_router_logits(logits.reshape(*lead, -1))
        return logits, module.hook_router_weights(weights.reshape(*lead, -1)).reshape(weights.shape), index

    router.register_forward_hook(show)


class HookedKimiLinear(HookedProductionLM):
    """transformers' Kimi Linear causal LM with our hooks (models/production/lm.py), and router hooks on its
    MoE layers: blocks.{l}.mlp.gate.hook_router_logits / hook_router_weights."""

    family = FAMILY

    @classmethod
    def check(cls, fields: dict) -> None:
        _check_kimi(fields)

    def __init__(self, hf_model: torch.nn.Module, family: ProductionFamily) -> None:
        super().__init__(hf_model, family)
        for layer in self.model.layers:
            if isinstance(layer.mlp, modeling.KimiLinearMoE):
                hook_router(layer.mlp.gate)
        self.setup()  # the new hook points under our names
