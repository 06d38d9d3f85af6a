"""Representations of permutation groups, and fitting one to a head's transition products.

The group maths behind the product probe (probes/products.py); nothing here reads a model.

* `cycle_type`, `spectral_cycle_type`: a permutation's cycle lengths, and the cycle type whose
  spectrum is closest to a d_k x d_k product's eigenvalues (a permutation with cycles of lengths
  l_1, l_2, ... has eigenvalues exp(2 pi i j / l) (j = 1 .. l - 1) for each cycle, 1 elsewhere).
* `generated_group`: the closure of the observed permutations (G).
* `irreps`: G's non-trivial irreducible real representations rho, as orthogonal matrices
  rho(g) (|G|, dim, dim); `standard_rep` the standard one of S_n alone (pi's permutation matrix
  on the sum-zero vectors), used for groups too big for `irreps`.
* `fit_representation`: an intertwiner F (d_k x dim rho, ||F|| = 1) with P_t F ~ F rho(pi_t),
  fitted by least squares on one half of the products, then every product decoded as the
  element g minimising ||P_t F - F rho(g)||.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from deltalens.tasks.groups import is_even

__all__ = [
    "MAX_IRREP_ORDER",
    "Irrep",
    "RepresentationFit",
    "cycle_type",
    "fit_intertwiner",
    "fit_representation",
    "generated_group",
    "group_representations",
    "irreps",
    "spectral_cycle_type",
    "standard_rep",
]

MAX_IRREP_ORDER = 120  # every irrep up to |G| = 120 (S5: the regular representation is 120 x 120)


def cycle_type(perm: tuple[int, ...]) -> tuple[int, ...]:
    """Cycle lengths of a permutation (given as images of 0..n-1), longest first, fixed points included."""
    seen, lengths = set(), []
    for start in range(len(perm)):
        if start in seen:
            continue
        length, i = 0, start
        while i not in seen:
            seen.add(i)
            i = perm[i]
            length += 1
        lengths.append(length)
    return tuple(sorted(lengths, reverse=True))


def _partitions(n: int, largest: int | None = None):
    largest = n if largest is None else largest
    if n == 0:
        yield ()
        return
    for part in range(min(n, largest), 0, -1):
        for rest in _partitions(n - part, part):
            yield (part, *rest)


def _spectrum(partition: tuple[int, ...], d: int, parity_dim: bool = False) -> np.ndarray:
    """The d eigenvalues of a permutation of this cycle type acting on a d-dim space (1 elsewhere);
    `parity_dim`: plus one dimension with eigenvalue -1 (see `spectral_cycle_type`)."""
    values = [np.exp(2j * np.pi * j / length) for length in partition for j in range(1, length)]
    values += [-1.0] * parity_dim
    return np.array(values + [1.0] * (d - len(values)), dtype=complex)


def spectral_cycle_type(eigenvalues: np.ndarray, n: int) -> tuple[tuple[int, ...], float]:
    """The cycle type (a partition of n) whose spectrum is closest to `eigenvalues` (d complex values),
    by optimal matching; returns (cycle type, mean matching distance).

    The determinant of n_h reflections with beta near 2 is near (-1)^n_h whatever the permutation,
    so a head that applies even and odd permutations with a fixed n_h corrects the parity in one
    more dimension (S4 with 3 reflections: a 3-cycle is 1, w, w^2 on the standard representation
    and -1 beside it). A cycle type whose sign disagrees with det P_t is matched with that extra -1;
    when |det P_t| < 0.5 (betas far from 2, or decay) both readings are tried."""
    d = len(eigenvalues)
    det = float(np.prod(eigenvalues).real)
    best, best_cost = (1,) * n, np.inf
    for partition in _partitions(n):
        sign = (-1) ** (n - len(partition))
        for parity_dim in (False, True) if abs(det) < 0.5 else (det * sign < 0,):
            if n - len(partition) + parity_dim > d:
                continue
            target = _spectrum(partition, d, parity_dim)
            cost = np.abs(eigenvalues[:, None] - target[None, :])
            rows, cols = linear_sum_assignment(cost)
            total = cost[rows, cols].mean()
            if total < best_cost - 1e-12:
                best, best_cost = partition, total
    return best, float(best_cost)


def standard_rep(perms: list[tuple[int, ...]]) -> np.ndarray:
    """rho(pi) (len(perms), n-1, n-1): pi's permutation matrix (e_i -> e_pi(i)) on the sum-zero subspace."""
    n = len(perms[0])
    basis = np.linalg.qr(np.eye(n) - 1.0 / n)[0][:, : n - 1]  # orthonormal basis of sum-zero vectors
    mats = np.zeros((len(perms), n, n))
    for a, p in enumerate(perms):
        mats[a, list(p), list(range(n))] = 1.0
    return basis.T @ mats @ basis


