"""What a transformers delta-rule layer (Gated DeltaNet: hooked_gdn.py; KDA: hooked_kda.py) supplies to our
hooked recurrence, and the two ends of its forward that do not depend on the rule:

    inputs(...)     the padding mask, the short convolution over q, k, v (transformers' own, reading and
                    updating its conv cache), the split, and q, k L2-normalised in fp32 (transformers normalises
                    inside its kernel, use_qk_l2norm_in_kernel) with v, as (B, T, heads, d) fp32
    hooked_beta(x)  beta in its range from the family's logit, through hook_beta_logit and hook_beta
    finish(...)     the recurrent state carried in from the cache and back out, hook_z, the read-out

A family module says where each input comes from (`_mixed_qkv`, `_beta_logit`, `_read_out`, `conv_forward`,
`mask_padding`); the rule's layer says how wide q, k and v are (`_qkv_widths`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import torch
from transformer_lens.hook_points import HookPoint

from deltalens.models.layers.carry import Carry
from deltalens.models.ops.common import l2_normalize

__all__ = ["SeparateProjections", "TransformersDeltaLayer"]


class TransformersDeltaLayer:
    """Mixin of the hooked Gated DeltaNet and KDA layers (module docstring)."""

    # what the transformers layer provides (declared for the type checker; transformers is read as Any)
    conv1d: Any
    activation: str
    layer_idx: int
    head_k_dim: int
    head_v_dim: int
    hook_beta_logit: HookPoint
    hook_beta: HookPoint
    hook_z: HookPoint
    beta_lo: torch.Tensor
    beta_hi: torch.Tensor
    carry: Optional[Carry]

    # ---- what a family supplies ------------------------------------------------------------------

    def _mixed_qkv(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, q + k + v widths), before the conv
        raise NotImplementedError

    def _beta_logit(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H)
        raise NotImplementedError

    def _read_out(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # (B, T, H, d_v) -> (B, T, d_model)
        raise NotImplementedError

    def _qkv_widths(self) -> list[int]:  # the rule's layer: [q, k, v] widths of the conv's output
        raise NotImplementedError

    conv_forward: Any = None  # the family's causal_conv1d_forward (reads and updates the conv cache)
    mask_padding: Any = None  # the family's apply_mask_to_padding_states

    # ---- the two ends of the forward -------------------------------------------------------------

    def inputs(self, hidden_states: torch.Tensor, cache, attention_mask, kwargs: dict) -> tuple[torch.Tensor, ...]:
        """(x, q, k, v): the masked input, and q, k, v per head in fp32 (module docstring)."""
        x = type(self).mask_padding(hidden_states, attention_mask)
        B, T, _ = x.shape
        kwargs.pop("cu_seq_lens_q", None)
        conv = type(self).conv_forward
        mixed = conv(self.conv1d, self._mixed_qkv(x).transpose(1, 2), cache, self.layer_idx, activation=self.activation,
                     **kwargs).transpose(1, 2)  # fmt: skip
        q, k, v = torch.split(mixed, self._qkv_widths(), dim=-1)
        q = l2_normalize(q.reshape(B, T, -1, self.head_k_dim).float())
        k = l2_normalize(k.reshape(B, T, -1, self.head_k_dim).float())
        return x, q, k, v.reshape(B, T, -1, self.head_v_dim).float()

    def hooked_beta(self, x: torch.Tensor) -> torch.Tensor:
        """beta (B, T, H) fp32 = lo + (hi - lo) * sigmoid(the family's logit), through hook_beta_logit and hook_beta."""
        logit = self.hook_beta_logit(self._beta_logit(x))
        return self.hook_beta(self.beta_lo + (self.beta_hi - self.beta_lo) * torch.sigmoid(logit.float()))

    def finish(self, run: Callable[[], torch.Tensor], cache, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """`run()` (the recurrence, o as (B, T, H, d_v)) from the cache's state, the final state back into the
        cache, o through hook_z in `dtype`, then the family's read-out."""
        start = None if cache is None else cache.get_recurrent_state(self.layer_idx, state_idx=0)
        self.carry = None if cache is None else Carry(state=None if start is None else start.float())
        try:
            o = run()
            final: Optional[torch.Tensor] = None if self.carry is None else self.carry.state
        finally:
            self.carry = None
        if cache is not None:
            cache.update_recurrent_state(final, self.layer_idx)
        return self._read_out(self.hook_z(o.to(dtype)), x)


class SeparateProjections:
    """Inputs of a layer with one projection each for q, k, v and beta (OLMo-Hybrid's Gated DeltaNet, Kimi Linear's
    and GLM-5 Next's KDA); Qwen3.5's fused in_proj_qkv says its own."""

    q_proj: Any
    k_proj: Any
    v_proj: Any
    b_proj: Any

    def _mixed_qkv(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)

    def _beta_logit(self, x: torch.Tensor) -> torch.Tensor:
        return self.b_proj(x)
