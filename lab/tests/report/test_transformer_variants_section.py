"""The Transformer variants' tables and verdicts (lab/experiments/report/transformer_variants_section.py), on copies
of the committed paper-grid Transformer results with their arch, action set and accuracies replaced."""

import json
from pathlib import Path

import pytest

from deltalens.reports.claims import DOES_NOT_HOLD, HOLDS, NOT_TESTABLE
from lab.experiments.report.transformer_variants_section import (
    full_actions_claims,
    generalises_verdict,
    transformer_variants_lines,
)

COMMITTED = Path(__file__).resolve().parents[3] / "lab" / "results" / "grid"


def cell(arch: str, accuracies, action_set: str = "swaps", k: int = 1, tokenizer: str = "statement") -> list[dict]:
    """Seeds 0.. of a committed S3 Transformer cell, as `arch` on `action_set`; an accuracy is one
    number for every length or a {x_train: accuracy} dict (a length it lacks is left unevaluated)."""
    results = []
    for seed, accuracy in enumerate(accuracies):
        result = json.loads((COMMITTED / f"s3-transformer-{tokenizer}-k{k}-s{seed}.json").read_text())
        result["arch"] = arch
        result["config"]["task"]["action_set"] = action_set
        by_length = accuracy if isinstance(accuracy, dict) else {}
        for row in result["eval"]["lengths"]:
            row.pop("reveal_accuracy")
            value = by_length.get(row["x_train"]) if by_length else accuracy
            if value is not None:
                row["reveal_accuracy"] = value
        results.append(result)
    return results


