"""Models: one way in for every architecture deltalens trains and opens up.

    model = models.build("deltanet", vocab_size=32, hidden_size=64, num_hidden_layers=2,
                         num_heads=4, allow_neg_eigval=True)
    model = models.build("transformer", d_vocab=32, d_model=64, n_layers=2, n_heads=4, n_ctx=512)
    model = models.build("lstm", d_vocab=32, d_model=64, n_layers=2)

    logits = model(tokens)                        # tokens (B, T) int64 -> logits (B, T, vocab)
    logits, cache = model.run_with_cache(tokens)  # TransformerLens hooks on every architecture
    models.save(model, "checkpoints/s3-deltanet", extra={"tokenizer": ..., "task": ...,
                                                         "training": ..., "metrics": ...})
    model = models.load("checkpoints/s3-deltanet")
    meta = models.read_checkpoint_meta("checkpoints/s3-deltanet")   # no weights read

Every model carries `arch` (one of ARCHITECTURES) and `model_config`, a JSON-able dict with
`build(model.arch, **model.model_config)` rebuilding it. Config keys per architecture:

* deltanet: fla's `DeltaNetConfig` arguments (vocab_size, hidden_size, num_hidden_layers,
  num_heads, allow_neg_eigval, ...) plus deltalens's extension `state_norm_every` (int, default
  0 = off: renormalise each head's state to unit Frobenius norm after every that many tokens; see
  models/deltanet_mixer.py); the model is `models.deltanet.HookedDeltaNet`.
* transformer: `models.transformer.TransformerConfig`; the model is TransformerLens's own
  native Transformer (a `TransformerBridge`).
* lstm: `models.lstm.LSTMConfig`; the model is `models.lstm.HookedLSTM`.

Importing this package is cheap: torch, TransformerLens and fla load on first use.
"""

from __future__ import annotations

import inspect
from typing import Any

from tasks.errors import DeltalensError

ARCHITECTURES = ("deltanet", "transformer", "lstm")

__all__ = [
    "ARCHITECTURES",
    "build",
    "load",
    "save",
    "read_checkpoint_meta",
    "deltanet_model_config",
    "HookedLSTM",
    "LSTMConfig",
    "TransformerConfig",
    "HookedDeltaNet",
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
        from .transformer import build_transformer, transformer_config_from_dict

        return build_transformer(transformer_config_from_dict(config))
    if arch == "lstm":
        from .lstm import HookedLSTM, lstm_config_from_dict

        return HookedLSTM(lstm_config_from_dict(config))
    if arch == "deltanet":
        return _build_deltanet(config)
    raise DeltalensError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}")


# deltalens's own DeltaNet config fields. fla's DeltaNetConfig keeps unknown keyword arguments as
# attributes and writes them to config.json, so these ride along in the same config object; fla
# itself ignores them (its DeltaNetForCausalLM runs the plain delta rule on the same weights).
DELTANET_EXTENSION_KEYS = ("state_norm_every",)


def _deltanet_config_keys() -> list[str]:
    from fla.models import DeltaNetConfig

    params = inspect.signature(DeltaNetConfig.__init__).parameters.values()
    fla_keys = [p.name for p in params if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD]
    return fla_keys + list(DELTANET_EXTENSION_KEYS)


def deltanet_model_config(config) -> dict[str, Any]:
    """The JSON-able DeltaNetConfig arguments (and deltalens extensions) of an fla config (object or dict)."""
    as_dict = config if isinstance(config, dict) else config.to_dict()
    return {key: as_dict[key] for key in _deltanet_config_keys() if key in as_dict}


def _build_deltanet(config: dict[str, Any]):
    from fla.models import DeltaNetConfig

    from .deltanet import HookedDeltaNet

    known = set(_deltanet_config_keys())
    unknown = sorted(set(config) - known)
    if unknown:
        # fla's config swallows unknown keys silently; a typo would build the wrong model.
        raise DeltalensError(
            f"unknown deltanet config key(s) {', '.join(map(repr, unknown))}; "
            f"use fla DeltaNetConfig arguments such as {', '.join(sorted(known))}"
        )
    every = config.get("state_norm_every", 0)
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise DeltalensError(
            f"state_norm_every must be a non-negative integer (tokens between state renormalisations, "
            f"0 = off), got {every!r}"
        )
    model = HookedDeltaNet(DeltaNetConfig(**config))
    _stamp(model, "deltanet", lambda: deltanet_model_config(model.config))
    return model


def _stamp(model, arch: str, model_config) -> None:
    """Give a model `arch` and `model_config` unless its class already defines them."""
    if not hasattr(model, "arch"):
        model.arch = arch
    if not hasattr(model, "model_config"):
        model.model_config = model_config()


def save(model, path, extra: dict[str, Any] | None = None, files: dict[str, str] | None = None):
    """Write `model` (and text `files` beside it) to checkpoint directory `path` atomically."""
    from .checkpoint import save_checkpoint

    return save_checkpoint(model, path, extra, files)


def load(path, **model_config_overrides: Any):
    """Load any deltalens (or plain fla DeltaNet) checkpoint directory; see models.checkpoint."""
    from .checkpoint import load_checkpoint

    return load_checkpoint(path, **model_config_overrides)


def read_checkpoint_meta(path) -> dict[str, Any]:
    """The checkpoint's "deltalens" section (architecture, configs, metrics) without reading weights."""
    from .checkpoint import read_checkpoint_meta as _read

    return _read(path)


def __getattr__(name: str):
    # Lazy re-exports so `import models` does not pull in TransformerLens or fla.
    if name in ("HookedLSTM", "LSTMConfig"):
        from . import lstm

        return getattr(lstm, name)
    if name == "TransformerConfig":
        from .transformer import TransformerConfig

        return TransformerConfig
    if name == "HookedDeltaNet":
        from .deltanet import HookedDeltaNet

        return HookedDeltaNet
    raise AttributeError(f"module 'models' has no attribute {name!r}")
