"""lab/experiments/family_corrections.py on the hand-set DeltaProduct of tests/handset.py (S3, n_h = 2, head 1
tracks): factor 0 writes the initial values and applies each action's first swap, factor 1 only the
second swap of a 3-cycle. So with factor 1 off the transpositions stay right and the 3-cycles go, and
only the tracking head's factors matter."""

from pathlib import Path

import pytest
from handset import product_model

from lab.experiments import family_corrections


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    path = product_model(spacing=4).save(tmp_path_factory.mktemp("ckpt") / "product")
    return family_corrections.probe_checkpoint(str(path), traces=16, probe_traces=12, single=48)


def test_the_corrections_of_a_hand_set_deltaproduct(result):
    assert result["n_householder"] == 2 and result["accuracy"]["reveal_accuracy"] == 1.0
    single = {row["cycle_type"]: row["accuracy"] for row in result["accuracy"]["single_action"]}
    assert single == {"2+1": 1.0, "3": 1.0}
    second_off = {row["cycle_type"]: row["accuracy"] for row in result["ablation"][1]["single_action"]}
    assert second_off["2+1"] == 1.0 and second_off["3"] < 0.6  # a 3-cycle needs both swaps
    assert result["ablation"][0]["reveal_accuracy"] < 0.6  # factor 0 also writes the initial values
    per_head = {(r["layer"], r["head"], r["factor"]): r["reveal_accuracy"] for r in result["ablation_per_head"]}
    assert per_head[(0, 0, 0)] == per_head[(0, 0, 1)] == 1.0 and per_head[(0, 1, 1)] < 1.0
    exact = result["representations"]["action"]["reps"]["standard"]["tracking_by_type"]
    assert {row["cycle_type"] for row in exact} >= {"2+1", "3"}  # the hand-set head applies every action exactly
    assert all(row["decoded_accuracy"] == 1.0 and row["median_residual"] < 1e-3 for row in exact)
    by_need = result["representations"]["action"]["reps"]["standard"]["tracking_by_most_reflections"]
    assert [row["most_reflections_of_an_action"] for row in by_need] == [0, 1, 2]
    assert all(row["median_residual"] < 1e-3 for row in by_need)
    readout = result["representations"]["readout"]
    assert list(readout["reps"]) == ["standard"] and readout["reps"]["standard"]["best_head"] == [0, 1]
    text = family_corrections.markdown([result])
    assert "## Product probe per representation" in text and "factor 1 off" in text


def test_a_training_run_is_named_by_its_run_folder():
    assert family_corrections.checkpoint_name(Path("runs/a5-x-k4-s0-9f2b75dd/last")) == "a5-x-k4-s0-9f2b75dd"
    assert family_corrections.checkpoint_name(Path("checkpoints/a5-deltaproduct-n4-full")) == "a5-deltaproduct-n4-full"


def test_three_reflections_near_a_five_cycle_decode_alone_but_not_composed():
    from lab.experiments import family_a5_puzzle

    out = family_a5_puzzle.run(samples=300, lengths=(1, 4), starts=3)
    assert out["single_decoded"] == 1.0 and out["five_cycle_residual"] > 0.5  # nearest, yet far from exact
    one, four = out["compositions"]
    assert one["decoded"] == 1.0 and four["without"] == 1.0 and four["with_a_five_cycle"] < 0.7


CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"


def test_the_shipped_n2_a5_model_applies_single_five_cycles_its_head_does_not():
    """lab/results/README.md, the family: L0H2 decodes 5-cycles poorly per action, the model applies them."""
    from deltalens.loading.opened import open_checkpoint
    from deltalens.probes.cycle_accuracy import reveal_frame, single_action_table

    checkpoint = open_checkpoint(CHECKPOINTS / "a5-deltaproduct-n2-noconv-full")
    frame = reveal_frame(checkpoint.model, checkpoint.batch(256, seed=0, actions=1, spacing=1))
    table = single_action_table(frame, 5).set_index("cycle_type")
    assert table.loc["5", "n"] > 50 and table.loc["5", "accuracy"] >= 0.95


def test_the_shipped_s4_noconv_head_is_the_standard_representation_not_the_rotation_one():
    from deltalens.interp.capture import capture
    from deltalens.loading.opened import open_checkpoint
    from deltalens.probes.product_reps import representation_report

    checkpoint = open_checkpoint(CHECKPOINTS / "s4-deltaproduct-n3-noconv-full")
    cap = capture(checkpoint.model, checkpoint.batch(32, seed=0), names=("beta", "k"))
    report = representation_report(cap)
    assert report.best("standard")["applies"] and (report.best("standard")[["layer", "head"]] == [0, 2]).all()
    assert report.best("rotation (cube)")["decoded_accuracy"] < 0.5
