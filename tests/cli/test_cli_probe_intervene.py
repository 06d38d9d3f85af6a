"""`deltalens probe` and `deltalens intervene` on saved checkpoints (hand-set DeltaNet, Transformer)."""

import json

import pytest

from deltalens.cli.main import build_parser, main


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_commands_are_listed():
    help_text = build_parser().format_help()
    assert "probe" in help_text and "intervene" in help_text


def test_probe_json(capsys, hand_path):
    report = _json(capsys, ["probe", hand_path, "--json", "--n-traces", "32"])
    assert report["architecture"] == "deltanet" and report["tracking_head"] == {"layer": 1, "head": 1}
    heads = {(h["layer"], h["head"]): h for h in report["heads"]}
    assert sorted(heads) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for row in heads.values():
        assert {
            "neg_eig_fraction",
            "reflection_fraction",
            "effective_rank",
            "pca_dim_99",
            "probe_accuracy",
            "probe_control_value",
            "key_rank",
        } <= set(row)
    track = heads[(1, 1)]
    assert track["reflection_fraction"] == 1.0 and track["neg_eig_fraction"] == 1.0
    assert track["probe_accuracy"] == 1.0 and track["key_rank"] == 2
    assert all(heads[h]["reflection_fraction"] == 0.0 for h in heads if h != (1, 1))
    assert {layer["site"] for layer in report["layers"]} == {"embed", "L0", "L1"}


def test_probe_text(capsys, hand_path):
    assert main(["probe", hand_path, "--n-traces", "8", "--no-probes"]) == 0
    out = capsys.readouterr().out
    assert "tracking head: layer 1 head 1" in out and "reflection_fraction" in out


def test_intervene_sweep_json(capsys, hand_path):
    report = _json(capsys, ["intervene", hand_path, "--sweep", "beta-range", "--json", "--n-traces", "32"])
    assert report["baseline"] == 1.0
    first, *rest = report["heads"]
    assert (first["layer"], first["head"]) == (1, 1) and first["accuracy"] < 0.6
    assert [r["accuracy"] for r in rest] == [1.0, 1.0, 1.0]


def test_intervene_one_head(capsys, hand_path):
    report = _json(
        capsys,
        ["intervene", hand_path, "--layer", "1", "--head", "1", "--beta-scale", "0.5", "--json", "--n-traces", "32"],
    )
    assert report["baseline"] == 1.0 and report["accuracy"] < 0.6 and report["intervention"] == "L1H1 beta x0.5"
    decoy = _json(
        capsys,
        ["intervene", hand_path, "--layer", "0", "--head", "1", "--beta-range", "0", "1", "--json", "--n-traces", "16"],
    )
    assert decoy["accuracy"] == 1.0
    ablated = _json(
        capsys,
        [
            "intervene",
            hand_path,
            "--layer",
            "1",
            "--head",
            "1",
            "--ablate",
            "zero",
            "--site",
            "state",
            "--json",
            "--n-traces",
            "16",
        ],
    )
    assert ablated["accuracy"] == 0.0
    assert main(["intervene", hand_path, "--layer", "1", "--head", "1", "--n-traces", "8"]) == 0
    assert "reveal accuracy 1.0000 ->" in capsys.readouterr().out


def test_intervene_beta_reflect(capsys, hand_path):
    one = ["intervene", hand_path, "--layer", "1", "--head", "1", "--beta-reflect", "--json", "--n-traces", "16"]
    report = _json(capsys, one)
    assert report["intervention"] == "L1H1 beta -> 2 - beta" and report["accuracy"] < 0.6
    swept = _json(capsys, ["intervene", hand_path, "--sweep", "beta-reflect", "--json", "--n-traces", "16"])
    assert swept["intervention"] == "beta-reflect" and (swept["heads"][0]["layer"], swept["heads"][0]["head"]) == (1, 1)
    with pytest.raises(SystemExit):  # argparse: one intervention at a time
        main(["intervene", hand_path, "--layer", "1", "--head", "1", "--beta-reflect", "--beta-clip", "1"])
    assert "not allowed with argument --beta-reflect" in capsys.readouterr().err


def test_intervene_split_transition_and_write(capsys, hand_path):
    head = ["intervene", hand_path, "--layer", "1", "--head", "1", "--json", "--n-traces", "16"]
    clipped = _json(capsys, [*head, "--transition-clip", "1"])
    assert clipped["intervention"] == "L1H1 transition beta clipped at 1 (write kept)" and clipped["accuracy"] < 0.6
    assert _json(capsys, [*head, "--eigen-abs"])["accuracy"] < 0.6
    assert _json(capsys, [*head, "--transition-range", "0", "1"])["accuracy"] < 0.6
    halved = _json(capsys, [*head, "--write-scale", "0.5"])  # the tracker's reflections need no write
    assert halved["intervention"] == "L1H1 write x0.5 (transition kept)" and halved["accuracy"] == 1.0
    swept = _json(capsys, ["intervene", hand_path, "--sweep", "transition-clip", "--json", "--n-traces", "16"])
    assert (swept["heads"][0]["layer"], swept["heads"][0]["head"]) == (1, 1) and swept["heads"][0]["accuracy"] < 0.6
    assert main([*head, "--eigen-abs", "--factor", "1"]) == 2
    assert "factor 1 is out of range" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--layer", "1"], "say which head"),
        (["--layer", "9", "--head", "0"], "layer 9 is out of range"),
        (["--sweep", "beta-range", "--layer", "1"], "drop --layer"),
    ],
)
def test_intervene_errors(capsys, hand_path, argv, message):
    assert main(["intervene", hand_path, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_transformer_checkpoint(capsys, transformer_path):
    assert main(["probe", transformer_path, "--json", "--n-traces", "8"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["architecture"] == "transformer" and report["heads"] == [] and report["tracking_head"] is None
    assert {layer["site"] for layer in report["layers"]} == {"embed", "L0", "L1"}
    assert "a Transformer has no delta-rule layer" in captured.err
    assert "a Transformer has no delta-rule layer" in report["skipped"][0]
    assert main(["intervene", transformer_path, "--sweep", "beta-range"]) == 2
    err = capsys.readouterr().err
    assert "a Transformer, which has no beta" in err
    report = _json(capsys, ["intervene", transformer_path, "--sweep", "zero-z", "--json", "--n-traces", "8"])
    assert len(report["heads"]) == 4