def write(folder: Path, *cells: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for result in (r for c in cells for r in c):
        name = f"{result['arch']}-{result['config']['task']['action_set']}-{result['cell']}.json"
        (folder / name).write_text(json.dumps(result))


def table(lines: list[str], title: str) -> list[str]:
    start = lines.index(title)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def titles(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("## ")]


def test_no_results_no_section(tmp_path):
    assert transformer_variants_lines(tmp_path, cell("transformer", [0.9, 0.9, 0.9])) == []


def test_a_variant_follows_the_paper_grids_row_with_both_verdicts(tmp_path):
    write(
        tmp_path / "transformer_variants",
        cell("transformer-nope", [0.95, 0.96, 0.97]),
        cell("transformer-4l", [0.5, 0.6, 0.95]),
    )
    lines = transformer_variants_lines(tmp_path, cell("transformer", [0.2, 0.3, 0.4]))
    rows = [line for line in lines if line.startswith("| paper grid") or line.startswith("| variant")]
    labels = ["Transformer", "Transformer, no positions (NoPE)", "Transformer, 4 layers"]
    assert [r.split(" | ")[2] for r in rows] == labels
    assert rows[0].startswith("| paper grid (rotary, 2 layers) |")
    assert "| S3 | statement | 1 | Transformer, no positions (NoPE) | **learns** | does not learn |" in lines
    assert "| S3 | statement | 1 | Transformer, 4 layers | does not learn | does not learn |" in lines
    assert titles(lines) == ["## Transformer variants: positions and depth"]
    assert "positions_depth.toml`, 8,000 steps)" in lines[2]  # the budget the runs record


def test_a_variant_is_matched_to_the_grid_cell_of_its_tokenizer_and_spacing(tmp_path):
    write(tmp_path / "transformer_variants", cell("transformer-6l", [0.95, 0.96, 0.97], k=4))
    grid = cell("transformer", [0.2, 0.3, 0.4], k=1) + cell("transformer", [0.95] * 3, k=4, tokenizer="code")
    lines = transformer_variants_lines(tmp_path, grid)
    assert "| S3 | statement | 4 | Transformer, 6 layers | **learns** | not in the grid |" in lines
    assert not any(line.startswith("| paper grid") for line in lines)  # neither the k = 1 nor the code cell
    lines = transformer_variants_lines(tmp_path, grid + cell("transformer", [0.3] * 3, k=4))
    assert "| S3 | statement | 4 | Transformer, 6 layers | **learns** | does not learn |" in lines
    assert sum(line.startswith("| paper grid") for line in lines) == 1


@pytest.mark.parametrize(
    ("at_4x", "verdict"),
    [
        ([0.5, 0.6, 0.95], "**holds** (learns at 1x)"),
        ([0.95, 0.96, 0.92], "fails"),
        ([0.95, 0.95, 0.1], "mixed"),
    ],
)
def test_the_full_action_claim_is_judged_at_the_longest_length(tmp_path, at_4x, verdict):
    accuracies = [{1.0: 0.99, 2.0: 0.95, 4.0: a} for a in at_4x]  # 1x and 2x learned: 4x decides
    write(
        tmp_path / "transformer_variants",
        cell("transformer", accuracies, action_set="full"),
        cell("deltanet-neg", [1.0, 1.0, 1.0], action_set="full"),
    )
    lines = transformer_variants_lines(tmp_path, [])
    lines = table(lines, "## Transformer variants: the full action set with dense reveals")
    rows = [line for line in lines if line.startswith("| full actions |")]
    assert [r.split(" | ")[2] for r in rows] == ["Transformer", "DeltaNet β∈[0,2]"]  # the Transformer first
    assert "| S3 | 1 | **learns** " in "\n".join(lines)
    assert any(line.startswith("| S3 | 1 |") and line.endswith(f"| {verdict} |") for line in lines)
    assert titles(transformer_variants_lines(tmp_path, [])) == [
        "## Transformer variants: the full action set with dense reveals"
    ]


def test_a_seed_without_a_result_shows_as_a_dash(tmp_path):
    accuracies = [{1.0: 0.99, 4.0: 0.5}, {1.0: 0.98, 4.0: 0.4}, {2.0: 0.5}]  # seed 2: no 1x, no 4x
    write(tmp_path / "transformer_variants", cell("transformer", accuracies, action_set="full"))
    row = next(line for line in transformer_variants_lines(tmp_path, []) if line.startswith("| full actions |"))
    assert "| 0.985 [0.980–0.990] | 0.990, 0.980, – |" in row


def test_missing_seeds_or_lengths_are_not_measured():
    def run(accuracies):
        return {"eval": {"lengths": [{"x_train": x, "reveal_accuracy": a} for x, a in accuracies]}}

    assert generalises_verdict([run([(1.0, 1.0), (4.0, 0.2)])] * 2) == "not measured (2 of 3 seeds)"
    only_1x = [run([(1.0, 1.0)])] * 3
    assert generalises_verdict(only_1x).startswith("not measured")
    one_short = [run([(1.0, 1.0), (4.0, 0.2)])] * 2 + [run([(1.0, 1.0), (2.0, 0.2)])]  # judged at 4x, not 2x
    assert generalises_verdict(one_short).startswith("not measured")
    never_learned = [run([(1.0, 0.4), (2.0, 0.95), (4.0, 0.3)])] * 3
    assert generalises_verdict(never_learned) == "not testable (does not learn at 1x)"  # the premise failed


@pytest.mark.parametrize(
    ("at_1x", "at_4x", "verdict"),
    [
        ([0.99, 0.98, 0.97], [0.5, 0.6, 0.4], HOLDS),  # learned, then fell off with length
        ([0.99, 0.98, 0.97], [0.95, 0.96, 0.92], DOES_NOT_HOLD),  # learned and generalised
        ([0.8, 0.7, 0.75], [0.5, 0.4, 0.45], NOT_TESTABLE),  # never learned: nothing to generalise
    ],
)
def test_the_full_permutation_claim_joins_the_claims_table_with_its_premise(tmp_path, at_1x, at_4x, verdict):
    accuracies = [{1.0: a, 2.0: (a + b) / 2, 4.0: b} for a, b in zip(at_1x, at_4x)]
    full = cell("transformer", accuracies, action_set="full") + cell("deltanet-neg", [1.0] * 3, action_set="full")
    claims = full_actions_claims(full + cell("transformer", [0.99] * 3))  # a swaps cell is not asked
    assert [(c.key, c.setting, c.verdict) for c in claims] == [("transformer-full", "S3 full actions", verdict)]
    assert f"of 3 seeds ≥ 0.9; {sum(at_4x) / 3:.3f} at 4x; window-4 predictor" in claims[0].evidence
