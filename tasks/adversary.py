"""Adversarial PFSA-SR sequences: the unnormalised marginal belief decays at a known rate.

The marginal representation lets a linear RNN inject certainty for revealed entries (reveal of
variable i = v: row i <- e_v), so reveals do not by themselves drain the mass the way they drain
the joint. An adversary defeats it by revealing only a "probe" variable, never the variables
whose entries it wants to drain, and by leaking their mass into the probe with random swaps.

The sequence (``adversarial_sequence``), from the known state q0 = (1, 2, ..., n), repeats a
cycle of three inputs; the hidden block is the first h variables, the probe is variable h::

    mix     the block is shuffled uniformly: h = 2 a fair swap
                ``a, b = (b, a) if random.random() < 0.5 else (a, b)``;
            h > 2 a ``random.choice`` over the h cyclic rotations of the block
    leak    ``b, c = (c, b) if random.random() < p else (b, c)``   (last block variable, probe)
    reveal  ``print('c', c)`` -> ``c 3``: the probe still holds its own value (the adversary picks
            the outcome "no leak", which has probability 1 - p > 0 every cycle; no full reset)

The chosen entries are M[i, v] for the block variables i < h and the block values v <= h.

Decay rate (derivation). Let S_k be the unnormalised mass on the chosen entries after k cycles
of the linear marginal filter (``tasks.pfsa.run_linear_marginal``), S_0 = h.

1. mix: every block row becomes the average of the block rows (a mixture of the h rotations
   with weight 1/h each). Linear and mass-preserving; afterwards each block row holds S_k / h,
   spread evenly over the block values (by induction: true at k = 0 after the first mix).
2. leak: row h-1 <- (1 - p) row_{h-1} + p row_probe and row_probe <- p row_{h-1} +
   (1 - p) row_probe. The probe row is e_{v*} (v* = h + 1, the probe's value), so p S_k / h of
   chosen mass moves into the probe row and p e_{v*} moves into row h-1.
3. reveal probe = v*: the linear reveal (mask + inject) resets the probe row to e_{v*}, which
   deletes the p S_k / h of chosen mass it had received, and zeroes column v* in the other rows,
   which deletes the p e_{v*} that row h-1 received (no chosen entry is in column v*).

Net: S_{k+1} = S_k - p S_k / h, so **S_k = h (1 - p/h)^k exactly**, a decay of ``1 - p/h`` per
cycle and per partial reveal (3/4 for h = 2, p = 1/2; it approaches 1/2 as p -> 1 with h = 2).
After cycle k >= 1 the block rows other than h-1 hold entries S_{k-1} / h^2 and row h-1 holds
(1 - p) S_{k-1} / h^2 per entry.

Meanwhile the exact posterior does not move: the leak is independent of the block's arrangement,
so conditioning on "no leak" leaves the block uniform, every chosen entry is 1/h forever, and the
normalised marginal filter (Sinkhorn) is exact here. The joint representation fares worse: its
unnormalised mass is P(all reveals) = (1 - p)^k.

In a dtype whose smallest subnormal is 2^-e, an entry rounds to 0 once it falls to half of that,
so the chosen mass hits exactly 0 near cycle k with S_{k-1} / h^2 <= 2^-(e+1)
(``predicted_underflow_cycle``; measured 0 to 3 cycles earlier, as rounding in the subnormal
range loses a little extra). One exception, measured in tasks/belief_decay.py: with p = 1/2
every step multiplies by exactly 1/2, and round-half-to-even turns half of 3 units of the
smallest subnormal into 2, so the mass stalls at a few units instead of reaching 0 (it is still
off the law by orders of magnitude: the belief is gone either way).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import VARIABLE_NAMES, apply_permutation, identity, transposition
from deltalens.tasks.pfsa import Action, Event, Observation, joint_filter
from deltalens.tasks.probabilistic import (
    ProbTrace,
    ProbTraceSpec,
    choice_statement,
    group_posteriors,
    rotation,
    swap_statement,
)
from deltalens.tasks.traces import LINE_ACTION, LINE_INIT, LINE_OUTPUT, LINE_PRINT, PROMPT, LineInfo, Reveal


@dataclass(frozen=True)
class AdversarySpec:
    n: int = 3  # variables; needs n >= block + 1 (the extra ones sit still)
    block: int = 2  # h: hidden variables 0..h-1, mixed every cycle and never revealed
    p: float = 0.5  # leak probability: the probe swaps with variable h-1
    cycles: int = 40  # cycles = partial reveals

    def __post_init__(self) -> None:
        if not 2 <= self.block < self.n:
            raise DeltalensError(
                f"the adversary needs 2 <= block < n (a probe variable), got block={self.block}, n={self.n}."
            )
        if not 0.0 < self.p < 1.0:
            raise DeltalensError(f"the leak probability must be strictly between 0 and 1, got {self.p}.")
        if self.cycles < 1:
            raise DeltalensError(f"the adversary needs at least one cycle, got {self.cycles}.")

    @property
    def rate(self) -> float:
        """Factor per cycle (= per partial reveal) of the chosen entries' unnormalised mass."""
        return 1.0 - self.p / self.block

    @property
    def joint_rate(self) -> float:
        """Factor per cycle of the unnormalised joint mass: P(no leak) = 1 - p."""
        return 1.0 - self.p


