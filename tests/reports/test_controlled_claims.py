"""The claims after the controls and their count (experiments/report/controlled_claims.py)."""

import re
import shutil
from pathlib import Path

from deltalens.reports.claims import CLAIMS, DOES_NOT_HOLD, HOLDS, NOT_MEASURED, NOT_TESTABLE, Claim
from experiments.report.controlled_claims import count_line, with_controls

REPO = Path(__file__).resolve().parents[2]


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
    shutil.copytree(REPO / "results" / "matched_budget", tmp_path / "matched_budget")
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
    """The README's headline count is the one under results/reproduce.md's claims table."""
    report = (REPO / "results" / "reproduce.md").read_text()
    line = next(line for line in report.splitlines() if line.startswith("Count over the"))
    counted = line.split(": ", 1)[1].replace("**", "").rstrip(".")
    assert re.fullmatch(r"\d+ claims? holds?.*", counted)
    readme = (REPO / "README.md").read_text()
    assert counted in readme, f"README.md should quote the report's count: {counted!r}"
