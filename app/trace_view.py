"""The REPL transcript as the dashboard draws it: each revealed value coloured by whether the model's
argmax is the true value, its probability below it, the true state after each action, and an
optional note at the end of a line (the model's answer to a question, or next to a wrong value)."""

from __future__ import annotations

import html
from collections.abc import Collection

import pandas as pd

from deltalens.tasks.groups import VARIABLE_NAMES

RIGHT, WRONG, ASKED = "#c8f7c5", "#ffc9c9", "#d6e4ff"


def state_text(state: tuple[int, ...]) -> str:
    return " ".join(f"{VARIABLE_NAMES[i]}={v}" for i, v in enumerate(state))


def trace_html(
    rows: pd.DataFrame, notes: dict[int, str] | None = None, asked: set[int] | None = None, struck: Collection[int] = ()
) -> str:
    """`rows`: training.evaluate.trace_predictions' frame (its `correct` judged against the true
    value); `notes`: line -> text written after that line; `asked`: lines the model wrote itself
    (its answers to questions, outlined in blue); `struck`: lines whose given values are wrong
    (struck through: the colour still says whether the model's own prediction is right)."""
    notes, asked = notes or {}, asked or set()
    lines: dict[int, list[str]] = {}
    states: dict[int, tuple] = {}
    for row in rows.itertuples():
        piece = html.escape(row.token.rstrip("\n"))
        if row.is_reveal:
            colour = RIGHT if row.correct else WRONG
            border = f"outline:2px solid {ASKED};" if row.line in asked else ""
            border += "text-decoration:line-through;" if row.line in struck else ""
            tip = html.escape(f"p = {row.p_token:.3f}; top: " + ", ".join(row.top))
            piece = (
                f'<span style="background:{colour};{border}padding:0 2px;border-radius:3px" title="{tip}">'
                f"{piece}<sub>{row.p_token:.2f}</sub></span>"
            )
        lines.setdefault(row.line, []).append(piece)
        if row.kind == "action":
            states[row.line] = row.state
    out = []
    for line in sorted(lines):
        text = "".join(lines[line])
        if line in states:
            text += f'<span style="color:#888">    # {state_text(states[line])}</span>'
        if line in notes:
            text += f'<span style="color:#1a4fb5">    # {html.escape(notes[line])}</span>'
        out.append(text)
    body = "\n".join(out)
    return f'<pre style="font-size:0.85rem;line-height:1.35;background:#fafafa;padding:0.6rem">{body}</pre>'
