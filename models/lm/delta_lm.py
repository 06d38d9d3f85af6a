"""HookedDeltaLM: the language model around any delta-rule mixer, weight for weight fla's, as a
TransformerLens HookedRootModule. HookedDeltaNet, HookedGatedDeltaNet and HookedDeltaProduct are it
with their own mixer and fla config.

The module tree mirrors fla's `*ForCausalLM` (DeltaNetForCausalLM, GatedDeltaNetForCausalLM,
GatedDeltaProductForCausalLM share it) so that `state_dict()` keys and shapes are identical and
weights move both ways (`save_pretrained` / `from_pretrained`, HF format):

    model.embeddings                      nn.Embedding(vocab, d_model)
    model.layers.{l}.attn_norm            RMSNorm(d_model)
    model.layers.{l}.attn                 the mixer (projections, short convs, o_norm; see its file), or
                                          on a hybrid's listed layers (config.attn) softmax attention
                                          (models/layers/softmax_attention.py; fla's Attention)
    model.layers.{l}.mlp_norm             RMSNorm(d_model)
    model.layers.{l}.mlp                  gate_proj / up_proj / down_proj (SwiGLU)
    model.norm                            RMSNorm(d_model)
    lm_head                               nn.Linear(d_model, vocab), tied to the embedding if asked

Hooks carry TransformerLens names instead of module paths (see models/lm/hook_names.py):
`setup()` is overridden so that HookPoint.name, `hook_dict` and `mod_dict` use
hook_embed, blocks.{l}.hook_resid_pre, blocks.{l}.attn.hook_q, ..., ln_final.hook_normalized.
Residual stream of block l (fla's pre-norm block, written out):

    resid_mid  = resid_pre + attn(attn_norm(resid_pre))
    resid_post = resid_mid + mlp(mlp_norm(resid_mid))

Interventions: `set_beta_range(layer, head, lo, hi)` rescales a head's write strength beta (paper:
[0, 1] vs [0, 2]); a hook on blocks.{l}.attn.hook_beta or hook_state that edits a value changes
everything after it; `state_edit(layer, fn)` applies fn(t, S) -> S after every token of one layer.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Optional, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from deltalens.core.errors import DeltalensError
from deltalens.core.indices import integer_indices
from deltalens.models.architecture import delta_layer_index
from deltalens.models.init_skipped import random_init_skipped
from deltalens.models.io.configs import FlaSettings, fla_class, fla_model_config, to_fla_config
from deltalens.models.io.deltalens_section import explained_build_errors
from deltalens.models.io.hf_folder import load_weights, refuse_nonfinite, write_model_folder
from deltalens.models.io.model_folder import read_model_folder
from deltalens.models.layers.attention_spec import attention_layers, attention_spec_for, parse_attention
from deltalens.models.layers.gated_mlp import GatedMLP
from deltalens.models.layers.rms_norm import RMSNorm
from deltalens.models.layers.softmax_attention import SoftmaxAttention
from deltalens.models.lm.hook_names import lens_name
from deltalens.models.lm.lens import LensModel, lens_cfg
from deltalens.models.registry import family

__all__ = ["HookedDeltaLM", "DeltaBlock", "GatedMLP"]


class DeltaBlock(nn.Module):
    """fla's `DeltaNetBlock` (and its Gated DeltaNet / DeltaProduct twins): pre-norm delta-rule mixer,
    then pre-norm SwiGLU MLP, both residual."""

    def __init__(self, config, layer_idx: int, mixer_class: type) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.attn_norm = RMSNorm(config.hidden_size, eps=config.norm_eps)
        spec = attention_spec_for(parse_attention(getattr(config, "attn", None), config.num_hidden_layers), layer_idx)
        # fla's get_attention: softmax attention on a hybrid's listed layers, the delta-rule mixer elsewhere
        self.attn = (
            mixer_class(config, layer_idx) if spec is None else SoftmaxAttention(config.hidden_size, spec, layer_idx)
        )
        self.mlp_norm = RMSNorm(config.hidden_size, eps=config.norm_eps)
        self.mlp = GatedMLP(config.hidden_size, config.hidden_ratio, config.intermediate_size, config.hidden_act)
        self.hook_resid_pre = HookPoint()  # (B, T, d_model)
        self.hook_attn_out = HookPoint()  # (B, T, d_model)
        self.hook_resid_mid = HookPoint()  # (B, T, d_model)
        self.hook_mlp_out = HookPoint()  # (B, T, d_model)
        self.hook_resid_post = HookPoint()  # (B, T, d_model)

    def forward(self, resid_pre: torch.Tensor) -> torch.Tensor:
        resid_pre = self.hook_resid_pre(resid_pre)
        attn_out = self.hook_attn_out(self.attn(self.attn_norm(resid_pre)))
        resid_mid = self.hook_resid_mid(resid_pre + attn_out)
        mlp_out = self.hook_mlp_out(self.mlp(self.mlp_norm(resid_mid)))
        return self.hook_resid_post(resid_mid + mlp_out)


class DeltaBackbone(nn.Module):
    """fla's `DeltaNetModel` parameters (embeddings, layers, norm) plus the two outer hooks."""

    def __init__(self, config, mixer_class: type) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([DeltaBlock(config, i, mixer_class) for i in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, eps=config.norm_eps)
        self.hook_embed = HookPoint()  # (B, T, d_model), named "hook_embed"
        self.hook_scale = HookPoint()  # (B, T, 1) sqrt(mean(x^2) + eps), named "ln_final.hook_scale"; read-only
        self.hook_normalized = HookPoint()  # (B, T, d_model), named "ln_final.hook_normalized"


def _check_supported(config) -> None:
    unsupported = []
    if getattr(config, "attnres_block_size", None) is not None:
        unsupported.append("attention residuals (config.attnres_block_size)")
    if unsupported:
        raise NotImplementedError(
            "deltalens implements delta-rule stacks with optional softmax-attention layers; this config asks for "
            + " and ".join(unsupported)
            + ". Set them to None."
        )


def _is_attention(mixer: nn.Module) -> bool:
    return getattr(mixer, "is_softmax_attention", False)


class HookedDeltaLM(LensModel, HookedRootModule):
    """A delta-rule language model with TransformerLens hooks; weights interchangeable with fla's.

    Subclasses set `mixer_class` (the token mixer) and `arch`; the config is fla's config object of
    that architecture or its fla-free twin (models/io/configs.py, what models.build uses).
    `model(tokens)` maps a LongTensor [B, T] to logits [B, T, vocab]. The delta rule runs on fla's
    Triton kernels for CUDA tensors and on pure-torch (or C) kernels elsewhere.
    """

    mixer_class: type = nn.Module
    arch: str = ""
    settings: type[FlaSettings] = FlaSettings  # fla-free config class (its fla_model / model_type name fla's classes)
    backbone_class: type = DeltaBackbone  # fla's *Model module tree (RWKV-7 has its own block: models/lm/rwkv7.py)

    def __init__(self, config) -> None:
        super().__init__()
        _check_supported(config)
        self.config = config
        self.model = self.backbone_class(config, self.mixer_class)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embeddings.weight
        self.init_weights()
        self.setup()

    # ---- construction ----------------------------------------------------------------------

    def init_weights(self) -> None:
        """fla's initialisation: N(0, initializer_range) for linear, conv and embedding weights."""
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Conv1d, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            elif hasattr(module, "reset_parameters") and not isinstance(module, HookPoint):
                module.reset_parameters()

    def setup(self) -> None:
        """HookedRootModule.setup with TransformerLens names instead of fla's module paths.

        Every module gets `.name` = lens_name(path); `mod_dict` maps those names to modules and
        `hook_dict` the HookPoints among them, so run_with_cache keys, run_with_hooks / hooks()
        names and `hook.name` inside hook functions are all e.g. 'blocks.0.attn.hook_beta'.
        """
        self.mod_dict = {}
        self.hook_dict = {}
        for path, module in self.named_modules():
            if path == "":
                continue
            name = lens_name(path)
            module.name = name
            self.mod_dict[name] = module
            if isinstance(module, HookPoint):
                self.hook_dict[name] = module

    # ---- shape: asked through cfg alone (TransformerLens's habit) --------------------------

    @property
    def blocks(self) -> nn.ModuleList:
        return self.model.layers

    @property
    def cfg(self) -> SimpleNamespace:
        """TransformerLens-style config (n_layers, d_model, n_heads, d_head, d_vocab, n_ctx,
        normalization_type, ...) plus the delta rule's own (d_k, d_v, allow_neg_eigval, n_factors, ...)."""
        n_layers, mixer = self.config.num_hidden_layers, self._first_mixer()
        d_v = mixer.head_v_dim if mixer is not None else 0
        return lens_cfg(
            model_name=type(self).__name__,
            model_type=self.arch,
            original_architecture=self.settings.fla_model,
            n_layers=n_layers,
            n_heads=mixer.num_heads if mixer is not None else self.config.num_heads,  # Gated DeltaNet: num_v_heads
            d_model=self.config.hidden_size,
            d_head=d_v,
            d_k=mixer.head_k_dim if mixer is not None else 0,  # per head: the key's (and query's) width
            d_v=d_v,
            d_mlp=self.model.layers[0].mlp.intermediate_size if n_layers else 0,
            d_vocab=self.config.vocab_size,
            d_vocab_out=self.config.vocab_size,
            n_ctx=self.config.max_position_embeddings,  # no limit for the recurrence; fla's field
            positional_embedding_type="rotary" if self.attention_layers else "none",
            eps=self.config.norm_eps,
            allow_neg_eigval=getattr(self.config, "allow_neg_eigval", False),  # an M²RNN stack has no beta
            device=self.device,
            state_norm_every=self.state_norm_every,
            n_factors=self.n_factors,
            gated=self.gated,
            delta_layers=self.delta_layers,
            attention_layers=self.attention_layers,
        )

    @integer_indices("layer")
    def mixer_input(self, layer: int, resid_pre: torch.Tensor) -> torch.Tensor:
        """What layer `layer`'s mixer reads from the residual stream: attn_norm(resid_pre)."""
        return self.model.layers[layer].attn_norm(resid_pre)

    @property
    def W_E(self) -> torch.Tensor:
        """The embedding, (d_vocab, d_model)."""
        return self.model.embeddings.weight

    @property
    def W_U(self) -> torch.Tensor:
        """The unembedding (d_model, d_vocab) with the final norm's weight folded in (TransformerLens's
        fold_ln convention), so that cache.apply_ln_to_stack(resid) @ W_U gives the logits."""
        return (self.lm_head.weight * self.model.norm.weight).T

    @property
    def b_U(self) -> torch.Tensor:
        return torch.zeros(self.config.vocab_size, device=self.device)

    def tokens_to_residual_directions(self, tokens) -> torch.Tensor:
        """W_U's column of each token (..., d_model): what logit_attrs projects onto."""
        tokens = torch.as_tensor(tokens, device=self.device)
        return self.W_U[:, tokens].movedim(0, -1)

    @property
    def n_factors(self) -> int:
        """Householder factors per token, n_h (1 except in DeltaProduct)."""
        return getattr(self._first_mixer(), "n_factors", 1)

    @property
    def gated(self) -> bool:
        """True when the state decays by a gate alpha_t = exp(g_t) (hook_gate)."""
        return bool(getattr(self._first_mixer(), "use_decay", False))

    @property
    def state_norm_every(self) -> int:
        """Tokens between state renormalisations (deltalens extension; 0 = plain DeltaNet)."""
        return getattr(self._first_mixer(), "state_norm_every", 0)

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def model_config(self) -> dict[str, Any]:
        """JSON-able config: `models.build(model.arch, **model.model_config)` rebuilds this model."""
        return fla_model_config(self.config, self.arch)

    # ---- forward ---------------------------------------------------------------------------

    def forward(self, tokens: torch.Tensor, return_type: Optional[str] = "logits") -> Any:
        """tokens [B, T] (LongTensor) -> logits [B, T, vocab].

        return_type: "logits" (default), "loss" (mean next-token cross-entropy), "both"
        ((logits, loss)) or None (run for the hooks only; returns None). Text is read with the model's
        tokenizer first, as HookedTransformer(text) does.
        """
        tokens = self._checked_tokens(tokens)
        if return_type not in ("logits", "loss", "both", None):
            raise ValueError(f"return_type must be 'logits', 'loss', 'both' or None, got {return_type!r}.")
        tokens = tokens.to(self.device)
        x = self._backbone_forward(tokens)
        if return_type is None:
            return None
        logits = refuse_nonfinite(self, self.lm_head(x))  # (B, T, vocab); a NaN weight named here, not at load
        if return_type == "logits":
            return logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))
        return loss if return_type == "loss" else (logits, loss)

    def _backbone_forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) -> the final norm's output (B, T, d_model), through every hook of the stack."""
        x = self.model.hook_embed(self.model.embeddings(tokens))  # (B, T, d_model)
        for block in self.model.layers:
            x = block(x)
        if self.model.hook_scale.has_hooks():  # for TransformerLens's apply_ln: the norm's scale, shown only
            x32 = x.float()
            self.model.hook_scale(torch.sqrt(x32.square().mean(-1, keepdim=True) + self.model.norm.eps))
        return self.model.hook_normalized(self.model.norm(x))

    # ---- interventions ---------------------------------------------------------------------

    def _mixers(self, layer: Optional[int]) -> list[nn.Module]:
        """The delta-rule mixers of all layers (None; a hybrid's attention layers left out) or of one."""
        if layer is None:
            return [block.attn for block in self.model.layers if not _is_attention(block.attn)]
        not_attention = [
            i for i in range(self.cfg.n_layers) if i not in self.attention_layers
        ]  # the M²RNN refuses itself
        index = delta_layer_index(
            self, layer, "hybrid is softmax attention (no beta, state or recurrence)", allowed=not_attention
        )
        return [self.model.layers[index].attn]

    def _first_mixer(self) -> Optional[nn.Module]:
        """The first delta-rule mixer (what cfg's per-head shape fields describe), or None."""
        mixers = self._mixers(None)
        return mixers[0] if mixers else None

    @property
    def attention_layers(self) -> list[int]:
        """The layers that are softmax attention (a hybrid's config.attn); [] for a pure delta-rule stack."""
        return attention_layers(parse_attention(getattr(self.config, "attn", None), self.config.num_hidden_layers))

    @property
    def delta_layers(self) -> list[int]:
        """The layers that run the delta rule (every layer but the attention ones)."""
        skip = set(self.attention_layers)
        return [layer for layer in range(self.config.num_hidden_layers) if layer not in skip]

    @integer_indices("layer", "head", "factor")
    def set_beta_range(
        self,
        layer: Optional[int],
        head: Union[int, Sequence[int], None],
        lo: float,
        hi: float,
        factor: Union[int, Sequence[int], None] = None,
    ) -> None:
        """beta = lo + (hi - lo) * sigmoid(b_proj(x)) for that layer and head (None = all of them).

        E.g. set_beta_range(11, 3, 0.0, 1.0) takes head 3 of layer 11 from [0, 2] back to [0, 1].
        `factor` picks Householder factors of a DeltaProduct (None = all). lo and hi are buffers
        outside the state_dict; `reset_beta_range()` restores the config's.
        """
        for mixer in self._mixers(layer):
            if factor is None:
                mixer.set_beta_range(lo, hi, head)
            elif not getattr(mixer, "factor_axis", False):
                raise DeltalensError(f"{type(self).__name__} applies one factor per token; pass factor=None.")
            else:
                mixer.set_beta_range(lo, hi, head, factor=factor)

    @integer_indices("layer")
    def reset_beta_range(self, layer: Optional[int] = None) -> None:
        """Restore [0, 2] (allow_neg_eigval) or [0, 1] for one layer or, by default, all layers."""
        for mixer in self._mixers(layer):
            mixer.reset_beta_range()

    @integer_indices("layer")
    def beta_range(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(lo, hi), each [n_heads] ([n_heads, n_factors] for a DeltaProduct), of one layer."""
        mixer = self._mixers(layer)[0]
        return mixer.beta_lo.clone(), mixer.beta_hi.clone()

    @contextmanager
    @integer_indices("layer")
    def state_edit(self, layer: int, edit: Callable[[int, torch.Tensor], torch.Tensor]) -> Iterator[HookedDeltaLM]:
        """Within the block, layer `layer` runs the reference recurrence with S_t := edit(t, S_t).

        edit gets t and S_t [batch, head, d_k, d_v] after every token (after all of a DeltaProduct's
        factors) and returns the state the recurrence continues from (token by token, so slower
        than the chunked kernel).
        """
        mixer = self._mixers(layer)[0]
        previous, mixer.state_edit = mixer.state_edit, edit
        try:
            yield self
        finally:
            mixer.state_edit = previous

    def set_kernel(self, use_fla: Optional[bool] = None, chunk_size: int = 64) -> None:
        """Choose the delta-rule kernel: use_fla None (auto: fla on CUDA), True, or False (torch)."""
        for mixer in self._mixers(None):
            mixer.use_fla = use_fla
            mixer.chunk_size = chunk_size

    # ---- fla / HF interchange ----------------------------------------------------------------

    @classmethod
    def from_fla(cls, fla_model: nn.Module) -> HookedDeltaLM:
        """This class with the weights of fla's model (`DeltaNetForCausalLM` for HookedDeltaNet, ...)."""
        model = cls(fla_model.config)
        model.load_state_dict(fla_model.state_dict())
        return model.to(next(fla_model.parameters()).device)

    def to_fla(self) -> nn.Module:
        """fla's model (`fla.models.DeltaNetForCausalLM` for HookedDeltaNet, ...) with these weights."""
        fla_model = fla_class(self.settings.fla_model)(to_fla_config(self.config))
        fla_model.load_state_dict(self.state_dict())
        return fla_model.to(self.device)

    def save_pretrained(self, save_directory: Union[str, os.PathLike], extra_config: Optional[dict] = None) -> None:
        """Write `config.json` + `model.safetensors` that fla's `from_pretrained` loads.

        extra_config: extra top-level keys for config.json (e.g. {"deltalens": {...}}); they must
        not shadow a field of fla's config. HF keeps unknown keys as config attributes, so fla's
        `*ForCausalLM.from_pretrained` still loads the directory. Each file is written
        atomically (temp file + rename). As with HF, a tied lm_head.weight is stored once. The
        writer is models/io/hf_folder.py's, the one models.save uses.
        """
        write_model_folder(self, save_directory, extra_config)

    @classmethod
    def from_pretrained(
        cls,
        directory: Union[str, os.PathLike],
        device: Union[str, torch.device, None] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> HookedDeltaLM:
        """Load a directory written by this class's or fla's `save_pretrained` (safetensors only).

        models/io reads and checks it once (models/io/model_folder.py: fields, memory), as for
        models.load; extra keys in config.json (e.g. "deltalens") stay on `model.config` as
        attributes, as HF does. HookedDeltaLM itself opens the folder's own architecture.
        """
        folder = read_model_folder(directory)
        model_class = family(folder.arch).resolve_model()
        if not (isinstance(model_class, type) and issubclass(model_class, cls)):
            raise DeltalensError(f"{directory} holds a {family(folder.arch).class_name}, not a {cls.__name__}.")
        with explained_build_errors(folder.config_file, folder.arch), random_init_skipped():  # weights set below
            model = model_class(model_class.settings(**folder.build_config))
        load_weights(model, folder.arch, folder.weights_file)
        model.eval()
        for key, value in folder.config.items():
            if not hasattr(model.config, key):
                setattr(model.config, key, value)
        if dtype is not None:
            model = model.to(dtype)
        if device is not None:
            model = model.to(device)
        return model
