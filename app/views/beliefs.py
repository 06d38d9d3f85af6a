"""Beliefs (PFSA-SR): a probabilistic trace, the exact posterior at every printed value next to
each probabilistic checkpoint's predictive and the KL between them, and how the unnormalised
belief of a linear filter decays, by dtype."""

import os

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from deltalens.app import figures
from deltalens.app.common import attempt, checkpoint_sources, checkpoint_table, folder_of, locked, opened
from deltalens.app.disk_cache import cached_result
from deltalens.tasks.belief_decay import halving_decay, joint_decay_figure, marginal_decay, marginal_decay_figure
from deltalens.tasks.probabilistic import generate_prob_trace
from deltalens.training.belief_kl import transcript_beliefs


@st.cache_resource(show_spinner="computing the decay laws (once, then kept on disk) ...")
def decays():
    """The exact decay laws: no checkpoint's, so kept on disk by the library's source alone."""
    return cached_result("belief-decays", None, "halving/marginal", lambda: (halving_decay(), marginal_decay()))


def short_names(names: list[str]) -> dict[str, str]:
    """Each name without the prefix and suffix all of them share (s3-…-statement-prob): table columns fit."""
    if len(names) < 2:
        return {name: name for name in names}
    head = os.path.commonprefix(names)
    tail = os.path.commonprefix([n[::-1] for n in names])[::-1]
    head, tail = head[: head.rfind("-") + 1], tail[tail.find("-") :] if "-" in tail else ""
    return {name: name[len(head) : len(name) - len(tail)] or name for name in names}


def rounded(values) -> str:
    """A predictive as [0.026, 0.467, 0.507]: four digits made the table scroll sideways."""
    return "[" + ", ".join(f"{float(v):.3f}" for v in values) + "]"


def belief_tables(frames: dict[str, pd.DataFrame]) -> None:
    base = next(iter(frames.values()))
    short = short_names(list(frames))
    labels = pd.DataFrame({"line": base["line"], "variable": base["variable"], "shown": base["revealed"]})
    exact = [str(p) for p in base["p"]]
    kl = labels.assign(**{f"KL {short[name]}": rows["kl"].round(4) for name, rows in frames.items()})
    st.caption(
        "KL(exact || model) in nats at every printed value, one column per checkpoint ("
        + ", ".join(f"**{s}**: {name}" for name, s in short.items())
        + "); pick one below for its predictive next to the exact posterior."
    )
    st.dataframe(kl, hide_index=True, width="stretch")
    left, right = st.columns([1, 2])
    name = left.selectbox("predictive of", list(frames), key="belief-of", format_func=short.get)
    right.dataframe(
        labels.assign(**{"exact P(1..n)": exact, "model q": [rounded(q) for q in frames[name]["q"]]}).assign(
            KL=frames[name]["kl"].round(4)
        ),
        hide_index=True,
        width="stretch",
    )
    fig = go.Figure(go.Bar(x=[short[n] for n in frames], y=[rows["kl"].mean() for rows in frames.values()]))
    fig.update_layout(
        title="mean KL(exact || model) over this trace's printed values, nats", yaxis_title="KL (nats)", height=360
    )
    figures.show(fig, title_width=110)


table = attempt(checkpoint_table, tuple(checkpoint_sources()))
names = [] if table is None else [n for n, tok in zip(table["name"], table["tokenizer"]) if str(tok).endswith("-prob")]
if table is not None and not names:
    st.info(  # a page for another kind of model: one sentence, not an error
        f"No checkpoint in {', '.join(checkpoint_sources())} was trained on probabilistic traces (a *-prob "
        "tokenizer), so there are no models to compare; the exact decay below needs none."
    )
checkpoints = {name: c for name in names if (c := attempt(opened, folder_of(table, name))) is not None}
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
        belief_tables(frames)

st.header("Without renormalisation: the belief mass decays")
joint, marginal = decays()
left, right = st.columns(2)
for where, fig in ((left, joint_decay_figure(joint)), (right, marginal_decay_figure(marginal))):
    figures.show(figures.power_ticks(figures.level_line_labels(fig)), where)
