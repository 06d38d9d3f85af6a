"""The Gated DeltaNet and DeltaProduct token mixers with hooks: fla's `fla.layers.GatedDeltaNet` and
`fla.layers.GatedDeltaProduct` parameters, our forward (kernels: models/ops/gated_delta_rule.py).

One layer, paper notation (n = n_h Householder factors per token; Gated DeltaNet is n = 1 with decay):

    x                 (B, T, d_model)   the attn_norm'ed residual stream
    q_t               q_proj -> short conv + SiLU -> heads -> L2 norm          (B, T, H, d_k)
    k_{t,j}, v_{t,j}  k_proj / v_proj -> short conv + SiLU -> (n h d) split -> keys L2-normalised
                                                                            (B, T, H, n, d_k / d_v)
    beta_{t,j}        lo + (hi - lo) * sigmoid(b_proj(x)); [0, 1], or [0, 2] with allow_neg_eigval
    alpha_t           exp(g_t), g_t = -exp(A_log) * softplus(a_proj(x) + dt_bias): the decay gate
                      (Gated DeltaNet always; DeltaProduct with use_forget_gate)
    S_t               alpha_t S_{t-1}, then n delta updates (models/ops/gated_delta_rule.py)
    z = o_t           S_t^T (q_t / sqrt(d_k))                                   (B, T, H, d_v)
    out               o_proj(o_norm(z [, g_proj(x)]))

Grouped value heads (Gated DeltaNet's num_v_heads = r * num_heads): q and k are repeated r times
(fla's GVA), so every hook has the value heads as its head axis, the heads of the recurrence.

Hooks (shapes for DeltaProduct; Gated DeltaNet's have no factor axis n): hook_q (B, T, H, d_k),
hook_k (B, T, H, n, d_k), hook_v (B, T, H, n, d_v), hook_beta_logit / hook_beta (B, T, H, n),
hook_gate (B, T, H) = alpha_t, hook_state (B, T, H, d_k, d_v) after each token's last factor
(computed only when asked for), hook_z (B, T, H, d_v). A hook that edits beta, the gate or the
state changes everything after it; an edited S_t replaces the state the recurrence continues
from (the layer re-runs from each changed step, chunked between them). Interventions:
`set_beta_range` per head and factor, `set_gate_range` (clamp alpha_t into [lo, hi]; hi = lo = 1
switches forgetting off).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange
from transformer_lens.hook_points import HookPoint

from deltalens.core.errors import DeltalensError
from deltalens.models.layers.beta_range import BetaRangeMixin, Index
from deltalens.models.layers.carry import Carry, keep_final, keep_last, replay_kept, silu_qkv, start_state
from deltalens.models.layers.head_results import HeadWeightViews
from deltalens.models.layers.hooked_recurrence import HookedRecurrenceMixin, Recurrence
from deltalens.models.layers.rms_norm import RMSNorm, RMSNormGated
from deltalens.models.layers.short_conv import ShortConvolution
from deltalens.models.ops.common import StateEdit, l2_normalize
from deltalens.models.ops.gated_delta_rule import (
    chunk_gated_delta_rule,
    deinterleave,
    gated_delta_rule_recurrence,
    interleave,
    replay_gated_with_state_edits,
)
from deltalens.models.ops.kernel_select import select_kernel_for

__all__ = ["GatedDeltaNetMixer", "DeltaProductMixer"]


def ranged_gate(mixer: Any, g: torch.Tensor) -> torch.Tensor:
    """g_t = log alpha_t (B, T, H[, d_k]) fp32 clamped into the mixer's gate range (gate_lo, gate_hi per head),
    then through its hook_gate, shown as alpha_t: where a hook changed alpha (returned another tensor, or edited
    it in place) the recurrence takes the log of its values, floored at fp32's tiniest (a zero gate stays finite)."""
    lo, hi = mixer.gate_lo, mixer.gate_hi
    if bool((lo > 0).any() or (hi < 1).any()):
        spread = (1,) * (g.ndim - 3)  # KDA's per-channel g under a per-head range
        g = torch.clamp(g, min=lo.log().view(*lo.shape, *spread), max=hi.log().view(*hi.shape, *spread))
    if not mixer.hook_gate.has_hooks():  # nothing can edit it (and inference tensors have no _version)
        return g
    alpha = g.exp()
    version = alpha._version
    seen = mixer.hook_gate(alpha)
    if seen is not alpha or alpha._version != version:  # a hook edited the gate: use its values
        return seen.float().clamp_min(torch.finfo(torch.float32).tiny).log()
    return g


