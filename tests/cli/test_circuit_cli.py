"""`deltalens probe --attribution | --automaton` and `deltalens intervene --patch-grid` on saved checkpoints."""

import json

import pytest

from deltalens.cli.main import main


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_attribution_ranks_the_hand_set_tracking_head(capsys, hand_path):
    report = _json(capsys, ["probe", hand_path, "--attribution", "--n-traces", "4", "--json"])
    top = report["heads"][0]
    assert (top["layer"], top["head"], top["rank"]) == (1, 1, 1)
    assert report["sites"] == ["z", "beta", "state"] and report["dla_error"] < 1e-3
    assert report["clean_metric"] > 0 > report["corrupt_metric"]
    assert max(report["heads"], key=lambda row: row["dla"])["head"] == 1  # the tracker writes the answer
    assert main(["probe", hand_path, "--attribution", "--n-traces", "4"]) == 0
    out = capsys.readouterr().out
    assert "DLA" in out and "ap_state" in out


def test_automaton_of_the_hand_set_tracker_is_the_cayley_graph(capsys, hand_path):
    argv = ["probe", hand_path, "--automaton", "--layer", "1", "--head", "1", "--n-traces", "24"]
    report = _json(capsys, argv + ["--json"])
    assert report["states"] == report["arrangements"] == 6 and report["isomorphic_to_cayley"]
    assert report["transition_agreement"] == 1.0 and report["delay"] == 0  # no short convolution: no lag
    assert main(argv) == 0 and "isomorphic to the Cayley graph" in capsys.readouterr().out


def test_patch_grid_finds_the_tracking_head(capsys, hand_path):
    report = _json(capsys, ["intervene", hand_path, "--patch-grid", "--n-traces", "4", "--json"])
    assert report["top"] == [1, 1] and report["site"] == "z" and report["n_forwards"] == 2 * 2 + 2
    assert report["restored"][1][1] > 0.5 and len(report["metric"]) == 2
    assert main(["intervene", hand_path, "--patch-grid", "--site", "state", "--n-traces", "4"]) == 0
    assert "L1H1 stands out: it raises the metric" in capsys.readouterr().out


def test_transformer_gets_attribution_patching_without_dla(capsys, transformer_path):
    report = _json(capsys, ["probe", transformer_path, "--attribution", "--n-traces", "2", "--json"])
    assert report["sites"] == ["z"] and all(row["dla"] is None for row in report["heads"])
    assert any(row["ap_z"] != 0 for row in report["heads"])


@pytest.mark.parametrize(
    "argv,message",
    [
        (["intervene", "{t}", "--patch-grid", "--site", "beta"], "no per-head hook_beta"),
        (["probe", "{t}", "--automaton", "--layer", "0", "--head", "0"], "no state"),
        (["probe", "{h}", "--automaton"], "--layer L --head H"),
        (["probe", "{h}", "--layer", "1"], "add --automaton"),
        (["intervene", "{h}", "--patch-grid", "--layer", "1"], "--patch-grid patches every head"),
        (["intervene", "{h}", "--layer", "1", "--head", "1", "--ablate", "zero", "--site", "beta"], "--site beta"),
    ],
)
def test_bad_circuit_flags_are_one_sentence(capsys, hand_path, transformer_path, argv, message):
    argv = [a.format(h=hand_path, t=transformer_path) for a in argv] + ["--n-traces", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
