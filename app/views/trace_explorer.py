"""Trace explorer: a generated or pasted REPL trace, each revealed value coloured by whether the
model's argmax is the true value, with its probability; the true state after each action; the
model's top-3 at any line. A pasted print without its output line asks the model (app/query.py),
and a wrong given value is shown next to the model's prediction."""

import dataclasses
import hashlib

import pandas as pd
import streamlit as st

from deltalens.app.common import Controls, attempt, describe, model_lock, pick_checkpoint, trace_html
from deltalens.app.query import ask
from deltalens.core.errors import ContextTooLong, DeltalensError
from deltalens.tasks.query_trace import read_query_trace
from deltalens.tasks.tokenizers.hf import missing_tokenizer
from deltalens.tasks.traces import generate_trace
from deltalens.training.evaluate import trace_predictions

P_TOKEN = (
    "p_token: the probability the model gave this token, predicted from the one before. Only revealed values "
    "are predictions: the model is trained and scored on them alone, so the rest of the REPL text (names, "
    "newlines, statements) may get a tiny p, as 2e-10, and is not judged right or wrong."
)


def generated_trace(checkpoint, controls: Controls, draw: bool):
    """The generated trace of the controls (drawn in generate mode; in paste mode their last values)."""
    spec = checkpoint.spec
    train = int(spec.actions if isinstance(spec.actions, int) else spec.actions[1])
    defaults = {"actions": train, "spacing": int(spec.spacing or 1), "seed": 0, "reveal": "one"}
    if draw:
        cols = st.columns(4)
        values = {
            "actions": controls.widget(
                cols[0].number_input, "actions", "actions", default=train, min_value=1, max_value=512, step=1
            ),
            "spacing": controls.widget(
                cols[1].number_input,
                "spacing",
                "reveal spacing",
                default=defaults["spacing"],
                min_value=1,
                max_value=64,
            ),
            "seed": controls.widget(cols[2].number_input, "seed", "seed", default=0, min_value=0, max_value=10**9),
            "reveal": controls.widget(
                cols[3].radio, "reveal", "reveal", ["one", "all"], default="one", horizontal=True
            ),
        }
    else:
        values = {name: controls.last(name, default) for name, default in defaults.items()}
    changed = dataclasses.replace(
        spec, actions=int(values["actions"]), spacing=int(values["spacing"]), reveal=values["reveal"]
    )
    return attempt(generate_trace, changed, int(values["seed"])), int(values["seed"])


def longest_that_fits(checkpoint, trace, seed: int, n_ctx: int) -> int:
    """The most actions (at most the trace's own) whose trace of this seed and spacing fits `n_ctx` tokens."""
    lo, hi = 0, trace.num_actions
    while lo < hi:  # a trace's length grows with its actions
        mid = (lo + hi + 1) // 2
        shorter = generate_trace(dataclasses.replace(trace.spec, actions=mid), seed)
        if len(checkpoint.tokenizer.encode_trace(shorter).ids) <= n_ctx:
            lo = mid
        else:
            hi = mid - 1
    return lo


MANY_QUESTIONS = 10  # prints without their output, past which asking them shows a progress bar


def why_no_further(checkpoint) -> str:
    """Why this Transformer stops at its context, by its kind of positions."""
    kind = getattr(checkpoint.model.cfg, "positional_embedding_type", None)
    if kind in ("rotary", "none"):
        return (
            f"its {kind} positions have no per-position weights, so it could read further, but the dashboard opens "
            "it at the context it was trained with"
        )
    return "it has one learned position embedding per token, so it cannot read further"


def asked(checkpoint, text: str):
    """ask(), or None after one sentence; a transcript longer than a Transformer's context is told how much
    to cut, in lines, not in code."""
    bar = None

    def progress(done: int, total: int) -> None:  # one forward per print the model answers: named when many
        nonlocal bar
        if total >= MANY_QUESTIONS:
            bar = bar or st.progress(0.0)
            bar.progress(done / total, text=f"asking the model: print {done} of {total}")

    with model_lock(str(checkpoint.path)):
        try:
            view = ask(checkpoint.model, checkpoint.tokenizer, text, progress=progress)
            if bar is not None:
                bar.empty()
            return view
        except ContextTooLong as err:
            lines = max(len(text.splitlines()), 1)
            keep = max(int(lines * err.n_ctx / err.n_tokens) - 1, 0)
            st.error(
                f"This transcript is {err.n_tokens} tokens, and {checkpoint.path.name}'s context is {err.n_ctx} "
                f"tokens ({why_no_further(checkpoint)}): keep about its first {keep} of {lines} lines."
            )
        except Exception as err:
            one_sentence(err)
    return None


def predictions_of(checkpoint, controls: Controls, trace, seed: int):
    """trace_predictions, or None after one sentence; a trace longer than a Transformer's context gets the
    number of actions that fits here and a button that sets it."""
    with model_lock(str(checkpoint.path)):
        try:
            return trace_predictions(checkpoint.model, checkpoint.tokenizer, trace)
        except ContextTooLong as err:
            too_long, fits_here = err, longest_that_fits(checkpoint, trace, seed, err.n_ctx)
        except Exception as err:
            one_sentence(err)
            return None
    st.error(
        f"This trace is {too_long.n_tokens} tokens, and {checkpoint.path.name}'s context is {too_long.n_ctx} tokens "
        f"({why_no_further(checkpoint)}): "
        + (
            f"with this seed and spacing, {fits_here} actions fit. Set **actions** to {fits_here} or fewer."
            if fits_here
            else "not even one action of this spacing fits."
        )
    )
    if fits_here:
        key = controls.key("actions")
        st.button(
            f"use {fits_here} actions",
            key=f"{key}-fit",
            on_click=lambda: st.session_state.__setitem__(key, fits_here),
        )
    return None


