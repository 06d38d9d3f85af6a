"""Circuit: which tokens a head reads at one reveal (exact effective attention), which heads write the
answer (direct logit attribution), which heads carry it (activation patching beside attribution
patching, on clean traces and their value-relabelled twins), and the automaton a head's states form.

Every measurement is the library's (interp/effective_attention.py, interp/circuit.py,
probes/automaton.py), kept on disk keyed by the checkpoint's weights (app/disk_cache.py), computed
under the checkpoint's model lock with a progress bar that names the step. An automaton larger than
S3's on 64 traces (seconds to a minute of k-means) waits for a button unless it is on disk already.
A section that does not apply to the checkpoint (no delta rule, no heads, random actions) says so.
"""

from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go
import streamlit as st
import torch

from deltalens.app import figures
from deltalens.app.common import Controls, attempt, describe, model_lock, pick_checkpoint
from deltalens.app.disk_cache import MISSING, cached_result, read_result
from deltalens.core.errors import DeltalensError
from deltalens.models.architecture import article_of, is_delta_rule
from deltalens.models.registry import family

PAGE = "circuit"
PAIRS = [4, 8, 16]
AUTOMATON_TRACES = [32, 64, 128, 256]
# states clustered at once, as group elements x traces, drawn without a click: S3 on 64 traces is about a
# second on 2 cores; S5 on 64 (120 x 64) took 11-14 s of k-means, so larger ones wait for the button
AUTOMATON_AT_ONCE = 6 * 64


class Bar:
    """A progress bar naming the checkpoint and the step, drawn only once something is computed."""

    def __init__(self, checkpoint, what: str):
        self.text = f"{checkpoint.path.name}: {what}"
        self.bar: Any | None = None  # st.progress's bar, made on the first call

    def __call__(self, fraction: float, detail: str = "") -> None:
        if self.bar is None:
            self.bar = st.progress(0.0)
        self.bar.progress(min(max(fraction, 0.0), 1.0), text=f"{self.text}{detail} ...")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.empty()


def measured(checkpoint, step: str, params: str, what: str, compute: Callable[[Bar], object], applies: str = ""):
    """compute(bar) under the model lock, kept on disk by weights and params; one error sentence, else the value.
    applies: a section's name whose refusal (a DeltalensError) is a note that it does not apply, not an error."""
    bar = Bar(checkpoint, what)

    def run():
        bar(0.0)
        with model_lock(str(checkpoint.path)):
            return compute(bar)

    try:
        if applies:
            try:
                return cached_result(f"circuit-{step}", checkpoint.path, params, run)
            except DeltalensError as err:
                st.info(f"{applies} do not apply to this checkpoint: {err}")
                return None
        return attempt(cached_result, f"circuit-{step}", checkpoint.path, params, run)
    finally:
        bar.close()


def pair_of(checkpoint, n_pairs: int, seed: int):
    from deltalens.interp.trace_pairs import trace_pair

    return trace_pair(checkpoint.model, n_pairs, seed=seed, checkpoint=checkpoint)


def attribution_of(checkpoint, n_pairs: int, seed: int):
    def compute(bar):
        from deltalens.interp.circuit import head_attribution

        return head_attribution(checkpoint.model, *pair_of(checkpoint, n_pairs, seed))

    what = f"attribution patching and direct logit attribution on {n_pairs} trace pairs (one forward and backward)"
    applies = "Direct logit attribution and patching"
    return measured(checkpoint, "attribution", f"{n_pairs}/{seed}", what, compute, applies=applies)


