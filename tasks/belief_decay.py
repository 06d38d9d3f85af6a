"""Belief decay without renormalisation: how fast a linear RNN's belief mass drains, and when it hits 0.

Two measurements on the PFSA-SR of tasks/pfsa.py (no trained model needed):

(a) ``joint_decay`` (``halving_decay``, ``random_joint_decay``): the unnormalised joint belief b~_t
    (n! entries) is masked by every partial reveal and never renormalised, so its mass ||b~_t||_1
    equals P(o_1, ..., o_k), the probability of what has been revealed (the *law*, computed by
    the exact float64 filter).
    **Exactly 1/2 per reveal** (the paper's 1/2, 1/4, 1/8 ...) needs every reveal to have
    predictive probability 1/2: ``halving_sequence`` = from a known state, a fair swap
    ``a, b = (b, a) if random.random() < 0.5 else (a, b)`` then ``print('a', a)``. The belief
    before the swap is a point mass of size 2^-k, the swap splits it into two entries of
    2^-(k+1), and the reveal keeps one of them: mass 2^-(k+1), again a point mass. Transitions
    (stochastic matrices) never change the mass; only reveals do, by their predictive
    probability (so a swap with p != 1/2 gives factors p or 1 - p, a reveal that does not
    split the support gives 1). In a dtype whose smallest subnormal is 2^-e the split entries
    2^-(k+1) round to 0 (a tie, rounded to the even neighbour 0) once k + 1 = e + 1: the mass is
    exactly 0 at partial reveal **e + 1**: fp16 (2^-24) 25, bf16 (2^-133) 134, fp32 (2^-149)
    150, fp64 (2^-1074) 1075 (``predicted_halving_underflow``). On other sequences the entries
    are spread over several states and the largest one decides (``JointDecay.predicted``).
(b) ``marginal_decay``: the unnormalised marginal belief M~_t (n x n; transitions exact, reveal =
    mask + injected certainty) on random probabilistic traces with partial reveals only, and on
    the adversary of tasks/adversary.py. Random reveals keep re-pinning rows, so the mass
    stays bounded; the adversary drains its chosen entries by exactly (1 - p/h) per reveal until
    they round to 0 (or, for p = 1/2, stall a few units above it: see ``marginal_decay``).

Reported per dtype: ``underflow`` (first partial reveal with the tracked mass exactly 0),
``predicted`` (from the float64 law), and ``lost`` (first reveal more than 50 % off the law).

All arithmetic runs in torch in each dtype (``DTYPES``); masses are summed in float64 afterwards
so the sum itself never underflows. Each measurement returns a dataclass with a pandas frame;
``joint_decay_figure`` / ``marginal_decay_figure`` draw them with plotly.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError
from deltalens.tasks.adversary import adversarial_sequence, predicted_underflow_cycle
from deltalens.tasks.pfsa import (
    PFSA,
    Action,
    Event,
    Observation,
    joint_filter,
    point_marginals,
    run_linear_joint,
    run_linear_marginal,
)
from deltalens.tasks.probabilistic import ProbTraceSpec, generate_prob_trace

DTYPES = ("float64", "float32", "bfloat16", "float16")


def torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise DeltalensError(f"unknown dtype {name!r}; use one of {', '.join(DTYPES)}.")
    return getattr(torch, name)


def smallest_subnormal(name: str) -> float:
    """The smallest positive number the dtype holds: tiny * eps (2^-24 for fp16)."""
    info = torch.finfo(torch_dtype(name))
    return info.tiny * info.eps


def predicted_halving_underflow(name: str) -> int:
    """Partial reveal at which the halving sequence's mass is exactly 0: e + 1 for 2^-e subnormal."""
    return round(-math.log2(smallest_subnormal(name))) + 1


# --- sequences ------------------------------------------------------------------------------------


def halving_sequence(reveals: int, n: int = 3, p: float = 0.5, seed: int = 0) -> tuple[tuple[int, ...], list[Event]]:
    """From q0 = (1..n): ``reveals`` times a swap of a and b with probability p, then print a.

    The printed values follow one sampled run (any run gives the same law for p = 1/2).
    """
    rng = random.Random(seed)
    q0 = tuple(range(1, n + 1))
    swap = Action.swap(n, 0, 1, p)
    a = q0[0]
    events: list[Event] = []
    for _ in range(reveals):
        events.append(swap)
        if rng.random() < p:
            a = 3 - a  # a and b hold 1 and 2 between them
        events.append(Observation((0,), (a,)))
    return q0, events


def _partial_reveal_rows(events: Sequence[Event], n: int) -> list[int]:
    """Event index of every partial reveal, in order."""
    return [e for e, ev in enumerate(events) if isinstance(ev, Observation) and not ev.is_full(n)]