class _GatedDeltaMixer(HeadWeightViews, BetaRangeMixin, HookedRecurrenceMixin, nn.Module):
    """The shared layer; subclasses read their fla config into the fields below."""

    fla_operation = "gated_delta_rule"
    factor_axis = False  # hooks and the beta range have a factor axis (DeltaProduct) or not (Gated DeltaNet)

    def __init__(
        self,
        config,
        layer_idx: int,
        *,
        n_factors: int,
        use_decay: bool,
        use_output_gate: bool,
        gate_activation: str,
        num_v_heads: Optional[int],
    ) -> None:
        super().__init__()
        d_model = config.hidden_size
        self.layer_idx = layer_idx
        self.n_factors = n = n_factors
        self.use_decay, self.use_output_gate = bool(use_decay), bool(use_output_gate)
        self.allow_neg_eigval = getattr(config, "allow_neg_eigval", False)  # Comba's config has no such field
        self.use_short_conv = config.use_short_conv
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise DeltalensError(f"num_householder must be a whole number >= 1 (reflections per token), got {n}.")
        H = config.num_heads
        HV = num_v_heads if num_v_heads is not None else H
        if HV % H:
            raise DeltalensError(f"num_v_heads={HV} must be a multiple of num_heads={H} (grouped value heads).")
        self.num_qk_heads, self.num_heads = H, HV  # num_heads: heads of the recurrence
        self.head_k_dim = config.head_dim
        head_v = config.head_dim * config.expand_v
        if not math.isclose(head_v, round(head_v)):
            raise DeltalensError(f"head_dim * expand_v must be a whole number (the value size per head), got {head_v}.")
        self.head_v_dim = round(head_v)
        self.key_dim, self.value_dim = H * self.head_k_dim, HV * self.head_v_dim

        self.q_proj = nn.Linear(d_model, self.key_dim, bias=False)
        self.k_proj = nn.Linear(d_model, self.key_dim * n, bias=False)
        self.v_proj = nn.Linear(d_model, self.value_dim * n, bias=False)
        self.b_proj = nn.Linear(d_model, HV * n, bias=False)
        if self.use_decay:
            self.a_proj = nn.Linear(d_model, HV, bias=False)
            # fla's initialisation: A ~ U(0, 16), dt ~ logU(1e-3, 1e-1) stored as softplus^-1(dt)
            # (drawn through nn.init, the same numbers as Tensor.uniform_ / torch.rand, so that loading skips them)
            self.A_log = nn.Parameter(nn.init.uniform_(torch.empty(HV), 0, 16).log())
            u = nn.init.uniform_(torch.empty(HV))
            dt = torch.exp(u * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp(min=1e-4)
            self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
            self.A_log._no_weight_decay = self.dt_bias._no_weight_decay = True
        if self.use_short_conv:
            self.q_conv1d = ShortConvolution(self.key_dim, config.conv_size, bias=False, activation="silu")
            self.k_conv1d = ShortConvolution(self.key_dim * n, config.conv_size, bias=False, activation="silu")
            self.v_conv1d = ShortConvolution(self.value_dim * n, config.conv_size, bias=False, activation="silu")
        if self.use_output_gate:
            self.g_proj = nn.Linear(d_model, self.value_dim, bias=False)
            self.o_norm = RMSNormGated(self.head_v_dim, eps=config.norm_eps, activation=gate_activation)
        else:
            self.o_norm = RMSNorm(self.head_v_dim, eps=config.norm_eps, dtype=torch.float32)
        self.o_proj = nn.Linear(self.value_dim, d_model, bias=False)

        # Interventions: buffers, so they follow .to(device) but stay out of state_dict.
        # beta range per head ([H]) or per head and factor ([H, n], DeltaProduct): the hook's shape
        self._init_beta_range(self.allow_neg_eigval)
        self.register_buffer("gate_lo", torch.zeros(HV), persistent=False)
        self.register_buffer("gate_hi", torch.ones(HV), persistent=False)

        self.hook_q = HookPoint()  # (B, T, H, d_k)
        self.hook_k = HookPoint()  # (B, T, H[, n], d_k)
        self.hook_v = HookPoint()  # (B, T, H[, n], d_v)
        self.hook_beta_logit = HookPoint()  # (B, T, H[, n])
        self.hook_beta = HookPoint()  # (B, T, H[, n])
        if self.use_decay:
            self.hook_gate = HookPoint()  # (B, T, H): alpha_t = exp(g_t)
        self.hook_state = HookPoint()  # (B, T, H, d_k, d_v)
        self.hook_z = HookPoint()  # (B, T, H, d_v)

        self.chunk_size = 64
        self.use_fla: Optional[bool] = None
        self.state_edit: Optional[StateEdit] = None
        self.carry: Optional[Carry] = None  # set while a long sequence runs in chunks (models/lm/chunked.py)

    # ---- interventions ---------------------------------------------------------------------

    def set_gate_range(self, lo: float, hi: float, head: Index = None) -> None:
        """Clamp the decay alpha_t into [lo, hi] (0 <= lo <= hi <= 1) for `head` (None = all)."""
        if not self.use_decay:
            raise DeltalensError("this layer has no decay gate (a DeltaProduct built with use_forget_gate=False).")
        if not 0.0 <= lo <= hi <= 1.0:
            raise DeltalensError(f"the gate range needs 0 <= lo <= hi <= 1, got [{lo}, {hi}].")
        heads = self._heads(head)
        self.gate_lo[heads] = float(lo)
        self.gate_hi[heads] = float(hi)

    def reset_gate_range(self) -> None:
        self.gate_lo.fill_(0.0)
        self.gate_hi.fill_(1.0)

    # ---- forward ---------------------------------------------------------------------------

    def _qkv(self, x: torch.Tensor):
        """q (B, T, H, d_k); k, v (B, T, H, n, d): projections, conv + SiLU, heads, L2 norm, GVA repeat."""
        q, k, v = silu_qkv(self, x)
        q = l2_normalize(rearrange(q, "b t (h d) -> b t h d", d=self.head_k_dim))
        k = l2_normalize(rearrange(k, "b t (n h d) -> b t h n d", n=self.n_factors, d=self.head_k_dim))
        v = rearrange(v, "b t (n h d) -> b t h n d", n=self.n_factors, d=self.head_v_dim)
        repeat = self.num_heads // self.num_qk_heads
        if repeat > 1:
            q, k = q.repeat_interleave(repeat, dim=2), k.repeat_interleave(repeat, dim=2)
        return q, k, v

    def _show(self, hook: HookPoint, x: torch.Tensor) -> torch.Tensor:
        """Pass a per-factor tensor [..., n(, d)] through a hook, without the factor axis for Gated DeltaNet."""
        if self.factor_axis:
            return hook(x)
        return hook(x.squeeze(3)).unsqueeze(3)

    def _log_decay(self, x: torch.Tensor) -> Optional[torch.Tensor]:
        """g_t = log alpha_t (B, T, H) in fp32 through hook_gate and the gate clamp, or None."""
        if not self.use_decay:
            return None
        return ranged_gate(self, -self.A_log.float().exp() * F.softplus(self.a_proj(x).float() + self.dt_bias.float()))

    def _delta_rule(self, q, k, v, beta, g) -> torch.Tensor:
        """o (B, T, H, d_v); the per-token states S_t only when a hook or an edit asks for them."""
        n, C = self.n_factors, self.chunk_size
        qi, ki, vi, bi, gi = interleave(q, k, v, beta, g)  # one sub-token per factor
        S0 = start_state(self.carry, self.state_edit)

        def reference(edit: Optional[StateEdit]):  # a per-token edit on the sub-token recurrence
            per_token = None if edit is None else (lambda s, S: edit(s // n, S) if s % n == n - 1 else S)
            o, _, states = gated_delta_rule_recurrence(qi, ki, vi, bi, gi, edit=per_token)
            return deinterleave(o, n), deinterleave(states, n)

        def with_states(kernel):  # states (B, T, H, d_k, d_v): after each token's last factor
            o, _, states = chunk_gated_delta_rule(
                qi, ki, vi, bi, gi, chunk_size=C, with_states=True, state_every=n, kernel=kernel, initial_state=S0
            )
            return deinterleave(o, n), keep_last(self.carry, states)

        def with_state_rows(kernel, rows):  # only the (b, token) rows' S_t; the final state kept for a carry
            o, final, states = chunk_gated_delta_rule(
                qi, ki, vi, bi, gi, chunk_size=C, with_states=True, state_every=n, kernel=kernel, initial_state=S0,
                rows=rows, output_final_state=self.carry is not None,
            )  # fmt: skip
            return deinterleave(keep_final(self.carry, o, final), n), states

        return self._run_recurrence(
            Recurrence(
                select=lambda **flags: select_kernel_for(
                    qi, ki, vi, bi, gi, initial_state=S0, use_fla=self.use_fla, **flags
                ),
                reference=reference,
                fast=lambda kernel: deinterleave(
                    keep_final(
                        self.carry,
                        *chunk_gated_delta_rule(
                            qi,
                            ki,
                            vi,
                            bi,
                            gi,
                            chunk_size=C,
                            use_fla=self.use_fla,
                            kernel=kernel,
                            initial_state=S0,
                            output_final_state=self.carry is not None,
                        )[:2],
                    ),
                    n,
                ),
                with_states=with_states,
                replay=lambda original, seen: replay_kept(
                    self.carry, *replay_gated_with_state_edits(q, k, v, beta, g, original, seen, chunk_size=C)
                ),
                with_state_rows=with_state_rows,
            )
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, d_model) -> (B, T, d_model)
        q, k, v = self._qkv(x)
        q = self.hook_q(q)
        k, v = self._show(self.hook_k, k), self._show(self.hook_v, v)
        logit = self._show(self.hook_beta_logit, rearrange(self.b_proj(x), "b t (n h) -> b t h n", n=self.n_factors))
        beta = self._show(self.hook_beta, self._in_range(logit))  # (B, T, H, n)
        g = self._log_decay(x)
        # in the residual stream's dtype: a hook that returned q in another dtype changes nothing after it
        o = self.hook_z(self._delta_rule(q, k, v, beta, g).to(x.dtype))  # (B, T, H, d_v)
        if self.carry is not None:
            self.carry.tokens += x.shape[1]
        return self._read_out(o, x)

    def _read_out(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # (..., H, d_v) -> (..., d_model)
        """o_proj(o_norm(o [, g_proj(x)])): per head, then linear (models/layers/head_results.py splits it)."""
        if self.use_output_gate:
            o = self.o_norm(o, rearrange(self.g_proj(x), "... (h d) -> ... h d", d=self.head_v_dim))
        else:
            o = self.o_norm(o)
        return self.o_proj(rearrange(o, "... h d -> ... (h d)"))


class GatedDeltaNetMixer(_GatedDeltaMixer):
    """fla `GatedDeltaNet` layer (same parameter names and shapes) with TransformerLens hooks."""

    def __init__(self, config, layer_idx: int) -> None:
        super().__init__(
            config,
            layer_idx,
            n_factors=1,
            use_decay=True,
            use_output_gate=config.use_gate,
            gate_activation=config.output_gate_activation,
            num_v_heads=config.num_v_heads,
        )


class DeltaProductMixer(_GatedDeltaMixer):
    """fla `GatedDeltaProduct` layer (same parameter names and shapes) with TransformerLens hooks."""

    factor_axis = True

    def __init__(self, config, layer_idx: int) -> None:
        super().__init__(
            config,
            layer_idx,
            n_factors=config.num_householder,
            use_decay=config.use_forget_gate,
            use_output_gate=config.use_output_gate,
            gate_activation="swish",
            num_v_heads=None,
        )
