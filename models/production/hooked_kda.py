"""Our hooks and recurrence inside a transformers Kimi Delta Attention (KDA) layer (Kimi Linear).

As hooked_gdn.py for Gated DeltaNet: the layer keeps transformers' parameters, projections, short
convolution (with its cache), forget gate, gated norm and output projection; only the recurrence is
ours (models/ops/kda.py), run through the shared capture / edit / replay logic
(models/layers/hooked_recurrence.py). The decay is per key channel, which Gated DeltaNet's kernels
(one alpha per head) cannot take, hence its own file. Paper notation, one layer:

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

from deltalens.models.layers.beta_range import BetaRangeMixin
from deltalens.models.layers.carry import Carry, keep_final, keep_last, replay_kept, start_state
from deltalens.models.layers.gated_delta_mixer import _GatedDeltaMixer
from deltalens.models.layers.hooked_recurrence import HookedRecurrenceMixin, Recurrence
from deltalens.models.ops.common import StateEdit, l2_normalize
from deltalens.models.ops.kda import chunk_kda, kda_recurrence, replay_kda_with_state_edits
from deltalens.models.ops.kernel_select import CHUNKED, CHUNKED_STATES, REFERENCE, REPLAY, KernelChoice

__all__ = ["HookedKimiDeltaAttention", "select_kda_kernel"]


def select_kda_kernel(wants_states: bool = False, state_edit: bool = False, hook_edited: bool = False) -> KernelChoice:
    """KDA's path: the kernel selector's rules (models/ops/kernel_select.py) where KDA has a kernel; the
    chunked torch kernel everywhere else (no C or fla KDA path here yet)."""
    if state_edit:
        return KernelChoice(REFERENCE, "a state_edit is set: token by token, edit(t, S) after every step")
    if hook_edited:
        return KernelChoice(REPLAY, "hook_state changed states: re-run from each changed step, with states between")
    if wants_states:
        return KernelChoice(CHUNKED_STATES, "KDA (per-channel decay): the chunked torch kernel with every S_t")
    return KernelChoice(CHUNKED, "KDA (per-channel decay): the chunked torch kernel")


class HookedKimiDeltaAttention(BetaRangeMixin, HookedRecurrenceMixin):
    """Mixin placed before a transformers KDA class in the bases."""

    factor_axis = False
    n_factors = 1
    use_decay = True
    allow_neg_eigval = False
    per_channel_gate = True  # hook_gate is (B, T, H, d_k): readers of the gate check this

    set_gate_range = _GatedDeltaMixer.set_gate_range  # per head, every channel
    reset_gate_range = _GatedDeltaMixer.reset_gate_range

    @classmethod
    def adopt(cls, layer: torch.nn.Module, allow_neg_eigval: bool = False) -> torch.nn.Module:
        """Make the library `layer` an instance of `cls`, keeping its parameters, and give it hooks."""
        layer.__class__ = cls
        layer.allow_neg_eigval = bool(allow_neg_eigval)
        layer.num_qk_heads = layer.num_heads  # no grouped value heads in KDA
        layer.head_k_dim = layer.head_v_dim = layer.head_dim
        device = layer.b_proj.weight.device
        layer._init_beta_range(layer.allow_neg_eigval)
        layer.register_buffer("gate_lo", torch.zeros(layer.num_heads), persistent=False)
        layer.register_buffer("gate_hi", torch.ones(layer.num_heads), persistent=False)
        for name in ("beta_lo", "beta_hi", "gate_lo", "gate_hi"):
            setattr(layer, name, getattr(layer, name).to(device))
        for name in ("hook_q", "hook_k", "hook_v", "hook_beta_logit", "hook_beta", "hook_gate", "hook_state", "hook_z"):
            setattr(layer, name, HookPoint())
        layer.chunk_size = 64
        layer.use_fla = None
        layer.state_edit = None
        layer.carry = None
        layer.last_kernel = None
        return layer

    # ---- what a family supplies ------------------------------------------------------------------

    def _mixed_qkv(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, 3 H d), before the conv
        raise NotImplementedError

    def _beta_logit(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H)
        raise NotImplementedError

    def _raw_log_decay(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H, d_k) fp32, g_t <= 0
        raise NotImplementedError

    def _read_out(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # (B, T, H, d_v) -> (B, T, d_model)
        raise NotImplementedError

    conv_forward: Any = None  # the family's causal_conv1d_forward (reads and updates the conv cache)
    mask_padding: Any = None  # the family's apply_mask_to_padding_states

    # ---- the gate and the recurrence -------------------------------------------------------------

    def _log_decay(self, x: torch.Tensor) -> torch.Tensor:
        """g_t = log alpha_t (B, T, H, d_k) in fp32 through the gate clamp and hook_gate (shown as alpha_t)."""
        g = self._raw_log_decay(x).float()
        if bool((self.gate_lo > 0).any() or (self.gate_hi < 1).any()):
            g = torch.clamp(g, min=self.gate_lo.log()[:, None], max=self.gate_hi.log()[:, None])
        if not self.hook_gate.has_hooks():
            return g
        alpha = g.exp()
        version = alpha._version
        seen = self.hook_gate(alpha)
        if seen is not alpha or alpha._version != version:  # a hook edited the gate: use its values
            g = seen.float().clamp_min(torch.finfo(torch.float32).tiny).log()
        return g

    def _delta_rule(self, q, k, v, beta, g) -> torch.Tensor:
        """o (B, T, H, d_v); the per-token states only when a hook or an edit asks for them."""
        C = self.chunk_size
        S0 = start_state(self.carry, self.state_edit)

        def reference(edit: StateEdit):
            o, _, states = kda_recurrence(q, k, v, beta, g, initial_state=S0, edit=edit)
            return o, states

        def fast(kernel: KernelChoice):
            o, final, _ = chunk_kda(q, k, v, beta, g, initial_state=S0, chunk_size=C)
            return keep_final(self.carry, o, final)

        def with_states(kernel: KernelChoice):
            o, _, states = chunk_kda(q, k, v, beta, g, initial_state=S0, chunk_size=C, with_states=True)
            return o, keep_last(self.carry, states)

        return self._run_recurrence(
            Recurrence(
                select=lambda **flags: select_kda_kernel(**flags),
                reference=reference,
                fast=fast,
                with_states=with_states,
                replay=lambda original, seen: replay_kept(
                    self.carry, *replay_kda_with_state_edits(q, k, v, beta, g, original, seen, chunk_size=C)
                ),
            )
        )

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
