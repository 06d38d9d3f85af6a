"""The DeltaNet token mixer with hooks: fla's `fla.layers.DeltaNet` parameters, our forward.

One layer, paper notation (DeltaNet, Yang et al. 2024; negative eigenvalues, Grazzi et al. 2025):

    x                 (B, T, d_model)   the attn_norm'ed residual stream
    q, k, v           q_proj/k_proj/v_proj(x) -> short causal conv (+ SiLU) -> split into heads
                      -> q, k L2-normalised: q_t, k_t (B, T, H, d_k), v_t (B, T, H, d_v)
    beta_logit        b_proj(x)                               (B, T, H)
    beta              lo + (hi - lo) * sigmoid(beta_logit)    (B, T, H); [lo, hi] = [0, 1] by
                      default, [0, 2] with allow_neg_eigval (fla: 2 * sigmoid), or any range per
                      layer and head set by `set_beta_range` (an intervention)
    S_t               (B, H, d_k, d_v)  S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
    z = o_t           S_t^T (q_t / sqrt(d_k))                 (B, T, H, d_v)
    out               o_proj(o_norm(z [, g_proj(x)]))         (B, T, d_model)

Which delta-rule kernel runs is the kernel selector's decision (models/ops/kernel_select.py, its
table), and what happens around it is models/layers/hooked_recurrence.py's, shared by the family:
* nothing asks for the states: `chunk_delta_rule` (fla's Triton kernel on CUDA, ours on CPU);
* `hook_state` has a hook (run_with_cache, run_with_hooks, model.hooks): a kernel that
  materialises every S_t, which is then passed through `hook_state`. If the hook changed any state
  (returned a different tensor or edited it in place), the layer re-runs the recurrence from each
  changed (sequence, step) with `replay_with_state_edits`: the edited S_t is what o_t reads and
  what step t + 1 continues from ("replacement" semantics; exact for patching in states from
  another run). Later hook values for that sequence count only where they too were changed.
* `state_edit` is set (HookedDeltaNet.state_edit): the reference recurrence, token by token, with
  `edit(t, S) -> S` applied after every step (exact per-step semantics, e.g. projecting a subspace
  out of the state at every step); hook_state then shows the edited trajectory, read-only.
The path the latest forward took is `mixer.last_kernel` (a KernelChoice: path name and reason).

Renormalised variant (deltalens extension, config field `state_norm_every` = R, default 0 = off):
after every R-th token each head's state is rescaled to unit Frobenius norm, S_t <- S_t / ||S_t||_F
(`renormalise_state`), on every path above (chunked, with states, recurrence; hook_state shows the
renormalised S_t; state edits come after the renormalisation). o_norm makes the read-out scale
invariant, so this only reweights old state against new writes and stops the state underflowing.
Parameters are fla's, unchanged: weights move freely between plain and renormalised models.
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
from deltalens.models.layers.carry import Carry, conv_qkv, keep_final, keep_last, replay_kept, start_state
from deltalens.models.layers.head_results import HeadWeightViews
from deltalens.models.layers.hooked_recurrence import HookedRecurrenceMixin, Recurrence
from deltalens.models.layers.rms_norm import RMSNorm, RMSNormGated
from deltalens.models.layers.short_conv import ShortConvolution
from deltalens.models.ops.common import StateEdit
from deltalens.models.ops.delta_rule import (
    chunk_delta_rule,
    chunk_delta_rule_with_states,
    delta_rule_recurrence,
    l2_normalize,
    replay_with_state_edits,
)
from deltalens.models.ops.kernel_select import select_kernel_for
from deltalens.models.ops.precision import no_autocast

__all__ = ["DeltaNetMixer"]


class DeltaNetMixer(HeadWeightViews, BetaRangeMixin, HookedRecurrenceMixin, nn.Module):
    """fla `DeltaNet` layer (same parameter names and shapes) with TransformerLens hooks."""

    def __init__(self, config, layer_idx: int) -> None:
        super().__init__()
        d_model = config.hidden_size
        self.layer_idx = layer_idx
        self.num_heads = H = config.num_heads
        self.qk_activation = config.qk_activation
        self.qk_norm = config.qk_norm
        self.use_beta = config.use_beta
        self.use_gate = config.use_gate
        self.use_short_conv = config.use_short_conv
        self.allow_neg_eigval = config.allow_neg_eigval
        if self.qk_activation not in ("silu", "relu", "elu", "identity"):
            raise ValueError(f"qk_activation must be silu, relu, elu or identity, got {self.qk_activation!r}.")
        if self.qk_norm not in ("l2", "sum"):
            raise ValueError(f"qk_norm must be 'l2' or 'sum', got {self.qk_norm!r}.")

        key_dim, value_dim = d_model * config.expand_k, d_model * config.expand_v
        self.key_dim, self.value_dim = round(key_dim), round(value_dim)
        if not (math.isclose(key_dim, self.key_dim) and math.isclose(value_dim, self.value_dim)):
            raise ValueError(f"hidden_size * expand_k/v must be integers, got {key_dim} and {value_dim}.")
        if self.key_dim % H or self.value_dim % H:
            raise ValueError(f"key dim {self.key_dim} and value dim {self.value_dim} must divide by num_heads={H}.")
        self.head_k_dim, self.head_v_dim = self.key_dim // H, self.value_dim // H

        self.q_proj = nn.Linear(d_model, self.key_dim, bias=False)
        self.k_proj = nn.Linear(d_model, self.key_dim, bias=False)
        self.v_proj = nn.Linear(d_model, self.value_dim, bias=False)
        if self.use_beta:
            self.b_proj = nn.Linear(d_model, H, bias=False)
        if self.use_short_conv:
            # fla: SiLU inside the q/k convs only when qk_activation is silu; v's conv always SiLU.
            qk_act = "silu" if self.qk_activation == "silu" else None
            self.q_conv1d = ShortConvolution(self.key_dim, config.conv_size, bias=False, activation=qk_act)
            self.k_conv1d = ShortConvolution(self.key_dim, config.conv_size, bias=False, activation=qk_act)
            self.v_conv1d = ShortConvolution(self.value_dim, config.conv_size, bias=False, activation="silu")
        if self.use_gate:
            self.g_proj = nn.Linear(d_model, self.value_dim, bias=False)
            self.o_norm = RMSNormGated(self.head_v_dim, eps=config.norm_eps)
        else:
            self.o_norm = RMSNorm(self.head_v_dim, eps=config.norm_eps, dtype=torch.float32)
        self.o_proj = nn.Linear(self.value_dim, d_model, bias=False)

        self._init_beta_range(self.allow_neg_eigval)  # beta = lo + (hi - lo) * sigmoid(logit) per head

        self.hook_q = HookPoint()  # (B, T, H, d_k)
        self.hook_k = HookPoint()  # (B, T, H, d_k)
        self.hook_v = HookPoint()  # (B, T, H, d_v)
        if self.use_beta:
            self.hook_beta_logit = HookPoint()  # (B, T, H)
        self.hook_beta = HookPoint()  # (B, T, H)
        self.hook_state = HookPoint()  # (B, T, H, d_k, d_v)
        self.hook_z = HookPoint()  # (B, T, H, d_v)

        self.chunk_size = 64  # tokens per chunk of the torch kernel
        self.use_fla: Optional[bool] = None  # None: fla's kernels on CUDA, ours elsewhere
        self.state_edit: Optional[StateEdit] = None  # set through HookedDeltaNet.state_edit
        self.carry: Optional[Carry] = None  # set while a long sequence runs in chunks (models/lm/chunked.py)
        # Renormalise S to unit Frobenius norm after every state_norm_every-th token (0: never). A
        # deltalens extension read from the config (fla's DeltaNetConfig keeps unknown keys).
        self.state_norm_every = checked_state_norm_every(getattr(config, "state_norm_every", None))

    # ---- forward ---------------------------------------------------------------------------

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Projections, short conv, activation, head split and q/k normalisation, as fla's layer."""
        if self.use_short_conv:
            q, k, v = conv_qkv(self, x)
        else:
            q, k = self.q_proj(x), self.k_proj(x)
            if self.qk_activation == "silu":
                q, k = F.silu(q), F.silu(k)
            v = F.silu(self.v_proj(x))
        q = rearrange(q, "b t (h d) -> b t h d", h=self.num_heads)  # (B, T, H, d_k)
        k = rearrange(k, "b t (h d) -> b t h d", h=self.num_heads)
        v = rearrange(v, "b t (h d) -> b t h d", h=self.num_heads)  # (B, T, H, d_v)
        if self.qk_activation == "relu":
            q, k = q.relu(), k.relu()
        elif self.qk_activation == "elu":
            q, k = F.elu(q) + 1.0, F.elu(k) + 1.0
        if self.qk_norm == "sum":
            q = F.normalize(q.float(), p=1, dim=-1, eps=1e-6).to(q.dtype)
            k = F.normalize(k.float(), p=1, dim=-1, eps=1e-6).to(k.dtype)
        else:
            # fla normalises inside its kernel (use_qk_l2norm_in_kernel); we do it here so that
            # hook_q / hook_k show exactly the vectors the recurrence uses.
            q, k = l2_normalize(q), l2_normalize(k)
        return q, k, v

    def _beta(self, x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        if not self.use_beta:
            # fla: beta = 1 (x2 with allow_neg_eigval), i.e. sigmoid(+inf): the top of the range.
            hi = self.beta_hi.to(like.dtype)
            return hi.expand(like.shape[0], like.shape[1], self.num_heads).clone()
        return self._in_range(self.hook_beta_logit(self.b_proj(x)))  # (B, T, H)

    def _delta_rule(self, q, k, v, beta) -> torch.Tensor:
        """o (B, T, H, d_v): the recurrence, computing S_t only when something asks for it."""
        R, C = self.state_norm_every, self.chunk_size
        S0 = start_state(self.carry, self.state_edit, R)

        def reference(edit: Optional[StateEdit]):
            o, _, states = delta_rule_recurrence(q, k, v, beta, edit=edit, renorm_every=R)
            return o, states

        def with_states(kernel):
            o, _, states = chunk_delta_rule_with_states(
                q, k, v, beta, chunk_size=C, renorm_every=R, kernel=kernel, initial_state=S0
            )
            return o, keep_last(self.carry, states)

        def with_state_rows(kernel, rows):  # only the (b, t) rows' S_t; the final state kept for a carry
            o, final, states = chunk_delta_rule_with_states(
                q, k, v, beta, chunk_size=C, renorm_every=R, kernel=kernel, initial_state=S0, rows=rows,
                output_final_state=self.carry is not None,
            )  # fmt: skip
            return keep_final(self.carry, o, final), states

        def read_out(states):  # o_t = S_t^T (q_t / sqrt(d_k)), in fp32 under autocast too
            with no_autocast():
                return torch.einsum("bthkv,bthk->bthv", states.float(), q.float() * q.shape[-1] ** -0.5).to(q.dtype)

        return self._run_recurrence(
            Recurrence(
                select=lambda **flags: select_kernel_for(
                    q, k, v, beta, initial_state=S0, renorm_every=R, use_fla=self.use_fla, **flags
                ),
                reference=reference,
                fast=lambda kernel: keep_final(
                    self.carry,
                    *chunk_delta_rule(
                        q,
                        k,
                        v,
                        beta,
                        chunk_size=C,
                        use_fla=self.use_fla,
                        renorm_every=R,
                        kernel=kernel,
                        initial_state=S0,
                        output_final_state=self.carry is not None,
                    ),
                ),
                with_states=with_states,
                replay=lambda original, seen: replay_kept(
                    self.carry, *replay_with_state_edits(q, k, v, beta, original, seen, chunk_size=C, renorm_every=R)
                ),
                read_out=read_out,
                with_state_rows=with_state_rows,
            )
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, d_model) -> (B, T, d_model)
        q, k, v = self._qkv(x)
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        beta = self.hook_beta(self._beta(x, like=q))  # (B, T, H)
        # in the residual stream's dtype: a hook that returned q in another dtype changes nothing after it
        o = self.hook_z(self._mix(x, q, k, v, beta).to(x.dtype))  # (B, T, H, d_v)
        if self.carry is not None:
            self.carry.tokens += x.shape[1]
        return self._read_out(o, x)

    def _mix(self, x: torch.Tensor, q, k, v, beta) -> torch.Tensor:
        """o (B, T, H, d_v) from the hooked inputs; a variant with more inputs reads them off x here, after beta."""
        return self._delta_rule(q, k, v, beta)

    def _read_out(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # (..., H, d_v) -> (..., d_model)
        """o_proj(o_norm(o [, g_proj(x)])): per head, then linear (models/layers/head_results.py splits it)."""
        if self.use_gate:
            o = self.o_norm(o, rearrange(self.g_proj(x), "... (h d) -> ... h d", h=self.num_heads))
        else:
            o = self.o_norm(o)
        return self.o_proj(rearrange(o, "... h d -> ... (h d)"))


def checked_state_norm_every(every) -> int:
    """The config's state_norm_every (None = 0 = off), refused unless a whole number >= 0."""
    every = 0 if every is None else every
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise DeltalensError(
            f"state_norm_every must be a non-negative integer (tokens between state renormalisations, "
            f"0 = off), got {every!r}"
        )
    return every
