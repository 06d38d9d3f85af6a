"""PFSA-SR: a probabilistic finite-state automaton with state reveals, and exact belief filtering.

Real code has statements whose outcome an observer cannot see (``random.choice``, a branch on a
hidden input). The paper models a trace of such code as an automaton (Q, Sigma, delta, rho, q0)
and asks what a model must carry to predict the next printed value: the belief b_t.

Paper notation -> code
----------------------
* **Q**, the states: all n! assignments of the values 1..n to the variables. A state q is a value
  tuple like the deterministic traces' ``s`` (``q[i]`` is the value of variable
  ``VARIABLE_NAMES[i]``). ``PFSA.states`` is the (n!, n) array of them in lexicographic order;
  ``PFSA.index(q)`` is q's position (its lex rank as a permutation of 1..n).
* **Sigma**, the inputs, one per statement of the trace: an ``Action`` (a statement that moves
  values, deterministic or random) or an ``Observation`` (what a print shows: a reveal).
* **delta**, the probabilistic transition kernel: ``Action.perms`` / ``Action.probs``; from q the
  action goes to ``q o perms[k]`` (``apply_permutation(q, perms[k])``) with probability
  ``probs[k]``. ``PFSA.delta(action)`` is the dense row-stochastic matrix
  ``D[q, q'] = delta(q' | q, sigma)``; ``PFSA.transition`` applies it without building it.
* **rho**, the reveal function: ``PFSA.rho(obs)`` is the boolean mask of the states consistent
  with an observation (those that hold the printed values). Reveals are hard constraints
  (support pruning), never soft likelihoods.
* **q0**, the start state, known from the init lines ``>>> a = 3``; ``PFSA.initial_belief()``
  is b_0, the one-hot vector on q0.
* **b_t**, the belief after t inputs: a row vector over Q (the *joint* representation, n!
  entries), or its n x n marginal matrix ``M[i, v - 1] = P(variable i holds v)`` (the
  *marginal* representation, doubly stochastic).

The exact filter (``joint_filter``) per input::

    reveal      b <- (b * rho(o)) / ||b * rho(o)||_1    mask, then renormalise: NOT linear
    transition  b <- b D_sigma                          a stochastic matrix: linear

and the posterior predictive of a revealed value, before it is read, is
``P(var i = v | past) = sum of b[q] over q with q[i] = v`` (``RevealPosterior``). A line that
prints several variables (``print(a, b, c)``) is read left to right: each value is predicted
given the values printed before it on the same line.

A linear RNN cannot divide by the norm. Its best imitation (``run_linear_joint``) masks and
transitions without renormalising; in exact arithmetic this loses nothing (the mask and the
kernel commute with scaling, so b~_t / ||b~_t||_1 is the exact b_t), but the mass
||b~_t||_1 = P(o_1, ..., o_k), the probability of everything revealed so far, shrinks with every
partial reveal and underflows to 0 in finite precision (tasks/belief_decay.py measures when).
A full reveal pins the state, and a linear RNN can treat it as a reset (b~ <- one-hot: an input
term B(x_t) with A(x_t) = 0); ``full_reset`` does that.

The marginal representation (``marginal_filter``, ``run_linear_marginal``):

* transition: ``M <- sum_k probs[k] P_k M`` with ``(P_k M)[i] = M[perms[k][i]]`` (rows move with
  the values). Marginalising commutes with a mixture of permutations, so this is EXACT.
* reveal of (i, v): row i becomes e_v and column v is zeroed in every other row (both exact:
  i holds v and nobody else does). What the other rows become is NOT determined by the
  marginals; the normalised filter rebalances them to a doubly stochastic matrix by Sinkhorn
  iteration, which is an APPROXIMATION. It is exact when the joint's conditional marginals
  happen to equal the balanced ones, for instance: n = 2 (the marginals determine the joint);
  a belief uniform over a block of variables whose values are exchangeable (the adversary of
  tasks/adversary.py); the first value of a full reveal and the belief after it (it pins the
  state). It fails when correlations matter: after ``a, b, c = random.choice([(a, b, c), (b, c,
  a), (c, a, b)])`` every marginal is 1/3, exactly as under a uniform shuffle, yet seeing a
  pins b and c; the marginal filter still says 1/2 (tests/tasks/test_pfsa.py shows both).
* the linear version (``run_linear_marginal``): reveal = zero row i and column v (A(x_t), a
  mask) plus e_i e_v^T (B(x_t), injected certainty), no balancing. Revealed rows are restored
  to mass 1, but mass that other rows had in column v is lost for good, so rows that are never
  revealed decay (an adversary makes it exponential).

Every linear step works on numpy arrays and on torch tensors of any dtype (``transition``,
``mask``, ``marginal_transition``, ``marginal_mask``), so the same code measures underflow in
fp32, bf16 and fp16. Exact filtering runs in float64 numpy. ``enumerate_posteriors`` is the
readable reference: it lists every combination of hidden outcomes.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from deltalens.core.errors import DeltalensError
from deltalens.tasks.belief_arrays import like, mass, max_entry, take, to_numpy
from deltalens.tasks.marginal_belief import (
    marginal_mask,
    marginal_transition,
    point_marginals,
    row_reveal,
    sinkhorn,
    total_support,
)
from deltalens.tasks.permutations import VARIABLE_NAMES, Permutation, apply_permutation, inverse
from deltalens.tasks.pfsa_inputs import Action, Event, Observation, at_line

MAX_JOINT_N = 8  # 8! = 40320 belief entries; 9! would be 362880 per step, too slow for the CPU tests

__all__ = [  # this module's names and, re-exported, those of the modules it is built from
    "MAX_JOINT_N",
    "PFSA",
    "Action",
    "Event",
    "FilterResult",
    "LinearRun",
    "MarginalRun",
    "Observation",
    "RevealPosterior",
    "enumerate_posteriors",
    "joint_filter",
    "marginal_filter",
    "marginal_mask",
    "marginal_transition",
    "mass",
    "max_entry",
    "point_marginals",
    "run_linear_joint",
    "run_linear_marginal",
    "sinkhorn",
    "total_support",
]


# --- the automaton --------------------------------------------------------------------------


@functools.cache
def _state_table(n: int) -> tuple[np.ndarray, np.ndarray]:
    """All value tuples of 1..n in lex order (n!, n), and their base-(n+1) codes (sorted)."""
    states = np.array(list(itertools.permutations(range(1, n + 1))), dtype=np.int64).reshape(-1, n)
    codes = states @ ((n + 1) ** np.arange(n - 1, -1, -1, dtype=np.int64))
    states.setflags(write=False)
    codes.setflags(write=False)
    return states, codes


class PFSA:
    """(Q, Sigma, delta, rho, q0) over n variables; Sigma is open (any ``Action``/``Observation``).

    Build one with ``PFSA(n, q0)``, ``ProbTrace.pfsa()`` or ``ProbProgram.pfsa()``
    (tasks/probabilistic.py, which also lists a spec's Sigma: ``spec_actions``); it caches the
    gather tables that make ``transition`` O(|Q| * branches).
    """

    def __init__(self, n: int, q0: Sequence[int] | None = None):
        if not 2 <= n <= MAX_JOINT_N:
            raise DeltalensError(
                f"the joint belief over {n} variables would have {math.factorial(n)} entries; "
                f"exact filtering supports n from 2 to {MAX_JOINT_N}."
            )
        self.n = n
        self.q0 = tuple(range(1, n + 1)) if q0 is None else tuple(int(v) for v in q0)
        if sorted(self.q0) != list(range(1, n + 1)):
            raise DeltalensError(f"q0 must give the {n} variables the values 1..{n}, got {self.q0}.")
        self.states, self._codes = _state_table(n)
        self._weights = (n + 1) ** np.arange(n - 1, -1, -1, dtype=np.int64)
        self._preimage: dict[Permutation, np.ndarray] = {}

    def __repr__(self) -> str:
        return f"<PFSA-SR over {self.n} variables, |Q| = {self.num_states}, q0 = {self.q0}>"

    @property
    def num_states(self) -> int:
        return len(self.states)

    def index(self, q: Sequence[int]) -> int:
        """Position of state q (a value tuple) in ``states``."""
        code = int(np.dot(np.asarray(q, dtype=np.int64), self._weights))
        i = int(np.searchsorted(self._codes, code))
        if i >= len(self._codes) or self._codes[i] != code:
            raise DeltalensError(f"{tuple(q)} is not a state over {self.n} variables.")
        return i

    def initial_belief(self, dtype: Any = np.float64) -> np.ndarray:
        """b_0: all mass on q0."""
        b = np.zeros(self.num_states, dtype=dtype)
        b[self.index(self.q0)] = 1
        return b

    def preimage(self, p: Permutation) -> np.ndarray:
        """pre[j] = index of the state that p sends to state j (states[j] o p^-1)."""
        pre = self._preimage.get(p)
        if pre is None:
            before = self.states[:, list(inverse(p))]
            pre = np.searchsorted(self._codes, before @ self._weights)  # writable: torch.from_numpy wants it
            self._preimage[p] = pre
        return pre

    # delta and rho as data
    def delta(self, action: Action) -> np.ndarray:
        """Dense row-stochastic D[q, q'] = delta(q' | q, sigma) (|Q| x |Q|; for small n)."""
        size = self.num_states
        d = np.zeros((size, size))
        for p, w in action.branches():
            d[self.preimage(p), np.arange(size)] += w
        return d

    def rho(self, obs: Observation) -> np.ndarray:
        """Boolean mask of the states consistent with the observation."""
        self._check_observation(obs)
        cols = list(obs.variables)
        return np.all(self.states[:, cols] == np.asarray(obs.values), axis=1)

    def _check_observation(self, obs: Observation) -> None:
        if max(obs.variables) >= self.n or min(obs.values) < 1 or max(obs.values) > self.n:
            raise DeltalensError(
                f"{at_line(obs)}the print shows {obs.describe()}, outside {self.n} variables and values 1..{self.n}."
            )

    # linear steps (numpy or torch, any dtype)
    def transition(self, b: Any, action: Action) -> Any:
        """b D_sigma, gathered: b'[q'] = sum_k probs[k] * b[q' o perms[k]^-1]."""
        if action.n != self.n:
            raise DeltalensError(
                f"{at_line(action)}the statement moves {action.n} variables, the automaton has {self.n}."
            )
        out = None
        for p, w in action.branches():
            term = take(b, self.preimage(p))
            term = term if w == 1.0 else term * w
            out = term if out is None else out + term
        return out

    def mask(self, b: Any, obs: Observation) -> Any:
        """b * rho(o): the reveal without renormalising (linear)."""
        return b * like(b, self.rho(obs).astype(np.float64))

    # read-outs
    def predictive(self, b: np.ndarray, variable: int) -> np.ndarray:
        """(n,) P(variable holds v), v = 1..n, from a normalised joint belief."""
        return np.bincount(self.states[:, variable] - 1, weights=b, minlength=self.n)

    def marginals(self, b: np.ndarray) -> np.ndarray:
        """The n x n marginal matrix M[i, v - 1] of a joint belief."""
        return np.stack([self.predictive(b, i) for i in range(self.n)])


# --- exact filtering ---------------------------------------------------------------------------


@dataclass
class RevealPosterior:
    """The posterior predictive of one printed value, given everything before it."""

    event: int  # index of the Observation in the event list
    line: int  # its source line (1-based; 0 when unknown)
    variable: int  # 0..n-1
    value: int  # the value printed, 1..n
    predictive: np.ndarray  # (n,) P(variable = v | past) for v = 1..n

    @property
    def probability(self) -> float:
        """P(the value that was printed | past)."""
        return float(self.predictive[self.value - 1])

    def to_dict(self) -> dict[str, Any]:
        return {
            "variable": VARIABLE_NAMES[self.variable],
            "revealed": self.value,
            "predictive": {str(v + 1): float(x) for v, x in enumerate(self.predictive)},
        }


@dataclass
class FilterResult:
    """What a filter saw: a predictive per printed value, the belief after every input."""

    reveals: list[RevealPosterior]
    marginals: np.ndarray  # (E + 1, n, n): M after 0..E inputs
    belief: np.ndarray  # the final belief (joint: (n!,); marginal: (n, n))
    log_likelihood: float  # sum of log P(printed value | past)

    @property
    def probability(self) -> float:
        return math.exp(self.log_likelihood)


def _refuse(obs: Observation, variable: int, value: int) -> DeltalensError:
    return DeltalensError(
        f"{at_line(obs)}the print shows {VARIABLE_NAMES[variable]} = {value}, which no outcome of the "
        "statements before it allows; the trace is inconsistent."
    )


def joint_filter(pfsa: PFSA, events: Iterable[Event]) -> FilterResult:
    """Exact Bayesian filtering over the n! states (float64): the b_t of the paper.

    >>> program = dl.parse_prob_trace(dl.generate_prob_trace(dl.ProbTraceSpec(group="S3", actions=6), seed=0).text)
    >>> result = dl.joint_filter(program.pfsa(), program.events)   # the exact belief b_t
    >>> result is not None
    True
    """
    b = pfsa.initial_belief()
    reveals: list[RevealPosterior] = []
    marginals = [pfsa.marginals(b)]
    loglik = 0.0
    for e, event in enumerate(events):
        if isinstance(event, Action):
            b = pfsa.transition(b, event)
        else:
            pfsa._check_observation(event)
            for variable, value in zip(event.variables, event.values):
                pred = pfsa.predictive(b, variable)
                if pred[value - 1] <= 0.0:
                    raise _refuse(event, variable, value)
                reveals.append(RevealPosterior(e, event.line, variable, value, pred))
                loglik += math.log(pred[value - 1])
                b = b * (pfsa.states[:, variable] == value)
                b = b / b.sum()  # the non-linear step
        marginals.append(pfsa.marginals(b))
    return FilterResult(reveals, np.stack(marginals), b, loglik)


def enumerate_posteriors(q0: Sequence[int], events: Sequence[Event]) -> list[np.ndarray]:
    """Reference: the predictive of every printed value by listing all hidden outcomes.

    Each combination of branches (one per action) is a path with probability the product of its
    branch probabilities; a printed value's predictive sums the paths consistent with every
    value printed before it. Exponential in the number of random actions: small traces only.
    """
    actions = [e for e in events if isinstance(e, Action)]
    n = len(q0)
    slots = sum(len(e.variables) for e in events if isinstance(e, Observation))
    acc = np.zeros((slots, n))
    for path in itertools.product(*(a.branches() for a in actions)):
        prob, state, alive, k, slot = 1.0, tuple(q0), True, 0, 0
        for event in events:
            if isinstance(event, Action):
                p, w = path[k]
                state, prob, k = apply_permutation(state, p), prob * w, k + 1
                continue
            for variable, value in zip(event.variables, event.values):
                if alive:
                    acc[slot, state[variable] - 1] += prob
                alive = alive and state[variable] == value
                slot += 1
    shown = [value for e in events if isinstance(e, Observation) for value in e.values]
    if any(acc[slot, value - 1] == 0 for slot, value in enumerate(shown)):
        raise DeltalensError("the trace is inconsistent: some printed value has probability 0.")
    return list(acc / acc.sum(axis=1, keepdims=True))


# --- marginal representation (its steps: tasks.marginal_belief) ------------------------------


def marginal_filter(n: int, q0: Sequence[int], events: Iterable[Event]) -> FilterResult:
    """Filtering in the n x n marginal representation, renormalised by Sinkhorn balancing.

    Transitions are exact; reveals are an approximation (see the module docstring). The
    predictive of a printed value is the row of M for its variable.

    >>> program = dl.parse_prob_trace(dl.generate_prob_trace(dl.ProbTraceSpec(group="S3", actions=6), seed=0).text)
    >>> result = dl.marginal_filter(program.n, program.q0, program.events)   # the n x n marginal belief
    >>> result is not None
    True
    """
    m = point_marginals(q0)
    reveals: list[RevealPosterior] = []
    history = [m]
    loglik = 0.0
    for e, event in enumerate(events):
        if isinstance(event, Action):
            m = marginal_transition(m, event)
        else:
            for variable, value in zip(event.variables, event.values):
                pred = m[variable].copy()
                if pred[value - 1] <= 0.0:
                    raise _refuse(event, variable, value)
                reveals.append(RevealPosterior(e, event.line, variable, value, pred))
                loglik += math.log(pred[value - 1])
                m = sinkhorn(marginal_mask(m, variable, value))
        history.append(m)
    return FilterResult(reveals, np.stack(history), m, loglik)


# --- the unnormalised (linear RNN) filters -------------------------------------------------------


@dataclass
class LinearRun:
    """An unnormalised filter's trajectory: one row per input (row 0 = before any input)."""

    mass: np.ndarray  # (E + 1,) ||b~||_1 (joint) or sum of M~ (marginal), in float64
    max_entry: np.ndarray  # (E + 1,) the largest entry (what underflows last)
    belief: Any  # the final unnormalised belief, in the dtype it was run in
    marginals: np.ndarray | None = None  # (E + 1, n, n) float64 copies (marginal runs only)


@dataclass
class MarginalRun(LinearRun):
    """The marginal filter's run (`run_linear_marginal`), which always keeps the marginals."""

    marginals: np.ndarray  # (E + 1, n, n) float64 copies


def run_linear_joint(pfsa: PFSA, events: Sequence[Event], b0: Any = None, full_reset: bool = True) -> LinearRun:
    """b~_t: transitions and masks, never renormalised. ``b0`` sets the dtype (numpy or torch).

    ``full_reset``: a full reveal sets b~ to the one-hot of the printed state (mass 1), which a
    linear RNN can do (A(x_t) = 0, B(x_t) = e_q); otherwise it is a mask like any reveal.
    """
    b = pfsa.initial_belief() if b0 is None else b0
    masses, peaks = [mass(b)], [max_entry(b)]
    for event in events:
        if isinstance(event, Action):
            b = pfsa.transition(b, event)
        elif full_reset and event.is_full(pfsa.n):
            onehot = np.zeros(pfsa.num_states)
            onehot[pfsa.index([event.values[event.variables.index(i)] for i in range(pfsa.n)])] = 1.0
            b = like(b, onehot)
        else:
            b = pfsa.mask(b, event)
        masses.append(mass(b))
        peaks.append(max_entry(b))
    return LinearRun(np.array(masses), np.array(peaks), b)


def run_linear_marginal(
    n: int, q0: Sequence[int], events: Sequence[Event], m0: Any = None, full_reset: bool = True, reveal: str = "mask"
) -> MarginalRun:
    """M~_t: exact linear transitions, reveals as mask + injection, never rebalanced.

    ``m0`` sets the dtype (numpy or torch); by default the float64 point marginals of q0. ``reveal="row"``
    reveals by ``row_reveal`` instead (the revealed row only: the key-side filter a delta rule can run).
    """
    if reveal not in ("mask", "row"):
        raise DeltalensError(f"reveal is 'mask' (row and column) or 'row' (the row only), got {reveal!r}")
    step = marginal_mask if reveal == "mask" else row_reveal
    m = point_marginals(q0) if m0 is None else m0
    masses, peaks, history = [mass(m)], [max_entry(m)], [to_numpy(m)]
    for event in events:
        if isinstance(event, Action):
            m = marginal_transition(m, event)
        elif full_reset and event.is_full(n):
            state = [event.values[event.variables.index(i)] for i in range(n)]
            m = like(m, point_marginals(state))
        else:
            for variable, value in zip(event.variables, event.values):
                m = step(m, variable, value)
        masses.append(mass(m))
        peaks.append(max_entry(m))
        history.append(to_numpy(m))
    return MarginalRun(np.array(masses), np.array(peaks), m, np.stack(history))
