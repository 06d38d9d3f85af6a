"""Heads: beta and the transition eigenvalues per head and token kind, products of reflections, the
state's dimensionality and a PCA view of it, linear probes per head and layer; the tracking head
pointed out. Each section is a tab measured only when opened (app/heads_data.py: memory, then disk,
then computed with a progress bar); a head change slices what is measured and reruns only the
head's own views (one st.fragment per tab), so the browser redraws only the figures that change."""

import plotly.graph_objects as go
import streamlit as st
from streamlit.errors import StreamlitAPIException

from deltalens.app import figures
from deltalens.app.common import Controls, attempt, describe, pick_checkpoint
from deltalens.app.heads_data import head_points, is_measured, measure, one_trace_beta
from deltalens.app.product_text import picked_sentence, span_sentence, span_table
from deltalens.models.architecture import article_of, is_delta_rule
from deltalens.models.registry import family
from deltalens.probes.eigenvalues import (
    beta_heatmap,
    beta_kind_heatmap,
    eigenvalue_histogram,
    product_eigenvalue_figure,
)
from deltalens.probes.products import product_decoding_figure
from deltalens.probes.subspace import singular_value_figure, state_scatter_figure
from deltalens.tasks.groups import VARIABLE_NAMES

PROBE_COLUMNS = (
    "accuracy: the probe on held-out traces; control_accuracy: the same probe fitted on shuffled labels; "
    "majority_rate: always guessing the training tokens' most common label. A probe that finds nothing linear "
    "spreads its guesses, so it can score below majority_rate (near 1/n): a site holds the target only where the "
    "probe beats both the control and majority_rate."
)
TABS = ["beta and eigenvalues", "products of reflections", "state subspace", "linear probes"]
TRACES = [16, 32, 64, 128, 256]


def beta_trace_figure(pieces, beta, layer: int, head: int, seed: int) -> go.Figure:
    """beta_t of one head at each token of one held-out trace (one line per Householder factor)."""
    values = beta[:, head]  # (T,) or (T, n_h) for DeltaProduct
    factors = values.T if values.ndim == 2 else values[None]
    fig = go.Figure(
        [
            go.Scatter(
                x=list(range(values.shape[0])),
                y=line.tolist(),
                mode="lines+markers",
                name=f"factor {j}" if values.ndim == 2 else "beta",
                text=[p.strip() for p in pieces],
                hovertemplate="%{text}: beta %{y:.3f}",
            )
            for j, line in enumerate(factors)
        ]
    )
    fig.update_layout(
        title=f"layer {layer} head {head}: beta at each token of one held-out trace (seed {seed})",
        xaxis_title="position",
        yaxis_title="beta",
        yaxis={"range": [-0.05, 2.05]},
    )
    return fig


HEAD_VIEWS = "heads-head-views"  # the fragment a head change reruns


def picked_head(controls: Controls) -> tuple[int, int]:
    """The head in the head box now (a fragment rerun keeps the arguments of the last full run)."""
    layer, head = st.session_state[controls.key("head")]
    return int(layer), int(head)


def rerun_head_views(controls: Controls) -> None:
    """The head box's on_change: what Controls.widget records after drawing, then only the head's views rerun."""
    key, state = controls.key("head"), st.session_state
    state[f"{controls.page}-head@last"] = (state[key], controls.checkpoint)
    state[f"{key}#kept"] = state[key]
    state.pop(f"{key}#note", None)  # the user has chosen: the note is stale
    try:
        st.rerun(HEAD_VIEWS)
    except StreamlitAPIException:  # the open tab draws no head view: a full rerun, as before
        pass


@st.fragment(key=HEAD_VIEWS)
def head_views(section: str, checkpoint, controls: Controls, eig, n_traces: int, seed: int) -> None:
    """What depends on the picked head in the open tab; a head change reruns only this (its errors are
    one sentence here: the page's own attempt() does not wrap a fragment rerun)."""
    layer, head = picked_head(controls)
    if section == "beta":
        attempt(beta_head_views, checkpoint, eig, layer, head, seed)
    elif section == "products":
        attempt(products_head_views, checkpoint, n_traces, seed, layer, head)
    elif section == "subspace":
        attempt(subspace_head_views, checkpoint, controls, n_traces, seed, layer, head)


def beta_tab(checkpoint, controls: Controls, eig, n_traces: int, seed: int) -> None:
    left, right = st.columns(2)
    figures.show(figures.readable(beta_heatmap(eig)), left)
    figures.show(figures.readable(beta_kind_heatmap(eig)), right)
    head_views("beta", checkpoint, controls, eig, n_traces, seed)


