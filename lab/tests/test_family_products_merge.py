"""lab/experiments/family_products.py keeps the rows of runs whose checkpoints are gone, unless retrained."""

import json

from lab.experiments.family_products import merge_rows, previous_rows


def test_a_fresh_probe_wins_a_gone_checkpoint_keeps_its_row_and_a_retrained_cell_does_not():
    previous = {
        "a": {"cell": "a", "reveal_accuracy_1x": 0.5, "decoded_accuracy": 0.1},
        "b": {"cell": "b", "reveal_accuracy_1x": 0.7, "decoded_accuracy": 0.2},
        "c": {"cell": "c", "reveal_accuracy_1x": 0.9, "decoded_accuracy": 0.3},
    }
    probed = {"a": {"cell": "a", "reveal_accuracy_1x": 0.5, "decoded_accuracy": 0.4}}
    # b: checkpoint gone, same model; c: retrained (another 1x accuracy); d: never probed
    rows, kept, missing = merge_rows({"a": 0.5, "b": 0.7, "c": 0.8, "d": 0.6}, probed, previous)
    assert [r["cell"] for r in rows] == ["a", "b"]
    assert rows[0]["decoded_accuracy"] == 0.4 and rows[1]["decoded_accuracy"] == 0.2
    assert kept == ["b"] and missing == ["c", "d"]


def test_previous_rows_only_from_the_same_sweep(tmp_path):
    path = tmp_path / "products.json"
    assert previous_rows(path, "lab/grids/family.toml") == {}
    path.write_text(json.dumps({"sweep": "lab/grids/family.toml", "runs": [{"cell": "x", "reveal_accuracy_1x": 0.3}]}))
    assert set(previous_rows(path, "lab/grids/family.toml")) == {"x"}
    assert previous_rows(path, "lab/grids/other.toml") == {}
