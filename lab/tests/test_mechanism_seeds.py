"""lab/experiments/mechanism_seeds.py: its decision rules on made-up sweeps, and one run on the hand-set tracker."""

import importlib
import json

import pytest
from handset import swap_model


@pytest.fixture(scope="module")
def mech():
    return importlib.import_module("lab.experiments.mechanism_seeds")


def _head(layer, head, clip=1.0, rng=1.0, reflect=1.0, mean=1.0, pca=20, probe=0.3, beta=0.8, reflections=0.0):
    return {
        "layer": layer,
        "head": head,
        "beta-clip": clip,
        "beta-range": rng,
        "beta-reflect": reflect,
        "mean-z": mean,
        "pca_dim_90": pca,
        "probe_value": probe,
        "mean_beta_action": beta,
        "reflection_fraction": reflections,
    }


def _record(heads, beta_range=(0, 2)):
    floors = {"chance": 1 / 3, "last_reveal": 0.35, "window": 0.75}
    return {"heads": heads, "baseline": 1.0, "floors": floors, "recorded_1x": 1.0, "beta_range": list(beta_range)}


def test_the_seed0_pattern_is_isolated(mech):
    heads = [
        _head(0, 3, clip=0.375, rng=0.369, reflect=0.35, mean=0.371, pca=10, probe=1.0, beta=1.98, reflections=0.9),
        _head(0, 0, mean=0.0, pca=15),
        _head(1, 1, clip=0.98, pca=40),
    ]
    d = mech.decide(_record(heads))
    assert d["tracking_head"] == "L0H3" and d["tracking_layer"] == 0 and d["beta2_heads"] == ["L0H3"]
    assert d["isolated"] and d["pca_lowest"] and d["pca_rank"] == 1
    assert d["agrees_with_beta"] and d["agrees_with_probe"]
    assert d["mean_ablation_heads"] == ["L0H0", "L0H3"]  # below chance counts as read-out damage in b2 only


@pytest.mark.parametrize(
    "other,failing",
    [
        (_head(1, 0, clip=0.9), "b1_other_clips_harmless"),  # another head's beta > 1 matters too
        (_head(1, 0, rng=0.9), "b3_other_rescales_harmless"),  # any rescale hurts
    ],
)
def test_isolation_fails_when_another_head_matters(mech, other, failing):
    heads = [_head(0, 3, clip=0.4, rng=0.4, mean=0.4, pca=30), other, _head(1, 1, pca=5)]
    d = mech.decide(_record(heads))
    assert d["tracking_head"] == "L0H3" and not d[failing] and not d["isolated"]
    assert not d["pca_lowest"] and d["pca_rank"] == 3


def test_clip_weaker_than_ablation_and_no_tracking_head(mech):
    d = mech.decide(_record([_head(0, 0, clip=0.8, mean=0.34), _head(0, 1)]))
    assert d["tracking_head"] == "L0H0" and not d["b2_clip_as_mean_ablation"] and not d["isolated"]
    d = mech.decide(_record([_head(0, 0, clip=0.95, mean=0.3), _head(0, 1)]))  # drop 0.05 < MARGIN
    assert d["tracking_head"] is None and not d["isolated"]


def test_rule_d_splits_transition_from_write(mech):
    split = {"transition-clip": 0.37, "write-clip": 0.99, "write-half": 1.0, "eigen-abs": 0.34}
    track = dict(clip=0.375, rng=0.369, mean=0.371, pca=10, probe=1.0, beta=1.98, reflections=0.9)
    others = [{**_head(0, 0), **dict.fromkeys(split, 1.0)}, {**_head(1, 1), **dict.fromkeys(split, 0.99)}]
    d = mech.decide(_record([{**_head(0, 3, **track), **split}, *others]))
    assert d["split_measured"] and d["negative_eigenvalue_carries"]
    assert d["d1_transition_clip_as_mean_ablation"] and d["d2_write_clip_harmless"]
    assert abs(d["transition_clip_over_mean"] - 0.63 / (1 - 0.371)) < 1e-9 and d["write_half_drop"] == 0.0
    assert d["write_clip_drop"] == pytest.approx(0.01)
    assert d["max_other_split_drops"] == pytest.approx(dict.fromkeys(split, 0.01))
    for change, failing in (
        ({"write-clip": 0.8}, "d2_write_clip_harmless"),
        ({"transition-clip": 0.7}, "d1_transition_clip_as_mean_ablation"),
    ):
        d = mech.decide(_record([{**_head(0, 3, **track), **split, **change}, *others]))
        assert not d[failing] and not d["negative_eigenvalue_carries"]
    d = mech.decide(_record([_head(0, 3, **track), _head(0, 0)]))  # measured before the split sweeps existed
    assert d["split_measured"] is False and d["negative_eigenvalue_carries"] is None


def test_positive_models_get_a_carrier(mech):
    heads = [{**_head(0, 0, mean=0.3, probe=0.95, pca=8), "beta-half": 0.6}, {**_head(0, 1, mean=0.5), "beta-half": 1}]
    d = mech.decide(_record(heads, beta_range=(0, 1)))
    assert d["carrier"] == "L0H0" and not d["mean_ablation_isolates_one"] and d["half_heads"] == ["L0H0"]
    assert d["carrier_pca_lowest"]


def test_run_on_the_hand_set_tracker(mech, tmp_path):
    hand = swap_model()
    path = hand.save(tmp_path / "hand")
    out = tmp_path / "out"
    argv = [str(path), "--label", "hand", "--out", str(out), "--n-traces", "24", "--test-traces", "32"]
    assert mech.main(argv) == 0
    record = json.loads((out / "hand-hand.json").read_text())
    d = record["decision"]
    assert record["baseline"] == 1.0 and record["test_512"] == 1.0 and record["beta_range"] == [0, 2]
    assert d["tracking_head"] == "L1H1" and d["beta2_heads"] == ["L1H1"] and d["isolated"]
    track = next(h for h in record["heads"] if (h["layer"], h["head"]) == (1, 1))
    assert track["beta_gt1_action"] == 1.0 and track["probe_value"] == 1.0
    assert d["split_measured"] and d["negative_eigenvalue_carries"]
    assert track["transition-clip"] < 0.6 and track["write-half"] == 1.0 and track["eigen-abs"] < 0.6
    assert track["write-clip"] == 1.0  # the tracker writes with beta 1 only
    readme = out / "README.md"
    assert "| hand hand" in readme.read_text() and " 1.000 / 0.344 / 0.396 | 1.09 | 1.09 | " in readme.read_text()
    # --add-sweeps restores split sweeps a JSON lacks, on the same traces, and keeps the rest
    for head in record["heads"]:
        del head["write-half"], head["eigen-abs"]
    record["decision"] = mech.decide(record)
    assert record["decision"]["split_measured"] is False
    (out / "hand-hand.json").write_text(json.dumps(record))
    readme.write_text(readme.read_text() + "\n<!-- other: begin -->\nkept\n<!-- other: end -->\n")
    assert mech.main([*argv, "--add-sweeps"]) == 0
    again = json.loads((out / "hand-hand.json").read_text())
    assert again["decision"]["negative_eigenvalue_carries"] and again["heads"][3]["write-half"] == 1.0
    assert "<!-- other: begin -->\nkept" in readme.read_text()  # another script's section stays
    with pytest.raises(mech.DeltalensError, match="no model.safetensors"):
        mech.locate(tmp_path)
