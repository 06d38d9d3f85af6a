"""REPL traces: permutation composition written as a Python interactive session.

A trace is real Python. Its ``>>> `` lines, fed to ``code.InteractiveConsole``, print exactly its
output lines (``replay_transcript`` does this and the tests hold every trace to it)::

    >>> a = 3                # init: one line per variable, values a permutation of 1..n
    >>> b = 1
    >>> c = 2
    >>> a, b = b, a          # action sigma_1 (see tasks.groups for how it acts on the state)
    >>> b, c = c, b          # action sigma_2
    >>> print('a', a)        # reveal "one": a random variable ...
    a 1                      # ... and its value, the token a model must predict
    >>> print(a, b, c)       # reveal "all": every value, in variable order
    1 2 3

Paper notation -> code
----------------------
* ``TraceSpec.group`` / ``action_set``: the group G and the statements Sigma (tasks.groups).
* ``TraceSpec.actions``: the number of actions m, fixed or drawn per trace from (lo, hi).
* Reveal schedule ("supervision density"): ``spacing`` k reveals after actions k, 2k, 3k, ...
  (floor(m / k) reveals); ``reveal_prob`` p reveals after each action with probability p;
  both None: no reveals at all (only the init lines show values).
* ``Trace.states[t]``: the state s_t after t actions (``states[0]`` is the initial state s_0).
* ``Trace.reveals``: each output line, the variables it shows and their values (the answers).

Randomness comes from one stream per seed, drawn in a fixed order (start, length, actions, then
reveals), so two specs that differ only in their reveal schedule, reveal target or identity_init
produce the same actions.
"""

from __future__ import annotations

import code
import contextlib
import io
import random
import re
import unicodedata
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Generic, Union

from typing_extensions import TypeVar  # a TypeVar with a default (PEP 696; typing's has one from 3.13)

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import (
    VARIABLE_NAMES,
    Permutation,
    apply_permutation,
    get_action_set,
    get_group,
    read_assignment,
)

ActionCount = Union[int, tuple[int, int]]

REVEAL_TARGETS = ("one", "all")
# what each line of a trace is (LineInfo.kind)
LINE_INIT, LINE_ACTION, LINE_PRINT, LINE_OUTPUT = "init", "action", "print", "output"
PROMPT = ">>> "