def one_sentence(err: Exception) -> None:
    """The st.error attempt() gives for `err`."""
    if isinstance(err, DeltalensError):
        st.error(str(err))
    else:  # an unforeseen input: still one sentence, and the server lives on
        first = (str(err).strip().splitlines() or [""])[0]
        st.error(f"unexpected {type(err).__name__}: {first}")


def fits(checkpoint, text: str) -> bool:
    """Whether a transcript reads (questions allowed) and encodes with this checkpoint's tokenizer."""
    try:
        checkpoint.tokenizer.encode_trace(read_query_trace(text)[0])
    except DeltalensError:
        return False
    return True


def metrics(rows: pd.DataFrame, view) -> None:
    reveals = rows[rows["is_reveal"]]
    a, b, c = st.columns(3)
    right = f"{float(reveals['correct'].mean()):.3f}" if len(reveals) else "–"
    if view is None:
        a.metric("reveal accuracy on this trace", right)
        b.metric("revealed values", len(reveals))
        c.metric("mean p(true value)", f"{reveals['p_token'].mean():.3f}" if len(reveals) else "–")
        return
    a.metric("model right at printed values", right, help="the model's argmax against the replayed value")
    b.metric("printed values", len(reveals))
    given = view.table[view.table["given"] != "(asked)"]
    wrong = int((given["given"] != given["replayed"]).sum())
    c.metric("questions asked / wrong values given", f"{len(view.asked)} / {wrong}")


def line_table(controls: Controls, rows: pd.DataFrame, text: str) -> None:
    """The model's top-3 at every token of one line (the line box belongs to this trace)."""
    lines = sorted(rows["line"].unique())
    reveals = rows[rows["is_reveal"]]
    first = int(reveals["line"].iloc[0]) if len(reveals) else int(lines[0])
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]  # another trace: its own line box
    line = controls.widget(
        st.selectbox,
        f"line-{digest}",
        "top-3 at line",
        lines,
        default=first,
        valid=lambda i: i in lines,
        carry=False,  # another checkpoint: its own box, from the first reveal
        why=lambda i, other: (
            f"top-3 at line: line {i + 1} was picked on {other}; here the box starts at the "
            f"trace's first reveal, line {first + 1}."
        ),
        format_func=lambda i: f"{i + 1}: {''.join(rows[rows['line'] == i]['token']).strip()}",
    )
    controls.show_notes()
    shown = rows[rows["line"] == line]
    st.dataframe(
        pd.DataFrame(
            {
                "position": shown["position"],
                "token": shown["token"],
                "kind": shown["kind"],
                "p_token": [f"{p:.3g}" for p in shown["p_token"]],
                "model right?": [
                    ("yes" if ok else "no") if r else "" for ok, r in zip(shown["correct"], shown["is_reveal"])
                ],
                "top": [", ".join(top) for top in shown["top"]],
            }
        ),
        hide_index=True,
        width="stretch",
    )
    st.caption(P_TOKEN)


checkpoint = pick_checkpoint("trace-ckpt", where=lambda row: not str(row["tokenizer"]).endswith("-prob"))
if checkpoint is not None and checkpoint.spec is None:
    st.error(missing_tokenizer(checkpoint.path.name))
elif checkpoint is not None:
    # a model from elsewhere records no training task: its default task's length stands in
    length = checkpoint.task.actions[1] if checkpoint.data is not None else checkpoint.spec.actions
    trained = "trained on" if checkpoint.data is not None else "asked at"
    st.caption(f"{describe(checkpoint)}; {trained} {length} actions per trace.")
    controls = Controls("trace", checkpoint)
    source = controls.widget(st.radio, "source", "trace", ["generate", "paste"], default="generate", horizontal=True)
    generated, seed = generated_trace(checkpoint, controls, draw=source == "generate")
    rows = view = None
    text = generated.text if generated is not None else ""
    if source == "paste":
        model_name = checkpoint.path.name  # (a name the lambda below reads: `checkpoint` is not narrowed there)
        text = controls.widget(
            st.text_area,
            "text",
            "REPL transcript: assignments, swaps/cycles, prints and their output. Leave a print's output line out to "
            "ask the model; a wrong value is shown next to the model's.",
            default=text,
            carry=lambda pasted: fits(checkpoint, pasted),
            why=lambda pasted, other: (
                f"The transcript pasted on {other} does not fit {model_name} "
                "(another group or tokenizer): the box holds a trace of its own task."
            ),
            height=240,
        )
        controls.show_notes()
        if text.strip():
            view = asked(checkpoint, text)
            rows = None if view is None else view.rows
        else:
            st.info("The box is empty: paste a REPL transcript (assignments, swaps or cycles, prints) to read it.")
    else:
        controls.show_notes()
        if generated is not None:
            rows = predictions_of(checkpoint, controls, generated, seed)
    if rows is not None and len(rows):
        metrics(rows, view)
        st.html(trace_html(rows, *((view.notes, view.asked, view.wrong) if view is not None else ())))
        if view is not None:
            st.dataframe(view.table, hide_index=True, width="stretch")
        line_table(controls, rows, text)