@dataclass
class AdversarialSequence:
    spec: AdversarySpec
    q0: tuple[int, ...]
    events: list[Event]
    chosen: list[tuple[int, int]]  # (variable, value) entries the adversary drains
    reveal_events: list[int]  # index of each cycle's reveal in ``events``
    probe: int  # the revealed variable
    mix: Action  # the block shuffle
    leak: Action  # the probe swap

    @property
    def rate(self) -> float:
        return self.spec.rate

    def predicted_mass(self, cycles: np.ndarray | int) -> np.ndarray:
        """S_k = h (1 - p/h)^k."""
        return self.spec.block * self.spec.rate ** np.asarray(cycles, dtype=np.float64)

    def chosen_mass(self, m: np.ndarray) -> float:
        """Sum of the chosen entries of a marginal matrix M (values are 1-based)."""
        return float(sum(m[i, v - 1] for i, v in self.chosen))

    def text(self) -> str:
        """The sequence as a transcript. It has no seed: the adversary picks the outcomes, so it
        does not replay in Python, but ``deltalens belief`` reads it."""
        names = VARIABLE_NAMES
        lines = [">>> import random\n"] + [f">>> {names[i]} = {v}\n" for i, v in enumerate(self.q0)]
        h, probe = self.spec.block, self.probe
        for event in self.events:
            if isinstance(event, Observation):
                lines += [f">>> print('{names[probe]}', {names[probe]})\n", f"{names[probe]} {event.values[0]}\n"]
            elif event == self.leak:
                lines.append(f">>> {swap_statement(h - 1, probe, self.spec.p)}\n")
            elif h == 2:
                lines.append(f">>> {swap_statement(0, 1, 0.5)}\n")
            else:
                lines.append(f">>> {choice_statement(tuple(range(h)))}\n")
        return "".join(lines)


def adversarial_sequence(n: int = 3, block: int = 2, p: float = 0.5, cycles: int = 40) -> AdversarialSequence:
    """The mix / leak / reveal cycle of the module docstring, ``cycles`` times."""
    spec = AdversarySpec(n, block, p, cycles)
    h, probe = block, block
    q0 = tuple(range(1, n + 1))
    if h == 2:
        mix = Action.swap(n, 0, 1, 0.5)
    else:
        mix = Action.choice([rotation(n, tuple(range(h)), s) for s in range(h)])
    leak = Action.swap(n, h - 1, probe, p)
    reveal = Observation((probe,), (q0[probe],))
    events: list[Event] = []
    reveal_events = []
    for _ in range(cycles):
        events += [mix, leak, reveal]
        reveal_events.append(len(events) - 1)
    chosen = [(i, v) for i in range(h) for v in range(1, h + 1)]
    return AdversarialSequence(spec, q0, events, chosen, reveal_events, probe, mix, leak)


