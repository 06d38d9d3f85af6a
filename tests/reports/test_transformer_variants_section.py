"""The Transformer variants' tables and verdicts (reports/transformer_variants_section.py), on copies
of the committed paper-grid Transformer results with their arch, action set and accuracies replaced."""

import json
from pathlib import Path

import pytest

from deltalens.reports.transformer_variants_section import generalises_verdict, transformer_variants_lines

COMMITTED = Path(__file__).resolve().parents[2] / "results" / "sweep"


def write_cell(folder: Path, arch: str, accuracies: list[float], action_set: str = "swaps", k: int = 1) -> None:
    """Seeds 0.. of a committed S3 Transformer cell, as `arch` on `action_set`, every length at `accuracies`."""
    folder.mkdir(parents=True, exist_ok=True)
    for seed, accuracy in enumerate(accuracies):
        result = json.loads((COMMITTED / f"s3-transformer-statement-k{k}-s{seed}.json").read_text())
        result["arch"] = arch
        result["config"]["task"]["action_set"] = action_set
        for row in result["eval"]["lengths"]:
            row["reveal_accuracy"] = accuracy
        (folder / f"s3-{arch}-{action_set}-k{k}-s{seed}.json").write_text(json.dumps(result))


def table(lines: list[str], title: str) -> list[str]:
    start = lines.index(title)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def test_no_results_no_section(tmp_path):
    assert transformer_variants_lines(tmp_path) == []


def test_a_variant_follows_the_paper_grids_row_with_both_verdicts(tmp_path):
    write_cell(tmp_path / "transformer_variants", "transformer-nope", [0.95, 0.96, 0.97])
    write_cell(tmp_path / "transformer_variants", "transformer-4l", [0.5, 0.6, 0.95])
    write_cell(tmp_path / "sweep", "transformer", [0.2, 0.3, 0.4])
    lines = table(transformer_variants_lines(tmp_path), "## Transformer variants: positions and depth")
    rows = [line for line in lines if line.startswith("| paper grid") or line.startswith("| variant")]
    assert [r.split(" | ")[2] for r in rows] == [
        "Transformer",
        "Transformer, no positions (NoPE)",
        "Transformer, 4 layers",
    ]
    assert rows[0].startswith("| paper grid (rotary, 2 layers) |")
    assert "| S3 | 1 | Transformer, no positions (NoPE) | **learns** | does not learn |" in lines
    assert "| S3 | 1 | Transformer, 4 layers | does not learn | does not learn |" in lines
    assert not any(
        line.startswith("## Transformer variants: the full") for line in transformer_variants_lines(tmp_path)
    )


def test_a_cell_the_paper_grid_lacks_says_so(tmp_path):
    write_cell(tmp_path / "transformer_variants", "transformer-6l", [0.95, 0.96, 0.97])
    lines = transformer_variants_lines(tmp_path)
    assert "| S3 | 1 | Transformer, 6 layers | **learns** | not in the grid |" in lines
    assert not any(line.startswith("| paper grid") for line in lines)


@pytest.mark.parametrize(
    ("longest", "verdict"),
    [([0.5, 0.6, 0.95], "**holds**"), ([0.95, 0.96, 0.92], "fails"), ([0.95, 0.95, 0.1], "mixed")],
)
def test_the_full_action_claim_is_judged_at_the_longest_length(tmp_path, longest, verdict):
    write_cell(tmp_path / "transformer_variants", "transformer", longest, action_set="full")
    write_cell(tmp_path / "transformer_variants", "deltanet-neg", [1.0, 1.0, 1.0], action_set="full")
    lines = table(
        transformer_variants_lines(tmp_path), "## Transformer variants: the full action set with dense reveals"
    )
    assert "Transformer 8,000 steps, DeltaNet β∈[0,2] 8,000 steps)" in lines[2]  # the budgets the runs record
    rows = [line for line in lines if line.startswith("| full actions |")]
    assert [r.split(" | ")[2] for r in rows] == ["Transformer", "DeltaNet β∈[0,2]"]  # the Transformer first
    assert any(line.startswith("| S3 | 1 |") and line.endswith(f"| {verdict} |") for line in lines)
    assert not any(
        line.startswith("## Transformer variants: positions") for line in transformer_variants_lines(tmp_path)
    )


def test_missing_seeds_or_lengths_are_not_measured():
    def run(accuracies):
        return {"eval": {"lengths": [{"x_train": x, "reveal_accuracy": a} for x, a in accuracies]}}

    assert generalises_verdict([run([(1.0, 1.0), (4.0, 0.2)])] * 2) == "not measured (2 of 3 seeds)"
    only_1x = [run([(1.0, 1.0)])] * 3
    assert generalises_verdict(only_1x) == "not measured (a seed not evaluated beyond 1x)"
    assert generalises_verdict([run([(1.0, 1.0), (2.0, 0.95), (4.0, 0.5)])] * 3) == "**holds**"  # the longest counts
