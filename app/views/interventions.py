"""Interventions: rescale (per factor, for DeltaProduct), ablate or patch chosen heads, clamp a gated
model's decay, or change a head's transition I - beta k k^T or its write beta k v^T alone (the other
kept); reveal accuracy before and after (for state patching, how often the prediction follows the donor
trace), the trace under the intervention, and the sweep of the chosen kind over every head (its named
setting, cached on disk; its worst head is the default). Every control belongs to the checkpoint
(common.Controls): what is computed is what the controls show."""

import streamlit as st
import torch

from deltalens.app import figures
from deltalens.app.common import (
    Controls,
    attempt,
    describe,
    locked,
    model_lock,
    opened,
    pick_checkpoint,
    trace_html,
)
from deltalens.app.disk_cache import cached_sweep, is_cached_sweep, sweep_dir, sweep_layers
from deltalens.core.errors import DeltalensError
from deltalens.interp.donor import follows_donor
from deltalens.interp.head_sweep import sweep_figure
from deltalens.interp.intervention_names import SPLIT_INTERVENTIONS
from deltalens.interp.interventions import (
    ablate_head,
    clamp_gate,
    patch_state,
    rescale_beta,
    reveal_accuracy,
)
from deltalens.interp.split_interventions import (
    abs_eigenvalue,
    clip_transition,
    clip_write,
    rescale_transition,
    scale_write,
)
from deltalens.models.architecture import is_delta_rule, n_heads_of, n_layers_of
from deltalens.tasks.traces import generate_trace
from deltalens.training.evaluate import trace_predictions

BETA_KINDS = [  # the kinds that edit beta (per factor on a DeltaProduct); the last five one use of it only
    "beta range map",
    "beta scale",
    "transition clip",
    "transition range map",
    "write clip",
    "write scale",
    "eigenvalue |1 - beta|",
]
ABLATIONS = ["zero ablation", "mean ablation"]
KINDS = [*BETA_KINDS, *ABLATIONS, "state patching"]
NEEDS = {  # what a kind of intervention edits, for the sentence when a model has none
    **dict.fromkeys(BETA_KINDS, "a write strength beta"),
    "gate clamp": "a decay gate",
    "state patching": "a matrix state S_t",
}
SWEEP_TRACES = 128
SWEEP_OF = {  # page kind -> the named sweep (interp/intervention_names.py) of the same edit, and its setting
    "beta range map": ("beta-range", "beta range [0, 2] -> [0, 1]"),
    "transition clip": ("transition-clip", "transition beta clipped at 1, write kept"),
    "transition range map": ("transition-range", "transition beta range [0, 2] -> [0, 1], write kept"),
    "write clip": ("write-clip", "write beta clipped at 1, transition kept"),
    "write scale": ("write-half", "write beta k v^T halved, transition kept"),
    "eigenvalue |1 - beta|": ("eigen-abs", "eigenvalue 1 - beta -> |1 - beta|, write kept"),
}


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
        elif kind in BETA_KINDS:
            parts.append(split_one(model, layer, head, kind, options))
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


def split_one(model, layer: int, head: int, kind: str, options):
    """A transition-only or write-only intervention on one head (interp/split_interventions.py)."""
    factor = options["factor"]
    if kind == "transition clip":
        return clip_transition(model, layer, head, hi=options["t_hi"], factor=factor)
    if kind == "transition range map":
        return rescale_transition(model, layer, head, to=(options["t_lo"], options["t_hi"]), factor=factor)
    if kind == "write clip":
        return clip_write(model, layer, head, hi=options["t_hi"], factor=factor)
    if kind == "write scale":
        return scale_write(model, layer, head, scale=options["write"], factor=factor)
    return abs_eigenvalue(model, layer, head, factor=factor)


def states_of(model, tokens):
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=lambda name: name.endswith("hook_state"))
    return cache


@st.cache_resource(max_entries=32, show_spinner=False)
def held_out(path: str, n_traces: int, seed: int):
    """(batch, reveal accuracy without intervention) of one held-out batch (kept per checkpoint)."""
    checkpoint = opened(path)
    batch = checkpoint.batch(n_traces, seed=seed)
    with model_lock(path):
        return batch, reveal_accuracy(checkpoint.model, batch)


