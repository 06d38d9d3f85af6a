"""Kimi Delta Attention (KDA) with hooks: the gate and recurrence every KDA layer shares, and fla's
`fla.layers.KimiDeltaAttention` (fla's `kda` model) with its parameters and our forward.

KDA is the gated delta rule with a decay per key channel (kernels: models/ops/kda.py, one copy for every
KDA layer here; on CUDA the plain forward runs fla's chunk_kda / fused_recurrent_kda: `select_kda_kernel`).
One layer of fla's, paper notation:

    x                 (B, T, d_model)   the attn_norm'ed residual stream
    q_t, k_t          q_proj / k_proj -> short conv + SiLU -> heads -> L2 norm         (B, T, H, d_k)
    v_t               v_proj -> short conv + SiLU -> heads                             (B, T, H, d_v)
    beta_t            lo + (hi - lo) * sigmoid(b_proj(x)); [0, 1], or [0, 2] with allow_neg_eigval
    alpha_t = exp(g)  g_t = -exp(A_log) * softplus(f_proj(x) + dt_bias), PER KEY CHANNEL (B, T, H, d_k);
                      with lower_bound: g_t = lower_bound * sigmoid(exp(A_log) * (f_proj(x) + dt_bias))
    S_t               (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} + beta_t k_t v_t^T
    z = o_t           S_t^T (q_t / sqrt(d_k))                                          (B, T, H, d_v)
    out               o_proj(o_norm(z, g_proj(x)))  (RMSNorm times a sigmoid gate)

f_proj and g_proj are low-rank (d_model -> d_v -> ...). Grouped value heads (num_v_heads = r * num_heads):
q and k are repeated r times, as fla's kernels do, so every hook has the value heads as its head axis.
Hooks: hook_q, hook_k (B, T, H, d_k), hook_v (B, T, H, d_v), hook_beta_logit / hook_beta (B, T, H),
hook_gate (B, T, H, d_k) = alpha_t (Gated DeltaNet's name and meaning, one more axis), hook_state
(B, T, H, d_k, d_v) on demand, hook_z (B, T, H, d_v); edits to beta, the gate or a state change what follows.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange
from transformer_lens.hook_points import HookPoint

from deltalens.core.errors import DeltalensError
from deltalens.models.layers.beta_range import BetaRangeMixin
from deltalens.models.layers.carry import Carry, silu_qkv, start_state
from deltalens.models.layers.chunked_recurrence import chunked_recurrence
from deltalens.models.layers.gated_delta_mixer import _GatedDeltaMixer, ranged_gate
from deltalens.models.layers.head_results import HeadWeightViews
from deltalens.models.layers.hooked_recurrence import HookedRecurrenceMixin
from deltalens.models.layers.rms_norm import RMSNormGated
from deltalens.models.layers.short_conv import ShortConvolution
from deltalens.models.ops.common import l2_normalize
from deltalens.models.ops.fla_kernels import fla_kda
from deltalens.models.ops.kda import chunk_kda, kda_recurrence, replay_kda_with_state_edits
from deltalens.models.ops.kernel_select import (
    CHUNKED,
    FLA_CHUNK,
    FLA_RECURRENT,
    KernelChoice,
    select_kernel_for,
    select_torch_chunked,
)

__all__ = ["KDAMixer", "KDARecurrenceMixin", "select_kda_kernel"]

KDA_TORCH = "KDA (per-channel decay)"  # how the chunked path's reason names it
KDA_HOOKS = ("hook_q", "hook_k", "hook_v", "hook_beta_logit", "hook_beta", "hook_gate", "hook_state", "hook_z")


def select_kda_kernel(
    q, k, v, beta, g, initial_state=None, use_fla=None, wants_states=False, state_edit=False, hook_edited=False
) -> KernelChoice:
    """KDA's path: the kernel selector's rules (models/ops/kernel_select.py, gated) with KDA's kernels. On CUDA
    with fla (use_fla None or True), the plain forward runs fla's KDA: its chunk kernel for bf16 / fp16 and
    for fp32 with a gradient, its fused recurrent kernel for fp32 inference and, as fla's own KDA layer does,
    for inference on T <= 64 tokens. States (fla's kernels return none), edits and replays, and every device
    without fla, run our chunked torch kernel (no C kernel of KDA)."""
    if state_edit or hook_edited or wants_states:
        return select_torch_chunked(KDA_TORCH, wants_states, state_edit, hook_edited)
    if q.shape[1] == 0:
        return KernelChoice(CHUNKED, "an empty sequence: nothing to run")
    choice = select_kernel_for(q, k, v, beta, g, initial_state=initial_state, use_fla=use_fla, native=False)
    if choice.path not in (FLA_CHUNK, FLA_RECURRENT):
        return select_torch_chunked(KDA_TORCH)
    needs_grad = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v, beta, g))
    if choice.path == FLA_CHUNK and not needs_grad and q.shape[1] <= 64:
        return KernelChoice(FLA_RECURRENT, f"CUDA, T = {q.shape[1]} <= 64, no gradient: as fla's KDA layer")
    return KernelChoice(choice.path, f"fla's KDA: {choice.reason}")


class KDARecurrenceMixin(HeadWeightViews, BetaRangeMixin, HookedRecurrenceMixin):
    """The gate (through hook_gate and its clamp) and the recurrence (through hook_state) of a KDA layer,
    whichever library's parameters it holds; a layer supplies `_raw_log_decay` and calls `_init_kda_hooks`."""

    fla_operation = "kda"

    factor_axis = False
    n_factors = 1
    use_decay = True
    per_channel_gate = True  # hook_gate is (B, T, H, d_k): readers of the gate check this

    # what the layer provides (declared for the type checker)
    num_heads: int
    chunk_size: int
    use_fla: Optional[bool]  # None: fla's KDA kernels on CUDA when importable; True: require them; False: never
    carry: Optional[Carry]
    gate_lo: torch.Tensor
    gate_hi: torch.Tensor
    hook_gate: HookPoint

    set_gate_range = _GatedDeltaMixer.set_gate_range  # per head, every channel
    reset_gate_range = _GatedDeltaMixer.reset_gate_range

    def _init_kda_hooks(self, allow_neg_eigval: bool, device: Optional[torch.device] = None) -> None:
        """The beta and gate ranges (buffers outside the state dict), the hook points and the kernel state."""
        self.allow_neg_eigval = bool(allow_neg_eigval)
        self._init_beta_range(self.allow_neg_eigval)
        self.register_buffer("gate_lo", torch.zeros(self.num_heads), persistent=False)
        self.register_buffer("gate_hi", torch.ones(self.num_heads), persistent=False)
        for name in ("beta_lo", "beta_hi", "gate_lo", "gate_hi"):  # beside an adopted layer's parameters
            if device is not None:
                setattr(self, name, getattr(self, name).to(device))
        for name in KDA_HOOKS:
            setattr(self, name, HookPoint())
        self.chunk_size = 64
        self.use_fla = None
        self.state_edit = None
        self.carry = None
        self.last_kernel = None

    def _raw_log_decay(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H, d_k) fp32, g_t <= 0
        raise NotImplementedError

    def _log_decay(self, x: torch.Tensor) -> torch.Tensor:
        """g_t = log alpha_t (B, T, H, d_k) in fp32 through the gate clamp and hook_gate (shown as alpha_t)."""
        return ranged_gate(self, self._raw_log_decay(x).float())

    def _delta_rule(self, q, k, v, beta, g) -> torch.Tensor:
        """o (B, T, H, d_v); the per-token states only when a hook or an edit asks for them."""
        C = self.chunk_size
        S0 = start_state(self.carry, self.state_edit)

        def fla(kernel: KernelChoice):  # CUDA: fla's Triton KDA
            recurrent, wants_final = kernel.path == FLA_RECURRENT, self.carry is not None
            return fla_kda(q, k, v, beta, g, q.shape[-1] ** -0.5, S0, wants_final, C, recurrent=recurrent)

        return self._run_recurrence(
            chunked_recurrence(
                (q, k, v, beta, g),
                carry=self.carry,
                initial_state=S0,
                chunk_size=C,
                recurrence=kda_recurrence,
                chunked=chunk_kda,
                replay=replay_kda_with_state_edits,
                select=lambda **flags: select_kda_kernel(q, k, v, beta, g, S0, use_fla=self.use_fla, **flags),
                fla=fla,
            )
        )


class KDAMixer(KDARecurrenceMixin, nn.Module):
    """fla `KimiDeltaAttention` layer (same parameter names and shapes) with TransformerLens hooks."""

    def __init__(self, config, layer_idx: int) -> None:
        nn.Module.__init__(self)
        d_model = config.hidden_size
        self.layer_idx = layer_idx
        self.use_short_conv = config.use_short_conv
        self.use_gate = True  # the output norm is always gated (fla's KDAConfig has no flag); interp reads it
        self.lower_bound = config.lower_bound
        if config.safe_gate and config.lower_bound is None:
            raise DeltalensError("safe_gate=True needs lower_bound (fla recommends -5): the gate's floor in log space.")
        if self.lower_bound is not None and self.lower_bound >= 0:
            raise DeltalensError(f"lower_bound is the gate's floor in log space, below 0; got {self.lower_bound}.")
        H = config.num_heads
        HV = config.num_v_heads if config.num_v_heads is not None else H
        if HV % H:
            raise DeltalensError(f"num_v_heads={HV} must be a multiple of num_heads={H} (grouped value heads).")
        self.num_qk_heads, self.num_heads = H, HV  # num_heads: heads of the recurrence
        self.head_k_dim = K = config.head_dim
        head_v = K * config.expand_v
        if not math.isclose(head_v, round(head_v)):
            raise DeltalensError(f"head_dim * expand_v must be a whole number (the value size per head), got {head_v}.")
        self.head_v_dim = V = round(head_v)
        self.key_dim, self.value_dim = H * K, HV * V

        self.q_proj = nn.Linear(d_model, self.key_dim, bias=False)
        self.k_proj = nn.Linear(d_model, self.key_dim, bias=False)
        self.v_proj = nn.Linear(d_model, self.value_dim, bias=False)
        if self.use_short_conv:
            self.q_conv1d = ShortConvolution(self.key_dim, config.conv_size, bias=False, activation="silu")
            self.k_conv1d = ShortConvolution(self.key_dim, config.conv_size, bias=False, activation="silu")
            self.v_conv1d = ShortConvolution(self.value_dim, config.conv_size, bias=False, activation="silu")
        # the forget gate: low rank to one log-decay per value head and key channel
        self.f_proj = nn.Sequential(nn.Linear(d_model, V, bias=False), nn.Linear(V, HV * K, bias=False))
        self.b_proj = nn.Linear(d_model, HV, bias=False)
        # fla's initialisation: A ~ U(1, 16) (0 with safe_gate), dt ~ logU(1e-3, 1e-1) stored as softplus^-1(dt),
        # drawn through nn.init so that loading skips them
        A = torch.zeros(HV) if config.safe_gate else nn.init.uniform_(torch.empty(HV), 1, 16).log()
        self.A_log = nn.Parameter(A)
        u = nn.init.uniform_(torch.empty(HV * K))
        dt = torch.exp(u * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log._no_weight_decay = self.dt_bias._no_weight_decay = True
        self.g_proj = nn.Sequential(nn.Linear(d_model, V, bias=False), nn.Linear(V, self.value_dim, bias=True))
        self.o_norm = RMSNormGated(V, eps=config.norm_eps, activation="sigmoid")
        self.o_proj = nn.Linear(self.value_dim, d_model, bias=False)
        self._init_kda_hooks(config.allow_neg_eigval)

    def _raw_log_decay(self, x: torch.Tensor) -> torch.Tensor:
        """fla's gate (fla/ops/kda/gate.py: naive_kda_gate, naive_kda_lowerbound_gate) in fp32."""
        f = rearrange(self.f_proj(x), "b t (h d) -> b t h d", d=self.head_k_dim).float()
        f = f + self.dt_bias.float().view(self.num_heads, self.head_k_dim)
        A = self.A_log.float().exp()[:, None]
        if self.lower_bound is None:
            return -A * F.softplus(f)
        return self.lower_bound * torch.sigmoid(A * f)

    def _qkv(self, x: torch.Tensor):
        """q, k (B, T, HV, d_k), v (B, T, HV, d_v): projections, conv + SiLU, heads, L2 norm, GVA repeat."""
        q, k, v = silu_qkv(self, x)
        q = l2_normalize(rearrange(q, "b t (h d) -> b t h d", d=self.head_k_dim))
        k = l2_normalize(rearrange(k, "b t (h d) -> b t h d", d=self.head_k_dim))
        v = rearrange(v, "b t (h d) -> b t h d", d=self.head_v_dim)
        repeat = self.num_heads // self.num_qk_heads
        if repeat > 1:
            q, k = q.repeat_interleave(repeat, dim=2), k.repeat_interleave(repeat, dim=2)
        return q, k, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, d_model) -> (B, T, d_model)
        q, k, v = self._qkv(x)
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        beta = self.hook_beta(self._in_range(self.hook_beta_logit(self.b_proj(x))))  # (B, T, H)
        g = self._log_decay(x)  # (B, T, H, d_k) fp32, through hook_gate
        o = self.hook_z(self._delta_rule(q, k, v, beta, g).to(x.dtype))  # (B, T, H, d_v)
        if self.carry is not None:
            self.carry.tokens += x.shape[1]
        return self._read_out(o, x)

    def _read_out(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # (..., H, d_v) -> (..., d_model)
        """o_proj(o_norm(o, g_proj(x))): per head, then linear (models/layers/head_results.py splits it)."""
        o = self.o_norm(o, rearrange(self.g_proj(x), "... (h d) -> ... h d", d=self.head_v_dim))
        return self.o_proj(rearrange(o, "... h d -> ... (h d)"))
