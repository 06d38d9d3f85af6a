"""Our hooks and recurrence inside a transformers Gated DeltaNet layer (Qwen3.5, OLMo-Hybrid, ...).

The layer keeps transformers' parameters, projections, short convolution (with its cache), gated
norm and output projection; only the delta rule itself is swapped for deltalens' hooked recurrence
(models/layers/hooked_recurrence.py), so hooks, state edits and kernels behave as on our own Gated
DeltaNet. Paper notation, one layer:

    q_t, k_t        conv + SiLU -> heads -> L2 norm (fp32), repeated over value heads (GVA)   hook_q, hook_k
    v_t             conv + SiLU -> heads                                                      hook_v
    beta_t          lo + (hi - lo) * sigmoid(b(x)); [0, 1], or [0, 2] (OLMo-Hybrid's neg. eigenvalues)
    alpha_t         exp(g_t), g_t = -exp(A_log) * softplus(a(x) + dt_bias)                    hook_gate
    S_t             alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T                 hook_state
    o_t             S_t^T q_t / sqrt(d_k)                                                     hook_z
    out             out_proj(gated_norm(o_t, z_t))

A family module subclasses `HookedGatedDeltaNetLayer` together with its library layer and says where
each input comes from (`_mixed_qkv`, `_beta_logit`, an `a_proj` for the decay, `_read_out`, `conv_forward`).
`adopt(layer)` turns a built library layer into the hooked one in place (same parameters).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import torch
from transformer_lens.hook_points import HookPoint

from deltalens.models.layers.beta_range import BetaRangeMixin
from deltalens.models.layers.carry import Carry
from deltalens.models.layers.gated_delta_mixer import _GatedDeltaMixer
from deltalens.models.layers.head_results import HeadWeightViews
from deltalens.models.layers.hooked_recurrence import HookedRecurrenceMixin
from deltalens.models.ops.common import l2_normalize

__all__ = ["HookedGatedDeltaNetLayer"]


class HookedGatedDeltaNetLayer(HeadWeightViews, BetaRangeMixin, HookedRecurrenceMixin):
    """Mixin placed before a transformers Gated DeltaNet class in the bases."""

    factor_axis = False
    n_factors = 1
    use_decay = True
    allow_neg_eigval = False  # a family whose config allows beta in [0, 2] sets it per layer

    # what the transformers layer this is mixed into provides, and the hooks `adopt` adds (declared for the
    # type checker; transformers is read as Any)
    conv1d: Any
    activation: str
    key_dim: int
    value_dim: int
    head_k_dim: int
    head_v_dim: int
    num_k_heads: int
    num_v_heads: int
    hook_q: HookPoint
    hook_k: HookPoint
    hook_v: HookPoint
    hook_beta_logit: HookPoint
    hook_beta: HookPoint
    hook_z: HookPoint

    # the recurrence and the gate are our Gated DeltaNet's, shared rather than rewritten (its methods need only
    # the attributes above, which this layer has too: typed as plain callables, as the classes are unrelated)
    _delta_rule: Callable[..., torch.Tensor] = _GatedDeltaMixer._delta_rule
    _log_decay: Callable[..., Optional[torch.Tensor]] = _GatedDeltaMixer._log_decay
    set_gate_range = _GatedDeltaMixer.set_gate_range
    reset_gate_range = _GatedDeltaMixer.reset_gate_range

    @classmethod
    def adopt(cls, layer: torch.nn.Module, allow_neg_eigval: bool = False) -> torch.nn.Module:
        """Make the library `layer` an instance of `cls`, keeping its parameters, and give it hooks."""
        layer.__class__ = cls
        layer.allow_neg_eigval = bool(allow_neg_eigval)
        layer.num_heads = layer.num_v_heads  # heads of the recurrence
        layer.num_qk_heads = layer.num_k_heads
        device = layer.A_log.device
        layer._init_beta_range(layer.allow_neg_eigval)
        layer.register_buffer("gate_lo", torch.zeros(layer.num_heads), persistent=False)
        layer.register_buffer("gate_hi", torch.ones(layer.num_heads), persistent=False)
        for name in ("beta_lo", "beta_hi", "gate_lo", "gate_hi"):
            setattr(layer, name, getattr(layer, name).to(device))
        for name in ("hook_q", "hook_k", "hook_v", "hook_beta_logit", "hook_beta", "hook_gate", "hook_state"):
            setattr(layer, name, HookPoint())
        layer.hook_z = HookPoint()
        layer.chunk_size = 64
        layer.use_fla = None
        layer.state_edit = None
        layer.carry = None
        layer.last_kernel = None
        return layer

    # ---- what a family supplies ------------------------------------------------------------------

    def _mixed_qkv(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, 2 key_dim + value_dim), before the conv
        raise NotImplementedError

    def _beta_logit(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H)
        raise NotImplementedError

    def _read_out(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # (B, T, H, d_v) -> (B, T, d_model)
        raise NotImplementedError

    conv_forward: Any = None  # the family's causal_conv1d_forward (reads and updates the conv cache)
    mask_padding: Any = None  # the family's apply_mask_to_padding_states

    # ---- forward ---------------------------------------------------------------------------------

    def forward(self, hidden_states: torch.Tensor, cache=None, attention_mask=None, **kwargs) -> torch.Tensor:
        x = type(self).mask_padding(hidden_states, attention_mask)
        B, T, _ = x.shape
        kwargs.pop("cu_seq_lens_q", None)
        mixed = (
            type(self)
            .conv_forward(
                self.conv1d,
                self._mixed_qkv(x).transpose(1, 2),
                cache,
                self.layer_idx,
                activation=self.activation,
                **kwargs,
            )
            .transpose(1, 2)
        )
        q, k, v = torch.split(mixed, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        # transformers normalises q and k in fp32 inside its kernel (use_qk_l2norm_in_kernel); so do we
        q = l2_normalize(q.reshape(B, T, -1, self.head_k_dim).float())
        k = l2_normalize(k.reshape(B, T, -1, self.head_k_dim).float())
        v = v.reshape(B, T, -1, self.head_v_dim).float()
        repeat = self.num_v_heads // self.num_k_heads
        if repeat > 1:  # grouped value heads: every hook has the recurrence's heads on its head axis
            q, k = q.repeat_interleave(repeat, dim=2), k.repeat_interleave(repeat, dim=2)
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        logit = self.hook_beta_logit(self._beta_logit(x))
        beta = self.hook_beta(self.beta_lo + (self.beta_hi - self.beta_lo) * torch.sigmoid(logit.float()))
        g = self._log_decay(x)  # (B, T, H) fp32, through hook_gate

        start = None if cache is None else cache.get_recurrent_state(self.layer_idx, state_idx=0)
        self.carry = None if cache is None else Carry(state=None if start is None else start.float())
        try:
            o = self._delta_rule(q, k[:, :, :, None], v[:, :, :, None], beta[..., None], g)
            final: Optional[torch.Tensor] = None if self.carry is None else self.carry.state
        finally:
            self.carry = None
        if cache is not None:
            cache.update_recurrent_state(final, self.layer_idx)
        o = self.hook_z(o.to(hidden_states.dtype))  # (B, T, H, d_v)
        return self._read_out(o, x)
