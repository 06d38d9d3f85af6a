"""How much memory a config asks for, known before anything is built (no torch, no allocation).

A model folder from elsewhere may ask for hidden_size 10**7 or vocab_size 10**9; building it to
find out would allocate gigabytes, or take minutes for 10**5 layers. `weights_lower_bound` counts
the big matrices of each architecture from its config alone (embeddings, projections, MLPs,
recurrent weights; norms, convolutions and biases left out, so it never overestimates: the tests
compare it with the exact count of a model built on the meta device). `check_fits` refuses a
config whose bound exceeds the memory budget, before the exact check and the build.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from deltalens.core.errors import DeltalensError

BYTES_PER_WEIGHT = 4  # models are built in fp32
MEMORY_LIMIT_ENV = "DELTALENS_MAX_MODEL_GB"  # a stated limit on a model's weights, below what the machine has
# the config fields that set a model's size, named when it is too big
SIZE_FIELDS = (
    "vocab_size", "d_vocab", "hidden_size", "d_model", "num_hidden_layers", "n_layers", "num_heads", "n_heads",
    "num_v_heads", "head_dim", "d_head", "d_mlp", "intermediate_size", "hidden_ratio", "expand_k", "expand_v",
    "num_householder", "n_ctx",
)  # fmt: skip


def _number(config: dict[str, Any], key: str, default: float) -> float:
    """A size field as a number for counting (the typed config checks refuse bad ones with a sentence)."""
    value = config.get(key, default)
    if value is None:
        return default
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _mlp_width(hidden: float, config: dict[str, Any]) -> float:
    if config.get("intermediate_size") is not None:
        return _number(config, "intermediate_size", 0)
    width = int(hidden * _number(config, "hidden_ratio", 4) * 2 / 3)
    return 256 * ((width + 255) // 256)  # fla rounds it up to a multiple of 256


def _delta_family(arch: str, config: dict[str, Any], defaults: dict[str, Any]) -> float:
    config = {**defaults, **{k: v for k, v in config.items() if v is not None}}
    hidden, vocab = _number(config, "hidden_size", 0), _number(config, "vocab_size", 0)
    layers = _number(config, "num_hidden_layers", 0)
    heads = _number(config, "num_heads", 1)
    if arch == "deltanet":
        key, value = hidden * _number(config, "expand_k", 1), hidden * _number(config, "expand_v", 1)
        mixer = hidden * (2 * key + 2 * value)  # q, k, v, o projections
    else:
        factors = _number(config, "num_householder", 1) if arch == "deltaproduct" else 1
        head_dim = _number(config, "head_dim", 0)
        value_heads = _number(config, "num_v_heads", heads) if arch == "gated_deltanet" else heads
        key, value = heads * head_dim, value_heads * head_dim * _number(config, "expand_v", 1)
        mixer = hidden * (key * (1 + factors) + value * (factors + 1))  # q, k and v per factor, o
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    # a hybrid's softmax-attention layers hold at least q_proj and o_proj (hidden x hidden each)
    attention = min(_attention_layer_count(config.get("attn")), layers)
    mixers = (layers - attention) * mixer + attention * 2 * hidden * hidden
    return embeddings + mixers + layers * 3 * hidden * _mlp_width(hidden, config)


def _attention_layer_count(attn: Any) -> int:
    """How many layers fla's `attn` field lists (0 where it is absent or not of the right shape)."""
    specs = [attn] if isinstance(attn, dict) else attn if isinstance(attn, list) else []
    layers = [spec.get("layers") for spec in specs if isinstance(spec, dict)]
    return len({i for listed in layers if isinstance(listed, (list, tuple)) for i in listed if isinstance(i, int)})


def weights_lower_bound(arch: str, config: dict[str, Any]) -> int:
    """Bytes the model's weights take at least (fp32), from the config alone."""
    if arch in ("deltanet", "gated_deltanet", "deltaproduct"):
        from deltalens.models.io.configs import SETTINGS  # the family's defaults; no torch

        count = _delta_family(arch, config, SETTINGS[arch].defaults)
    elif arch == "lstm":
        d, vocab = _number(config, "d_model", 64), _number(config, "d_vocab", 64)
        count = 2 * vocab * d + _number(config, "n_layers", 2) * 8 * d * d  # embed, unembed, 4 gates x (W_ih, W_hh)
    elif arch == "transformer":
        d, vocab = _number(config, "d_model", 64), _number(config, "d_vocab", 64)
        heads = _number(config, "n_heads", 4)
        d_head = _number(config, "d_head", d // max(heads, 1))
        d_mlp = _number(config, "d_mlp", 4 * d)
        count = 2 * vocab * d + _number(config, "n_layers", 2) * (4 * d * heads * d_head + 2 * d * d_mlp)
    else:
        return 0  # an unknown architecture is refused by the build with its own sentence
    return int(max(count, 0) * BYTES_PER_WEIGHT)


def available_memory() -> int | None:
    """Bytes this process may still allocate: the smaller of MemAvailable and the cgroup's headroom
    (None where neither can be read)."""
    found = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit, usage in (("memory.max", "memory.current"), ("memory.limit_in_bytes", "memory.usage_in_bytes")):
        for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/memory"):
            try:
                found.append(int(Path(root, limit).read_text()) - int(Path(root, usage).read_text()))
            except (OSError, ValueError):  # "max" (no limit) or no such file
                continue
    return min(found) if found else None


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


def check_fits(arch: str, config: dict[str, Any], need: int | None = None) -> None:
    """Refuse, with one sentence naming the size fields, a config whose weights exceed the budget.

    need: the exact byte count when known (models.build.weight_bytes), else the lower bound."""
    need = weights_lower_bound(arch, config) if need is None else need
    budget, source = memory_budget()
    if budget is not None and need > budget:
        sizes = ", ".join(f"{k}={config[k]}" for k in SIZE_FIELDS if config.get(k) is not None)
        raise DeltalensError(
            f"its weights alone would take {need / 2**30:,.1f} GB ({sizes}), more than the "
            f"{max(budget, 0) / 2**30:.1f} GB {source}; check those fields (or set ${MEMORY_LIMIT_ENV})"
        )


def check_folder(folder) -> None:
    """Check a model folder's config.json before torch or any module is loaded: the typed config
    fields of the delta-rule family and the memory bound. Problems the full loader explains better
    (a missing file, say) are left to it."""
    from deltalens.models.architecture import is_delta_rule
    from deltalens.models.io.configs import SETTINGS
    from deltalens.models.io.deltalens_section import explained_build_errors, fla_build_config, read_config
    from deltalens.models.io.hf_folder import CONFIG_NAME

    config_file = Path(folder) / CONFIG_NAME
    if not config_file.is_file():
        return
    arch, model_config, _, raw = read_config(config_file)
    with explained_build_errors(config_file, arch):
        if is_delta_rule(arch):
            model_config = fla_build_config(raw, arch)
            SETTINGS[arch](**model_config)  # every field's type and range, one sentence naming it
        check_fits(arch, model_config)