def _log2_law(pfsa: PFSA, events: Sequence[Event]) -> np.ndarray:
    """(E + 1,) log2 of the exact unnormalised mass: the sum of log2 P(printed value | past) since
    the last full reveal (a full reveal resets to mass 1). Kept in log2 so that 1/2 per reveal is
    exact and the law itself never underflows."""
    result = joint_filter(pfsa, events)
    by_event: dict[int, float] = {}
    for post in result.reveals:
        by_event[post.event] = by_event.get(post.event, 0.0) + math.log2(post.probability)
    out, log_mass = [0.0], 0.0
    for e, ev in enumerate(events):
        if isinstance(ev, Observation):
            log_mass = 0.0 if ev.is_full(pfsa.n) else log_mass + by_event[e]
        out.append(log_mass)
    return np.array(out)


# --- (a) the joint representation ---------------------------------------------------------------------


@dataclass(repr=False)
class JointDecay(Summary):
    """Unnormalised joint mass after every partial reveal, per dtype."""

    frame: pd.DataFrame  # dtype, reveal (1..K), mass, law, log2_law, max_entry
    underflow: dict[str, int | None]  # first partial reveal with mass exactly 0 (None: not within K)
    predicted: dict[str, int | None]  # where the float64 law says it should be
    lost: dict[str, int | None] = field(default_factory=dict)  # first reveal off the law by > 50 %
    description: str = ""

    def display_frame(self) -> pd.DataFrame:
        return self.summary()

    def summary(self) -> pd.DataFrame:
        return pd.DataFrame({"underflow": self.underflow, "predicted": self.predicted, "lost": self.lost})


def joint_decay(
    q0: Sequence[int], events: Sequence[Event], dtypes: Sequence[str] = DTYPES, description: str = ""
) -> JointDecay:
    """Run the unnormalised joint filter in every dtype and compare with the exact law.

    The prediction: the mass is 0 from the first event whose float64 largest entry is at most
    half the dtype's smallest subnormal (such an entry rounds to 0, and so do all the others).
    """
    q0 = tuple(q0)
    pfsa = PFSA(len(q0), q0)
    log2_law = _log2_law(pfsa, events)
    rows = _partial_reveal_rows(events, pfsa.n)
    exact = run_linear_joint(pfsa, events, b0=pfsa.initial_belief())
    records, underflow, predicted, lost = [], {}, {}, {}
    for name in dtypes:
        run = run_linear_joint(pfsa, events, b0=torch.from_numpy(pfsa.initial_belief()).to(torch_dtype(name)))
        for k, e in enumerate(rows, start=1):
            records.append(
                {
                    "dtype": name,
                    "reveal": k,
                    "mass": run.mass[e + 1],
                    "law": 2.0 ** log2_law[e + 1],
                    "log2_law": log2_law[e + 1],
                    "max_entry": run.max_entry[e + 1],
                }
            )
        underflow[name] = next((k for k, e in enumerate(rows, start=1) if run.mass[e + 1] == 0.0), None)
        predicted[name] = _first_below(exact.max_entry, rows, smallest_subnormal(name) / 2)
        lost[name] = _first_lost([run.mass[e + 1] for e in rows], [log2_law[e + 1] for e in rows])
    return JointDecay(pd.DataFrame.from_records(records), underflow, predicted, lost, description)


def _first_lost(measured: Sequence[float], log2_law: Sequence[float], tolerance: float = 0.5) -> int | None:
    """First reveal (1-based) where the measured mass is off the law by more than ``tolerance``
    (relative): the belief no longer carries the right numbers, whether it hit 0 or stalled."""
    for k, (x, y) in enumerate(zip(measured, log2_law), start=1):
        if x <= 0 or abs(2.0 ** (math.log2(x) - y) - 1.0) > tolerance:
            return k
    return None


def _first_below(peaks: np.ndarray, rows: list[int], limit: float) -> int | None:
    """First partial reveal k at or before which the float64 largest entry has been <= limit."""
    lowest = np.minimum.accumulate(peaks)
    return next((k for k, e in enumerate(rows, start=1) if lowest[e + 1] <= limit), None)


def halving_decay(reveals: int = 1100, n: int = 3, dtypes: Sequence[str] = DTYPES) -> JointDecay:
    """(a): the 1/2, 1/4, 1/8 ... law and its underflow step per dtype."""
    q0, events = halving_sequence(reveals, n=n)
    out = joint_decay(q0, events, dtypes, description=f"fair swap + partial reveal, n={n}")
    out.predicted = {name: (k if (k := predicted_halving_underflow(name)) <= reveals else None) for name in dtypes}
    return out


