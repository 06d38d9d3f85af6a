"""The value-gated DeltaNet token mixer: DeltaNet's layer plus a gate on the state's value side.

Paper notation as models/layers/deltanet_mixer.py, plus (kernels: models/ops/value_gated_delta_rule.py)

    gamma_t     sigmoid(vg_proj(x) + vg_bias)              (B, T, H, d_v)   the value gate, in (0, 1)
    S_t         (I - beta_t k_t k_t^T) S_{t-1} Diag(gamma_t) + beta_t k_t v_t^T

The gate scales the state's columns (value channels) before the delta update: the one operation the key-side
transitions (I - beta k k^T) S cannot express, and the one the exact marginal filter's reveal needs (it zeroes
the revealed value's column in every other variable's row). The state is still linear in the past states.
`vg_bias` starts at `value_gate_bias` (default 5: gamma ~ 0.993), so a new model starts as a DeltaNet whose
gate barely depends on its input.

Hooks: DeltaNet's, plus `hook_vgate` (B, T, H, d_v) = gamma_t, after `hook_beta`; a hook that edits it
changes everything after it. Every path of the recurrence (fast, states, reference with a state_edit,
replay after a hook_state edit, a carry between chunks) is DeltaNet's, on the value-gated kernels.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange
from transformer_lens.hook_points import HookPoint

from deltalens.core.errors import DeltalensError
from deltalens.models.layers.carry import keep_final, keep_last, replay_kept, start_state
from deltalens.models.layers.deltanet_mixer import DeltaNetMixer
from deltalens.models.layers.hooked_recurrence import Recurrence
from deltalens.models.ops.common import StateEdit
from deltalens.models.ops.precision import no_autocast
from deltalens.models.ops.value_gated_delta_rule import (
    chunk_value_gated_delta_rule,
    replay_value_gated_with_state_edits,
    select_value_gated_kernel,
    value_gated_delta_rule_recurrence,
)

__all__ = ["ValueGatedDeltaNetMixer"]


class ValueGatedDeltaNetMixer(DeltaNetMixer):
    """DeltaNet's layer (fla's parameter names) plus `vg_proj` and `vg_bias`, with hook_vgate."""

    def __init__(self, config, layer_idx: int) -> None:
        super().__init__(config, layer_idx)
        if self.state_norm_every:
            raise DeltalensError("the value-gated DeltaNet has no renormalised variant; set state_norm_every = 0")
        self.vg_proj = nn.Linear(config.hidden_size, self.value_dim, bias=False)
        # a parameter of its own, not the Linear's bias: the LM's init_weights zeroes Linear biases
        self.vg_bias = nn.Parameter(torch.full((self.value_dim,), float(config.value_gate_bias)))
        self.hook_vgate = HookPoint()  # (B, T, H, d_v): gamma_t in (0, 1)

    def _log_gate(self, x: torch.Tensor) -> torch.Tensor:
        """log gamma_t (B, T, H, d_v) in fp32, through hook_vgate (an edited gate is what the state sees)."""
        logit = rearrange(self.vg_proj(x).float() + self.vg_bias.float(), "b t (h d) -> b t h d", h=self.num_heads)
        if not self.hook_vgate.has_hooks():
            return F.logsigmoid(logit)
        gate = torch.sigmoid(logit)
        version = gate._version
        seen = self.hook_vgate(gate)
        if seen is gate and gate._version == version:
            return F.logsigmoid(logit)
        return seen.float().clamp_min(torch.finfo(torch.float32).tiny).log()

    def _value_gated_rule(self, q, k, v, beta, g) -> torch.Tensor:
        """o (B, T, H, d_v), the states only when something asks for them (as DeltaNet's _delta_rule)."""
        C = self.chunk_size
        S0 = start_state(self.carry, self.state_edit)

        def reference(edit: StateEdit | None):
            o, _, states = value_gated_delta_rule_recurrence(q, k, v, beta, g, initial_state=S0, edit=edit)
            return o, states

        def with_states(kernel):
            o, _, states = chunk_value_gated_delta_rule(
                q, k, v, beta, g, initial_state=S0, chunk_size=C, with_states=True, kernel=kernel
            )
            return o, keep_last(self.carry, states)

        def with_state_rows(kernel, rows):
            o, final, states = chunk_value_gated_delta_rule(
                q, k, v, beta, g, initial_state=S0, chunk_size=C, with_states=True, kernel=kernel, rows=rows,
                output_final_state=self.carry is not None,
            )  # fmt: skip
            return keep_final(self.carry, o, final), states

        def fast(kernel):
            o, final, _ = chunk_value_gated_delta_rule(
                q, k, v, beta, g, initial_state=S0, chunk_size=C, kernel=kernel,
                output_final_state=self.carry is not None,
            )  # fmt: skip
            return keep_final(self.carry, o, final)

        def read_out(states):
            with no_autocast():
                return torch.einsum("bthkv,bthk->bthv", states.float(), q.float() * q.shape[-1] ** -0.5).to(q.dtype)

        return self._run_recurrence(
            Recurrence(
                select=lambda **flags: select_value_gated_kernel(q, k, v, beta, g, initial_state=S0, **flags),
                reference=reference,
                fast=fast,
                with_states=with_states,
                replay=lambda original, seen: replay_kept(
                    self.carry, *replay_value_gated_with_state_edits(q, k, v, beta, g, original, seen, chunk_size=C)
                ),
                read_out=read_out,
                with_state_rows=with_state_rows,
            )
        )

    def _mix(self, x: torch.Tensor, q, k, v, beta) -> torch.Tensor:  # DeltaNet's forward runs this
        g = self._log_gate(x)  # (B, T, H, d_v), through hook_vgate (after hook_beta)
        return self._value_gated_rule(q, k, v, beta, g)