def _mult(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(a[i] for i in b)


def generated_group(perms, limit: int | None = None) -> list[tuple[int, ...]] | None:
    """The group the permutations generate (closure under composition), sorted; None once it has more
    than `limit` elements (S_10 has 3.6 million)."""
    gens = sorted(set(map(tuple, perms)))
    elements = {tuple(range(len(gens[0])))}
    frontier = list(elements)
    while frontier:
        new = {_mult(g, s) for g in frontier for s in gens} - elements
        elements |= new
        if limit is not None and len(elements) > limit:
            return None
        frontier = list(new)
    return sorted(elements)


@dataclass
class Irrep:
    """A non-trivial irreducible real representation of a finite permutation group."""

    name: str  # "standard", "standard x sign", "sign", or "dim d #k"
    dim: int
    faithful: bool  # only the identity acts as the identity matrix
    matrices: np.ndarray  # (|G|, dim, dim), orthogonal, in the order of the group's elements


def irreps(elements: list[tuple[int, ...]], seed: int = 0) -> list[Irrep]:
    """The group's non-trivial irreducible representations, up to equivalence.

    Eigenspaces of a random symmetric matrix commuting with the left-regular representation L are
    irreducible invariant subspaces (generically; every irrep of S_n and A_n is real); restricting L
    to one gives its irrep, named by its character where it is the standard one (fixed points - 1),
    the sign, or their product.
    """
    order, n = len(elements), len(elements[0])
    index = {g: i for i, g in enumerate(elements)}
    L = np.zeros((order, order, order))
    for a, g in enumerate(elements):
        for h in elements:
            L[a, index[_mult(g, h)], index[h]] = 1.0
    X = np.random.default_rng(seed).standard_normal((order, order))
    Y = X + X.T
    # C = sum_g L_g Y L_g^T. Row i of the permutation matrix L_g has its 1 in column q_g(i), so each term is
    # Y with rows and columns permuted: summed in the order of g, bit for bit the einsum
    # "gij,jk,glk->il" (L, Y, L), without its |G|^5 loop (S5: 40 s).
    C = np.zeros((order, order))
    for L_g in L:
        q = L_g.argmax(1)
        C += Y[np.ix_(q, q)]
    values, vectors = np.linalg.eigh(C)
    scale = max(1.0, np.abs(values).max())
    cuts = np.flatnonzero(np.diff(values) > 1e-6 * scale) + 1
    sign = np.array([1.0 if is_even(g) else -1.0 for g in elements])
    standard = np.array([sum(g[i] == i for i in range(n)) - 1.0 for g in elements])
    found: dict[tuple, Irrep] = {}
    for block in np.split(np.arange(order), cuts):
        B = vectors[:, block]
        mats = np.einsum("ai,gab,bj->gij", B, L, B)
        character = np.einsum("gii->g", mats)
        key = tuple(np.round(character, 4))
        if key in found or (len(block) == 1 and np.allclose(character, 1.0)):
            continue  # an equivalent copy, or the trivial representation
        identity = np.eye(len(block))
        faithful = sum(np.abs(m - identity).max() < 1e-6 for m in mats) == 1
        if np.allclose(character, standard):
            name = "standard"
        elif np.allclose(character, standard * sign):
            name = "standard x sign"
        elif len(block) == 1 and np.allclose(character, sign):
            name = "sign"
        else:
            name = f"dim {len(block)} #{sum(r.dim == len(block) for r in found.values()) + 1}"
        found[key] = Irrep(name, len(block), bool(faithful), mats)
    return sorted(found.values(), key=lambda r: (not r.faithful, r.name != "standard", r.dim))


def group_representations(
    observed: list[tuple[int, ...]], n: int, seed: int = 0
) -> tuple[list[tuple[int, ...]], list[Irrep]]:
    """The elements to decode among and the representations to try, for the observed permutations of n.

    Up to |G| = MAX_IRREP_ORDER: the generated group and all its non-trivial irreps. A bigger group
    (S6 and up): its standard representation only, decoded among the permutations observed."""
    elements = generated_group(observed, limit=MAX_IRREP_ORDER)
    if elements is not None:
        return elements, irreps(elements, seed=seed)
    elements = sorted(set(observed))
    return elements, [Irrep("standard", n - 1, True, standard_rep(elements))]


def fit_intertwiner(P: np.ndarray, R: np.ndarray) -> tuple[np.ndarray, float]:
    """F (d, m) with ||F|| = 1 minimising sum ||P_t F - F R_t||^2; returns (F, rms relative residual)."""
    d, m = P.shape[-1], R.shape[-1]
    eye_m, eye_d = np.eye(m), np.eye(d)
    # vec(P F - F R) = (I_m kron P - R^T kron I_d) vec(F), vec column-major
    M = np.zeros((d * m, d * m))
    for P_t, R_t in zip(P, R):
        L = np.kron(eye_m, P_t) - np.kron(R_t.T, eye_d)
        M += L.T @ L
    values, vectors = np.linalg.eigh(M)
    F = vectors[:, 0].reshape(m, d).T
    return F, float(np.sqrt(max(values[0], 0.0) / len(P)))


@dataclass
class RepresentationFit:
    """One representation (in one orientation) fitted to a head's products P_t, and what it decodes."""

    rep: Irrep
    inverse: bool  # the products act as rho(g^-1) = rho(g)^T rather than rho(g)
    fit_residual: float  # rms relative residual on the fitting half
    heldout_residual: float  # median ||P_t F - F rho(pi_t)|| / ||F|| on the held-out half (NaN: none held out)
    decoded: np.ndarray  # (A,) index of the element g minimising ||P_t F - F rho(g)||, every product
    residual: np.ndarray  # (A,) ||P_t F - F rho(pi_t)|| under the true element pi_t


def fit_representation(
    P: np.ndarray, rep: Irrep, inverse: bool, element_index: np.ndarray, fit: np.ndarray
) -> RepresentationFit:
    """Fit an intertwiner on the products P (A, d, d) with `fit` set, then decode every product.

    element_index (A,): each product's true element (an index into rep.matrices); the held-out
    residual is the median over the products with `fit` unset."""
    held = ~fit
    table = np.transpose(rep.matrices, (0, 2, 1)) if inverse else rep.matrices  # (|G|, m, m)
    F, fit_residual = fit_intertwiner(P[fit], table[element_index[fit]])
    FR = np.einsum("dm,cmk->cdk", F, table)  # (|G|, d, m)
    errors = np.linalg.norm(np.einsum("ade,em->adm", P, F)[:, None] - FR[None], axis=(2, 3))
    residual = errors[np.arange(len(P)), element_index]
    held_residual = float(np.median(residual[held])) if held.any() else float("nan")
    return RepresentationFit(rep, inverse, fit_residual, held_residual, errors.argmin(1), residual)
