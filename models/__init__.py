"""Models: one way in for every architecture deltalens trains and opens up.

Read paper_deltanet.py first: DeltaNet with beta in [0, 2] as the paper writes it, in one torch-only
file (~250 lines), which loads a shipped checkpoint and gives the hooked model's logits.

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

Every model carries `arch` (one of ARCHITECTURES, the families registered in models/registry.py) and
`model_config`, a JSON-able dict with `build(model.arch, **model.model_config)` rebuilding it. Config
keys per architecture:

* deltanet: fla's `DeltaNetConfig` arguments (vocab_size, hidden_size, num_hidden_layers,
  num_heads, allow_neg_eigval, ...; held by models/io/configs.py, so fla is not imported)
  plus deltalens's extension `state_norm_every` (int, default
  0 = off: renormalise each head's state to unit Frobenius norm after every that many tokens; see
  models/layers/deltanet_mixer.py); the model is `models.deltanet.HookedDeltaNet`.
* gated_deltanet, deltaproduct: fla's `GatedDeltaNetConfig` / `GatedDeltaProductConfig` arguments
  (head_dim, num_heads, num_householder, use_forget_gate, allow_neg_eigval, ...; models/io/configs.py);
  the models are `models.gated_deltanet.HookedGatedDeltaNet` and `models.deltaproduct.HookedDeltaProduct`.
* transformer: `models.transformer.TransformerConfig`; the model is TransformerLens's own
  native Transformer (a `TransformerBridge`).
* lstm: `models.lstm.LSTMConfig`; the model is `models.lstm.HookedLSTM`.

Importing this package is cheap: each architecture's module (TransformerLens, fla) loads when
a model of it is first built (models/build.py). The tiers, lowest first: registry.py (one record per
architecture, each declared in its module of families/) and architecture.py (what kind of model);
ops/ (the delta-rule kernels); layers/ (mixers, norms, short convolution); io/ (the file format: the
family's typed configs without fla, the one writer and reader of a config.json +
model.safetensors folder, the "deltalens" section); lm/ (the language models: delta_lm.py around
every delta-rule mixer, deltanet.py, gated_deltanet.py, deltaproduct.py, transformer.py, lstm.py);
build.py; checkpoint.py (models.save / load: a checkpoint folder, swapped in atomically).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# torch-free, so imported here; `build` must be bound here, before anything imports the submodule of
# that name (which would otherwise shadow the function as the package attribute)
from deltalens.models.build import DELTANET_EXTENSION_KEYS, build, deltanet_model_config, fla_model_config

# public name -> (module, name there) of what needs torch; loaded on first use, so that the
# torch-free modules (models/io/footprint.py, ...) can check a folder before torch is imported
_API = {
    "ARCHITECTURES": ("deltalens.models.architecture", "ARCHITECTURES"),  # the registry's names, read when asked
    "load": ("deltalens.models.checkpoint", "load_checkpoint"),
    "read_checkpoint_meta": ("deltalens.models.checkpoint", "read_checkpoint_meta"),
    "save": ("deltalens.models.checkpoint", "save_checkpoint"),
}

if TYPE_CHECKING:  # the same names, eagerly, for static tools
    from deltalens.models.architecture import ARCHITECTURES
    from deltalens.models.checkpoint import load_checkpoint as load
    from deltalens.models.checkpoint import read_checkpoint_meta
    from deltalens.models.checkpoint import save_checkpoint as save

__all__ = sorted([*_API, "DELTANET_EXTENSION_KEYS", "build", "deltanet_model_config", "fla_model_config"])


def __getattr__(name: str):
    if name in _API:
        module, attribute = _API[name]
        value = getattr(importlib.import_module(module), attribute)
        if name != "ARCHITECTURES":  # a family registered later joins it
            globals()[name] = value  # once loaded, a plain attribute
        return value
    raise AttributeError(f"module 'deltalens.models' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
