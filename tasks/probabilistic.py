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
from dataclasses import dataclass, field
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
from deltalens.tasks.pfsa import MAX_JOINT_N, PFSA, Action, Event, Observation, RevealPosterior, joint_filter
from deltalens.tasks.traces import (
    LINE_ACTION,
    LINE_INIT,
    LINE_OUTPUT,
    LINE_PRINT,
    PROMPT,
    ActionCount,
    LineInfo,
    Reveal,
    Trace,
    check_action_count,
    check_text_size,
    spec_fields,
    spec_to_dict,
)

ACTION_KINDS = ("det", "swap", "choice")  # order of ProbTraceSpec.mix


@dataclass(frozen=True)
class ProbTraceSpec:
    """Everything that defines a family of probabilistic traces; a seed then picks one."""

    group: str = "S3"  # G: S<n> or A<n>, n from 2 to 8 (exact filtering is n!)
    action_set: str = "swaps"  # Sigma for the deterministic actions (tasks.groups)
    actions: ActionCount = 12  # m, or an inclusive range (lo, hi)
    mix: tuple[float, float, float] = (0.4, 0.4, 0.2)  # weights: deterministic / random swap / random choice
    swap_prob: float = 0.3  # p in "(b, a) if random.random() < p else (a, b)"
    choice_size: int = 3  # random.choice over the cyclic rotations of this many variables
    spacing: int | None = 3  # reveal after every k-th action ...
    reveal_prob: float | None = None  # ... or after each action with probability p (set spacing=None)
    full_reveal_prob: float = 0.2  # a reveal prints every variable with this probability, else one
    identity_init: bool = False  # start from a = 1, b = 2, ...
    seed_range: int = 10_000  # the trace's random.seed(s) has s in 0..seed_range-1

    def __post_init__(self) -> None:
        group = get_group(self.group)
        object.__setattr__(self, "group", group.name)
        if group.family not in "SA" or group.n > MAX_JOINT_N:
            raise DeltalensError(
                f"probabilistic traces use S<n> or A<n> with n up to {MAX_JOINT_N} (the exact posterior "
                f"enumerates n! states); got {group.name}."
            )
        object.__setattr__(self, "actions", check_action_count(self.actions))
        mix = tuple(float(w) for w in self.mix) if isinstance(self.mix, (list, tuple)) else ()
        if len(mix) != 3 or any(w < 0 for w in mix) or sum(mix) <= 0:
            raise DeltalensError(
                f"mix takes three weights >= 0 (deterministic, random swap, random choice), not all 0; "
                f"got {self.mix!r}."
            )
        object.__setattr__(self, "mix", mix)
        if mix[0] > 0:
            get_action_set(group, self.action_set)
        if mix[1] > 0:
            if not group.contains(transposition(group.n, 0, 1)):
                raise DeltalensError(f"{group.name} has no swaps; set the random-swap weight of mix to 0.")
            if not isinstance(self.swap_prob, float) or not re.fullmatch(r"0\.\d+", repr(self.swap_prob)):
                raise DeltalensError(
                    f"swap_prob must be a probability strictly between 0 and 1 written like 0.3, "
                    f"got {self.swap_prob!r}."
                )
        if mix[2] > 0:
            k = self.choice_size
            if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= group.n:
                raise DeltalensError(f"choice_size must be from 2 to {group.n} variables, got {k!r}.")
            if not group.contains(rotation(group.n, tuple(range(k)), 1)):
                raise DeltalensError(
                    f"a rotation of {k} variables is odd, so not in {group.name}; use an odd choice_size."
                )
        if self.spacing is not None and self.reveal_prob is not None:
            raise DeltalensError("set either spacing or reveal_prob, not both.")
        if self.spacing is not None and (
            isinstance(self.spacing, bool) or not isinstance(self.spacing, int) or self.spacing < 1
        ):
            raise DeltalensError(f"reveal spacing must be a whole number of actions >= 1, got {self.spacing!r}.")
        if self.reveal_prob is not None and not 0.0 < float(self.reveal_prob) <= 1.0:
            raise DeltalensError(f"reveal probability must be in (0, 1], got {self.reveal_prob!r}.")
        if not 0.0 <= float(self.full_reveal_prob) <= 1.0:
            raise DeltalensError(f"full_reveal_prob must be in [0, 1], got {self.full_reveal_prob!r}.")
        if isinstance(self.seed_range, bool) or not isinstance(self.seed_range, int) or self.seed_range < 1:
            raise DeltalensError(f"seed_range must be a whole number >= 1, got {self.seed_range!r}.")

    @property
    def n(self) -> int:
        return get_group(self.group).n

    def to_dict(self) -> dict[str, Any]:
        return spec_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbTraceSpec:
        data = spec_fields(cls, data, "probabilistic trace spec")
        if "mix" in data:
            data["mix"] = tuple(data["mix"])
        return cls(**data)


# --- statements ------------------------------------------------------------------------------


def rotation(n: int, variables: tuple[int, ...], shift: int) -> Permutation:
    """variables[r] takes the old value of variables[(r + shift) % k]."""
    p = list(range(n))
    k = len(variables)
    for r, v in enumerate(variables):
        p[v] = variables[(r + shift) % k]
    return tuple(p)