def sweep_of(kind: str, options) -> tuple[str, str] | None:
    """(named sweep, its setting in words) for a page kind; None where no sweep applies the same edit."""
    if kind.endswith("ablation"):
        method, site = kind.split()[0], options["site"]
        return f"{method}-{site}", f"{method} ablation of the {'state S_t' if site == 'state' else 'read-out z'}"
    return SWEEP_OF.get(kind)


def default_kind(model, kinds: list[str]) -> str:
    """The first kind that changes something: beta range [0, 2] -> [0, 1] is the identity on a [0, 1] model."""
    highest = max((float(model.blocks[layer].attn.beta_hi.max()) for layer in sweep_layers(model)), default=0.0)
    if kinds[0] == "beta range map" and highest <= 1.0 and "zero ablation" in kinds:
        return "zero ablation"
    return kinds[0]


def ranked_sweep(checkpoint, kind: str, options, slot):
    """The cached sweep of `kind` (None where none applies), with a progress bar in `slot` naming each head
    while it is computed."""
    named = sweep_of(kind, options)
    if named is None:
        return None
    name, setting = named
    factor = options["factor"] if name in ("beta-range", *SPLIT_INTERVENTIONS) else None
    total = len(sweep_layers(checkpoint.model)) * n_heads_of(checkpoint.model)
    bar = None if is_cached_sweep(checkpoint, SWEEP_TRACES, name, factor) else slot.progress(0.0)
    done = []

    def on_head(layer: int, head: int) -> None:
        done.append((layer, head))
        bar.progress(
            (len(done) - 1) / total,
            text=f"{checkpoint.path.name}: the {setting} sweep (computed once, then kept on disk), "
            f"head L{layer}H{head}, {len(done)} of {total}, on {SWEEP_TRACES} held-out traces ...",
        )

    with model_lock(str(checkpoint.path)):
        result = attempt(
            cached_sweep, checkpoint, SWEEP_TRACES, name, on_head=on_head if bar is not None else None, factor=factor
        )
    if bar is not None:
        bar.empty()
    return result


def heads_label(heads) -> str:
    return ", ".join(f"L{layer} H{head}" for layer, head in heads) or "no head"


def controls_row(checkpoint, controls: Controls):
    """Every control, drawn from `controls` (one key per checkpoint), and the sweep of the chosen kind (its
    worst head the default heads); returns what they say and the sweep (None where none applies)."""
    model, name, article = checkpoint.model, checkpoint.path.name, controls.article
    deltanet = is_delta_rule(checkpoint.arch)
    kinds = (KINDS + (["gate clamp"] if getattr(model, "gated", False) else [])) if deltanet else ABLATIONS
    first_kind = default_kind(model, kinds) if deltanet else kinds[0]
    cols = st.columns([3, 1, 1])
    kind = controls.widget(
        cols[0].selectbox,
        "kind",
        "intervention",
        kinds,
        default=first_kind,
        valid=lambda k: k in kinds,
        carry=lambda k: not (k == "beta range map" and first_kind != k),  # not where it is the identity
        why=lambda k, source: (
            f"“{k}” (chosen on {source}) is the identity on {name}, whose betas already lie in [0, 1]: "
            f"the intervention here is {first_kind}."
            if k in kinds
            else f"“{k}” (chosen on {source}) needs {NEEDS.get(k, 'what this model lacks')}, which "
            f"{article} does not have: the intervention here is {first_kind}."
        ),
    )
    n_traces = controls.widget(
        cols[1].select_slider,
        "n",
        "held-out traces",
        [16, 32, 64, 128],
        default=64,
        valid=lambda n: n in (16, 32, 64, 128),
    )
    seed = controls.widget(cols[2].number_input, "seed", "seed", default=0, min_value=0, max_value=10**6, step=1)
    options = {"site": "z", "reference": None, "factor": None, "kind": kind}
    factors = getattr(model, "n_factors", 1)
    if kind in BETA_KINDS and factors > 1:  # DeltaProduct: one Householder factor, or all of them
        choices = ["all", *range(factors)]
        choice = controls.widget(
            st.selectbox,
            "factor",
            "factor",
            choices,
            default="all",
            valid=lambda f: f in choices,
            why=lambda f, source: (
                f"factor {f} (chosen on {source}) is not a factor of {name}, whose heads have "
                f"{factors}: the rescaling is on every factor."
            ),
            format_func=lambda f: "every factor" if f == "all" else f"factor {f}",
        )
        options["factor"] = None if choice == "all" else int(choice)
    options.update(more_controls(controls, kind, deltanet, int(seed)))
    ranked = ranked_sweep(checkpoint, kind, options, st.empty())
    layers = sweep_layers(model) if deltanet else range(n_layers_of(model))
    heads_all = [(layer, head) for layer in layers for head in range(n_heads_of(model))]
    first = heads_all[-1] if ranked is None else ranked.highlight()
    options["heads"] = controls.widget(
        st.multiselect,
        "heads",
        "heads",
        heads_all,
        default=[first],
        valid=lambda chosen: bool(chosen) and all(tuple(h) in heads_all for h in chosen),
        carry=False,  # each model's own default: the head its sweep hurts most
        why=lambda chosen, source: (
            f"The heads box shows {heads_label([first])}, the default of {name} "
            f"({'the head the sweep below hurts most' if ranked is not None else 'its last head'}); "
            f"{heads_label(chosen or [])} was chosen on {source}."
        ),
        format_func=lambda lh: f"L{lh[0]} H{lh[1]}",
    )
    return options, int(n_traces), int(seed), ranked


