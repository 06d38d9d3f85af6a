"""The Comba token mixer with hooks: fla's `fla.layers.Comba` parameters, our forward (kernels:
models/ops/comba.py).

One layer of fla's, paper notation (Hu et al., arXiv 2506.02475):

    x                 (B, T, d_model)   the attn_norm'ed residual stream
    k~, q~, v_t       k_proj / q_proj / v_proj -> short conv + SiLU -> heads
    p~                k~ * sigmoid(decay)  (decay: one number per head, "inner decay")
    k_t, p_t          L2 norm of k~ and of p~ (so p_t is k_t up to fla's 1e-6 inside the norm)   (B, T, H, d_k)
    q_t               L2 norm of q~ - D * p~  (D: one number per head, "output correction")      (B, T, H, d_k)
    beta_t            sigmoid(b_proj(x)) in [0, 1]
    alpha_t           exp(g_t), g_t = -exp(A_log) * softplus(a_proj(x) + dt_bias): the decay
    S_t               alpha_t S_{t-1} + beta_t k_t (v_t - S_{t-1}^T p_t)^T
    z = o_t           S_t^T (q_t / sqrt(d_k))                                          (B, T, H, d_v)
    out               o_proj(o_norm(z, g_proj(x)))  (RMSNorm times a sigmoid gate; without use_output_gate, RMSNorm)

The transition's eigenvalue along k_t is alpha_t - beta_t p_t^T k_t: negative where beta_t > alpha_t (about),
with beta in [0, 1]; a reflection (-1) needs alpha_t -> 0, which also wipes the rest of the state.

fla's CombaBlock always builds the layer with the inner decay and the output correction (CombaConfig's
use_inner_decay / use_output_correction / correction_factor do not reach it), and so does this one.
Hooks: Gated DeltaNet's (hook_q, hook_k, hook_v, hook_beta_logit, hook_beta, hook_gate (B, T, H) = alpha_t,
hook_state, hook_z) plus hook_p (B, T, H, d_k), the correction key. Edits to p, beta, the gate or a state
change what follows.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn as nn
from einops import rearrange
from transformer_lens.hook_points import HookPoint

from deltalens.models.layers.carry import silu_qkv, start_state
from deltalens.models.layers.chunked_recurrence import chunked_recurrence
from deltalens.models.layers.gated_delta_mixer import _GatedDeltaMixer
from deltalens.models.ops.comba import chunk_comba, comba_recurrence, replay_comba_with_state_edits
from deltalens.models.ops.common import l2_normalize
from deltalens.models.ops.kernel_select import select_torch_chunked

__all__ = ["CombaMixer"]


class CombaMixer(_GatedDeltaMixer):
    """fla `Comba` layer (same parameter names and shapes) with TransformerLens hooks."""

    def __init__(self, config, layer_idx: int) -> None:
        super().__init__(
            config,
            layer_idx,
            n_factors=1,
            use_decay=True,
            use_output_gate=config.use_output_gate,
            gate_activation="sigmoid",
            num_v_heads=config.num_v_heads,
        )
        self.decay = nn.Parameter(torch.ones(self.num_qk_heads))  # the inner decay: p~ = k~ * sigmoid(decay)
        self.D = nn.Parameter(torch.ones(self.num_qk_heads))  # q~ - D p~; 1 as fla's block builds it (module docstring)
        self.D._no_weight_decay = True
        self.hook_p = HookPoint()  # (B, T, H, d_k)

    def _qkv(self, x: torch.Tensor):
        """q, k, p (B, T, H, d_k), v (B, T, H, 1, d_v): projections, conv + SiLU, heads, correction, L2 norm."""
        q, k, v = silu_qkv(self, x)
        q, k = (rearrange(t, "b t (h d) -> b t h d", d=self.head_k_dim) for t in (q, k))
        p = (k * self.decay[:, None].sigmoid()).to(k.dtype)
        q = (q - self.D[:, None] * p).to(q.dtype)
        q, k, p = l2_normalize(q), l2_normalize(k), l2_normalize(p)
        v = rearrange(v, "b t (h d) -> b t h 1 d", d=self.head_v_dim)
        repeat = self.num_heads // self.num_qk_heads
        if repeat > 1:
            q, k, p = (t.repeat_interleave(repeat, dim=2) for t in (q, k, p))
        return q, k, p, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, d_model) -> (B, T, d_model)
        q, k, p, v = self._qkv(x)
        q, k, p = self.hook_q(q), self.hook_k(k), self.hook_p(p)
        v = self._show(self.hook_v, v)
        beta = self.hook_beta(self._in_range(self.hook_beta_logit(self.b_proj(x))))  # (B, T, H)
        g = self._log_decay(x)  # (B, T, H) fp32, through hook_gate
        o = self.hook_z(self._comba(q, k, v[:, :, :, 0], p, beta, g).to(x.dtype))  # (B, T, H, d_v)
        if self.carry is not None:
            self.carry.tokens += x.shape[1]
        return self._read_out(o, x)

    def _comba(self, q, k, v, p, beta, g) -> torch.Tensor:
        """o (B, T, H, d_v); the per-token states only when a hook or an edit asks for them."""
        return self._run_recurrence(
            chunked_recurrence(
                (q, k, v, p, beta, g),
                carry=self.carry,
                initial_state=start_state(self.carry, self.state_edit),
                chunk_size=self.chunk_size,
                recurrence=comba_recurrence,
                chunked=chunk_comba,
                replay=replay_comba_with_state_edits,
                select=partial(select_torch_chunked, "Comba"),
            )
        )
