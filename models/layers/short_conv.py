"""Short causal depthwise convolution as a module, parameter-compatible with fla's `ShortConvolution`.

fla's `ShortConvolution` subclasses `nn.Conv1d`; so does this class, so initialisation and
state_dict keys match: `weight` [D, 1, W], `bias` [D] only when `bias=True` (fla's default and
DeltaNet's: no bias). `forward` returns a tensor (not fla's `(y, cache)` tuple): no decoding cache.
The arithmetic (reference, C kernel) is models/ops/short_conv.py.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn

from deltalens.models.ops.short_conv import short_conv, short_conv_ref

__all__ = ["ShortConvolution", "short_conv_ref"]


class ShortConvolution(nn.Conv1d):
    """Causal depthwise conv1d + optional SiLU on [B, T, D] inputs (fla `ShortConvolution` params)."""

    def __init__(
        self,
        hidden_size: int,
        kernel_size: int,
        bias: bool = False,
        activation: Optional[str] = "silu",
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
        **kwargs,  # fla's `backend` / `use_fast_conv1d`: accepted for signature compatibility, unused
    ) -> None:
        super().__init__(
            in_channels=hidden_size,
            out_channels=hidden_size,
            kernel_size=kernel_size,
            padding=kernel_size - 1,
            groups=hidden_size,
            bias=bias,
            device=device,
            dtype=dtype,
        )
        if activation not in (None, "silu", "swish"):
            raise ValueError(f"ShortConvolution supports activation 'silu'/'swish' or None, got {activation!r}.")
        self.hidden_size = hidden_size
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> (B, T, D)
        return short_conv(x, self.weight, self.bias, self.activation is not None, self.padding[0])

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, activation={self.activation}"
