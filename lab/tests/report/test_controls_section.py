"""The controls' tables and verdicts (lab/experiments/report/controls_section.py), on copies of committed results."""

import json
import shutil
from pathlib import Path

from lab.experiments.report.controls_section import controls_lines

COMMITTED = Path(__file__).resolve().parents[3] / "lab" / "results"


def copy_cell(src: Path, dst: Path, accuracies: list[float], curves: list[list[float]] | None = None) -> None:
    """The three seeds of a committed cell with their 1x accuracy (and, given `curves`, their validation
    curve over 8,000 steps, not stopped early) replaced."""
    dst.mkdir(parents=True, exist_ok=True)
    for seed, accuracy in enumerate(accuracies):
        result = json.loads((src / f"s3-deltanet-pos-statement-k4-s{seed}.json").read_text())
        for row in result["eval"]["lengths"]:
            if row["x_train"] == 1.0:
                row["reveal_accuracy"] = accuracy
        if curves is not None:
            step = 8000 // len(curves[seed])
            result["history"] = [{"step": step * (i + 1), "reveal_accuracy": a} for i, a in enumerate(curves[seed])]
            result["stopped_early"] = False
        (dst / f"s3-deltanet-pos-statement-k4-s{seed}.json").write_text(json.dumps(result))


def verdict_row(lines: list[str], start: str) -> str:
    return next(line for line in lines if line.startswith(start))


def test_matched_budget_verdict_over_the_lr_grid(tmp_path):
    src = COMMITTED / "matched_budget" / "lr0.001"
    flat = [[0.5, 0.6, 0.61, 0.61]] * 3  # levelled off: a hold is not budget-bound (the next test)
    copy_cell(src, tmp_path / "matched_budget" / "lr0.001", [0.5, 0.6, 0.7], flat)
    copy_cell(src, tmp_path / "matched_budget" / "lr0.003", [0.5, 0.6, 0.95], flat)
    lines = controls_lines(tmp_path)
    assert verdict_row(lines, "| S3 | 4 |") == "| S3 | 4 | 0.001, 0.003 | **holds** |"
    copy_cell(src, tmp_path / "matched_budget" / "lr0.003", [0.99, 0.99, 0.8])  # mean 0.927, two of three seeds
    assert "fails (learns at lr 0.003)" in verdict_row(controls_lines(tmp_path), "| S3 | 4 |")
    copy_cell(src, tmp_path / "matched_budget" / "lr0.003", [1.0, 0.89, 0.89])  # mean >= 0.9 but one seed
    assert verdict_row(controls_lines(tmp_path), "| S3 | 4 |").endswith("| mixed |")
    (tmp_path / "matched_budget" / "lr0.003" / "s3-deltanet-pos-statement-k4-s2.json").unlink()
    assert "not measured" in verdict_row(controls_lines(tmp_path), "| S3 | 4 |")


def test_every_row_has_its_baselines_and_the_sparse_only_verdicts(tmp_path):
    shutil.copytree(COMMITTED / "sparse_only", tmp_path / "sparse_only")
    lines = controls_lines(tmp_path)
    rows = [line for line in lines if line.startswith("| sparse only | S3 |")]
    assert rows and all("(4) |" in row or "(8) |" in row for row in rows)  # the window predictor's W
    assert any(line.startswith("| S3 | DeltaNet β∈[0,2] | 4 | does not learn |") for line in lines)
    assert controls_lines(tmp_path / "nothing") == []


def test_a_hold_with_a_seed_on_pace_to_learn_is_budget_bound(tmp_path):
    src = COMMITTED / "matched_budget" / "lr0.001"
    flat = [0.5, 0.6, 0.61, 0.61]
    # seed 1 rises 0.06 a quarter (2,000 steps): 0.70 + 4 x 0.06 = 0.94 by another 8,000 steps
    on_pace = [0.4, 0.58, 0.64, 0.70]
    copy_cell(src, tmp_path / "matched_budget" / "lr0.001", [0.6, 0.7, 0.6], [flat, on_pace, flat])
    row = verdict_row(controls_lines(tmp_path), "| S3 | 4 |")
    assert "**holds**, budget-bound" in row and "seed 1 0.640 → 0.700" in row and "seed 0" not in row
    # rising as much, but too slowly to reach 0.9 in another budget (0.60 + 4 x 0.03 = 0.72): a plain hold
    slow = [0.5, 0.55, 0.57, 0.60]
    copy_cell(src, tmp_path / "matched_budget" / "lr0.001", [0.6, 0.7, 0.6], [flat, slow, flat])
    assert verdict_row(controls_lines(tmp_path), "| S3 | 4 |") == "| S3 | 4 | 0.001 | **holds** |"