def more_controls(controls: Controls, kind: str, deltanet: bool, seed: int) -> dict:
    """The controls of one kind of intervention."""
    out = {}
    if kind == "beta range map":
        a, b = st.columns(2)
        bounds = {"min_value": 0.0, "max_value": 2.0, "step": 0.1}
        out["lo"] = controls.widget(a.number_input, "lo", "new lo", default=0.0, valid=_in(0, 2), **bounds)
        out["hi"] = controls.widget(b.number_input, "hi", "new hi", default=1.0, valid=_in(0, 2), **bounds)
    elif kind == "beta scale":
        out["scale"] = controls.widget(
            st.number_input, "scale", "multiply beta by", default=0.5, valid=_in(0, 4), min_value=0.0, max_value=4.0
        )
    elif kind in ("transition clip", "transition range map", "write clip"):  # one use of beta only
        a, b = st.columns(2)
        bounds = {"min_value": 0.0, "max_value": 2.0, "step": 0.1}
        if kind == "transition range map":
            out["t_lo"] = controls.widget(
                a.number_input, "t-lo", "transition lo", default=0.0, valid=_in(0, 2), **bounds
            )
        label = {"transition range map": "transition hi", "write clip": "write beta at most"}.get(
            kind, "transition beta at most"
        )
        out["t_hi"] = controls.widget(b.number_input, "t-hi", label, default=1.0, valid=_in(0, 2), **bounds)
    elif kind == "write scale":  # beta k v^T only
        out["write"] = controls.widget(
            st.number_input,
            "write",
            "multiply the write by",
            default=0.5,
            valid=_in(0, 4),
            min_value=0.0,
            max_value=4.0,
        )
    elif kind == "gate clamp":  # alpha_t in [lo, hi]; 1, 1 switches forgetting off
        a, b = st.columns(2)
        bounds = {"min_value": 0.0, "max_value": 1.0, "step": 0.05}
        out["gate_lo"] = controls.widget(a.number_input, "gate-lo", "decay at least", default=1.0, **bounds)
        out["gate_hi"] = controls.widget(b.number_input, "gate-hi", "decay at most", default=1.0, **bounds)
    elif kind.endswith("ablation"):
        sites = ["z", "state"] if deltanet else ["z"]
        out["site"] = controls.widget(
            st.radio,
            "site",
            "replace",
            sites,
            default="z",
            valid=lambda s: s in sites,
            why=lambda s, source: (
                f"replacing the state S_t (chosen on {source}) needs a matrix state, which "
                f"{controls.article} does not have: this ablation replaces the read-out z."
            ),
            horizontal=True,
        )
    if kind == "state patching":
        out["source_seed"] = controls.widget(
            st.number_input,
            "source",
            "patch the states of the held-out batch with seed",
            default=seed + 1,
            min_value=0,
            max_value=10**6,
            step=1,
        )
    return out


def _in(lo: float, hi: float):
    return lambda value: lo <= float(value) <= hi


