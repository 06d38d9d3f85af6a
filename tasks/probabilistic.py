"""Probabilistic REPL traces: statements whose outcome is hidden, still real Python.

A probabilistic trace seeds Python's own ``random`` module on its first line, so the transcript
replays in ``code.InteractiveConsole`` to exactly its output lines, hidden outcomes included::

    >>> import random; random.seed(4821)        # header: the seed is part of the trace
    >>> a = 3                                   # init, as in deterministic traces
    >>> b = 1
    >>> c = 2
    >>> a, b = (b, a) if random.random() < 0.3 else (a, b)     # swap with probability p
    >>> b, c = c, b                                            # a deterministic action
    >>> a, b, c = random.choice([(a, b, c), (b, c, a), (c, a, b)])  # uniform over rotations
    >>> print('a', a)                           # partial reveal
    a 2
    >>> print(a, b, c)                          # full reveal: pins the state
    2 3 1

The generator resolves each hidden outcome with ``random.Random(seed)``, calling ``random()`` for
a conditional swap and ``choice`` for a choice in the order the statements appear, which is
what the transcript's own calls do; ``replay_transcript(trace.text) == trace.text`` holds for
every trace (tests/test_probabilistic_traces.py checks hundreds). Reveals call no randomness.

Paper notation -> code
----------------------
* ``ProbTraceSpec``: the family of traces. Knobs: ``swap_prob`` p; ``mix``, the weights of
  deterministic / probabilistic-swap / random-choice actions; ``choice_size``, how many
  variables a choice rotates; the reveal schedule (``spacing`` or ``reveal_prob``) and
  ``full_reveal_prob``, the chance that a reveal prints every variable (a full reset) rather
  than one.
* ``ProbTrace`` (a ``tasks.traces.Trace``): ``actions`` / ``states`` are the realised
  permutations and states s_t (hidden outcomes included: ground truth a model cannot infer),
  ``kernels`` the inputs sigma_t with their kernels delta (``tasks.pfsa.Action``),
  ``events`` the PFSA-SR input sequence, and ``posteriors`` the exact posterior predictive of
  every printed value (``tasks.pfsa.RevealPosterior``, joint filter b_t).
* ``parse_prob_trace(text)``: what an observer knows from a transcript (q0, the statements, the
  printed values); it does not use the seed, since simulating the Mersenne Twister is not state
  tracking. Traces without a seed (``>>> import random``) parse too; they do not replay.
* Their tokenizers (``code-prob``, ``statement-prob``) live in ``tasks.tokenizers``.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import (
    VARIABLE_NAMES,
    ActionSet,
    Permutation,
    apply_permutation,
    get_action_set,
    get_group,
    identity,
    read_assignment,
    transposition,
)
from deltalens.tasks.hidden_block import generate_hidden_block_trace
from deltalens.tasks.pfsa import MAX_JOINT_N, PFSA, Action, Event, Observation, joint_filter
from deltalens.tasks.prob_spec import (
    ACTION_KINDS,
    ProbTrace,
    ProbTraceSpec,
    _names,
    choice_statement,
    group_posteriors,
    header_line,
    rotation,
    swap_statement,
)
from deltalens.tasks.traces import (
    LINE_ACTION,
    LINE_INIT,
    LINE_OUTPUT,
    LINE_PRINT,
    PROMPT,
    LineInfo,
    Reveal,
    check_text_size,
)

# ProbTrace, ProbTraceSpec and the statements live in tasks/prob_spec.py (the hidden-block generator
# shares them); they are imported here too, where every caller has always found them.
__all__ = [
    "ProbProgram",
    "ProbTrace",
    "ProbTraceSpec",
    "choice_statement",
    "generate_prob_trace",
    "group_posteriors",
    "header_line",
    "parse_prob_trace",
    "reveal_token_posteriors",
    "rotation",
    "spec_actions",
    "swap_statement",
]


def generate_prob_trace(spec: ProbTraceSpec, seed: int, posteriors: bool = True) -> ProbTrace:
    """The probabilistic trace for ``seed``; the same (spec, seed) always gives the same trace.
    ``posteriors=False`` skips the exact filter (half the cost; training samples need no posterior).

    >>> trace = dl.generate_prob_trace(dl.ProbTraceSpec(group="S3", actions=6), seed=0)
    >>> "random" in trace.text
    True
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise DeltalensError(f"a trace seed must be an integer, got {seed!r}.")
    if spec.hidden_block:
        return generate_hidden_block_trace(spec, seed, posteriors)
    group = get_group(spec.group)
    n = group.n
    # Two streams: `rng` writes the statements (what an observer sees), `hidden` is the trace's
    # own random.seed(s) stream and decides every outcome exactly as the REPL will.
    rng = random.Random(f"deltalens-prob:{seed}")
    python_seed = rng.randrange(spec.seed_range)
    hidden = random.Random(python_seed)
    values = list(range(1, n + 1))
    rng.shuffle(values)
    state = tuple(range(1, n + 1)) if spec.identity_init else tuple(values)
    m = spec.actions if isinstance(spec.actions, int) else rng.randint(*spec.actions)
    det_set = get_action_set(group, spec.action_set) if spec.mix[0] > 0 else None
    total = sum(spec.mix)
    cumulative = [sum(spec.mix[: k + 1]) / total for k in range(3)]

    lines = [header_line(python_seed)]
    info = [LineInfo(LINE_INIT, 0)]
    for i, value in enumerate(state):
        lines.append(f"{PROMPT}{VARIABLE_NAMES[i]} = {value}\n")
        info.append(LineInfo(LINE_INIT, 0, variables=(i,)))
    states, actions, kinds, kernels = [state], [], [], []
    reveals: list[Reveal] = []
    for t in range(1, m + 1):
        u = rng.random()
        kind = next(ACTION_KINDS[k] for k in range(3) if u < cumulative[k] or k == 2)
        line, kernel, realised = _draw_action(kind, spec, n, det_set, rng, hidden)
        state = apply_permutation(state, realised)
        states.append(state)
        actions.append(realised)
        kinds.append(kind)
        kernels.append(Action(kernel.perms, kernel.probs, line=len(lines) + 1))
        lines.append(line)
        info.append(LineInfo(LINE_ACTION, t, action=t - 1))
        if _reveals_after(t, spec, rng):
            reveals.append(_write_reveal(t, state, spec, rng, lines, info))

    trace = ProbTrace(
        spec,
        seed,
        lines,
        info,
        actions,
        states,
        reveals,
        python_seed=python_seed,
        kinds=kinds,
        kernels=kernels,
    )
    if posteriors:
        trace.posteriors = group_posteriors(joint_filter(trace.pfsa(), trace.events).reveals, reveals)
    return trace


