"""How much memory a config asks for, known before anything is built (no torch, no allocation).

A model folder from elsewhere may ask for hidden_size 10**7 or vocab_size 10**9; building it to
find out would allocate gigabytes, or take minutes for 10**5 layers. `weights_lower_bound` counts
the big matrices of each architecture from its config alone, by its family's `weights`
(models/registry.py; embeddings, projections, MLPs, recurrent weights; norms, convolutions and
biases left out, so it never overestimates: the tests compare it with the exact count of a model
built on the meta device, models.build.weight_bytes). `check_fits` refuses a config whose bound
exceeds the memory budget; it is a pure function of the config, checked once when a folder is read
(models/io/model_folder.py), before the build.

The bound depends on the precision the weights are loaded in: `estimate_weights` counts them once (from
the safetensors headers when the folder has its weights, models/io/safetensors_header.py: exact, shards
included; else, or where the config asks for more than the file holds, from the config), and
`WeightsEstimate.bytes(dtype)` gives fp32's 4 bytes or bf16's 2 per value. A folder is refused when read
only if it fits in no precision deltalens runs (bf16 the smallest; a config beyond its file in fp32, as
it would be built); the load refuses a precision that does not fit, naming both figures
(models/io/load_dtype.py).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltalens.core.errors import DeltalensError
from deltalens.core.memory import available_memory  # noqa: F401 (re-exported)

BYTES_PER_WEIGHT = 4  # models are built in fp32
DTYPE_BYTES = {"fp32": 4, "bf16": 2}  # the precisions deltalens loads weights in (models/ops/precision.py)
SMALLEST = "bf16"  # a folder that does not fit in this is refused when read
BEYOND_FILE = "config, more than its weights file holds"  # such a config is checked in fp32 (no file to load)
MEMORY_LIMIT_ENV = "DELTALENS_MAX_MODEL_GB"  # a stated limit on a model's weights, below what the machine has
# the config fields that set a model's size, named when it is too big
SIZE_FIELDS = (
    "vocab_size", "d_vocab", "hidden_size", "d_model", "num_hidden_layers", "n_layers", "num_heads", "n_heads",
    "num_v_heads", "head_dim", "d_head", "d_mlp", "intermediate_size", "hidden_ratio", "expand_k", "expand_v",
    "num_householder", "n_ctx", "linear_num_value_heads", "linear_value_head_dim", "num_experts",
    "n_routed_experts", "moe_intermediate_size",
)  # fmt: skip


def gigabytes(n: float) -> str:
    """Bytes as GB for a sentence: 27.7, 13.8, 0.345 (three figures below 10 GB, so tiny models differ too)."""
    return f"{n / 2**30:,.1f}" if n >= 10 * 2**30 else f"{n / 2**30:.3g}"


def number(config: dict[str, Any], key: str, default: float) -> float:
    """A size field as a number for counting (the typed config checks refuse bad ones with a sentence)."""
    value = config.get(key, default)
    if value is None:
        return default
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return default
    if not math.isfinite(value):  # json reads Infinity / NaN; int(inf) would fail far from the cause
        raise DeltalensError(f"the config's {key} is {value}, not a finite number; check config.json")
    return float(value)


def size_fields(config: dict[str, Any]) -> str:
    """'hidden_size=3840, num_hidden_layers=32, ...' from the config and its text tower (multimodal configs
    keep the language model's sizes under text_config): the fields a too-big model is told to check."""
    inner = config.get("text_config")
    text = inner if isinstance(inner, dict) else {}
    pairs = [(k, config[k]) for k in SIZE_FIELDS if config.get(k) is not None]
    pairs += [(f"text_config.{k}", text[k]) for k in SIZE_FIELDS if text.get(k) is not None]
    return ", ".join(f"{k}={v}" for k, v in pairs) or "no size field found"


def _mlp_width(hidden: float, config: dict[str, Any]) -> float:
    if config.get("intermediate_size") is not None:
        return number(config, "intermediate_size", 0)
    width = int(hidden * number(config, "hidden_ratio", 4) * 2 / 3)
    return 256 * ((width + 255) // 256)  # fla rounds it up to a multiple of 256


def fla_lm_weights(
    config: dict[str, Any], defaults: dict[str, Any], mixer: Callable[[dict[str, Any], float], float]
) -> float:
    """The weights of fla's language model around a delta-rule mixer (embeddings, MLPs, a hybrid's
    attention layers), with `mixer(config, hidden)` counting one mixer's; `defaults` fill absent fields."""
    config = {**defaults, **{k: v for k, v in config.items() if v is not None}}
    hidden, vocab = number(config, "hidden_size", 0), number(config, "vocab_size", 0)
    layers = number(config, "num_hidden_layers", 0)
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    # a hybrid's softmax-attention layers hold at least q_proj and o_proj (hidden x hidden each)
    attention = min(_attention_layer_count(config.get("attn")), layers)
    mixers = (layers - attention) * mixer(config, hidden) + attention * 2 * hidden * hidden
    return embeddings + mixers + layers * 3 * hidden * _mlp_width(hidden, config)


def _attention_layer_count(attn: Any) -> int:
    """How many layers fla's `attn` field lists (0 where it is absent or not of the right shape)."""
    specs = [attn] if isinstance(attn, dict) else attn if isinstance(attn, list) else []
    layers = [spec.get("layers") for spec in specs if isinstance(spec, dict)]
    return len({i for listed in layers if isinstance(listed, (list, tuple)) for i in listed if isinstance(i, int)})


def weights_lower_bound(arch: str, config: dict[str, Any], bytes_per_weight: int = BYTES_PER_WEIGHT) -> int:
    """Bytes the model's weights take at least (fp32 unless told), from the config alone: its family's
    `weights` count (models/registry.py); 0 for an architecture without one (the build refuses an unknown one)."""
    from deltalens.models.registry import architectures, family  # torch-free

    count = family(arch).weights if arch in architectures() else None
    return int(max(count(config), 0) * bytes_per_weight) if count is not None else 0


@dataclass(frozen=True)
class WeightsEstimate:
    """A model's weights before anything is built: `values` floating-point numbers (each takes the load's
    dtype size) and `other_bytes` kept as stored; `source` says where the count comes from."""

    values: int
    other_bytes: int = 0
    source: str = "config"  # "safetensors header" (exact), "config" (a lower bound) or BEYOND_FILE

    def bytes(self, dtype: str) -> int:
        return self.values * DTYPE_BYTES[dtype] + self.other_bytes

    def figures(self) -> str:
        """'27.7 GB in fp32, 13.8 GB in bf16'."""
        return ", ".join(f"{gigabytes(self.bytes(name))} GB in {name}" for name in DTYPE_BYTES)

    def line(self) -> str:
        """The estimate as printed before a big load."""
        return f"{self.values:,} weights (from the {self.source}): {self.figures()}"


def estimate_weights(arch: str, config: dict[str, Any], weights_file: Path | None = None) -> WeightsEstimate:
    """The weights of `config`'s model: counted from the safetensors headers of `weights_file` (or its shards)
    where they can be read, else (or where the config asks for more than the file holds, a hostile
    config.json beside small weights) the config's lower bound. A config with a text tower (a multimodal
    checkpoint, of which deltalens loads the language model) is counted from the config: the file's other
    towers are never read."""
    from deltalens.models.io.safetensors_header import floating_count, other_bytes, stored_tensors

    from_config = weights_lower_bound(arch, config, 1)
    stored = None
    if weights_file is not None and not isinstance(config.get("text_config"), dict):
        stored = stored_tensors(weights_file)
    if stored and floating_count(stored) >= from_config:
        return WeightsEstimate(floating_count(stored), other_bytes(stored), "safetensors header")
    # no header, or a config asking for more than its file holds: the model built is the config's
    return WeightsEstimate(from_config, 0, BEYOND_FILE if stored else "config")


def gigabytes_from_env(variable: str) -> int | None:
    """Bytes an environment variable states in GB (None when it is unset or empty)."""
    stated = os.environ.get(variable)
    if not stated:
        return None
    try:
        return int(float(stated) * 2**30)
    except ValueError:
        raise DeltalensError(f"${variable} must be a number of GB, got {stated!r}") from None


def memory_budget() -> tuple[int | None, str]:
    """The byte budget for a model's weights and where it comes from."""
    stated = gigabytes_from_env(MEMORY_LIMIT_ENV)
    if stated is not None:
        return stated, f"${MEMORY_LIMIT_ENV}={os.environ[MEMORY_LIMIT_ENV]} allows"
    return available_memory(), "this machine has available"


def check_fits(
    arch: str,
    config: dict[str, Any],
    need: int | None = None,
    *,
    estimate: WeightsEstimate | None = None,
    dtype: str = "fp32",
    budget: tuple[int | None, str] | None = None,
) -> None:
    """Refuse, with one sentence naming the size fields, a config whose weights in `dtype` exceed the budget.

    need: the exact byte count when known (models.build.weight_bytes); else `estimate` (estimate_weights) in
    `dtype`, else the bound from the config alone. budget: memory_budget()'s answer when the caller has it."""
    if need is None:
        estimate = estimate or WeightsEstimate(weights_lower_bound(arch, config, 1))
        need = estimate.bytes(dtype)
    allowed, source = memory_budget() if budget is None else budget
    if allowed is None or need <= allowed:
        return
    sizes = size_fields(config)
    limit = f"more than the {gigabytes(max(allowed, 0))} GB {source}"
    others = [name for name in DTYPE_BYTES if name != dtype] if estimate is not None else []
    # another precision is offered only for weights that can be loaded (not a config beyond its file)
    loadable = estimate if estimate is not None and estimate.source != BEYOND_FILE else None
    smaller = [name for name in others if loadable is not None and loadable.bytes(name) <= allowed]
    if estimate is not None and smaller:
        raise DeltalensError(
            f"its weights would take {gigabytes(need)} GB ({sizes}) in {dtype}, {limit}, but "
            f"{gigabytes(estimate.bytes(smaller[0]))} GB in {smaller[0]}, which fits: load it with "
            f"dtype='{smaller[0]}' or 'auto' (--dtype {smaller[0]} or auto)"
        )
    also = "".join(f", {gigabytes(estimate.bytes(name))} GB in {name}" for name in others if estimate)
    raise DeltalensError(
        f"its weights alone would take {gigabytes(need)} GB ({sizes}){f' in {dtype}' if estimate else ''}"
        f"{also}, {limit}; check those fields (or set ${MEMORY_LIMIT_ENV})"
    )
