"""A transformers delta-rule LM (Qwen3.5, OLMo-Hybrid, ...) as a hooked deltalens model.

    model = HookedProductionLM(hf_model, family)    # hf_model: transformers' own *ForCausalLM
    logits, cache = model.run_with_cache(tokens)
    cache["beta", 0], cache["state", 0]            # our hook names, our ActivationCache
    model.hf_generate(tokens, max_new_tokens=8)     # transformers' generate, through our layers

transformers builds, loads and runs the model; we change two things in place: each delta-rule layer
becomes its family's hooked subclass (models/production/hooked_gdn.py, hooked_kda.py: the recurrence is ours), and
each softmax-attention layer calls a hooked eager attention (models/production/attention.py). The
residual stream is shown by PyTorch hooks on the library's modules, through HookPoints named as on
our own models:

    hook_embed                                   the token embedding
    blocks.{l}.hook_resid_pre                    a decoder layer's input
    blocks.{l}.attn.hook_*                       the layer's mixer: delta-rule or attention hooks
    blocks.{l}.hook_attn_out                     the mixer's output (before any post-norm the family has)
    blocks.{l}.hook_mlp_out                      the MLP's (or MoE's) output
    blocks.{l}.hook_resid_post                   the decoder layer's output
    ln_final.hook_scale                          (batch, pos, 1) the final RMSNorm's scale sqrt(mean(x^2) + eps),
                                                 read-only (TransformerLens's frozen-scale convention)
    ln_final.hook_normalized                     the final norm's output

There is no hook_resid_mid: the library's layer adds the mixer's output inside its own forward.
The state_dict is transformers' (model.*, lm_head.*), so weights move both ways unchanged.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from deltalens.core.errors import DeltalensError
from deltalens.core.indices import integer_indices
from deltalens.models.architecture import delta_layer_index
from deltalens.models.io.hf_folder import refuse_nonfinite
from deltalens.models.lm.delta_lm import HookedDeltaLM
from deltalens.models.lm.lens import LensModel, lens_cfg
from deltalens.models.production.attention import add_attention_hooks
from deltalens.models.production.family import check_config

__all__ = ["HookedProductionLM", "lens_path"]

_MIXER = re.compile(r"model\.layers\.(\d+)\.(?:linear_attn|self_attn)(?:\.(.*))?$")
_LAYER = re.compile(r"model\.layers\.(\d+)(?:\.(.*))?$")
_EXACT = {
    "model.embed_tokens.hook_embed": "hook_embed",
    "model.embed_tokens": "embed",
    "model.norm.hook_normalized": "ln_final.hook_normalized",
    "model.norm.hook_scale": "ln_final.hook_scale",
    "model.norm": "ln_final",
    "model.layers": "blocks",
    "lm_head": "unembed",
}


def lens_path(path: str) -> str:
    """transformers' module path -> our name ('model.layers.0.linear_attn.hook_beta' -> 'blocks.0.attn.hook_beta';
    a multimodal model's text tower, 'model.language_model.layers.0...', the same)."""
    path = re.sub(r"^model\.language_model\.", "model.", path)
    if path in _EXACT:
        return _EXACT[path]
    for pattern, middle in ((_MIXER, ".attn"), (_LAYER, "")):
        match = pattern.match(path)
        if match:
            rest = match.group(2)
            return f"blocks.{match.group(1)}{middle}" + (f".{rest}" if rest else "")
    return path


def _first(output):
    return output[0] if isinstance(output, tuple) else output


def _check_weight_count(folder, config, arch: str) -> None:
    """Refuse, before transformers builds it, a config that needs more weights than the files hold (a 7B
    config.json beside tiny weights would be built whole, then filled at random)."""
    from deltalens.models.io.safetensors_header import floating_count, stored_tensors
    from deltalens.models.registry import family

    stored = stored_tensors(Path(folder) / "model.safetensors")
    bound = family(arch).weights
    if stored is None or bound is None:
        return
    held, needed = floating_count(stored), int(bound(config.to_dict()))
    if held < needed:
        raise DeltalensError(
            f"{folder}'s config.json describes a model of at least {needed:,} weights, but its files hold {held:,}: "
            "the weights and config.json do not belong together"
        )


class quiet_transformers:
    """transformers' own notices (its load report, its "falling back" warnings) kept off stderr while deltalens
    opens and runs its models: deltalens says what it needs to in its own sentences."""

    def __enter__(self):
        from transformers.utils import logging as hf_logging

        self.before = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        return self

    def __exit__(self, *exc) -> None:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity(self.before)


def first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0].rstrip(".")


