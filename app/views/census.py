"""Census: per layer and head of a delta-rule checkpoint, what its per-token transitions do (probes/census.py):
the share of tokens with beta > 1 (a negative eigenvalue; on action tokens too), of negative gate channels,
the smallest transition eigenvalue and the effective rank of S_t, as a layer x head heatmap and a table.

It reads held-out REPL traces of the checkpoint's task (a model with its own tokenizer is asked the default
task's traces) or pasted text. Each census is kept on disk keyed by the weights' hash (app/disk_cache.py);
more traces than AT_ONCE wait for a button and a named progress bar unless they are on disk already.
"""

import hashlib

import pandas as pd
import streamlit as st

from deltalens.app import figures
from deltalens.app.common import Controls, attempt, describe, model_lock, pick_checkpoint
from deltalens.app.disk_cache import MISSING, cached_result, read_result
from deltalens.core.errors import DeltalensError
from deltalens.models.architecture import article_of, is_delta_rule

PAGE = "census"
TRACES = [16, 64, 256, 1024]
AT_ONCE = 256  # traces counted without a click: 64 took 0.3-0.4 s on the shipped checkpoints, 256 about 1.5 s
STATISTICS = {  # census column -> what the selectbox and the heatmap call it
    "reflection_fraction_action": "share of action tokens with eigenvalue below -0.9 (a near-reflection)",
    "beta_gt1_action": "share of action tokens with beta > 1",
    "reflection_fraction": "share of tokens with eigenvalue below -0.9 (a near-reflection)",
    "beta_gt1": "share of tokens with beta > 1 (a negative eigenvalue where the key has unit length)",
    "neg_gate": "share of negative gate channels",
    "complex_fraction": "share of tokens whose transition has complex eigenvalues (RWKV-7)",
    "min_eigenvalue": "smallest eigenvalue 1 - beta ||k||^2 over the tokens",
    "min_decayed_eigenvalue": "smallest transition eigenvalue over the tokens, decay included",
    "mean_beta": "mean beta",
    "effective_rank": "effective rank of S_t",
}
SAMPLE_TEXT = "The cat sat on the mat, and then the dog sat on the cat."


def own_tokenizer(checkpoint) -> bool:
    """A model that reads text with a tokenizer of its own (a Hub or fla model), not a REPL trace tokenizer."""
    return checkpoint.data is None


def default_text(checkpoint) -> str:
    """What the paste box starts with: a held-out trace of the task, or a sentence for a text model."""
    if own_tokenizer(checkpoint) or checkpoint.spec is None or not hasattr(checkpoint.spec, "reveal"):
        return SAMPLE_TEXT
    from deltalens.tasks.traces import generate_trace

    return generate_trace(checkpoint.spec, 0).text


def census_of(checkpoint, source: str, n_traces: int, seed: int, text: str):
    """The census of the traces (or the text), kept on disk by the weights and what was asked."""
    from deltalens.probes.census import census

    if source == "paste":
        if not text.strip():
            raise DeltalensError("the pasted text is empty; paste some text for the census to read.")
        params = f"text/{hashlib.sha1(text.encode()).hexdigest()}"
    else:
        params = f"traces/{n_traces}/{seed}"
    bar = None
    if read_result("census", checkpoint.path, params) is MISSING:
        bar = st.progress(0.0, text=f"{checkpoint.path.name}: step 1 of 2, reading the input ...")

    def compute():
        with model_lock(str(checkpoint.path)):
            model = checkpoint.model
            tokens = model.to_tokens(text) if source == "paste" else checkpoint.batch(n_traces, seed=seed)
            if bar is not None:
                bar.progress(0.3, text=f"{checkpoint.path.name}: step 2 of 2, the census of every head ...")
            return census(model, tokens)

    try:
        return cached_result("census", checkpoint.path, params, compute)
    finally:
        if bar is not None:
            bar.empty()


def table_of(result) -> pd.DataFrame:
    """The census as the page shows it: a head column (L0H3) first, then the statistics."""
    frame = result.heads.copy()
    frame.insert(0, "name", [f"L{int(layer)}H{int(head)}" for layer, head in zip(frame["layer"], frame["head"])])
    return frame


