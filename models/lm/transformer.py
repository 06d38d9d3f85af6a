"""Transformer baseline: TransformerLens's own native Transformer, booted through TransformerBridge.

The paper's point of comparison is a plain softmax-attention Transformer trained on the same REPL
traces. We do not write one by hand: `TransformerBridge.boot_native(TransformerBridgeConfig(...))`
builds TransformerLens's TL-native model (pre-LN blocks, split q/k/v/o projections, a two-layer
MLP) and wraps it in the bridge, so hook names, `run_with_cache`, `run_with_hooks` and the
state dict are TransformerLens's, unchanged.

What this file adds on top of the bridge:

* `TransformerConfig`, the few knobs a small baseline needs, JSON-able so a checkpoint can
  rebuild the model with `models.build("transformer", **model.model_config)`;
* `model.arch == "transformer"` and `model.model_config`, the attributes every deltalens model
  carries;
* a context guard: a trace longer than `n_ctx` raises `DeltalensError` with one sentence instead
  of TransformerLens's ValueError deep inside the forward;
* an attention forward (models/layers/transformer_attention.py) that takes torch's fused kernel in
  training steps no hook watches, and fires hook_attn_scores on the real pre-softmax scores.

Hook names that matter for the analyses (all shapes batch first, as in TransformerLens):

    hook_embed                          (B, T, d_model)  token embedding
    hook_pos_embed                      (B, T, d_model)  learned positions only
    blocks.{l}.hook_resid_pre|mid|post  (B, T, d_model)  residual stream
    blocks.{l}.attn.hook_q|hook_k|hook_v (B, T, H, d_head)  projections (before rotary)
    blocks.{l}.attn.hook_attn_scores    (B, H, T, T)     scaled scores, causal mask -inf, before softmax
    blocks.{l}.attn.hook_pattern        (B, H, T, T)     attention weights; edits re-weight values
    blocks.{l}.attn.hook_z              (B, T, H, d_head) per-head output before W_O
    blocks.{l}.hook_attn_out|hook_mlp_out (B, T, d_model)
    ln_final.hook_normalized            (B, T, d_model)

Positions and length extrapolation. The paper asks whether a model trained on short traces
tracks the state on longer ones. With learned positions ("standard") the model has one trained
vector per position up to the longest training trace; positions beyond it do not exist (or sit
at their random init if n_ctx was set larger), so learned positions cannot extrapolate by
construction. Rotary positions ("rotary", the default here) have no per-position weights: the
cos/sin tables and the causal mask are buffers rebuilt from `n_ctx` and are not saved, so a
rotary model trained at one length can be evaluated at any longer one by loading it with a larger
`n_ctx` (`models.load(path, n_ctx=4096)`). That is a real extrapolation test with the same
weights. "none" (NoPE) drops the rotation too: attention sees only the causal mask, from which a
Transformer can still infer positions; it loads at any length as a rotary model does.
Memory cost: each layer holds an (n_ctx, n_ctx) boolean causal mask.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

from transformer_lens.config import TransformerBridgeConfig
from transformer_lens.model_bridge import TransformerBridge

from deltalens.core.errors import ContextTooLong, DeltalensError
from deltalens.models.io.config_from_dict import config_from_dict
from deltalens.models.layers.transformer_attention import use_hooked_attention

POSITIONAL_EMBEDDING_TYPES = ("standard", "rotary", "none")
NORMALIZATION_TYPES = ("LN", "RMS", "LNPRE", "RMSPRE")  # the *PRE variants have no learned scale
# "learned" is what most people call TransformerLens's "standard" positions.
_POSITION_ALIASES = {"learned": "standard", "absolute": "standard", "rope": "rotary", "nope": "none"}


@dataclass
class TransformerConfig:
    """A small TL-native Transformer. Field names follow TransformerLens's config."""

    d_vocab: int = 64  # vocabulary size; set it from the tokenizer
    d_model: int = 64  # residual stream width
    n_layers: int = 2  # transformer blocks
    n_heads: int = 4  # attention heads per block
    d_head: Optional[int] = None  # width of one head; None -> d_model // n_heads
    d_mlp: Optional[int] = None  # MLP hidden width; None -> 4 * d_model
    n_ctx: int = 512  # longest trace the model accepts (see module docstring for rotary)
    positional_embedding_type: str = "rotary"  # "standard" (learned table), "rotary" or "none" (NoPE)
    act_fn: str = "gelu"  # MLP activation
    normalization_type: Optional[str] = "LN"  # "LN", "RMS" (pre-norm in every block and at the end) or None
    seed: Optional[int] = None  # seeds the weight init without touching the global RNG; None = global RNG

    def __post_init__(self) -> None:
        kind = _POSITION_ALIASES.get(self.positional_embedding_type, self.positional_embedding_type)
        if kind not in POSITIONAL_EMBEDDING_TYPES:
            raise DeltalensError(
                f"positional_embedding_type {self.positional_embedding_type!r} is not supported; "
                f"use 'standard' (learned), 'rotary' or 'none' (no positions)"
            )
        self.positional_embedding_type = kind
        # TransformerLens silently falls back to LayerNorm for names it does not know.
        if self.normalization_type is not None and self.normalization_type.upper() not in NORMALIZATION_TYPES:
            raise DeltalensError(
                f"normalization_type {self.normalization_type!r} is not supported; use one of "
                f"{', '.join(NORMALIZATION_TYPES)} or None"
            )
        for name in ("d_vocab", "d_model", "n_layers", "n_heads", "n_ctx"):
            if int(getattr(self, name)) < 1:
                raise DeltalensError(f"transformer {name} must be a positive integer, got {getattr(self, name)!r}")
        if self.d_head is None:
            if self.d_model % self.n_heads:
                raise DeltalensError(
                    f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}; "
                    f"change one of them or give d_head explicitly"
                )
            self.d_head = self.d_model // self.n_heads
        if self.d_mlp is None:
            self.d_mlp = 4 * self.d_model
        if self.positional_embedding_type == "rotary" and self.d_head % 2:
            raise DeltalensError(f"rotary positions need an even d_head, got {self.d_head}")