def grid_of(checkpoint, n_pairs: int, seed: int, site: str):
    total = checkpoint.model.cfg.n_layers * checkpoint.model.cfg.n_heads

    def compute(bar):
        from deltalens.interp.circuit import patch_grid

        done = []

        def on_head(layer: int, head: int) -> None:
            done.append(1)
            bar(len(done) / total, f", head L{layer}H{head} ({len(done)} of {total})")

        clean, corrupt = pair_of(checkpoint, n_pairs, seed)
        return patch_grid(checkpoint.model, clean, corrupt, site, progress=False, on_head=on_head)

    what = f"activation patching of hook_{site}, one forward per head on {n_pairs} trace pairs"
    return measured(checkpoint, "grid", f"{n_pairs}/{seed}/{site}", what, compute)


def reading_of(checkpoint, seed: int, layer: int, head: int):
    """(token texts, reveal rows [(prediction position, text)], A (T, T) summed over factors) of one trace."""

    def compute(bar):
        from deltalens.interp.effective_attention import effective_attention

        batch = checkpoint.batch(1, seed=seed)
        tokens = batch["tokens"]
        texts = [checkpoint.tokenizer.token_of(int(i)) for i in tokens[0]]
        reveals = [
            (t - 1, f"{texts[t - 2].strip() if t >= 2 else ''} -> {texts[t].strip()} (position {t})")
            for t in batch["reveal_mask"][0].nonzero().flatten().tolist()
            if t >= 1
        ]
        A = effective_attention(checkpoint.model, tokens, layer, head)[0]
        A = A.sum(-1) if A.ndim == 3 else A  # DeltaProduct: factors summed
        return texts, reveals, A.numpy()

    what = f"effective attention of L{layer}H{head} on one trace"
    return measured(checkpoint, "reading", f"{seed}/{layer}/{head}", what, compute)


def automaton_of(checkpoint, n_traces: int, seed: int, layer: int, head: int):
    def compute(bar):
        from deltalens.interp.capture import capture
        from deltalens.probes.automaton import extract_automaton

        bar(0.1, f", step 1 of 2: the states of {n_traces} held-out traces")
        cap = capture(checkpoint.model, checkpoint.batch(n_traces, seed=seed), names=("state",))
        bar(0.5, ", step 2 of 2: clustering them and minimising the automaton")
        return extract_automaton(cap, layer, head, seed=seed)

    what = f"the automaton of L{layer}H{head}"
    return measured(checkpoint, "automaton", f"{n_traces}/{seed}/{layer}/{head}", what, compute)


def automaton_section(checkpoint, controls: Controls, seed: int, layer: int, head: int):
    """The automaton of the head: computed at once when cheap or already on disk, else on a click."""
    from deltalens.tasks.groups import get_group

    n_traces = controls.widget(
        st.selectbox, "traces", "traces to cluster (an S5 head needs 256)", AUTOMATON_TRACES, default=64
    )
    order = get_group(checkpoint.spec.group).order if checkpoint.spec is not None else 0
    kept = read_result("circuit-automaton", checkpoint.path, f"{n_traces}/{seed}/{layer}/{head}") is not MISSING
    if order * n_traces > AUTOMATON_AT_ONCE and not kept:
        st.caption(
            f"Clustering L{layer}H{head}'s states on {n_traces} traces of {checkpoint.spec.group} ({order} elements) "
            "takes from several seconds to a minute of k-means; the result is then kept on disk."
        )
        if not st.button(f"extract the automaton of L{layer}H{head}", key=controls.key("automaton"), type="primary"):
            return None
    return automaton_of(checkpoint, n_traces, seed, layer, head)


def reading_figure(texts, A, row: int, layer: int, head: int) -> go.Figure:
    weights = A[row, : row + 1]
    labels = [f"{s}: {texts[s].strip()}" for s in range(row + 1)]
    fig = go.Figure(go.Bar(x=labels, y=weights, hovertemplate="%{x}<br>A = %{y:.3f}<extra></extra>"))
    fig.update_layout(
        title=f"L{layer}H{head} at position {row} (predicts the next value): exact weight A[t, s] of each "
        "earlier token's value in the read-out",
        xaxis_title="key position s",
        yaxis_title="A[t, s]",
        height=420,
    )
    return fig


