"""Permutation groups as data: S_n, A_n, Z_n, D_n and the action sets written as Python swaps.

Paper notation -> code
----------------------
* n variables ``a, b, c, ...`` (``VARIABLE_NAMES[:n]``) hold the values 1..n. The **state**
  ``s`` is a tuple of length n: ``s[i]`` is the value held by variable ``VARIABLE_NAMES[i]``.
* A **permutation** ``p`` (an element sigma of the group G) is a tuple of images: ``p[i]`` is the
  image of point i. ``identity(n) == (0, 1, ..., n-1)``.
* An **action** is the Python tuple assignment that applies ``p`` to the state. Variable i
  receives the old value of variable ``p[i]``::

      s'[i] = s[p[i]]                    # apply_permutation(s, p), i.e. s' = s o p

  so ``p = (1, 2, 0)`` is written ``a, b, c = b, c, a`` (new a = old b, new b = old c,
  new c = old a), exactly what Python does when it evaluates the right side first.
  After actions p_1, ..., p_t the state is ``s_t = s_0 o p_1 o ... o p_t``
  (``compose(p, q)`` is "p, then q", i.e. the function p o q). With the identity start
  ``s_0 = (1, ..., n)``, ``s_t[i] - 1`` is the composed permutation itself.
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

from deltalens.core.errors import DeltalensError

Permutation = tuple[int, ...]

MIN_N = 2
MAX_N = 10  # ten variables a..j; values 1..10 keep every number a single token per position
VARIABLE_NAMES = "abcdefghij"
ACTION_SETS = ("swaps", "cycles", "full", "generators")


# --- permutations --------------------------------------------------------------------------


def identity(n: int) -> Permutation:
    return tuple(range(n))


def is_permutation(p: Sequence[int], n: int) -> bool:
    return len(p) == n and sorted(p) == list(range(n))


def apply_permutation(state: Sequence[int], p: Permutation) -> tuple[int, ...]:
    """The state after the action for p: variable i takes the old value of variable p[i]."""
    return tuple([state[j] for j in p])


def compose(p: Permutation, q: Permutation) -> Permutation:
    """The single permutation that acts like p followed by q (the function p o q)."""
    return tuple(p[j] for j in q)


def inverse(p: Permutation) -> Permutation:
    inv = [0] * len(p)
    for i, j in enumerate(p):
        inv[j] = i
    return tuple(inv)


def is_even(p: Permutation) -> bool:
    """Parity from the cycle count: sign = (-1) ** (n - cycles)."""
    seen = [False] * len(p)
    cycles = 0
    for start in range(len(p)):
        if not seen[start]:
            cycles += 1
            i = start
            while not seen[i]:
                seen[i] = True
                i = p[i]
    return (len(p) - cycles) % 2 == 0


def moved_points(p: Permutation) -> tuple[int, ...]:
    return tuple(i for i, j in enumerate(p) if i != j)


def lex_rank(p: Permutation) -> int:
    """Index of p among all n! permutations in lexicographic order (Lehmer code)."""
    n = len(p)
    rank = 0
    for i in range(n):
        smaller_after = sum(1 for j in range(i + 1, n) if p[j] < p[i])
        rank += smaller_after * math.factorial(n - 1 - i)
    return rank


def lex_unrank(rank: int, n: int) -> Permutation:
    """Inverse of ``lex_rank``."""
    if not 0 <= rank < math.factorial(n):
        raise IndexError(f"rank {rank} is outside 0..{math.factorial(n) - 1}")
    pool = list(range(n))
    out = []
    for i in range(n - 1, -1, -1):
        digit, rank = divmod(rank, math.factorial(i))
        out.append(pool.pop(digit))
    return tuple(out)


def transposition(n: int, i: int, j: int) -> Permutation:
    p = list(range(n))
    p[i], p[j] = j, i
    return tuple(p)


def cycle(n: int, points: Sequence[int]) -> Permutation:
    """The cycle with p[points[0]] = points[1], p[points[1]] = points[2], ..., last -> first."""
    p = list(range(n))
    for k, i in enumerate(points):
        p[i] = points[(k + 1) % len(points)]
    return tuple(p)


# --- statements ----------------------------------------------------------------------------


def write_assignment(p: Permutation, all_variables: bool = False) -> str:
    """The Python tuple assignment for p, e.g. ``a, b, c = b, c, a`` (no ``>>>``, no newline).

    Only the variables p moves are written unless ``all_variables`` (the ``full`` set).
    """
    points = range(len(p)) if all_variables else moved_points(p)
    if not points:
        raise ValueError("the identity moves no variable; write it with all_variables=True")
    lhs = ", ".join(VARIABLE_NAMES[i] for i in points)
    rhs = ", ".join(VARIABLE_NAMES[p[i]] for i in points)
    return f"{lhs} = {rhs}"


_NAME_LIST = r"[a-j](?:, [a-j])*"
_ASSIGNMENT = re.compile(rf"({_NAME_LIST}) = ({_NAME_LIST})")


def read_assignment(statement: str, n: int) -> Permutation:
    """Inverse of ``write_assignment``: the permutation a tuple-assignment statement applies.

    Raises DeltalensError when the statement is not a permutation of n variables.
    """
    match = _ASSIGNMENT.fullmatch(statement)
    if match is None:
        raise DeltalensError(f"{statement!r} is not a tuple assignment like 'a, b = b, a'.")
    lhs = [VARIABLE_NAMES.index(x) for x in match.group(1).split(", ")]
    rhs = [VARIABLE_NAMES.index(x) for x in match.group(2).split(", ")]
    if len(lhs) != len(rhs) or len(set(lhs)) != len(lhs) or set(lhs) != set(rhs) or max(lhs) >= n:
        raise DeltalensError(f"{statement!r} does not permute the values of {n} variables.")
    p = list(range(n))
    for i, j in zip(lhs, rhs):
        p[i] = j
    return tuple(p)


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
        if self._perms is None:
            return self.group.contains(p)
        return p in self._index  # type: ignore[operator]

    def sample(self, rng: random.Random) -> Permutation:
        if self._perms is None:
            return self.group.sample(rng)
        # int(random() * k) is uniform up to k / 2**53 and twice as fast as randrange
        return self._perms[int(rng.random() * len(self._perms))]

    def index(self, p: Permutation) -> int:
        if not self.contains(p):
            raise KeyError(p)
        return self.group.rank(p) if self._perms is None else self._index[tuple(p)]  # type: ignore[index]

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
        raise DeltalensError(f"unknown action set {name!r}; use one of {', '.join(ACTION_SETS)}.")
    actions = _cached_action_set(group.name, name)
    if actions.size == 0:
        others = [s for s in ACTION_SETS if s != name and _cached_action_set(group.name, s).size]
        choices = ", ".join(others[:-1]) + f" or {others[-1]}" if len(others) > 1 else others[0]
        raise DeltalensError(f"{group.name} has no {_ELEMENT_WORDS[name]}; use --actions-set {choices}.")
    return actions


def valid_action_sets(group: PermutationGroup | str) -> tuple[str, ...]:
    group = get_group(group) if isinstance(group, str) else group
    return tuple(s for s in ACTION_SETS if _cached_action_set(group.name, s).size)
