"""Grid cells re-run with a longer budget (reports/long_runs_section.long_sweep_lines), on copies
of the committed family grid's S4 DeltaProduct n_h = 2 runs."""

import json
from pathlib import Path

from lab.experiments.report.long_runs_section import long_sweep_lines, still_rising

GRID = Path(__file__).resolve().parents[3] / "lab" / "results" / "family" / "grid"
CELL = "s4-deltaproduct-n2-statement-k4-s{}"


def long_copy(seed: int, accuracy: float, curve: list[float], stopped_early: bool = False) -> dict:
    """The grid's run of `seed` as if trained for 12,000 steps: its validation curve and 1x accuracy replaced."""
    result = json.loads((GRID / f"{CELL.format(seed)}.json").read_text())
    step = 12000 // len(curve)
    result["history"] = [{"step": step * (i + 1), "reveal_accuracy": a} for i, a in enumerate(curve)]
    result["steps"], result["stopped_early"] = step * len(curve), stopped_early
    for row in result["eval"]["lengths"]:
        if row["x_train"] == 1.0:
            row["reveal_accuracy"] = accuracy
    return result


def test_still_rising_reads_the_last_quarter_and_an_early_stop():
    assert still_rising(long_copy(0, 0.5, [0.3, 0.4, 0.5, 0.6]))  # 0.5 -> 0.6 over steps 9,000-12,000
    assert not still_rising(long_copy(0, 0.5, [0.3, 0.6, 0.61, 0.61]))
    assert not still_rising(long_copy(0, 1.0, [0.3, 0.6, 0.9, 0.999], stopped_early=True))


def test_long_runs_beside_the_grid_run_with_a_verdict(tmp_path):
    assert long_sweep_lines(tmp_path) == []
    (tmp_path / "long").mkdir()
    (tmp_path / "grid").mkdir()
    for seed in range(3):
        (tmp_path / "grid" / f"{CELL.format(seed)}.json").write_bytes((GRID / f"{CELL.format(seed)}.json").read_bytes())
    runs = [
        long_copy(0, 0.999, [0.4, 0.8, 0.99, 0.999], stopped_early=True),
        long_copy(1, 0.95, [0.4, 0.7, 0.9, 0.95]),
        long_copy(2, 0.6, [0.4, 0.5, 0.6, 0.6]),
    ]
    for run in runs:
        (tmp_path / "long" / f"{run['cell']}.json").write_text(json.dumps(run))
    lines = long_sweep_lines(tmp_path)
    row = next(line for line in lines if line.startswith("| S4 |") and "| 0 | 12000 (early stop)" in line)
    grid_1x = next(
        r for r in json.loads((GRID / f"{CELL.format(0)}.json").read_text())["eval"]["lengths"] if r["x_train"] == 1.0
    )
    assert f"| 4000, {grid_1x['reveal_accuracy']:.3f} |" in row and "| 0.999 (12000) |" in row
    assert lines[-2].endswith("| 3 | does not learn | 1 of 3 |")  # seed mean 0.85; seed 1 still rising
    runs[2] = long_copy(2, 0.92, [0.4, 0.5, 0.91, 0.92])  # mean 0.96, every seed >= 0.9
    (tmp_path / "long" / f"{runs[2]['cell']}.json").write_text(json.dumps(runs[2]))
    assert long_sweep_lines(tmp_path)[-2].endswith("| 3 | **learns** | 1 of 3 |")


def test_the_figure_draws_each_long_run_over_its_grid_run():
    from deltalens.reports.figures import long_budget_figure

    runs = [long_copy(0, 0.8, [0.3, 0.5, 0.7, 0.8]), long_copy(1, 0.6, [0.3, 0.4, 0.5, 0.6])]
    grid = json.loads((GRID / f"{CELL.format(0)}.json").read_text())
    fig = long_budget_figure(runs, {CELL.format(0): grid})  # seed 1 without its grid run
    lines = [(t.name, t.line.dash, list(t.y)) for t in fig.data]
    assert lines[0] == ("seed 0", "solid", [0.3, 0.5, 0.7, 0.8])
    assert lines[1] == ("seed 0", "dot", [h["reveal_accuracy"] for h in grid["history"]])
    assert lines[2] == ("seed 1", "solid", [0.3, 0.4, 0.5, 0.6]) and len(lines) == 3
    assert fig.data[0].line.color == fig.data[1].line.color != fig.data[2].line.color


def test_missing_lengths_seeds_and_sparse_curves_read_as_such(tmp_path):
    (tmp_path / "long").mkdir()
    run = long_copy(0, 0.7, [0.3, 0.6])  # two evaluations: the last quarter is 6,000 -> 12,000
    run["eval"]["lengths"][1]["reveal_accuracy"] = None
    (tmp_path / "long" / "a.json").write_text(json.dumps(run))
    training = {**long_copy(1, 0.5, [0.3]), "eval": {}}  # still training: no evaluation yet
    (tmp_path / "long" / "b.json").write_text(json.dumps(training))
    assert still_rising(run)
    lines = long_sweep_lines(tmp_path)
    row = next(line for line in lines if line.startswith("| S4 |") and "| 0 | 12000 |" in line)
    assert "| 1x 0.700 / 2x – / 4x " in row and "| 0.300 → 0.600 |" in row and "| – |" in row  # no grid run here
    assert not any("| 1 | 12000" in line for line in lines)
    assert lines[-2].endswith("| 1 | not measured (1 of 3 seeds) | 1 of 1 |")
