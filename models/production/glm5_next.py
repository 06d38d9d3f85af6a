"""GLM-5 Next (transformers `glm5_next`; the release is zai-org/GLM-5.3-Flash): Kimi-style KDA layers (the gated
delta rule with a decay per key channel) between multi-head latent attention layers whose keys a sparse-attention
indexer picks (DeepSeek's DSA over pools of tokens, no positional encoding), dense then mixture-of-experts MLPs,
and manifold-constrained hyper-connections: the residual stream is N = hc_mult streams (4 in the release), beta in
[0, 1].

transformers has one language model for the type, the multimodal Glm5NextForConditionalGeneration (a vision tower
beside the text tower, `model.language_model`); that whole class is what is built and loaded (its state_dict
unchanged), and the hooks sit on its text tower. transformers registers the text tower's type, "glm5_next_text",
only as a config and a headless Glm5NextTextModel, so there is no text-only folder to open.

The KDA layer is Kimi Linear's, input for input (kimi_linear.py's KimiLinearInputs); its forget gate is
transformers' own Glm5NextTextForgetGate, called as is: with the release's gate_lower_bound (-5) it is
g = lower_bound * sigmoid(exp(A_log) * (f(x) + dt_bias)) rather than Kimi's -exp(A_log) * softplus(...), so
alpha = exp(g) lies in (e^-5, 1). The recurrence (models/production/hooked_kda.py) does not change.

The residual stream with several streams. Per token the stream is x (N, d_model). A block (attention, then the
MLP, each with its own hyper-connection) computes from x the weights pre (N), post (N) and comb (N, N; columns
summing to 1 by Sinkhorn), reads the mixer's input as sum_n pre_n x_n, and writes
x'_n = sum_m comb_mn x_m + post_n f(...). The hooks of the residual stream show the COMBINED stream, the streams'
mean r = mean_n x_n, which is what the final norm reads (transformers' hc_head):

    hook_embed                       (B, T, d_model)   the token embedding (copied into every stream)
    blocks.{l}.hook_resid_pre        (B, T, d_model)   r entering block l; an edit of r adds its change to every
    blocks.{l}.hook_resid_post       (B, T, d_model)   stream (the streams keep their differences), so the
                                                       combined stream is then the edited one
    blocks.{l}.hook_attn_out         (B, T, d_model)   the mixer's output f, before post_n spreads it over the
    blocks.{l}.hook_mlp_out                            streams; the MLP's likewise
    blocks.{l}.attn_hc.hook_post     (B, T, N)         post, what stream n takes of f (in (0, 2))
    blocks.{l}.attn_hc.hook_comb     (B, T, N, N)      comb, x'_n = sum_m comb[m, n] x_m + ...; ffn_hc: the MLP's
    blocks.{l}.mlp.gate.hook_router_logits / _weights  the MoE router (as Kimi Linear's)

The layers' outputs do not add up to r (comb mixes the streams, post scales f per stream, and pre reads a
weighted sum that r does not determine), so the tools that split the residual stream into the layers' writes
(decompose_resid, accumulated_resid, stack_head_results, logit_attribution) refuse by name; the delta-rule
hooks, capture, probes, patching and the interventions work as on every family.
"""

from __future__ import annotations

from typing import Any

import torch
from transformer_lens.hook_points import HookPoint
from transformers.models.glm5_next import modeling_glm5_next as modeling
from transformers.models.glm5_next.configuration_glm5_next import Glm5NextConfig, Glm5NextTextConfig

from deltalens.core.errors import DeltalensError
from deltalens.core.indices import integer_indices
from deltalens.models.production.family import ProductionFamily, check_config
from deltalens.models.production.hooked_kda import HookedKimiDeltaAttention
from deltalens.models.production.kimi_linear import KimiLinearInputs, hook_router
from deltalens.models.production.lm import HookedProductionLM

__all__ = ["FAMILY", "HookedGlm5Next", "HookedGlm5NextLinearAttention"]


class HookedGlm5NextLinearAttention(KimiLinearInputs, HookedKimiDeltaAttention, modeling.Glm5NextTextLinearAttention):
    conv_forward = staticmethod(modeling.causal_conv1d_forward)
    mask_padding = staticmethod(modeling.apply_mask_to_padding_states)


