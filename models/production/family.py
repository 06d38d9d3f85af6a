"""What one production family is (a transformers model type whose delta-rule layers deltalens opens),
and the checks every such config.json passes before a weight is read.

    ProductionFamily(...)          one record per family, declared in the family's own module
    check_config(family, config)   unsupported options refused by name, one sentence
    footprint(family, config)      parameters counted on the meta device; bytes in fp32 and bf16
                                   (the load-time memory check is the registry's `weights` bound)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deltalens.core.errors import DeltalensError

if TYPE_CHECKING:  # transformers is imported when a model is built, not when a record is declared
    from transformers import PretrainedConfig

__all__ = ["Footprint", "LAYERS_3_1", "ProductionFamily", "check_config", "footprint", "tiny_gdn_fields"]


@dataclass(frozen=True)
class ProductionFamily:
    """What the hooked model needs beyond the family's registry record (models/families/<arch>.py), whose
    name, display name and model types it reads rather than repeats."""

    arch: str  # deltalens' name for it (model.arch): the registry record's key
    lm_class: type  # transformers' causal LM class, built from `config_class`
    config_class: type[PretrainedConfig]
    linear_mixer: type  # our hooked subclass of the family's delta-rule layer
    layer_types: tuple[str, ...]  # the layer kinds the family's config may list
    neg_eigval: Callable[[Any], bool] = lambda config: False  # beta in [0, 2]?
    text_config_key: str = "text_config"  # where a multimodal config keeps its text tower
    refused: dict[str, str] = field(default_factory=dict)  # config key -> why it is not supported
    positions: str = "rotary"  # what its attention layers encode position with (cfg.positional_embedding_type)
    # the offline stand-in (tests/production_standin.py): vocab_size -> a tiny config of the text model, 4 layers
    # mixing its layer kinds; and, for a multimodal model type (model_types[1]), text config -> that tiny model
    tiny: Callable[[int], Any] | None = None
    tiny_multimodal: Callable[[Any], Any] | None = None

    @property
    def display(self) -> str:
        return self._record().display

    @property
    def model_types(self) -> tuple[str, ...]:  # config.json "model_type"s read (a multimodal one: its text tower)
        return self._record().model_types

    def _record(self):
        from deltalens.models.registry import family

        return family(self.arch)

    @property
    def library_mixer(self) -> type:
        """transformers' delta-rule layer class (the last base of our hooked subclass): a layer whose mixer is
        one is a delta-rule layer, wherever the library keeps it (`linear_attn`, or `self_attn` in Kimi Linear)."""
        return self.linear_mixer.__bases__[-1]

    def text_config(self, raw: dict[str, Any]) -> dict[str, Any]:
        """The text tower's fields of a config.json (the whole dict when it has no tower)."""
        inner = raw.get(self.text_config_key)
        return dict(inner) if isinstance(inner, dict) and raw.get("model_type") not in self.model_types[:1] else raw

    def make_config(self, raw: dict[str, Any]):
        fields = {k: v for k, v in self.text_config(raw).items() if k not in ("model_type", "architectures")}
        return self.config_class.from_dict(fields)


def tiny_gdn_fields(vocab_size: int, layer_types: list[str]) -> dict[str, Any]:
    """The sizes every Gated DeltaNet family's stand-in shares: 64 wide, 4 layers, 2 key heads of 16 and 4
    value heads of 8 in the delta-rule layers, 4 query heads over 2 key-value heads in attention."""
    return dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=8, linear_num_key_heads=2,
        linear_num_value_heads=4, layer_types=layer_types, bos_token_id=1, pad_token_id=0, eos_token_id=None,
        tie_word_embeddings=False,
    )  # fmt: skip


LAYERS_3_1 = ["linear_attention", "linear_attention", "full_attention", "linear_attention"]  # a stand-in's layers


def check_config(family: ProductionFamily, raw: dict[str, Any], where: str = "config.json") -> None:
    """Refuse what the hooked model would get wrong, naming the option, before anything is built."""
    text = family.text_config(raw)
    for key, why in {"quantization_config": "quantised weights are not read", **family.refused}.items():
        if raw.get(key) is not None or text.get(key) is not None:
            raise DeltalensError(f"{where} sets {key!r}, which deltalens does not open: {why}")
    kinds = text.get("layer_types") or []
    unknown = sorted({str(kind) for kind in kinds} - set(family.layer_types))
    if unknown:
        raise DeltalensError(
            f"{where} lists layer type(s) {', '.join(map(repr, unknown))}; a {family.display} model here has only "
            f"{', '.join(map(repr, family.layer_types))} layers"
        )
    _check_counts(text, where)
    heads_k, heads_v = text.get("linear_num_key_heads"), text.get("linear_num_value_heads")
    if isinstance(heads_k, int) and isinstance(heads_v, int) and (heads_k < 1 or heads_v % heads_k):
        raise DeltalensError(
            f"{where} has linear_num_value_heads={heads_v}, not a multiple of linear_num_key_heads={heads_k}"
        )


# the size fields of the families' configs: a positive whole number where set (transformers would fail far from
# the cause, or build a model that silently differs)
COUNTS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
    "linear_value_head_dim", "linear_conv_kernel_dim", "moe_intermediate_size", "shared_expert_intermediate_size",
    "linear_num_heads", "linear_head_dim", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
)  # fmt: skip
EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts")  # 0: dense MLPs (where the family allows)


def _count(text: dict[str, Any], key: str, where: str, least: int) -> int | None:
    value = text.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise DeltalensError(
            f"{where} has {key}={value!r}; it must be a whole number of at least {least}: check config.json"
        )
    return value


def _check_counts(text: dict[str, Any], where: str) -> None:
    """Sizes positive, layer_types one per layer, top-k within the experts: one sentence naming the field."""
    for key in COUNTS:
        _count(text, key, where, 1)
    layers = _count(text, "num_hidden_layers", where, 1)
    kinds = text.get("layer_types")
    if kinds is not None:
        if not isinstance(kinds, list) or not all(isinstance(kind, str) for kind in kinds):
            raise DeltalensError(f"{where} has layer_types={kinds!r}; it must be a list of layer-type names")
        if layers is not None and len(kinds) != layers:
            raise DeltalensError(
                f"{where} lists {len(kinds)} layer_types for num_hidden_layers={layers}; give one per layer"
            )
    experts = next((_count(text, key, where, 0) for key in EXPERTS if text.get(key) is not None), None)
    top_k = _count(text, "num_experts_per_tok", where, 1)
    if experts and top_k is not None and top_k > experts:
        raise DeltalensError(
            f"{where} routes each token to num_experts_per_tok={top_k} experts of {experts}; it must be at most "
            f"the number of experts"
        )


@dataclass(frozen=True)
class Footprint:
    parameters: int
    fp32_bytes: int
    bf16_bytes: int

    def line(self) -> str:
        return (
            f"{self.parameters:,} parameters: {self.fp32_bytes / 2**30:.2f} GB in fp32, "
            f"{self.bf16_bytes / 2**30:.2f} GB in bf16"
        )


def footprint(family: ProductionFamily, config) -> Footprint:
    """Parameters of transformers' own model for `config`, built on the meta device (nothing allocated)."""
    import torch

    with torch.device("meta"):
        model = family.lm_class(config)
    tensors = {id(t): t for t in model.parameters()}.values()  # tied weights counted once
    count = sum(t.numel() for t in tensors)
    return Footprint(count, 4 * count, 2 * count)