def show_results(checkpoint, options, n_traces: int, seed: int) -> None:
    model, kind, heads = checkpoint.model, options["kind"], options["heads"]
    found = attempt(held_out, str(checkpoint.path), n_traces, seed)
    if found is None:
        return
    batch, before = found
    options["reference"] = batch
    donor = source = None
    if kind == "state patching":
        donor = checkpoint.batch(n_traces, seed=int(options["source_seed"]))
        source = locked(checkpoint, states_of, model, donor["tokens"])
    iv = locked(checkpoint, build, model, heads, kind, options, source)
    if iv is None:
        return
    after = locked(checkpoint, reveal_accuracy, model, batch, iv)
    if after is None:
        return
    st.caption(f"Computed: **{iv.label}** on {n_traces} held-out traces (seed {seed}).")
    cols = st.columns(4 if donor is not None else 3)
    cols[0].metric("reveal accuracy, no intervention", f"{before.reveal_accuracy:.3f}")
    cols[1].metric(
        f"with {iv.label}", f"{after.reveal_accuracy:.3f}", f"{after.reveal_accuracy - before.reveal_accuracy:+.3f}"
    )
    cols[2].metric("trace accuracy with it", f"{after.trace_accuracy:.3f}")
    if donor is not None:
        follow = locked(checkpoint, follows_donor, model, batch, donor, iv, checkpoint.tokenizer)
        if follow is not None:
            cols[3].metric(
                "follows the donor",
                f"{follow.follows:.3f}",
                help="Fraction of reveals whose prediction is the donor trace's value there (its state s_t, for "
                f"the variable printed). Where the donor's value differs from the trace's own "
                f"({follow.n_different} of {follow.n_reveals} reveals): {follow.follows_where_different:.3f}.",
            )
            st.caption(
                f"Follows the donor: {follow.follows:.3f} of {follow.n_reveals} reveals predict the donor trace's "
                f"value; {follow.follows_where_different:.3f} of the {follow.n_different} where the two traces "
                "hold different values (1.000: the patched state carries the donor's values, not a broken one)."
            )
    one_trace(checkpoint, options, iv, seed)


def one_trace(checkpoint, options, iv, seed: int) -> None:
    """The held-out trace of `seed` under the intervention (a patch: from the donor's trace alone)."""
    model, kind = checkpoint.model, options["kind"]
    trace = generate_trace(checkpoint.spec, seed)
    one = iv
    if kind == "state patching":
        other = generate_trace(checkpoint.spec, int(options["source_seed"]))
        cache = locked(checkpoint, states_of, model, model.to_tokens(other.text))
        one = locked(checkpoint, build, model, options["heads"], kind, options, cache) if cache is not None else None
    if one is not None:
        rows = locked(checkpoint, trace_predictions, model, checkpoint.tokenizer, trace, hooks=one.hooks)
        if rows is not None:
            st.subheader(f"held-out trace (seed {seed}) under the intervention")
            st.html(trace_html(rows))


checkpoint = pick_checkpoint(
    "iv-ckpt", where=lambda row: row["architecture"] != "lstm" and not str(row["tokenizer"]).endswith("-prob")
)
if checkpoint is not None:
    st.caption(describe(checkpoint))
    controls = Controls("iv", checkpoint)
    options, n_traces, seed, ranked = controls_row(checkpoint, controls)
    controls.show_notes()
    show_results(checkpoint, options, n_traces, seed)
    named = sweep_of(options["kind"], options)
    if ranked is not None and named is not None:
        factor = options["factor"]
        st.header(f"{named[1][0].upper()}{named[1][1:]} on each head in turn, ranked")
        st.caption(
            f"The named setting of this kind ({named[0]}{'' if factor is None else f', factor {factor}'}; the "
            f"controls above apply to the chosen heads only), {SWEEP_TRACES} held-out traces; computed once per "
            f"checkpoint and kept in `{sweep_dir()}` (delete it to recompute). The head it hurts most is the "
            "default above."
        )
        figures.show(figures.bar_labels_inside(sweep_figure(ranked, ranked=True)), title_width=110)
    elif named is None:
        why = {
            "state patching": "a patch needs a donor trace, not one setting",
            "gate clamp": "a clamp takes the bounds chosen above",
        }.get(options["kind"], "a scale takes the factor chosen above")
        st.caption(f"No head sweep for {options['kind']}: a sweep applies one named setting to every head, and {why}.")
