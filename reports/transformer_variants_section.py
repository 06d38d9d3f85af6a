"""The report's Transformer variants, each cell beside the paper grid's Transformer and its baselines.

Read from ``transformer_variants/*.json`` next to the report (sweep/transformer_variants/):

* positions and depth: no position encoding (NoPE), 4 and 6 layers, on the paper grid's S3 swap
  traces at k = 1 and 4. Beside each, the paper grid's Transformer (rotary positions, 2 layers,
  ``sweep/*.json``) on the same cell, so a variant that changes the verdict shows as a different
  word in one row.
* the full action set (every action one uniformly random group element) with dense reveals (k = 1):
  the paper reports that Transformers "fail to generalize to full permutations even with dense
  supervision". Judged per group: **holds** when the Transformer's seed mean, and two thirds of its
  seeds, stay below the extrapolation threshold at the longest length; fails when they reach it;
  mixed otherwise. DeltaNet β∈[0,2] on the same traces is the reference.

Rows carry the memoryless baselines (chance, last reveal, window-W) and the beyond-window verdict of
reports/baselines_section.py, as the controls' rows do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deltalens.reports.claims import longest_accuracy, seeds_needed, spread
from deltalens.reports.controls_section import HEADER, SEEDS, control_row, learns_verdict, read_results
from deltalens.reports.figures import ARCH_LABELS

EXTRAPOLATES = 0.9  # the paper grid's threshold (sweep/paper.toml [thresholds] extrapolates)
VARIANTS = ("transformer-nope", "transformer-4l", "transformer-6l")


def _action_set(result: dict[str, Any]) -> str:
    return result["config"]["task"]["action_set"]


def _key(cell: dict[str, Any]) -> tuple[str, str, int]:
    return cell["group"], cell["tokenizer"], cell["spacing"]


def _label(cell: dict[str, Any]) -> str:
    return ARCH_LABELS.get(cell["arch"], cell["arch"])


def _budgets(cells: list[dict[str, Any]]) -> str:
    """Each architecture's step budget as its runs' configs record it, e.g. 'Transformer 8,000 steps'."""
    steps = {}
    for cell in cells:
        steps.setdefault(_label(cell), set()).update(r["config"]["run"]["steps"] for r in cell["runs"])
    return ", ".join(f"{label} {' / '.join(f'{n:,}' for n in sorted(ns))} steps" for label, ns in steps.items())


def generalises_verdict(runs: list[dict[str, Any]], threshold: float = EXTRAPOLATES) -> str:
    """'fails to generalise' is the claim: **holds** when the seeds stay below `threshold` at the
    longest length (mean and two thirds of them), 'fails' when they reach it, 'mixed' otherwise."""
    if len(runs) < SEEDS:
        return f"not measured ({len(runs)} of {SEEDS} seeds)"
    values = [longest[1] for r in runs if (longest := longest_accuracy(r)) is not None]
    if len(values) < len(runs):
        return "not measured (a seed not evaluated beyond 1x)"
    mean = sum(values) / len(values)
    if mean < threshold and sum(v < threshold for v in values) >= seeds_needed(len(values)):
        return "**holds**"
    if mean >= threshold and sum(v >= threshold for v in values) >= seeds_needed(len(values)):
        return "fails"
    return "mixed"


def positions_depth_lines(variants: list[dict[str, Any]], paper: list[dict[str, Any]]) -> list[str]:
    cells = [c for c in spread(variants) if c["arch"] in VARIANTS]
    if not cells:
        return []
    reference = {_key(c): c for c in spread(paper) if c["arch"] == "transformer"}
    order = sorted(cells, key=lambda c: (*_key(c), VARIANTS.index(c["arch"])))
    rows, verdicts = [], []
    for key in dict.fromkeys(_key(c) for c in order):
        if key in reference:
            rows.append(control_row("paper grid (rotary, 2 layers)", reference[key]))
        for cell in (c for c in order if _key(c) == key):
            rows.append(control_row("variant", cell))
            base = learns_verdict(reference[key]["runs"]) if key in reference else "not in the grid"
            verdicts.append(f"| {key[0]} | {key[2]} | {_label(cell)} | {learns_verdict(cell['runs'])} | {base} |")
    return [
        "## Transformer variants: positions and depth",
        "",
        "The paper grid's Transformer used rotary positions and 2 layers. The same swap traces and its searched "
        "lr with no position encoding (NoPE) or more layers (`sweep/transformer_variants/positions_depth.toml`; "
        f"{_budgets(order)}), 3 seeds, early stop at 0.999; each variant's row follows the paper grid's row of "
        "the same cell. Baselines at 1x on the same traces.",
        "",
        *HEADER,
        *rows,
        "",
        "Learns: the seed mean and two thirds of the seeds reach 0.9 at 1x.",
        "",
        "| group | k | variant | variant learns | paper grid's Transformer learns |",
        "|---|---|---|---|---|",
        *verdicts,
        "",
    ]


def full_actions_lines(results: list[dict[str, Any]]) -> list[str]:
    cells = spread([r for r in results if _action_set(r) == "full"])
    if not cells:
        return []
    order = sorted(cells, key=lambda c: (c["group"], c["spacing"], c["arch"] != "transformer", c["arch"]))
    rows = [control_row("full actions", c) for c in order]
    verdicts = [
        f"| {c['group']} | {c['spacing']} | {learns_verdict(c['runs'])} | {generalises_verdict(c['runs'])} |"
        for c in order
        if c["arch"] == "transformer"
    ]
    return [
        "## Transformer variants: the full action set with dense reveals",
        "",
        "Every action one uniformly random group element written as one statement, a reveal after every action "
        "(k = 1) from the first step (`sweep/transformer_variants/full_actions*.toml`; the paper grid's budgets, "
        f"{_budgets(order)}), 3 seeds; DeltaNet β∈[0,2] on the same traces for reference.",
        "",
        *HEADER,
        *rows,
        "",
        "'Transformers fail to generalize to full permutations even with dense supervision' (the paper), per "
        f"group: holds when the Transformer's seed mean and two thirds of its seeds stay below {EXTRAPOLATES} at "
        "the longest length, fails when they reach it.",
        "",
        "| group | k | Transformer learns (1x) | claim |",
        "|---|---|---|---|",
        *verdicts,
        "",
    ]


def transformer_variants_lines(root: Path) -> list[str]:
    """Both sections for a report written to `root` (nothing where no result exists)."""
    root = Path(root)
    variants = read_results(root / "transformer_variants")
    swaps = [r for r in variants if _action_set(r) == "swaps"]
    paper = [r for r in read_results(root / "sweep") if _action_set(r) == "swaps"]
    return positions_depth_lines(swaps, paper) + full_actions_lines(variants)