def transformer_config_from_dict(config: dict[str, Any]) -> TransformerConfig:
    return config_from_dict(TransformerConfig, config, "transformer")


def build_transformer(config: TransformerConfig):
    """Boot TransformerLens's native Transformer for `config`; returns the TransformerBridge itself.

    The returned object is a plain `TransformerBridge` with two extra attributes, `arch` and
    `model_config`, and a forward pre-hook on the wrapped native model that enforces `n_ctx`.
    `model(tokens)` with tokens (B, T) int64 returns logits (B, T, d_vocab).
    """
    tl_config = TransformerBridgeConfig(
        d_model=config.d_model,
        d_head=config.d_head,
        n_layers=config.n_layers,
        n_ctx=config.n_ctx,
        n_heads=config.n_heads,
        d_vocab=config.d_vocab,
        d_mlp=config.d_mlp,
        act_fn=config.act_fn,
        normalization_type=config.normalization_type,
        # NoPE: TransformerLens's native model has no such option, so boot it rotary and drop the rotation
        positional_embedding_type="rotary"
        if config.positional_embedding_type == "none"
        else config.positional_embedding_type,
        seed=config.seed,
        device="cpu",  # build on CPU; callers move it with .to(device)
        model_name="deltalens-transformer",
        # Our tokenizers decide BOS themselves; the bridge must never add one.
        default_prepend_bos=False,
        tokenizer_prepends_bos=False,
    )
    try:
        bridge = TransformerBridge.boot_native(tl_config)
    except ValueError as err:  # e.g. an act_fn or normalization_type TransformerLens does not know
        if isinstance(err, DeltalensError):
            raise
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0].rstrip(".")
        raise DeltalensError(f"TransformerLens cannot build this Transformer ({reason}); fix the config") from None
    if config.positional_embedding_type == "none":
        for module in bridge.original_model.modules():
            if getattr(module, "rotary", None) is not None:
                module.rotary = None  # attention sees the causal mask only (its cos/sin tables are never saved)
    bridge.arch = "transformer"
    bridge.model_config = asdict(config)
    use_hooked_attention(bridge)  # fused in unwatched training steps; real hook_attn_scores otherwise
    # Nothing here depends on the mode but the fused kernel (no dropout): start in eval mode, so a fresh
    # model's forward and its run_with_cache agree to the bit; the training loop calls .train().
    bridge.eval()
    # The guard sits on the wrapped native model, not on the bridge, because every path
    # (forward, run_with_cache, run_with_hooks, generate) ends in that module's __call__.
    bridge.original_model.register_forward_pre_hook(
        _context_guard(config.n_ctx, config.positional_embedding_type), with_kwargs=True
    )
    return bridge


def _context_guard(n_ctx: int, positional_embedding_type: str):
    """Forward pre-hook that turns an over-long input into one DeltalensError sentence."""

    def check_length(module, args, kwargs):
        inputs = kwargs.get("input_ids")
        if inputs is None:
            inputs = kwargs.get("inputs_embeds")
        if inputs is None and args:
            inputs = args[0]
        if inputs is None or not hasattr(inputs, "shape"):
            return None
        n_tokens = inputs.shape[1] if inputs.dim() >= 2 else inputs.shape[0]
        if n_tokens > n_ctx:
            if positional_embedding_type in ("rotary", "none"):
                fix = (
                    f"{positional_embedding_type} positions have no per-position weights, so load the checkpoint "
                    f"with a larger context (in Python: deltalens.models.load(path, n_ctx={n_tokens})) or use "
                    "shorter traces"
                )
            else:
                fix = "retrain with a larger n_ctx or use shorter traces"
            raise ContextTooLong(
                f"trace of {n_tokens} tokens exceeds the Transformer's context of {n_ctx}; {fix}", n_tokens, n_ctx
            )
        return None

    return check_length
