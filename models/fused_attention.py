"""Fused attention for training the Transformer baseline.

TransformerLens's native attention builds the (B, H, T, T) score and pattern matrices and passes
over them about ten times per layer in a training step; on a CPU that is memory-bound and costs
8x torch's fused `scaled_dot_product_attention` at T = 384 (one thread, forward and backward:
0.67 s vs 0.08 s). `use_fused_attention(bridge)` gives each layer's attention a forward that takes
the fused kernel in training mode when no hook reads or edits `hook_pattern` or `hook_attn_scores`,
the pattern is causal and unmasked, and there is no score soft-cap. Everywhere else, and always in
eval mode, TransformerLens's own forward runs unchanged, so every analysis (forward, run_with_cache,
hooks, patching) computes the same floats. Same weights, same state dict, same function; the two
paths differ by float rounding (~1e-6 on the logits).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Optional

import torch
import torch.nn.functional as F
from transformer_lens.model_bridge.sources.native.model import NativeAttention

_enabled = True  # off inside `fused_attention(False)`


@contextmanager
def fused_attention(enabled: bool) -> Iterator[None]:
    """Switch the fused path on or off within the block (benchmarks compare the two paths)."""
    global _enabled
    previous, _enabled = _enabled, enabled
    try:
        yield
    finally:
        _enabled = previous


class FusedNativeAttention(NativeAttention):
    """NativeAttention with the fused training path above (its instances get this class in place)."""

    def forward(self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                position_ids: Optional[torch.Tensor] = None,
                pattern_fn: Optional[Callable[[torch.Tensor], torch.Tensor]] = None, **kwargs):
        scores_hook = self.__dict__.get("_scores_hook")  # the bridge's hook_attn_scores (not a submodule)
        watched = (pattern_fn is None or not hasattr(pattern_fn, "has_hooks") or pattern_fn.has_hooks()
                   or scores_hook is None or scores_hook.has_hooks())
        if (not (_enabled and self.training) or watched or attention_mask is not None or not self.causal
                or self.attn_scores_soft_cap > 0 or kwargs.get("output_attentions")):
            return super().forward(hidden_states, attention_mask, position_ids, pattern_fn, **kwargs)
        batch, seq, _ = hidden_states.shape
        q = self.q(hidden_states).view(batch, seq, self.n_heads, self.d_head).transpose(1, 2)
        k = self.k(hidden_states).view(batch, seq, self.n_kv_heads, self.d_head).transpose(1, 2)
        v = self.v(hidden_states).view(batch, seq, self.n_kv_heads, self.d_head).transpose(1, 2)
        if self.rotary is not None:
            q, k = self.rotary.apply_rope(q, k, position_ids=position_ids)
        if self.kv_repeats > 1:
            k = k.repeat_interleave(self.kv_repeats, dim=1)
            v = v.repeat_interleave(self.kv_repeats, dim=1)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / self.scale)
        # no pattern to hand back: nobody asked for it, and the bridge fires no hook on None
        return self.o(attn.transpose(1, 2).reshape(batch, seq, -1)), None


def use_fused_attention(bridge) -> None:
    """Switch every native attention layer of a TransformerBridge to `FusedNativeAttention`."""
    for block in bridge.blocks:
        attention = block.attn.original_component
        if type(attention) is NativeAttention:
            attention.__class__ = FusedNativeAttention
            # a plain attribute, not a submodule: the state dict and module tree stay TransformerLens's
            object.__setattr__(attention, "_scores_hook", block.attn.hook_attn_scores)
