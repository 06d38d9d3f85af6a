"""The PFSA-SR section of `deltalens reproduce`: belief decay (a, b) and trained models' KL (c).

(a) and (b) need no model (tasks/belief_decay.py, seconds on a CPU). (c) reads what the
probabilistic checkpoints recorded when they were exported (`metrics.belief_kl` in their
config.json, written by loading/export.py with training/belief_kl.py), so the report never
retrains or re-evaluates them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from deltalens import models
from deltalens.loading.opened import open_checkpoint
from deltalens.reports.numbers import mean_range
from deltalens.tasks.belief_decay import halving_decay, joint_decay_figure, marginal_decay, marginal_decay_figure
from deltalens.training.belief_kl import BeliefKL, adversarial_traces, kl_figure, random_traces, uniform_reveal_kl
from lab.experiments.report.hidden_block_section import hidden_block_figure, hidden_block_lines

MAX_PARTIAL = 8  # columns of the KL table: partial reveals since the last full reveal


@dataclass
class PfsaSection:
    lines: list[str]  # markdown, figures not included
    figures: list[tuple[str, str, go.Figure]]  # (file stem, title, figure)


def probabilistic_checkpoints(root: Path) -> dict[str, dict[str, Any]]:
    """name -> metrics.belief_kl of every checkpoint under ``root`` trained on probabilistic traces."""
    found: dict[str, dict[str, Any]] = {}
    if not Path(root).is_dir():
        return found
    for path in sorted(p for p in Path(root).iterdir() if (p / "config.json").is_file()):
        meta = models.read_checkpoint_meta(path)
        kl = (meta.get("metrics") or {}).get("belief_kl")
        if kl:
            found[path.name] = kl
    return found


def uniform_kl(checkpoints: Path, name: str, kl: dict[str, Any]) -> dict[str, Any]:
    """`belief_kl` of a predictor that puts 1/n on every value, on the traces the export of
    checkpoint ``name`` scored (same family, counts and seeds): the scale a model's KL sits on."""
    spec = open_checkpoint(Path(checkpoints) / name, load_model=False).eval_spec()
    traces = {
        "random": random_traces(spec, kl["n_random"]),
        "adversarial": adversarial_traces(spec, kl["n_adversarial"], kl["adversarial_cycles"]),
    }
    result = BeliefKL(pd.concat([uniform_reveal_kl(group, kind) for kind, group in traces.items()], ignore_index=True))
    return {**kl, "mean_kl": result.summary(), "by_partial_reveals": result.table().to_dict(orient="records")}


def _show(step) -> str:
    return "–" if step is None else str(int(step))


LONG_HORIZON = Path("lab") / "results" / "pfsa" / "long_horizon.json"  # written by lab/experiments/pfsa_long_horizon.py
HIDDEN_BLOCK = Path("lab") / "results" / "pfsa" / "hidden_block"  # written by lab/experiments/pfsa_hidden_block.py


def long_horizon_lines(record: dict[str, Any], underflow: dict[str, int | None]) -> list[str]:
    """(d): KL at 50 / 150 / 300 partial reveals by dtype, seed mean [min–max], per checkpoint and kind."""
    horizons, results = record["horizons"], record["results"]
    seeds = sorted({r["seed"] for r in results})
    lines = [
        "### (d) Long horizons, by dtype",
        "",
        f"KL(exact ‖ model), nats, averaged over the 5 partial-reveal counts ending at {', '.join(map(str, horizons))} "
        f"on {record['traces_per_kind']} traces per kind with no full reveal after the initial assignment "
        f"(random: the checkpoint's family at its spacing; adversarial: the mix / leak / reveal cycle), seed mean "
        f"[min–max] over seeds {', '.join(map(str, seeds))} (seed 0: the shipped checkpoint; 1, 2: its train.toml "
        "with only the seed changed). The models were trained on 16-action traces, so this is also a length "
        "extrapolation. `uniform` is the 1/n guess on the same traces. The models' delta-rule state stays in fp32 "
        "in every dtype (the kernels upcast, as fla's do); the exact linear filter's mass underflows at partial "
        "reveal "
        + ", ".join(f"{_show(underflow.get(d))} in {d}" for d in ("float32", "bfloat16", "float16"))
        + " (table (a) above).",
        "",
        "| checkpoint | kind | dtype | " + " | ".join(f"{h} partial reveals" for h in horizons) + " |",
        "|---|---|---|" + "---|" * len(horizons),
    ]
    names = list(dict.fromkeys(r["checkpoint"] for r in results))
    reference_done = set()
    for name in names:
        runs = [r for r in results if r["checkpoint"] == name]
        rows = [row for r in runs for row in r["at_horizons"]]
        for kind in ("random", "adversarial"):
            for dtype in ("float32", "bfloat16", "float16"):
                cells = []
                for h in horizons:
                    picked = [x for x in rows if x["kind"] == kind and x["dtype"] == dtype and x["horizon"] == h]
                    errors = [x["error"] for x in picked if x.get("error")]
                    values = [x["kl"] for x in picked if x.get("kl") is not None]
                    cells.append(mean_range(values) if values else (f"error: {errors[0][:60]}" if errors else "–"))
                lines.append(f"| {name} | {kind} | {dtype} | " + " | ".join(cells) + " |")
            if kind not in reference_done:  # the uniform guess is the same for every checkpoint of a family
                uniform = [x for x in rows if x["kind"] == kind and x["dtype"] == "uniform"]
                if uniform:
                    reference_done.add(kind)
                    cells = [
                        mean_range([x["kl"] for x in uniform if x["horizon"] == h and x.get("kl") is not None])
                        for h in horizons
                    ]
                    lines.append(f"| uniform guess (reference) | {kind} | – | " + " | ".join(cells) + " |")
    return [*lines, "", *_long_horizon_reading(record), ""]


