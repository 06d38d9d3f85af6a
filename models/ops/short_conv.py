"""Short causal depthwise convolution, the op: a readable reference and a C kernel (csrc/short_conv.c).

DeltaNet runs q, k and v through a width-W (default 4) causal convolution per channel before the
delta rule, so each token's key already mixes in its W - 1 predecessors:

    y[t, d] = act( sum_{w=0}^{W-1} weight[d, 0, w] * x[t - (W - 1) + w, d] + bias[d] ),  x[<0] = 0

Tap w = W - 1 multiplies the current token (torch's `conv1d` is a cross-correlation, the same
convention fla's Triton kernel follows); weight is [D, 1, W] as fla's, bias [D] or None, act = SiLU
or none. `short_conv` picks the C kernel for CPU tensors (forward and backward in one pass each; bf16
and fp16 computed in fp32 and cast back) and torch's conv1d otherwise; the module is models/layers/short_conv.py.
"""

from __future__ import annotations

import ctypes
from typing import Optional

import torch
import torch.nn.functional as F
from einops import rearrange
from torch.autograd.function import once_differentiable

from deltalens.models.ops.native import library, pointer

__all__ = ["short_conv", "short_conv_ref"]


def _kernels():
    """models/ops/csrc/short_conv.c, or None (then the torch conv1d runs)."""
    lib = library("short_conv")
    if lib is not None and lib.short_conv_forward.argtypes is None:
        sizes = [ctypes.c_int64] * 5
        lib.short_conv_forward.argtypes = [ctypes.c_void_p] * 5 + sizes
        lib.short_conv_backward.argtypes = [ctypes.c_void_p] * 8 + sizes
        lib.short_conv_forward.restype = lib.short_conv_backward.restype = None
    return lib


class _NativeShortConv(torch.autograd.Function):
    """Conv + SiLU in one C pass each way: the torch path's conv1d, its backward and the SiLU are
    a fifth of a small DeltaNet's training step on the CPU; this is ~10x less."""

    @staticmethod
    def forward(ctx, x, weight, bias, silu: bool):
        B, T, D = x.shape
        x, wt = x.contiguous(), weight.reshape(D, -1).t().contiguous()  # wt [W, D]
        b = None if bias is None else bias.contiguous()
        y, scratch = torch.empty_like(x), x.new_empty(D)
        _kernels().short_conv_forward(*map(pointer, (x, wt, b, y, scratch)), int(silu), B, T, D, wt.shape[0])
        ctx.save_for_backward(x, wt, b)
        ctx.silu, ctx.weight_shape = silu, weight.shape
        return y

    @staticmethod
    @once_differentiable  # the C backward builds no graph: a second derivative must fail loudly
    def backward(ctx, dy):
        x, wt, b = ctx.saved_tensors
        B, T, D = x.shape
        dy = dy.contiguous()
        dz, dx = torch.empty_like(x), torch.empty_like(x)
        dwt = torch.zeros_like(wt)
        db = None if b is None else torch.zeros_like(b)
        _kernels().short_conv_backward(
            *map(pointer, (x, wt, b, dy, dz, dx, dwt, db)), int(ctx.silu), B, T, D, wt.shape[0]
        )
        return dx, dwt.t().reshape(ctx.weight_shape), db, None


def short_conv_ref(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, activation: Optional[str] = "silu"
) -> torch.Tensor:
    """Readable reference: x (B, T, D), weight (D, 1, W) -> (B, T, D), an explicit sum over taps."""
    _, T, _ = x.shape
    W = weight.shape[-1]
    y = torch.zeros_like(x, dtype=torch.float32)
    for w in range(W):
        shift = W - 1 - w  # tap w looks `shift` tokens back
        if shift >= T:
            continue
        shifted = F.pad(x.float(), (0, 0, shift, 0))[:, :T]  # x[t - shift], zeros before the start
        y = y + shifted * weight[:, 0, w].float()
    if bias is not None:
        y = y + bias.float()
    if activation in ("silu", "swish"):
        y = F.silu(y)
    return y.to(x.dtype)


def short_conv(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], silu: bool, padding: int
) -> torch.Tensor:
    """x (B, T, D), weight (D, 1, W) -> (B, T, D): the C kernel for fp32 CPU tensors, else torch's conv1d."""
    T = x.shape[1]
    on_cpu = all(t is None or t.device.type == "cpu" for t in (x, weight, bias))
    native = on_cpu and T > 0 and {x.dtype, weight.dtype} <= {torch.float32, torch.bfloat16, torch.float16}
    if native and x.shape[-1] == weight.shape[0] and _kernels():  # else conv1d explains a bad shape
        if x.dtype == torch.float32 == weight.dtype:
            return _NativeShortConv.apply(x, weight, bias, silu)
        # bf16 / fp16 on a CPU: the C kernel in fp32 and back costs less than torch's low-precision conv1d
        b = None if bias is None else bias.float()
        return _NativeShortConv.apply(x.float(), weight.float(), b, silu).to(x.dtype)
    # padding = W - 1 on both sides; keeping the first T outputs makes it causal.
    y = F.conv1d(rearrange(x, "b t d -> b d t"), weight, bias, padding=padding, groups=weight.shape[0])
    y = rearrange(y[..., :T], "b d t -> b t d")
    return F.silu(y) if silu else y
