"""`deltalens train` and `deltalens eval` end to end on a tiny model."""

import json

from tiny_runs import tiny_config

from deltalens.cli.main import main
from deltalens.tasks import TraceSpec, generate_trace
from deltalens.training.config import dump_toml


def test_train_then_eval_generated_and_written_traces(tmp_path, capsys):
    config = tmp_path / "train.toml"
    config.write_text(dump_toml(tiny_config(arch="lstm", steps=2)))
    assert (
        main(["train", str(config), "run.eval_every=0", "--out", str(tmp_path / "run"), "--no-progress", "--json"]) == 0
    )
    trained = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert trained["step"] == 2 and 0.0 <= trained["reveal_accuracy"] <= 1.0

    ckpt = str(tmp_path / "run" / "last")
    assert main(["eval", ckpt, "--n-traces", "8", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["actions"] for row in report["lengths"]] == [6, 12, 24]
    assert report["reveal_accuracy"] == min(row["reveal_accuracy"] for row in report["lengths"])

    texts = [generate_trace(TraceSpec(group="S3", actions=10, spacing=3), seed).text for seed in range(5)]
    traces = tmp_path / "traces.txt"
    traces.write_text("\n".join(texts))  # blank line between traces
    assert main(["eval", ckpt, "--traces", str(traces), "--json"]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["n_traces"] == 5 and scored["n_reveals"] == 15 and "trace_accuracy" in scored


def test_eval_errors_are_one_line(tmp_path, capsys):
    assert main(["eval", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nowhere" in err[0]


def test_each_command_reads_config_json_once(monkeypatch, capsys):
    """The CLI reads and checks the folder once, before torch, and passes that reading down (before:
    eval opened config.json 4 times and checked the memory bound 3 times; probe and intervene 3 and 3)."""
    import builtins
    import io
    import os

    from deltalens.models.io import footprint

    opened, budgets = [], []
    real_open, real_budget = io.open, footprint.memory_budget

    def counting_open(file, *args, **kwargs):
        if os.path.basename(str(file)) == "config.json":
            opened.append(file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(io, "open", counting_open)
    monkeypatch.setattr(footprint, "memory_budget", lambda: budgets.append(1) or real_budget())
    checkpoint = "s3-deltanet-neg-statement"
    for argv in (
        ["eval", checkpoint, "--n-traces", "4", "--json"],
        ["probe", checkpoint, "--n-traces", "4", "--no-probes", "--json"],
        ["intervene", checkpoint, "--layer", "0", "--head", "1", "--beta-range", "0", "1", "--n-traces", "4", "--json"],
    ):
        opened.clear(), budgets.clear()
        assert main(argv) == 0 and json.loads(capsys.readouterr().out)
        assert (len(opened), len(budgets)) == (1, 1), (argv[0], opened)
