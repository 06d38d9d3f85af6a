"""HookedRWKV7: fla's RWKV7ForCausalLM (RWKV-7 "Goose", the generalised delta rule with a per-channel decay and
an in-context learning rate), weight for weight, with TransformerLens hooks.

RWKV-7's block is its own, so its module tree is fla's RWKV7Model's, not the other families' DeltaBackbone:

    model.embeddings                      nn.Embedding(vocab, d_model)
    model.layers.0.pre_norm               LayerNorm(d_model) on the embedding (norm_first)
    model.layers.{l}.attn_norm            LayerNorm(d_model)
    model.layers.{l}.attn                 the time mix (models/layers/rwkv7_mixer.py)
    model.layers.{l}.ffn_norm             LayerNorm(d_model)
    model.layers.{l}.ffn                  the channel mix (models/layers/rwkv7_ffn.py)
    model.norm                            LayerNorm(d_model)
    lm_head                               nn.Linear(d_model, vocab)

Residual stream (fla's RWKV7Block): hook_embed is the embedding after layer 0's pre_norm (what the stream starts
from, so the decomposition sums to it), resid_mid = resid_pre + attn(attn_norm(resid_pre)), resid_post =
resid_mid + ffn(ffn_norm(resid_mid)); every layer beyond the first also reads layer 0's values v_first (the value
residual), carried from block to block. The norms are LayerNorms with a bias: ln_final.hook_scale is
sqrt(var(x) + eps), cfg.normalization_type is "LN", and W_U is the final norm's weight folded into the unembedding
and centred over d_model (so W_U . x = W_U . (x - mean x), the LayerNorm's centring), b_U its bias through it.
fla's RWKV7Block unpacks four values from its mixer, which fla's softmax Attention does not return, so fla has no
RWKV-7 hybrid and neither has deltalens (config `attn` refused).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformer_lens.hook_points import HookPoint

from deltalens.core.errors import DeltalensError
from deltalens.models.io.configs import RWKV7Settings
from deltalens.models.layers.attention_spec import attention_layers, parse_attention
from deltalens.models.layers.rwkv7_ffn import RWKV7FeedForward
from deltalens.models.layers.rwkv7_mixer import RWKV7Mixer
from deltalens.models.lm.delta_lm import HookedDeltaLM
from deltalens.models.lm.gated_deltanet import GatedMixin

__all__ = ["HookedRWKV7", "LayerNorm", "RWKV7Block"]


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm computed in fp32 and returned in the input's dtype (fla's fused LayerNorm does the same)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = None if self.weight is None else self.weight.float()
        bias = None if self.bias is None else self.bias.float()
        return F.layer_norm(x.float(), self.normalized_shape, weight, bias, self.eps).to(x.dtype)


def _norm(config) -> LayerNorm:
    return LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)


class RWKV7Block(nn.Module):
    """fla's `RWKV7Block`: time mix, then channel mix, each pre-LayerNormed and residual."""

    def __init__(self, config, layer_idx: int, mixer_class: type) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        if config.norm_first and layer_idx == 0:
            self.pre_norm = _norm(config)
        self.attn_norm = _norm(config)
        self.attn = mixer_class(config, layer_idx)
        self.ffn_norm = _norm(config)
        self.ffn = RWKV7FeedForward(config, layer_idx)
        self.hook_resid_pre = HookPoint()  # (B, T, d_model)
        self.hook_attn_out = HookPoint()  # (B, T, d_model)
        self.hook_resid_mid = HookPoint()  # (B, T, d_model)
        self.hook_mlp_out = HookPoint()  # (B, T, d_model)
        self.hook_resid_post = HookPoint()  # (B, T, d_model)

    @property
    def mlp(self) -> RWKV7FeedForward:
        """The channel mix under the name the other families' blocks give their MLP."""
        return self.ffn

    def forward(self, resid_pre: torch.Tensor, v_first: Optional[torch.Tensor]):
        """(B, T, d_model), layer 0's values or None -> (resid_post, v_first)."""
        resid_pre = self.hook_resid_pre(resid_pre)
        attn_out, v_first = self.attn(self.attn_norm(resid_pre), v_first)
        resid_mid = self.hook_resid_mid(resid_pre + self.hook_attn_out(attn_out))
        mlp_out = self.hook_mlp_out(self.ffn(self.ffn_norm(resid_mid), self.attn.carry))
        return self.hook_resid_post(resid_mid + mlp_out), v_first


