"""What kind of model this is: the architecture every deltalens model carries, and its shape.

    architecture_of(model)   'deltanet' | 'transformer' | 'lstm'
    n_layers_of(model), n_heads_of(model)
    require_deltanet(model, what)   one sentence for tools that need beta or the matrix state S_t
"""
from __future__ import annotations

from deltalens.tasks.errors import DeltalensError

ARCHITECTURES = ("deltanet", "transformer", "lstm")
ARTICLE = {"deltanet": "a DeltaNet", "transformer": "a Transformer", "lstm": "an LSTM"}
_CLASS_ARCH = {"HookedDeltaNet": "deltanet", "HookedLSTM": "lstm", "TransformerBridge": "transformer"}


def architecture_of(model) -> str:
    """'deltanet', 'transformer' or 'lstm' (the `arch` every deltalens model carries)."""
    arch = getattr(model, "arch", None) or _CLASS_ARCH.get(type(model).__name__)
    if arch is None:
        raise DeltalensError(
            f"{type(model).__name__} is not a deltalens model; build or load one with models.build/load."
        )
    return arch


def n_layers_of(model) -> int:
    cfg = getattr(model, "cfg", None)
    if cfg is not None and getattr(cfg, "n_layers", None):
        return int(cfg.n_layers)
    return int(getattr(model, "model_config", {}).get("n_layers") or len(model.blocks))


def n_heads_of(model) -> int:
    if architecture_of(model) == "lstm":
        return 0
    return int(model.cfg.n_heads)


def require_deltanet(model, what: str = "beta") -> None:
    """Raise a DeltalensError naming the architecture unless `model` is a DeltaNet."""
    arch = architecture_of(model)
    if arch != "deltanet":
        raise DeltalensError(
            f"this model is {ARTICLE.get(arch, arch)}, which has no {what}: only DeltaNet's delta rule has a "
            f"write strength beta and a matrix state S_t; run the eigenvalue, subspace and beta tools on a "
            f"DeltaNet checkpoint, or use the residual-stream probes on this one."
        )
