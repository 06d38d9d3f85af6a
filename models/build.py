"""Build a freshly initialised model of any architecture from keyword config.

Each architecture's module is imported when a model of it is first built: TransformerLens takes
~3 s to import on top of torch (measured on a 2-core CPU), and reading a checkpoint's metadata or
writing traces needs none. The delta-rule family's configs are models/io/configs.py's, so building
one on a CPU never imports fla (~6 s more).
"""

from __future__ import annotations

from typing import Any

from deltalens.core.errors import DeltalensError
from deltalens.models.architecture import ARCHITECTURES
from deltalens.models.io.configs import (  # re-exported: models.fla_model_config, ...
    DELTANET_EXTENSION_KEYS,
    EXTENSION_KEYS,
    SETTINGS,
    config_keys,
    deltanet_model_config,
    fla_model_config,
)

__all__ = [
    "DELTANET_EXTENSION_KEYS",
    "EXTENSION_KEYS",
    "build",
    "deltanet_model_config",
    "fla_model_config",
    "weight_bytes",
]


def build(arch: str, **config: Any):
    """A freshly initialised model of architecture `arch` built from keyword config.

    `vocab_size` (fla's name) is accepted by every architecture, as `d_vocab` for the baselines.
    """
    if arch in ("transformer", "lstm") and "vocab_size" in config:
        if "d_vocab" in config:
            raise DeltalensError("give the vocabulary size once: vocab_size or d_vocab, not both")
        config = {**config, "d_vocab": config["vocab_size"]}
        del config["vocab_size"]
    if arch == "transformer":
        from deltalens.models.lm.transformer import build_transformer, transformer_config_from_dict  # lazy: see above

        return build_transformer(transformer_config_from_dict(config))
    if arch == "lstm":
        from deltalens.models.lm.lstm import HookedLSTM, lstm_config_from_dict  # lazy: see above

        return HookedLSTM(lstm_config_from_dict(config))
    if arch in SETTINGS:
        return _build_delta_family(arch, config)
    raise DeltalensError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}")


def _build_delta_family(arch: str, config: dict[str, Any]):
    if arch == "deltanet":
        from deltalens.models.lm.deltanet import HookedDeltaNet as cls  # lazy: see above
    elif arch == "gated_deltanet":
        from deltalens.models.lm.gated_deltanet import HookedGatedDeltaNet as cls
    else:
        from deltalens.models.lm.deltaproduct import HookedDeltaProduct as cls

    known = set(config_keys(arch))
    unknown = sorted(set(config) - known)
    if unknown:
        # fla's config swallows unknown keys silently; a typo would build the wrong model.
        raise DeltalensError(
            f"unknown {arch} config key(s) {', '.join(map(repr, unknown))}; "
            f"use fla {SETTINGS[arch].fla_config} arguments such as {', '.join(sorted(known))}"
        )
    return cls(SETTINGS[arch](**config))  # the class carries `arch` and `model_config`


# the config field that counts layers, per architecture (the weights grow linearly in it)
LAYERS_FIELD = {
    "deltanet": "num_hidden_layers",
    "gated_deltanet": "num_hidden_layers",
    "deltaproduct": "num_hidden_layers",
    "transformer": "n_layers",
    "lstm": "n_layers",
}


def weight_bytes(arch: str, **config: Any) -> int:
    """The bytes of a model's parameters and buffers, from its config, allocating nothing.

    Models with one and with two layers are built on the meta device (no memory), and the rest
    extrapolated linearly: a config asking for 10**5 layers is measured as fast as one with two."""
    import torch  # lazy: this module is imported by code that never builds a model

    field = LAYERS_FIELD.get(arch)
    layers = config.get(field) if field else None
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 2 or config.get("attn") is not None:
        return _meta_bytes(torch, arch, config)  # a hybrid's layers differ: count the whole model
    one, two = (_meta_bytes(torch, arch, {**config, field: n}) for n in (1, 2))
    return one + (layers - 1) * (two - one)


def _meta_bytes(torch, arch: str, config: dict[str, Any]) -> int:
    with torch.device("meta"):
        model = build(arch, **config)
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}.values()  # tied weights once
    return sum(t.numel() * t.element_size() for t in tensors)