def _show_kl(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _long_horizon_reading(record: dict[str, Any]) -> list[str]:
    """What table (d) says, read off its numbers: per checkpoint, adversarial KL at the first and the
    last horizon (fp32, seed mean) against the uniform guess, and how far the dtypes move it."""
    horizons = record["horizons"]

    def mean_kl(name: str | None, kind: str, dtype: str, horizon: int) -> float | None:
        values = [
            x["kl"]
            for r in record["results"]
            if name is None or r["checkpoint"] == name
            for x in r["at_horizons"]
            if x["kind"] == kind and x["dtype"] == dtype and x["horizon"] == horizon and x.get("kl") is not None
        ]
        return sum(values) / len(values) if values else None

    first, last = horizons[0], horizons[-1]
    uniform = mean_kl(None, "adversarial", "uniform", last)
    parts = []
    for name in dict.fromkeys(r["checkpoint"] for r in record["results"]):
        a, b = mean_kl(name, "adversarial", "float32", first), mean_kl(name, "adversarial", "float32", last)
        if a is None or b is None:
            continue
        trend = "grows" if b > 1.5 * a and uniform is not None and b > uniform else "stays flat"
        parts.append(f"{name} {trend} ({a:.3f} -> {b:.3f})")
    if not parts:
        return []
    by_key: dict[tuple, list[float]] = {}
    for r in record["results"]:
        for x in r["at_horizons"]:
            if x["dtype"] != "uniform" and x.get("kl") is not None:
                by_key.setdefault((r["checkpoint"], r["seed"], x["kind"], x["horizon"]), []).append(x["kl"])
    dtype_gap = max((max(v) - min(v) for v in by_key.values() if len(v) > 1), default=None)
    reading = (
        f"Read off the table: on adversarial traces, from {first} to {last} partial reveals (fp32, seed mean; "
        f"uniform guess {_show_kl(uniform)} at {last}): " + "; ".join(parts) + "."
    )
    if dtype_gap is not None:
        reading += (
            f" The dtype moves no model's KL by more than {dtype_gap:.3f} nats at any horizon, so where a "
            "model's KL grows it is not the filter's underflow in that dtype (which would separate fp16, "
            "from 25 partial reveals on, from fp32): the trained models carry their state in fp32 and do "
            "not run the unnormalised filter's exact decay."
        )
    return [reading]


def long_horizon_figure(record: dict[str, Any]) -> go.Figure:
    """KL vs partial reveals up to the longest horizon, fp32, seed 0: one panel per trace kind, one
    colour per checkpoint (a 10-count rolling mean: one reveal per trace and count is noisy)."""
    from plotly.subplots import make_subplots

    palette = ["#1f77b4", "#ff7f0e", "#17becf", "#9467bd", "#2ca02c", "#8c564b", "#e377c2"]
    kinds = ("random", "adversarial")
    fig = make_subplots(rows=1, cols=2, subplot_titles=[f"{k} traces" for k in kinds])
    runs = [r for r in record["results"] if r["seed"] == 0 and r["curve"]]
    for i, r in enumerate(runs):
        curve = pd.DataFrame.from_records(r["curve"])
        label = r["checkpoint"].replace("-statement-prob", "")
        for col, kind in enumerate(kinds, 1):
            part = curve[(curve.kind == kind) & (curve.dtype == "float32")].sort_values("partial_reveals")
            if part.empty:
                continue
            fig.add_scatter(
                x=part.partial_reveals,
                y=part.kl.rolling(10, min_periods=1).mean(),
                mode="lines",
                name=label,
                legendgroup=label,
                showlegend=col == 1,
                row=1,
                col=col,
                line={"color": palette[i % len(palette)]},
            )
    fig.update_xaxes(title_text="partial reveals since the last full reveal")
    fig.update_yaxes(type="log")
    fig.update_yaxes(title_text="KL (nats), rolling mean over 10", col=1)
    fig.update_layout(
        title="Long horizons: KL(exact ‖ model), fp32, seed 0 (bf16 and fp16 lie on top: table (d))",
        template="plotly_white",
        height=460,
        width=1100,
    )
    return fig


def pfsa_section(checkpoints: Path) -> PfsaSection:
    joint = halving_decay()
    marginal = marginal_decay()
    lines = [
        "## PFSA-SR: probabilistic state tracking",
        "",
        "The paper's theory: a linear recurrence cannot renormalise its belief after a reveal. What that costs "
        "the exact unnormalised filters (arithmetic, not a trained model; whether trained models fail for this "
        "reason is what lab/results/pfsa_drain/ tests): (a) the unnormalised joint belief "
        "(one entry per permutation) loses a factor P(reveal) at every partial reveal; on a fair swap followed by "
        "a reveal that factor is exactly 1/2. (b) The unnormalised marginal belief (n x n) re-pins revealed rows, "
        f"but the adversary of tasks/adversary.py drains its chosen entries by {marginal.rate:g} per reveal "
        f"(measured in float64: {marginal.measured_rate:.4f}). Partial reveal at which the tracked mass is exactly 0:",
        "",
        "| dtype | (a) joint, halving law | (a) predicted | (b) marginal, adversary | (b) predicted "
        "| (b) marginal, random trace |",
        "|---|---|---|---|---|---|",
    ]
    for name in joint.underflow:
        lines.append(
            f"| {name} | {_show(joint.underflow[name])} | {_show(joint.predicted[name])} "
            f"| {_show(marginal.underflow[('adversarial', name)])} "
            f"| {_show(marginal.predicted[('adversarial', name)])} "
            f"| {_show(marginal.underflow[('random', name)])} |"
        )
    lines += ["", "– : no underflow within the sequence (1100 reveals for (a), 400 for (b)).", ""]

    found = probabilistic_checkpoints(checkpoints)
    if found:  # the same held-out reveals scored against a uniform guess, for scale
        found = {
            **found,
            "uniform guess (reference)": uniform_kl(checkpoints, next(iter(found)), next(iter(found.values()))),
        }
    lines += ["### (c) Trained models on probabilistic traces", ""]
    if not found:
        lines += [f"No probabilistic checkpoint under `{checkpoints}` records `belief_kl` yet.", ""]
    else:
        any_kl = next(iter(found.values()))
        lines += [
            f"Mean KL(exact posterior predictive ‖ model predictive), nats, at printed values of {any_kl['n_random']} "
            f"held-out random traces (spacing {any_kl['spacing']}) and {any_kl['n_adversarial']} adversarial traces "
            f"({any_kl['adversarial_cycles']} cycles), by partial reveals since the last full reveal (cells with at "
            "least 20 reveals). From each checkpoint's `metrics.belief_kl` (written at export).",
            "",
            "| checkpoint | traces | mean | " + " | ".join(str(k) for k in range(MAX_PARTIAL + 1)) + " |",
            "|---|---|---|" + "---|" * (MAX_PARTIAL + 1),
        ]
        for name, kl in found.items():
            for kind in ("random", "adversarial"):
                by = {r["partial_reveals"]: r for r in kl["by_partial_reveals"] if r["kind"] == kind}
                if not by:
                    continue
                cells = [
                    f"{by[k]['kl']:.3f}" if k in by and by[k]["count"] >= 20 else "–" for k in range(MAX_PARTIAL + 1)
                ]
                lines.append(
                    f"| {name} | {kind} | {kl['mean_kl'].get(kind, float('nan')):.4f} | " + " | ".join(cells) + " |"
                )
        lines.append("")
    tables = {name: kl["by_partial_reveals"] for name, kl in found.items()}
    figures = [
        ("pfsa_joint_decay", "(a) unnormalised joint belief mass vs partial reveals", joint_decay_figure(joint)),
        (
            "pfsa_marginal_decay",
            "(b) unnormalised marginal belief mass, random vs adversarial",
            marginal_decay_figure(marginal),
        ),
        ("pfsa_model_kl", "(c) trained models: KL to the exact belief vs partial reveals", kl_figure(tables)),
    ]
    long_file = Path(checkpoints).resolve().parent / LONG_HORIZON
    if long_file.is_file():
        record = json.loads(long_file.read_text())
        lines += long_horizon_lines(record, joint.underflow)
        figures.append(("pfsa_long_horizon", "(d) KL at long horizons", long_horizon_figure(record)))
    else:
        lines += [
            "### (d) Long horizons, by dtype",
            "",
            f"Not measured yet: run `python3 -m lab.experiments.pfsa_long_horizon` (writes {LONG_HORIZON}).",
            "",
        ]
    hidden = Path(checkpoints).resolve().parent / HIDDEN_BLOCK
    lines += hidden_block_lines(hidden)
    figure = hidden_block_figure(hidden)
    if figure is not None:
        figures.append(("pfsa_hidden_block", "(e) the hidden block: KL at the late query", figure))
    return PfsaSection(lines, figures)
