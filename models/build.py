"""Build a freshly initialised model of any architecture from keyword config.

Each architecture's module is imported when a model of it is first built: TransformerLens takes
~3 s to import on top of torch (measured on a 2-core CPU), and reading a checkpoint's metadata or
writing traces needs none. DeltaNet's config is models/deltanet_config.py's, so building one on a
CPU never imports fla (~6 s more).
"""
from __future__ import annotations

from typing import Any

from deltalens.models.architecture import ARCHITECTURES
from deltalens.models.deltanet_config import FLA_DEFAULTS, DeltaNetSettings
from deltalens.tasks.errors import DeltalensError


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
        from deltalens.models.transformer import build_transformer, transformer_config_from_dict  # lazy: see above

        return build_transformer(transformer_config_from_dict(config))
    if arch == "lstm":
        from deltalens.models.lstm import HookedLSTM, lstm_config_from_dict  # lazy: see above

        return HookedLSTM(lstm_config_from_dict(config))
    if arch == "deltanet":
        return _build_deltanet(config)
    raise DeltalensError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}")


# deltalens's own DeltaNet config fields. fla's DeltaNetConfig keeps unknown keyword arguments as
# attributes and writes them to config.json, so these ride along in the same config object; fla
# itself ignores them (its DeltaNetForCausalLM runs the plain delta rule on the same weights).
DELTANET_EXTENSION_KEYS = ("state_norm_every",)


def _deltanet_config_keys() -> list[str]:
    return list(FLA_DEFAULTS) + list(DELTANET_EXTENSION_KEYS)


def deltanet_model_config(config) -> dict[str, Any]:
    """The JSON-able DeltaNetConfig arguments (and deltalens extensions) of an fla config (object or dict)."""
    as_dict = config if isinstance(config, dict) else config.to_dict()
    return {key: as_dict[key] for key in _deltanet_config_keys() if key in as_dict}


def _build_deltanet(config: dict[str, Any]):
    from deltalens.models.deltanet import HookedDeltaNet  # lazy: see above

    known = set(_deltanet_config_keys())
    unknown = sorted(set(config) - known)
    if unknown:
        # fla's config swallows unknown keys silently; a typo would build the wrong model.
        raise DeltalensError(
            f"unknown deltanet config key(s) {', '.join(map(repr, unknown))}; "
            f"use fla DeltaNetConfig arguments such as {', '.join(sorted(known))}"
        )
    model = HookedDeltaNet(DeltaNetSettings(**config))
    _stamp(model, "deltanet", lambda: deltanet_model_config(model.config))
    return model


def _stamp(model, arch: str, model_config) -> None:
    """Give a model `arch` and `model_config` unless its class already defines them."""
    if not hasattr(model, "arch"):
        model.arch = arch
    if not hasattr(model, "model_config"):
        model.model_config = model_config()