def headline(result, name: str) -> str:
    """One sentence naming the head this census singles out (the largest share of near-reflections, eigenvalue
    below -0.9, on actions if any), or saying that none reflects."""
    column, top = result.most_reflecting()
    if top is None:
        if result.heads["beta_gt1"].max() > 0:
            return f"On {name} no head reflects on these tokens (no eigenvalue below -0.9); {result.negative_clause()}."
        return f"On {name} no head has beta > 1 on these tokens: no transition has a negative eigenvalue."
    layer, head = top
    row = result.heads.set_index(["layer", "head"]).loc[(layer, head)]
    where = "action tokens" if column.endswith("_action") else "tokens"
    gt1 = row["beta_gt1_action" if column.endswith("_action") else "beta_gt1"]
    return (
        f"On {name} the census singles out **L{layer}H{head}**: a near-reflection (eigenvalue below -0.9) on "
        f"{row[column]:.0%} of its {where}, the largest share of any head (beta > 1 on {gt1:.0%})."
    )


def heatmap(result, controls: Controls):
    from deltalens.probes.census import census_figure

    # the negative-gate share stays offered where it is undefined (a sentence says why); action tokens do not
    shown = [c for c in STATISTICS if result.heads[c].notna().any() or c == "neg_gate"]
    column = controls.widget(
        st.selectbox,
        "statistic",
        "statistic",
        shown,
        default=shown[0],
        valid=lambda value: value in shown,
        format_func=STATISTICS.get,
    )
    if not result.heads[column].notna().any():
        st.info(  # only the negative-gate share is offered undefined
            f"{STATISTICS[column].capitalize()} is not defined here: no family of this checkpoint allows a "
            "negative gate (alpha < 0)."
        )
        return
    fig = census_figure(result, column)
    fig.update_layout(title=f"{result.architecture}: {STATISTICS[column]} per layer and head", height=380)
    fig.data[0].update(texttemplate="%{z:.2f}")  # the numbers in the cells
    figures.show(fig, title_width=110)


def reads(checkpoint, text: str) -> bool:
    """Whether this checkpoint's model reads `text` (its tokenizer encodes it): pasted text carried from another
    checkpoint only then, as the Trace explorer carries a transcript."""
    try:
        checkpoint.model.to_tokens(text)
    except DeltalensError:
        return False
    return True


def inputs(checkpoint, controls: Controls):
    """(source, traces, seed, text) from the controls: traces of the task by default, or pasted text."""
    label = "pasted text" if own_tokenizer(checkpoint) else "pasted REPL trace"
    left, middle, right = st.columns([2, 1, 1])
    source = controls.widget(left.radio, "source", "read", ["traces", "paste"], default="traces", horizontal=True)
    text = ""
    if source == "paste":
        name = checkpoint.path.name
        text = controls.widget(
            st.text_area,
            "text",
            label,
            default=default_text(checkpoint),
            carry=lambda pasted: reads(checkpoint, pasted),
            why=lambda pasted, other: (
                f"The text pasted on {other} does not read with {name}'s tokenizer (another group or "
                "tokenizer): the box holds a trace of its own task."
            ),
            height=180,
        )
        return source, 0, 0, text
    n_traces = controls.widget(middle.selectbox, "traces", "held-out traces", TRACES, default=64)
    seed = controls.widget(right.number_input, "seed", "trace seed", min_value=0, max_value=10**6, default=0)
    return source, int(n_traces), int(seed), text


def main() -> None:
    top = st.empty()  # the sentence naming the singled-out head, filled once the census is known
    checkpoint = pick_checkpoint("census-ckpt")
    if checkpoint is None:
        return
    st.caption(describe(checkpoint))
    if not is_delta_rule(checkpoint.arch):
        st.info(
            f"{article_of(checkpoint.arch)} has no beta and no state S_t (no delta rule), so there is no "
            "census of its transitions; pick a DeltaNet, Gated DeltaNet or DeltaProduct checkpoint."
        )
        return
    controls = Controls(PAGE, checkpoint)
    source, n_traces, seed, text = inputs(checkpoint, controls)
    controls.show_notes()
    kept = read_result("census", checkpoint.path, f"traces/{n_traces}/{seed}") is not MISSING
    if source == "traces" and n_traces > AT_ONCE and not kept:
        st.caption(f"A census of {n_traces} traces takes several seconds; it is then kept on disk.")
        if not st.button(f"count {n_traces} traces", key=controls.key("run"), type="primary"):
            return
    result = attempt(census_of, checkpoint, source, n_traces, seed, text)
    if result is None:
        return
    top.markdown(headline(result, st.session_state["census-ckpt"]))  # its name in the list (a Hub id, not a hash)
    heatmap(result, controls)
    st.dataframe(table_of(result), hide_index=True, width="stretch")
    what = "pasted text" if source == "paste" else f"{n_traces} held-out traces (seed {seed})"
    st.caption(
        f"{int(result.heads['tokens'].iloc[0])} transitions per head over {what}; the command line prints the "
        "same table: `deltalens census CHECKPOINT`."
    )


attempt(main)
