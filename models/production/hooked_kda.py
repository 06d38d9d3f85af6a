"""Our hooks and recurrence inside a transformers Kimi Delta Attention (KDA) layer (Kimi Linear).

As hooked_gdn.py for Gated DeltaNet: the layer keeps transformers' parameters, projections, short
convolution (with its cache), forget gate, gated norm and output projection; only the recurrence is
ours (models/ops/kda.py), run through the shared capture / edit / replay logic
(models/layers/hooked_recurrence.py) by the gate and recurrence every KDA layer shares (fla's `kda`
family too: models/layers/kda_mixer.py's KDARecurrenceMixin). The decay is per key channel, which Gated
DeltaNet's kernels (one alpha per head) cannot take. Paper notation, one layer:

    q_t, k_t        conv + SiLU -> heads -> L2 norm (fp32)                                    hook_q, hook_k
    v_t             conv + SiLU -> heads                                                      hook_v
    beta_t          lo + (hi - lo) * sigmoid(b(x)); [0, 1] (transformers' KDA has no [0, 2])  hook_beta
    alpha_t         exp(g_t), g_t = -exp(A_log) * softplus(f(x) + dt_bias), PER KEY CHANNEL   hook_gate (B, T, H, d_k)
    S_t             (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} + beta_t k_t v_t^T            hook_state
    o_t             S_t^T q_t / sqrt(d_k)                                                     hook_z
    out             out_proj(gated_norm(o_t, gate(x)))

hook_gate is named and means what it does on Gated DeltaNet (the decay alpha_t = exp(g_t), not its log),
with one more axis: (batch, pos, head, d_k) instead of (batch, pos, head). A hook that edits it changes
the recurrence; `set_gate_range(lo, hi, head)` clamps every channel of a head.

A family module subclasses `HookedKimiDeltaAttention` together with its library layer and says where
each input comes from (`_mixed_qkv`, `_beta_logit`, `_raw_log_decay`, `_read_out`, `conv_forward`).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from transformer_lens.hook_points import HookPoint

from deltalens.models.layers.carry import Carry
from deltalens.models.layers.kda_mixer import KDARecurrenceMixin, select_kda_kernel
from deltalens.models.ops.common import l2_normalize

__all__ = ["HookedKimiDeltaAttention", "select_kda_kernel"]


class HookedKimiDeltaAttention(KDARecurrenceMixin):
    """Mixin placed before a transformers KDA class in the bases; the gate and the recurrence are the
    shared KDA layer's (models/layers/kda_mixer.py), as fla's `kda` family has them."""

    allow_neg_eigval = False

    # what the transformers layer this is mixed into provides, and the hooks `adopt` adds (declared for the
    # type checker; transformers is read as Any)
    conv1d: Any
    activation: str
    head_k_dim: int
    head_v_dim: int
    hook_q: HookPoint
    hook_k: HookPoint
    hook_v: HookPoint
    hook_beta_logit: HookPoint
    hook_beta: HookPoint
    hook_z: HookPoint

    @classmethod
    def adopt(cls, layer: torch.nn.Module, allow_neg_eigval: bool = False) -> torch.nn.Module:
        """Make the library `layer` an instance of `cls`, keeping its parameters, and give it hooks."""
        layer.__class__ = cls
        layer.num_qk_heads = layer.num_heads  # no grouped value heads in KDA
        layer.head_k_dim = layer.head_v_dim = layer.head_dim
        layer._init_kda_hooks(allow_neg_eigval, device=layer.b_proj.weight.device)
        return layer

    # ---- what a family supplies ------------------------------------------------------------------

    def _mixed_qkv(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, 3 H d), before the conv
        raise NotImplementedError

    def _beta_logit(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H)
        raise NotImplementedError

    # _raw_log_decay(x) -> (B, T, H, d_k) fp32, g_t <= 0: see KDARecurrenceMixin

    def _read_out(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # (B, T, H, d_v) -> (B, T, d_model)
        raise NotImplementedError

    conv_forward: Any = None  # the family's causal_conv1d_forward (reads and updates the conv cache)
    mask_padding: Any = None  # the family's apply_mask_to_padding_states

    # ---- forward ---------------------------------------------------------------------------------

    def forward(self, hidden_states: torch.Tensor, cache=None, attention_mask=None, **kwargs) -> torch.Tensor:
        x = type(self).mask_padding(hidden_states, attention_mask)
        B, T, _ = x.shape
        kwargs.pop("cu_seq_lens_q", None)
        conv = type(self).conv_forward
        mixed = conv(self.conv1d, self._mixed_qkv(x).transpose(1, 2), cache, self.layer_idx, activation=self.activation,
                     **kwargs).transpose(1, 2)  # fmt: skip
        q, k, v = torch.split(mixed, [self.num_heads * self.head_k_dim] * 2 + [self.num_heads * self.head_v_dim], -1)
        # transformers normalises q and k in fp32 inside its kernel (use_qk_l2norm_in_kernel); so do we
        q = self.hook_q(l2_normalize(q.reshape(B, T, -1, self.head_k_dim).float()))
        k = self.hook_k(l2_normalize(k.reshape(B, T, -1, self.head_k_dim).float()))
        v = self.hook_v(v.reshape(B, T, -1, self.head_v_dim).float())
        logit = self.hook_beta_logit(self._beta_logit(x))
        beta = self.hook_beta(self.beta_lo + (self.beta_hi - self.beta_lo) * torch.sigmoid(logit.float()))
        g = self._log_decay(x)  # (B, T, H, d_k) fp32, through hook_gate

        start = None if cache is None else cache.get_recurrent_state(self.layer_idx, state_idx=0)
        self.carry = None if cache is None else Carry(state=None if start is None else start.float())
        try:
            o = self._delta_rule(q, k, v, beta, g)
            final: Optional[torch.Tensor] = None if self.carry is None else self.carry.state
        finally:
            self.carry = None
        if cache is not None:
            cache.update_recurrent_state(final, self.layer_idx)
        o = self.hook_z(o.to(hidden_states.dtype))  # (B, T, H, d_v)
        return self._read_out(o, x)