# the text tower's config.json fields whose other values transformers' model would silently not honour (the
# checkpoint's own, which transformers' config does not read): field -> (the value it implements, why)
_IMPLEMENTED: dict[str, tuple[Any, str]] = {
    "mhc": (True, "transformers' GLM-5 Next always has hyper-connections"),
    "mla_use_nope": (True, "transformers' latent attention applies no rotary embedding"),
    "index_kpool_compress": (True, "transformers' indexer always scores pooled keys"),
    "scoring_func": ("sigmoid", "transformers' router scores with a sigmoid"),
    "topk_method": ("noaux_tc", "transformers' router picks experts with its correction bias (noaux_tc)"),
}


def _tower(raw: dict[str, Any]) -> dict[str, Any]:
    """The text tower's fields: text_config where config.json nests them, else the top level (the flat form)."""
    inner = raw.get("text_config")
    return dict(inner) if isinstance(inner, dict) else raw


def _check_glm5(raw: dict[str, Any], where: str = "config.json") -> None:
    """check_config on the file and on its text tower, then the fields transformers reads no other value of."""
    text = _tower(raw)
    if text.get("qk_rope_head_dim") not in (None, 0):
        raise DeltalensError(
            f"{where} sets qk_rope_head_dim={text['qk_rope_head_dim']!r}; GLM-5 Next's latent attention has no "
            "rotary part (transformers' requires 0)"
        )
    # 0 by design, no rotary dimensions (transformers sets head_dim to it): not the positive sizes checked below
    strip = lambda fields: {k: v for k, v in fields.items() if k not in ("head_dim", "qk_rope_head_dim")}  # noqa: E731
    outer = strip(raw) if text is raw else {**raw, "text_config": strip(text)}
    check_config(FAMILY, outer, where)  # the file's own fields (quantization_config, ...)
    check_config(FAMILY, strip(text), where)  # the text tower's, whichever form config.json has
    layers = text.get("num_hidden_layers")
    for key in ("mlp_layer_types", "indexer_types"):  # transformers indexes them per layer, far from the cause
        kinds = text.get(key)
        if kinds is not None and (not isinstance(kinds, list) or (isinstance(layers, int) and len(kinds) != layers)):
            raise DeltalensError(f"{where} has {key}={kinds!r} for num_hidden_layers={layers}; give one per layer")
    for key, (value, why) in _IMPLEMENTED.items():
        if text.get(key, value) != value:
            raise DeltalensError(f"{where} sets {key}={text[key]!r}, which deltalens does not open: {why}")
    if (text.get("linear_attn_config") or {}).get("allow_neg_eigval"):
        raise DeltalensError(
            f"{where} sets linear_attn_config.allow_neg_eigval, which deltalens does not open: transformers' "
            "KDA keeps beta in [0, 1]"
        )


def _tiny(vocab_size: int) -> Glm5NextConfig:
    """The multimodal model (the type's only language model) around a tiny text tower: KDA (4 heads of 16) on
    layers 0, 1, 3 and one latent-attention layer (4 heads, rank-16 key latent) whose indexer keeps 2 pools of
    4 tokens and the last partial pool, so longer traces see sparse attention; a dense MLP on layer 0 and MoE
    after it (4 experts, 2 per token, one shared); 4 residual streams, as the release; a one-block vision tower."""
    text = Glm5NextTextConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=96, moe_intermediate_size=16, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=0,
        qk_nope_head_dim=16, v_head_dim=8, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
        linear_head_dim=16, linear_num_heads=4, linear_conv_kernel_dim=4, index_topk=8, index_kpool=4,
        index_head_dim=16, index_n_heads=2, hc_mult=4,
        layer_types=["linear_attention", "linear_attention", "indexed_attention", "linear_attention"],
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"], bos_token_id=1, pad_token_id=0, eos_token_id=None,
        tie_word_embeddings=False,
    )  # fmt: skip
    vision = dict(depth=1, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64,
                  projection_intermediate_size=64)  # fmt: skip
    ids = dict(image_token_id=300, video_token_id=301, image_start_token_id=302, image_end_token_id=303,
               video_start_token_id=304, video_end_token_id=305)  # fmt: skip
    return Glm5NextConfig(text_config=text.to_dict(), vision_config=vision, **ids)