def random_joint_decay(
    reveals: int = 200, spec: ProbTraceSpec | None = None, seed: int = 0, dtypes: Sequence[str] = DTYPES
) -> JointDecay:
    """(a) on a random probabilistic trace with partial reveals only (law = its likelihood)."""
    spec = spec or ProbTraceSpec(
        group="S3", actions=reveals * 2, spacing=2, full_reveal_prob=0.0, mix=(0.2, 0.5, 0.3), swap_prob=0.3
    )
    trace = generate_prob_trace(spec, seed)
    return joint_decay(trace.q0, trace.events, dtypes, description=f"random {spec.group} trace, seed {seed}")


# --- (b) the marginal representation -------------------------------------------------------------------


@dataclass(repr=False)
class MarginalDecay(Summary):
    """Unnormalised marginal mass after every partial reveal, per sequence and dtype."""

    frame: pd.DataFrame  # sequence, dtype, reveal, min_row_mass, total_mass, chosen_mass, law
    underflow: dict[tuple[str, str], int | None]  # (sequence, dtype) -> first reveal with tracked mass 0
    predicted: dict[tuple[str, str], int | None]
    lost: dict[tuple[str, str], int | None]  # adversarial: first reveal off the law by > 50 %
    rate: float  # the adversary's stated decay per reveal (1 - p/h)
    measured_rate: float  # geometric mean of chosen_mass ratios in float64
    notes: dict[str, str] = field(default_factory=dict)

    def display_frame(self) -> pd.DataFrame:
        return self.summary()

    def summary(self) -> pd.DataFrame:
        keys = sorted(self.underflow)
        return pd.DataFrame(
            {
                "underflow": [self.underflow[k] for k in keys],
                "predicted": [self.predicted[k] for k in keys],
                "lost": [self.lost.get(k) for k in keys],
            },
            index=pd.MultiIndex.from_tuples(keys, names=["sequence", "dtype"]),
        )


def _marginal_records(name: str, sequence: str, n: int, q0, events, chosen=None, law=None):
    m0 = torch.from_numpy(point_marginals(q0)).to(torch_dtype(name))
    run = run_linear_marginal(n, q0, events, m0=m0)
    rows = _partial_reveal_rows(events, n)
    records = []
    for k, e in enumerate(rows, start=1):
        m = run.marginals[e + 1]
        records.append(
            {
                "sequence": sequence,
                "dtype": name,
                "reveal": k,
                "min_row_mass": float(m.sum(axis=1).min()),
                "total_mass": float(m.sum() / n),
                "chosen_mass": float(sum(m[i, v - 1] for i, v in chosen)) if chosen else np.nan,
                "law": float(law[k - 1]) if law is not None else np.nan,
            }
        )
    return records


def marginal_decay(
    cycles: int = 400,
    n: int = 3,
    block: int = 2,
    p: float = 0.75,
    random_reveals: int = 400,
    seed: int = 0,
    dtypes: Sequence[str] = DTYPES,
) -> MarginalDecay:
    """(b): the linear marginal filter on a random trace vs on the adversary.

    Tracked mass: the adversary's chosen entries (law h (1 - p/h)^k); for the random trace the
    smallest row mass (a row at 0 means a variable has no value left).

    The default leak p = 0.75 (rate 0.625) reaches exactly 0. With p = 0.5 (rate 0.75) every
    dtype follows the law down to a few units of its smallest subnormal and then STALLS there:
    each step halves (0.5 * x, rounded to nearest even), and half of 3 units rounds up to 2, so
    round-to-nearest finds a fixed point (about 12 units of 2^-24 in fp16) and the mass never
    reaches 0. ``lost`` (first reveal more than 50 % off the law) catches both endings.
    """
    adv = adversarial_sequence(n=n, block=block, p=p, cycles=cycles)
    ks = np.arange(1, cycles + 1)
    law = adv.predicted_mass(ks)
    spec = ProbTraceSpec(
        group=f"S{n}",
        actions=random_reveals * 2,
        spacing=2,
        full_reveal_prob=0.0,
        mix=(0.2, 0.5, 0.3),
        swap_prob=0.3,
        choice_size=min(3, n),
    )
    trace = generate_prob_trace(spec, seed)
    records, underflow, predicted, lost = [], {}, {}, {}
    for name in dtypes:
        recs = _marginal_records(name, "adversarial", n, adv.q0, adv.events, adv.chosen, law)
        underflow[("adversarial", name)] = next((r["reveal"] for r in recs if r["chosen_mass"] == 0.0), None)
        lost[("adversarial", name)] = _first_lost([r["chosen_mass"] for r in recs], np.log2(law))
        k = predicted_underflow_cycle(adv.spec, smallest_subnormal(name))
        predicted[("adversarial", name)] = k if k <= cycles else None
        records += recs
        recs = _marginal_records(name, "random", n, trace.q0, trace.events)
        underflow[("random", name)] = next((r["reveal"] for r in recs if r["min_row_mass"] == 0.0), None)
        predicted[("random", name)] = None
        records += recs
    frame = pd.DataFrame.from_records(records)
    # the rate in float64 numpy, whatever dtypes were asked for
    run = run_linear_marginal(n, adv.q0, adv.events)
    exact = np.array([adv.chosen_mass(run.marginals[e + 1]) for e in adv.reveal_events])
    positive = exact[exact > 0]
    measured = float(np.exp(np.mean(np.diff(np.log(positive))))) if len(positive) > 1 else float("nan")
    notes = {
        "adversarial": f"n={n}, block h={block}, leak p={p}: chosen mass h (1 - p/h)^k, rate {adv.rate:g} per reveal",
        "random": f"random {spec.group} trace (seed {seed}), mix {spec.mix}, partial reveals only",
    }
    return MarginalDecay(frame, underflow, predicted, lost, adv.rate, measured, notes)


