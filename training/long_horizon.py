"""PFSA-SR at long horizons: a trained model's KL to the exact belief after 50, 150, 300 partial reveals,
in fp32, bf16 and fp16.

A reveal's partial-reveal count is the number of partial reveals before it since the last full
one (the initial assignment counts as full), so "KL at 50" is the KL of the reveal that follows 50
partial reveals.

Why: the unnormalised linear filter's mass decays with every partial reveal (a print of one
variable) and only a full reveal restores it; in exact arithmetic nothing is lost, but a float
underflows to 0 after about 150 partial reveals in fp32, 134 in bf16 and 25 in fp16 (the adversary
of tasks/adversary.py; tasks/belief_decay.py measures it). So the question for a trained model
is whether its KL grows where the linear filter underflows, by dtype, and whether a non-linear
model (the LSTM) or the renormalised DeltaNet escapes it. Evaluated on traces without any full
reveal after the initial assignment, so the partial-reveal count runs from 1 to the horizon:

* ``random``: the checkpoint's own family at its evaluation spacing with `full_reveal_prob` 0
  and horizon x spacing actions (eval split);
* ``adversarial``: the adversary's mix / leak / reveal cycle, one partial reveal per cycle.

The model runs in each dtype (`model.to(dtype)`); this project's delta-rule kernels keep the
state in fp32 whatever the input dtype (as fla's do), so a dtype changes the projections, norms
and read-out, not the state's own underflow. A model that cannot take the length (a Transformer's
context) or the dtype on this device gets an `error` row instead of numbers.

    rows = long_horizon_kl(model, tokenizer, spec, horizons=(50, 150, 300))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pandas as pd
import torch

from deltalens.core.errors import DeltalensError
from deltalens.tasks.dataset import trace_seed
from deltalens.tasks.probabilistic import ProbTraceSpec, generate_prob_trace
from deltalens.training.belief_kl import adversarial_traces, reveal_kl, uniform_reveal_kl

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
WINDOW = 5  # KL at horizon h: the mean over partial-reveal counts h - WINDOW + 1 .. h (fewer outliers)


def long_traces(spec: ProbTraceSpec, horizon: int, count: int, kind: str, seed: int = 0) -> list:
    """``count`` traces with horizon + 1 partial reveals: the last one comes after ``horizon`` of them
    (a reveal's count is the number of partial reveals before it since the last full one)."""
    if kind == "adversarial":
        return adversarial_traces(spec, count, cycles=horizon + 1, seed=seed)
    if kind != "random":
        raise DeltalensError(f"kind must be random or adversarial, got {kind!r}")
    spacing = spec.spacing or 1
    long = dataclasses.replace(
        spec, actions=(horizon + 1) * spacing, full_reveal_prob=0.0, reveal_prob=None, spacing=spacing
    )
    return [generate_prob_trace(long, trace_seed(seed, "eval", i)) for i in range(count)]


def long_horizon_kl(
    model,
    tokenizer,
    spec: ProbTraceSpec,
    horizons: Sequence[int] = (50, 150, 300),
    dtypes: Sequence[str] = ("float32", "bfloat16", "float16"),
    n_traces: int = 32,
    kinds: Sequence[str] = ("random", "adversarial"),
    seed: int = 0,
    batch_size: int = 16,
) -> pd.DataFrame:
    """One row per (dtype, kind, partial-reveal count 1..max(horizons)): mean KL(exact || model)
    in nats, its count and the model's mass on value tokens; or one row with `error`. Rows with
    dtype "uniform" are the predictor that puts 1/n on every value, on the same traces: the scale."""
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        raise DeltalensError(f"unknown dtype(s) {unknown}; choose from {sorted(DTYPES)}")
    if not horizons or min(horizons) < 1:
        raise DeltalensError(f"horizons must be partial-reveal counts >= 1, got {list(horizons)}")
    longest = max(horizons)
    traces = {kind: long_traces(spec, longest, n_traces, kind, seed) for kind in kinds}
    original = next(model.parameters()).dtype
    # every dtype starts from the original weights (bf16 then fp16 would round twice), restored exactly after
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    frames: list[pd.DataFrame] = [uniform_kl(group, kind, longest) for kind, group in traces.items()]
    try:
        for name in dtypes:
            model.to(original)
            model.load_state_dict(saved)
            model.to(DTYPES[name])
            for kind, group in traces.items():
                try:
                    rows = reveal_kl(model, tokenizer, group, kind, batch_size=batch_size)
                except (RuntimeError, DeltalensError, ValueError) as err:  # context too short, dtype unsupported
                    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                    frames.append(pd.DataFrame([{"dtype": name, "kind": kind, "error": first[:200]}]))
                    continue
                table = (
                    rows.groupby("partial_reveals")
                    .agg(kl=("kl", "mean"), value_mass=("value_mass", "mean"), count=("kl", "size"))
                    .reset_index()
                )
                table.insert(0, "kind", kind)
                table.insert(0, "dtype", name)
                frames.append(table[table.partial_reveals <= longest])
    finally:
        model.to(original)
        model.load_state_dict(saved)
    return pd.concat(frames, ignore_index=True)


def uniform_kl(traces: list, kind: str, longest: int) -> pd.DataFrame:
    """KL(exact || uniform 1/n) by partial-reveal count: what a model that learned nothing scores."""
    rows = uniform_reveal_kl(traces, kind)
    rows = rows[rows.partial_reveals <= longest]
    table = rows.groupby("partial_reveals").agg(kl=("kl", "mean"), count=("kl", "size")).reset_index()
    table["value_mass"] = 1.0
    table.insert(0, "kind", kind)
    table.insert(0, "dtype", "uniform")
    return table


def at_horizons(rows: pd.DataFrame, horizons: Sequence[int]) -> list[dict[str, Any]]:
    """Per (dtype, kind, horizon): mean KL over the WINDOW counts ending at the horizon (or the error)."""
    out = []
    for (dtype, kind), group in rows.groupby(["dtype", "kind"], sort=False):
        if "error" in group and group["error"].notna().any():
            out += [
                {"dtype": dtype, "kind": kind, "horizon": h, "error": group["error"].dropna().iloc[0]} for h in horizons
            ]
            continue
        for h in horizons:
            window = group[(group.partial_reveals > h - WINDOW) & (group.partial_reveals <= h)]
            out.append(
                {
                    "dtype": dtype,
                    "kind": kind,
                    "horizon": h,
                    "kl": float(window.kl.mean()) if len(window) else None,
                    "value_mass": float(window.value_mass.mean()) if len(window) else None,
                    "count": int(window["count"].sum()),
                }
            )
    return out
