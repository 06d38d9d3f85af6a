"""Text-level traces for any tokenizer: a trace written as text, every character labelled, then the
labels carried onto whatever tokens a tokenizer cut the text into (from its character offsets).

    fmt = TextFormat(names=("x", "y", "z"), values=("red", "green", "blue"), examples=2)
    text = render(trace, fmt)            # RenderedTrace: the text and a label per character
    aligned = align(text, ids, offsets)   # AlignedTrace: an EncodedTrace (labels per token) + reveal groups

Our own tokenizers cut a trace where its statements end; a BPE or SentencePiece tokenizer cuts it
anywhere (" 3\\n" may be one token, "\\n>>>" another). So the labels are made per character first,
exactly as tasks/tokenizers/base.py defines them per token, and a token takes them from its
characters:

* kind, step t (actions complete), action index: those of the token's last character, so a token
  holding an action line's newline carries s_t, as the last token of an action line does in ours;
* reveal: a token holding any character of a revealed value is a reveal token, its answer that
  value (1..n) and its variable the one printed. A value cut into several tokens gives several
  reveal tokens with the same reveal index (`AlignedTrace.reveal_index`): each is predicted from
  the one before it, and the reveal is right when all of them are.

Prompt options: `names` and `values` replace the variable names a, b, c, ... and the values
1..n (a value that is not a number is written as a string literal on init lines, as Python
would want it, and bare on output lines, as print shows it); `examples` puts that many solved
traces (other seeds of the same spec, every value shown) before the query, separated by a blank
line. Tokens of the examples are labelled OTHER at step 0 and are never scored.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import VARIABLE_NAMES, lex_rank
from deltalens.tasks.tokenizers.base import EncodedTrace, TokenKind
from deltalens.tasks.traces import LINE_ACTION, LINE_INIT, LINE_OUTPUT, LINE_PRINT, PROMPT, Trace, generate_trace

# named alphabets for the prompt options (CLI --names / --values); any list of strings works too
ALPHABETS: dict[str, tuple[str, ...]] = {
    "letters": tuple(VARIABLE_NAMES),
    "digits": tuple(str(v) for v in range(1, 11)),
    "words": ("apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "candle", "forest", "rocket"),
    "colors": ("red", "green", "blue", "yellow", "purple", "orange", "black", "white", "pink", "brown"),
    "long_names": ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"),
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VALUE = re.compile(r"[^\s'\"\\]+")
_VARIABLE = re.compile(r"\b([a-j])\b")


@dataclass(frozen=True)
class TextFormat:
    """How a trace is written for a pretrained LM (defaults: exactly the generator's text)."""

    names: tuple[str, ...] | None = None  # variable names, one per variable (None: a, b, c, ...)
    values: tuple[str, ...] | None = None  # the words for values 1..n (None: the numbers)
    examples: int = 0  # solved example traces before the query

    def __post_init__(self) -> None:
        for what, given, pattern in (("names", self.names, _NAME), ("values", self.values, _VALUE)):
            if given is None:
                continue
            given = ALPHABETS[given] if isinstance(given, str) and given in ALPHABETS else given
            if isinstance(given, str):
                given = tuple(part.strip() for part in given.split(","))
            given = tuple(given)
            bad = [g for g in given if not isinstance(g, str) or not pattern.fullmatch(g)]
            if bad or len(set(given)) != len(given) or len(given) < 2:
                raise DeltalensError(
                    f"{what} must be at least two distinct {'Python identifiers' if what == 'names' else 'words'} "
                    f"(or one of {', '.join(ALPHABETS)}), got {bad[0] if bad else given!r}"
                )
            object.__setattr__(self, what, given)
        if isinstance(self.examples, bool) or not isinstance(self.examples, int) or not 0 <= self.examples <= 64:
            raise DeltalensError(f"examples must be a whole number from 0 to 64, got {self.examples!r}")

    def capacity(self) -> int:
        """The most variables this format can write."""
        return min(len(self.names or VARIABLE_NAMES), len(self.values or ALPHABETS["digits"]))

    def check(self, n: int) -> None:
        if n > self.capacity():
            raise DeltalensError(
                f"the traces have {n} variables but the text format names only {self.capacity()} "
                f"(names {len(self.names or VARIABLE_NAMES)}, values {len(self.values or ALPHABETS['digits'])})"
            )

    def name(self, v: int) -> str:
        return (self.names or VARIABLE_NAMES)[v]

    def value(self, x: int) -> str:
        return str(x) if self.values is None else self.values[x - 1]

    def literal(self, x: int) -> str:
        return str(x) if self.values is None else repr(self.values[x - 1])

    @property
    def plain(self) -> bool:
        return self.names is None and self.values is None and self.examples == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "names": None if self.names is None else list(self.names),
            "values": None if self.values is None else list(self.values),
            "examples": self.examples,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> TextFormat:
        data = dict(data or {})
        unknown = set(data) - {"names", "values", "examples"}
        if unknown:
            raise DeltalensError(f"unknown text format field(s): {', '.join(sorted(unknown))}")
        return cls(**data)


@dataclass
class RenderedTrace:
    """A trace's text with one label per character (arrays of len(text))."""

    text: str
    kinds: np.ndarray  # TokenKind of the character's line (REVEAL on a revealed value's characters)
    steps: np.ndarray  # actions complete once this character is read
    actions: np.ndarray  # action index on action-line characters, -1 elsewhere
    answers: np.ndarray  # the revealed value 1..n on its characters, 0 elsewhere
    variables: np.ndarray  # the variable a revealed value shows, -1 elsewhere
    reveal_index: np.ndarray  # which value shown by the query (0, 1, ...) a character belongs to, -1 elsewhere
    trace: Trace


class _Writer:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.labels: list[tuple[int, int, int, int, int, int, int]] = []  # (length, kind, step, action, ans, var, r)

    def put(self, text: str, kind: int, step: int, action: int = -1, answer: int = 0, var: int = -1, r: int = -1):
        if text:
            self.parts.append(text)
            self.labels.append((len(text), kind, step, action, answer, var, r))


def example_seeds(trace: Trace, k: int) -> list[int]:
    """Seeds of the k example traces put before `trace` (a hash of its seed: never the query's own)."""
    out = []
    for i in range(k):
        digest = hashlib.blake2b(f"deltalens:example:{trace.seed}:{i}".encode(), digest_size=8).digest()
        out.append(int.from_bytes(digest, "little") >> 2)
    return out


def render(trace: Trace, fmt: TextFormat | None = None) -> RenderedTrace:
    """The text of `trace` (after fmt.examples solved examples) and its per-character labels."""
    fmt = fmt or TextFormat()
    fmt.check(trace.n)
    writer = _Writer()
    for seed in example_seeds(trace, fmt.examples):
        example = generate_trace(trace.spec, seed)
        _write(writer, example, fmt, query=False)
        writer.put("\n", TokenKind.OTHER, 0)
    _write(writer, trace, fmt, query=True)
    lengths = np.array([label[0] for label in writer.labels], dtype=np.int64)
    columns = np.array([label[1:] for label in writer.labels], dtype=np.int64).reshape(-1, 6)
    per_char = [np.repeat(columns[:, j], lengths) for j in range(6)]
    return RenderedTrace("".join(writer.parts), *per_char, trace=trace)  # type: ignore[misc, arg-type]  # 6 arrays


def _rename(statement: str, fmt: TextFormat) -> str:
    return statement if fmt.names is None else _VARIABLE.sub(lambda m: fmt.name(VARIABLE_NAMES.index(m[1])), statement)


def _write(writer: _Writer, trace: Trace, fmt: TextFormat, query: bool) -> None:
    """One trace's lines; only the query's are labelled (an example is context: OTHER, step 0)."""
    reveals, first = {}, 0  # output line -> (index of its first value among all values shown, reveal)
    for reveal in trace.reveals:
        reveals[reveal.line] = (first, reveal)
        first += len(reveal.values)
    for index, (line, info) in enumerate(zip(trace.lines, trace.line_info)):
        t = info.actions_done
        if not query:
            writer.put(_line_text(line, info, trace, fmt, reveals.get(index)), TokenKind.OTHER, 0)
            continue
        if info.kind == LINE_INIT:
            writer.put(_line_text(line, info, trace, fmt), TokenKind.INIT, t)
        elif info.kind == LINE_PRINT:
            writer.put(_line_text(line, info, trace, fmt), TokenKind.PRINT, t)
        elif info.kind == LINE_ACTION:
            body = _line_text(line, info, trace, fmt)
            writer.put(body[:-1], TokenKind.ACTION, t - 1, info.action)  # the newline completes the action
            writer.put(body[-1:], TokenKind.ACTION, t, info.action)
        elif info.kind == LINE_OUTPUT:
            r, reveal = reveals[index]
            if len(reveal.variables) == 1:
                writer.put(fmt.name(reveal.variables[0]) + " ", TokenKind.OTHER, t)
            for k, (v, x) in enumerate(zip(reveal.variables, reveal.values)):
                if k:
                    writer.put(" ", TokenKind.OTHER, t)
                writer.put(fmt.value(x), TokenKind.REVEAL, t, -1, x, v, r + k)
            writer.put("\n", TokenKind.OTHER, t)
        else:  # pragma: no cover - the generator writes only these four kinds
            raise DeltalensError(f"line {index + 1} of the trace is of unknown kind {info.kind!r}")


def _line_text(line: str, info, trace: Trace, fmt: TextFormat, reveal=None) -> str:
    if fmt.names is None and fmt.values is None:
        return line
    if info.kind == LINE_INIT:
        v = info.variables[0]
        return f"{PROMPT}{fmt.name(v)} = {fmt.literal(trace.states[0][v])}\n"
    if info.kind == LINE_PRINT:
        if len(info.variables) == 1:
            name = fmt.name(info.variables[0])
            return f"{PROMPT}print({name!r}, {name})\n"
        return f"{PROMPT}print({', '.join(fmt.name(v) for v in info.variables)})\n"
    if info.kind == LINE_OUTPUT:
        _, shown = reveal
        values = " ".join(fmt.value(x) for x in shown.values)
        return (f"{fmt.name(shown.variables[0])} " if len(shown.variables) == 1 else "") + values + "\n"
    return _rename(line, fmt)


@dataclass
class AlignedTrace(EncodedTrace):
    """An EncodedTrace made by `align`, with what ties its tokens back to the text."""

    reveal_index: list[int] = field(default_factory=list)  # value shown (reveal_context's row) a token holds, or -1
    value_tokens: list[list[int]] = field(default_factory=list)  # per value shown: the positions of its tokens
    offsets: list[tuple[int, int]] = field(default_factory=list)  # each token's characters in `text`
    text: str = ""


def align(rendered: RenderedTrace, ids: list[int], offsets: list[tuple[int, int]], bos_id: int | None = None):
    """Labels per token from the characters each token covers (see the module docstring).

    `ids`/`offsets`: the tokenizer's output for rendered.text (no special tokens); `bos_id`: put
    first, labelled OTHER at step 0."""
    if len(ids) != len(offsets):
        raise DeltalensError(f"the tokenizer gave {len(ids)} ids but {len(offsets)} offsets")
    trace = rendered.trace
    out = {key: [] for key in ("ids", "kinds", "action_pos", "perm_ids", "answers", "reveal_vars", "steps", "r")}
    spans: list[tuple[int, int]] = []

    def put(token_id, kind, action, answer, var, step, r, span):
        out["ids"].append(int(token_id))
        out["kinds"].append(int(kind))
        out["action_pos"].append(int(action))
        out["perm_ids"].append(lex_rank(trace.actions[action]) if action >= 0 else -1)
        out["answers"].append(int(answer))
        out["reveal_vars"].append(int(var))
        out["steps"].append(int(step))
        out["r"].append(int(r))
        spans.append(span)

    if bos_id is not None:
        put(bos_id, TokenKind.OTHER, -1, 0, -1, 0, -1, (0, 0))
    size = len(rendered.text)
    for token_id, (start, end) in zip(ids, offsets):
        start, end = max(0, min(int(start), size)), max(0, min(int(end), size))
        if end <= start:  # a token that covers no character (a special token, a bare prefix marker)
            last = start - 1
            step = int(rendered.steps[last]) if last >= 0 else 0
            put(token_id, TokenKind.OTHER, -1, 0, -1, step, -1, (start, start))
            continue
        last = end - 1
        shown = np.flatnonzero(rendered.answers[start:end])
        if shown.size:
            c = start + int(shown[0])
            put(
                token_id,
                TokenKind.REVEAL,
                -1,
                rendered.answers[c],
                rendered.variables[c],
                rendered.steps[last],
                rendered.reveal_index[c],
                (start, end),
            )
            continue
        kind = int(rendered.kinds[last])
        action = int(rendered.actions[last]) if kind == TokenKind.ACTION else -1
        put(token_id, kind, action, 0, -1, rendered.steps[last], -1, (start, end))
    # the tokens each value shown lies in (a token may hold several values: "2 3 1\n" of a print-all)
    value_tokens: list[list[int]] = [[] for _ in range(sum(len(r.values) for r in trace.reveals))]
    for position, (start, end) in enumerate(spans):
        for r in set(rendered.reveal_index[start:end].tolist()) - {-1}:
            value_tokens[r].append(position)
    missing = [r for r, where in enumerate(value_tokens) if not where]
    if missing:  # pragma: no cover - every value character lies in some token
        raise DeltalensError(f"the tokenizer's offsets cover no token of revealed value {missing[0]}")
    return AlignedTrace(
        ids=out["ids"],
        kinds=out["kinds"],
        action_pos=out["action_pos"],
        perm_ids=out["perm_ids"],
        is_reveal=[a > 0 for a in out["answers"]],
        answers=out["answers"],
        reveal_vars=out["reveal_vars"],
        state_steps=out["steps"],
        trace_states=trace.states,
        trace_seed=trace.seed,
        reveal_index=out["r"],
        value_tokens=value_tokens,
        offsets=spans,
        text=rendered.text,
    )


def reveal_context(trace: Trace) -> list[dict[str, int]]:
    """For each reveal of `trace` (one entry per value shown, in order): actions since that variable's
    value was last shown (by its init line or an earlier reveal) and the value it showed then."""
    last_seen = {v: (0, x) for v, x in enumerate(trace.states[0])}
    rows = []
    for reveal in trace.reveals:
        for v, x in zip(reveal.variables, reveal.values):
            step, value = last_seen[v]
            rows.append({"since": reveal.after_action - step, "last_value": value, "value": x, "variable": v})
        for v, x in zip(reveal.variables, reveal.values):
            last_seen[v] = (reveal.after_action, x)
    return rows
