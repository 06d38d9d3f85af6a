"""Permutations as tuples, how an action moves a state, and the Python statement that writes it.

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

Statements list the variables in alphabetical order on the left, so every permutation has
exactly one spelling (``write_assignment``; ``read_assignment`` reads it back). The groups and
action sets these permutations form are in tasks.groups.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from deltalens.core.errors import DeltalensError

Permutation = tuple[int, ...]

VARIABLE_NAMES = "abcdefghij"  # MAX_N (tasks.groups) = 10 variables a..j


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
