"""The Transformer baseline's attention forward: fused when nobody watches, real scores when someone does.

TransformerLens's native attention (which the bridge wraps) has two costs we do not want:

* speed: it builds the (B, H, T, T) score and pattern matrices and passes over them about ten times
  per layer in a training step; on a CPU that is memory-bound and costs 8x torch's fused
  `scaled_dot_product_attention` at T = 384 (one thread, forward and backward: 0.67 s vs 0.08 s);
* `hook_attn_scores`: the bridge fires it after the fact with the softmaxed pattern, so a hook there
  neither sees nor edits the scores.

`use_hooked_attention(bridge)` gives each layer's attention this forward, with the same weights,
state dict and module tree:

* in training mode, when no hook reads or edits `hook_pattern` or `hook_attn_scores`: the fused
  kernel (no pattern is built);
* otherwise, with a causal mask and no padding mask or score soft-cap: the explicit computation in
  TransformerLens's order (scores / sqrt(d_head), causal mask to -inf, softmax, pattern, values),
  with `hook_attn_scores` on the masked pre-softmax scores (edits flow into the softmax, as in
  HookedTransformer) and `hook_pattern` on the pattern;
* anything else (padding masks, soft-caps): TransformerLens's own forward.

The fused and explicit paths compute the same function; their floats differ by rounding (~1e-6 on
the logits). Eval mode never takes the fused kernel, so analyses see the explicit path's floats
whether or not they hook anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Optional

import torch
import torch.nn.functional as F
from transformer_lens.model_bridge.sources.native.model import NativeAttention

_fused = True  # off inside `fused_attention(False)`


@contextmanager
def fused_attention(enabled: bool) -> Iterator[None]:
    """Switch the fused training path on or off within the block (benchmarks compare the two)."""
    global _fused
    previous, _fused = _fused, enabled
    try:
        yield
    finally:
        _fused = previous


class HookedNativeAttention(NativeAttention):
    """NativeAttention with the forward above (its instances get this class in place)."""

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.Tensor] = None,
        pattern_fn: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        **kwargs,
    ):
        scores_hook = self.__dict__.get("_scores_hook")  # the bridge's hook_attn_scores (not a submodule)
        if (
            scores_hook is None
            or attention_mask is not None
            or not self.causal
            or self.attn_scores_soft_cap > 0
            or kwargs.get("output_attentions")
        ):
            return super().forward(hidden_states, attention_mask, position_ids, pattern_fn, **kwargs)
        batch, seq, _ = hidden_states.shape
        q, k, v = self._heads(hidden_states, position_ids)
        watched = (
            pattern_fn is None
            or not hasattr(pattern_fn, "has_hooks")
            or pattern_fn.has_hooks()
            or scores_hook.has_hooks()
        )
        if _fused and self.training and not watched:
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / self.scale)
        else:
            mask = self.causal_mask[:seq, :seq]
            scores = (torch.matmul(q, k.transpose(-2, -1)) / self.scale).masked_fill(mask, float("-inf"))
            scores = scores_hook(scores)
            pattern = F.softmax(scores, dim=-1).masked_fill(mask, 0.0)
            if pattern_fn is not None:
                pattern = pattern_fn(pattern)
            attn = torch.matmul(pattern, v)
        # no pattern handed back: the hooks above have fired, and on None the bridge fires none after the fact
        return self.o(attn.transpose(1, 2).reshape(batch, seq, -1)), None

    def _heads(self, hidden_states: torch.Tensor, position_ids: Optional[torch.Tensor]):
        """q, k, v (B, H, T, d_head): projected, rotated (rotary) and repeated for grouped heads."""
        batch, seq, _ = hidden_states.shape
        q = self.q(hidden_states).view(batch, seq, self.n_heads, self.d_head).transpose(1, 2)
        k = self.k(hidden_states).view(batch, seq, self.n_kv_heads, self.d_head).transpose(1, 2)
        v = self.v(hidden_states).view(batch, seq, self.n_kv_heads, self.d_head).transpose(1, 2)
        if self.rotary is not None:
            q, k = self.rotary.apply_rope(q, k, position_ids=position_ids)
        if self.kv_repeats > 1:
            k = k.repeat_interleave(self.kv_repeats, dim=1)
            v = v.repeat_interleave(self.kv_repeats, dim=1)
        return q, k, v


def use_hooked_attention(bridge) -> None:
    """Give every native attention layer of a TransformerBridge `HookedNativeAttention`'s forward."""
    for block in bridge.blocks:
        attention = block.attn.original_component
        if type(attention) is NativeAttention:
            attention.__class__ = HookedNativeAttention
            # a plain attribute, not a submodule: the state dict and module tree stay TransformerLens's
            object.__setattr__(attention, "_scores_hook", block.attn.hook_attn_scores)
