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
from deltalens.interp.intervention_kinds import KINDS as RECORDS
from deltalens.interp.intervention_kinds import applicable, lacks
from deltalens.interp.interventions import ablate_head, patch_state, reveal_accuracy
from deltalens.models.architecture import is_delta_rule
from deltalens.tasks.traces import generate_trace
from deltalens.training.evaluate import trace_predictions

# the page's kinds, one per record of interp/intervention_kinds.py (an ablation: one per method)
RECORD_OF = {
    label: record
    for record in RECORDS
    for label in ((f"{m} ablation" for m in ("zero", "mean")) if record.key == "ablate" else (record.label,))
}
KINDS = list(RECORD_OF)
SWEEP_TRACES = 128


def build(model, heads, kind, options, source_cache):
    """The Intervention for every chosen head (summed)."""
    if not heads:
        raise DeltalensError("choose at least one head.")
    record, parts = RECORD_OF[kind], []
    for layer, head in heads:
        if record.key == "state-patch":
            parts.append(patch_state(layer, head, source_cache, positions=None))
        elif record.key == "ablate":
            method = kind.split()[0]
            parts.append(ablate_head(model, layer, head, method, site=options["site"], reference=options["reference"]))
        else:
            values = {setting.name: options[setting.key or setting.name] for setting in record.settings}
            parts.append(record.build(model, layer, head, values, factor=options["factor"]))
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


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
    record = RECORD_OF[kind]
    if record.key == "ablate":
        name = f"{kind.split()[0]}-{options['site']}"
        return name, record.sweeps[name].words
    return next(((name, sweep.words) for name, sweep in record.sweeps.items()), None)


def offered(model) -> list[str]:
    """The page's kinds that apply to `model` (each record's needs against the model's capabilities)."""
    records = applicable(model)
    return [label for label, record in RECORD_OF.items() if record in records]


def default_kind(model, kinds: list[str]) -> str:
    """The paper's beta range [0, 2] -> [0, 1] where it changes something (it is the identity on a [0, 1]
    model), else a zero ablation, else the first kind that applies."""
    if "beta range map" in kinds:
        highest = max((float(model.blocks[layer].attn.beta_hi.max()) for layer in sweep_layers(model)), default=0.0)
        if highest > 1.0:
            return "beta range map"
    return "zero ablation" if "zero ablation" in kinds else kinds[0]


def ranked_sweep(checkpoint, kind: str, options, slot):
    """The cached sweep of `kind` (None where none applies), with a progress bar in `slot` naming each head
    while it is computed."""
    named = sweep_of(kind, options)
    if named is None:
        return None
    name, setting = named
    factor = options["factor"] if RECORD_OF[kind].per_factor else None
    total = len(sweep_layers(checkpoint.model)) * checkpoint.model.cfg.n_heads
    bar = None if is_cached_sweep(checkpoint, SWEEP_TRACES, name, factor) else slot.progress(0.0)
    done = []

    def on_head(layer: int, head: int) -> None:
        done.append((layer, head))
        if bar is not None:  # always: on_head is passed on only with a bar (below)
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
    kinds = offered(model)
    first_kind = default_kind(model, kinds)
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
            else f"“{k}” (chosen on {source}) needs {', '.join(lacks(RECORD_OF[k], model))}, "
            f"which {article} does not have: the intervention here is {first_kind}."
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
    if RECORD_OF[kind].per_factor and factors > 1:  # DeltaProduct: one Householder factor, or all of them
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
    layers = sweep_layers(model) if deltanet else range(model.cfg.n_layers)
    heads_all = [(layer, head) for layer in layers for head in range(model.cfg.n_heads)]
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
    """The controls of one kind of intervention: its record's settings, an ablation's site, a patch's donor."""
    out = {}
    settings = RECORD_OF[kind].settings
    places = st.columns(len(settings)) if len(settings) > 1 else [st] * len(settings)
    for place, setting in zip(places, settings):
        key = setting.key or setting.name
        out[key] = controls.widget(
            place.number_input,
            key,
            setting.label,
            default=setting.default,
            valid=_in(setting.lo, setting.hi),
            min_value=setting.lo,
            max_value=setting.hi,
            step=0.05 if setting.hi <= 1 else 0.1,
        )
    if kind.endswith("ablation"):
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
