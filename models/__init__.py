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
a model of it is first built (models/build.py). The modules: architecture.py (what kind of model),
build.py, checkpoint.py (the directory format), atomic.py (atomic writes), fla_config.py (fla's
configs without fla), delta_lm.py (the LM around every delta-rule mixer), deltanet.py,
gated_deltanet.py and deltaproduct.py with their mixers, kernels (delta_rule.py, gated_delta_rule.py),
norms and short convolution, transformer.py, lstm.py.
"""

from deltalens.models.architecture import ARCHITECTURES
from deltalens.models.build import DELTANET_EXTENSION_KEYS, build, deltanet_model_config, fla_model_config
from deltalens.models.checkpoint import load_checkpoint as load
from deltalens.models.checkpoint import read_checkpoint_meta
from deltalens.models.checkpoint import save_checkpoint as save

__all__ = [
    "ARCHITECTURES",
    "DELTANET_EXTENSION_KEYS",
    "build",
    "deltanet_model_config",
    "fla_model_config",
    "load",
    "read_checkpoint_meta",
    "save",
]
