"""The n x n marginal representation of a belief: M[i, v - 1] = P(variable i holds v).

The steps the marginal filters of tasks.pfsa are built from (its module docstring says which
are exact and which approximate):

* ``marginal_transition``: ``M <- sum_k probs[k] P_k M`` (exact, linear);
* ``marginal_mask``: the linear-RNN reveal, zero row i and column v, then inject e_i e_v^T;
* ``row_reveal``: the key-side reveal, row i replaced by e_v and the other rows untouched (what a
  delta-rule write (I - k k^T) M + k e_v^T with k = e_i can do; zeroing column v needs the value side);
* ``sinkhorn`` (after ``total_support``): the rebalancing to a doubly stochastic matrix that the
  normalised marginal filter applies after each reveal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from deltalens.core.errors import DeltalensError
from deltalens.tasks.belief_arrays import like, take
from deltalens.tasks.pfsa_inputs import Action


def point_marginals(q: Sequence[int]) -> np.ndarray:
    """The marginal matrix of a known state: M[i, q[i] - 1] = 1."""
    n = len(q)
    m = np.zeros((n, n))
    m[np.arange(n), np.asarray(q) - 1] = 1.0
    return m


def marginal_transition(m: Any, action: Action) -> Any:
    """sum_k probs[k] P_k M: variable i takes the marginal of variable perms[k][i] (exact, linear)."""
    out = None
    for p, w in action.branches():
        term = take(m, np.asarray(p, dtype=np.int64))
        term = term if w == 1.0 else term * w
        out = term if out is None else out + term
    return out


def _reveal_masks(n: int, variable: int, value: int) -> tuple[np.ndarray, np.ndarray]:
    """keep: 0 on row `variable` and column `value`, 1 elsewhere; inject: e_variable e_value^T."""
    keep = np.ones((n, n))
    keep[variable, :] = 0.0
    keep[:, value - 1] = 0.0
    inject = np.zeros((n, n))
    inject[variable, value - 1] = 1.0
    return keep, inject


def marginal_mask(m: Any, variable: int, value: int) -> Any:
    """The linear-RNN reveal: A(x) M + B(x) with A = zero row i and column v, B = e_i e_v^T."""
    keep, inject = _reveal_masks(m.shape[0], variable, value)
    return m * like(m, keep) + like(m, inject)


def row_reveal(m: Any, variable: int, value: int) -> Any:
    """The key-side reveal: (I - e_i e_i^T) M + e_i e_v^T, row i set to the revealed value, column v kept."""
    n = m.shape[0]
    keep = np.ones((n, n))
    keep[variable, :] = 0.0
    inject = np.zeros((n, n))
    inject[variable, value - 1] = 1.0
    return m * like(m, keep) + like(m, inject)


def _has_perfect_matching(support: np.ndarray) -> bool:
    """Kuhn's augmenting paths on a boolean bipartite adjacency matrix (rows -> columns)."""
    n = support.shape[0]
    owner = [-1] * support.shape[1]

    def augment(row: int, seen: list[bool]) -> bool:
        for col in np.flatnonzero(support[row]):
            if not seen[col]:
                seen[col] = True
                if owner[col] < 0 or augment(owner[col], seen):
                    owner[col] = row
                    return True
        return False

    return all(augment(row, [False] * support.shape[1]) for row in range(n))


def total_support(m: np.ndarray) -> np.ndarray:
    """m with every entry that lies on no perfect matching of its support set to 0.

    Sinkhorn scaling drives exactly those entries to 0, but only as O(1/iterations); pruning
    them first gives the same limit with geometric convergence.
    """
    support = m > 0
    out = m.copy()
    for i, j in zip(*np.nonzero(support)):
        rest = np.delete(np.delete(support, i, axis=0), j, axis=1)
        if rest.size and not _has_perfect_matching(rest):
            out[i, j] = 0.0
    return out


def sinkhorn(m: np.ndarray, tol: float = 1e-13, max_iter: int = 5000) -> np.ndarray:
    """Scale rows and columns of a non-negative matrix until it is doubly stochastic."""
    m = total_support(m)
    for _ in range(max_iter):
        rows = m.sum(axis=1)
        if np.any(rows <= 0):
            raise DeltalensError("the marginal belief has a variable with no possible value left.")
        m /= rows[:, None]
        cols = m.sum(axis=0)
        if np.any(cols <= 0):
            raise DeltalensError("the marginal belief has a value no variable can hold.")
        m /= cols[None, :]
        if np.abs(m.sum(axis=1) - 1.0).max() < tol:
            break
    return m
