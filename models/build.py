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
from deltalens.models.io.configs import SETTINGS


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


# deltalens's own config fields per architecture. fla's configs keep unknown keyword arguments as
# attributes and write them to config.json, so these ride along in the same config object; fla
# itself ignores them (its DeltaNetForCausalLM runs the plain delta rule on the same weights).
EXTENSION_KEYS: dict[str, tuple[str, ...]] = {
    "deltanet": ("state_norm_every",),
    "gated_deltanet": (),
    "deltaproduct": (),
}
DELTANET_EXTENSION_KEYS = EXTENSION_KEYS["deltanet"]


def _config_keys(arch: str) -> list[str]:
    return list(SETTINGS[arch].defaults) + list(EXTENSION_KEYS[arch])


def fla_model_config(config, arch: str = "deltanet") -> dict[str, Any]:
    """The JSON-able fla config arguments (and deltalens extensions) of an fla config (object or dict)."""
    as_dict = config if isinstance(config, dict) else config.to_dict()
    return {key: as_dict[key] for key in _config_keys(arch) if key in as_dict}


def deltanet_model_config(config) -> dict[str, Any]:
    """`fla_model_config` of a DeltaNet config."""
    return fla_model_config(config, "deltanet")


def _build_delta_family(arch: str, config: dict[str, Any]):
    if arch == "deltanet":
        from deltalens.models.lm.deltanet import HookedDeltaNet as cls  # lazy: see above
    elif arch == "gated_deltanet":
        from deltalens.models.lm.gated_deltanet import HookedGatedDeltaNet as cls
    else:
        from deltalens.models.lm.deltaproduct import HookedDeltaProduct as cls

    known = set(_config_keys(arch))
    unknown = sorted(set(config) - known)
    if unknown:
        # fla's config swallows unknown keys silently; a typo would build the wrong model.
        raise DeltalensError(
            f"unknown {arch} config key(s) {', '.join(map(repr, unknown))}; "
            f"use fla {SETTINGS[arch].fla_config} arguments such as {', '.join(sorted(known))}"
        )
    model = cls(SETTINGS[arch](**config))
    _stamp(model, arch, lambda: fla_model_config(model.config, arch))
    return model


def _stamp(model, arch: str, model_config) -> None:
    """Give a model `arch` and `model_config` unless its class already defines them."""
    if not hasattr(model, "arch"):
        model.arch = arch
    if not hasattr(model, "model_config"):
        model.model_config = model_config()