FAMILY = ProductionFamily(
    arch="glm5_next",
    lm_class=modeling.Glm5NextForConditionalGeneration,
    config_class=Glm5NextConfig,
    linear_mixer=HookedGlm5NextLinearAttention,
    # transformers reads "full_attention" and "deepseek_sparse_attention" (the release's name) as indexed attention
    layer_types=("linear_attention", "indexed_attention", "full_attention", "deepseek_sparse_attention"),
    positions="none",  # its latent attention has no rotary embedding; KDA orders the tokens
    tiny=_tiny,
)


def _combined(hook: HookPoint, streams: torch.Tensor) -> torch.Tensor:
    """Show the streams' mean (B, T, d_model) through `hook`; what the hook changes is added to every stream."""
    shown = hook(streams.mean(dim=2))
    return streams + (shown - streams.mean(dim=2)).unsqueeze(2)  # exactly zero where nothing was edited


def _hook_hyper_connection(hc: torch.nn.Module) -> None:
    """post (B, T, N) and comb (B, T, N, N) of a hyper-connection through hook points; the layer uses what the
    hooks return."""
    hc.hook_post, hc.hook_comb = HookPoint(), HookPoint()
    hc.register_forward_hook(lambda m, i, out: (m.hook_post(out[0]), m.hook_comb(out[1]), out[2]))


def _first(output):
    return output[0] if isinstance(output, tuple) else output


def _replace_first(output, value):
    return (value, *output[1:]) if isinstance(output, tuple) else value


class HookedGlm5Next(HookedProductionLM):
    """transformers' GLM-5 Next (its multimodal class) with our hooks on the text tower: the residual stream's hooks
    on the combined stream (module docstring), hyper-connection and router hooks."""

    family = FAMILY

    @classmethod
    def check(cls, fields: dict) -> None:
        """Refuse by name what transformers' GLM-5 Next would get wrong, before anything is built."""
        _check_glm5(fields)

    def __init__(self, hf_model: torch.nn.Module, family: ProductionFamily) -> None:
        super().__init__(hf_model, family)
        for layer in self.text_model.layers:
            _hook_hyper_connection(layer.attn_hc)
            _hook_hyper_connection(layer.ffn_hc)
            if isinstance(layer.mlp, modeling.Glm5NextTextMoE):
                hook_router(layer.mlp.gate)
        self.setup()  # the new hook points under our names

    @classmethod
    def make_config(cls, fields: dict) -> Glm5NextConfig:
        """transformers' config of the whole model (text and vision towers) from config.json's fields, checked
        first; a flat config (text fields at the top) is read as transformers reads it."""
        cls.check(fields)
        return Glm5NextConfig.from_dict({k: v for k, v in fields.items() if k not in ("model_type", "architectures")})

    @property
    def residual_streams(self) -> int:
        """How many residual streams the layers write into (hc_mult): the residual-splitting tools read it."""
        return int(self.text_config.hc_mult)

    @staticmethod
    def _hook_layer(layer: torch.nn.Module) -> None:
        for name in ("hook_resid_pre", "hook_attn_out", "hook_mlp_out", "hook_resid_post"):
            setattr(layer, name, HookPoint())

        def resid_pre(module, args, kwargs):  # the layer's input: the streams (B, T, N, d_model)
            if args:
                return (_combined(module.hook_resid_pre, args[0]), *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": _combined(module.hook_resid_pre, kwargs["hidden_states"])}

        layer.register_forward_pre_hook(resid_pre, with_kwargs=True)
        layer.self_attn.register_forward_hook(lambda m, i, out: _replace_first(out, layer.hook_attn_out(_first(out))))
        layer.mlp.register_forward_hook(lambda m, i, out: layer.hook_mlp_out(out))
        layer.register_forward_hook(
            lambda m, i, out: _replace_first(out, _combined(m.hook_resid_post, _first(out)))
        )  # fmt: skip

    @integer_indices("layer")
    def mixer_input(self, layer: int, resid_pre: torch.Tensor) -> torch.Tensor:
        """Not defined here: a mixer reads sum_n pre_n x_n of the streams, which the combined stream does not fix."""
        from deltalens.models.architecture import require_one_stream

        require_one_stream(self, "reading a mixer's input off hook_resid_pre")
        raise AssertionError("unreachable: GLM-5 Next keeps several residual streams")
