"""A pasted transcript as a question to the model: a print with no output line is answered by the
model itself (its argmax value, slot by slot, then the trace goes on from its answer), and a wrong
given value is kept as written and shown next to the model's prediction and the replayed truth.

Read with tasks.traces.read_query_trace (the strict parse_trace refuses both).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import torch

from deltalens.tasks.groups import VARIABLE_NAMES
from deltalens.tasks.query_trace import Query, read_query_trace
from deltalens.tasks.traces import Trace
from deltalens.training.evaluate import trace_predictions


@dataclass
class Answer:
    """The model's prediction at one printed value."""

    value: int  # its argmax among the values 1..n
    p: float  # the probability it gives that value (over the whole vocabulary)
    top: list[str]  # its top-k values with probabilities, "3: 0.912"


@dataclass
class QueryView:
    trace: Trace  # what the model read: asked lines hold its own answers
    rows: pd.DataFrame  # trace_predictions of it, `correct` judged against the replayed truth
    table: pd.DataFrame  # one row per print: given, model, replayed
    notes: dict[int, str]  # line -> sentence for the transcript
    asked: set[int]  # lines the model wrote
    wrong: set[int]  # lines whose given values are not the replayed ones


def _output_line(query: Query, print_line: str, values: list[int]) -> str:
    name = f"{VARIABLE_NAMES[query.variables[0]]} " if "print('" in print_line else ""
    return name + " ".join(map(str, values)) + "\n"


@torch.no_grad()
def _answer(model, tokenizer, lines: list[str], query: Query, n: int, top_k: int) -> tuple[str, list[Answer]]:
    """The output line the model writes after the print above `query.line`, value by value."""
    print_line = lines[query.line - 1]
    first = 1 if "print('" in print_line else 0  # "a 3\n" -> "a" " 3" "\n"; "3 1 2\n" -> "3" " 1" " 2" "\n"
    prefix = tokenizer.encode("".join(lines[: query.line]))
    slots, chosen, answers = len(query.variables), [], []
    for slot in range(slots):
        # later slots hold 1: only the tokens before this slot are read
        encoded = {
            v: tokenizer.encode(_output_line(query, print_line, [*chosen, v] + [1] * (slots - slot - 1)))
            for v in range(1, n + 1)
        }
        candidates = {v: ids[first + slot] for v, ids in encoded.items()}
        context = [tokenizer.bos_id, *prefix, *encoded[1][: first + slot]]
        probs = model(torch.tensor([context]))[0, -1].float().softmax(-1).cpu()
        ranked = sorted(candidates, key=lambda v: -float(probs[candidates[v]]))
        chosen.append(ranked[0])
        top = [f"{v}: {float(probs[candidates[v]]):.3f}" for v in ranked[:top_k]]
        answers.append(Answer(ranked[0], float(probs[candidates[ranked[0]]]), top))
    return _output_line(query, print_line, chosen), answers


def ask(model, tokenizer, text: str, top_k: int = 3, progress: Callable[[int, int], None] | None = None) -> QueryView:
    """The query view of a pasted transcript (see the module docstring); progress(done, total) after each print
    the model answers (one forward over the transcript before it, each)."""
    trace, queries = read_query_trace(text)
    n = trace.n
    lines, answers = list(trace.lines), {}
    open_queries = [query for query in queries if query.given is None]
    for done, query in enumerate(open_queries, 1):
        lines[query.line], answers[query.line] = _answer(model, tokenizer, lines, query, n, top_k)
        if progress is not None:
            progress(done, len(open_queries))
    fed = dataclasses.replace(trace, lines=lines)
    rows = trace_predictions(model, tokenizer, fed, top_k=top_k)
    return _view(model, tokenizer, fed, queries, rows, answers)


def _view(model, tokenizer, fed: Trace, queries: list[Query], rows: pd.DataFrame, answers) -> QueryView:
    encoded = tokenizer.encode_trace(fed)
    with torch.no_grad():
        logits = model(torch.tensor([encoded.ids]))[0].float()
    argmax = [0, *logits[:-1].argmax(-1).tolist()]  # argmax[t]: the prediction for token t
    rows = rows.assign(
        truth=[encoded.answers[t] for t in rows["position"]],
        predicted=[_value(tokenizer, argmax[t]) for t in rows["position"]],
    )
    rows["correct"] = rows["is_reveal"] & (rows["predicted"] == rows["truth"])  # against the truth, not the text
    table, notes = [], {}
    for query in queries:
        at = rows[(rows["line"] == query.line) & rows["is_reveal"]]
        asked = answers.get(query.line)
        model_says = " ".join(str(a.value) for a in asked) if asked else " ".join(map(str, at["predicted"]))
        given = "(asked)" if query.given is None else " ".join(map(str, query.given))  # None: the model answered
        truth = " ".join(map(str, query.values))
        table.append(
            {
                "output line": query.line + 1,
                "print": fed.lines[query.line - 1].strip(),
                "given": given,
                "model": model_says,
                "replayed": truth,
                "model right": model_says == truth,
                "model's top (first value)": ", ".join(asked[0].top if asked else at["top"].iloc[0]),
            }
        )
        if asked:
            notes[query.line] = f"asked: the model answers {model_says} (p {asked[0].p:.2f}); replaying gives {truth}"
        elif query.wrong:
            notes[query.line] = f"given {given} is wrong (replaying gives {truth}); the model predicts {model_says}"
    wrong = {query.line for query in queries if query.wrong}
    return QueryView(fed, rows, pd.DataFrame(table), notes, set(answers), wrong)


def _value(tokenizer, token_id: int) -> int:
    piece = tokenizer.token_of(int(token_id)).strip()
    return int(piece) if piece.isdigit() else 0
