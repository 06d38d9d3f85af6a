"""A hybrid model's softmax-attention layer: fla's `fla.layers.attn.Attention` parameters, our forward.

fla's delta-rule LMs take an `attn` config (models/layers/attention_spec.py) that puts causal softmax
attention on some layers in place of the delta-rule mixer. fla runs those layers through flash-attn
(GPU only); this one is pure torch with TransformerLens's hooks, weight for weight fla's:

    q_proj, k_proj, v_proj   (d_model -> H * d_head, H_kv * d_head), bias if qkv_bias
    o_proj                   (H * d_head -> d_model), no bias
    d_head                   hidden_size // num_heads (fla's rule)
    rotary                   RoPE over the whole head (GPT-NeoX halves, base rope_theta), positions from
                             the sequence start; its inverse frequencies are not parameters (as in fla)
    scale                    1 / sqrt(d_head) (flash-attn's default, which fla uses)
    window_size w            each query sees itself and the w - 1 keys before it (flash-attn's
                             window (w - 1, 0)); None: all earlier keys

Hooks (TransformerLens's names and shapes; HookedTransformer's hook_rot_q / hook_rot_k too):

    hook_q                   (B, T, H, d_head)        q_proj(x), before rotary
    hook_k, hook_v           (B, T, H_kv, d_head)     k_proj(x) before rotary, v_proj(x)
    hook_rot_q, hook_rot_k   (B, T, H|H_kv, d_head)   after rotary: what the scores use
    hook_attn_scores         (B, H, T, T_k)           scaled scores, masked keys -inf, before softmax
    hook_pattern             (B, H, T, T_k)           softmax weights (edits re-weight the values)
    hook_z                   (B, T, H, d_head)        per-head output before o_proj

When nobody hooks the scores or the pattern, torch's fused `scaled_dot_product_attention` runs and
no (T, T) matrix is built; otherwise the explicit computation (same function, floats within ~1e-6).
Run in chunks (models/lm/chunked.py) the layer keeps the rotated keys and values seen so far (the
last w - 1 with a window) in its `carry`, so a chunked forward equals the whole one.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange
from transformer_lens.hook_points import HookPoint

from deltalens.core.errors import DeltalensError
from deltalens.models.layers.carry import Carry
from deltalens.models.layers.head_results import HeadWeightViews

__all__ = ["SoftmaxAttention", "apply_rotary", "rotary_tables"]


def rotary_tables(positions: torch.Tensor, dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (T, dim // 2) in fp32 at integer `positions` (T,): fla's RotaryEmbedding tables."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32) / dim))
    freqs = torch.outer(positions.float(), inv_freq)
    return freqs.cos(), freqs.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, T, H, D) rotated by position, GPT-NeoX halves (fla's non-interleaved rotary), in x's dtype."""
    x32 = x.float()
    x1, x2 = x32.chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]  # (T, 1, D/2): broadcast over heads
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class SoftmaxAttention(HeadWeightViews, nn.Module):
    """fla `Attention` (same parameter names and shapes) with TransformerLens hooks, on any device."""

    is_softmax_attention = True  # the delta-rule LM asks this to tell its layers apart

    def __init__(self, hidden_size: int, spec: dict[str, Any], layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = H = spec["num_heads"]
        self.num_kv_heads = H_kv = spec["num_kv_heads"]
        if hidden_size % H:
            raise DeltalensError(
                f"attention layer {layer_idx}: hidden_size {hidden_size} must be a multiple of attn num_heads {H}"
            )
        self.head_dim = D = hidden_size // H
        if D % 2:
            raise DeltalensError(f"attention layer {layer_idx}: rotary needs an even head dim, got {D}")
        self.window_size: Optional[int] = spec["window_size"]
        self.rope_theta = float(spec["rope_theta"])
        bias = spec["qkv_bias"]
        self.q_proj = nn.Linear(hidden_size, H * D, bias=bias)
        self.k_proj = nn.Linear(hidden_size, H_kv * D, bias=bias)
        self.v_proj = nn.Linear(hidden_size, H_kv * D, bias=bias)
        self.o_proj = nn.Linear(H * D, hidden_size, bias=False)

        self.hook_q = HookPoint()  # (B, T, H, D)
        self.hook_k = HookPoint()  # (B, T, H_kv, D)
        self.hook_v = HookPoint()  # (B, T, H_kv, D)
        self.hook_rot_q = HookPoint()  # (B, T, H, D)
        self.hook_rot_k = HookPoint()  # (B, T, H_kv, D)
        self.hook_attn_scores = HookPoint()  # (B, H, T, T_k)
        self.hook_pattern = HookPoint()  # (B, H, T, T_k)
        self.hook_z = HookPoint()  # (B, T, H, D)
        self.carry: Optional[Carry] = None  # set while a long sequence runs in chunks (models/lm/chunked.py)

    def _allowed(self, T: int, past: int, device: torch.device) -> torch.Tensor:
        """(T, past + T) True where query i (at position past + i) may read key j: causal, in the window."""
        query = torch.arange(past, past + T, device=device)[:, None]
        key = torch.arange(past + T, device=device)[None, :]
        allowed = key <= query
        if self.window_size is not None:
            allowed &= query - key < self.window_size
        return allowed

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, d_model) -> (B, T, d_model)
        B, T, _ = x.shape
        D = self.head_dim
        q = self.hook_q(rearrange(self.q_proj(x), "b t (h d) -> b t h d", d=D))
        k = self.hook_k(rearrange(self.k_proj(x), "b t (h d) -> b t h d", d=D))
        v = self.hook_v(rearrange(self.v_proj(x), "b t (h d) -> b t h d", d=D))
        past = self.carry.tokens if self.carry is not None else 0
        cos, sin = rotary_tables(torch.arange(past, past + T, device=x.device), D, self.rope_theta)
        q = self.hook_rot_q(apply_rotary(q, cos, sin))
        k = self.hook_rot_k(apply_rotary(k, cos, sin))
        keys_from = past
        if self.carry is not None:
            k, v, keys_from = self._with_carried(self.carry, k, v, past)
        allowed = self._allowed(T, past, x.device)[:, keys_from:]  # (T, T_k)
        qh, kh, vh = (rearrange(t, "b t h d -> b h t d") for t in (q, k, v))
        if self.num_kv_heads != self.num_heads:  # grouped heads: each kv head serves num_heads / H_kv
            repeats = self.num_heads // self.num_kv_heads
            kh, vh = kh.repeat_interleave(repeats, dim=1), vh.repeat_interleave(repeats, dim=1)
        if self.hook_attn_scores.has_hooks() or self.hook_pattern.has_hooks():
            scores = torch.matmul(qh.float(), kh.float().transpose(-2, -1)) * D**-0.5
            scores = self.hook_attn_scores(scores.masked_fill(~allowed, float("-inf")))
            pattern = self.hook_pattern(torch.softmax(scores, dim=-1).masked_fill(~allowed, 0.0))
            z = torch.matmul(pattern.to(vh.dtype), vh)
        else:
            z = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=allowed, scale=D**-0.5)
        z = self.hook_z(rearrange(z, "b h t d -> b t h d").to(x.dtype))
        return self._read_out(z, x)

    def _read_out(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # (..., H, d_head) -> (..., d_model)
        """o_proj of the heads' outputs: linear (models/layers/head_results.py splits it per head)."""
        del x  # no output gate
        return self.o_proj(rearrange(z, "... h d -> ... (h d)"))

    def _with_carried(
        self, carry: Carry, k: torch.Tensor, v: torch.Tensor, past: int
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """This chunk's keys and values after the carried ones; the carry keeps what later chunks can see."""
        kept_k, kept_v = carry.state if carry.state is not None else (k[:, :0], v[:, :0])
        k, v = torch.cat([kept_k, k], dim=1), torch.cat([kept_v, v], dim=1)
        keys_from = past - kept_k.shape[1]  # the position of the first key held
        keep = k.shape[1] if self.window_size is None else min(k.shape[1], self.window_size - 1)
        carry.state = (k[:, k.shape[1] - keep :].detach(), v[:, v.shape[1] - keep :].detach())
        carry.tokens += k.shape[1] - kept_k.shape[1]
        return k, v, keys_from
