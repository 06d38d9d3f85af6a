"""The M²RNN token mixer: a non-linear recurrence on a matrix state, with DeltaNet's hooks.

M²RNN (Mishra, Tan, Stoica, Gonzalez, Dao 2026, "Non-Linear RNNs with Matrix-Valued States"), per head,
in the layout of our DeltaNet mixer (state S in fla's [K, V] layout, so hook_state has DeltaNet's shape):

    x                 (B, T, d_model)   the attn_norm'ed residual stream
    q, k, v           q_proj/k_proj/v_proj(x) -> short causal conv (+ SiLU) -> split into heads
                      -> q, k L2-normalised: q_t, k_t (B, T, H, d_k), v_t (B, T, H, d_v)
    f                 sigmoid(f_proj(x) + f_bias)      (B, T, H)   the forget gate, in (0, 1)
    W                 (H, d_v, d_v)                    one learned matrix per head, acting on the
                                                       value side: S_{t-1} W is again d_k x d_v
    S_t               f_t S_{t-1} + (1 - f_t) tanh(S_{t-1} W + k_t v_t^T)     (B, H, d_k, d_v)
    z = o_t           S_t^T (q_t / sqrt(d_k))                                  (B, T, H, d_v)
    out               o_proj(o_norm(z))                                        (B, T, d_model)

Unlike the delta rule the transition is not linear in S: tanh bounds every entry of the candidate
state, so the state is renormalised at every token instead of decaying or growing without limit.
That is the property the PFSA-SR argument says a linear RNN lacks.

Hooks (TransformerLens names, shapes as DeltaNet's): hook_q, hook_k, hook_v, hook_gate (f_t, the
fraction of S_{t-1} kept: the decay of hook_names.py), hook_state (S_t after each token; passed
through the hook only when something hooks it), hook_z. A hook that changes hook_state acts as DeltaNet's does
("replacement"): the layer re-runs the recurrence, and at each (sequence, step) the hook changed, the
edited S_t is what o_t reads and what step t + 1 continues from.

A long sequence runs in chunks (models/lm/chunked.py) with `carry` set: each chunk's recurrence starts from
the last one's S_T and its short convolutions from the last inputs, as the delta-rule mixers do.

A plain per-step loop in torch (tiny models; no kernel). Initialisation: W = I per head and f_bias =
forget_bias (config), so that at step 0 the state is mostly kept and the candidate tanh(S W + k v^T)
starts as a saturating accumulator rather than a random map that would wipe the memory.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
from einops import rearrange
from transformer_lens.hook_points import HookPoint

from deltalens.core.errors import DeltalensError
from deltalens.models.layers.carry import Carry, keep_last, silu_qkv, start_state
from deltalens.models.layers.head_results import HeadWeightViews
from deltalens.models.layers.replayed_states import recording
from deltalens.models.layers.rms_norm import RMSNorm
from deltalens.models.layers.short_conv import ShortConvolution
from deltalens.models.ops.common import l2_normalize

__all__ = ["M2RNNMixer", "m2rnn_recurrence"]


def m2rnn_recurrence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    f: torch.Tensor,
    W: torch.Tensor,
    pinned: tuple[torch.Tensor, torch.Tensor] | None = None,
    initial: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """o (B, T, H, d_v) and every S_t (B, T, H, d_k, d_v), from S_0 = `initial` (B, H, d_k, d_v; None: 0).

    q, k (B, T, H, d_k); v (B, T, H, d_v); f (B, T, H) in (0, 1); W (H, d_v, d_v).
    pinned = (mask (B, T) bool, states (B, T, H, d_k, d_v)): where the mask is set, S_t is replaced by
    the given state before it is read and carried on.

    The loop runs head-major, S as (H, B * d_k, d_v), so a step is one batched matmul-add, a tanh and a
    lerp; the inputs are split along time once (indexing them per step would make autograd write a
    full-size gradient per step, quadratic in T).
    """
    B, T, H, d_k = k.shape
    d_v = v.shape[-1]
    write = torch.einsum("bthk,bthv->thbkv", k, v).reshape(T, H, B * d_k, d_v)  # k_t v_t^T, every step
    keep = (1 - f).permute(1, 2, 0)[..., None].expand(T, H, B, d_k).reshape(T, H, B * d_k, 1)
    if pinned is not None:
        mask = pinned[0].T[:, None, :, None].expand(T, H, B, d_k).reshape(T, H, B * d_k, 1).unbind(0)
        fixed = pinned[1].to(k.dtype).permute(1, 2, 0, 3, 4).reshape(T, H, B * d_k, d_v).unbind(0)
    if initial is None:
        S = k.new_zeros(H, B * d_k, d_v)
    else:  # a chunk continuing the one before it (head-major, as the loop runs)
        S = initial.to(k.dtype).permute(1, 0, 2, 3).reshape(H, B * d_k, d_v)
    states = []
    for t, (write_t, keep_t) in enumerate(zip(write.unbind(0), keep.unbind(0))):
        S = torch.lerp(S, torch.tanh(torch.baddbmm(write_t, S, W)), keep_t)  # f S + (1 - f) tanh(S W + k v^T)
        if pinned is not None:
            S = torch.where(mask[t], fixed[t], S)
        states.append(S)
    if not states:
        return v.new_zeros(B, 0, H, d_v), k.new_zeros(B, 0, H, d_k, d_v)
    stacked = torch.stack(states, dim=0).reshape(T, H, B, d_k, d_v).permute(2, 0, 1, 3, 4)  # (B, T, H, d_k, d_v)
    o = torch.einsum("bthkv,bthk->bthv", stacked, q * d_k**-0.5)
    return o, stacked


class M2RNNMixer(HeadWeightViews, nn.Module):
    """One M²RNN layer (module docstring); the config is read by name like DeltaNet's mixer's."""

    use_decay = True  # f_t keeps a fraction of S_{t-1}: models report it as a decay gate (hook_gate)

    def __init__(self, config, layer_idx: int) -> None:
        super().__init__()
        d_model, H = config.hidden_size, config.num_heads
        self.layer_idx = layer_idx
        self.num_heads = H
        self.forget_bias = float(config.forget_bias)
        self.use_short_conv = config.use_short_conv
        self.key_dim, self.value_dim = round(d_model * config.expand_k), round(d_model * config.expand_v)
        if self.key_dim % H or self.value_dim % H:
            raise DeltalensError(
                f"M²RNN key dim {self.key_dim} and value dim {self.value_dim} must divide by num_heads={H}"
            )
        self.head_k_dim, self.head_v_dim = self.key_dim // H, self.value_dim // H

        self.q_proj = nn.Linear(d_model, self.key_dim, bias=False)
        self.k_proj = nn.Linear(d_model, self.key_dim, bias=False)
        self.v_proj = nn.Linear(d_model, self.value_dim, bias=False)
        self.f_proj = nn.Linear(d_model, H, bias=False)
        self.f_bias = nn.Parameter(torch.empty(H))  # its own parameter: the LM's init zeroes Linear biases
        self.W = nn.Parameter(torch.empty(H, self.head_v_dim, self.head_v_dim))
        if self.use_short_conv:
            self.q_conv1d = ShortConvolution(self.key_dim, config.conv_size, bias=False, activation="silu")
            self.k_conv1d = ShortConvolution(self.key_dim, config.conv_size, bias=False, activation="silu")
            self.v_conv1d = ShortConvolution(self.value_dim, config.conv_size, bias=False, activation="silu")
        self.o_norm = RMSNorm(self.head_v_dim, eps=config.norm_eps, dtype=torch.float32)
        self.o_proj = nn.Linear(self.value_dim, d_model, bias=False)
        self.reset_parameters()

        self.hook_q = HookPoint()  # (B, T, H, d_k)
        self.hook_k = HookPoint()  # (B, T, H, d_k)
        self.hook_v = HookPoint()  # (B, T, H, d_v)
        self.hook_gate = HookPoint()  # (B, T, H) f_t
        self.hook_state = HookPoint()  # (B, T, H, d_k, d_v)
        self.hook_z = HookPoint()  # (B, T, H, d_v)
        self.carry: Optional[Carry] = None  # set while a long sequence runs in chunks (models/lm/chunked.py)

    def reset_parameters(self) -> None:
        """W = I per head, f_bias = forget_bias (the module docstring says why)."""
        with torch.no_grad():
            self.W.copy_(torch.eye(self.head_v_dim).expand_as(self.W))
            self.f_bias.fill_(self.forget_bias)

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = (rearrange(a, "b t (h d) -> b t h d", h=self.num_heads) for a in silu_qkv(self, x))
        return l2_normalize(q), l2_normalize(k), v

    def _recurrence(self, q, k, v, f) -> torch.Tensor:
        """o; the states are shown on hook_state only when it has a hook, and an edit there replays."""
        S0 = start_state(self.carry, None)
        o, states = m2rnn_recurrence(q, k, v, f, self.W, initial=S0)
        if not self.hook_state.has_hooks():
            keep_last(self.carry, states)
            return o
        states = states.contiguous()  # a view of the loop's steps; the hook gets a tensor of its own
        with recording(self.hook_state) as replayed:
            version = states._version  # an in-place edit returns None but bumps the version
            seen = self.hook_state(states)
            if seen is states and states._version == version:
                keep_last(self.carry, states)
                return o
            original = m2rnn_recurrence(q, k, v, f, self.W, initial=S0)[1] if seen is states else states
            changed = (seen != original).flatten(2).any(-1)  # (B, T): the steps the hook edited
            o, trajectory = m2rnn_recurrence(q, k, v, f, self.W, pinned=(changed, seen.detach()), initial=S0)
            replayed(trajectory)  # a cache shows the states the layer ran (models/layers/replayed_states.py)
            keep_last(self.carry, trajectory)  # the next chunk continues the edited trajectory
            return o

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, d_model) -> (B, T, d_model)
        q, k, v = self._qkv(x)
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        f = self.hook_gate(torch.sigmoid(self.f_proj(x) + self.f_bias))  # (B, T, H)
        o = self.hook_z(self._recurrence(q, k, v, f).to(x.dtype))  # (B, T, H, d_v)
        if self.carry is not None:
            self.carry.tokens += x.shape[1]
        return self._read_out(o, x)

    def _read_out(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # (..., H, d_v) -> (..., d_model)
        """o_proj(o_norm(o)): per head, then linear (models/layers/head_results.py splits it)."""
        return self.o_proj(rearrange(self.o_norm(o), "... h d -> ... (h d)"))

    # the delta-rule interventions, refused in words on a layer that has no beta
    def set_beta_range(self, *args, **kwargs) -> None:
        raise DeltalensError(
            f"layer {self.layer_idx} is an M²RNN layer: it has no write strength beta to rescale; pick a DeltaNet layer"
        )

    reset_beta_range = set_beta_range
