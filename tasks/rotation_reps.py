"""The 3-dim rotation representations of S4 and A5, built exactly, and reflections per element.

S4 is the rotation group of the cube and A5 that of the icosahedron, so both act on R^3 by
rotations: a faithful 3-dim representation with det +1 everywhere. Every rotation of R^3 is a
product of 2 reflections, so in these representations no element needs more than 2 Householder
factors; in the standard representation (the permutation matrix on the sum-zero vectors) a
4-cycle of S4 needs 3 and a 5-cycle of A5 needs 4.

* `cube_rotations()`: the 24 rotations of the cube (signed permutation matrices with det +1), each
  labelled by the permutation it induces on the cube's 4 body diagonals.
* `icosahedron_rotations()`: the 60 rotations of the icosahedron (vertices the cyclic shifts of
  (0, +-1, +-phi)), generated from a 3-fold and a 5-fold rotation, each labelled by the permutation it
  induces on the 5 frames of mutually perpendicular 2-fold axes (the coordinate axes are one).
* `rotation_irreps(elements)`: those matrices as `Irrep`s in the order of a group's elements (tuples
  on 4 or 5 points, the convention of tasks/representations.py: rho(g o h) = rho(g) rho(h)). S4 has
  one (its character is the standard x sign one), A5 two, swapped by conjugation with an odd
  permutation (traces (1 + sqrt 5) / 2 and (1 - sqrt 5) / 2 on the 5-cycles).
* `reflections_needed(matrix)`: rank(M - I), the fewest reflections whose product is an orthogonal
  M (Cartan-Dieudonne); `householder_factors(matrix)` finds that many unit vectors.

The labels depend on a numbering of the 4 diagonals or 5 frames; any other numbering gives a
representation conjugate by a permutation of the points. For S4 that is equivalent to this one
(conjugation is inner); for A5 an odd relabelling swaps the two 3-dim irreps, and both are returned.
"""

from __future__ import annotations

import itertools

import numpy as np

from deltalens.core.errors import DeltalensError
from deltalens.tasks.representations import Irrep

__all__ = [
    "PHI",
    "cube_rotations",
    "icosahedron_rotations",
    "rotation_irreps",
    "reflections_needed",
    "householder_factors",
]

PHI = (1 + 5**0.5) / 2
TOL = 1e-9


def _line_index(lines: np.ndarray, vector: np.ndarray) -> int:
    """Index of the line (a unit vector up to sign) that `vector` lies on."""
    hits = np.flatnonzero(np.abs(np.abs(lines @ vector) - 1.0) < 1e-6)
    if len(hits) != 1:
        raise AssertionError("a rotation of the solid moved a symmetry axis off the set of axes")
    return int(hits[0])


def cube_rotations() -> dict[tuple[int, ...], np.ndarray]:
    """permutation of the 4 body diagonals -> the cube's rotation inducing it (24 entries).

    A rotation R takes diagonal d_i onto the line of d_{pi(i)}; then pi_{RS} = pi_R o pi_S."""
    diagonals = np.array([[1, 1, 1], [1, 1, -1], [1, -1, 1], [-1, 1, 1]], dtype=float) / np.sqrt(3)
    out = {}
    for order in itertools.permutations(range(3)):
        for signs in itertools.product((1.0, -1.0), repeat=3):
            R = np.zeros((3, 3))
            R[list(order), [0, 1, 2]] = signs  # column j is +-e_order[j]
            if np.linalg.det(R) < 0:
                continue
            perm = tuple(_line_index(diagonals, R @ d) for d in diagonals)
            out[perm] = R
    return out


def _line_key(vector: np.ndarray) -> tuple:
    """A line through the origin, as its direction with the largest entry made positive (rounded)."""
    v = vector * np.sign(vector[np.argmax(np.abs(vector))])
    return tuple(np.round(v, 6) + 0.0)  # + 0.0: no negative zeros in the key


def _rotation(axis: np.ndarray, angle: float) -> np.ndarray:
    """Rodrigues: rotation by `angle` about the unit `axis`."""
    a = axis / np.linalg.norm(axis)
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def _closure(generators: list[np.ndarray]) -> list[np.ndarray]:
    """Every product of the generators (a finite matrix group), keyed on rounded entries."""
    key = lambda m: tuple(np.round(m, 6).ravel())  # noqa: E731
    elements = {key(np.eye(3)): np.eye(3)}
    frontier = [np.eye(3)]
    while frontier:
        new = []
        for m in frontier:
            for g in generators:
                p = g @ m
                if key(p) not in elements:
                    elements[key(p)] = p
                    new.append(p)
        frontier = new
    return list(elements.values())


