"""Each head's write into the residual stream, and the per-head weight views TransformerLens habits expect.

Every mixer deltalens hooks reads its heads' outputs z (hook_z, (..., H, d_head)) out through `_read_out(z, x)`:
a norm and an output gate acting on each head separately, then one linear projection. So a head's share of the
layer's output is exact without freezing anything by hand: read out z with every other head set to zero, less
the read-out of all zeros (the projection's bias, where there is one). The norms map zero to zero (RMSNorm has no
bias), so the heads' shares and that constant add up to the layer's output:

    attn_out = sum_h head_results(...)[:, h] + read_out(0)

    head_results(mixer, z, x)      (N, H, d_model) at N rows: z (N, H, d_head), x (N, d_model) the mixer's input
    head_weights(mixer)            {"W_Q", "W_K", "W_V", "W_O"} in TransformerLens's shapes, where linear maps exist

W_Q, W_K, W_V are the projections before the short convolution, activation and L2 norm that the delta rule
applies after them (hook_q, hook_k, hook_v show the vectors after); W_O is the output projection per head, acting
after the per-head norm and gate.
"""

from __future__ import annotations

import torch
from einops import rearrange

__all__ = ["HeadWeightViews", "has_read_out", "head_results", "head_weights", "read_out_bias"]


def has_read_out(mixer) -> bool:
    """Whether the mixer's output splits per head here (every deltalens mixer; not a transformers attention
    layer, whose output gate is computed inside transformers' own forward)."""
    return callable(getattr(mixer, "_read_out", None))


@torch.no_grad()
def head_results(mixer, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(N, H, d_model): each head's write into the residual stream at N rows (module docstring)."""
    z3, x3 = z[:, None], x[:, None].to(next(mixer.parameters()).dtype)  # (N, 1, ...): the read-outs' layout
    zero = mixer._read_out(torch.zeros_like(z3), x3)[:, 0]
    out = []
    for head in range(z.shape[1]):
        masked = torch.zeros_like(z3)
        masked[:, :, head] = z3[:, :, head]
        out.append(mixer._read_out(masked, x3)[:, 0] - zero)
    return torch.stack(out, 1)


@torch.no_grad()
def read_out_bias(mixer, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(N, d_model): what the read-out writes with every head at zero (its projection's bias, else zeros)."""
    return mixer._read_out(torch.zeros_like(z[:, None]), x[:, None].to(next(mixer.parameters()).dtype))[:, 0]


def _heads_of(weight: torch.Tensor, heads: int, factors: int, repeat: int) -> torch.Tensor:
    """nn.Linear weight ((n) h d, d_model) -> (heads * repeat, [n,] d_model, d): TransformerLens's W_Q layout, a
    DeltaProduct's factors on an axis of their own, query / key heads repeated over grouped value heads."""
    if factors > 1:
        return rearrange(weight, "(n h d) m -> h n m d", n=factors, h=heads).repeat_interleave(repeat, dim=0)
    return rearrange(weight, "(h d) m -> h m d", h=heads).repeat_interleave(repeat, dim=0)


def head_weights(mixer) -> dict[str, torch.Tensor]:
    """W_Q, W_K, W_V (H, d_model, d_head) and W_O (H, d_head, d_model) of a delta-rule or attention mixer (a
    DeltaProduct's W_K, W_V (H, n, d_model, d_head)), query and key heads repeated over grouped value heads as
    the hooks show them; {} for a mixer whose projections deltalens does not know."""
    heads = getattr(mixer, "num_heads", None)
    if heads is not None and all(hasattr(mixer, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")):  # ours
        qk = getattr(mixer, "num_qk_heads", None) or heads
        kv = getattr(mixer, "num_kv_heads", None)  # softmax attention: grouped key / value heads
        n = getattr(mixer, "n_factors", 1)
        return {
            "W_Q": _heads_of(mixer.q_proj.weight, qk, 1, heads // qk),
            "W_K": _heads_of(mixer.k_proj.weight, kv or qk, n, heads // (kv or qk)),
            "W_V": _heads_of(mixer.v_proj.weight, kv or heads, n, heads // (kv or heads)),
            "W_O": rearrange(mixer.o_proj.weight, "m (h d) -> h d m", h=heads),
        }
    out: dict[str, torch.Tensor] = {}
    mixed = getattr(mixer, "_mixed_qkv", None)
    needed = ("hidden_size", "key_dim", "value_dim", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim")
    if callable(mixed) and all(hasattr(mixer, name) for name in needed) and hasattr(mixer, "out_proj"):
        # a transformers delta-rule layer: its fused projection (linear, no bias), read off on the unit vectors
        d_model = mixer.hidden_size
        with torch.no_grad():
            param = next(mixer.parameters())
            eye = torch.eye(d_model, dtype=param.dtype, device=param.device)[None]
            columns = mixed(eye)[0]  # (d_model, 2 key_dim + value_dim): linear, no bias
        q, k, v = torch.split(columns, [mixer.key_dim, mixer.key_dim, mixer.value_dim], dim=-1)
        repeat = mixer.num_v_heads // mixer.num_k_heads
        out["W_Q"] = rearrange(q, "m (h d) -> h m d", d=mixer.head_k_dim).repeat_interleave(repeat, dim=0)
        out["W_K"] = rearrange(k, "m (h d) -> h m d", d=mixer.head_k_dim).repeat_interleave(repeat, dim=0)
        out["W_V"] = rearrange(v, "m (h d) -> h m d", d=mixer.head_v_dim)
        out["W_O"] = rearrange(mixer.out_proj.weight, "m (h d) -> h d m", d=mixer.head_v_dim)
    return out


class HeadWeightViews:
    """Mixin: `W_Q`, `W_K`, `W_V`, `W_O` on a mixer, TransformerLens's names and shapes (head_weights)."""

    def _view(self, key: str) -> torch.Tensor:
        from deltalens.core.errors import DeltalensError

        found = head_weights(self).get(key)
        if found is None:
            raise DeltalensError(f"{type(self).__name__} has no linear {key} (its projections are not split per head)")
        return found

    W_Q = property(lambda self: self._view("W_Q"), doc="(H, d_model, d_k): the query projection per head")
    W_K = property(lambda self: self._view("W_K"), doc="(H, d_model, d_k): the key projection per head")
    W_V = property(lambda self: self._view("W_V"), doc="(H, d_model, d_v): the value projection per head")
    W_O = property(lambda self: self._view("W_O"), doc="(H, d_v, d_model): the output projection per head")