def _eps(norm: nn.Module) -> float:
    """An RMSNorm's epsilon, as transformers' families name it."""
    for name in ("variance_epsilon", "eps", "epsilon"):
        value = getattr(norm, name, None)
        if isinstance(value, (int, float)):
            return float(value)
    raise DeltalensError(f"{type(norm).__name__} has no epsilon that deltalens knows the name of")


def _show_scale(norm: nn.Module, args) -> None:
    """Pass the final norm's scale through its hook_scale (read-only: the norm computes its own)."""
    norm.hook_scale(_rms(args[0], _eps(norm)))


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """sqrt(mean(x^2) + eps) over the last axis, kept (..., 1), in fp32."""
    return torch.sqrt(x.float().square().mean(-1, keepdim=True) + eps)


def _replace_first(output, value):
    return (value, *output[1:]) if isinstance(output, tuple) else value


class _Block(SimpleNamespace):
    """What interventions read of a layer: `.attn`, its mixer (delta-rule or attention)."""


class HookedProductionLM(LensModel, HookedRootModule):
    """transformers' `*ForCausalLM` of a production family, hooked (module docstring)."""

    family: Any = None  # the family's ProductionFamily record (each family's subclass sets it)

    def __init__(self, hf_model: nn.Module, family) -> None:
        super().__init__()
        self.family = family
        self.arch = family.arch
        self.has_delta_rule = True
        # the library's modules under the library's names: the state_dict is transformers'
        self.model = hf_model.model
        self.lm_head = hf_model.lm_head
        self.__dict__["hf"] = hf_model  # not a submodule (its modules are registered above)
        config = hf_model.config
        neg = family.neg_eigval(config)
        attention = []
        for layer in self.text_model.layers:
            mixer = self._delta_mixer(layer)
            if mixer is not None:
                family.linear_mixer.adopt(mixer, allow_neg_eigval=neg)
            else:
                attention.append(layer.self_attn)
            self._hook_layer(layer)
        if attention:
            add_attention_hooks(hf_model, attention)
        self.text_model.embed_tokens.hook_embed = HookPoint()
        self.text_model.embed_tokens.register_forward_hook(lambda m, i, out: m.hook_embed(out))
        self.text_model.norm.hook_normalized = HookPoint()
        self.text_model.norm.register_forward_hook(lambda m, i, out: m.hook_normalized(out))
        self.text_model.norm.hook_scale = HookPoint()
        self.text_model.norm.register_forward_pre_hook(_show_scale)
        self.setup()

    def _delta_mixer(self, layer: nn.Module) -> Optional[nn.Module]:
        """The decoder layer's delta-rule mixer, or None where it is softmax attention."""
        mixer = getattr(layer, "linear_attn", None) or layer.self_attn
        return mixer if isinstance(mixer, self.family.library_mixer) else None

    @staticmethod
    def _hook_layer(layer: nn.Module) -> None:
        for name in ("hook_resid_pre", "hook_attn_out", "hook_mlp_out", "hook_resid_post"):
            setattr(layer, name, HookPoint())
        mixer = layer.linear_attn if hasattr(layer, "linear_attn") else layer.self_attn

        def resid_pre(module, args, kwargs):
            if args:
                return (module.hook_resid_pre(args[0]), *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": module.hook_resid_pre(kwargs["hidden_states"])}

        layer.register_forward_pre_hook(resid_pre, with_kwargs=True)
        mixer.register_forward_hook(lambda m, i, out: _replace_first(out, layer.hook_attn_out(_first(out))))
        layer.mlp.register_forward_hook(lambda m, i, out: _replace_first(out, layer.hook_mlp_out(_first(out))))
        layer.register_forward_hook(lambda m, i, out: _replace_first(out, m.hook_resid_post(_first(out))))

    def setup(self) -> None:
        """HookedRootModule.setup under our names (lens_path) instead of transformers' module paths."""
        self.mod_dict, self.hook_dict = {}, {}
        for path, module in self.named_modules():
            if path:
                module.name = lens_path(path)
                self.mod_dict[module.name] = module
                if isinstance(module, HookPoint):
                    self.hook_dict[module.name] = module

    # ---- shape and layers ------------------------------------------------------------------------

    @classmethod
    def check(cls, fields: dict) -> None:
        """Refuse what the hooked model would get wrong, by name, before anything is built (a family with
        more to refuse overrides this)."""
        check_config(cls.family, fields)

    @classmethod
    def make_config(cls, fields: dict):
        """transformers' config from config.json's fields (the registry's config factory), checked first."""
        cls.check(fields)
        return cls.family.make_config(fields)

    @classmethod
    def from_config(cls, config) -> HookedProductionLM:
        """A freshly initialised model of the family from transformers' config object (models.build)."""
        _check_pad(config)
        return cls(cls.family.lm_class(config).eval(), cls.family)

    @classmethod
    def from_folder(cls, folder, config, dtype=None) -> HookedProductionLM:
        """transformers' `from_pretrained` on `folder` (safetensors only) with `config`, hooked; fp32 by default.

        Before transformers reads a byte of data, the weight files' headers and index are checked
        (models/io/safetensors_header.py); after, every tensor the model has must have come from the folder and
        every tensor the folder holds must have found its place, at its shape: transformers would initialise a
        missing tensor at random and drop an unknown one, without a word."""
        from deltalens.models.io.safetensors_header import check_weight_files

        check_weight_files(Path(folder) / "model.safetensors", float_only=True)
        _check_pad(config)
        _check_weight_count(folder, config, cls.family.arch)
        dtype = dtype or torch.float32
        config._attn_implementation = "eager"
        try:
            with quiet_transformers():
                hf, info = cls.family.lm_class.from_pretrained(
                    str(folder), config=config, dtype=dtype, use_safetensors=True, output_loading_info=True,
                    ignore_mismatched_sizes=True,  # reported in `info` and refused below by name, not raised
                )  # fmt: skip
        except OSError as err:
            raise DeltalensError(f"{folder} holds no weights transformers can read for this config: {err}") from None
        except (RuntimeError, ValueError) as err:  # a shape that does not fit the config, or a damaged shard
            raise DeltalensError(f"{folder}: the weights do not fit its config.json ({first_line(err)})") from None
        for key, what in (
            ("missing_keys", "lacks tensor(s) the model config.json describes needs"),
            ("mismatched_keys", "holds tensor(s) of another shape than config.json describes"),
            ("unexpected_keys", "holds tensor(s) the model config.json describes does not have"),
        ):
            found = sorted(str(name[0] if isinstance(name, tuple) else name) for name in (info.get(key) or []))
            if found:
                shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
                raise DeltalensError(
                    f"{folder} {what}: {shown}; transformers would fill or drop them silently, so the folder is "
                    "refused (its weights and config.json do not belong together)"
                )
        return cls(hf.eval(), cls.family)

    @property
    def W_U(self) -> torch.Tensor:
        """The unembedding (d_model, d_vocab) with the final norm's gain folded in (TransformerLens's fold_ln),
        so that cache.apply_ln_to_stack(resid) @ W_U gives the logits. The gain is read off the norm itself (its
        output on a constant input), whatever form the family's RMSNorm has (weight, or 1 + weight)."""
        norm = self.text_model.norm
        ones = torch.ones(1, self.text_config.hidden_size, device=self.device, dtype=norm.weight.dtype)
        with torch.no_grad():
            gain = norm(ones).float()[0] * _rms(ones.float(), _eps(norm))[0]  # (d_model,)
        return (self.lm_head.weight.float() * gain).T

    def tokens_to_residual_directions(self, tokens) -> torch.Tensor:
        """W_U's column of each token (..., d_model): what logit_attrs projects onto."""
        tokens = torch.as_tensor(tokens, device=self.device)
        return self.W_U[:, tokens].movedim(0, -1)

    @property
    def b_U(self) -> torch.Tensor:
        bias = getattr(self.lm_head, "bias", None)
        return torch.zeros(self.text_config.vocab_size, device=self.device) if bias is None else bias

    @integer_indices("layer")
    def mixer_input(self, layer: int, resid_pre: torch.Tensor) -> torch.Tensor:
        """What layer `layer`'s mixer reads from the residual stream: its input norm applied to `resid_pre`."""
        return self.text_model.layers[layer].input_layernorm(resid_pre)

    @property
    def model_config(self) -> dict[str, Any]:
        """The transformers config as a JSON-able dict: models.build(model.arch, **model.model_config)."""
        return {k: v for k, v in self.config.to_dict().items() if k not in ("architectures", "model_type")}

    @property
    def hf(self) -> nn.Module:
        """transformers' model object (the same modules: generate, its cache, its config)."""
        return self.__dict__["hf"]

    @property
    def config(self):
        return self.hf.config

    @property
    def text_model(self) -> nn.Module:
        """The decoder stack (embed_tokens, layers, norm): `model`, or a multimodal class's `model.language_model`
        (GLM-5 Next, whose only language model in transformers is its multimodal one)."""
        return getattr(self.model, "language_model", self.model)

    @property
    def text_config(self):
        """The decoder stack's config: `config`, or a multimodal config's text_config."""
        return self.config.get_text_config()

    @property
    def blocks(self) -> list[_Block]:
        return [_Block(attn=getattr(layer, "linear_attn", None) or layer.self_attn) for layer in self.text_model.layers]

    @property
    def delta_layers(self) -> list[int]:
        return [i for i, layer in enumerate(self.text_model.layers) if self._delta_mixer(layer) is not None]

    @property
    def attention_layers(self) -> list[int]:
        return [i for i, layer in enumerate(self.text_model.layers) if self._delta_mixer(layer) is None]

    def _mixers(self, layer: Optional[int]) -> list[nn.Module]:
        if layer is None:
            return [m for m in map(self._delta_mixer, self.text_model.layers) if m is not None]
        instead = f"{self.family.display} model is softmax attention (no beta, state or recurrence)"
        mixer = self._delta_mixer(self.text_model.layers[delta_layer_index(self, layer, instead)])
        return [mixer] if mixer is not None else []

    # the interventions of our own delta-rule models, on these mixers
    set_beta_range = HookedDeltaLM.set_beta_range
    reset_beta_range = HookedDeltaLM.reset_beta_range
    beta_range = HookedDeltaLM.beta_range
    state_edit = HookedDeltaLM.state_edit
    set_kernel = HookedDeltaLM.set_kernel

    @property
    def _first_mixer(self) -> nn.Module:
        return self._mixers(None)[0]

    @property
    def n_factors(self) -> int:
        return 1

    @property
    def gated(self) -> bool:
        return True

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def cfg(self) -> SimpleNamespace:
        """TransformerLens-style config, plus the delta rule's own (d_k, d_v, allow_neg_eigval, ...)."""
        config, mixer = self.text_config, self._first_mixer
        return lens_cfg(
            model_name=type(self.hf).__name__,
            model_type=self.arch,
            original_architecture=type(self.hf).__name__,
            n_layers=len(self.text_model.layers),
            n_heads=mixer.num_heads,  # the delta-rule layers' (a hybrid's attention layers may have others)
            d_model=config.hidden_size,
            d_head=mixer.head_v_dim,
            d_k=mixer.head_k_dim,
            d_v=mixer.head_v_dim,
            d_mlp=getattr(config, "intermediate_size", None),
            d_vocab=config.vocab_size,
            d_vocab_out=config.vocab_size,
            n_ctx=getattr(config, "max_position_embeddings", None),
            act_fn=getattr(config, "hidden_act", "silu"),
            positional_embedding_type=self.family.positions,
            eps=getattr(config, "rms_norm_eps", 1e-6),
            allow_neg_eigval=mixer.allow_neg_eigval,
            device=self.device,
            state_norm_every=0,
            n_factors=1,
            gated=True,
            delta_layers=self.delta_layers,
            attention_layers=self.attention_layers,
        )

    # ---- forward ---------------------------------------------------------------------------------

    def forward(self, tokens: torch.Tensor, return_type: Optional[str] = "logits", attention_mask=None) -> Any:
        """tokens [B, T] -> logits [B, T, vocab] (return_type "logits", "loss", "both" or None)."""
        tokens = self._checked_tokens(tokens)  # text, as HookedTransformer(text); ids of its vocabulary
        if return_type not in ("logits", "loss", "both", None):
            raise ValueError(f"return_type must be 'logits', 'loss', 'both' or None, got {return_type!r}.")
        tokens = tokens.to(self.device).long()
        with quiet_transformers():  # its "falling back to the reference implementation" notice, once per process
            logits = self.hf(input_ids=tokens, attention_mask=attention_mask, use_cache=False).logits
        logits = refuse_nonfinite(self, logits)  # a NaN weight named here, not scanned at load
        if return_type in (None, "logits"):
            return None if return_type is None else logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))
        return loss if return_type == "loss" else (logits, loss)

    @torch.no_grad()
    def hf_generate(self, tokens: torch.Tensor, max_new_tokens: int = 16, **options: Any) -> torch.Tensor:
        """transformers' greedy `generate` (its KV and recurrent cache) through our hooked layers."""
        tokens = torch.as_tensor(tokens, dtype=torch.long, device=self.device).reshape(1, -1)
        options.setdefault("do_sample", False)
        return self.hf.generate(tokens, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, **options)


def _check_pad(config) -> None:
    """One sentence if the padding id lies outside the vocabulary (transformers' embedding asserts deep inside):
    a family's default pad id (OLMo-Hybrid's 100277) with a small vocab_size, say."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    pad, vocab = getattr(text, "pad_token_id", None), getattr(text, "vocab_size", None)
    if isinstance(pad, int) and isinstance(vocab, int) and not 0 <= pad < vocab:
        raise DeltalensError(
            f"pad_token_id {pad} lies outside the vocabulary (vocab_size {vocab}): give pad_token_id=None, or an id "
            "below vocab_size"
        )
