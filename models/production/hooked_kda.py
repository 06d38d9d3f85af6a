"""Our hooks and recurrence inside a transformers Kimi Delta Attention (KDA) layer (Kimi Linear).

As hooked_gdn.py for Gated DeltaNet: the layer keeps transformers' parameters, projections, short
convolution (with its cache), forget gate, gated norm and output projection; only the recurrence is
ours (models/ops/kda.py; on CUDA the plain forward calls fla's KDA kernels), run through the shared
capture / edit / replay logic (models/layers/hooked_recurrence.py) by the gate and recurrence every KDA
layer shares (fla's `kda` family too: models/layers/kda_mixer.py's KDARecurrenceMixin). The decay is per
key channel, which Gated DeltaNet's kernels (one alpha per head) cannot take. Paper notation, one layer:

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

import torch
from transformer_lens.hook_points import HookPoint

from deltalens.models.layers.kda_mixer import KDARecurrenceMixin, select_kda_kernel
from deltalens.models.production.delta_layer import TransformersDeltaLayer

__all__ = ["HookedKimiDeltaAttention", "select_kda_kernel"]


class HookedKimiDeltaAttention(TransformersDeltaLayer, KDARecurrenceMixin):
    """Mixin placed before a transformers KDA class in the bases; the gate and the recurrence are the
    shared KDA layer's (models/layers/kda_mixer.py), as fla's `kda` family has them."""

    allow_neg_eigval = False

    # what the transformers layer this is mixed into provides, and the hooks `adopt` adds, beyond
    # TransformersDeltaLayer's (declared for the type checker; transformers is read as Any)
    hook_q: HookPoint
    hook_k: HookPoint
    hook_v: HookPoint
    hook_beta_logit: HookPoint
    hook_beta: HookPoint

    @classmethod
    def adopt(cls, layer: torch.nn.Module, allow_neg_eigval: bool = False) -> torch.nn.Module:
        """Make the library `layer` an instance of `cls`, keeping its parameters, and give it hooks."""
        layer.__class__ = cls
        layer.num_qk_heads = layer.num_heads  # no grouped value heads in KDA
        layer.head_k_dim = layer.head_v_dim = layer.head_dim
        layer._init_kda_hooks(allow_neg_eigval, device=layer.b_proj.weight.device)
        return layer

    def _qkv_widths(self) -> list[int]:
        return [self.num_heads * self.head_k_dim] * 2 + [self.num_heads * self.head_v_dim]

    # _raw_log_decay(x) -> (B, T, H, d_k) fp32, g_t <= 0: see KDARecurrenceMixin

    # ---- forward ---------------------------------------------------------------------------------

    def forward(self, hidden_states: torch.Tensor, cache=None, attention_mask=None, **kwargs) -> torch.Tensor:
        x, q, k, v = self.inputs(hidden_states, cache, attention_mask, kwargs)
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        beta = self.hooked_beta(x)
        g = self._log_decay(x)  # (B, T, H, d_k) fp32, through hook_gate

        return self.finish(lambda: self._delta_rule(q, k, v, beta, g), cache, x, hidden_states.dtype)
