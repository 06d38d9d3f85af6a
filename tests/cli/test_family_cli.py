"""`deltalens probe` and `deltalens intervene` on a DeltaProduct checkpoint whose mechanism is known
(tests/handset.py `product_model`: head 1 applies each action's permutation as reflections)."""

import json

import pytest
from handset import product_model, swap_model

from deltalens.cli.main import main
from deltalens.interp.capture import capture
from deltalens.probes.eigenvalues import eigenvalue_report


@pytest.fixture(scope="module")
def product_path(tmp_path_factory):
    return str(product_model().save(tmp_path_factory.mktemp("ckpt") / "product"))


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_probe_finds_the_head_whose_products_are_the_permutations(capsys, product_path):
    report = _json(capsys, ["probe", product_path, "--json", "--n-traces", "32", "--no-probes"])
    assert report["architecture"] == "deltaproduct"
    assert report["tracking_head"] == {"layer": 0, "head": 1}
    heads = {(h["layer"], h["head"]): h for h in report["heads"]}
    assert heads[(0, 1)]["perm_decoded"] == 1.0 and heads[(0, 1)]["implements"]
    assert heads[(0, 1)]["spectral_agreement"] == 1.0
    assert heads[(0, 0)]["perm_decoded"] < 0.5 and not heads[(0, 0)]["implements"]


def test_eigenvalues_of_factors_and_products():
    model = product_model()
    cap = capture(model.model, model.batch(16), names=("beta", "k"))
    report = eigenvalue_report(cap)
    track = report.heads.set_index("head").loc[1]
    assert track["parity_agreement"] == 1.0  # det of each product = the action's sign
    assert set(report.tokens["factor"]) == {0, 1}


def test_intervene_sweep_beta_range(capsys, product_path):
    report = _json(capsys, ["intervene", product_path, "--sweep", "beta-range", "--json", "--n-traces", "32"])
    assert report["baseline"] == 1.0
    heads = {(h["layer"], h["head"]): h for h in report["heads"]}
    assert heads[(0, 1)]["accuracy"] < 0.6 and heads[(0, 0)]["accuracy"] == 1.0


def test_intervene_on_one_factor(capsys, product_path):
    second = _json(
        capsys,
        [
            "intervene",
            product_path,
            "--layer",
            "0",
            "--head",
            "1",
            "--beta-range",
            "0",
            "1",
            "--factor",
            "1",
            "--json",
            "--n-traces",
            "32",
        ],
    )
    both = _json(
        capsys,
        [
            "intervene",
            product_path,
            "--layer",
            "0",
            "--head",
            "1",
            "--beta-range",
            "0",
            "1",
            "--json",
            "--n-traces",
            "32",
        ],
    )
    # factor 1 serves only the 3-cycles (2 reflections); transpositions still work: between both and none
    assert both["accuracy"] < second["accuracy"] < 0.9 and "F1" in second["intervention"]


def test_intervene_sweep_one_factor_of_every_head(capsys, product_path):
    both = _json(capsys, ["intervene", product_path, "--sweep", "beta-range", "--json", "--n-traces", "32"])
    second = _json(
        capsys, ["intervene", product_path, "--sweep", "beta-range", "--factor", "1", "--json", "--n-traces", "32"]
    )
    assert second["intervention"] == "beta-range (factor 1)"
    by_head = {(h["layer"], h["head"]): h for h in second["heads"]}
    full = {(h["layer"], h["head"]): h["accuracy"] for h in both["heads"]}
    # one factor of the tracking head costs less than all of them, and still more than any other head
    assert full[(0, 1)] < by_head[(0, 1)]["accuracy"] < 0.9
    assert all(h["accuracy"] == 1.0 for lh, h in by_head.items() if lh != (0, 1))
    assert all("F1" in h["label"] for h in second["heads"])
    assert main(["intervene", product_path, "--sweep", "zero-z", "--factor", "1"]) != 0
    assert "--sweep beta-range" in capsys.readouterr().err
    assert main(["intervene", product_path, "--sweep", "beta-range", "--factor", "2"]) != 0
    assert "factor 2 is out of range" in capsys.readouterr().err


def test_split_sweeps_take_one_factor_and_match_the_single_head_intervention(capsys, product_path):
    """--factor with a split sweep changes that factor of every head in turn; each row is what the one-head
    intervention on that factor gives."""
    args = ["--json", "--n-traces", "32"]
    swept = _json(capsys, ["intervene", product_path, "--sweep", "transition-clip", "--factor", "1", *args])
    assert swept["intervention"] == "transition-clip (factor 1)"
    assert all("F1" in h["label"] for h in swept["heads"])
    by_head = {(h["layer"], h["head"]): h["accuracy"] for h in swept["heads"]}
    one = _json(
        capsys,
        ["intervene", product_path, "--layer", "0", "--head", "1", "--transition-clip", "1", "--factor", "1", *args],
    )
    assert one["accuracy"] == by_head[(0, 1)]
    every = _json(capsys, ["intervene", product_path, "--sweep", "transition-clip", *args])
    assert "F1" not in every["heads"][0]["label"]
    assert main(["intervene", product_path, "--sweep", "eigen-abs", "--factor", "2"]) != 0
    assert "factor 2 is out of range" in capsys.readouterr().err


def test_factor_and_gate_errors_are_one_sentence(capsys, product_path, tmp_path):
    assert (
        main(["intervene", product_path, "--layer", "0", "--head", "1", "--beta-range", "0", "1", "--factor", "2"]) != 0
    )
    assert "factor 2 is out of range" in capsys.readouterr().err
    assert main(["intervene", product_path, "--layer", "0", "--head", "1", "--gate-range", "1", "1"]) != 0
    assert "does not decay" in capsys.readouterr().err
    deltanet = str(swap_model().save(tmp_path / "deltanet"))
    assert main(["intervene", deltanet, "--layer", "1", "--head", "1", "--beta-scale", "0.5", "--factor", "1"]) != 0
    assert "factor 1 is out of range" in capsys.readouterr().err