def dla_bar(result) -> go.Figure:
    frame = result.frame.sort_values(["layer", "head"])
    names = [f"L{int(layer)}H{int(head)}" for layer, head in zip(frame["layer"], frame["head"])]
    fig = go.Figure(go.Bar(x=names, y=frame["dla"], hovertemplate="%{x}: %{y:.3f}<extra></extra>"))
    fig.update_layout(
        title="Direct logit attribution: each head's share of logit[answer] - mean logit[other values]",
        xaxis_title="head",
        yaxis_title="logit difference",
        height=380,
    )
    return fig


def patching_section(checkpoint, controls: Controls, found, n_pairs: int, seed: int) -> None:
    """Activation patching beside attribution patching on one colour scale, and how far the two agree."""
    sites = list(found.sites)
    site = controls.widget(
        st.radio, "site", "patched site", sites, default="z", horizontal=True, valid=lambda value: value in sites
    )
    grid = grid_of(checkpoint, n_pairs, seed, site)
    if grid is not None:
        from deltalens.interp.circuit import method_agreement
        from deltalens.interp.patching import patch_grid_figure

        estimate = found.ap_grid(site)
        approx = type(grid)(
            estimate + grid.corrupt, grid.clean, grid.corrupt, site, n_forwards=0, method="attribution patching"
        )
        if not grid.span_ok:
            st.warning(grid.span_sentence()[0].upper() + grid.span_sentence()[1:] + ".")
        # one colour scale for both: the same colour is the same fraction restored in either grid
        values = (grid.normalised(), approx.normalised()) if grid.span_ok else (grid.per_head(), approx.per_head())
        span = max(1.0, *(float(torch.nan_to_num(v, nan=0.0).abs().max()) for v in values))
        scale = (-span, span)
        left, right = st.columns(2)
        figures.show(
            patch_grid_figure(
                grid,
                title=f"activation patching: hook_{site} ({grid.n_forwards} forwards)",
                scale=scale,
                numbers=True,
            ),
            left,
        )
        figures.show(
            patch_grid_figure(
                approx,
                title=f"attribution patching: hook_{site} (time of {found.forward_equivalents:.1f} forwards)",
                scale=scale,
                numbers=True,
            ),
            right,
        )
        cell = (
            "the fraction of the clean answer's logit difference restored"
            if grid.span_ok
            else "the raw change of the metric (the runs differ too little for a fraction)"
        )
        st.caption(
            f"Both grids share one colour scale, {-span:g} to {span:g}. Each cell: {cell} when that head's "
            "activation comes from the clean run (activation patching: measured; attribution patching: its "
            f"first-order estimate); the metric is {grid.clean:.3g} on the clean run, {grid.corrupt:.3g} on the "
            "corrupted one."
        )
        agreement = method_agreement(grid, estimate)
        st.info(f"How far the two methods agree on {checkpoint.path.name}, {agreement.sentence()}")


def reading_section(checkpoint, controls: Controls, seed: int, layer: int, head: int) -> None:
    """One head's exact effective attention at a reveal of one trace (or why it does not apply)."""
    article, delta = article_of(checkpoint.arch), is_delta_rule(checkpoint.arch)
    if not delta:
        st.info(
            f"{article} has no delta-rule read-out to unroll; its attention pattern is its own (hook_pattern), so "
            "this section applies to the delta-rule family only."
        )
    elif "householder" not in family(checkpoint.arch).capabilities:
        st.info(
            f"{article} has transitions {family(checkpoint.arch).transition}; the unrolling here reads them as "
            "alpha (I - beta k k^T), so this section does not apply to it."
        )
    else:
        reading = reading_of(checkpoint, seed, layer, head)
        if reading is not None:
            texts, reveals, A = reading
            if not reveals:
                st.info("this trace reveals no values; pick another seed.")
            else:
                labels = [text for _, text in reveals]
                picked = st.selectbox("reveal", labels, key=controls.key("reveal") + f"-{seed}")
                row = reveals[labels.index(picked)][0]
                figures.show(reading_figure(texts, A, row, layer, head), title_width=110)


