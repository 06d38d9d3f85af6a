"""The report's Transformer variants, each cell beside the paper grid's Transformer and its baselines.

Read from ``transformer_variants/*.json`` next to the report (lab/grids/transformer_variants/):

* positions and depth: no position encoding (NoPE), 4 and 6 layers, on the paper grid's S3 swap
  traces at k = 1 and 4. Beside each, the report's own sweep's Transformer (the paper grid: rotary
  positions, 2 layers) on the same cell (group, tokenizer, k), so a variant that changes the verdict
  shows as a different word in one row.
* the full action set (every action one uniformly random group element) with dense reveals (k = 1):
  the paper reports that Transformers "fail to generalize to full permutations even with dense
  supervision". Judged per group at the cell's longest evaluated length once the premise holds (the
  Transformer learned the cell at 1x; "not testable" when it did not, as for the grid's "does not
  extrapolate"): **holds** when the Transformer's seed mean, and two thirds of its seeds, stay below
  the extrapolation threshold there, fails when they reach it, mixed otherwise.
  DeltaNet β∈[0,2] on the same traces is the reference.

Rows carry the memoryless baselines (chance, last reveal, window-W) and the beyond-window verdict of
lab/experiments/report/baselines_section.py, as the controls' rows do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deltalens.grids.cells import Thresholds
from deltalens.reports.claims import (
    CLAIMS,
    DOES_NOT_HOLD,
    HOLDS,
    NOT_MEASURED,
    NOT_TESTABLE,
    Claim,
    accuracy_at,
    spread,
)
from deltalens.reports.figures import ARCH_LABELS
from deltalens.reports.numbers import mean_range
from lab.experiments.report.baselines_section import cell_baselines
from lab.experiments.report.controls_section import (
    HEADER,
    SEEDS,
    control_row,
    learned,
    learns_verdict,
    reaches,
    read_results,
    stays_below,
)

PAPER_THRESHOLDS = Thresholds()  # lab/grids/paper.toml's: 0.9 at 1x (learned) and at the longest length
VARIANTS = ("transformer-nope", "transformer-4l", "transformer-6l")


def _action_set(result: dict[str, Any]) -> str:
    return result.get("config", {}).get("task", {}).get("action_set", "swaps")  # TrainConfig's default


def _key(cell: dict[str, Any]) -> tuple[str, str, int]:
    return cell["group"], cell["tokenizer"], cell["spacing"]


def _label(cell: dict[str, Any]) -> str:
    return ARCH_LABELS.get(cell["arch"], cell["arch"])


def _budgets(cells: list[dict[str, Any]]) -> str:
    """The step budgets the runs' configs record: '8,000 steps' when one, else per architecture."""
    steps: dict[str, set[int]] = {}
    for cell in cells:
        steps.setdefault(_label(cell), set()).update(r["config"]["run"]["steps"] for r in cell["runs"])
    every = set().union(*steps.values())
    if len(every) == 1:
        return f"{every.pop():,} steps"
    return "; ".join(f"{label}: {' / '.join(f'{n:,}' for n in sorted(ns))} steps" for label, ns in steps.items())


def generalises_verdict(runs: list[dict[str, Any]], thresholds: Thresholds = PAPER_THRESHOLDS) -> str:
    """'fails to generalise' is the claim, judged at the cell's longest evaluated length once its premise
    holds (the cell learned at 1x; 'not testable' when it did not): **holds** when the seeds stay below
    `thresholds.extrapolates` there (mean and two thirds of them), 'fails' when they reach it, 'mixed'
    otherwise."""
    if len(runs) < SEEDS:
        return f"not measured ({len(runs)} of {SEEDS} seeds)"
    multiples = [row["x_train"] for r in runs for row in r["eval"]["lengths"] if "reveal_accuracy" in row]
    longest = max(multiples, default=1.0)
    values = [accuracy_at(r, longest) for r in runs]
    if longest <= 1.0 or any(v is None for v in values):
        return "not measured (a seed not evaluated at the longest length)"
    at_1x = learned(runs, thresholds.learned)
    if at_1x is None:
        return "not measured (a seed not evaluated at 1x)"
    if not at_1x:  # the premise: a claim about generalising needs a cell that learned at 1x
        return "not testable (does not learn at 1x)"
    if stays_below(values, thresholds.extrapolates):
        return "**holds** (learns at 1x)"
    if reaches(values, thresholds.extrapolates):
        return "fails"
    return "mixed"


