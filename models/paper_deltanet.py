"""DeltaNet with beta in [0, 2], written out as the paper writes it: the file to read first.

This one file is the whole model that the shipped DeltaNet checkpoints hold, in plain torch (no
deltalens imports, no fast kernels, no hooks). It reads a checkpoint folder (config.json +
model.safetensors) and gives the same logits as `deltalens.load(...)` (tests/models/
test_paper_deltanet.py). The hooked model the rest of deltalens uses (models/lm/delta_lm.py,
models/layers/deltanet_mixer.py) computes the same numbers with chunked kernels, hooks and
interventions around them; read this first, then those.

The paper: Siems et al., "Learning State-Tracking from Code Using Linear RNNs" (arXiv 2602.14814).
The recurrence is DeltaNet's (Yang et al. 2024) with the eigenvalue range of Grazzi et al. (2025);
the block around it is flash-linear-attention's (fla) DeltaNet, parameter name for parameter name.

Paper symbol -> code (per layer; B batch, T tokens, H heads, d_k / d_v head sizes, d = d_model):

    x_t       (B, d)            the layer's input token, after the pre-norm         `x[:, t]`
    q_t, k_t  (B, H, d_k)       query and key: projection, short causal conv, SiLU,
                                L2-normalised so that ||k_t|| = 1                     `q[:, t]`, `k[:, t]`
    v_t       (B, H, d_v)       value: projection, short causal conv, SiLU            `v[:, t]`
    beta_t    (B, H)            write strength, 2 * sigmoid(w_beta^T x_t) in [0, 2]   `beta[:, t]`
    S_t       (B, H, d_k, d_v)  the state (a fast-weight memory), S_0 = 0            `S`
    A_t       I - beta_t k_t k_t^T, the transition. Its eigenvalues are 1 (d_k - 1 times, orthogonal
              to k_t) and 1 - beta_t in [-1, 1]: beta_t = 2 makes A_t a Householder reflection,
              which is how a head applies a transposition (a swap of two variables).

    S_t = A_t S_{t-1} + beta_t k_t v_t^T = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
    o_t = S_t^T q_t                                                                  `o[:, t]`

Two details the paper leaves out and the checkpoints have (from fla): the read-out uses q_t / sqrt(d_k)
(the norm after it removes most of that scale), and with allow_neg_eigval=False beta_t = sigmoid(.) in
[0, 1], the paper's baseline. Around the recurrence, one block (fla's DeltaNetBlock):

    h = x + o_proj(RMSNorm_head(DeltaRule(RMSNorm(x))))      attention-like half
    y = h + down(silu(gate(RMSNorm(h))) * up(RMSNorm(h)))    SwiGLU MLP half

and the language model: embedding -> blocks -> RMSNorm -> lm_head -> logits.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

__all__ = ["PaperDeltaNet", "read_config"]

# fla's DeltaNetConfig defaults, for fields a config.json leaves out.
DEFAULTS = {
    "hidden_size": 2048, "num_hidden_layers": 24, "num_heads": 16, "vocab_size": 32000,
    "expand_k": 1.0, "expand_v": 1.0, "conv_size": 4, "norm_eps": 1e-6, "hidden_ratio": 4,
    "intermediate_size": None, "hidden_act": "swish", "use_gate": False, "use_short_conv": True,
    "use_beta": True, "allow_neg_eigval": False, "qk_activation": "silu", "qk_norm": "l2",
    "use_output_norm": True, "tie_word_embeddings": False, "pad_token_id": None, "attn": None,
}  # fmt: skip


def read_config(folder: str | Path) -> dict:
    """The model's fields from a checkpoint's config.json, read as deltalens reads them.

    A deltalens checkpoint keeps them in config.json's "deltalens" section under "model_config"; a plain
    fla folder has them at the top level. Missing fields take fla's defaults.
    """
    config = json.loads((Path(folder) / "config.json").read_text())
    section = config.get("deltalens")
    fields = section["model_config"] if isinstance(section, dict) and "model_config" in section else config
    return {**DEFAULTS, **{k: v for k, v in fields.items() if k in DEFAULTS or k == "state_norm_every"}}


def check_supported(cfg: dict) -> None:
    """Refuse the options this file does not write out (the hooked model has them all)."""
    unsupported = {
        "qk_activation": cfg["qk_activation"] != "silu",
        "qk_norm": cfg["qk_norm"] != "l2",
        "hidden_act": cfg["hidden_act"] != "swish",
        "attn": cfg["attn"] is not None,  # hybrid softmax-attention layers
        "use_output_norm": not cfg["use_output_norm"],  # fla's DeltaNet always norms; kept for clarity
        "state_norm_every": bool(cfg.get("state_norm_every")),  # deltalens's renormalised variant
    }
    bad = [name for name, is_bad in unsupported.items() if is_bad]
    if bad:
        raise ValueError(f"paper_deltanet writes out plain DeltaNet only; this config sets {', '.join(bad)}.")


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, over the last dimension, computed in fp32."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


class GatedRMSNorm(RMSNorm):
    """RMSNorm(x) * silu(g): the per-head output norm when the config has use_gate."""

    def forward(self, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return (super().forward(x).float() * F.silu(g.float())).to(x.dtype)


class ShortConv(nn.Module):
    """A causal depthwise convolution over the last W tokens, then SiLU (fla's ShortConvolution)."""

    def __init__(self, dim: int, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim, 1, width))  # (D, 1, W); fla's DeltaNet has no bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> (B, T, D)
        T, W = x.shape[1], self.weight.shape[-1]
        y = torch.zeros_like(x)
        for w in range(W):  # y_t = sum_w weight[:, w] * x_{t - (W - 1) + w}; tap W - 1 is token t itself
            shift = W - 1 - w
            y = y + self.weight[:, 0, w] * F.pad(x, (0, 0, shift, 0))[:, :T]  # x shifted down, zeros first
        return y / (1.0 + torch.exp(-y))  # SiLU, y * sigmoid(y), written as the C kernel computes it


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(||x||^2 + eps) over the last dimension (fla's l2norm: eps inside the root)."""
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + eps)


def delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """The recurrence, one token at a time. q, k (B, T, H, d_k); v (B, T, H, d_v); beta (B, T, H).

    Returns o (B, T, H, d_v) with S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T and
    o_t = S_t^T q_t / sqrt(d_k).
    """
    B, T, H, d_k = k.shape
    S = q.new_zeros(B, H, d_k, v.shape[-1])  # S_0 = 0                            (B, H, d_k, d_v)
    outputs = []
    for t in range(T):
        q_t, k_t, v_t, b_t = q[:, t], k[:, t], v[:, t], beta[:, t, :, None]  # (B, H, d), b_t (B, H, 1)
        kS = torch.einsum("bhk,bhkv->bhv", k_t, S)  # k_t^T S_{t-1}                  (B, H, d_v)
        # (I - b k k^T) S + b k v^T = S + k (b (v - k^T S))^T: the "delta" is v_t - k_t^T S_{t-1}
        S = S + torch.einsum("bhk,bhv->bhkv", k_t, b_t * (v_t - kS))
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, q_t / math.sqrt(d_k)))  # o_t = S_t^T q_t
    return torch.stack(outputs, dim=1)  # (B, T, H, d_v)


class DeltaNetLayer(nn.Module):
    """The token mixer: q, k, v, beta from x, the delta rule per head, a per-head norm, o_proj."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        d, H = cfg["hidden_size"], cfg["num_heads"]
        d_key, d_value = round(d * cfg["expand_k"]), round(d * cfg["expand_v"])  # all heads together
        self.H, self.use_gate, self.use_short_conv = H, cfg["use_gate"], cfg["use_short_conv"]
        self.beta_max = 2.0 if cfg["allow_neg_eigval"] else 1.0  # [0, 2] is the paper's DeltaNet
        self.q_proj = nn.Linear(d, d_key, bias=False)
        self.k_proj = nn.Linear(d, d_key, bias=False)
        self.v_proj = nn.Linear(d, d_value, bias=False)
        self.b_proj = nn.Linear(d, H, bias=False) if cfg["use_beta"] else None  # w_beta, one row per head
        if self.use_short_conv:
            self.q_conv1d = ShortConv(d_key, cfg["conv_size"])
            self.k_conv1d = ShortConv(d_key, cfg["conv_size"])
            self.v_conv1d = ShortConv(d_value, cfg["conv_size"])
        self.g_proj = nn.Linear(d, d_value, bias=False) if self.use_gate else None
        self.o_norm = (GatedRMSNorm if self.use_gate else RMSNorm)(d_value // H, cfg["norm_eps"])
        self.o_proj = nn.Linear(d_value, d, bias=False)

    def heads(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H * d_head) -> (B, T, H, d_head)
        return x.view(*x.shape[:2], self.H, -1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, d) -> (B, T, d)
        if self.use_short_conv:
            q = self.q_conv1d(self.q_proj(x))  # conv then SiLU             (B, T, H * d_k)
            k = self.k_conv1d(self.k_proj(x))
            v = self.v_conv1d(self.v_proj(x))  # (B, T, H * d_v)
        else:
            q, k, v = F.silu(self.q_proj(x)), F.silu(self.k_proj(x)), F.silu(self.v_proj(x))
        q, k, v = l2_normalize(self.heads(q)), l2_normalize(self.heads(k)), self.heads(v)
        if self.b_proj is not None:
            beta = self.beta_max * torch.sigmoid(self.b_proj(x))  # beta_t in [0, beta_max]   (B, T, H)
        else:
            beta = x.new_full((*x.shape[:2], self.H), self.beta_max)  # fla: no b_proj means the top of the range
        o = delta_rule(q, k, v, beta)  # (B, T, H, d_v)
        o = self.o_norm(o, self.heads(self.g_proj(x))) if self.g_proj is not None else self.o_norm(o)
        return self.o_proj(o.flatten(2))


class SwiGLU(nn.Module):
    """fla's GatedMLP: down_proj(silu(gate_proj(x)) * up_proj(x))."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        d, width = cfg["hidden_size"], cfg["intermediate_size"]
        if width is None:  # fla: 2/3 * hidden_ratio * d, rounded up to a multiple of 256
            width = 256 * math.ceil(int(d * (cfg["hidden_ratio"] or 4) * 2 / 3) / 256)
        self.gate_proj = nn.Linear(d, width, bias=False)
        self.up_proj = nn.Linear(d, width, bias=False)
        self.down_proj = nn.Linear(width, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, d) -> (B, T, d)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """fla's DeltaNetBlock: pre-norm mixer and pre-norm MLP, each added to the residual stream."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg["hidden_size"], cfg["norm_eps"])
        self.attn = DeltaNetLayer(cfg)
        self.mlp_norm = RMSNorm(cfg["hidden_size"], cfg["norm_eps"])
        self.mlp = SwiGLU(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, d) -> (B, T, d)
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Backbone(nn.Module):
    """fla's DeltaNetModel: the embedding, the blocks and the final norm (named as in its state dict)."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"], cfg["pad_token_id"])
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["norm_eps"])


class PaperDeltaNet(nn.Module):
    """The DeltaNet language model: tokens (B, T) -> next-token logits (B, T, vocab)."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        check_supported(cfg)
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if cfg["tie_word_embeddings"]:
            self.lm_head.weight = self.model.embeddings.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.model.embeddings(tokens)  # (B, T, d)
        for block in self.model.layers:
            x = block(x)
        return self.lm_head(self.model.norm(x))  # (B, T, vocab)

    @classmethod
    def from_checkpoint(cls, folder: str | Path) -> PaperDeltaNet:
        """The model in a checkpoint folder (config.json + model.safetensors), weights loaded strictly."""
        model = cls(read_config(folder))
        weights = load_file(str(Path(folder) / "model.safetensors"))
        if model.cfg["tie_word_embeddings"]:
            weights.setdefault("lm_head.weight", weights["model.embeddings.weight"])  # stored once when tied
        model.load_state_dict(weights, strict=True)
        return model.eval()
