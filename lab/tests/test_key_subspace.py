"""lab/experiments/key_subspace.py and lab/experiments/mechanism_counts.py: the rules on made-up models, the README
sections they (re)write, and (slow) the key dimension of the shipped S3 tracking head."""

import importlib
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(name: str):
    return importlib.import_module(f"lab.experiments.{name}")


@pytest.fixture(scope="module")
def keys():
    return _load("key_subspace")


@pytest.fixture(scope="module")
def counts():
    return _load("mechanism_counts")


def _model(key_dims, q_dims=None, n=3, tracking="L0H0"):
    heads = [
        {"head": f"L0H{i}", "key_dim_99": k, "q_dim_99": (q_dims or key_dims)[i], "pca_dim_90": 10}
        for i, k in enumerate(key_dims)
    ]
    return {"name": "m", "n": n, "tracking_head": tracking, "tracking_head_from": "x.json", "heads": heads}


def test_rule_k_needs_the_lowest_key_dimension_and_n(keys):
    assert keys.decide(_model([3, 10, 12]))["key_rule"]
    tied_not_n = keys.decide(_model([6, 6, 14], n=5))
    assert tied_not_n["key_lowest"] and not tied_not_n["key_equals_n"] and not tied_not_n["key_rule"]
    assert not keys.decide(_model([3, 2, 12]))["key_rule"]  # another head is lower
    assert keys.decide(_model([3, 10], tracking=None)) == {"has_tracking_head": False}
    models = [_model([3, 10, 12]), _model([3, 10, 12]), _model([6, 6, 14], n=5)]
    for m in models:
        m["decision"] = keys.decide(m)
    assert keys.verdict(models, "key_rule") == (2, 3, "supported")  # 2 of 3 is two thirds
    models[1] = {**models[2]}
    assert keys.verdict(models, "key_rule") == (1, 3, "not supported")


def test_the_tracking_head_is_read_from_the_json_of_the_same_weights(keys, tmp_path):
    """Two labels may hold a cell of the same name (a grid run and a sparse-only run): the weights folder's
    last two parts tell them apart; a checkpoint matches however the repo was moved."""
    cell = "s3-deltanet-neg-statement-k4-s1"
    for label, run, head in (("sweep", "aaaa1111", "L0H1"), ("sparse", "bbbb2222", "L0H2")):
        record = {"name": cell, "weights": f"/old/place/runs/{cell}-{run}/last", "decision": {"tracking_head": head}}
        (tmp_path / f"{label}-{cell}.json").write_text(json.dumps(record))
    shipped = {"name": "s3-x", "weights": "/elsewhere/checkpoints/s3-x", "decision": {"tracking_head": "L0H3"}}
    (tmp_path / "shipped-s3-x.json").write_text(json.dumps(shipped))

    def where(weights, name):
        return {"weights": Path(weights), "name": name}

    assert keys.tracking_head(where(f"/new/runs/{cell}-bbbb2222/last", cell), tmp_path)[0] == "L0H2"
    assert keys.tracking_head(where(f"/new/runs/{cell}-aaaa1111/last", cell), tmp_path)[0] == "L0H1"
    assert keys.tracking_head(where("/repo/checkpoints/s3-x", "s3-x"), tmp_path)[0] == "L0H3"
    assert keys.tracking_head(where(f"/new/runs/{cell}-cccc3333/last", cell), tmp_path) == (None, "")


def test_sections_are_rewritten_in_place_and_the_rest_kept(keys, counts, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# table\n\nkept\n")
    record = _model([3, 10, 12])
    record["decision"] = keys.decide(record)
    keys.append_section(readme, keys.section([record]))
    counts.append_section(readme, "<!-- mechanism-counts: begin -->\nfirst\n<!-- mechanism-counts: end -->\n")
    counts.append_section(readme, "<!-- mechanism-counts: begin -->\nsecond\n<!-- mechanism-counts: end -->\n")
    keys.append_section(readme, keys.section([record]))
    text = readme.read_text()
    assert text.startswith("# table\n\nkept\n") and text.count(keys.BEGIN) == 1 and text.count(counts.BEGIN) == 1
    assert "second" in text and "first" not in text
    assert "rule (k) holds in 1 of 1, the keys' subspace claim is **supported**" in text


def test_counts_follow_the_mechanism_jsons(counts, tmp_path):
    def record(name, spacing, beta2, clip):
        heads = [
            {"layer": 0, "head": 0, "beta-clip": clip, "beta_gt1_action": 0.0, "beta_gt1_all": 0.5},
            {"layer": 0, "head": 1, "beta-clip": 1.0, "beta_gt1_action": 0.0, "beta_gt1_all": 0.1},
        ]
        heads[0].update(mean_beta_action=1.9, reflection_fraction=1.0 if beta2 else 0.0)
        decision = {"learned": True, "tracking_head": "L0H0", "tracking_layer": 0, "beta2_heads": beta2}
        base = {"name": name, "label": "t", "spacing": spacing, "beta_range": [0, 2], "baseline": 1.0}
        return {**base, "heads": heads, "decision": decision}

    for i, (k, beta2, clip) in enumerate([(4, ["L0H0"], 0.3), (4, [], 0.3), (1, ["L0H0", "L0H1"], 0.7)]):
        (tmp_path / f"m{i}.json").write_text(json.dumps(record(f"m{i}", k, beta2, clip)))
    text = counts.section(counts.models(tmp_path))
    assert "1 of 2 with sparse reveals (k > 1), 0 of 1 with dense ones (k = 1), 1 of 3 overall" in text
    assert "clipping T's beta at 1 costs 0.30-0.30" in text


@pytest.mark.slow  # about 20 s on a 2-core CPU
def test_the_shipped_s3_tracking_heads_keys_span_three_dimensions(keys):
    record = keys.measure(REPO / "checkpoints" / "s3-deltanet-neg-statement", REPO / "lab" / "results" / "mechanism")
    tracking = next(h for h in record["heads"] if h["head"] == record["tracking_head"])
    assert record["tracking_head"] == "L0H3" and tracking["key_dim_99"] == 3
    assert all(h["key_dim_99"] >= 8 for h in record["heads"] if h is not tracking)