# --- figures ------------------------------------------------------------------------------------------

_COLOURS = {"float64": "#1f77b4", "float32": "#2ca02c", "bfloat16": "#ff7f0e", "float16": "#d62728"}


def _underflow_markers(fig: go.Figure, underflow: dict, label: str = "") -> None:
    for key, k in underflow.items():
        name = key[-1] if isinstance(key, tuple) else key
        if k is not None:
            fig.add_vline(
                x=k,
                line_dash="dot",
                line_color=_COLOURS.get(name, "grey"),
                annotation_text=f"{label}{name}: 0 at {k}",
                annotation_textangle=-90,
            )


# a legend under the plot, not beside it: the dashboard draws these two side by side, at half a window's width
LEGEND_BELOW = {"legend": {"orientation": "h", "yanchor": "top", "y": -0.22, "x": 0}, "height": 520}


def joint_decay_figure(result: JointDecay) -> go.Figure:
    """log-scale mass vs partial reveals, one line per dtype, the exact law dashed."""
    fig = go.Figure()
    frame = result.frame
    law = frame[frame.dtype == frame.dtype.iloc[0]]
    for name, part in frame.groupby("dtype", sort=False):
        part = part[part.mass > 0]  # a log axis cannot show the zeros; the markers do
        fig.add_trace(
            go.Scatter(x=part.reveal, y=part.mass, name=name, mode="lines", line=dict(color=_COLOURS.get(name)))
        )
    law_line = dict(color="black", dash="dash", width=1.5)  # drawn last, on top of the dtypes; listed first
    fig.add_trace(go.Scatter(x=law.reveal, y=law.law, name="law P(reveals)", line=law_line, legendrank=1))
    _underflow_markers(fig, result.underflow)
    fig.update_layout(
        title=f"Unnormalised joint belief mass ({result.description})",
        xaxis_title="partial reveals",
        yaxis_title="mass ‖b̃‖₁ (log scale)",
        yaxis_type="log",
        yaxis_exponentformat="power",  # 10^-12, not "1p", beside 10^-24
        template="plotly_white",
        **LEGEND_BELOW,
    )
    return fig


def marginal_decay_figure(result: MarginalDecay) -> go.Figure:
    """Adversarial chosen mass and random-trace smallest row mass vs partial reveals, per dtype."""
    fig = go.Figure()
    frame = result.frame
    adv = frame[frame.sequence == "adversarial"]
    law = adv[adv.dtype == adv.dtype.iloc[0]]
    for (sequence, name), part in frame.groupby(["sequence", "dtype"], sort=False):
        column = "chosen_mass" if sequence == "adversarial" else "min_row_mass"
        part = part[part[column] > 0]
        fig.add_trace(
            go.Scatter(
                x=part.reveal,
                y=part[column],
                name=f"{sequence} {name}",
                mode="lines",
                line=dict(color=_COLOURS.get(name), dash="solid" if sequence == "adversarial" else "dot"),
            )
        )
    law_line = dict(color="black", dash="dash", width=1.5)  # drawn last: on top of the dtypes that follow it
    law_name = f"law h(1-p/h)^k, rate {result.rate:g}"
    fig.add_trace(go.Scatter(x=law.reveal, y=law.law, name=law_name, line=law_line, legendrank=1))  # listed first
    _underflow_markers(fig, {k: v for k, v in result.underflow.items() if k[0] == "adversarial"}, "adversary ")
    fig.update_layout(
        title="Unnormalised marginal belief: adversarial (chosen entries) vs random (smallest row)",
        xaxis_title="partial reveals",
        yaxis_title="mass (log scale)",
        yaxis_type="log",
        yaxis_exponentformat="power",  # 10^-12, not "1p", beside 10^-24
        template="plotly_white",
        **LEGEND_BELOW,
    )
    return fig
