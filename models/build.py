"""Build a freshly initialised model of any architecture from keyword config.

Each architecture is its record in models/registry.py; its model module is imported when a model of
it is first built: TransformerLens takes ~3 s to import on top of torch (measured on a 2-core CPU), and
reading a checkpoint's metadata or writing traces needs none. The delta-rule family's configs are
models/io/configs.py's, so building one on a CPU never imports fla (~6 s more).
"""

from __future__ import annotations

from typing import Any

from deltalens.core.errors import DeltalensError
from deltalens.models.io.configs import (  # re-exported: models.fla_model_config, ...
    DELTANET_EXTENSION_KEYS,
    deltanet_model_config,
    fla_model_config,
)
from deltalens.models.registry import family

__all__ = [
    "DELTANET_EXTENSION_KEYS",
    "build",
    "deltanet_model_config",
    "fla_model_config",
    "weight_bytes",
]


def build(arch: str, **config: Any):
    """A freshly initialised model of architecture `arch` built from keyword config.

    `vocab_size` (fla's name) is accepted by every architecture, as `d_vocab` for the baselines.

    >>> tiny = dl.build("deltanet", vocab_size=32, hidden_size=32, num_hidden_layers=1, num_heads=2)
    >>> tiny.cfg.n_heads, tiny.arch
    (2, 'deltanet')
    """
    record = family(arch)  # an unknown name: one sentence listing the registered ones
    if record.vocab_field != "vocab_size" and "vocab_size" in config:
        if record.vocab_field in config:
            raise DeltalensError(f"give the vocabulary size once: vocab_size or {record.vocab_field}, not both")
        config = {**config, record.vocab_field: config["vocab_size"]}
        del config["vocab_size"]
    return record.build(config)  # the model carries `arch` and `model_config`


def weight_bytes(arch: str, **config: Any) -> int:
    """The bytes of a model's parameters and buffers, from its config, allocating nothing.

    Models with one and with two layers are built on the meta device (no memory), and the rest
    extrapolated linearly: a config asking for 10**5 layers is measured as fast as one with two.
    (The memory check before a load uses the pure bound of models/io/footprint.py instead.)"""
    import torch  # lazy: this module is imported by code that never builds a model

    field = family(arch).layers_field
    layers = config.get(field)
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 2 or config.get("attn") is not None:
        return _meta_bytes(torch, arch, config)  # a hybrid's layers differ: count the whole model
    one, two = (_meta_bytes(torch, arch, {**config, field: n}) for n in (1, 2))
    return one + (layers - 1) * (two - one)


def _meta_bytes(torch, arch: str, config: dict[str, Any]) -> int:
    with torch.device("meta"):
        model = build(arch, **config)
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}.values()  # tied weights once
    return sum(t.numel() * t.element_size() for t in tensors)