def beta_head_views(checkpoint, eig, layer: int, head: int, seed: int) -> None:
    found = attempt(one_trace_beta, str(checkpoint.path), seed)
    if found is not None:
        pieces, betas = found
        figures.show(beta_trace_figure(pieces, betas[layer], layer, head, seed), title_width=110)
    left, right = st.columns(2)
    figures.show(eigenvalue_histogram(eig, layer, head), left)
    figures.show(product_eigenvalue_figure(eig, layer, head), right)


def product_reports(checkpoint, n_traces: int, seed: int) -> list:
    found = measure(checkpoint, n_traces, seed, ["products", "products_readout"])
    return [r for r in (found["products"], found["products_readout"]) if r is not None]


def products_tab(checkpoint, controls: Controls, eig, n_traces: int, seed: int) -> None:
    reports = product_reports(checkpoint, n_traces, seed)
    if not reports:
        st.info("The product probe needs traces whose actions are permutations (not probabilistic ones).")
        return
    st.markdown("**Do a head's products of transitions apply the permutations?**")
    for report in reports:
        st.markdown(span_sentence(report))
    head_views("products", checkpoint, controls, eig, n_traces, seed)


def products_head_views(checkpoint, n_traces: int, seed: int, layer: int, head: int) -> None:
    reports = product_reports(checkpoint, n_traces, seed)  # from memory: the tab measured them
    st.markdown(picked_sentence(reports, layer, head))
    spans = {"each action": reports[0]} | ({"between read-outs": reports[1]} if len(reports) > 1 else {})
    best = max(spans, key=lambda s: spans[s].heads["decoded_accuracy"].max())  # the span where a head decodes best
    shown = st.radio("per head, products over", list(spans), index=list(spans).index(best), horizontal=True)
    report = spans[shown]
    left, right = st.columns(2)
    decoding = figures.count_heatmap(product_decoding_figure(report, layer, head))
    if report.span == "readout":  # the library's title speaks of actions; here a product spans a stretch
        decoding.update_layout(
            title_text=f"layer {layer} head {head}: the composed permutation's cycle type vs the spectrum of the "
            "product between read-outs",
            yaxis_title_text="composed permutation's cycle type",
        )
        decoding.update_traces(selector={"type": "heatmap"}, colorbar_title_text="stretches")  # not "actions"
    figures.show(decoding, left)
    table = decoding.data[0].z
    if table is not None and len(table) == 1 and len(table[0]) == 1:
        left.caption(
            f"One cell: every held-out {'action' if report.span == 'action' else 'stretch'} of these traces has "
            "the same cycle type, so the spectrum can only agree with it or not."
        )
    right.markdown(
        "Per head (below): the representation that fits its products best, whether it is faithful, acting as g "
        "or g^-1, the held-out decoded accuracy and median residual, how often the spectrum gives the cycle "
        "type (spectral_agreement), how much a product varies between occurrences of one element "
        "(context_spread), and whether the head implements the permutations."
    )
    st.dataframe(span_table(report), hide_index=True, width="stretch")


def subspace_tab(checkpoint, controls: Controls, eig, n_traces: int, seed: int) -> None:
    sub = measure(checkpoint, n_traces, seed, ["subspace"])["subspace"]
    left, right = st.columns(2)
    figures.show(figures.power_ticks(singular_value_figure(sub)), left)
    with right:
        head_views("subspace", checkpoint, controls, eig, n_traces, seed)


def subspace_head_views(checkpoint, controls: Controls, n_traces: int, seed: int, layer: int, head: int) -> None:
    sub = measure(checkpoint, n_traces, seed, ["subspace"])["subspace"]
    n_vars = checkpoint.spec.n
    variable = controls.widget(
        st.selectbox,
        "var",
        "colour by",
        list(range(n_vars)),
        default=0,
        valid=lambda v: v in range(n_vars),
        format_func=lambda v: f"variable {VARIABLE_NAMES[v]}",
    )
    controls.show_notes()
    points = head_points(checkpoint, n_traces, seed, layer, head, variable)
    figures.show(state_scatter_figure(points, layer, head, variable))
    picked = sub.heads[(sub.heads["layer"] == layer) & (sub.heads["head"] == head)]
    st.caption(f"layer {layer} head {head}, measured on its states:")
    st.dataframe(  # one head: a row per measure, no sideways scroll
        picked.drop(columns=["layer", "head"]).T.rename(columns=lambda _: "value").rename_axis("measure").reset_index(),
        hide_index=True,
        width="stretch",
    )


def probes_tab(checkpoint, controls: Controls, n_traces: int, seed: int, step: str = "probes") -> None:
    """The probes, fitted on a click the first time (one logistic regression per head, layer and variable:
    10-20 s on 2 busy cores), then kept on disk: later visits show them at once."""
    if step == "probes" and not is_measured(checkpoint, n_traces, seed, step):
        st.caption(
            f"A linear probe per head, layer and variable on {n_traces} held-out traces: about 4 s of CPU "
            "(8-15 s on 2 busy cores) the first time, then kept on disk, keyed by the weights."
        )
        if not st.button("fit the linear probes", key=controls.key("fit-probes"), type="primary"):
            return
    from deltalens.probes.linear_probes import probe_accuracy_figure  # scikit-learn: only once probes are shown

    probes = measure(checkpoint, n_traces, seed, [step])[step]
    figures.show(probe_accuracy_figure(probes), title_width=110)
    st.dataframe(probes.summary().round(3), hide_index=True, width="stretch")
    st.caption(PROBE_COLUMNS)


