"""Transcripts that ask: prints with no output line (a question for the model) or a wrong value.

trace, queries = read_query_trace(text, group="S3")
[q.given for q in queries]   # None where the transcript asks, the printed values elsewhere
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import VARIABLE_NAMES
from deltalens.tasks.traces import (
    _INIT_LINE,
    LINE_OUTPUT,
    LINE_PRINT,
    PROMPT,
    LineInfo,
    Reveal,
    Trace,
    check_text_size,
    parse_trace,
    replay_statements,
)


@dataclass(frozen=True)
class Query:
    """One print of a transcript read by ``read_query_trace``: what the transcript shows after it
    next to what replaying the statements gives."""

    line: int  # index of the print's output line in the returned Trace.lines
    variables: tuple[int, ...]  # the variables printed, in order
    given: tuple[int, ...] | None  # the values the transcript prints; None: no output line (a question)
    values: tuple[int, ...]  # s_t[v] for each printed variable (the replayed truth)

    @property
    def wrong(self) -> bool:  # printed, but not the replayed values (``given is None``: a question)
        return self.given is not None and self.given != self.values


_OUTPUT_ONE = re.compile(r"([a-j]) ([0-9]{1,2})\n")
_OUTPUT_ALL = re.compile(r"[0-9]{1,2}(?: [0-9]{1,2})*\n")


def _given_values(line: str, shown: tuple[int, ...], one: bool, n: int, lineno: int) -> tuple[int, ...]:
    """The values an output line prints after a print of `shown` (it must have the print's format)."""
    name = VARIABLE_NAMES[shown[0]]
    found = _OUTPUT_ONE.fullmatch(line) if one else _OUTPUT_ALL.fullmatch(line)
    values: tuple[int, ...] | None = (int(found.group(2)),) if one and found and found.group(1) == name else None
    if not one and found:
        values = tuple(int(x) for x in line.split())
    if values is None or len(values) != len(shown):
        form = f"{name} <value>" if one else " ".join("<value>" for _ in shown)
        raise DeltalensError(f"line {lineno}: {line.rstrip()!r} is not what that print shows (expected {form!r}).")
    if not all(1 <= v <= n for v in values):
        raise DeltalensError(f"line {lineno}: prints {' '.join(map(str, values))}, but the values are 1..{n}.")
    return values


def read_query_trace(text: str, group: str | None = None, action_set: str = "full") -> tuple[Trace, list[Query]]:
    """Read a transcript whose prints may lack their output line or show a wrong value.

    ``parse_trace`` refuses both; this is how a user asks a model a question (a print with nothing
    after it) or shows it a wrong answer. The Trace has an output line after every print: the
    transcript's own (a wrong value stays as written), else the replayed values, which a caller
    asking the model replaces by its answer. Its Reveals and each Query's ``values`` hold the
    replayed truth; init lines, statements and the output format are checked as ``parse_trace`` does.
    """
    check_text_size(text)
    lines = (text if text.endswith("\n") or not text.strip() else text + "\n").splitlines(keepends=True)
    n_init = 0
    while n_init < len(lines) and _INIT_LINE.fullmatch(lines[n_init]):
        n_init += 1
    start = parse_trace("".join(lines[: max(n_init, 1)]) if text.strip() else text, group, action_set)  # inits
    n = start.n
    out, info = lines[:n_init], list(start.line_info)
    reveals: list[Reveal] = []
    queries: list[Query] = []

    def on_print(index: int, shown: tuple[int, ...], one: bool, state: tuple[int, ...], t: int) -> int:
        truth = tuple(state[v] for v in shown)
        answered = index + 1 < len(lines) and not lines[index + 1].startswith(PROMPT)
        given = _given_values(lines[index + 1], shown, bool(one), n, index + 2) if answered else None
        replayed = (f"{VARIABLE_NAMES[shown[0]]} " if one else "") + " ".join(map(str, truth)) + "\n"
        out.extend([lines[index], lines[index + 1] if answered else replayed])
        info.extend([LineInfo(LINE_PRINT, t, variables=shown), LineInfo(LINE_OUTPUT, t, variables=shown)])
        reveals.append(Reveal(len(out) - 1, t, shown, truth))
        queries.append(Query(len(out) - 1, shown, given, truth))
        return 2 if answered else 1

    actions, states = replay_statements(lines, n_init, n, start.states[0], info, on_print, out.append)
    spec = replace(start.spec, actions=max(1, len(actions)))
    trace = Trace(spec, seed=-1, lines=out, line_info=info, actions=actions, states=states, reveals=reveals)
    return trace, queries
