"""A trained model on the hidden-block adversary (tasks/hidden_block.py): KL at the late query.

For each horizon H (partial reveals before the query) the same ``n_traces`` adversary traces go to
every model; the measure is KL(exact || model) at the query's value, where the exact predictive is
the opening's mixture carried through H swaps and H "no leak" reveals. Beside it, two guesses on
the same traces (``guess_kl``):

* uniform: 1/n on every value (a model that learned nothing);
* block uniform: 1/(n - 1) on every value but the one the probe showed last (a model that knows
  which values the block holds and nothing about their arrangement);
* last reveal: the value the queried variable showed when it was last printed (here: its initial
  value), smoothed with eps/n on every value, eps the best for these traces (a generous baseline;
  an unsmoothed guess would score infinity whenever the value moved).

``guess_kl`` also gives the linear marginal filter's block mass at the query
(``tasks.hidden_block.linear_block_mass``), the quantity the theory says a linear recurrence loses;
probes/belief_probes.py has the states' side (norms, decoded beliefs).

    rows = query_kl(model, tokenizer, spec, horizons=(50, 100, 150, 200, 300))
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from deltalens.core.display import progress
from deltalens.core.errors import DeltalensError
from deltalens.tasks.hidden_block import hidden_block_adversary, linear_block_mass
from deltalens.tasks.probabilistic import ProbTrace, ProbTraceSpec
from deltalens.training.belief_kl import reveal_kl

HORIZONS = (10, 20, 50, 100, 150, 200, 300)  # the training traces have 4 to 16 cycles
EPS_GRID = np.linspace(0.01, 0.99, 99)


def adversary_traces(spec: ProbTraceSpec, horizon: int, n_traces: int, seed: int = 0) -> list[ProbTrace]:
    """The adversary's traces at one horizon; trace i is the same for every model."""
    if not spec.hidden_block:
        raise DeltalensError("the checkpoint's task is not a hidden-block family (task.hidden_block = 0).")
    return [hidden_block_adversary(spec, horizon, seed=seed * 1_000_003 + i) for i in range(n_traces)]


def query_kl(
    model, tokenizer, spec: ProbTraceSpec, horizons: Sequence[int] = HORIZONS, n_traces: int = 32, batch_size: int = 8
) -> pd.DataFrame:
    """One row per (horizon, trace): KL(exact || model) at the query, the model's mass on value
    tokens, p and q; a horizon the model cannot take (a context too short) gives one `error` row."""
    rows = []
    for horizon in progress(list(horizons), desc="hidden-block horizons", unit="horizon"):
        traces = adversary_traces(spec, horizon, n_traces)
        try:
            kl = reveal_kl(model, tokenizer, traces, kind="adversary", batch_size=batch_size)
        except (DeltalensError, RuntimeError, IndexError) as err:
            rows.append({"horizon": horizon, "error": str(err).splitlines()[0][:200]})
            continue
        last = kl.groupby("trace").tail(1)  # the query is each trace's last reveal
        for row in last.itertuples():
            rows.append(
                {
                    "horizon": horizon,
                    "trace": row.trace,
                    "kl": row.kl,
                    "value_mass": row.value_mass,
                    "p": row.p,
                    "q": row.q,
                }
            )
    return pd.DataFrame(rows)


def _last_shown(trace: ProbTrace) -> int:
    """The value the query's variable showed at its previous print, or its initial value."""
    query = trace.reveals[-1].variables[0]
    for reveal in reversed(trace.reveals[:-1]):
        if query in reveal.variables:
            return reveal.values[reveal.variables.index(query)]
    return trace.q0[query]


def _block_uniform(trace: ProbTrace) -> np.ndarray:
    """1/(n - 1) on every value but the last one a probe variable showed before the query."""
    h, n = trace.spec.hidden_block, trace.n
    probe_value = next(r.values[0] for r in reversed(trace.reveals[:-1]) if r.variables[0] >= h)
    q = np.full(n, 1 / (n - 1))
    q[probe_value - 1] = 0.0
    return q


def guess_kl(spec: ProbTraceSpec, horizons: Sequence[int] = HORIZONS, n_traces: int = 32) -> dict:
    """Mean KL of the uniform, block-uniform and (best-eps) last-reveal guesses at each horizon's queries."""
    n = spec.n
    per_horizon, pairs = {}, []
    for horizon in horizons:
        traces = adversary_traces(spec, horizon, n_traces)
        exact = [np.asarray(t.posteriors[-1][0].predictive) for t in traces]
        shown = [_last_shown(t) for t in traces]
        block = [_block_uniform(t) for t in traces]
        per_horizon[horizon] = {
            "uniform": float(np.mean([sum(p * math.log(p * n) for p in e if p > 0) for e in exact])),
            "block_uniform": float(
                np.mean([sum(p * math.log(p / q[i]) for i, p in enumerate(e) if p > 0) for e, q in zip(exact, block)])
            ),
            "block_mass": float(np.mean([linear_block_mass(t)[-2] for t in traces])),
        }
        pairs += [(horizon, e, v) for e, v in zip(exact, shown)]

    def mean_kl(eps: float, horizon: int | None = None) -> float:
        kls = []
        for h, e, v in pairs:
            if horizon is not None and h != horizon:
                continue
            q = np.full(n, eps / n)
            q[v - 1] += 1 - eps
            kls.append(sum(p * math.log(p / q[i]) for i, p in enumerate(e) if p > 0))
        return float(np.mean(kls))

    eps = float(min(EPS_GRID, key=mean_kl))
    for horizon in horizons:
        per_horizon[horizon]["last_reveal"] = mean_kl(eps, horizon)
    return {"eps": eps, "by_horizon": per_horizon}
