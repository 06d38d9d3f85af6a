"""PFSA-SR where partial observability bites: a hidden block, drained by leaks, queried late.

The variables split into a hidden block (the first h, e.g. a, b, c) and probe variables (the
rest, e.g. d). Every cycle of a trace has three lines::

    >>> b, c = c, b                                              # block action: a swap inside the block
    >>> c, d = (d, c) if random.random() < 0.3 else (c, d)       # leak: a block variable and a probe
    >>> print('d', d)                                            # reveal: a probe ... or, rarely,
    d 4                                                          # a query of a block variable

**Training traces** (``generate_hidden_block_trace``, what ``generate_prob_trace`` returns for a
spec with ``hidden_block = h``): the block action is a deterministic swap or a random swap with
probability p (``mix`` weights them), the leak partner is a random block variable (or, with
probability ``probe_leak``, another probe variable), and each reveal prints a block variable with
probability ``query_prob``, else a probe variable. Every hidden outcome
is drawn from the header's ``random.seed`` stream, so the transcript replays in Python.

**The adversary** (``hidden_block_adversary``): the first ``opening`` block actions are random
swaps (their outcomes drawn from the seed; with one, the block's belief is a (1 - p, p) mixture of
two arrangements), every later one a
deterministic swap of a random block pair, so the block's exact posterior never mixes towards
uniform: it is the opening's mixture carried through every later swap, a function of the whole
history. Its choices depend on the history: each leak pairs the probe with the block variable whose
row carries the most mass in the unnormalised linear marginal filter (the greedy drain), and each
probe reveal shows the outcome "no leak" (probability 1 - p every cycle). After ``horizon`` such
partial reveals it queries the block variable whose exact posterior is the most uncertain.

**The control** (``drain=False``, n - h >= 2): each leak swaps the first two probe variables
instead, with the same kinds of lines and the same block moves and query; the exact posterior at the
query is the same, but the linear filter's block mass stays whole. Comparing a model on both separates
the lost normalisation from other causes of a late error (lab/experiments/pfsa_drain.py).

Why it bites. "No leak" is independent of the block's arrangement, so conditioning on it leaves the
exact posterior where it was; but in the linear marginal filter (``tasks.pfsa.run_linear_marginal``)
the leak moves a fraction p of the partner row into the probe row and the reveal deletes it: the
block's unnormalised mass falls by at least a factor 1 - p/h per cycle (greedy: p times the largest
row): at most 3 x 0.9^k for h = 3, p = 0.3 (6e-14 after 300 cycles; the greedy drain measures about
1e-15), while the exact belief keeps its full information. A model whose state behaves like that
filter and reads it out linearly loses its confidence with the horizon; one that renormalises (an
LSTM's gates, the renormalised DeltaNet) need not. Unlike the block-2 adversary of tasks/adversary.py,
the queries hit the drained block, the block has 3 variables, and p is not 1/2, so the exact answer
depends on the whole trace.
"""

from __future__ import annotations

import math
import random

import numpy as np

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import VARIABLE_NAMES, apply_permutation, get_action_set, get_group, identity, transposition
from deltalens.tasks.marginal_belief import marginal_mask, marginal_transition, point_marginals
from deltalens.tasks.pfsa import Action, Observation, joint_filter, run_linear_marginal
from deltalens.tasks.prob_spec import (
    ProbTrace,
    ProbTraceSpec,
    check_hidden_block,
    group_posteriors,
    header_line,
    swap_statement,
)
from deltalens.tasks.traces import LINE_ACTION, LINE_INIT, LINE_OUTPUT, LINE_PRINT, PROMPT, LineInfo, Reveal


class _Writer:
    """Appends the lines of one trace and keeps its ground truth (shared by both generators)."""

    def __init__(self, spec: ProbTraceSpec, python_seed: int | None):
        self.spec, self.n = spec, spec.n
        self.state = tuple(range(1, self.n + 1))  # a = 1, b = 2, ...: the block starts known
        self.lines = [header_line(python_seed)]
        self.info = [LineInfo(LINE_INIT, 0)]
        for i, value in enumerate(self.state):
            self.lines.append(f"{PROMPT}{VARIABLE_NAMES[i]} = {value}\n")
            self.info.append(LineInfo(LINE_INIT, 0, variables=(i,)))
        self.states, self.actions, self.kinds, self.kernels, self.reveals = [self.state], [], [], [], []

    def swap(self, i: int, j: int, random_swap: bool, taken: bool) -> Action:
        n, p = self.n, self.spec.swap_prob
        if random_swap:
            line, kernel = f"{PROMPT}{swap_statement(i, j, p)}\n", Action.swap(n, i, j, p, line=len(self.lines) + 1)
        else:
            det = get_action_set(get_group(self.spec.group), self.spec.action_set)
            line, kernel = det.line(transposition(n, i, j)), Action.deterministic(transposition(n, i, j))
            kernel = Action(kernel.perms, kernel.probs, line=len(self.lines) + 1)
        realised = transposition(n, i, j) if taken else identity(n)
        self.state = apply_permutation(self.state, realised)
        t = len(self.actions) + 1
        self.lines.append(line)
        self.info.append(LineInfo(LINE_ACTION, t, action=t - 1))
        self.states.append(self.state)
        self.actions.append(realised)
        self.kinds.append("swap" if random_swap else "det")
        self.kernels.append(kernel)
        return kernel

    def reveal(self, variable: int) -> None:
        name, t = VARIABLE_NAMES[variable], len(self.actions)
        self.lines.append(f"{PROMPT}print('{name}', {name})\n")
        self.lines.append(f"{name} {self.state[variable]}\n")
        self.info += [LineInfo(LINE_PRINT, t, variables=(variable,)), LineInfo(LINE_OUTPUT, t, variables=(variable,))]
        self.reveals.append(Reveal(len(self.lines) - 1, t, (variable,), (self.state[variable],)))

    def trace(self, seed: int, python_seed: int | None, posteriors: bool) -> ProbTrace:
        trace = ProbTrace(
            self.spec,
            seed,
            self.lines,
            self.info,
            self.actions,
            self.states,
            self.reveals,
            python_seed=python_seed,
            kinds=self.kinds,
            kernels=self.kernels,
        )
        if posteriors:
            trace.posteriors = group_posteriors(joint_filter(trace.pfsa(), trace.events).reveals, self.reveals)
        return trace


