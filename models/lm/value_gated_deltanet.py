"""HookedValueGatedDeltaNet: DeltaNet with a value-side gate on its state (deltalens's own family, no fla
counterpart), S_t = (I - beta_t k_t k_t^T) S_{t-1} Diag(gamma_t) + beta_t k_t v_t^T, gamma_t in (0, 1)^{d_v}.

The language model is models/lm/delta_lm.py's (fla's module tree, TransformerLens hook names), the mixer
models/layers/value_gated_mixer.py's, the kernels models/ops/value_gated_delta_rule.py's. Its parameters are
DeltaNet's plus `vg_proj` / `vg_bias` per layer, so an fla DeltaNet's weights load into it with the gate
fresh (nothing moves the other way). Config: `ValueGatedDeltaNetConfig`, fla's DeltaNetConfig field names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from deltalens.core.errors import DeltalensError
from deltalens.models.io.config_from_dict import config_from_dict
from deltalens.models.layers.value_gated_mixer import ValueGatedDeltaNetMixer
from deltalens.models.lm.own_config import OwnConfigLM

__all__ = ["HookedValueGatedDeltaNet", "ValueGatedDeltaNetConfig"]


@dataclass
class ValueGatedDeltaNetConfig:
    """A value-gated DeltaNet; the names are fla's DeltaNetConfig's."""

    vocab_size: int = 64  # set it from the tokenizer
    hidden_size: int = 64  # d_model
    num_hidden_layers: int = 2
    num_heads: int = 4
    expand_k: float = 1.0  # d_k per head = hidden_size * expand_k / num_heads
    expand_v: float = 1.0
    allow_neg_eigval: bool = True  # beta in [0, 2]
    value_gate_bias: float = 5.0  # the gate's bias at init: gamma = sigmoid(5) ~ 0.993 (about DeltaNet)
    use_beta: bool = True
    use_gate: bool = False  # output gate
    use_short_conv: bool = True
    conv_size: int = 4
    qk_activation: str = "silu"
    qk_norm: str = "l2"
    hidden_ratio: Optional[int] = 4  # MLP width / d_model
    intermediate_size: Optional[int] = None
    hidden_act: str = "swish"
    norm_eps: float = 1e-6
    initializer_range: float = 0.02
    tie_word_embeddings: bool = False
    pad_token_id: Optional[int] = None
    max_position_embeddings: int = 2048  # no limit for a recurrence; what cfg.n_ctx reports

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_heads", "conv_size", "num_hidden_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DeltalensError(f"value-gated DeltaNet {name} must be a positive integer, got {value!r}")
        bias = self.value_gate_bias
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -30 <= bias <= 30:
            raise DeltalensError(
                f"value_gate_bias must be a number in [-30, 30] (the gate's logit at init), got {bias!r}"
            )


def value_gated_config_from_dict(config: dict[str, Any]) -> ValueGatedDeltaNetConfig:
    return config_from_dict(ValueGatedDeltaNetConfig, config, "value_gated_deltanet")


class HookedValueGatedDeltaNet(OwnConfigLM):
    """Value-gated DeltaNet language model with TransformerLens hooks (module docstring)."""

    mixer_class = ValueGatedDeltaNetMixer
    arch = "value_gated_deltanet"
