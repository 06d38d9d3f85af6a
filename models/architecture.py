"""What kind of model this is: the architecture every deltalens model carries.

    architecture_of(model)   its family's name: 'deltanet', 'transformer', ... (models/registry.py)
    is_delta_rule(arch)      True for the delta-rule family (beta, a matrix state S_t)
    article_of(arch)            "a DeltaNet", for sentences
    delta_layer_index(model, layer, instead)   one layer, refused in words when it runs no delta rule
    delta_layers_of(model)   the layers that run a delta rule (beta, S_t); a hybrid's others are attention
                             (attention_layers_of) or non-linear recurrences (M²RNN)
    require_delta_rule(model, what)   one sentence for tools that need beta or the matrix state S_t

What each architecture is (names, hooks, which probes and interventions apply) is its record in
models/registry.py; `ARCHITECTURES` (the registered names) and `FAMILY` (name -> record, what the report
and the dashboard print) are read from it when asked for. A model's shape is asked of its TransformerLens-style
`model.cfg` alone, on every family (n_layers, n_heads: 0 for the LSTM, d_model, d_head, d_vocab, n_ctx).

>>> "deltanet" in dl.ARCHITECTURES and "lstm" in dl.ARCHITECTURES
True
>>> "deltanet" in dl.FAMILY                            # architecture -> what applies to it
True
"""

from __future__ import annotations

from deltalens.core.errors import DeltalensError
from deltalens.models.registry import architectures, families, family, family_of_class


def __getattr__(name: str):
    if name == "ARCHITECTURES":
        return architectures()
    if name == "FAMILY":
        return {record.arch: record for record in families()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_delta_rule(arch: str) -> bool:
    return arch in architectures() and family(arch).delta_rule


def article_of(arch: str) -> str:
    """'a DeltaNet', 'an LSTM': the architecture with its article (the name itself when unknown)."""
    return family(arch).article if arch in architectures() else arch


def architecture_of(model) -> str:
    """A registered architecture name (the `arch` every deltalens model carries)."""
    arch = getattr(model, "arch", None) or None
    if arch is None:
        record = family_of_class(type(model).__name__)
        arch = record.arch if record is not None else None
    if arch is None:
        raise DeltalensError(
            f"{type(model).__name__} is not a deltalens model; build or load one with models.build/load."
        )
    return arch


def delta_layers_of(model) -> list[int]:
    """The layers that run a delta rule: the model's own `delta_layers` (hybrids: fla's `attn` layers, a
    production model's full-attention layers and the DeltaNet / M²RNN hybrid's M²RNN layers left out); none
    for an architecture outside the delta-rule family."""
    if not is_delta_rule(architecture_of(model)):
        return []
    layers = getattr(model, "delta_layers", None)
    return list(range(model.cfg.n_layers)) if layers is None else list(layers)


def delta_layer_index(
    model, layer: int, instead: str, pick: str = "a delta-rule layer", allowed: list[int] | None = None
) -> int:
    """`layer` (negative counts from the end) as an index into the model's stack: an IndexError when out of range,
    a DeltalensError saying what the layer is `instead` when it is not one of `allowed` (default: the delta-rule
    layers; a hybrid's others are attention or M²RNN)."""
    n_layers = model.cfg.n_layers
    allowed = model.delta_layers if allowed is None else allowed
    if not -n_layers <= layer < n_layers:
        raise IndexError(f"layer {layer} is out of range for a model with {n_layers} layers.")
    if layer % n_layers not in allowed:
        raise DeltalensError(f"layer {layer} of this {instead}; pick {pick}, one of {allowed}.")
    return layer % n_layers


def attention_layers_of(model) -> list[int]:
    """The softmax-attention layers (every layer of the Transformer, a hybrid's attention layers, else none)."""
    if architecture_of(model) == "transformer":
        return list(range(model.cfg.n_layers))
    return list(getattr(model, "attention_layers", None) or [])


def require_householder(source, tool: str) -> None:
    """Raise a DeltalensError unless the transitions of `source` (a model, a Capture or an arch name) have the form
    alpha (I - beta k k^T) that `tool` unrolls (every delta-rule family here but Comba and RWKV-7, whose records
    say their form: `Family.transition`)."""
    arch = source if isinstance(source, str) else getattr(source, "arch", None) or architecture_of(source)
    record = family(arch) if arch in architectures() else None
    if record is not None and record.delta_rule and "householder" not in record.capabilities:
        raise DeltalensError(
            f"{tool} reads each transition as alpha (I - beta k k^T), and {article_of(arch)} has transitions "
            f"{record.transition or 'of another form'}; its exact eigenvalues are the census's (dl.census), and "
            "its states and hooks are open to capture, probes and patching."
        )


def require_one_pattern(source, tool: str) -> None:
    """Raise a DeltalensError if `source` (a model, a Capture or an arch name) has a value gate (the value-gated
    DeltaNet: each value column of S_t decays at its own rate), which `tool`, reading a head's read-out as one
    pattern over positions (the transitions alone, run forwards or backwards), leaves out."""
    arch = source if isinstance(source, str) else getattr(source, "arch", None) or architecture_of(source)
    record = family(arch) if arch in architectures() else None
    if record is not None and record.delta_rule and "one_pattern" not in record.capabilities:
        raise DeltalensError(
            f"{tool} reads a head through its transitions alone, and {article_of(arch)} also has a value gate that "
            "decays each value column of S_t at its own rate (hook_vgate), which it would leave out; use activation "
            "patching (dl.patch_heads) and the state's own hooks instead"
        )


def require_one_stream(model, tool: str) -> None:
    """Raise a DeltalensError if `model` keeps several residual streams (hyper-connections: GLM-5 Next), which
    `tool`, splitting one residual stream into what the layers write, cannot read."""
    streams = getattr(model, "residual_streams", 1)
    if isinstance(streams, int) and streams > 1:
        raise DeltalensError(
            f"{tool} needs one residual stream that the layers add to, and {article_of(architecture_of(model))} "
            f"keeps {streams} (hyper-connections: each block reads a weighted mix of them and writes its output into "
            "each with a weight of its own, all set by the input), so the layers' outputs do not add up to any one "
            "stream; its hook_resid_pre / hook_resid_post show the streams' mean, which its final norm reads, open "
            "to capture, probes and patching."
        )


def require_delta_rule(model, what: str = "beta") -> None:
    """Raise a DeltalensError naming the architecture unless `model` is of the delta-rule family."""
    arch = architecture_of(model)
    if not is_delta_rule(arch):
        raise DeltalensError(
            f"this model is {article_of(arch)}, which has no {what}: only a delta-rule model (DeltaNet, Gated "
            f"DeltaNet, DeltaProduct, KDA and the hybrids built on them) has a write strength beta and a matrix "
            f"state S_t; use the residual-stream probes on this one."
        )