def predicted_underflow_cycle(spec: AdversarySpec, smallest_subnormal: float) -> int:
    """First cycle k whose largest chosen entry, S_{k-1} / h^2, is at most half the smallest
    subnormal, so that it rounds to 0 (ties go to the even neighbour, 0)."""
    h = spec.block
    # S_{k-1} / h^2 = (1 - p/h)^(k-1) / h <= tiny / 2
    k_minus_1 = (math.log(smallest_subnormal) - math.log(2) + math.log(h)) / math.log(spec.rate)
    return max(1, math.ceil(k_minus_1 - 1e-12) + 1)


def adversarial_trace(sequence: AdversarialSequence, seed: int = 0) -> ProbTrace:
    """The sequence as a ProbTrace that tokenizers encode and models read: the block shuffle's
    outcome is drawn from ``seed``, the leak never happens (the outcome the adversary reveals),
    and every printed value carries its exact posterior predictive, as in generated traces.

    Its spec is the probabilistic family whose statements it uses (random swaps with the leak's
    p), so the ``statement-prob`` tokenizer of that family encodes it."""
    adv = sequence.spec
    if adv.block != 2:
        raise DeltalensError("adversarial traces for models use block = 2 (a random swap as the shuffle).")
    n, probe = adv.n, sequence.probe
    rng = np.random.default_rng(seed)
    family = ProbTraceSpec(
        group=f"S{n}",
        actions=3 * adv.cycles,
        mix=(0.0, 1.0, 0.0),
        swap_prob=adv.p,
        spacing=3,
        full_reveal_prob=0.0,
        identity_init=True,
    )
    names = VARIABLE_NAMES
    lines = [f"{PROMPT}import random\n"] + [f"{PROMPT}{names[i]} = {v}\n" for i, v in enumerate(sequence.q0)]
    info = [LineInfo(LINE_INIT, 0)] + [LineInfo(LINE_INIT, 0, variables=(i,)) for i in range(n)]
    state = sequence.q0
    states, actions, kinds, kernels, reveals = [state], [], [], [], []
    for event in sequence.events:
        t = len(actions)
        if isinstance(event, Observation):
            lines.append(f"{PROMPT}print('{names[probe]}', {names[probe]})\n")
            lines.append(f"{names[probe]} {state[probe]}\n")
            info += [LineInfo(LINE_PRINT, t, variables=(probe,)), LineInfo(LINE_OUTPUT, t, variables=(probe,))]
            reveals.append(Reveal(len(lines) - 1, t, (probe,), (state[probe],)))
            continue
        i, j = (0, 1) if event == sequence.mix else (adv.block - 1, probe)
        p = 0.5 if event == sequence.mix else adv.p
        taken = event == sequence.mix and rng.random() < 0.5  # the leak is never taken
        realised = transposition(n, i, j) if taken else identity(n)
        state = apply_permutation(state, realised)
        kernels.append(Action.swap(n, i, j, p, line=len(lines) + 1))
        lines.append(f"{PROMPT}{swap_statement(i, j, p)}\n")
        info.append(LineInfo(LINE_ACTION, t + 1, action=t))
        states.append(state)
        actions.append(realised)
        kinds.append("swap")
    trace = ProbTrace(
        family,
        seed,
        lines,
        info,
        actions,
        states,
        reveals,
        python_seed=None,
        kinds=kinds,
        kernels=kernels,
    )
    trace.posteriors = group_posteriors(joint_filter(trace.pfsa(), trace.events).reveals, reveals)
    return trace
