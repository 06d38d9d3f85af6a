"""RWKV-7's time mix with hooks: fla's `fla.layers.RWKV7Attention` parameters, our forward (kernels:
models/ops/rwkv7.py).

One layer of fla's, paper notation (Peng et al., "RWKV-7 Goose", arXiv 2503.14456):

    x                   (B, T, d_model)   the attn_norm'ed residual stream
    x_*                 x + (x_{t-1} - x) * mu_*   for * in r, w, k, v, a, g (token shift; mu_* is `x_*`)
    r_t                 r_proj(x_r)                      the receptance (the query)             hook_q
    w_t                 -exp(-1/2) sigmoid(w_lora(x_w))  per-channel log-decay; exp(w_t) in [0.545, 1]
                                                                                              hook_gate (decay)
    a_t                 lo + (hi - lo) sigmoid(a_lora(x_a)): the in-context learning rate, per key channel,
                        [lo, hi] = [0, 1] as fla's sigmoid (set_beta_range moves it)        hook_beta
    kk_t                L2-normalised k_proj(x_k) * k_k: the removal key                    hook_kk
    k_t                 k_proj(x_k) * (1 + (a_t - 1) * k_a): the write key                   hook_k
    v_t                 v_proj(x_v); beyond layer 0 lerp(v_t, v_first, sigmoid(v_lora(x_v))): the value
                        residual from layer 0's v (hook_v shows v_t after it)                hook_v
    S_t                 (Diag(exp(w_t)) - (kk_t * a_t) kk_t^T) S_{t-1} + k_t v_t^T   (fla's [K, V] layout;
                        RWKV's [V, K] state is S^T: S^T_{t-1} (Diag(w) - kk (kk * a)^T) + v k^T)   hook_state
    o_t                 S_t^T r_t (no 1/sqrt(d_k))                                           hook_o
    z_t                 (GroupNorm_h(o_t) + ((r_t * k_t * r_k) . 1) v_t) * g_lora(x_g): per head, what o_proj
                        reads (TransformerLens's z)                                           hook_z
    out                 o_proj(z)

hook_beta is the learning rate a_t, named beta as in every delta-rule family here, with a key-channel axis:
(B, T, H, d_k), as is hook_gate's decay (KDA's layout). hook_z is TransformerLens's z, not o_t: the group norm,
the bonus term and the gate read x_{t-1} (the token shift) and layer 0's values, which a read-out from z and
x_t alone cannot see, so they are folded into z and the read-out is o_proj alone (per-head writes exact).
Edits to a, the decay, kk, k, v or a state change what follows; layer 0's hook_v edits v_first too.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange
from transformer_lens.hook_points import HookPoint

from deltalens.core.errors import DeltalensError
from deltalens.models.layers.carry import start_state
from deltalens.models.layers.chunked_recurrence import chunked_recurrence
from deltalens.models.layers.kda_mixer import KDARecurrenceMixin
from deltalens.models.layers.token_shift import shifted
from deltalens.models.ops.common import l2_normalize
from deltalens.models.ops.kernel_select import select_torch_chunked
from deltalens.models.ops.rwkv7 import chunk_rwkv7, replay_rwkv7_with_state_edits, rwkv7_recurrence

__all__ = ["LoRA", "RWKV7Mixer"]

LOG_DECAY_FLOOR = -math.exp(-0.5)  # fla's -0.6065...: w_t in [this, 0], the decay exp(w_t) in [0.545, 1]
MIXES = ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g")


class LoRA(nn.Module):
    """fla's LoRA: d_in -> rank -> (activation) -> d_out, the second projection with a bias unless told."""

    def __init__(self, d_in: int, d_out: int, rank: int, activation: Optional[str], bias: bool = True) -> None:
        super().__init__()
        act = {None: nn.Identity, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[activation]()
        self.lora = nn.Sequential(nn.Linear(d_in, rank, bias=False), act, nn.Linear(rank, d_out, bias=bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lora(x)


def _rank(given: Optional[int], scale: float, d_model: int, factor: float = 1.0) -> int:
    """A LoRA's width: the config's, else fla's rule (a multiple of 32, at least 32)."""
    return given if given is not None else max(32, int(round(scale * d_model**0.5 * factor / 32) * 32))


class RWKV7Mixer(KDARecurrenceMixin, nn.Module):
    """fla `RWKV7Attention` layer (same parameter names and shapes) with TransformerLens hooks."""

    def __init__(self, config, layer_idx: int) -> None:
        nn.Module.__init__(self)
        D = config.hidden_size
        K = config.head_dim
        if not K or D % K:
            raise DeltalensError(f"hidden_size={D} must be a multiple of head_dim={K} (RWKV-7's key heads).")
        widths = list(config.value_dim)
        if len(widths) != config.num_hidden_layers or set(widths) != {D}:
            raise DeltalensError(
                f"value_dim must be hidden_size ({D}) on every layer: fla's RWKV7Attention cannot build a wider one "
                f"(its initialisation sizes v_lora's bias by hidden_size); got {widths}."
            )
        self.layer_idx = layer_idx
        self.num_qk_heads = self.num_heads = H = D // K
        self.head_k_dim, self.key_dim, self.value_dim = K, D, widths[layer_idx]
        self.head_v_dim = self.value_dim // H
        self.fuse_norm = bool(config.fuse_norm)
        for name in MIXES:
            setattr(self, name, nn.Parameter(torch.zeros(1, 1, D)))
        self.k_k = nn.Parameter(torch.zeros(D))
        self.k_a = nn.Parameter(torch.zeros(D))
        self.r_k = nn.Parameter(torch.zeros(H, K))
        self.r_proj = nn.Linear(D, D, bias=False)
        self.k_proj = nn.Linear(D, D, bias=False)
        self.v_proj = nn.Linear(D, self.value_dim, bias=False)
        self.o_proj = nn.Linear(self.value_dim, D, bias=False)
        factor = K / 64  # fla's LoRA widths grow with the head size
        self.w_lora = LoRA(D, D, _rank(config.decay_low_rank_dim, 2.5, D, factor), "tanh")
        if layer_idx != 0:
            self.v_lora = LoRA(D, self.value_dim, _rank(config.v_low_rank_dim, 1.7, D, factor), None)
        self.a_lora = LoRA(D, D, _rank(config.a_low_rank_dim, 2.5, D, factor), None)
        self.g_lora = LoRA(D, self.value_dim, _rank(config.gate_low_rank_dim, 5, D), "sigmoid", bias=False)
        self.g_norm = nn.GroupNorm(H, self.value_dim, eps=K * config.norm_eps)  # weight and bias, per head
        self._init_kda_hooks(allow_neg_eigval=False)  # beta (here a) in [0, 1], the decay clamp, the hooks
        self.hook_kk = HookPoint()  # (B, T, H, d_k): the removal key
        self.hook_o = HookPoint()  # (B, T, H, d_v): S_t^T r_t

    @torch.no_grad()
    def init_rwkv7_(self, n_layers: int) -> None:
        """RWKV-7's starting values (fla's recipe, itself RWKV-LM's): token-shift blends that fall along the
        channels and with depth, a decay spread from fast to slow channels, a zigzag within each head, the
        LoRAs' second projections small and orthogonal, o_proj zero."""
        D, K, layer = self.key_dim, self.head_k_dim, self.layer_idx
        deep = layer / max(n_layers - 1, 1)  # 0 at the first layer, 1 at the last
        shallow = 1.0 - layer / n_layers  # 1 at the first layer, near 0 at the last
        n = torch.arange(D, dtype=torch.float32)
        ramp, linear = n / D, n / max(D - 1, 1) - 0.5
        zigzag = ((n % K) - (K - 1) / 2) / max((K - 1) / 2, 1)
        zigzag = zigzag * zigzag.abs()
        decay = -6 + 6 * (n / max(D - 1, 1)) ** (1 + deep**0.3)
        for name, power in zip(MIXES, (0.2, 0.9, 0.7, 0.7, 0.9, 0.2)):
            getattr(self, name).copy_(1.0 - ramp.pow(power * shallow)[None, None])
        self.k_a.fill_(1.02)
        self.r_k.fill_(-0.04)
        self.k_k.copy_(0.71 - linear * 0.1)
        loras = [self.w_lora, self.a_lora, self.g_lora] + ([self.v_lora] if layer != 0 else [])
        for lora in loras:
            first, second = lora.lora[0], lora.lora[2]
            nn.init.zeros_(first.weight)
            rows, rank = second.weight.shape
            nn.init.orthogonal_(second.weight, gain=0.1 * (math.sqrt(rank / rows) if rank > rows else 1.0))
        self.w_lora.lora[2].bias.copy_(decay + 0.5 + zigzag * 2.5)
        self.a_lora.lora[2].bias.copy_(-0.19 + zigzag * 0.3 + linear * 0.4)
        if layer != 0:
            self.v_lora.lora[2].bias.copy_(0.73 - linear * 0.4)  # value_dim is hidden_size (__init__ says why)
        self.g_norm.weight.fill_(((layer + 1) / n_layers) ** 0.7)
        self.g_norm.bias.zero_()
        for proj, gain in ((self.r_proj, 1.0), (self.k_proj, 0.1), (self.v_proj, 1.0)):
            nn.init.orthogonal_(proj.weight, gain=gain)
        nn.init.zeros_(self.o_proj.weight)

    # ---- forward ---------------------------------------------------------------------------

    def _raw_log_decay(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H, d_k) fp32, in [-0.6065, 0]
        w = self.w_lora(x).float().sigmoid() * LOG_DECAY_FLOOR
        return rearrange(w, "b t (h d) -> b t h d", d=self.head_k_dim)

    def _split(self, x: torch.Tensor, d: int) -> torch.Tensor:
        return rearrange(x, "b t (h d) -> b t h d", d=d)

    def forward(self, x: torch.Tensor, v_first: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T, d_model), layer 0's values (B, T, value_dim) or None at layer 0 -> (output, v_first)."""
        K = self.head_k_dim
        delta = shifted(x, self.carry, "attn") - x
        xr, xw, xk, xv, xa, xg = (torch.addcmul(x, delta, getattr(self, name)) for name in MIXES)
        r = self.hook_q(self._split(self.r_proj(xr), K))
        g = self._log_decay(xw)  # (B, T, H, d_k) fp32, through hook_gate
        k, v = self.k_proj(xk), self.v_proj(xv)
        if self.layer_idx != 0:
            if v_first is None:
                raise DeltalensError("an RWKV-7 layer beyond the first needs layer 0's values (v_first).")
            v = torch.lerp(v, v_first.to(v.dtype), self.v_lora(xv).sigmoid())
        a = self.hook_beta(self._in_range(self.hook_beta_logit(self._split(self.a_lora(xa), K))))  # (B, T, H, d_k)
        kk = self._split(k * self.k_k, K)
        kk = self.hook_kk(l2_normalize(kk) if self.fuse_norm else F.normalize(kk, dim=-1))
        k = self._split(k, K)
        wide_k = k.to(a.dtype)
        k = self.hook_k(torch.addcmul(wide_k, wide_k * (a - 1), self._split(self.k_a[None, None], K)).to(x.dtype))
        v = self.hook_v(self._split(v, self.head_v_dim))
        if self.layer_idx == 0:
            v_first = rearrange(v, "b t h d -> b t (h d)")
        o = self.hook_o(self._recurrence(r, g, k, v, kk, a).to(x.dtype))  # (B, T, H, d_v)
        z = self.hook_z(self._mix_out(o, r, k, v, xg))
        if self.carry is not None:
            self.carry.tokens += x.shape[1]
        return self._read_out(z, x), v_first  # type: ignore[return-value]

    def _mix_out(self, o, r, k, v, xg) -> torch.Tensor:
        """(GroupNorm(o) + bonus) * gate per head, in fp32, returned in o's dtype: what o_proj reads."""
        o32 = o.float()
        centred = o32 - o32.mean(-1, keepdim=True)
        normed = centred * torch.rsqrt(centred.square().mean(-1, keepdim=True) + self.g_norm.eps)
        weight = self._split(self.g_norm.weight.float()[None, None], self.head_v_dim)
        bias = self._split(self.g_norm.bias.float()[None, None], self.head_v_dim)
        bonus = (r.float() * k.float() * self.r_k.float()).sum(-1, keepdim=True) * v.float()
        gate = self._split(self.g_lora(xg).float(), self.head_v_dim)
        return ((normed * weight + bias + bonus) * gate).to(o.dtype)

    def _read_out(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # (..., H, d_v) -> (..., d_model)
        """o_proj(z): linear, so each head's write is exact (models/layers/head_results.py); x is not read."""
        return self.o_proj(rearrange(z, "... h d -> ... (h d)"))

    def _recurrence(self, r, g, k, v, kk, a) -> torch.Tensor:
        """o (B, T, H, d_v); the per-token states only when a hook or an edit asks for them."""
        return self._run_recurrence(
            chunked_recurrence(
                (r, g, k, v, kk, a),
                carry=self.carry,
                initial_state=start_state(self.carry, self.state_edit),
                chunk_size=self.chunk_size,
                recurrence=rwkv7_recurrence,
                chunked=chunk_rwkv7,
                replay=replay_rwkv7_with_state_edits,
                select=partial(select_torch_chunked, "RWKV-7"),
                read_out=lambda states: torch.einsum("bthkv,bthk->bthv", states, r.to(states.dtype)).to(r.dtype),
            )
        )