def positions_depth_lines(
    variants: list[dict[str, Any]], paper: list[dict[str, Any]], thresholds: Thresholds = PAPER_THRESHOLDS
) -> list[str]:
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
            t = thresholds.learned
            base = learns_verdict(reference[key]["runs"], t) if key in reference else "not in the grid"
            verdicts.append(
                f"| {key[0]} | {key[1]} | {key[2]} | {_label(cell)} | {learns_verdict(cell['runs'], t)} | {base} |"
            )
    return [
        "## Transformer variants: positions and depth",
        "",
        "The paper grid's Transformer used rotary positions and 2 layers. The same swap traces and its searched "
        "lr with no position encoding (NoPE) or more layers (`lab/grids/transformer_variants/positions_depth.toml`, "
        f"{_budgets(order)}), 3 seeds, early stop at 0.999; each variant's row follows the paper grid's row of "
        "the same cell. Baselines at 1x on the same traces.",
        "",
        *HEADER,
        *rows,
        "",
        f"Learns: the seed mean and two thirds of the seeds reach {thresholds.learned:g} at 1x.",
        "",
        "| group | tokenizer | k | variant | variant learns | paper grid's Transformer learns |",
        "|---|---|---|---|---|---|",
        *verdicts,
        "",
    ]


def full_actions_lines(results: list[dict[str, Any]], thresholds: Thresholds = PAPER_THRESHOLDS) -> list[str]:
    cells = spread([r for r in results if _action_set(r) == "full"])
    if not cells:
        return []
    order = sorted(cells, key=lambda c: (c["group"], c["spacing"], c["arch"] != "transformer", c["arch"]))
    rows = [control_row("full actions", c) for c in order]
    verdicts = [
        f"| {c['group']} | {c['spacing']} | {learns_verdict(c['runs'], thresholds.learned)} "
        f"| {generalises_verdict(c['runs'], thresholds)} |"
        for c in order
        if c["arch"] == "transformer"
    ]
    return [
        "## Transformer variants: the full action set with dense reveals",
        "",
        "Every action one uniformly random group element written as one statement, a reveal after every action "
        "(k = 1) from the first step (`lab/grids/transformer_variants/full_actions*.toml`, the paper grid's searched "
        f"lrs and budgets: {_budgets(order)}), 3 seeds; DeltaNet β∈[0,2] on the same traces for reference.",
        "",
        *HEADER,
        *rows,
        "",
        "'Transformers fail to generalize to full permutations even with dense supervision' (the paper), per "
        f"group: not testable when the Transformer does not learn the cell at 1x (seed mean and two thirds of its "
        f"seeds ≥ {thresholds.learned:g}: a claim about generalising what was learned); else holds when its seed "
        f"mean and two thirds of its seeds stay below {thresholds.extrapolates:g} at the cell's longest length, "
        "fails when they reach it there, mixed otherwise.",
        "",
        "| group | k | Transformer learns (1x) | claim |",
        "|---|---|---|---|",
        *verdicts,
        "",
    ]


def full_actions_claims(results: list[dict[str, Any]], thresholds: Thresholds = PAPER_THRESHOLDS) -> list[Claim]:
    """The paper's full-permutation claim per group, as rows of the report's claims table (claims.py)."""
    claims = []
    cells = [c for c in spread([r for r in results if _action_set(r) == "full"]) if c["arch"] == "transformer"]
    for cell in sorted(cells, key=lambda c: (c["group"], c["spacing"])):
        text = generalises_verdict(cell["runs"], thresholds).strip("*")
        verdict = next((v for v in (HOLDS, NOT_TESTABLE, NOT_MEASURED) if text.startswith(v)), DOES_NOT_HOLD)
        values = [a for r in cell["runs"] if (a := accuracy_at(r, 1.0)) is not None]
        rows = {row["x_train"]: row for row in cell["eval"]["lengths"] if "reveal_accuracy" in row}
        longest = max(rows, default=1.0)
        base = cell_baselines(cell["runs"][0], 1.0)
        window = f"; window-{base.window_size} predictor {base.window:.3f} at 1x" if base else ""
        evidence = (
            f"k={cell['spacing']}: 1x {mean_range(values)}, {sum(v >= thresholds.learned for v in values)} of "
            f"{len(values)} seeds ≥ {thresholds.learned:g}; {rows[longest]['reveal_accuracy']:.3f} at {longest:g}x"
            f"{window}"
        )
        setting = f"{cell['group']} full actions"
        claims.append(Claim("transformer-full", CLAIMS["transformer-full"], setting, verdict, evidence))
    return claims


def transformer_variants_lines(
    root: Path, reference: list[dict[str, Any]], thresholds: Thresholds = PAPER_THRESHOLDS
) -> list[str]:
    """Both sections for a report written to `root` (nothing where no result exists); `reference` is
    the report's own sweep results (the paper grid's Transformer is among them)."""
    variants = read_results(Path(root) / "transformer_variants")
    swaps = [r for r in variants if _action_set(r) == "swaps"]
    paper = [r for r in reference if _action_set(r) == "swaps"]
    return positions_depth_lines(swaps, paper, thresholds) + full_actions_lines(variants, thresholds)
