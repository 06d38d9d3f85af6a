"""Beliefs (PFSA-SR): a probabilistic trace, the exact posterior at every printed value next to
each probabilistic checkpoint's predictive and the KL between them, and how the unnormalised
belief of a linear filter decays, by dtype."""

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from deltalens.app.common import attempt, checkpoint_dir, checkpoint_table, locked, opened
from deltalens.probes.belief_decay import halving_decay, joint_decay_figure, marginal_decay, marginal_decay_figure
from deltalens.tasks.probabilistic import generate_prob_trace
from deltalens.training.belief_kl import transcript_beliefs


@st.cache_resource(show_spinner="computing the decay laws ...")
def decays():
    return halving_decay(), marginal_decay()


st.title("Beliefs")
table = attempt(checkpoint_table, str(checkpoint_dir()))
names = [] if table is None else [n for n, tok in zip(table["name"], table["tokenizer"]) if str(tok).endswith("-prob")]
if table is not None and not names:
    st.error(f"no checkpoint in {checkpoint_dir()} was trained on probabilistic traces (a *-prob tokenizer).")
checkpoints = {name: c for name in names if (c := attempt(opened, str(checkpoint_dir() / name))) is not None}
if checkpoints:
    first = next(iter(checkpoints.values()))
    st.caption(
        f"probabilistic checkpoints: {', '.join(checkpoints)}; traces of their family: "
        f"{first.spec.group}, swap p = {first.spec.swap_prob:g}, choice over {first.spec.choice_size}."
    )
    cols = st.columns([1, 1, 2])
    source = cols[0].radio("trace", ["generate", "paste"], horizontal=True, key="belief-source")
    seed = cols[1].number_input("seed", 0, 10**9, 3, key="belief-seed")
    text = generate_prob_trace(first.spec, int(seed), posteriors=False).text
    if source == "paste":
        text = st.text_area("probabilistic REPL transcript", text, height=260, key="belief-text")
    else:
        st.code(text, language="python")
    frames = {}
    for name, checkpoint in checkpoints.items():
        rows = locked(checkpoint, transcript_beliefs, checkpoint.model, checkpoint.tokenizer, text)
        if rows is None:
            break
        frames[name] = rows
    if frames:
        base = next(iter(frames.values()))
        shown = pd.DataFrame(
            {
                "line": base["line"],
                "variable": base["variable"],
                "shown": base["revealed"],
                "exact P(1..n)": [str(p) for p in base["p"]],
            }
        )
        for name, rows in frames.items():
            shown[f"{name}: q"] = [str(q) for q in rows["q"]]
            shown[f"{name}: KL"] = rows["kl"].round(4)
        st.dataframe(shown, hide_index=True, width="stretch")
        fig = go.Figure(go.Bar(x=list(frames), y=[rows["kl"].mean() for rows in frames.values()]))
        fig.update_layout(
            title="mean KL(exact || model) over this trace's printed values, nats", yaxis_title="KL (nats)", height=360
        )
        st.plotly_chart(fig, width="stretch")

st.header("Without renormalisation: the belief mass decays")
joint, marginal = decays()
left, right = st.columns(2)
left.plotly_chart(joint_decay_figure(joint), width="stretch")
right.plotly_chart(marginal_decay_figure(marginal), width="stretch")
