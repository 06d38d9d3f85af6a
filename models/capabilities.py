"""What applies to which model, declared once: the capabilities a model has, and what each public tool needs.

A capability is a fact about a model read off its hooks and layers (`capabilities_of`), or, for a family as a
whole, the union its record declares (`Family.capabilities`, models/registry.py: what some model of the family
can have; an fla DeltaNet has softmax attention only when it is built as a hybrid):

    delta      delta-rule layers: beta and a matrix state S_t (models.architecture.delta_layers_of)
    keys       hook_k on every delta-rule layer (the transition's direction k_t)
    householder  transitions of the form alpha (I - beta k k^T), a decay times Householder-like factors (every
               delta rule here but Comba, whose alpha I - beta k p^T adds a correction key p_t, hook_p, and RWKV-7,
               whose Diag(w) - (kk * a) kk^T has a removal key kk_t, hook_kk): what the eigenvalue and product
               probes, effective attention, the transition/write split and the state adjoint unroll
    gate       a gate hook on some layer (hook_gate: a delta rule's decay, or M²RNN's forget gate)
    decay      a decay gate on the delta-rule layers (the state forgets: alpha_t < 1)
    state      a matrix state on some layer (hook_state: the delta rule, or M²RNN's non-linear one)
    heads      per-head hooks (hook_z): attention heads or recurrence heads, not an LSTM's single state
    residual   one residual stream that the layers add to (every family but the LSTM, whose layers replace it,
               and GLM-5 Next, whose layers write into several streams mixed by input-dependent weights)
    lens       deltalens's own language-model wrapper, whose mixers' read-outs split per head and whose mixers
               read the one residual stream (not the Transformer, which is TransformerLens's own bridge, nor the
               LSTM, nor GLM-5 Next)
    attention  softmax-attention layers with TransformerLens's pattern hooks
    factors    several Householder factors per token (DeltaProduct)
    tokenizer  a tokenizer attached (text in, text out)

`TOOLS` maps each public tool (the conformance matrix's columns, tests/test_conformance.py) to the capabilities
it needs; `applies(needs, capabilities)` is whether a model (or a family) has them, and `missing` says which in
words. The "what applies to which" table (the dashboard's, docs/what-applies.md) is `applicability_table()`,
drawn from the family records through this one table, so the product cannot advertise a tool its matrix shows failing.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CAPABILITIES", "TOOLS", "applicability_table", "applies", "capabilities_of", "missing"]

CAPABILITIES = {
    "delta": "a delta-rule layer (beta and a matrix state S_t)",
    "keys": "the keys k_t of its delta-rule layers",
    "householder": "transitions alpha (I - beta k k^T) (Comba's and RWKV-7's are not)",
    "one_pattern": "a read-out that is one attention pattern over positions (no value gate decaying each column)",
    "gate": "a gate (hook_gate)",
    "decay": "a decay gate on its delta-rule layers",
    "state": "a matrix state S_t",
    "heads": "per-head hooks",
    "residual": "one residual stream that the layers add to",
    "lens": "mixers whose output deltalens splits per head",
    "attention": "softmax-attention layers",
    "factors": "several Householder factors per token",
    "tokenizer": "a tokenizer",
}

# tool -> the capabilities it needs (public API names; "sweep:<kind>" and "intervene:<kind>" per kind)
TOOLS: dict[str, tuple[str, ...]] = {
    "capture:resid": (),
    "capture:beta": ("delta",),
    "capture:k": ("heads",),
    "capture:state": ("state",),
    "capture:gate": ("gate",),
    "eigenvalue_report": ("delta", "keys", "householder"),
    "tracking_head": ("delta", "keys", "householder"),
    "subspace_report": ("delta", "keys"),
    "product_report": ("delta", "keys", "householder"),
    "linear_probes": (),
    "linear_probes:state": ("state",),
    "probe_summary": (),
    "census": ("delta",),
    "effective_attention": ("delta", "householder", "one_pattern"),
    "logit_attribution": ("lens",),
    "patch_grid": ("heads",),
    "attribution_patching": ("heads",),
    "extract_automaton": ("state",),
    "decompose_resid": ("residual",),
    "accumulated_resid": ("residual",),
    "stack_head_results": ("heads", "residual"),  # each head's write into the one residual stream
    "logit_attrs": ("residual",),
    "generate": ("tokenizer",),
    "sweep:beta-range": ("delta",),
    "sweep:beta-clip": ("delta",),
    "sweep:transition-clip": ("delta", "keys", "householder"),
    "sweep:write-clip": ("delta", "keys", "householder"),
    "sweep:eigen-abs": ("delta", "keys", "householder"),
    "sweep:zero-z": ("heads",),
    "sweep:mean-state": ("delta",),
    "sweep:factor": ("factors",),
    "train_sae": ("state", "heads"),  # a head's S_t coded, scored against the truth and spliced back in
    "intervene:clamp_gate": ("decay",),
    "intervene:patch_state": ("state",),
    # the CLI on the model's folder (exit 0, or one line on stderr and exit 2)
    "cli:eval": (),
    "cli:probe": (),
    "cli:census": ("delta",),
    "cli:sae": ("state", "heads"),
    "cli:intervene --sweep beta-range": ("delta",),
    "cli:intervene --patch-grid": ("heads",),
}


def capabilities_of(model) -> frozenset[str]:
    """The capabilities `model` has, read off its hooks and layers."""
    from deltalens.models.architecture import delta_layers_of

    hooks = getattr(model, "hook_dict", {}) or {}
    layers = range(model.cfg.n_layers)
    delta = delta_layers_of(model)
    found = set()
    if delta:
        found.add("delta")
        if all(f"blocks.{l}.attn.hook_k" in hooks for l in delta):
            found.add("keys")
            other_form = ("hook_p", "hook_kk")  # Comba's correction key, RWKV-7's removal key
            if not any(f"blocks.{l}.attn.{h}" in hooks for l in delta for h in other_form):
                found.add("householder")
        if any(f"blocks.{l}.attn.hook_gate" in hooks for l in delta):
            found.add("decay")
        if not any(f"blocks.{l}.attn.hook_vgate" in hooks for l in delta):
            found.add("one_pattern")
    if any(f"blocks.{l}.attn.hook_gate" in hooks for l in layers):
        found.add("gate")
    if any(f"blocks.{l}.attn.hook_state" in hooks for l in layers):
        found.add("state")
    if any(f"blocks.{l}.attn.hook_z" in hooks for l in layers):
        found.add("heads")
    if any(f"blocks.{l}.attn.hook_pattern" in hooks for l in layers):
        found.add("attention")
    one_stream = getattr(model, "residual_streams", 1) == 1  # hyper-connections (GLM-5 Next) keep several
    if one_stream and any(f"blocks.{l}.hook_resid_post" in hooks for l in layers):
        found.add("residual")
    if one_stream and callable(getattr(model, "mixer_input", None)):
        found.add("lens")
    if getattr(model, "n_factors", 1) > 1:
        found.add("factors")
    if getattr(model, "tokenizer", None) is not None:
        found.add("tokenizer")
    return frozenset(found)


def applies(needs: Iterable[str], capabilities: Iterable[str]) -> bool:
    return set(needs) <= set(capabilities)


def missing(needs: Iterable[str], capabilities: Iterable[str]) -> list[str]:
    """What the model lacks of `needs`, in words (CAPABILITIES' phrases)."""
    return [CAPABILITIES[need] for need in needs if need not in set(capabilities)]


def applicability_table() -> list[dict[str, str]]:
    """One row per tool: for every registered family, "yes" or what it lacks (from its record's capabilities)."""
    from deltalens.models.registry import families

    rows = []
    for tool, needs in TOOLS.items():
        row = {"tool": tool}
        for record in families():
            lacks = missing(needs, record.capabilities | {"tokenizer"})  # a folder with a tokenizer
            row[record.arch] = "yes" if not lacks else "no: " + ", ".join(lacks)
        rows.append(row)
    return rows


def applicability_markdown() -> str:
    """applicability_table() as a markdown table, families as columns (✓ or what the family lacks, shortened)."""
    from deltalens.models.registry import families

    archs = [record.arch for record in families()]
    short = {phrase: need for need, phrase in CAPABILITIES.items()}
    lines = [
        "| tool | " + " | ".join(f"`{arch}`" for arch in archs) + " |",
        "|---|" + "---|" * len(archs),
    ]
    for row in applicability_table():
        cells = []
        for arch in archs:
            value = row[arch]
            cells.append("✓" if value == "yes" else "no " + "+".join(short[p] for p in value[4:].split(", ")))
        lines.append(f"| `{row['tool']}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":  # python3 -m deltalens.models.capabilities > docs/what-applies.md
    print(
        "# What applies to which model\n\n"
        "Generated by `python3 -m deltalens.models.capabilities` from the family records' capabilities and each "
        "tool's needs (models/capabilities.py); tests/test_conformance.py runs every cell on a tiny model of every "
        "family and checks it against this table. ✓: the tool applies; otherwise the capabilities the family "
        "lacks (" + "; ".join(f"{k}: {v}" for k, v in CAPABILITIES.items()) + "). A tool that needs a tokenizer "
        "applies to a model folder that has one.\n"
    )
    print(applicability_markdown())