def icosahedron_rotations() -> dict[tuple[int, ...], np.ndarray]:
    """permutation of the 5 frames of 2-fold axes -> the icosahedron's rotation inducing it (60 entries).

    Frame 0 is the coordinate axes; the others are its images. A rotation R takes frame i onto
    frame pi(i), so pi_{RS} = pi_R o pi_S."""
    three = np.array([[0, 0, 1], [1, 0, 0], [0, 1, 0]], dtype=float)  # (x, y, z) -> (z, x, y): a 3-fold axis
    five = _rotation(np.array([0.0, 1.0, PHI]), 2 * np.pi / 5)  # about the vertex (0, 1, phi)
    rotations = _closure([three, five])
    if len(rotations) != 60:
        raise AssertionError(f"the icosahedral rotation group has 60 elements, the closure gave {len(rotations)}")
    frames: list[frozenset[tuple]] = []
    for R in rotations:  # the orbit of the coordinate frame: each frame a set of 3 lines
        frame = frozenset(_line_key(c) for c in R.T)
        if frame not in frames:
            frames.append(frame)
    if len(frames) != 5:
        raise AssertionError(f"the 2-fold axes form 5 frames, found {len(frames)}")
    lines = [np.array(sorted(f)) for f in frames]  # (3, 3) per frame: its 3 axes as rows

    def frame_of(R: np.ndarray, i: int) -> int:
        image = frozenset(_line_key(v) for v in lines[i] @ R.T)
        return frames.index(image)

    return {tuple(frame_of(R, i) for i in range(5)): R for R in rotations}


def _conjugated(table: dict[tuple[int, ...], np.ndarray], tau: tuple[int, ...]) -> dict:
    """g -> rho(tau o g o tau^-1) for an involution tau: the representation with the points relabelled."""
    return {tuple(tau[g[tau[i]]] for i in range(len(g))): m for g, m in table.items()}


def rotation_irreps(elements: list[tuple[int, ...]]) -> list[Irrep]:
    """The 3-dim rotation representation(s) of S4 or A5 in the order of `elements` (the whole group,
    as tuples on 4 or 5 points): one for S4 ("rotation (cube)"), two for A5 ("rotation (icosahedron)
    #1" and "#2", related by an odd relabelling of the 5 points)."""
    points = len(elements[0]) if elements else 0
    if points == 4 and len(elements) == 24:
        tables = {"rotation (cube)": cube_rotations()}
    elif points == 5 and len(elements) == 60:
        base = icosahedron_rotations()
        tables = {"rotation (icosahedron) #1": base, "rotation (icosahedron) #2": _conjugated(base, (1, 0, 2, 3, 4))}
    else:
        raise DeltalensError(
            f"the rotation representations are those of S4 (24 elements on 4 points) and A5 (60 on 5); "
            f"got a group of {len(elements)} elements on {points} points."
        )
    out = []
    for name, table in tables.items():
        if set(table) != set(map(tuple, elements)):
            raise DeltalensError(f"the elements given are not the group {name} labels (S4 or A5 on 0..n-1).")
        out.append(Irrep(name, 3, True, np.stack([table[tuple(g)] for g in elements])))
    return out


def reflections_needed(matrix: np.ndarray, tol: float = 1e-6) -> int:
    """The fewest reflections whose product is the orthogonal `matrix`: rank(M - I)."""
    M = np.asarray(matrix, dtype=float)
    if M.ndim != 2 or M.shape[0] != M.shape[1] or not np.allclose(M @ M.T, np.eye(len(M)), atol=1e-6):
        raise DeltalensError(f"reflections_needed takes a square orthogonal matrix; got shape {M.shape}.")
    return int(np.linalg.matrix_rank(M - np.eye(len(M)), tol=tol))


def householder_factors(matrix: np.ndarray) -> list[np.ndarray]:
    """Unit vectors u_1 .. u_r, r = reflections_needed(M), with M = H(u_1) H(u_2) ... H(u_r),
    H(u) = I - 2 u u^T (so u_r acts first). Each step reflects a moved vector x onto M x, which
    also keeps every vector M fixed, so the fixed space grows by one per step."""
    M = np.asarray(matrix, dtype=float)
    r = reflections_needed(M)
    rest, factors = M.copy(), []
    for _ in range(r):
        moved = np.linalg.norm(rest - np.eye(len(M)), axis=0)
        x = np.eye(len(M))[:, int(np.argmax(moved))]
        u = rest @ x - x
        u /= np.linalg.norm(u)
        H = np.eye(len(M)) - 2 * np.outer(u, u)
        rest = H @ rest  # H rest x = x
        factors.append(u)
    if not np.allclose(rest, np.eye(len(M)), atol=1e-6):
        raise AssertionError("the reflections did not reach the identity")
    return factors  # rest = H(u_r) ... H(u_1) M = I, so M = H(u_1) ... H(u_r)