def cycles_of(spec: ProbTraceSpec, rng: random.Random) -> int:
    """Cycles of a trace: two actions each (block action, leak), so half of the drawn action count."""
    m = spec.actions if isinstance(spec.actions, int) else rng.randint(*spec.actions)
    return max(1, m // 2)


def generate_hidden_block_trace(spec: ProbTraceSpec, seed: int, posteriors: bool = True) -> ProbTrace:
    """The training trace for ``seed`` (module docstring); the same (spec, seed) gives the same trace."""
    check_hidden_block(spec)
    h, n = spec.hidden_block, spec.n
    rng = random.Random(f"deltalens-hidden-block:{seed}")
    python_seed = rng.randrange(spec.seed_range)
    hidden = random.Random(python_seed)  # the transcript's own random.seed stream
    det_share = spec.mix[0] / (spec.mix[0] + spec.mix[1])
    writer = _Writer(spec, python_seed)
    for _ in range(cycles_of(spec, rng)):
        i, j = sorted(rng.sample(range(h), 2))
        if rng.random() < det_share:
            writer.swap(i, j, random_swap=False, taken=True)
        else:
            writer.swap(i, j, random_swap=True, taken=hidden.random() < spec.swap_prob)
        partner, probe = rng.randrange(h), rng.randrange(h, n)
        if spec.probe_leak and rng.random() < spec.probe_leak:  # drawn only when set: old traces unchanged
            partner = rng.choice([v for v in range(h, n) if v != probe])
        writer.swap(min(partner, probe), max(partner, probe), random_swap=True, taken=hidden.random() < spec.swap_prob)
        writer.reveal(rng.randrange(h) if rng.random() < spec.query_prob else rng.randrange(h, n))
    return writer.trace(seed, python_seed, posteriors)


def hidden_block_adversary(
    spec: ProbTraceSpec, horizon: int, seed: int, opening: int = 1, drain: bool = True
) -> ProbTrace:
    """``horizon`` adversarial cycles, then one query of the most uncertain block variable (module
    docstring). The header has no seed: the adversary picks the leaks' outcomes, so it does not replay.

    ``drain=False`` is the control: each leak swaps the two first probe variables instead of a block
    variable and a probe (needs n - h >= 2). The lines are of the same kinds, the block actions and the
    query the same for a seed, and "no leak" tells nothing about the block in either, so the exact
    posteriors are equal; only the linear filter's block mass differs (about (1 - p/h)^H vs 1)."""
    check_hidden_block(spec)
    if not drain and spec.n - spec.hidden_block < 2:
        raise DeltalensError(
            f"the no-drain adversary leaks between two probe variables; {spec.group} with hidden_block = "
            f"{spec.hidden_block} has {spec.n - spec.hidden_block}."
        )
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
        raise DeltalensError(f"the horizon is a number of partial reveals >= 1, got {horizon!r}.")
    if not 1 <= opening <= horizon:
        raise DeltalensError(f"opening takes 1 to horizon random block swaps, got {opening!r}.")
    h, probe = spec.hidden_block, spec.hidden_block  # the first probe variable
    rng = random.Random(f"deltalens-hidden-adversary:{seed}")
    writer = _Writer(spec, None)
    m = point_marginals(writer.state)  # the unnormalised linear marginal filter, to aim the leaks
    for cycle in range(horizon):
        i, j = sorted(rng.sample(range(h), 2))
        if cycle < opening:
            kernel = writer.swap(i, j, random_swap=True, taken=rng.random() < spec.swap_prob)
        else:
            kernel = writer.swap(i, j, random_swap=False, taken=True)
        m = marginal_transition(m, kernel)
        partner = int(np.argmax(m[:h].sum(axis=1))) if drain else probe + 1  # greedy drain: heaviest block row
        m = marginal_transition(m, writer.swap(min(partner, probe), max(partner, probe), random_swap=True, taken=False))
        writer.reveal(probe)
        m = marginal_mask(m, probe, writer.state[probe])
    so_far = writer.trace(seed, None, posteriors=False)
    marginals = joint_filter(so_far.pfsa(), so_far.events).marginals[-1][:h]
    entropy = [-sum(p * math.log(p) for p in row if p > 0) for row in marginals]
    writer.reveal(int(np.argmax(entropy)))
    return writer.trace(seed, None, posteriors=True)


def linear_block_mass(trace: ProbTrace) -> np.ndarray:
    """Mass of the block rows of the unnormalised linear marginal filter after each reveal of
    ``trace`` (the quantity the leaks drain; the exact belief keeps mass h on them)."""
    run = run_linear_marginal(trace.n, trace.q0, trace.events, full_reset=False)
    h = trace.spec.hidden_block
    at = [k + 1 for k, event in enumerate(trace.events) if isinstance(event, Observation)]
    return np.array([run.marginals[k][:h].sum() for k in at])
