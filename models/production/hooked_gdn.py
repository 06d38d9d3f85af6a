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
from typing import Optional

import torch
from transformer_lens.hook_points import HookPoint

from deltalens.models.layers.beta_range import BetaRangeMixin
from deltalens.models.layers.gated_delta_mixer import _GatedDeltaMixer
from deltalens.models.layers.head_results import HeadWeightViews
from deltalens.models.layers.hooked_recurrence import HookedRecurrenceMixin
from deltalens.models.production.delta_layer import TransformersDeltaLayer

__all__ = ["HookedGatedDeltaNetLayer"]


class HookedGatedDeltaNetLayer(TransformersDeltaLayer, HeadWeightViews, BetaRangeMixin, HookedRecurrenceMixin):
    """Mixin placed before a transformers Gated DeltaNet class in the bases."""

    fla_operation = "gated_delta_rule"
    factor_axis = False
    n_factors = 1
    use_decay = True
    allow_neg_eigval = False  # a family whose config allows beta in [0, 2] sets it per layer

    # what the transformers layer this is mixed into provides, and the hooks `adopt` adds, beyond
    # TransformersDeltaLayer's (declared for the type checker; transformers is read as Any)
    key_dim: int
    value_dim: int
    num_k_heads: int
    num_v_heads: int
    hook_q: HookPoint
    hook_k: HookPoint
    hook_v: HookPoint
    hook_beta_logit: HookPoint
    hook_beta: HookPoint

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

    def _qkv_widths(self) -> list[int]:
        return [self.key_dim, self.key_dim, self.value_dim]

    # ---- forward ---------------------------------------------------------------------------------

    def forward(self, hidden_states: torch.Tensor, cache=None, attention_mask=None, **kwargs) -> torch.Tensor:
        x, q, k, v = self.inputs(hidden_states, cache, attention_mask, kwargs)
        repeat = self.num_v_heads // self.num_k_heads
        if repeat > 1:  # grouped value heads: every hook has the recurrence's heads on its head axis
            q, k = q.repeat_interleave(repeat, dim=2), k.repeat_interleave(repeat, dim=2)
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        beta = self.hooked_beta(x)
        g = self._log_decay(x)  # (B, T, H) fp32, through hook_gate

        run = lambda: self._delta_rule(q, k[:, :, :, None], v[:, :, :, None], beta[..., None], g)  # noqa: E731
        return self.finish(run, cache, x, hidden_states.dtype)
