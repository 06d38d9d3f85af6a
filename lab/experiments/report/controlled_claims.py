"""The paper's claims after the controls, and their count.

The grid judges each claim on its own cells (claims.py). Later sweeps judge some claims again: the
matched-budget lr grid ("DeltaNet β∈[0,1] fails with sparse reveals", controls_section.py), the
Transformer at another lr ("needs dense reveals", "does not extrapolate", transformer_lr_section.py) and
the full-action Transformer cells ("the Transformer fails on full permutations even with dense
reveals", transformer_variants_section.py). Here the grid's verdicts are revised by them, by the
rule in claims.claim_rules, and counted: the count the README quotes is `count_line`'s, never one
written by hand.

The controls are read from the results root they belong to (the folder holding the grid's lab/results/grid/,
its siblings matched_budget/, transformer_lr/, transformer_variants/), never from where a report is written:
`judged_claims` is what `deltalens reproduce` writes to any --out and what the dashboard shows.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

from deltalens.grids.cells import Thresholds
from deltalens.reports.claims import DOES_NOT_HOLD, HOLDS, NOT_MEASURED, NOT_TESTABLE, Claim
from lab.experiments.report.controls_section import ControlVerdict, matched_budget_verdicts, read_results
from lab.experiments.report.transformer_lr_section import revise_transformer
from lab.experiments.report.transformer_variants_section import PAPER_THRESHOLDS, full_actions_claims

CONTROLS = ("matched_budget", "sparse_only", "transformer_lr", "transformer_variants")  # under the results root


def revise_pos_fails(claim: Claim, controls: list[ControlVerdict]) -> Claim:
    """The grid's "[0,1] fails with sparse reveals" in one setting, judged again with the lr grid's cells
    there: it holds only if the grid's verdict and every control (each sparse k) hold; a control that
    fails or is mixed makes it not hold; controls still training leave the grid's verdict."""
    if claim.key != "pos-fails" or not controls or claim.verdict not in (HOLDS, DOES_NOT_HOLD):
        return claim
    listing = "; ".join(f"k={c.spacing}: {c.text.replace('**', '')}" for c in controls)
    evidence = f"grid: {claim.evidence}; matched-budget lr grid ({', '.join(controls[0].lrs)}): {listing}"
    verdict = claim.verdict
    if any(c.verdict in ("fails", "mixed") for c in controls):
        verdict = DOES_NOT_HOLD
    bound = verdict == HOLDS and any(c.budget_bound for c in controls)
    return dataclasses.replace(claim, verdict=verdict, evidence=evidence, budget_bound=bound)


def qualify_neg_sparse(claim: Claim, root: Path, threshold: float) -> Claim:
    """The grid's "[0, 2] learns with sparse reveals" with the sparse-only control's count beside it: the grid
    cells all start with a dense stage, so a hold is a hold *with that curriculum*; the row says how many
    seeds learn without it (sparse_only/deltanet-neg/, no dense stage, one variable per print)."""
    if claim.key != "neg-sparse" or claim.verdict != HOLDS:
        return claim
    from deltalens.reports.claims import accuracy_at

    runs = [
        r
        for r in read_results(Path(root) / "sparse_only" / "deltanet-neg")
        if f"{r['group']} {r['tokenizer']}" == claim.setting
    ]
    if not runs:
        return claim
    by_k: dict[int, list[float]] = {}
    for run in runs:
        if (a := accuracy_at(run, 1.0)) is not None:
            by_k.setdefault(run["spacing"], []).append(a)
    counts = ", ".join(f"k={k}: {sum(a >= threshold for a in v)} of {len(v)}" for k, v in sorted(by_k.items()))
    note = f"; only with the dense curriculum: without it (sparse-only control) seeds learning {counts}"
    return dataclasses.replace(claim, evidence=claim.evidence + note)


def with_controls(
    claims: list[Claim], root: Path, thresholds: Thresholds = PAPER_THRESHOLDS, grid: list | None = None
) -> list[Claim]:
    """`claims` (the grid's, from the `grid` results) revised by the controls under the results root `root`,
    then the full-permutation claims of the Transformer variants' cells appended (nothing where none exist)."""
    _, controls = matched_budget_verdicts(Path(root))
    revised = [
        revise_pos_fails(claim, [c for c in controls if f"{c.group} {c.tokenizer}" == claim.setting])
        for claim in claims
    ]
    revised = [qualify_neg_sparse(claim, Path(root), thresholds.learned) for claim in revised]
    revised = revise_transformer(revised, Path(root), grid or [])
    return revised + full_actions_claims(read_results(Path(root) / "transformer_variants"), thresholds)


def judged_claims(sweep, statuses, root: Path) -> list[Claim]:
    """The paper's claims from the grid's results (`statuses`, grid.read_results of `sweep`) revised by the
    controls under `root`: the one table of lab/results/reproduce.md and of the dashboard."""
    from deltalens.grids.grid import expected_cells
    from deltalens.reports.claims import evaluate_claims

    results = [s.result for s in statuses if s.result is not None]
    claims = evaluate_claims(
        results,
        sweep.thresholds,
        settings=[s.cell.setting for s in statuses],
        seeds=len(sweep.seeds),
        expected=expected_cells(sweep),
        archs=set(sweep.models),
    )
    return with_controls(claims, root, sweep.thresholds, grid=results)


def missing_controls(root: Path) -> list[str]:
    """The control folders `root` lacks (a report written without them says so)."""
    return [name for name in CONTROLS if not (Path(root) / name).is_dir()]


def count_line(claims: list[Claim]) -> str:
    """How many claims hold, do not hold, are not testable and not measured, from their verdicts."""
    counts = Counter(claim.verdict for claim in claims)
    bound = sum(claim.budget_bound for claim in claims if claim.verdict == HOLDS)
    holds = counts[HOLDS]
    parts = [
        f"**{holds} {'claim holds' if holds == 1 else 'claims hold'}**"
        + (f" ({bound} of them budget-bound)" if bound else ""),
        {0: "none fails", 1: "**1 does not hold**"}.get(
            counts[DOES_NOT_HOLD], f"**{counts[DOES_NOT_HOLD]} do not hold**"
        ),
        f"{counts[NOT_TESTABLE]} {'is' if counts[NOT_TESTABLE] == 1 else 'are'} not testable",
    ]
    if counts[NOT_MEASURED]:
        parts.append(f"{counts[NOT_MEASURED]} {'is' if counts[NOT_MEASURED] == 1 else 'are'} not measured")
    return (
        f"Count over the {len(claims)} rows above "
        "(written from their verdicts by `lab/experiments/report/controlled_claims.py`): " + ", ".join(parts) + "."
    )
