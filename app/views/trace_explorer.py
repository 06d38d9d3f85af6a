"""Trace explorer: a generated or pasted REPL trace, each revealed value coloured by whether the
model's argmax is right, with its probability; the true state after each action; the model's
top-3 at any line."""

import dataclasses

import pandas as pd
import streamlit as st

from deltalens.app.common import attempt, describe, locked, pick_checkpoint, trace_html
from deltalens.tasks.traces import generate_trace
from deltalens.training.evaluate import trace_predictions

st.title("Trace explorer")
checkpoint = pick_checkpoint(
    "trace-ckpt", where=lambda row: not str(row["tokenizer"]).endswith("-prob"), default="s3-deltanet-neg-statement"
)
if checkpoint is not None and checkpoint.spec is None:
    st.error(f"{checkpoint.path.name} records no task, so there is no tokenizer to write its traces with.")
elif checkpoint is not None:
    spec = checkpoint.spec
    st.caption(f"{describe(checkpoint)}; trained on {checkpoint.task.actions[1]} actions per trace.")
    source = st.radio("trace", ["generate", "paste"], horizontal=True, key="trace-source")
    cols = st.columns(4)
    actions = cols[0].number_input(
        "actions", 1, 512, int(spec.actions if isinstance(spec.actions, int) else spec.actions[1]), key="trace-actions"
    )
    spacing = cols[1].number_input("reveal spacing", 1, 64, int(spec.spacing or 1), key="trace-spacing")
    seed = cols[2].number_input("seed", 0, 10**9, 0, key="trace-seed")
    reveal = cols[3].radio("reveal", ["one", "all"], horizontal=True, key="trace-reveal")
    generated = attempt(
        generate_trace, dataclasses.replace(spec, actions=int(actions), spacing=int(spacing), reveal=reveal), int(seed)
    )
    trace = generated
    if source == "paste":
        trace = st.text_area(
            "REPL transcript (a deterministic trace: assignments, swaps/cycles, prints and their output)",
            generated.text if generated is not None else "",
            height=240,
            key="trace-text",
        )
    rows = None
    if trace is not None and (not isinstance(trace, str) or trace.strip()):
        rows = locked(checkpoint, trace_predictions, checkpoint.model, checkpoint.tokenizer, trace)
    if rows is not None and len(rows):
        reveals = rows[rows["is_reveal"]]
        accuracy = float(reveals["correct"].mean()) if len(reveals) else float("nan")
        a, b, c = st.columns(3)
        a.metric("reveal accuracy on this trace", f"{accuracy:.3f}")
        b.metric("revealed values", len(reveals))
        c.metric("mean p(true value)", f"{reveals['p_token'].mean():.3f}" if len(reveals) else "–")
        st.html(trace_html(rows))
        lines = sorted(rows["line"].unique())
        first_reveal = int(reveals["line"].iloc[0]) if len(reveals) else lines[0]
        line = st.selectbox(
            "top-3 at line",
            lines,
            index=lines.index(first_reveal),
            key="trace-line",
            format_func=lambda i: f"{i + 1}: {''.join(rows[rows['line'] == i]['token']).strip()}",
        )
        shown = rows[rows["line"] == line][["position", "token", "kind", "p_token", "correct", "top"]]
        st.dataframe(pd.DataFrame(shown), hide_index=True, width="stretch")