def main() -> None:
    checkpoint = pick_checkpoint("circuit-ckpt")
    if checkpoint is None:
        return
    st.caption(describe(checkpoint))
    article = article_of(checkpoint.arch)
    delta = is_delta_rule(checkpoint.arch)
    controls = Controls(PAGE, checkpoint)
    n_layers, n_heads = checkpoint.model.cfg.n_layers, checkpoint.model.cfg.n_heads
    if checkpoint.arch == "lstm" or not n_heads:
        st.info(f"{article} has no attention heads: there is no per-head circuit to draw; try a DeltaNet checkpoint.")
        return
    left, right = st.columns(2)
    n_pairs = controls.widget(left.selectbox, "pairs", "trace pairs (clean / relabelled)", PAIRS, default=8)
    seed = controls.widget(right.number_input, "seed", "trace seed", min_value=0, max_value=10**6, default=0)
    controls.show_notes()

    found = None
    if not hasattr(checkpoint.spec, "reveal"):  # a PFSA-SR task: no relabelled twin with a single answer
        st.info(
            "This checkpoint's traces have random actions, so attribution and patching (which need a clean / "
            "relabelled pair with one answer each) do not apply; the other sections do."
        )
    else:
        found = attribution_of(checkpoint, n_pairs, seed)
    heads = [f"L{layer}H{head}" for layer in range(n_layers) for head in range(n_heads)]
    top = f"L{int(found.frame.iloc[0]['layer'])}H{int(found.frame.iloc[0]['head'])}" if found is not None else heads[0]
    chosen = controls.widget(
        st.selectbox,
        "head",
        "head (effective attention and automaton"
        + ("; default: attribution patching's top head)" if found is not None else "; default: the first head)"),
        heads,
        default=top,
        valid=lambda value: value in heads,
        carry=False,  # each checkpoint's own default: its attribution ranking's top head
        why=lambda value, source: (
            f"The head box shows {top}, the default of {checkpoint.path.name} "
            f"({'the top head of its attribution ranking' if found is not None else 'its first head'}); "
            f"{value} was chosen on {source}."
        ),
    )
    controls.show_notes()
    layer, head = (int(x) for x in chosen[1:].split("H"))

    st.subheader("Effective attention of one reveal")
    reading_section(checkpoint, controls, seed, layer, head)

    st.subheader("Direct logit attribution per head")
    if not delta:
        st.info(f"Direct logit attribution here unrolls the delta-rule family's heads; {article} is not one.")
    elif found is not None:
        figures.show(dla_bar(found), title_width=110)
        st.caption(
            f"The components (heads, MLPs, embedding) sum to the real logit difference within {found.dla_error:.1e}."
        )
    else:
        st.caption("Not drawn: it needs the clean / relabelled trace pairs, which this checkpoint cannot have (above).")

    st.subheader("Patching grid")
    if found is not None:
        patching_section(checkpoint, controls, found, n_pairs, seed)
    else:
        st.caption("Not drawn: it needs the clean / relabelled trace pairs, which this checkpoint cannot have (above).")

    st.subheader("Automaton")
    if not delta:
        st.info(f"{article} has no matrix state S_t to cluster; the automaton applies to the delta-rule family.")
        return
    automaton = automaton_section(checkpoint, controls, seed, layer, head)
    if automaton is not None and not automaton.tracks():
        st.info(automaton.verdict())  # a one-state graph with a legend of actions says nothing
    elif automaton is not None:
        from deltalens.probes.automaton import automaton_figure

        st.markdown(automaton.title())
        figures.show(automaton_figure(automaton, title=f"Automaton of L{layer}H{head}"), title_width=110)


attempt(main)