@dataclass(frozen=True)
class TraceSpec:
    """Everything that defines a family of traces; a seed then picks one trace from it.

    >>> spec = dl.TraceSpec(group="S3", action_set="swaps", actions=8, spacing=2)
    >>> spec.group, spec.actions
    ('S3', 8)
    """

    group: str = "S5"  # G: S<n>, A<n>, Z<n> or D<n>, n from 2 to 10
    action_set: str = "swaps"  # Sigma: swaps | cycles | full | generators
    actions: ActionCount = 24  # m, or an inclusive range (lo, hi) drawn uniformly per trace
    spacing: int | None = 4  # reveal after every k-th action ...
    reveal_prob: float | None = None  # ... or after each action with probability p (set spacing=None);
    # both None: never reveal
    reveal: str = "one"  # "one": print('a', a) for a random variable; "all": print(a, b, ...)
    identity_init: bool = False  # start from a = 1, b = 2, ...; otherwise a random permutation of 1..n

    def __post_init__(self) -> None:
        group = get_group(self.group)  # raises for unknown names and n out of range
        object.__setattr__(self, "group", group.name)  # canonical spelling: "s_5" -> "S5"
        get_action_set(group, self.action_set)  # raises when G has no such actions
        object.__setattr__(self, "actions", check_action_count(self.actions))
        if self.spacing is not None and self.reveal_prob is not None:
            raise DeltalensError(
                f"the trace spec sets both spacing={self.spacing} and reveal_prob={self.reveal_prob}; "
                "set spacing=None to reveal with a probability."
            )
        if self.spacing is not None and (_not_int(self.spacing) or self.spacing < 1):
            raise DeltalensError(f"reveal spacing must be a whole number of actions >= 1, got {self.spacing!r}.")
        if self.reveal_prob is not None:
            if (
                isinstance(self.reveal_prob, bool)
                or not isinstance(self.reveal_prob, (int, float))
                or not 0.0 < self.reveal_prob <= 1.0
            ):
                raise DeltalensError(f"reveal probability must be in (0, 1], got {self.reveal_prob!r}.")
            object.__setattr__(self, "reveal_prob", float(self.reveal_prob))
        if self.reveal not in REVEAL_TARGETS:
            raise DeltalensError(f"reveal target must be 'one' or 'all', got {self.reveal!r}.")
        if not isinstance(self.identity_init, bool):
            raise DeltalensError(f"identity_init must be True or False, got {self.identity_init!r}.")

    @property
    def n(self) -> int:
        return get_group(self.group).n

    @property
    def schedule(self) -> str:
        """ "every" (spacing k), "prob" (reveal_prob p) or "never"."""
        if self.spacing is not None:
            return "every"
        return "prob" if self.reveal_prob is not None else "never"

    @property
    def max_actions(self) -> int:
        return self.actions if isinstance(self.actions, int) else self.actions[1]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (tuples become lists); ``TraceSpec.from_dict`` reads it back."""
        return spec_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceSpec:
        return cls(**spec_fields(cls, data, "trace spec"))

    def describe(self) -> str:
        m = self.actions if isinstance(self.actions, int) else f"{self.actions[0]}-{self.actions[1]}"
        if self.schedule == "every":
            schedule = f"reveal every {self.spacing}"
        elif self.schedule == "prob":
            schedule = f"reveal with p={self.reveal_prob:g}"
        else:
            schedule = "no reveals"
        init = ", identity init" if self.identity_init else ""
        return f"{self.group} {self.action_set}, {m} actions, {schedule} ({self.reveal}){init}"


def spec_to_dict(spec) -> dict[str, Any]:
    """A spec dataclass as JSON-ready data: its fields, tuples as lists."""
    return {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(spec).items()}


def spec_fields(cls, data: dict[str, Any], what: str) -> dict[str, Any]:
    """``data`` checked against the fields of spec dataclass ``cls`` (one sentence for unknown ones)."""
    unknown = set(data) - set(cls.__dataclass_fields__)
    if unknown:
        raise DeltalensError(f"unknown {what} field(s): {', '.join(sorted(unknown))}.")
    return dict(data)


def _not_int(x: object) -> bool:
    return isinstance(x, bool) or not isinstance(x, int)


MAX_ACTIONS = 100_000  # per trace: a longer one takes minutes and gigabytes, and is a typo more often than not


def check_action_count(actions: object) -> ActionCount:
    if isinstance(actions, (list, tuple)) and len(actions) == 2 and not any(map(_not_int, actions)):
        lo, hi = actions
        if not 1 <= lo <= hi:
            raise DeltalensError(f"action range {lo}-{hi} must satisfy 1 <= lo <= hi.")
        if hi > MAX_ACTIONS:
            raise DeltalensError(f"at most {MAX_ACTIONS} actions per trace, got {hi}.")
        return (lo, hi)
    if _not_int(actions) or actions < 1:  # type: ignore[operator]
        raise DeltalensError(
            f"the number of actions must be a whole number >= 1 or a range like 16-32, got {str(actions)[:40]!r}."
        )
    if actions > MAX_ACTIONS:  # type: ignore[operator]
        raise DeltalensError(f"at most {MAX_ACTIONS} actions per trace, got {actions}.")
    return actions  # type: ignore[return-value]


def parse_action_count(text: str) -> ActionCount:
    """``"24"`` -> 24, ``"16-32"`` -> (16, 32) (for the CLI)."""
    parts = str(text).strip().split("-")
    try:  # ASCII digits only, and few of them: int() would accept "１２" and a 5,000-digit number
        values = [int(p) for p in parts if p.isascii() and p.strip().isdigit() and len(p.strip()) <= 9]
    except ValueError:
        values = []
    if len(values) != len(parts):
        values = []
    if len(values) == 1:
        return check_action_count(values[0])
    if len(values) == 2:
        return check_action_count(tuple(values))
    raise DeltalensError(f"--actions takes a number like 24 or a range like 16-32, got {text!r}.")


@dataclass(slots=True)  # not frozen: a trace makes one per line and frozen init is 4x slower
class LineInfo:
    """What one line of the transcript is."""

    kind: str  # LINE_INIT | LINE_ACTION | LINE_PRINT | LINE_OUTPUT
    actions_done: int  # actions completed once this line has been read (states[actions_done])
    action: int = -1  # for action lines: index into Trace.actions
    variables: tuple[int, ...] = ()  # init: the variable set; print/output: the variables shown


@dataclass(frozen=True)
class Reveal:
    """One output line: which variables it shows and their values (the answers)."""

    line: int  # index of the output line in Trace.lines
    after_action: int  # t: the reveal shows s_t
    variables: tuple[int, ...]  # variable indices, in the order printed
    values: tuple[int, ...]  # s_t[v] for each of them, 1..n


SpecT = TypeVar("SpecT", default="TraceSpec")  # Trace is Trace[TraceSpec]; a ProbTrace's spec is a ProbTraceSpec


@dataclass
class Trace(Generic[SpecT]):
    """One REPL transcript with its ground truth."""

    spec: SpecT
    seed: int
    lines: list[str]  # each ends with "\n"; "".join(lines) == text
    line_info: list[LineInfo]
    actions: list[Permutation]  # sigma_1 .. sigma_m
    states: list[tuple[int, ...]]  # s_0 .. s_m (values 1..n per variable)
    reveals: list[Reveal] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    @property
    def n(self) -> int:
        return len(self.states[0])

    @property
    def num_actions(self) -> int:
        return len(self.actions)

    @property
    def variable_names(self) -> str:
        return VARIABLE_NAMES[: self.n]


def generate_trace(spec: TraceSpec, seed: int) -> Trace:
    """The trace for ``seed`` (any int); the same (spec, seed) always gives the same trace.

    >>> trace = dl.generate_trace(dl.TraceSpec(group="S3", actions=4, spacing=2), seed=0)
    >>> "print(" in trace.text
    True
    """
    if _not_int(seed):
        raise DeltalensError(f"a trace seed must be an integer, got {seed!r}.")
    group = get_group(spec.group)
    action_set = get_action_set(group, spec.action_set)
    n = group.n
    # One stream, drawn in a fixed order: start, length, all actions, then the reveals. The
    # reveal draws come last, so the reveal schedule never changes the actions. A str seed goes
    # through sha512: stable across runs, platforms and PYTHONHASHSEED.
    rng = random.Random(f"deltalens:{seed}")
    values = list(range(1, n + 1))
    rng.shuffle(values)  # drawn even for identity_init, which then ignores it
    state = tuple(range(1, n + 1)) if spec.identity_init else tuple(values)
    m = spec.actions if isinstance(spec.actions, int) else rng.randint(*spec.actions)
    actions = [action_set.sample(rng) for _ in range(m)]

    spacing, prob = spec.spacing, spec.reveal_prob  # spec.schedule: "every", "prob" or "never", in this order
    if spacing is not None:
        reveal_after = [t % spacing == 0 for t in range(1, m + 1)]
    elif prob is not None:
        reveal_after = [rng.random() < prob for _ in range(m)]
    else:
        reveal_after = [False] * m

    lines: list[str] = []
    info: list[LineInfo] = []
    for i, value in enumerate(state):
        lines.append(f"{PROMPT}{VARIABLE_NAMES[i]} = {value}\n")
        info.append(LineInfo(LINE_INIT, 0, variables=(i,)))
    print_all = f"{PROMPT}print({', '.join(VARIABLE_NAMES[:n])})\n"
    everyone = tuple(range(n))
    states = [state]
    reveals: list[Reveal] = []
    for t, p in enumerate(actions, start=1):
        state = apply_permutation(state, p)
        states.append(state)
        lines.append(action_set.line(p))
        info.append(LineInfo(LINE_ACTION, t, action=t - 1))
        if not reveal_after[t - 1]:
            continue
        if spec.reveal == "one":
            v = rng.randrange(n)
            name = VARIABLE_NAMES[v]
            shown: tuple[int, ...] = (v,)
            lines.append(f"{PROMPT}print('{name}', {name})\n")
            lines.append(f"{name} {state[v]}\n")
        else:
            shown = everyone
            lines.append(print_all)
            lines.append(" ".join(map(str, state)) + "\n")
        info.append(LineInfo(LINE_PRINT, t, variables=shown))
        info.append(LineInfo(LINE_OUTPUT, t, variables=shown))
        reveals.append(Reveal(len(lines) - 1, t, shown, tuple(state[v] for v in shown)))

    return Trace(spec, seed, lines, info, actions, states, reveals)


_INIT_LINE = re.compile(r">>> ([a-j]) = ([0-9]+)\n")  # ASCII digits only, as Python literals
_PRINT_ONE = re.compile(r">>> print\('([a-j])', \1\)\n")
_PRINT_ALL = re.compile(r">>> print\(([a-j](?:, [a-j])*)\)\n")


_NON_ASCII = re.compile(r"[^\x00-\x7f]")
MAX_LINE = 1_000  # characters in one REPL line: any statement we write is far shorter
MAX_TRACE_CHARS = 5_000_000  # one transcript (100,000 actions of the longest statements fit)


def check_text_size(text: str) -> None:
    """Refuse a transcript too long to be a trace, or with a line too long to be a statement (this
    also keeps every parser's regular expressions and number conversions fast)."""
    if len(text) > MAX_TRACE_CHARS:
        raise DeltalensError(f"the trace has {len(text):,} characters; a trace is at most {MAX_TRACE_CHARS:,}.")
    for found in _NON_ASCII.finditer(text):  # a digit Python would not read as one: said with its line
        char = found.group()
        if char.isdigit() or char.isnumeric():
            lineno = text.count("\n", 0, found.start()) + 1
            name = unicodedata.name(char, f"U+{ord(char):04X}")
            raise DeltalensError(
                f"line {lineno}: {char!r} ({name}) is not an ASCII digit; values in a trace are written 0-9"
            )
    for lineno, line in enumerate(text.split("\n"), start=1):
        if len(line) > MAX_LINE:
            raise DeltalensError(
                f"line {lineno} has {len(line):,} characters; a line of a trace is at most "
                f"{MAX_LINE:,} (is it a trace?)."
            )


def _read_action(line: str, n: int, lineno: int) -> Permutation:
    """The permutation of an action line, or one true sentence: Python's own word for a line that is not
    Python, the two print forms for a print that is neither, else what an action looks like."""
    body = line[len(PROMPT) :].rstrip("\n")
    try:
        return read_assignment(body, n)
    except DeltalensError as err:
        try:
            compile(body, "<line>", "exec")
        except IndentationError:
            raise DeltalensError(
                f"line {lineno}: {body!r} is indented; a statement starts right after '>>> '"
            ) from None
        except SyntaxError as bad:
            raise DeltalensError(f"line {lineno}: {body!r} is not valid Python ({bad.msg})") from None
        except ValueError:  # a NUL character: not Python either
            raise DeltalensError(f"line {lineno}: {body!r} is not valid Python") from None
        if re.match(r"print\s*\(", body):
            raise DeltalensError(
                f"line {lineno}: {body!r} is not a print a trace holds; write print('a', a) for one variable or "
                f"print(a, b, c) for several"
            ) from None
        if "=" not in body:
            raise DeltalensError(
                f"line {lineno}: {body!r} is neither an action like 'a, b = b, a' nor a print like print('a', a)"
            ) from None
        raise DeltalensError(f"line {lineno}: {err}") from None


def _read_print(line: str, n: int, lineno: int) -> tuple[tuple[int, ...], bool] | None:
    """(variables shown, whether it is the one-variable form) of a print line; None for any other line."""
    one, every = _PRINT_ONE.fullmatch(line), _PRINT_ALL.fullmatch(line)
    if one:
        shown: tuple[int, ...] = (VARIABLE_NAMES.index(one.group(1)),)
    elif every:
        shown = tuple(VARIABLE_NAMES.index(x) for x in every.group(1).split(", "))
    else:
        return None
    if max(shown) >= n:
        raise DeltalensError(f"line {lineno}: prints a variable the trace never initialised.")
    return shown, one is not None


def replay_statements(
    lines: list[str],
    index: int,
    n: int,
    state: tuple[int, ...],
    info: list[LineInfo],
    on_print: Callable[[int, tuple[int, ...], bool, tuple[int, ...], int], int],
    on_action: Callable[[str], None] | None = None,
) -> tuple[list[Permutation], list[tuple[int, ...]]]:
    """Replay a transcript's statements from line `index` (after its n init lines) on `state`: each action
    permutes it, its LineInfo appended to `info` and its line handed to on_action; each print goes to
    on_print(index, shown, one, state, t) -> how many lines it takes (its output line, if any: the caller
    judges it). An output line with no print before it is refused. Returns (actions, states from the start)."""
    actions: list[Permutation] = []
    states = [state]
    while index < len(lines):
        line, lineno = lines[index], index + 1
        if not line.startswith(PROMPT):
            raise DeltalensError(f"line {lineno}: {line.rstrip()!r} is an output line with no print before it.")
        printed = _read_print(line, n, lineno)
        if printed is not None:
            index += on_print(index, *printed, state, len(actions))
            continue
        p = _read_action(line, n, lineno)
        actions.append(p)
        state = apply_permutation(state, p)
        states.append(state)
        info.append(LineInfo(LINE_ACTION, len(actions), action=len(actions) - 1))
        if on_action is not None:
            on_action(line)
        index += 1
    return actions, states


def parse_trace(text: str, group: str | None = None, action_set: str = "full") -> Trace:
    """Rebuild a Trace, ground truth included, from a deterministic REPL transcript.

    This is how traces written elsewhere are scored: the statements are replayed to get the
    states, and each output line must agree with the replayed state (a disagreeing trace is
    refused, naming the line). ``group`` defaults to S_n for the n variables initialised.
    """
    check_text_size(text)
    lines = text.splitlines(keepends=True)
    if not lines or not text.endswith("\n"):
        raise DeltalensError("a trace must be non-empty REPL text ending with a newline.")
    values: list[int] = []
    while len(values) < len(lines) and (m := _INIT_LINE.fullmatch(lines[len(values)])):
        if m.group(1) != VARIABLE_NAMES[len(values)]:
            raise DeltalensError(f"line {len(values) + 1}: variables must be initialised in order a, b, c, ...")
        values.append(int(m.group(2)))
    n = len(values)
    if sorted(values) != list(range(1, n + 1)) or n < 2:
        raise DeltalensError(f"the trace's init lines must give its variables the values 1..n, got {values}.")
    spec = TraceSpec(group=group or f"S{n}", action_set=action_set, actions=1, spacing=None)
    info = [LineInfo(LINE_INIT, 0, variables=(i,)) for i in range(n)]
    reveals: list[Reveal] = []

    def on_print(index: int, shown: tuple[int, ...], one: bool, state: tuple[int, ...], t: int) -> int:
        expected = (
            f"{VARIABLE_NAMES[shown[0]]} {state[shown[0]]}\n" if one else " ".join(str(state[v]) for v in shown) + "\n"
        )
        if index + 1 >= len(lines) or lines[index + 1] != expected:
            got = lines[index + 1].rstrip() if index + 1 < len(lines) else "nothing"
            raise DeltalensError(
                f"line {index + 2}: the print shows {got!r} but replaying the statements gives {expected.rstrip()!r}."
            )
        info.extend([LineInfo(LINE_PRINT, t, variables=shown), LineInfo(LINE_OUTPUT, t, variables=shown)])
        reveals.append(Reveal(index + 1, t, shown, tuple(state[v] for v in shown)))
        return 2

    actions, states = replay_statements(lines, n, n, tuple(values), info, on_print)
    spec = replace(spec, actions=max(1, len(actions)))
    return Trace(spec, seed=-1, lines=lines, line_info=info, actions=actions, states=states, reveals=reveals)


class _CapturingConsole(code.InteractiveConsole):
    """InteractiveConsole whose error reports land in the transcript instead of stderr."""

    def __init__(self, sink: io.StringIO):
        super().__init__(locals={})
        self._sink = sink

    def write(self, data: str) -> None:
        self._sink.write(data)


def replay_transcript(text: str) -> str:
    """Run the ``>>> `` lines of ``text`` in a fresh Python REPL and return the session it prints.

    Output lines of ``text`` are ignored and regenerated by Python itself, so for a correct
    trace ``replay_transcript(trace.text) == trace.text``.
    """
    sink = io.StringIO()
    console = _CapturingConsole(sink)
    with contextlib.redirect_stdout(sink):
        for line in text.splitlines():
            if line.startswith(PROMPT):
                sink.write(line + "\n")
                console.push(line[len(PROMPT) :])
        console.push("")  # close any block left open
    return sink.getvalue()