def _draw_action(
    kind: str, spec: ProbTraceSpec, n: int, det_set: ActionSet | None, rng: random.Random, hidden: random.Random
) -> tuple[str, Action, Permutation]:
    """(the statement's REPL line, its kernel delta, the permutation it realises) for one action of
    `kind`: `rng` writes the statement, `hidden` draws the outcome as the transcript's own call will."""
    if kind == "det":
        if det_set is None:  # the caller builds it whenever mix weights deterministic actions
            raise DeltalensError(f"a deterministic action of {spec.group} needs the spec's action set; none was given")
        p = det_set.sample(rng)
        return det_set.line(p), Action.deterministic(p), p
    if kind == "swap":
        i, j = sorted(rng.sample(range(n), 2))
        line = f"{PROMPT}{swap_statement(i, j, spec.swap_prob)}\n"
        realised = transposition(n, i, j) if hidden.random() < spec.swap_prob else identity(n)
        return line, Action.swap(n, i, j, spec.swap_prob), realised
    chosen = tuple(sorted(rng.sample(range(n), spec.choice_size)))
    options = [rotation(n, chosen, s) for s in range(spec.choice_size)]
    line = f"{PROMPT}{choice_statement(chosen)}\n"
    realised = hidden.choice(options)  # same draw as random.choice on a list of that length
    return line, Action.choice(options), realised


def _reveals_after(t: int, spec: ProbTraceSpec, rng: random.Random) -> bool:
    """Whether a reveal follows action t: every `spacing`-th action, or with `reveal_prob`."""
    if spec.spacing is not None:
        return t % spec.spacing == 0
    return spec.reveal_prob is not None and rng.random() < spec.reveal_prob


def _write_reveal(
    t: int, state: tuple[int, ...], spec: ProbTraceSpec, rng: random.Random, lines: list[str], info: list[LineInfo]
) -> Reveal:
    """Append a print and its output line after action t: every variable with probability
    `full_reveal_prob` (a full reset), else one random variable. Returns the reveal."""
    n = len(state)
    if rng.random() < spec.full_reveal_prob:
        shown: tuple[int, ...] = tuple(range(n))
        lines.append(f"{PROMPT}print({_names(shown)})\n")
        lines.append(" ".join(map(str, state)) + "\n")
    else:
        v = rng.randrange(n)
        shown = (v,)
        lines.append(f"{PROMPT}print('{VARIABLE_NAMES[v]}', {VARIABLE_NAMES[v]})\n")
        lines.append(f"{VARIABLE_NAMES[v]} {state[v]}\n")
    info += [LineInfo(LINE_PRINT, t, variables=shown), LineInfo(LINE_OUTPUT, t, variables=shown)]
    return Reveal(len(lines) - 1, t, shown, tuple(state[v] for v in shown))


