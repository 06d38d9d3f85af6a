"""The PFSA-SR section of `deltalens reproduce`: belief decay (a, b) and trained models' KL (c).

(a) and (b) need no model (probes/belief_decay.py, seconds on a CPU). (c) reads what the
probabilistic checkpoints recorded when they were exported (`metrics.belief_kl` in their
config.json, written by training/export.py with training/belief_kl.py), so the report never
retrains or re-evaluates them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from deltalens import models
from deltalens.probes.belief_decay import halving_decay, joint_decay_figure, marginal_decay, marginal_decay_figure
from deltalens.training.belief_kl import BeliefKL, adversarial_traces, kl_figure, partial_counts, random_traces
from deltalens.training.opened import open_checkpoint

MAX_PARTIAL = 8  # columns of the KL table: partial reveals since the last full reveal


@dataclass
class PfsaSection:
    lines: list[str]                             # markdown, figures not included
    figures: list[tuple[str, str, go.Figure]]    # (file stem, title, figure)


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
    traces = {"random": random_traces(spec, kl["n_random"]),
              "adversarial": adversarial_traces(spec, kl["n_adversarial"], kl["adversarial_cycles"])}
    rows = []
    for kind, group in traces.items():
        for trace in group:
            posts = [post for line in trace.posteriors for post in line]
            for post, since in zip(posts, partial_counts(trace)):
                p = [x for x in post.predictive if x > 0]
                rows.append({"kind": kind, "partial_reveals": since, "value_mass": 1.0,
                             "kl": sum(x * math.log(x * trace.n) for x in p)})
    result = BeliefKL(pd.DataFrame(rows))
    return {**kl, "mean_kl": result.summary(), "by_partial_reveals": result.table().to_dict(orient="records")}


def _show(step) -> str:
    return "–" if step is None else str(int(step))


def pfsa_section(checkpoints: Path) -> PfsaSection:
    joint = halving_decay()
    marginal = marginal_decay()
    lines = [
        "## PFSA-SR: probabilistic state tracking",
        "",
        "A linear recurrence cannot renormalise its belief after a reveal. (a) The unnormalised joint belief "
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
        lines.append(f"| {name} | {_show(joint.underflow[name])} | {_show(joint.predicted[name])} "
                     f"| {_show(marginal.underflow[('adversarial', name)])} "
                     f"| {_show(marginal.predicted[('adversarial', name)])} "
                     f"| {_show(marginal.underflow[('random', name)])} |")
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
                cells = [f"{by[k]['kl']:.3f}" if k in by and by[k]["count"] >= 20 else "–"
                         for k in range(MAX_PARTIAL + 1)]
                lines.append(
                    f"| {name} | {kind} | {kl['mean_kl'].get(kind, float('nan')):.4f} | " + " | ".join(cells) + " |"
                )
        lines.append("")
    tables = {name: kl["by_partial_reveals"] for name, kl in found.items()}
    figures = [
        ("pfsa_joint_decay", "(a) unnormalised joint belief mass vs partial reveals", joint_decay_figure(joint)),
        ("pfsa_marginal_decay", "(b) unnormalised marginal belief mass, random vs adversarial",
         marginal_decay_figure(marginal)),
        ("pfsa_model_kl", "(c) trained models: KL to the exact belief vs partial reveals", kl_figure(tables)),
    ]
    return PfsaSection(lines, figures)