def residual_probes_only(checkpoint, controls: Controls) -> None:
    """A model without beta or a matrix state (or whose transitions are not alpha (I - beta k k^T)): its
    residual-stream probes, which every model has."""
    article = article_of(checkpoint.arch)
    if is_delta_rule(checkpoint.arch):  # Comba's alpha I - beta k p^T, RWKV-7's Diag(w) - (kk * a) kk^T
        why = (
            f"has transitions {family(checkpoint.arch).transition}, not alpha (I - beta k k^T), so the beta, "
            "eigenvalue and product views, which read each transition as the latter, do not apply; the Census page "
            "gives its exact eigenvalues."
        )
    else:
        why = (
            "has no beta or matrix state, so the beta, eigenvalue, product and subspace views need a delta-rule "
            "model (DeltaNet, Gated DeltaNet, DeltaProduct)."
        )
    st.info(
        f"{article[0].upper()}{article[1:]} {why} Its residual-stream probes: can each variable's value be read off "
        "the stream after each layer?"
    )
    cols = st.columns(2)
    n_traces = controls.widget(
        cols[0].select_slider, "n", "held-out traces", TRACES, default=64, valid=lambda n: n in TRACES
    )
    seed = controls.widget(cols[1].number_input, "seed", "seed", default=0, min_value=0, max_value=10**6, step=1)
    controls.show_notes()
    probes_tab(checkpoint, controls, int(n_traces), int(seed), "resid_probes")


def delta_rule_page(checkpoint, controls: Controls) -> None:
    cols = st.columns(3)
    n_traces = controls.widget(
        cols[0].select_slider, "n", "held-out traces", TRACES, default=64, valid=lambda n: n in TRACES
    )
    seed = int(controls.widget(cols[1].number_input, "seed", "seed", default=0, min_value=0, max_value=10**6, step=1))
    eig = measure(checkpoint, int(n_traces), seed, ["eigenvalues"])["eigenvalues"]
    heads = [(int(layer), int(head)) for layer, head in zip(eig.heads["layer"], eig.heads["head"])]
    found = eig.tracking_head()
    if found is None:  # no head reflects: the first head is shown, and the page says none stands out
        st.caption(
            "No head reflects here (no action token's transition eigenvalue below "
            f"{eig.threshold:g}), so no head is singled out as the tracking head; the first is shown."
        )
    tracking = found or heads[0]
    controls.widget(
        cols[2].selectbox,
        "head",
        "head",
        heads,
        default=tracking,
        valid=lambda lh: tuple(lh) in heads,
        carry=False,  # each model's own tracking head
        why=lambda lh, source: (
            f"The head box shows layer {tracking[0]}, head {tracking[1]}, "
            + ("the tracking head" if found else "the first head")
            + f" of {checkpoint.path.name} (layer {lh[0]}, head {lh[1]} was chosen on {source})."
        ),
        format_func=lambda lh: f"layer {lh[0]}, head {lh[1]}",
        on_change=rerun_head_views,
        args=(controls,),
    )
    controls.show_notes()
    row = eig.head(*tracking)
    st.info(
        f"{describe(checkpoint)}. Tracking head: layer {tracking[0]}, head {tracking[1]}: mean beta on "
        f"actions {row['mean_beta_action']:.3f}, {100 * row['reflection_fraction']:.1f}% of its action "
        "transitions are reflections (eigenvalue < -0.9)."
    )
    tabs = st.tabs(TABS, key="heads-tab", on_change="rerun")
    with tabs[0]:
        if tabs[0].open is not False:
            beta_tab(checkpoint, controls, eig, int(n_traces), seed)
    with tabs[1]:
        if tabs[1].open:
            products_tab(checkpoint, controls, eig, int(n_traces), seed)
    with tabs[2]:
        if tabs[2].open:
            subspace_tab(checkpoint, controls, eig, int(n_traces), seed)
    with tabs[3]:
        if tabs[3].open:
            probes_tab(checkpoint, controls, int(n_traces), seed)


checkpoint = pick_checkpoint("heads-ckpt")
if checkpoint is not None:
    controls = Controls("heads", checkpoint)
    if is_delta_rule(checkpoint.arch) and "householder" in family(checkpoint.arch).capabilities:
        attempt(delta_rule_page, checkpoint, controls)
    else:
        attempt(residual_probes_only, checkpoint, controls)