# --- parsing: what an observer knows -----------------------------------------------------------

_LIST = r"[a-j](?:, [a-j])*"
_HEADER = re.compile(r">>> import random(?:; random\.seed\(([0-9]+)\))?\n?")
_INIT = re.compile(r">>> ([a-j]) = ([0-9]+)\n?")  # ASCII digits only, as Python literals
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]-?[0-9]+)?"  # one way to match each number: no backtracking blow-up
_COND = re.compile(rf">>> ({_LIST}) = \(({_LIST})\) if random\.random\(\) < ({_NUMBER}) else \(({_LIST})\)\n?")
_CHOICE = re.compile(rf">>> ({_LIST}) = random\.choice\(\[(\({_LIST}\)(?:, \({_LIST}\))*)\]\)\n?")
_PRINT_ONE = re.compile(r">>> print\('([a-j])', \1\)\n?")
_PRINT_MANY = re.compile(rf">>> print\(({_LIST})\)\n?")


@dataclass
class ProbProgram:
    """A parsed probabilistic transcript: the PFSA-SR inputs an observer reads."""

    n: int
    q0: tuple[int, ...]
    python_seed: int | None  # None when the header has no seed (or there is no header)
    events: list[Event]  # Actions and Observations, each with its source line
    lines: list[str]

    def pfsa(self) -> PFSA:
        return PFSA(self.n, self.q0)


def _perm(lhs: str, rhs: str, n: int, lineno: int) -> Permutation:
    try:
        return read_assignment(f"{lhs} = {rhs}", n)
    except DeltalensError as err:
        raise DeltalensError(f"line {lineno}: {err}") from None


def parse_prob_trace(text: str) -> ProbProgram:
    """Read a probabilistic (or deterministic) transcript into PFSA-SR inputs.

    Accepts the syntax ``generate_prob_trace`` writes: an optional ``import random`` header
    (with or without ``random.seed(s)``), init lines, deterministic tuple assignments,
    conditional assignments ``L = (R1) if random.random() < p else (R2)``, choices
    ``L = random.choice([(R1), (R2), ...])`` (any permutations of L, repeats allowed), and
    prints of one (``print('a', a)``) or several variables (``print(a, b, c)``) each followed
    by its output line. Anything else is refused with its line number.

    >>> text = dl.generate_prob_trace(dl.ProbTraceSpec(group="S3", actions=6), seed=0, posteriors=False).text
    >>> program = dl.parse_prob_trace(text)
    >>> program.n, len(program.events) > 0
    (3, True)
    """
    if not isinstance(text, str) or not text.strip():
        raise DeltalensError("the trace is empty; give the REPL transcript text (lines starting with '>>> ').")
    check_text_size(text)
    lines = text.splitlines(keepends=True)
    index, python_seed, imported = 0, None, False
    if m := _HEADER.fullmatch(lines[0]):
        imported, index = True, 1
        python_seed = int(m.group(1)) if m.group(1) is not None else None
    values: list[int] = []
    while index < len(lines) and (m := _INIT.fullmatch(lines[index])):
        if m.group(1) != VARIABLE_NAMES[len(values)]:
            raise DeltalensError(f"line {index + 1}: variables must be initialised in order a, b, c, ...")
        values.append(int(m.group(2)))
        index += 1
    n = len(values)
    if n < 2 or sorted(values) != list(range(1, n + 1)):
        where = ""
        if index < len(lines):  # the first line that is not an init line, and what in it is not
            shown = lines[index].rstrip("\n")
            where = f" Line {index + 1}, {shown!r}, is not one{_odd_character(shown)}."
        raise DeltalensError(
            f"the trace must start with init lines giving a, b, ... the values 1..n (n >= 2), got {values}.{where}"
        )
    if n > MAX_JOINT_N:
        raise DeltalensError(f"the trace has {n} variables; exact filtering supports up to {MAX_JOINT_N}.")
    events: list[Event] = []
    while index < len(lines):
        line, lineno = lines[index], index + 1
        shown = line.rstrip("\n")
        if not line.startswith(PROMPT):
            raise DeltalensError(f"line {lineno}: {shown!r} is an output line with no print before it.")
        if "random" in line and not imported:
            raise DeltalensError(f"line {lineno}: uses random, but the trace never runs 'import random'.")
        if _PRINT_ONE.fullmatch(line) or _PRINT_MANY.fullmatch(line):
            events.append(_observation(lines, index, n))
            index += 2
            continue
        if m := _COND.fullmatch(line):
            p = float(m.group(3))
            if not 0.0 <= p <= 1.0:
                raise DeltalensError(f"line {lineno}: the probability {m.group(3)} is not in [0, 1].")
            taken, other = _perm(m.group(1), m.group(2), n, lineno), _perm(m.group(1), m.group(4), n, lineno)
            events.append(Action((taken, other), (p, 1.0 - p), line=lineno))
        elif m := _CHOICE.fullmatch(line):
            options = re.findall(rf"\(({_LIST})\)", m.group(2))
            events.append(Action.choice([_perm(m.group(1), o, n, lineno) for o in options], line=lineno))
        else:
            events.append(Action.deterministic(_perm_or_refuse(shown, n, lineno), line=lineno))
        index += 1
    return ProbProgram(n, tuple(values), python_seed, events, lines)


