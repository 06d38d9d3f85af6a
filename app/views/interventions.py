"""Interventions: rescale (per factor, for DeltaProduct), ablate or patch chosen heads, or clamp a gated
model's decay; reveal accuracy before and after, the trace under the intervention, and the paper's
beta-range sweep over every head (cached on disk)."""

import streamlit as st
import torch

from deltalens.app.common import SWEEP_CACHE, attempt, cached_sweep, describe, locked, pick_checkpoint, trace_html
from deltalens.core.errors import DeltalensError
from deltalens.interp.head_sweep import sweep_figure
from deltalens.interp.interventions import ablate_head, clamp_gate, patch_state, rescale_beta, reveal_accuracy
from deltalens.models.architecture import is_delta_rule, n_heads_of, n_layers_of
from deltalens.tasks.traces import generate_trace
from deltalens.training.evaluate import trace_predictions

KINDS = ["beta range map", "beta scale", "zero ablation", "mean ablation", "state patching"]


def build(model, heads, kind, options, source_cache):
    """The Intervention for every chosen head (summed)."""
    if not heads:
        raise DeltalensError("choose at least one head.")
    parts = []
    for layer, head in heads:
        if kind == "beta range map":
            parts.append(rescale_beta(model, layer, head, to=(options["lo"], options["hi"]), factor=options["factor"]))
        elif kind == "beta scale":
            parts.append(rescale_beta(model, layer, head, scale=options["scale"], factor=options["factor"]))
        elif kind == "gate clamp":
            parts.append(clamp_gate(model, layer, head, options["gate_lo"], options["gate_hi"]))
        elif kind == "state patching":
            parts.append(patch_state(layer, head, source_cache, positions=None))
        else:
            parts.append(
                ablate_head(model, layer, head, kind.split()[0], site=options["site"], reference=options["reference"])
            )
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


def states_of(model, tokens):
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=lambda name: name.endswith("hook_state"))
    return cache


st.title("Interventions")
checkpoint = pick_checkpoint(
    "iv-ckpt",
    where=lambda row: row["architecture"] != "lstm" and not str(row["tokenizer"]).endswith("-prob"),
    default="s3-deltanet-neg-statement",
)
if checkpoint is not None:
    model = checkpoint.model
    st.caption(describe(checkpoint))
    deltanet = is_delta_rule(checkpoint.arch)
    kinds = (
        (KINDS + (["gate clamp"] if getattr(model, "gated", False) else []))
        if deltanet
        else ["zero ablation", "mean ablation"]
    )
    factors = getattr(model, "n_factors", 1)
    heads_all = [(layer, head) for layer in range(n_layers_of(model)) for head in range(n_heads_of(model))]
    ranked = attempt(cached_sweep, checkpoint, 128) if deltanet else None
    first = heads_all[-1] if ranked is None else (int(ranked.frame["layer"][0]), int(ranked.frame["head"][0]))
    if st.session_state.get("iv-heads-of") != str(checkpoint.path):  # another checkpoint: its own default head
        st.session_state["iv-heads-of"] = str(checkpoint.path)
        st.session_state.pop("iv-heads", None)
    cols = st.columns([2, 2, 1, 1])
    kind = cols[0].selectbox("intervention", kinds, key="iv-kind")
    heads = cols[1].multiselect(
        "heads", heads_all, default=[first], key="iv-heads", format_func=lambda lh: f"L{lh[0]} H{lh[1]}"
    )
    n_traces = cols[2].select_slider("held-out traces", [16, 32, 64, 128], value=64, key="iv-n")
    seed = cols[3].number_input("seed", 0, 10**6, 0, key="iv-seed")
    options = {"site": "z", "reference": None, "factor": None}
    if kind.startswith("beta") and factors > 1:  # DeltaProduct: one Householder factor, or all of them
        choice = st.selectbox(
            "factor",
            ["all", *range(factors)],
            key="iv-factor",
            format_func=lambda f: "every factor" if f == "all" else f"factor {f}",
        )
        options["factor"] = None if choice == "all" else int(choice)
    if kind == "beta range map":
        a, b = st.columns(2)
        options["lo"] = a.number_input("new lo", -1.0, 4.0, 0.0, 0.1, key="iv-lo")
        options["hi"] = b.number_input("new hi", -1.0, 4.0, 1.0, 0.1, key="iv-hi")
    elif kind == "beta scale":
        options["scale"] = st.number_input("multiply beta by", -4.0, 4.0, 0.5, 0.1, key="iv-scale")
    elif kind == "gate clamp":  # alpha_t in [lo, hi]; 1, 1 switches forgetting off
        a, b = st.columns(2)
        options["gate_lo"] = a.number_input("decay at least", 0.0, 1.0, 1.0, 0.05, key="iv-gate-lo")
        options["gate_hi"] = b.number_input("decay at most", 0.0, 1.0, 1.0, 0.05, key="iv-gate-hi")
    elif kind.endswith("ablation"):
        options["site"] = st.radio("replace", ["z", "state"] if deltanet else ["z"], horizontal=True, key="iv-site")
    source_seed = int(seed) + 1
    if kind == "state patching":
        source_seed = st.number_input(
            "patch the states of the trace with seed", 0, 10**6, int(seed) + 1, key="iv-source"
        )

    batch = checkpoint.batch(int(n_traces), seed=int(seed))
    options["reference"] = batch
    source = None
    if kind == "state patching":
        source = locked(
            checkpoint, lambda: states_of(model, checkpoint.batch(int(n_traces), seed=int(source_seed))["tokens"])
        )
    iv = locked(checkpoint, build, model, heads, kind, options, source)
    if iv is not None:
        before, after = (
            locked(checkpoint, reveal_accuracy, model, batch),
            locked(checkpoint, reveal_accuracy, model, batch, iv),
        )
        if before is not None and after is not None:
            a, b, c = st.columns(3)
            a.metric("reveal accuracy, no intervention", f"{before.reveal_accuracy:.3f}")
            b.metric(
                f"with {iv.label}",
                f"{after.reveal_accuracy:.3f}",
                f"{after.reveal_accuracy - before.reveal_accuracy:+.3f}",
            )
            c.metric("trace accuracy with it", f"{after.trace_accuracy:.3f}")

        trace = generate_trace(checkpoint.spec, int(seed))
        one = iv
        if kind == "state patching":  # the single-trace view patches from the second trace alone
            other = generate_trace(checkpoint.spec, int(source_seed))
            cache = locked(checkpoint, states_of, model, model.to_tokens(other.text))
            one = locked(checkpoint, build, model, heads, kind, options, cache) if cache is not None else None
        if one is not None:
            rows = locked(checkpoint, trace_predictions, model, checkpoint.tokenizer, trace, hooks=one.hooks)
            if rows is not None:
                st.subheader(f"held-out trace (seed {seed}) under the intervention")
                st.html(trace_html(rows))

    if ranked is not None:
        st.header("Beta range [0, 2] -> [0, 1] on each head in turn, ranked")
        st.caption(
            f"128 held-out traces; computed once per checkpoint and kept in `{SWEEP_CACHE}` "
            "(delete it to recompute). The head it hurts most is the default above."
        )
        st.plotly_chart(sweep_figure(ranked, ranked=True), width="stretch")
