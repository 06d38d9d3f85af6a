"""The claims after the controls and their count (lab/experiments/report/controlled_claims.py)."""

import re
import shutil
from pathlib import Path

from deltalens.reports.claims import CLAIMS, DOES_NOT_HOLD, HOLDS, NOT_MEASURED, NOT_TESTABLE, Claim
from lab.experiments.report.controlled_claims import count_line, with_controls

REPO = Path(__file__).resolve().parents[3]


def claim(key: str, setting: str, verdict: str, budget_bound: bool = False) -> Claim:
    return Claim(key, CLAIMS[key], setting, verdict, "numbers", budget_bound)


def test_the_count_follows_the_verdicts():
    claims = [
        claim("neg-sparse", "S3 statement", HOLDS),
        claim("neg-extrapolates", "S3 statement", HOLDS),
        claim("pos-fails", "S3 statement", HOLDS),
        claim("transformer-dense", "S5 statement", NOT_TESTABLE),
    ]
    line = count_line(claims)
    assert "the 4 rows above" in line and "**3 claims hold**, none fails, 1 is not testable." in line
    claims[2] = claim("pos-fails", "S3 statement", DOES_NOT_HOLD)  # one verdict flips: the count with it
    assert "**2 claims hold**, **1 does not hold**, 1 is not testable." in count_line(claims)
    claims[0] = claim("neg-sparse", "S3 statement", HOLDS, budget_bound=True)
    claims.append(claim("transformer-full", "S3 full actions", NOT_MEASURED))
    assert "**2 claims hold** (1 of them budget-bound), **1 does not hold**, 1 is not testable, 1 is not measured." in (
        count_line(claims)
    )


def test_the_lr_grid_revises_the_grids_pos_fails_per_setting(tmp_path):
    shutil.copytree(REPO / "lab" / "results" / "matched_budget", tmp_path / "matched_budget")
    grid = [
        claim("pos-fails", "S3 statement", HOLDS),
        claim("pos-fails", "S5 statement", HOLDS),
        claim("neg-sparse", "S3 statement", HOLDS),
        claim("pos-fails", "S3 code", HOLDS),  # no control ran there
    ]
    revised = {(c.key, c.setting): c for c in with_controls(grid, tmp_path)}
    s3 = revised[("pos-fails", "S3 statement")]
    assert s3.verdict == DOES_NOT_HOLD and "k=4: fails (learns at lr 0.0003)" in s3.evidence
    assert "k=8: holds, budget-bound" in s3.evidence and s3.evidence.startswith("grid: numbers;")
    assert revised[("pos-fails", "S5 statement")].verdict == HOLDS
    assert not revised[("pos-fails", "S5 statement")].budget_bound
    assert revised[("neg-sparse", "S3 statement")] == grid[2]
    assert revised[("pos-fails", "S3 code")] == grid[3]
    assert len(revised) == 4  # no full-action cells here: no claim added


def test_the_readme_quotes_the_count_the_report_computed():
    """The README's headline count (and the docs site's results page's) is the one under lab/results/reproduce.md's
    claims table."""
    report = (REPO / "lab" / "results" / "reproduce.md").read_text()
    line = next(line for line in report.splitlines() if line.startswith("Count over the"))
    counted = line.split(": ", 1)[1].replace("**", "").rstrip(".")
    assert re.fullmatch(r"\d+ claims? holds?.*", counted)
    for page in ("README.md", "docs/results.md"):
        assert counted in (REPO / page).read_text(), f"{page} should quote the report's count: {counted!r}"


def _claims_table(markdown: str) -> list[str]:
    """The rows of the report's claims table (its header and rule line included)."""
    lines = markdown.splitlines()
    start = lines.index("## The paper's claims")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    return [line for line in lines[start:end] if line.startswith("| ")]


def test_the_report_is_the_same_whatever_out_is_and_the_dashboard_shows_its_table(tmp_path):
    """`deltalens reproduce --no-train --out ELSEWHERE` reads the controls under the results root, not --out:
    its claims table is the committed lab/results/reproduce.md's, and the dashboard's table is the same rows."""
    from deltalens.app import grid_claims
    from deltalens.grids.grid import load_grid, read_grid
    from lab.experiments.report.controlled_claims import judged_claims
    from lab.experiments.report.reproduce import write_report

    sweep = load_grid(REPO / "lab" / "grids" / "paper.toml")
    sweep, statuses, _ = read_grid(sweep, REPO / "lab" / "results" / "grid")
    report = write_report(sweep, statuses, tmp_path / "elsewhere", results=REPO / "lab" / "results" / "grid")
    written = _claims_table(report.markdown.read_text())
    committed = _claims_table((REPO / "lab" / "results" / "reproduce.md").read_text())
    assert written == committed and len(written) == 1 + 15  # the header and the 15 claims
    _, table, _ = grid_claims.build()
    judged = judged_claims(sweep, statuses, REPO / "lab" / "results")
    assert list(table.verdict) == [c.verdict for c in judged] and list(table.claim) == [c.statement for c in judged]
    assert len(table) == len(committed) - 1


def test_a_report_without_its_controls_says_which_are_missing(tmp_path):
    from deltalens.grids.grid import load_grid, read_grid
    from lab.experiments.report.reproduce import write_report

    sweep = load_grid(REPO / "lab" / "grids" / "paper.toml")
    sweep, statuses, _ = read_grid(sweep, REPO / "lab" / "results" / "grid")
    text = write_report(sweep, statuses, tmp_path / "out", results=tmp_path / "bare" / "grid").markdown.read_text()
    assert "matched_budget/, sparse_only/, transformer_lr/, transformer_variants/ are not there" in text
