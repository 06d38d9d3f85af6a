"""HookedM2RNN and HookedDeltaM2RNN: the two fixes the paper's PFSA-SR argument points to, in our block layout.

* HookedM2RNN: every layer's mixer is the non-linear matrix-state recurrence of
  models/layers/m2rnn_mixer.py, S_t = f_t S_{t-1} + (1 - f_t) tanh(S_{t-1} W + k_t v_t^T), o_t = S_t^T q_t.
* HookedDeltaM2RNN: the hybrid the paper closes with ("interleave linear recurrence with periodic
  non-linear normalisation"): DeltaNet layers (models/layers/deltanet_mixer.py, unchanged, beta in
  [0, 2] by default) with every `nonlinear_every`-th layer an M²RNN layer (2 layers: DeltaNet, then
  M²RNN). The non-linear layer is M²RNN rather than an LSTM because it fits the same block (per-head
  q, k, v, a d_k x d_v state, the same hooks), so the hybrid differs from DeltaNet in the recurrence
  only, and tanh bounds its state, which is the renormalisation the linear layers lack.

Both are models/lm/delta_lm.py's language model (fla's module tree: model.embeddings,
model.layers.{l}.attn_norm / attn / mlp_norm / mlp, model.norm, lm_head; pre-norm mixer, then pre-norm
SwiGLU MLP, both residual) with TransformerLens hook names (models/lm/hook_names.py); what differs is
the mixer each layer gets and the config, a dataclass of deltalens's own (no fla counterpart: checkpoints
hold it in the "deltalens" section, as the LSTM's). The hybrid's delta-rule tools (beta ranges, kernels,
state edits) act on its DeltaNet layers (`delta_layers`); asked for an M²RNN layer they say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch.nn as nn

from deltalens.core.errors import DeltalensError
from deltalens.models.architecture import delta_layer_index
from deltalens.models.io.config_from_dict import config_from_dict
from deltalens.models.layers.deltanet_mixer import DeltaNetMixer
from deltalens.models.layers.m2rnn_mixer import M2RNNMixer
from deltalens.models.lm.own_config import OwnConfigLM

__all__ = ["DeltaM2RNNConfig", "HookedDeltaM2RNN", "HookedM2RNN", "M2RNNConfig"]


@dataclass
class M2RNNConfig:
    """An M²RNN language model; field names are fla's DeltaNetConfig's where both have the field."""

    vocab_size: int = 64  # set it from the tokenizer
    hidden_size: int = 64  # d_model
    num_hidden_layers: int = 2
    num_heads: int = 4
    expand_k: float = 1.0  # d_k per head = hidden_size * expand_k / num_heads
    expand_v: float = 1.0  # d_v per head, likewise
    use_short_conv: bool = True  # causal depthwise conv (+ SiLU) on q, k, v, as DeltaNet's
    conv_size: int = 4
    forget_bias: float = 1.0  # initial f_t = sigmoid(1) ~ 0.73: keep most of the state early in training
    hidden_ratio: Optional[int] = 4  # MLP width / d_model
    intermediate_size: Optional[int] = None
    hidden_act: str = "swish"
    norm_eps: float = 1e-6
    initializer_range: float = 0.02
    tie_word_embeddings: bool = False
    pad_token_id: Optional[int] = None
    max_position_embeddings: int = 2048  # no limit for a recurrence; what cfg.n_ctx reports

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_heads", "conv_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DeltalensError(f"{type(self).__name__} {name} must be a positive integer, got {value!r}")
        if isinstance(self.num_hidden_layers, bool) or not isinstance(self.num_hidden_layers, int):
            raise DeltalensError(f"num_hidden_layers must be a whole number, got {self.num_hidden_layers!r}")


@dataclass
class DeltaM2RNNConfig(M2RNNConfig):
    """The hybrid: M2RNNConfig's fields, the DeltaNet layers' (fla's DeltaNetConfig names), and the period."""

    nonlinear_every: int = 2  # layer l is M²RNN when (l + 1) % nonlinear_every == 0; the others DeltaNet
    allow_neg_eigval: bool = True  # DeltaNet layers: beta in [0, 2]
    use_beta: bool = True
    use_gate: bool = False
    qk_activation: str = "silu"
    qk_norm: str = "l2"
    state_norm_every: int = 0  # the renormalised delta rule (models/layers/deltanet_mixer.py); 0 = off

    def __post_init__(self) -> None:
        super().__post_init__()
        every = self.nonlinear_every
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise DeltalensError(
                f"nonlinear_every must be a positive integer (every n-th layer is M²RNN), got {every!r}"
            )

    def is_nonlinear(self, layer: int) -> bool:
        return (layer + 1) % self.nonlinear_every == 0


def m2rnn_config_from_dict(config: dict[str, Any]) -> M2RNNConfig:
    return config_from_dict(M2RNNConfig, config, "m2rnn")


def delta_m2rnn_config_from_dict(config: dict[str, Any]) -> DeltaM2RNNConfig:
    return config_from_dict(DeltaM2RNNConfig, config, "deltanet_m2rnn")


def _hybrid_mixer(config: DeltaM2RNNConfig, layer_idx: int) -> nn.Module:
    """The mixer of one hybrid layer: M²RNN on the period, DeltaNet elsewhere."""
    return M2RNNMixer(config, layer_idx) if config.is_nonlinear(layer_idx) else DeltaNetMixer(config, layer_idx)


class HookedM2RNN(OwnConfigLM):
    """M²RNN language model with TransformerLens hooks (module docstring)."""

    mixer_class = M2RNNMixer
    arch = "m2rnn"

    @property
    def delta_layers(self) -> list[int]:
        """None of its layers runs the delta rule (every one is the non-linear M²RNN)."""
        return []


class HookedDeltaM2RNN(OwnConfigLM):
    """DeltaNet / M²RNN hybrid with TransformerLens hooks (module docstring)."""

    # DeltaBlock calls mixer_class(config, layer_idx); here a function that picks the layer's class
    mixer_class = staticmethod(_hybrid_mixer)  # type: ignore[assignment]
    arch = "deltanet_m2rnn"

    @property
    def delta_layers(self) -> list[int]:
        """The layers that run the delta rule (the others are M²RNN)."""
        return [layer for layer in range(self.config.num_hidden_layers) if not self.config.is_nonlinear(layer)]

    @property
    def nonlinear_layers(self) -> list[int]:
        """The M²RNN layers."""
        return [layer for layer in range(self.config.num_hidden_layers) if self.config.is_nonlinear(layer)]

    def _mixers(self, layer: Optional[int]) -> list[nn.Module]:
        """The DeltaNet mixers (None: all of them), or one layer's, refused in words on an M²RNN layer."""
        if layer is None:
            return [self.model.layers[i].attn for i in self.delta_layers]
        index = delta_layer_index(self, layer, "hybrid is an M²RNN layer (no beta, no delta rule)", "a DeltaNet layer")
        return [self.model.layers[index].attn]
