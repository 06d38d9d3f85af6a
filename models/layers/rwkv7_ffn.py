"""RWKV-7's channel mix (fla's `RWKV7FeedForward`: same parameter names and shapes): the block's MLP, fed
a per-channel blend of this token's input and the previous one's.

    x_k    = x + (x_{t-1} - x) * mu_k             (models/layers/token_shift.py; mu_k is `x_k`)
    out    = value(relu(key(x_k))^2)              key: d_model -> d_ffn, value: d_ffn -> d_model, no biases

d_ffn is intermediate_size, else hidden_ratio * d_model rounded up to a multiple of 32 (fla's rule).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from deltalens.core.errors import DeltalensError
from deltalens.models.layers.carry import Carry
from deltalens.models.layers.token_shift import shifted

__all__ = ["RWKV7FeedForward"]


class RWKV7FeedForward(nn.Module):
    """The channel mix of one RWKV-7 block."""

    def __init__(self, config, layer_idx: int) -> None:
        super().__init__()
        if config.hidden_act != "sqrelu":
            raise DeltalensError(f"RWKV-7's channel mix is relu(x)^2 (hidden_act 'sqrelu'); got {config.hidden_act!r}.")
        d_model = config.hidden_size
        width = config.intermediate_size
        if width is None:
            width = int(d_model * (config.hidden_ratio if config.hidden_ratio is not None else 4))
            width = 32 * ((width + 31) // 32)
        self.layer_idx = layer_idx
        self.intermediate_size = width
        self.x_k = nn.Parameter(torch.zeros(d_model))
        self.key = nn.Linear(d_model, width, bias=False)
        self.value = nn.Linear(width, d_model, bias=False)

    def forward(self, x: torch.Tensor, carry: Optional[Carry] = None) -> torch.Tensor:  # (B, T, d_model)
        mixed = torch.addcmul(x, shifted(x, carry, "ffn") - x, self.x_k)
        return self.value(F.relu(self.key(mixed).float()).square().to(x.dtype))

    @torch.no_grad()
    def init_rwkv7_(self, n_layers: int) -> None:
        """RWKV-7's starting values (fla's recipe): mu_k falls along the channels, more so deeper; value zero."""
        d_model = self.x_k.shape[0]
        ramp = torch.arange(d_model, dtype=torch.float32) / d_model
        self.x_k.copy_(1.0 - ramp.pow((1.0 - self.layer_idx / n_layers) ** 4))
        nn.init.orthogonal_(self.key.weight)
        nn.init.zeros_(self.value.weight)
