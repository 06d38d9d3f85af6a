"""Runs outside the protocol that ask whether a model that did not learn was only under-trained.
Two sources, no file no section: OUT/search/long_*.json, each {"what", "command", "runs": [{"run",
"group", "arch", "lr", "steps_done", "train_wall_s", "validation": [{"step", "reveal_accuracy"}]}]};
and OUT/long/*.json, sweep results of grid cells trained again with a longer budget."""

from __future__ import annotations

import json
from pathlib import Path

from deltalens.reports.claims import accuracy_at
from deltalens.reports.figures import ARCH_LABELS
from lab.experiments.report.baselines_section import cell_baselines
from lab.experiments.report.controls_section import LEARNED, SEEDS, learns_verdict
from lab.experiments.report.curves import RISING, last_quarter, still_rising


def long_run_lines(out: Path) -> list[str]:
    files = sorted((Path(out) / "search").glob("long_*.json"))
    records = [(f, json.loads(f.read_text())) for f in files]
    records = [(f, r) for f, r in records if r.get("runs")]
    if not records:
        return []
    lines = ["### Longer runs outside the protocol", ""]
    for file, record in records:
        source = f"`{file.relative_to(Path(out))}`; command: `{record.get('command', '?')}`"
        lines += [
            f"{record.get('what', '')} ({source})",
            "",
            "| group | architecture | lr | steps | best validation (step) | over its last quarter | wall time |",
            "|---|---|---|---|---|---|---|",
        ]
        for run in record["runs"]:
            curve = [(v["step"], v["reveal_accuracy"]) for v in run.get("validation", [])]
            if not curve:
                continue
            best_step, best = max(curve, key=lambda sv: sv[1])
            last_step = curve[-1][0]
            quarter = [a for s, a in curve if s >= 0.75 * last_step]
            trend = f"{quarter[0]:.3f} → {quarter[-1]:.3f}"  # still rising, or flat?
            lines.append(
                f"| {run['group']} | {ARCH_LABELS.get(run['arch'], run['arch'])} | {run['lr']:g} "
                f"| {run.get('steps_done', last_step)} | {best:.3f} ({best_step}) | {trend} "
                f"| {run.get('train_wall_s', 0) / 60:.1f} min |"
            )
        lines.append("")
    return lines


def long_sweep_runs(out: Path) -> tuple[list[dict], dict[str, dict]]:
    """OUT/long/*.json's evaluated results and, by cell name, the grid's run of each (OUT/grid/<cell>.json)."""
    runs = [json.loads(p.read_text()) for p in sorted((Path(out) / "long").glob("*.json"))]
    runs = [r for r in runs if r.get("eval", {}).get("lengths")]  # a run still training has no eval yet
    grid_files = {r["cell"]: Path(out) / "grid" / f"{r['cell']}.json" for r in runs}
    return runs, {cell: json.loads(f.read_text()) for cell, f in grid_files.items() if f.is_file()}


def _tests(result: dict) -> str:
    """Each evaluated length as '1x 0.816' ('–' where a length has no accuracy)."""
    return " / ".join(
        f"{row.get('x_train', 0):g}x "
        + (f"{row['reveal_accuracy']:.3f}" if row.get("reveal_accuracy") is not None else "–")
        for row in result["eval"]["lengths"]
    )


def long_sweep_lines(out: Path, threshold: float = LEARNED) -> list[str]:
    """OUT/long/*.json: grid cells trained again with a longer budget (sweep results, as in
    OUT/grid/), each beside the grid's own run of the cell and the memoryless baselines. Per
    cell: does it learn (the controls' rule at `threshold`) and is any seed still rising at its end."""
    return long_sweep_table(*long_sweep_runs(out), threshold)


def long_sweep_table(runs: list[dict], grids: dict[str, dict], threshold: float = LEARNED) -> list[str]:
    """long_sweep_lines on results already read (long_sweep_runs)."""
    if not runs:
        return []
    cells: dict[tuple, list[dict]] = {}
    for run in sorted(runs, key=lambda r: (r["group"], r["arch"], r["spacing"], r["seed"])):
        cells.setdefault((run["group"], run["arch"], run["spacing"]), []).append(run)
    lines = [
        "### The same cells with a longer budget",
        "",
        "Cells of this grid trained again from scratch with more steps (`long/`, same recipe but the budget, "
        "early stop at the sweep's accuracy), beside the grid's run of the same cell and seed (`lab/grids/`). "
        f"'Still rising': validation gained more than {RISING} over the run's last quarter; the curves are "
        "the figure 'longer budget'.",
        "",
        "| group | architecture | k | seed | steps | best validation (step) | last quarter | test accuracy "
        "| grid run: steps, 1x | chance | last reveal | window (W) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for (group, arch, k), seeds in cells.items():
        for run in seeds:
            curve = [(h["step"], h["reveal_accuracy"]) for h in run.get("history", [])]
            best_step, best_value = max(curve, key=lambda sv: sv[1]) if curve else (None, None)
            best = f"{best_value:.3f} ({best_step})" if curve else "–"
            quarter = last_quarter(run)
            trend = f"{quarter[0]:.3f} → {quarter[1]:.3f}" if quarter else "–"
            grid = grids.get(run["cell"])
            grid_1x = accuracy_at(grid, 1.0) if grid else None
            grid_text = f"{grid['steps']}, {grid_1x:.3f}" if grid_1x is not None else "–"
            base = cell_baselines(run, 1.0)
            base_text = (
                f"{base.chance:.3f} | {base.last_reveal:.3f} | {base.window:.3f} ({base.window_size})"
                if base
                else "– | – | –"
            )
            stopped = " (early stop)" if run.get("stopped_early") else ""
            lines.append(
                f"| {group} | {ARCH_LABELS.get(arch, arch)} | {k} | {run['seed']} | {run.get('steps', '–')}{stopped} "
                f"| {best} | {trend} | {_tests(run)} | {grid_text} | {base_text} |"
            )
        rising = sum(still_rising(r) for r in seeds)
        verdicts.append(
            f"| {group} | {ARCH_LABELS.get(arch, arch)} | {k} | {len(seeds)} | {learns_verdict(seeds, threshold)} "
            f"| {rising} of {len(seeds)} |"
        )
    return [
        *lines,
        "",
        f"Learns: the seed mean and two thirds of the seeds reach {threshold:g} at 1x, over {SEEDS} seeds.",
        "",
        "| group | architecture | k | seeds | verdict | seeds still rising |",
        "|---|---|---|---|---|---|",
        *verdicts,
        "",
    ]