def _names(variables: tuple[int, ...]) -> str:
    return ", ".join(VARIABLE_NAMES[v] for v in variables)


def swap_statement(i: int, j: int, p: float) -> str:
    x, y = VARIABLE_NAMES[i], VARIABLE_NAMES[j]
    return f"{x}, {y} = ({y}, {x}) if random.random() < {p!r} else ({x}, {y})"


def choice_statement(variables: tuple[int, ...]) -> str:
    """``a, b, c = random.choice([(a, b, c), (b, c, a), (c, a, b)])``: identity first."""
    k = len(variables)
    options = ", ".join("(" + _names(tuple(variables[(r + s) % k] for r in range(k))) + ")" for s in range(k))
    return f"{_names(variables)} = random.choice([{options}])"


def header_line(python_seed: int | None) -> str:
    return f"{PROMPT}import random\n" if python_seed is None else f"{PROMPT}import random; random.seed({python_seed})\n"


# --- traces ----------------------------------------------------------------------------------


@dataclass
class ProbTrace(Trace):
    """A probabilistic transcript with its ground truth and exact posteriors (see module doc)."""

    python_seed: int | None = None
    kinds: list[str] = field(default_factory=list)  # per action: det | swap | choice
    kernels: list[Action] = field(default_factory=list)  # sigma_t with its kernel delta
    posteriors: list[list[RevealPosterior]] = field(default_factory=list)  # per reveal, per printed variable

    @property
    def q0(self) -> tuple[int, ...]:
        return self.states[0]

    @property
    def events(self) -> list[Event]:
        """The PFSA-SR inputs in transcript order (actions and observations)."""
        return _events_of(self)

    def pfsa(self) -> PFSA:
        return PFSA(self.n, self.q0)


def _events_of(trace: Trace | ProbTrace) -> list[Event]:
    kernels = getattr(trace, "kernels", None) or [Action.deterministic(p) for p in trace.actions]
    reveals = {r.line: r for r in trace.reveals}
    events: list[Event] = []
    for index, info in enumerate(trace.line_info):
        if info.kind == LINE_ACTION:
            events.append(kernels[info.action])
        elif info.kind == LINE_OUTPUT:
            r = reveals[index]
            events.append(Observation(r.variables, r.values, line=index + 1))
    return events


def generate_prob_trace(spec: ProbTraceSpec, seed: int, posteriors: bool = True) -> ProbTrace:
    """The probabilistic trace for ``seed``; the same (spec, seed) always gives the same trace.
    ``posteriors=False`` skips the exact filter (half the cost; training samples need no posterior)."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise DeltalensError(f"a trace seed must be an integer, got {seed!r}.")
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
        reveals,  # type: ignore[arg-type]
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
        p = det_set.sample(rng)  # type: ignore[union-attr]
        return det_set.line(p), Action.deterministic(p), p  # type: ignore[union-attr]
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


def group_posteriors(posteriors: list[RevealPosterior], reveals: list[Reveal]) -> list[list[RevealPosterior]]:
    """Split the flat list of per-value posteriors into one list per reveal line."""
    out, k = [], 0
    for r in reveals:
        out.append(posteriors[k : k + len(r.variables)])
        k += len(r.variables)
    return out


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
        raise DeltalensError(
            f"the trace must start with init lines giving a, b, ... the values 1..n (n >= 2), got {values}."
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
        one, many = _PRINT_ONE.fullmatch(line), _PRINT_MANY.fullmatch(line)
        if one or many:
            names = one.group(1) if one else many.group(1)
            variables = tuple(VARIABLE_NAMES.index(x) for x in names.split(", "))
            if max(variables) >= n or len(set(variables)) != len(variables):
                raise DeltalensError(f"line {lineno}: prints a variable the trace never initialised, or one twice.")
            if index + 1 >= len(lines):
                raise DeltalensError(f"line {lineno}: the print has no output line after it.")
            out = lines[index + 1].rstrip("\n").split(" ")
            if one:
                if len(out) != 2 or out[0] != names:
                    raise DeltalensError(
                        f"line {lineno + 1}: expected '{names} <value>' after the print, got {' '.join(out)!r}."
                    )
                out = out[1:]
            if len(out) != len(variables) or not all(x.isascii() and x.isdigit() and 1 <= int(x) <= n for x in out):
                raise DeltalensError(
                    f"line {lineno + 1}: expected {len(variables)} value(s) from 1 to {n}, got {' '.join(out)!r}."
                )
            events.append(Observation(variables, tuple(int(x) for x in out), line=lineno + 1))
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


def _perm_or_refuse(shown: str, n: int, lineno: int) -> Permutation:
    try:
        return read_assignment(shown[len(PROMPT) :], n)
    except DeltalensError:
        raise DeltalensError(
            f"line {lineno}: {shown!r} is not a statement a probabilistic trace can hold (a tuple assignment, "
            "a conditional swap on random.random(), a random.choice, or a print)."
        ) from None


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
