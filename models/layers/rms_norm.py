"""RMSNorm and gated RMSNorm, parameter-compatible with fla's `RMSNorm` and `FusedRMSNormGated`.

    RMSNorm(x)          = x / sqrt(mean(x^2) + eps) * weight (+ bias)
    RMSNormGated(x, g)  = RMSNorm(x) * act(g),  act = swish/silu (g * sigmoid(g)) or sigmoid

Both compute in fp32 and return x's dtype, as fla's Triton kernels do. DeltaNet uses RMSNorm for
attn_norm / mlp_norm / the final norm (fla's `RMSNorm` or, with `fuse_norm=False`, `nn.RMSNorm`:
same formula, same `weight` key) and, per head on the delta-rule output, `o_norm`: RMSNorm with an
fp32 weight when `use_gate=False`, `FusedRMSNormGated` (swish gate from g_proj) when `use_gate=True`.

`RMSNorm.forward(x, residual, prenorm=True)` mirrors fla's fused pre-norm: it returns
(norm(x + residual), x + residual).
"""

from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["RMSNorm", "RMSNormGated", "rms_norm_ref"]


def rms_norm_ref(
    x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor] = None, eps: float = 1e-5
) -> torch.Tensor:
    """Readable reference: the formula above, in fp32, returned in x's dtype."""
    x32 = x.float()
    y = x32 / torch.sqrt(x32.square().mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


def _rms_norm(x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], eps: float):
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + eps)  # rsqrt: one op instead of sqrt + div
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y


class RMSNorm(nn.Module):
    """fla `RMSNorm`: parameters `weight` [D] (if elementwise_affine) and `bias` [D] (if bias)."""

    def __init__(
        self,
        hidden_size: int,
        elementwise_affine: bool = True,
        bias: bool = False,
        eps: float = 1e-5,
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.hidden_size = hidden_size
        self.elementwise_affine = elementwise_affine
        self.eps = eps
        self.register_parameter("weight", None)
        self.register_parameter("bias", None)
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(hidden_size, **factory))
            if bias:
                self.bias = nn.Parameter(torch.zeros(hidden_size, **factory))

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(
        self, x: torch.Tensor, residual: Optional[torch.Tensor] = None, prenorm: bool = False
    ) -> Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        if residual is not None:
            x = (x.float() + residual.float()).to(x.dtype)  # fla adds the residual in fp32
        y = _rms_norm(x, self.weight, self.bias, self.eps).to(x.dtype)
        return (y, x) if prenorm else y

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, eps={self.eps}"


class RMSNormGated(nn.Module):
    """fla `FusedRMSNormGated`: RMSNorm(x) * act(g); parameter `weight` [D] only (no bias)."""

    def __init__(
        self,
        hidden_size: int,
        elementwise_affine: bool = True,
        eps: float = 1e-5,
        activation: str = "swish",
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> None:
        super().__init__()
        if activation not in ("swish", "silu", "sigmoid"):
            raise ValueError(f"RMSNormGated activation must be 'swish', 'silu' or 'sigmoid', got {activation!r}.")
        self.hidden_size = hidden_size
        self.eps = eps
        self.activation = activation
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        y = _rms_norm(x, self.weight, None, self.eps)
        g32 = g.float()
        gate = F.silu(g32) if self.activation in ("swish", "silu") else torch.sigmoid(g32)
        return (y * gate).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, eps={self.eps}, activation={self.activation}"
