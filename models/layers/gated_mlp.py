"""fla's GatedMLP (SwiGLU), parameter for parameter: the MLP of every delta-rule language model."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["GatedMLP"]


class GatedMLP(nn.Module):
    """fla `GatedMLP` with hidden_act='swish': down_proj(silu(gate_proj(x)) * up_proj(x))."""

    def __init__(
        self,
        hidden_size: int,
        hidden_ratio: Optional[float] = None,
        intermediate_size: Optional[int] = None,
        hidden_act: str = "swish",
    ) -> None:
        super().__init__()
        if hidden_act != "swish":
            raise NotImplementedError(
                f"hidden_act={hidden_act!r} is not implemented by deltalens; use 'swish' (fla's default)."
            )
        if hidden_ratio is None:
            hidden_ratio = 4
        if intermediate_size is None:
            # fla: 2/3 * hidden_ratio * hidden_size, rounded up to a multiple of 256
            intermediate_size = int(hidden_size * hidden_ratio * 2 / 3)
            intermediate_size = 256 * ((intermediate_size + 256 - 1) // 256)
        self.intermediate_size = intermediate_size
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, d_model) -> (B, T, d_model)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
