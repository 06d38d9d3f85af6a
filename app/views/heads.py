"""Heads: beta and the transition eigenvalues per head and token kind, the state's dimensionality
and a PCA view of it, linear probes per head and layer; the tracking head pointed out."""

import plotly.graph_objects as go
import streamlit as st
import torch

from deltalens.app.common import attempt, describe, head_measurements, model_lock, pick_checkpoint
from deltalens.models.architecture import is_delta_rule, require_delta_rule
from deltalens.probes.eigenvalues import (
    beta_heatmap,
    beta_kind_heatmap,
    eigenvalue_histogram,
    product_eigenvalue_figure,
)
from deltalens.probes.linear_probes import probe_accuracy_figure
from deltalens.probes.products import product_decoding_figure
from deltalens.probes.subspace import singular_value_figure, state_points, state_scatter_figure
from deltalens.tasks.groups import VARIABLE_NAMES
from deltalens.tasks.probabilistic import ProbTraceSpec, generate_prob_trace
from deltalens.tasks.traces import generate_trace

st.title("Heads")
checkpoint = pick_checkpoint("heads-ckpt", default="s3-deltanet-neg-statement")
if checkpoint is not None and not is_delta_rule(checkpoint.arch):
    attempt(require_delta_rule, checkpoint.model, "beta or matrix state")  # its one sentence, on the page
elif checkpoint is not None:
    cols = st.columns(3)
    n_traces = cols[0].select_slider("held-out traces", [16, 32, 64, 128, 256], value=64, key="heads-n")
    seed = cols[1].number_input("seed", 0, 10**6, 0, key="heads-seed")
    found = attempt(head_measurements, str(checkpoint.path), int(n_traces), int(seed))
    if found is not None:
        eig, sub, probes = found["eigenvalues"], found["subspace"], found["probes"]
        tracking = eig.tracking_head()
        row = eig.head(*tracking)
        st.info(
            f"{describe(checkpoint)}. Tracking head: layer {tracking[0]}, head {tracking[1]}: mean beta on "
            f"actions {row['mean_beta_action']:.3f}, {100 * row['reflection_fraction']:.1f}% of its action "
            "transitions are reflections (eigenvalue < -0.9)."
        )
        heads = [(layer, head) for layer, head in zip(eig.heads["layer"], eig.heads["head"])]
        if st.session_state.get("heads-head-of") != str(checkpoint.path):  # another checkpoint: its tracking head
            st.session_state["heads-head-of"] = str(checkpoint.path)
            st.session_state.pop("heads-head", None)
        layer, head = cols[2].selectbox(
            "head",
            heads,
            index=heads.index(tracking),
            key="heads-head",
            format_func=lambda lh: f"layer {lh[0]}, head {lh[1]}",
        )
        left, right = st.columns(2)
        left.plotly_chart(beta_heatmap(eig), width="stretch")
        right.plotly_chart(beta_kind_heatmap(eig), width="stretch")

        spec = checkpoint.spec
        trace = (
            generate_prob_trace(spec, int(seed), posteriors=False)
            if isinstance(spec, ProbTraceSpec)
            else generate_trace(spec, int(seed))
        )
        tokens = checkpoint.model.to_tokens(trace.text)
        with torch.no_grad(), model_lock(str(checkpoint.path)):
            _, cache = checkpoint.model.run_with_cache(tokens, names_filter=f"blocks.{layer}.attn.hook_beta")
        pieces = checkpoint.model.to_str_tokens(tokens)
        beta = cache[f"blocks.{layer}.attn.hook_beta"][0, :, head]  # (T,) or (T, n_h) for DeltaProduct
        factors = beta.T if beta.ndim == 2 else beta[None]
        fig = go.Figure(
            [
                go.Scatter(
                    x=list(range(beta.shape[0])),
                    y=values.tolist(),
                    mode="lines+markers",
                    name=f"factor {j}" if beta.ndim == 2 else "beta",
                    text=[p.strip() for p in pieces],
                    hovertemplate="%{text}: beta %{y:.3f}",
                )
                for j, values in enumerate(factors)
            ]
        )
        fig.update_layout(
            title=f"layer {layer} head {head}: beta at each token of one held-out trace (seed {seed})",
            xaxis_title="position",
            yaxis_title="beta",
            yaxis={"range": [-0.05, 2.05]},
        )
        st.plotly_chart(fig, width="stretch")

        left, right = st.columns(2)
        left.plotly_chart(eigenvalue_histogram(eig, layer, head), width="stretch")
        right.plotly_chart(product_eigenvalue_figure(eig, layer, head), width="stretch")

        products = found["products"]
        if products is not None:
            between = found["products_readout"]
            composed = (
                ""
                if between is None
                else f" **Between read-outs** (every token's transition from one read-out to the next, against the "
                f"permutation composed there; a head whose keys move with the context can still compose "
                f"right): {between.verdict()}."
            )
            st.markdown(
                f"**Per-token products of reflections.** {products.verdict()}.{composed} The head picked above:"
            )
            left, right = st.columns(2)
            left.plotly_chart(product_decoding_figure(products, layer, head), width="stretch")
            right.dataframe(products.heads.round(3), hide_index=True, width="stretch")

        left, right = st.columns(2)
        left.plotly_chart(singular_value_figure(sub), width="stretch")
        variable = right.selectbox(
            "colour by",
            range(found["capture"].n_vars),
            key="heads-var",
            format_func=lambda v: f"variable {VARIABLE_NAMES[v]}",
        )
        points = state_points(found["capture"], layer, head, variable)
        right.plotly_chart(state_scatter_figure(points, layer, head, variable), width="stretch")
        picked = sub.heads[(sub.heads["layer"] == layer) & (sub.heads["head"] == head)]
        st.dataframe(picked, hide_index=True, width="stretch")
        st.plotly_chart(probe_accuracy_figure(probes), width="stretch")
