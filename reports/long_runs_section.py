"""Runs outside the protocol that ask whether a model that did not learn at k = 1 was only
under-trained: OUT/search/long_*.json, each {"what", "command", "runs": [{"run", "group", "arch",
"lr", "steps_done", "train_wall_s", "validation": [{"step", "reveal_accuracy"}]}]}. No file, no section."""

from __future__ import annotations

import json
from pathlib import Path

from deltalens.reports.figures import ARCH_LABELS


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
