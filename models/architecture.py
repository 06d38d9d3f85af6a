"""What kind of model this is: the architecture every deltalens model carries, and its shape.

    architecture_of(model)   'deltanet' | 'gated_deltanet' | 'deltaproduct' | 'transformer' | 'lstm'
    is_delta_rule(arch)      True for the delta-rule family (beta, a matrix state S_t)
    n_layers_of(model), n_heads_of(model)
    require_delta_rule(model, what)   one sentence for tools that need beta or the matrix state S_t

The family table (`FAMILY`) says which hooks and probes apply to each architecture; the report and
the dashboard print it instead of special-casing names.
"""

from __future__ import annotations

from deltalens.core.errors import DeltalensError

DELTA_RULE = ("deltanet", "gated_deltanet", "deltaproduct")
ARCHITECTURES = (*DELTA_RULE, "transformer", "lstm")
ARTICLE = {
    "deltanet": "a DeltaNet",
    "gated_deltanet": "a Gated DeltaNet",
    "deltaproduct": "a DeltaProduct",
    "transformer": "a Transformer",
    "lstm": "an LSTM",
}
DISPLAY = {
    "deltanet": "DeltaNet",
    "gated_deltanet": "Gated DeltaNet",
    "deltaproduct": "DeltaProduct",
    "transformer": "Transformer",
    "lstm": "LSTM",
}
_CLASS_ARCH = {
    "HookedDeltaNet": "deltanet",
    "HookedGatedDeltaNet": "gated_deltanet",
    "HookedDeltaProduct": "deltaproduct",
    "HookedLSTM": "lstm",
    "TransformerBridge": "transformer",
}
CLASS_NAME = {arch: name for name, arch in _CLASS_ARCH.items()}  # architecture -> its model class

_DELTA_HOOKS = "q, k, v, beta_logit, beta, state, z"
_DELTA_PROBES = "eigenvalues, state rank and subspaces, linear probes, belief decay"
_DELTA_INTERVENTIONS = "beta range, head ablation, state patching"
# architecture -> (per-head hooks beyond the residual stream, probes, interventions)
FAMILY: dict[str, tuple[str, str, str]] = {
    "deltanet": (_DELTA_HOOKS, _DELTA_PROBES, _DELTA_INTERVENTIONS),
    "gated_deltanet": (_DELTA_HOOKS + ", gate", _DELTA_PROBES, _DELTA_INTERVENTIONS + ", gate clamp"),
    "deltaproduct": (
        _DELTA_HOOKS + "; k, v and beta per factor; gate when gated",
        _DELTA_PROBES + ", per-token product (eigenvalues, the permutation it applies)",
        "beta range (per factor), head ablation, state patching, gate clamp when gated",
    ),
    "transformer": ("q, k, v, attn_scores, pattern, z", "linear probes", "head ablation"),
    "lstm": ("hidden, cell", "linear probes", "unit ablation"),
}


def is_delta_rule(arch: str) -> bool:
    return arch in DELTA_RULE


def architecture_of(model) -> str:
    """One of ARCHITECTURES (the `arch` every deltalens model carries)."""
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


def require_delta_rule(model, what: str = "beta") -> None:
    """Raise a DeltalensError naming the architecture unless `model` is of the delta-rule family."""
    arch = architecture_of(model)
    if not is_delta_rule(arch):
        raise DeltalensError(
            f"this model is {ARTICLE.get(arch, arch)}, which has no {what}: only the delta rule (DeltaNet, Gated "
            f"DeltaNet, DeltaProduct) has a write strength beta and a matrix state S_t; run the eigenvalue, subspace "
            f"and beta tools on such a checkpoint, or use the residual-stream probes on this one."
        )
