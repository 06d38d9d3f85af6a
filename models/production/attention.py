"""TransformerLens's attention hooks on a production model's softmax-attention layers.

transformers picks each layer's attention function by `config._attn_implementation`; we register
one, "deltalens_eager", that is its eager attention with hook points in between, and point the model
at it. Everything before (projections, q/k norms, rotary, the KV cache) and after (output gate,
o_proj) stays the library's. Hooks, TransformerLens's names and shapes:

    hook_rot_q, hook_rot_k  (batch, pos, head, d_head)   after the norms and rotary (k: key heads)
    hook_v                  (batch, pos, head, d_head)   (value heads)
    hook_attn_scores        (batch, head, query_pos, key_pos)   scaled, masked, before the softmax
    hook_pattern            (batch, head, query_pos, key_pos)
    hook_z                  (batch, pos, head, d_head)   before the output gate and o_proj
"""

from __future__ import annotations

import torch
from transformer_lens.hook_points import HookPoint

__all__ = ["ATTENTION_HOOKS", "IMPLEMENTATION", "add_attention_hooks"]

IMPLEMENTATION = "deltalens_eager"
ATTENTION_HOOKS = ("hook_rot_q", "hook_rot_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z")


def _repeat(x: torch.Tensor, groups: int) -> torch.Tensor:  # (B, H_kv, T, D) -> (B, H_kv * groups, T, D)
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def hooked_eager_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """transformers' eager attention (query (B, H, T, D), ...) with hooks where the module has them."""
    hooked = hasattr(module, "hook_pattern")
    if hooked:
        query = module.hook_rot_q(query.transpose(1, 2)).transpose(1, 2)
        key = module.hook_rot_k(key.transpose(1, 2)).transpose(1, 2)
        value = module.hook_v(value.transpose(1, 2)).transpose(1, 2)
    groups = query.shape[1] // key.shape[1]
    scores = torch.matmul(query, _repeat(key, groups).transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    if hooked:
        scores = module.hook_attn_scores(scores)
    pattern = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    if hooked:
        pattern = module.hook_pattern(pattern)
    pattern = torch.nn.functional.dropout(pattern, p=dropout, training=module.training)
    z = torch.matmul(pattern, _repeat(value, groups)).transpose(1, 2).contiguous()  # (B, T, H, D)
    return (module.hook_z(z) if hooked else z), pattern


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(IMPLEMENTATION, hooked_eager_attention)
    AttentionMaskInterface.register(IMPLEMENTATION, eager_mask)


def add_attention_hooks(hf_model, attention_layers) -> None:
    """Give each attention module its hook points and make the model call the hooked eager attention."""
    _register()
    for module in attention_layers:
        module.is_softmax_attention = True
        for name in ATTENTION_HOOKS:
            setattr(module, name, HookPoint())
    hf_model.set_attn_implementation(IMPLEMENTATION)
