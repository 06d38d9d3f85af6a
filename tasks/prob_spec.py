"""The probabilistic trace family (PFSA-SR): its spec, its statements and the trace record.

``ProbTraceSpec`` defines a family, ``ProbTrace`` is one transcript with its ground truth and exact
posteriors; the generators (tasks/probabilistic.py: random families, tasks/hidden_block.py: the
hidden block and its adversary) both write these. See tasks/probabilistic.py for the notation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import VARIABLE_NAMES, Permutation, get_action_set, get_group, transposition
from deltalens.tasks.pfsa import MAX_JOINT_N, PFSA, Action, Event, Observation, RevealPosterior
from deltalens.tasks.traces import (
    LINE_ACTION,
    LINE_OUTPUT,
    PROMPT,
    ActionCount,
    Reveal,
    Trace,
    check_action_count,
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
    # The hidden-block family (tasks/hidden_block.py) when > 0: the first hidden_block variables are
    # a block that reveals print only with probability query_prob (otherwise a probe variable),
    # `actions` counts two per cycle, spacing is one reveal per cycle, mix weights det / random block swaps.
    hidden_block: int = 0
    query_prob: float = 0.2
    probe_leak: float = 0.0  # share of leaks between two probe variables (needs n - hidden_block >= 2)

    def __post_init__(self) -> None:
        group = get_group(self.group)
        object.__setattr__(self, "group", group.name)
        if group.family not in "SA" or group.n > MAX_JOINT_N:
            raise DeltalensError(
                f"probabilistic traces use S<n> or A<n> with n up to {MAX_JOINT_N} (the exact posterior "
                f"enumerates n! states); got {group.name}."
            )
        object.__setattr__(self, "actions", check_action_count(self.actions))
        mix = check_mix(self.mix)
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
        if self.hidden_block:
            check_hidden_block(self)

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


def check_mix(mix: object) -> tuple[float, float, float]:
    """`mix` (a list or tuple) as ProbTraceSpec keeps it: three weights >= 0, not all 0."""
    weights = tuple(float(w) for w in mix) if isinstance(mix, (list, tuple)) else ()
    if len(weights) != 3 or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise DeltalensError(
            f"mix takes three weights >= 0 (deterministic, random swap, random choice), not all 0; got {mix!r}."
        )
    return weights[0], weights[1], weights[2]


# --- traces ----------------------------------------------------------------------------------


@dataclass
class ProbTrace(Trace[ProbTraceSpec]):
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


def check_hidden_block(spec: ProbTraceSpec) -> None:
    """Refuse, in one sentence, a spec whose hidden block cannot be written with its statements."""
    h, n = spec.hidden_block, spec.n
    if isinstance(h, bool) or not isinstance(h, int) or not 2 <= h < n:
        raise DeltalensError(f"hidden_block takes 2 <= h < n (at least one probe variable), got {h!r} with n = {n}.")
    if spec.mix[1] <= 0 or spec.mix[2] > 0:
        raise DeltalensError(
            "a hidden-block family needs weight on random swaps (the leaks) and none on random choices: "
            f"mix = [deterministic, random swap, 0], got {list(spec.mix)}."
        )
    if spec.mix[0] > 0:
        swaps = set(get_action_set(get_group(spec.group), spec.action_set).elements())
        missing = [(i, j) for i in range(h) for j in range(i + 1, h) if transposition(n, i, j) not in swaps]
        if missing:
            raise DeltalensError(
                f"the action set {spec.action_set!r} has no deterministic swap of block variables "
                f"{VARIABLE_NAMES[missing[0][0]]} and {VARIABLE_NAMES[missing[0][1]]}; use action_set = 'swaps'."
            )
    if not 0.0 <= float(spec.query_prob) <= 1.0:
        raise DeltalensError(f"query_prob must be in [0, 1], got {spec.query_prob!r}.")
    if not 0.0 <= float(spec.probe_leak) <= 1.0:
        raise DeltalensError(f"probe_leak must be in [0, 1], got {spec.probe_leak!r}.")
    if spec.probe_leak > 0 and n - h < 2:
        raise DeltalensError(
            f"probe_leak > 0 needs two probe variables to leak between; hidden_block = {h} leaves {n - h} of n = {n}."
        )


def group_posteriors(posteriors: list[RevealPosterior], reveals: list[Reveal]) -> list[list[RevealPosterior]]:
    """Split the flat list of per-value posteriors into one list per reveal line."""
    out, k = [], 0
    for r in reveals:
        out.append(posteriors[k : k + len(r.variables)])
        k += len(r.variables)
    return out