class RWKV7Backbone(nn.Module):
    """fla's `RWKV7Model` parameters (embeddings, layers, norm) plus the outer hooks."""

    def __init__(self, config, mixer_class: type) -> None:
        super().__init__()
        if attention_layers(parse_attention(getattr(config, "attn", None), config.num_hidden_layers)):
            raise DeltalensError(
                "fla's RWKV7Block cannot hold a softmax-attention layer (it unpacks four values from its mixer, fla's "
                "Attention returns three), so an RWKV-7 hybrid runs in neither fla nor deltalens; set attn to None."
            )
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([RWKV7Block(config, i, mixer_class) for i in range(config.num_hidden_layers)])
        self.norm = _norm(config)
        self.hook_embed = HookPoint()  # (B, T, d_model): the embedding after pre_norm
        self.hook_scale = HookPoint()  # (B, T, 1): the final LayerNorm's sqrt(var + eps); read-only
        self.hook_normalized = HookPoint()  # (B, T, d_model)


class HookedRWKV7(GatedMixin, HookedDeltaLM):
    """RWKV-7 language model with TransformerLens hooks; weights and config.json interchangeable with fla's.

    >>> model = dl.build("rwkv7", vocab_size=32, hidden_size=32, num_hidden_layers=2, head_dim=8)
    >>> model.cfg.n_heads, tuple(model(torch.zeros(1, 5, dtype=torch.long)).shape)
    (4, (1, 5, 32))
    """

    mixer_class = RWKV7Mixer
    arch = "rwkv7"
    settings = RWKV7Settings
    backbone_class = RWKV7Backbone

    def init_weights(self) -> None:
        """RWKV-7's initialisation (fla's): the layers' own recipe, a tiny embedding, an orthogonal unembedding."""
        super().init_weights()
        n_layers = self.config.num_hidden_layers
        for block in self.model.layers:
            block.attn.init_rwkv7_(n_layers)
            block.ffn.init_rwkv7_(n_layers)
        with torch.no_grad():
            nn.init.uniform_(self.model.embeddings.weight, -1e-4, 1e-4)
            if self.lm_head.weight is not self.model.embeddings.weight:
                vocab, hidden = self.config.vocab_size, self.config.hidden_size
                nn.init.orthogonal_(self.lm_head.weight, gain=0.5 * max(1.0, (vocab / hidden) ** 0.5))

    def _backbone_forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) -> the final LayerNorm's output (B, T, d_model): v_first handed from block to block."""
        x = self.model.embeddings(tokens)
        first = self.model.layers[0] if len(self.model.layers) else None
        if first is not None and hasattr(first, "pre_norm"):
            x = first.pre_norm(x)
        x = self.model.hook_embed(x)  # (B, T, d_model)
        v_first = None
        for block in self.model.layers:
            x, v_first = block(x, v_first)
        if self.model.hook_scale.has_hooks():  # for TransformerLens's apply_ln: the norm's scale, shown only
            x32 = x.float()
            self.model.hook_scale(torch.sqrt(x32.var(-1, unbiased=False, keepdim=True) + self.model.norm.eps))
        return self.model.hook_normalized(self.model.norm(x))

    @property
    def cfg(self):
        """HookedDeltaLM's cfg with a LayerNorm (TransformerLens's "LN": centre, then scale) and relu^2."""
        cfg = super().cfg
        cfg.normalization_type = "LN"
        cfg.act_fn = "sqrelu"
        return cfg

    @property
    def W_U(self) -> torch.Tensor:
        """(d_model, d_vocab): the final norm's weight folded in, each column centred over d_model (the LayerNorm's
        centring, so that a residual component's direct logit is W_U . x / scale without centring x first)."""
        folded = self.lm_head.weight * self.model.norm.weight  # (vocab, d_model)
        return (folded - folded.mean(-1, keepdim=True)).T

    @property
    def b_U(self) -> torch.Tensor:
        """(d_vocab,): the final norm's bias through the unembedding (zeros without a bias)."""
        bias = self.model.norm.bias
        return torch.zeros(self.config.vocab_size, device=self.device) if bias is None else self.lm_head.weight @ bias
