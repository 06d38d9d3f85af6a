"""The inputs Sigma of a PFSA-SR (tasks.pfsa): statements that move values, and prints that reveal them.

* ``Action`` is an input sigma with its kernel delta: from state q it goes to ``q o perms[k]``
  with probability ``probs[k]`` (one branch for a deterministic statement).
* ``Observation`` is what a print shows: ``values[k]`` for variable ``variables[k]``, in order.
* ``Event`` is either; a trace is a sequence of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Union

from deltalens.core.errors import DeltalensError
from deltalens.tasks.permutations import VARIABLE_NAMES, Permutation, identity, is_permutation


@dataclass(frozen=True)
class Action:
    """An input sigma that moves values: ``q -> q o perms[k]`` with probability ``probs[k]``.

    A deterministic statement has one branch. ``line`` (1-based, 0 = none) only names the
    statement in messages and is left out of equality.
    """

    perms: tuple[Permutation, ...]
    probs: tuple[float, ...]
    line: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if not self.perms or len(self.perms) != len(self.probs):
            raise DeltalensError("an action needs one probability per permutation, and at least one.")
        n = len(self.perms[0])
        if any(not is_permutation(p, n) for p in self.perms):
            raise DeltalensError(f"an action's branches must all be permutations of {n} points.")
        if any(not 0.0 <= w <= 1.0 for w in self.probs) or not math.isclose(sum(self.probs), 1.0, abs_tol=1e-12):
            raise DeltalensError(f"an action's branch probabilities must be in [0, 1] and sum to 1, got {self.probs}.")

    @classmethod
    def deterministic(cls, p: Permutation, line: int = 0) -> Action:
        return cls((tuple(p),), (1.0,), line)

    @classmethod
    def swap(cls, n: int, i: int, j: int, p: float, line: int = 0) -> Action:
        """Swap variables i and j with probability p (``(b, a) if random.random() < p else (a, b)``)."""
        t = list(range(n))
        t[i], t[j] = j, i
        return cls((tuple(t), identity(n)), (p, 1.0 - p), line)

    @classmethod
    def choice(cls, perms: Sequence[Permutation], line: int = 0) -> Action:
        """``random.choice`` over the listed assignments: each with probability 1 / len."""
        return cls(tuple(tuple(p) for p in perms), tuple(1.0 / len(perms) for _ in perms), line)

    @property
    def n(self) -> int:
        return len(self.perms[0])

    @property
    def is_deterministic(self) -> bool:
        return len(set(p for p, w in zip(self.perms, self.probs) if w > 0)) == 1

    def branches(self) -> list[tuple[Permutation, float]]:
        """(permutation, probability) with equal permutations merged and zero branches dropped."""
        merged: dict[Permutation, float] = {}
        for p, w in zip(self.perms, self.probs):
            if w > 0:
                merged[p] = merged.get(p, 0.0) + w
        return list(merged.items())


@dataclass(frozen=True)
class Observation:
    """An input that reveals: ``values[k]`` is printed for variable ``variables[k]``, in order."""

    variables: tuple[int, ...]
    values: tuple[int, ...]
    line: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if (
            not self.variables
            or len(self.variables) != len(self.values)
            or len(set(self.variables)) != len(self.variables)
        ):
            raise DeltalensError("an observation names each printed variable once, with one value each.")

    def is_full(self, n: int) -> bool:
        """A full reveal shows every variable: it pins the state."""
        return len(self.variables) == n

    def describe(self) -> str:
        return ", ".join(f"{VARIABLE_NAMES[i]} = {v}" for i, v in zip(self.variables, self.values))


Event = Union[Action, Observation]


def at_line(event: Event) -> str:
    return f"line {event.line}: " if event.line else ""
