"""Permutation groups as data: S_n, A_n, Z_n, D_n and the action sets written as Python swaps.

Paper notation -> code
----------------------
* The state s, a permutation p (an element sigma of the group G) and the action that applies
  p to s (``s' = s o p``, written as a Python tuple assignment) are in tasks.permutations; its
  names are importable from here too.
* The **action set** Sigma is which statements a trace may contain (``ACTION_SETS``):

  ``swaps``       every transposition in G, written over the two variables: ``a, c = c, a``
  ``cycles``      every 3-cycle in G, written over the three variables: ``a, b, c = b, c, a``
  ``full``        a uniformly random element of G, written over ALL n variables:
                  ``a, b, c, d, e = c, e, b, a, d`` (the identity is ``a, b = a, b``)
  ``generators``  G's standard generating set, written over the variables it moves

  An action set is valid for G iff G contains such elements (A_n has no transpositions,
  S_2 has no 3-cycles). Statements list the variables in alphabetical order on the left,
  so every permutation has exactly one spelling.

Groups (``get_group``): ``S<n>`` symmetric (n!), ``A<n>`` alternating (n!/2, n >= 3),
``Z<n>`` cyclic rotations i -> i + k (n), ``D<n>`` dihedral symmetries of the n-gon,
rotations and reflections i -> k - i (2n, n >= 3); n runs up to ``MAX_N`` = 10.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import re
from collections.abc import Iterator, Sequence

from deltalens.core.errors import DeltalensError, did_you_mean
from deltalens.tasks.permutations import (
    VARIABLE_NAMES,
    Permutation,
    apply_permutation,
    compose,
    cycle,
    identity,
    inverse,
    is_even,
    is_permutation,
    lex_rank,
    lex_unrank,
    moved_points,
    read_assignment,
    transposition,
    write_assignment,
)

MIN_N = 2
MAX_N = 10  # ten variables a..j; values 1..10 keep every number a single token per position
ACTION_SETS = ("swaps", "cycles", "full", "generators")

__all__ = [  # this module's names and, re-exported, those of tasks.permutations
    "ACTION_SETS",
    "GROUP_FAMILIES",
    "MAX_N",
    "MIN_N",
    "VARIABLE_NAMES",
    "ActionSet",
    "AlternatingGroup",
    "CyclicGroup",
    "DihedralGroup",
    "Permutation",
    "PermutationGroup",
    "SymmetricGroup",
    "apply_permutation",
    "compose",
    "cycle",
    "get_action_set",
    "get_group",
    "identity",
    "inverse",
    "is_even",
    "is_permutation",
    "lex_rank",
    "lex_unrank",
    "moved_points",
    "read_assignment",
    "transposition",
    "valid_action_sets",
    "write_assignment",
]


# --- groups --------------------------------------------------------------------------------


class PermutationGroup:
    """A permutation group on n points; subclasses define membership, sampling and generators.

    ``elements()`` runs in lexicographic order and ``rank``/``unrank`` index into that order
    without enumerating the group (so S_10 never has to be listed).
    """

    family: str = ""
    title: str = ""
    min_n: int = MIN_N

    def __init__(self, n: int):
        self.n = n

    @property
    def name(self) -> str:
        return f"{self.family}{self.n}"

    def __repr__(self) -> str:
        return f"<{self.title} group {self.name}, order {self.order}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PermutationGroup) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def order(self) -> int:
        raise NotImplementedError

    def identity(self) -> Permutation:
        return identity(self.n)

    def __contains__(self, p: object) -> bool:
        return self.contains(p)  # type: ignore[arg-type]

    def contains(self, p: Sequence[int]) -> bool:
        return is_permutation(p, self.n) and self._contains(tuple(p))

    def _contains(self, p: Permutation) -> bool:
        raise NotImplementedError

    def sample(self, rng: random.Random) -> Permutation:
        """A uniformly random element."""
        raise NotImplementedError

    def generators(self) -> tuple[Permutation, ...]:
        """The standard generating set."""
        raise NotImplementedError

    def elements(self) -> Iterator[Permutation]:
        raise NotImplementedError

    def rank(self, p: Permutation) -> int:
        raise NotImplementedError

    def unrank(self, index: int) -> Permutation:
        raise NotImplementedError


class SymmetricGroup(PermutationGroup):
    family, title = "S", "symmetric"

    @property
    def order(self) -> int:
        return math.factorial(self.n)

    def _contains(self, p: Permutation) -> bool:
        return True

    def sample(self, rng: random.Random) -> Permutation:
        p = list(range(self.n))
        rng.shuffle(p)
        return tuple(p)

    def generators(self) -> tuple[Permutation, ...]:
        # (1 2) and the n-cycle (1 2 ... n); for n = 2 they coincide
        swap, rotation = transposition(self.n, 0, 1), cycle(self.n, range(self.n))
        return (swap,) if swap == rotation else (swap, rotation)

    def elements(self) -> Iterator[Permutation]:
        return itertools.permutations(range(self.n))

    def rank(self, p: Permutation) -> int:
        return lex_rank(p)

    def unrank(self, index: int) -> Permutation:
        return lex_unrank(index, self.n)


class AlternatingGroup(PermutationGroup):
    family, title, min_n = "A", "alternating", 3  # A_2 is trivial: no statement could move a value

    @property
    def order(self) -> int:
        return math.factorial(self.n) // 2

    def _contains(self, p: Permutation) -> bool:
        return is_even(p)

    def sample(self, rng: random.Random) -> Permutation:
        # uniform on S_n, then swapping two images is a bijection odd -> even: uniform on A_n
        p = list(range(self.n))
        rng.shuffle(p)
        if not is_even(tuple(p)):
            p[0], p[1] = p[1], p[0]
        return tuple(p)

    def generators(self) -> tuple[Permutation, ...]:
        # the 3-cycles (1 2 k), k = 3..n
        return tuple(cycle(self.n, (0, 1, k)) for k in range(2, self.n))

    def elements(self) -> Iterator[Permutation]:
        return (p for p in itertools.permutations(range(self.n)) if is_even(p))

    # Lexicographic ranks 2j and 2j+1 differ by swapping the last two images, so exactly one
    # of each pair is even: the even permutation with lex rank r has index r // 2 in A_n.
    def rank(self, p: Permutation) -> int:
        return lex_rank(p) // 2

    def unrank(self, index: int) -> Permutation:
        if not 0 <= index < self.order:
            raise IndexError(f"index {index} is outside 0..{self.order - 1}")
        p = lex_unrank(2 * index, self.n)
        return p if is_even(p) else lex_unrank(2 * index + 1, self.n)


class _SmallGroup(PermutationGroup):
    """A group of order O(n): elements are listed once and indexed by a dict."""

    def _element_list(self) -> tuple[Permutation, ...]:
        raise NotImplementedError

    @functools.cached_property
    def _sorted(self) -> tuple[Permutation, ...]:
        return tuple(sorted(set(self._element_list())))

    @functools.cached_property
    def _index(self) -> dict[Permutation, int]:
        return {p: i for i, p in enumerate(self._sorted)}

    @property
    def order(self) -> int:
        return len(self._sorted)

    def _contains(self, p: Permutation) -> bool:
        return p in self._index

    def sample(self, rng: random.Random) -> Permutation:
        return self._sorted[rng.randrange(len(self._sorted))]

    def elements(self) -> Iterator[Permutation]:
        return iter(self._sorted)

    def rank(self, p: Permutation) -> int:
        return self._index[tuple(p)]

    def unrank(self, index: int) -> Permutation:
        return self._sorted[index]


def _rotation(n: int, k: int) -> Permutation:
    return tuple((i + k) % n for i in range(n))


def _reflection(n: int, k: int) -> Permutation:
    return tuple((k - i) % n for i in range(n))


class CyclicGroup(_SmallGroup):
    family, title = "Z", "cyclic"

    def _element_list(self) -> tuple[Permutation, ...]:
        return tuple(_rotation(self.n, k) for k in range(self.n))

    def generators(self) -> tuple[Permutation, ...]:
        return (_rotation(self.n, 1),)


class DihedralGroup(_SmallGroup):
    # on 2 points the reflections coincide with the rotations (order 2, not 4): start at n = 3
    family, title, min_n = "D", "dihedral", 3

    def _element_list(self) -> tuple[Permutation, ...]:
        n = self.n
        return tuple(_rotation(n, k) for k in range(n)) + tuple(_reflection(n, k) for k in range(n))

    def generators(self) -> tuple[Permutation, ...]:
        # the rotation r: i -> i + 1 and the reflection s: i -> -i
        return (_rotation(self.n, 1), _reflection(self.n, 0))


GROUP_FAMILIES: dict[str, type[PermutationGroup]] = {
    "S": SymmetricGroup,
    "A": AlternatingGroup,
    "Z": CyclicGroup,
    "D": DihedralGroup,
}
_GROUP_NAME = re.compile(r"\s*([SAZDC])\s*_?\s*(\d+)\s*", re.IGNORECASE)


@functools.cache
def get_group(name: str) -> PermutationGroup:
    """``"S5"`` -> SymmetricGroup(5). Case-insensitive; ``S_5`` and ``C5`` (= Z5) also work."""
    match = _GROUP_NAME.fullmatch(str(name))
    if match is None:
        raise DeltalensError(
            f"unknown group {name!r}; use S<n>, A<n>, Z<n> or D<n> with n from {MIN_N} to {MAX_N}, for example S5."
        )
    family = match.group(1).upper().replace("C", "Z")
    n = int(match.group(2))
    cls = GROUP_FAMILIES[family]
    if not cls.min_n <= n <= MAX_N:
        raise DeltalensError(
            f"{family}{n} is out of range: {cls.title} groups {family}_n are supported for n from "
            f"{cls.min_n} to {MAX_N}."
        )
    return cls(n)


# --- action sets ---------------------------------------------------------------------------


class ActionSet:
    """The statements Sigma a trace may apply: a finite list of permutations, or all of G (full).

    ``index``/``element`` number the actions 0..size-1 (the statement tokenizer's action block).
    """

    def __init__(self, group: PermutationGroup, name: str, perms: tuple[Permutation, ...] | None):
        self.group = group
        self.name = name
        self._perms = perms  # None for "full": the whole group, never listed
        self._index = None if perms is None else {p: i for i, p in enumerate(perms)}
        self._lines: dict[Permutation, str] = {}  # p -> ">>> statement\n", memoised for trace writing

    def __repr__(self) -> str:
        return f"<action set {self.name!r} of {self.group.name}: {self.size} actions>"

    @property
    def writes_all_variables(self) -> bool:
        return self._perms is None

    @property
    def size(self) -> int:
        return self.group.order if self._perms is None else len(self._perms)

    def contains(self, p: Sequence[int]) -> bool:
        p = tuple(p)
        if self._index is None:  # None exactly when _perms is: the whole group
            return self.group.contains(p)
        return p in self._index

    def sample(self, rng: random.Random) -> Permutation:
        if self._perms is None:
            return self.group.sample(rng)
        # int(random() * k) is uniform up to k / 2**53 and twice as fast as randrange
        return self._perms[int(rng.random() * len(self._perms))]

    def index(self, p: Permutation) -> int:
        if not self.contains(p):
            raise KeyError(p)
        return self.group.rank(p) if self._index is None else self._index[tuple(p)]

    def element(self, index: int) -> Permutation:
        if self._perms is None:
            return self.group.unrank(index)
        return self._perms[index]

    def elements(self) -> Iterator[Permutation]:
        return self.group.elements() if self._perms is None else iter(self._perms)

    def statement(self, p: Permutation) -> str:
        return write_assignment(p, all_variables=self.writes_all_variables)

    def line(self, p: Permutation) -> str:
        """The REPL line ``>>> <statement>\\n`` for p."""
        line = self._lines.get(p)
        if line is None:
            if len(self._lines) >= 100_000:  # full on S_8+: do not keep every element
                self._lines.clear()
            line = self._lines[p] = f">>> {self.statement(p)}\n"
        return line


_ELEMENT_WORDS = {"swaps": "transpositions", "cycles": "3-cycles"}


def _finite_action_list(group: PermutationGroup, name: str) -> tuple[Permutation, ...] | None:
    n = group.n
    if name == "swaps":
        found = (transposition(n, i, j) for i, j in itertools.combinations(range(n), 2))
    elif name == "cycles":
        found = (
            cycle(n, order)
            for points in itertools.combinations(range(n), 3)
            for order in (points, (points[0], points[2], points[1]))
        )
    elif name == "generators":
        return group.generators()
    else:  # full
        return None
    return tuple(sorted(p for p in found if group.contains(p)))


@functools.cache
def _cached_action_set(group_name: str, name: str) -> ActionSet:
    group = get_group(group_name)
    return ActionSet(group, name, _finite_action_list(group, name))


def get_action_set(group: PermutationGroup | str, name: str) -> ActionSet:
    """The action set ``name`` of ``group``; DeltalensError when the group has no such actions."""
    group = get_group(group) if isinstance(group, str) else group
    if name not in ACTION_SETS:
        hint = did_you_mean(str(name), ACTION_SETS)
        raise DeltalensError(f"unknown action set {name!r}; use one of {', '.join(ACTION_SETS)}{hint or '.'}")
    actions = _cached_action_set(group.name, name)
    if actions.size == 0:
        others = [s for s in ACTION_SETS if s != name and _cached_action_set(group.name, s).size]
        choices = ", ".join(others[:-1]) + f" or {others[-1]}" if len(others) > 1 else others[0]
        raise DeltalensError(f"{group.name} has no {_ELEMENT_WORDS[name]}; use --actions-set {choices}.")
    return actions


def valid_action_sets(group: PermutationGroup | str) -> tuple[str, ...]:
    group = get_group(group) if isinstance(group, str) else group
    return tuple(s for s in ACTION_SETS if _cached_action_set(group.name, s).size)