def _observation(lines: list[str], index: int, n: int) -> Observation:
    """The print at lines[index] and its output line, as the values it reveals (refused with a line number)."""
    line, lineno = lines[index], index + 1
    one, many = _PRINT_ONE.fullmatch(line), _PRINT_MANY.fullmatch(line)
    printed = one or many
    assert printed is not None  # the caller found a print here
    names = printed.group(1)
    variables = tuple(VARIABLE_NAMES.index(x) for x in names.split(", "))
    if max(variables) >= n or len(set(variables)) != len(variables):
        raise DeltalensError(f"line {lineno}: prints a variable the trace never initialised, or one twice.")
    if index + 1 >= len(lines):
        raise DeltalensError(f"line {lineno}: the print has no output line after it.")
    out = lines[index + 1].rstrip("\n").split(" ")
    if one:
        if len(out) != 2 or out[0] != names:
            got = " ".join(out)
            raise DeltalensError(f"line {lineno + 1}: expected '{names} <value>' after the print, got {got!r}.")
        out = out[1:]
    if len(out) != len(variables) or not all(x.isascii() and x.isdigit() and 1 <= int(x) <= n for x in out):
        raise DeltalensError(
            f"line {lineno + 1}: expected {len(variables)} value(s) from 1 to {n}, got {' '.join(out)!r}."
        )
    return Observation(variables, tuple(int(x) for x in out), line=lineno + 1)


def _perm_or_refuse(shown: str, n: int, lineno: int) -> Permutation:
    try:
        return read_assignment(shown[len(PROMPT) :], n)
    except DeltalensError:
        raise DeltalensError(
            f"line {lineno}: {shown!r} is not a statement a probabilistic trace can hold (a tuple assignment, "
            f"a conditional swap on random.random(), a random.choice, or a print){_odd_character(shown)}."
        ) from None


def _odd_character(shown: str) -> str:
    """', character 'é' at column 7 is not ASCII ...' for the first character no trace line can hold, else ''."""
    for column, char in enumerate(shown, 1):
        if not (char.isascii() and char.isprintable()):
            return f"; its character {char!r} at column {column} is not ASCII (variables are named a, b, c, ...)"
    return ""


# --- labels per token --------------------------------------------------------------------------


def reveal_token_posteriors(trace: ProbTrace, encoded: Any) -> np.ndarray:
    """(T, n) exact predictive at every revealed-value token of ``encoded``; NaN elsewhere.

    ``encoded`` is ``tokenizer.encode_trace(trace)``; reveal tokens come in the order of
    ``trace.posteriors`` (line by line, left to right).
    """
    flat = [post for line in trace.posteriors for post in line]
    positions = [t for t, flag in enumerate(encoded.is_reveal) if flag]
    if len(flat) != len(positions):
        raise DeltalensError("the encoded trace and its posteriors disagree on the number of revealed values.")
    out = np.full((len(encoded.ids), trace.n), np.nan)
    for t, post in zip(positions, flat):
        out[t] = post.predictive
    return out


def spec_actions(spec: ProbTraceSpec) -> Iterator[Action]:
    """Sigma of a spec: every action statement its traces can contain (deterministic ones listed
    from the action set, which for ``full`` is all of G)."""
    group = get_group(spec.group)
    n = group.n
    if spec.mix[0] > 0:
        for p in get_action_set(group, spec.action_set).elements():
            yield Action.deterministic(p)
    if spec.mix[1] > 0:
        for i in range(n):
            for j in range(i + 1, n):
                yield Action.swap(n, i, j, spec.swap_prob)
    if spec.mix[2] > 0:
        for chosen in itertools.combinations(range(n), spec.choice_size):
            yield Action.choice([rotation(n, chosen, s) for s in range(spec.choice_size)])
