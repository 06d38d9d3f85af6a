"""`deltalens reproduce`: grid file, cell configs, resumable cells, claims, report and figures."""

from __future__ import annotations

import json
from pathlib import Path

import plotly.io
import pytest
from tiny_runs import TINY, TINY_CELLS, hand_result, reproduce_tiny, tiny_sweep

import deltalens.grids.grid as sweep_module
from deltalens.core.errors import DeltalensError
from deltalens.grids.grid import (
    Cell,
    CellStatus,
    SearchRun,
    cell_config,
    choose_lrs,
    load_grid,
    read_results,
    read_search,
    run_cell,
    with_choices,
)
from deltalens.training.config import load_config
from deltalens.training.loop import LAST, TRAINER_STATE
from lab.experiments.report.reproduce import write_report

REPO = Path(__file__).resolve().parents[3]


def test_paper_sweep_has_every_cell_the_search_and_the_shipped_task():
    sweep = load_grid(REPO / "lab" / "grids" / "paper.toml")
    names = [c.name for c in sweep.cells]
    assert len(names) == (2 * 4 * 3 + 2) * 3 == len(set(names))  # every cell with seeds 0, 1, 2
    assert "s5-deltanet-pos-statement-k8-s2" in names and "s3-transformer-code-k4-s0" in names
    assert "s3-transformer-code-k1-s0" not in names  # code cells at spacing 4 only
    searches = read_search(sweep, REPO / "lab" / "results" / "grid")
    assert len(searches) == 2 * 4 * 2 and all(s.result is not None for s in searches)  # committed search results
    chosen = choose_lrs(sweep, searches)
    assert set(chosen) == {(g, a) for g in ("S3", "S5") for a in sweep.models} and set(chosen.values()) <= {1e-3, 3e-3}
    with pytest.raises(DeltalensError, match="no learning rate chosen yet"):
        cell_config(sweep.cells[0], sweep)
    sweep = with_choices(sweep, chosen)
    configs = [cell_config(c, sweep) for c in sweep.cells]
    # one budget and stopping rule for all; validation traces are never the test traces (eval seed 0)
    assert {
        (
            c.optim.batch_size,
            c.optim.warmup_steps,
            c.optim.min_lr_ratio,
            c.run.validation_seed,
            c.run.early_stop_accuracy,
        )
        for c in configs
    } == {(32, 100, 0.1, 1, 0.999)}
    # DeltaNet's budget, and the baselines' own (they were still improving at 4000 steps)
    assert {(cell.arch, c.run.steps) for c, cell in zip(configs, sweep.cells)} == {
        ("deltanet-neg", 4000),
        ("deltanet-pos", 4000),
        ("transformer", 8000),
        ("lstm", 8000),
    }
    assert {c.run.seed for c in configs} == {0, 1, 2}
    assert all(c.optim.lr == chosen[(cell.group, cell.arch)] for c, cell in zip(configs, sweep.cells))
    # the k = 4 cells train the shipped checkpoints' task and model (the curriculum scaled to the budget)
    for shipped, cell in [
        ("s3-deltanet-neg-statement", Cell("S3", "deltanet-neg", 4, "statement")),
        ("s5-deltanet-pos-statement", Cell("S5", "deltanet-pos", 4, "statement")),
        ("s3-transformer-code", Cell("S3", "transformer", 4, "code")),
    ]:
        shipped_config = load_config(REPO / "checkpoints" / shipped / "train.toml").to_dict()
        ours = cell_config(cell, sweep).to_dict()
        assert ours["model"] == shipped_config["model"]
        assert {k: v for k, v in ours["task"].items() if k != "spacing_schedule"} == {
            k: v for k, v in shipped_config["task"].items() if k != "spacing_schedule"
        }
    k8 = cell_config(Cell("S5", "deltanet-pos", 8, "statement"), sweep).task
    assert k8.spacing_schedule == [[0, 1, 1], [1500, 1, 8], [2500, 8, 8]] and k8.eval_spacing == 8
    assert cell_config(Cell("S5", "lstm", 8, "statement"), sweep).task.spacing_schedule == [
        [0, 1, 1],
        [3000, 1, 8],
        [5000, 8, 8],
    ]
    assert cell_config(Cell("S3", "lstm", 1, "statement"), sweep).task.spacing_schedule == [[0, 1, 1]]


def test_tiny_sweep_end_to_end_then_nothing_is_retrained(tmp_path, monkeypatch, capsys):
    tiny_sweep(tmp_path)
    assert reproduce_tiny(tmp_path) == 0
    results = tmp_path / "results"
    assert sorted(p.name for p in results.iterdir()) == sorted(f"{c}.json" for c in TINY_CELLS)  # no temp files left
    record = json.loads((results / "s3-lstm-statement-k2-s0.json").read_text())
    assert record["steps"] == 3 and record["config"]["task"]["eval_spacing"] == 2
    assert record["config"]["task"]["spacing_schedule"] == [[0, 1, 1], [1, 1, 2], [2, 2, 2]]
    assert [r["actions"] for r in record["eval"]["lengths"]] == [4, 8, 16]
    assert record["eval"]["reveal"] == "one" and all(0 <= r["reveal_accuracy"] <= 1 for r in record["eval"]["lengths"])
    md = (tmp_path / "reports" / "reproduce.md").read_text()
    assert "**4 of 4 runs measured**" in md
    assert "### S3, statement tokenizer" in md and "| architecture | k=1 | k=2 |" in md
    for label in ("| DeltaNet β∈[0,2] |", "| LSTM |"):
        row = next(line for line in md.splitlines() if line.startswith(label))
        assert row.count("<br>") == 4 and "not run" not in row  # 1x / 2x / 4x in both spacing columns
    assert "## Training time" in md and "| s3-lstm-statement-k2 | 3: " in md
    assert "DeltaNet β∈[0,2] learns to track with sparse reveals | S3 statement |" in md
    assert "the Transformer needs dense reveals" not in md  # the sweep has no Transformer: no claim about it
    assert "Count over the 2 rows above" in md  # neg-sparse and neg-extrapolates, counted by the report
    assert "## Architectures" in md and "| `lstm` | LSTM | d_model=32, n_layers=1 | hidden, cell |" in md
    figures = tmp_path / "reports" / "figures"
    for name in ("accuracy_vs_spacing", "accuracy_vs_length"):
        html = (figures / f"{name}.html").read_text()
        assert "plotly" in html and "LSTM" in html
        # a PNG is either written or listed as missing, never silently absent
        assert (figures / f"{name}.png").is_file() or f"figures/{name}.png" in md.split("Missing PNGs:")[-1]
    assert not list(figures.glob(".*.tmp.png"))

    def no_training(*args, **kwargs):
        raise AssertionError("a finished cell was retrained")

    monkeypatch.setattr(sweep_module, "train", no_training)
    monkeypatch.setattr(sweep_module, "evaluate_lengths", no_training)
    before = {p.name: p.read_text() for p in results.iterdir()}
    capsys.readouterr()
    assert reproduce_tiny(tmp_path) == 0
    assert "trained 0 run(s)" in capsys.readouterr().out
    assert {p.name: p.read_text() for p in results.iterdir()} == before

    # a missing result: --no-train reports it, --only trains just that cell
    (results / "s3-lstm-statement-k1-s0.json").unlink()
    assert reproduce_tiny(tmp_path, "--no-train") == 0
    md = (tmp_path / "reports" / "reproduce.md").read_text()
    assert "not run (not trained yet)" in md and "`s3-lstm-statement-k1-s0`: no result file" in md
    monkeypatch.undo()
    trained = []
    real_run_cell = sweep_module.run_cell

    def counting(cell, *args, **kwargs):
        trained.append(cell.name)
        return real_run_cell(cell, *args, **kwargs)

    monkeypatch.setattr(sweep_module, "run_cell", counting)
    assert reproduce_tiny(tmp_path, "--only", "s3-lstm-*", "s3-nothing") == 0
    assert trained == ["s3-lstm-statement-k1-s0"]  # its finished run was evaluated again, not retrained
    assert "**4 of 4 runs measured**" in (tmp_path / "reports" / "reproduce.md").read_text()

    # another budget: the old results no longer count
    assert reproduce_tiny(tmp_path, "--no-train", "--steps", "5") == 0
    md = (tmp_path / "reports" / "reproduce.md").read_text()
    assert "**0 of 4 runs measured**" in md and "is from a 3-step run, the grid asks for 5 steps" in md


def test_killed_cell_resumes_from_its_run(tmp_path, monkeypatch):
    sweep = load_grid(tiny_sweep(tmp_path, steps=4))
    cell = sweep.cells[0]
    real_train = sweep_module.train
    calls = []

    class Killed(Exception):
        pass

    def kill_at_step_3(step, loss):
        if step == 3:
            raise Killed

    def train(config, run_dir, resume=False, progress=True):
        calls.append(resume)
        return real_train(
            config, run_dir, resume=resume, progress=progress, on_step=kill_at_step_3 if len(calls) == 1 else None
        )

    monkeypatch.setattr(sweep_module, "train", train)
    with pytest.raises(Killed):
        run_cell(cell, sweep, tmp_path / "runs", tmp_path / "results", progress=False)
    assert not (tmp_path / "results").exists()
    [run_dir] = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / LAST / TRAINER_STATE).read_text())["step"] == 2
    record = run_cell(cell, sweep, tmp_path / "runs", tmp_path / "results", progress=False)
    assert calls == [False, True] and record["steps"] == 4
    assert read_results(sweep, tmp_path / "results")[0].result == json.loads(json.dumps(record))


def test_png_failure_is_one_line_and_the_rest_is_written(tmp_path, monkeypatch, capsys):
    sweep = load_grid(tiny_sweep(tmp_path))
    statuses = [CellStatus(c, short="not trained yet", reason="no result file") for c in sweep.cells]
    statuses[1].result = {**hand_result("deltanet-neg", 2, [0.95, 0.9, 0.8]), "wall_time_s": 60.0}
    stale = tmp_path / "reports" / "figures" / "accuracy_vs_length.png"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"an old figure")

    def no_browser(figs, files, **kwargs):
        files[0].write_bytes(b"half a PNG")  # fails part-way: the temporary file must not stay
        raise RuntimeError("\n\nKaleido requires Google Chrome to be installed.\n\n    $ plotly_get_chrome\n")

    monkeypatch.setattr(plotly.io, "write_images", no_browser)
    report = write_report(sweep, statuses, tmp_path / "reports")
    assert "\n" not in report.png_error and "plotly_get_chrome" in report.png_error
    assert all(f.html.is_file() for f in report.figures)
    assert (report.figures[0].png is None) and (report.figures[1].png == stale and report.figures[1].png_stale)
    assert stale.read_bytes() == b"an old figure"  # a PNG this run cannot regenerate is never deleted
    assert not list(stale.parent.glob(".*.tmp.png"))  # nor are temporary PNGs left
    assert (tmp_path / "reports" / "figures" / "plotly.min.js").is_file()  # the HTML figures work offline
    html = report.figures[0].html.read_text()
    assert 'src="plotly.min.js"' in html and "cdn.plot.ly" not in html
    again = write_report(sweep, statuses, tmp_path / "reports")  # same results: byte-identical figures
    assert again.figures[0].html.read_text() == html and f'id="figure-{report.figures[0].html.stem}"' in html
    md = report.markdown.read_text()
    assert "Missing PNGs: figures/accuracy_vs_spacing.png. PNG export needs" in md
    assert (
        "PNGs kept from an earlier run (they may show older numbers than the HTML figures): "
        "figures/accuracy_vs_length.png" in md
    )
    assert "**1 of 4 runs measured**" in md and "| 1x: 0.950<br>2x: 0.900<br>4x: 0.800 |" in md
    assert md.count("not run (not trained yet)") == 3


def test_pngs_take_each_figures_own_size_and_every_chance_line_is_named(tmp_path, monkeypatch):
    """plotly's write_images sizes every figure 700 x 500 unless told: the report passes the layout's size.
    The length figure's chance lines are labelled once per setting, never with plotly's "new text"."""
    sweep = load_grid(tiny_sweep(tmp_path))
    statuses = [CellStatus(c, short="not trained yet", reason="no result file") for c in sweep.cells]
    statuses[1].result = {**hand_result("deltanet-neg", 2, [0.95, 0.9, 0.8]), "wall_time_s": 60.0}
    asked = {}

    def record(figs, files, **kwargs):
        asked.update(kwargs, figs=figs)
        for file in files:
            Path(file).write_bytes(b"png")

    monkeypatch.setattr(plotly.io, "write_images", record)
    write_report(sweep, statuses, tmp_path / "reports")
    assert asked["width"] == [fig.layout.width for fig in asked["figs"]] and None not in asked["width"]
    assert asked["height"] == [fig.layout.height for fig in asked["figs"]]
    for fig in asked["figs"]:
        texts = [a.text for a in fig.layout.annotations]
        assert None not in texts and "new text" not in texts


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "does not exist"),
        ("[sweep\nsteps = 3", "not valid TOML"),
        (
            TINY.format(steps=3).replace('archs = ["deltanet-neg", "lstm"]', 'archs = ["mamba"]'),
            "arch 'mamba' has no [models.mamba]",
        ),
        (TINY.format(steps=3).replace("[run]", "[run]\nsteps = 9"), "may not set steps"),
        (TINY.format(steps=3).replace('groups = ["S3"]', 'groups = ["Q7"]'), "cell q7-deltanet-neg-statement-k1-s0"),
        (
            TINY.format(steps=3).replace(
                "eval_traces = 8\n\n[[grid]]", "eval_traces = 8\nvalidation_seed = 0\n\n[[grid]]"
            ),
            "validation_seed must differ from eval_seed",
        ),
        (TINY.format(steps=0), "steps must be an integer >= 1"),
        (
            TINY.format(steps=3).replace(
                "eval_traces = 8\n\n[[grid]]", "eval_traces = 8\nsteps_by_arch = { mamba = 5 }\n\n[[grid]]"
            ),
            "['mamba'] have no [models] table",
        ),
        (TINY.format(steps=3).replace("[task]", "[search]\nlrs = [1e-3, 0.001]\n\n[task]"), "lrs repeat a value"),
        (
            TINY.format(steps=3).replace(
                "eval_traces = 8\n\n[[grid]]", "eval_traces = 8\nearly_stop_accuracy = 0.9\n\n[[grid]]"
            ),
            "each run's own seed",
        ),
    ],
    ids=[
        "missing",
        "malformed",
        "unknown-arch",
        "run-steps",
        "unknown-group",
        "validation-is-test",
        "zero-steps",
        "budget-of-unknown-arch",
        "repeated-lr",
        "own-seed-is-the-test-seed",
    ],
)
def test_bad_sweep_file_is_one_clear_line(tmp_path, capsys, text, message):
    if text is not None:
        (tmp_path / "tiny.toml").write_text(text)
    assert reproduce_tiny(tmp_path, "--no-train") == 2
    err = capsys.readouterr().err
    assert err.startswith("deltalens: error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "reports").exists()
    with pytest.raises(DeltalensError):
        load_grid(tmp_path / "tiny.toml")


def test_bad_model_table_stops_before_any_training(tmp_path, capsys, monkeypatch):
    (tmp_path / "tiny.toml").write_text(TINY.format(steps=3).replace("d_model = 32", "d_modle = 32"))
    monkeypatch.setattr(sweep_module, "train", lambda *a, **k: pytest.fail("trained despite a broken [models] table"))
    assert reproduce_tiny(tmp_path) == 2
    err = capsys.readouterr().err
    assert err.startswith("deltalens: error: grid file") and "[models.lstm]" in err and err.count("\n") == 1, err


def test_interrupt_still_writes_the_report(tmp_path, capsys, monkeypatch):
    tiny_sweep(tmp_path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "run_cell", interrupted)
    assert reproduce_tiny(tmp_path) == 130
    assert "rerun `deltalens reproduce` to resume" in capsys.readouterr().err
    md = (tmp_path / "reports" / "reproduce.md").read_text()
    assert "not run (interrupted)" in md and md.count("not run (not trained yet)") == 3


def test_search_runs_first_and_its_choice_configures_every_cell(tmp_path, capsys):
    text = (
        TINY.format(steps=4)
        .replace("[optim]\nlr = 3e-3", "[optim]")
        .replace("[task]", "[search]\nlrs = [1e-3, 3e-2]\neval_every = 2\n\n[task]")
        .replace("[sweep]", "[sweep]\nvalidation_seed = 5\nseeds = [0, 1]")
    )
    (tmp_path / "tiny.toml").write_text(text)
    assert reproduce_tiny(tmp_path, "--only", "search-*", "*-k1-s1") == 0
    sweep = load_grid(tmp_path / "tiny.toml")
    searches = read_search(sweep, tmp_path / "results")
    assert sorted(s.cell.name for s in searches) == sorted(
        f"search-s3-{a}-lr{lr}" for a in ("deltanet-neg", "lstm") for lr in ("0.001", "0.03")
    )
    assert all(s.result is not None and [h["step"] for h in s.result["history"]] == [2, 4] for s in searches)
    record = searches[0].result
    assert record["config"]["run"]["validation_seed"] == 5 and record["config"]["task"]["spacing"] == [1, 1]
    chosen = choose_lrs(sweep, searches)
    statuses = read_results(with_choices(sweep, chosen), tmp_path / "results")
    done = {s.cell.name: s.result for s in statuses if s.result is not None}
    assert sorted(done) == ["s3-deltanet-neg-statement-k1-s1", "s3-lstm-statement-k1-s1"]
    for name, rec in done.items():
        arch = "lstm" if "lstm" in name else "deltanet-neg"
        assert rec["config"]["optim"]["lr"] == chosen[("S3", arch)] and rec["config"]["run"]["seed"] == 1
    md = (tmp_path / "reports" / "reproduce.md").read_text()
    assert "## Learning-rate search" in md and "1 of 2 seeds" in md
    assert (tmp_path / "reports" / "figures" / "lr_search.html").is_file()


def test_choose_lrs_takes_the_highest_validation_peak_then_the_faster_run():
    sweep = load_grid(REPO / "lab" / "grids" / "paper.toml")

    def status(group, arch, lr, curve):
        history = [{"step": 100 * (i + 1), "reveal_accuracy": a} for i, a in enumerate(curve)]
        return CellStatus(SearchRun(group, arch, lr), result={"history": history})

    searches = [
        status("S3", "lstm", 1e-3, [0.5, 0.9]),
        status("S3", "lstm", 3e-3, [0.7, 0.95]),
        status("S3", "transformer", 1e-3, [0.99, 1.0]),
        status("S3", "transformer", 3e-3, [1.0, 1.0]),
        status("S5", "lstm", 1e-3, [0.3]),
        CellStatus(SearchRun("S5", "lstm", 3e-3)),
    ]
    assert choose_lrs(sweep, searches) == {("S3", "lstm"): 3e-3, ("S3", "transformer"): 3e-3}


def test_a_diverging_search_run_is_recorded_and_the_other_lr_is_chosen(tmp_path, monkeypatch):
    text = (
        TINY.format(steps=2)
        .replace("[optim]\nlr = 3e-3", "[optim]")
        .replace("[task]", "[search]\nlrs = [1e-3, 3e-2]\neval_every = 1\n\n[task]")
        .replace("[sweep]", "[sweep]\nvalidation_seed = 5")
    )
    (tmp_path / "tiny.toml").write_text(text)
    real_train = sweep_module.train

    def diverging(config, run_dir, **kwargs):
        if config.optim.lr == 3e-2:
            raise DeltalensError("loss became nan at step 1; stopped")
        return real_train(config, run_dir, **kwargs)

    monkeypatch.setattr(sweep_module, "train", diverging)
    assert reproduce_tiny(tmp_path, "--only", "search-*") == 0
    sweep = load_grid(tmp_path / "tiny.toml")
    searches = read_search(sweep, tmp_path / "results")
    failed = [s.result for s in searches if s.result.get("failed")]
    assert len(failed) == 2 and all("nan" in r["failed"] for r in failed)  # one per architecture
    assert choose_lrs(sweep, searches) == {("S3", "deltanet-neg"): 1e-3, ("S3", "lstm"): 1e-3}


def test_a_family_sweep_names_its_architectures_and_reports_the_products(tmp_path):
    """A sweep of the delta-rule family: its own title, a family table row per architecture with the hooks
    and probes that apply, no claims about architectures it lacks, and the products section when
    lab/experiments/family_products.py left products.json in the results root (the folder holding the results)."""
    text = TINY.format(steps=2).replace('archs = ["deltanet-neg", "lstm"]', 'archs = ["deltanet-neg", "dp2"]')
    text = text.replace("[sweep]", '[sweep]\ntitle = "Family test"\nclaims = false')
    text = text.replace("spacings = [1, 2]", "spacings = [1]")
    text += """
[models.dp2]
arch = "deltaproduct"
hidden_size = 32
num_hidden_layers = 1
num_heads = 2
head_dim = 8
num_householder = 2
allow_neg_eigval = true
"""
    (tmp_path / "tiny.toml").write_text(text)
    (tmp_path / "products.json").write_text(
        json.dumps(
            {
                "sweep": "tiny",
                "traces": 8,
                "runs": [
                    {
                        "cell": "s3-dp2-statement-k1-s0",
                        "group": "S3",
                        "arch": "dp2",
                        "seed": 0,
                        "reveal_accuracy_1x": 0.5,
                        "tracking_head": [0, 1],
                        "decoded_accuracy": 0.75,
                        "heldout_residual": 0.5,
                        "spectral_agreement": 0.25,
                        "implements": False,
                        "acts_as": "pi",
                        "n_actions": 10,
                        "heads": [],
                    },
                    {
                        "cell": "s3-deltanet-neg-statement-k1-s0",
                        "group": "S3",
                        "arch": "deltanet-neg",
                        "seed": 0,
                        "reveal_accuracy_1x": 1.0,
                        "tracking_head": [0, 0],
                        "decoded_accuracy": 0.125,
                        "heldout_residual": 1.5,
                        "spectral_agreement": 0.375,
                        "context_spread": 0.625,
                        "readout_head": [0, 1],
                        "readout_decoded_accuracy": 1.0,
                        "readout_heldout_residual": 0.5,
                        "state_head": [0, 1],
                        "state_value_accuracy": 0.875,
                        "state_value_control": 0.25,
                        "implements": False,
                        "acts_as": "g",
                        "n_actions": 10,
                        "heads": [],
                    },
                ],
                "missing_checkpoints": [],
            }
        )
    )
    assert reproduce_tiny(tmp_path) == 0
    md = (tmp_path / "reports" / "reproduce.md").read_text()
    assert md.startswith("# Family test")
    row = next(line for line in md.splitlines() if line.startswith("| `dp2` | DeltaProduct |"))
    assert "num_householder=2" in row and "per factor" in row and "per-token product" in row
    assert "## The paper's claims" not in md  # claims = false
    assert "## Per-token products of reflections" in md
    # a file written before the context spread and the state probe existed shows '–' there
    assert "| S3 | dp2 | 0 of 1 | 0.750 | 0.250 | 0.500 | – | – | – | 0.500 |" in md
    assert ("| S3 | DeltaNet β∈[0,2] | 0 of 1 | 0.125 | 0.375 | 1.500 | 0.625 | 1.000 | 0.875 | 1.000 |") in md
    results = json.loads((tmp_path / "results" / "s3-dp2-statement-k1-s0.json").read_text())
    assert results["config"]["model"]["arch"] == "deltaproduct" and results["steps"] == 2
    # a probe run before any cell finished leaves no empty section behind
    (tmp_path / "products.json").write_text(
        json.dumps({"sweep": "tiny", "traces": 8, "runs": [], "missing_checkpoints": []})
    )
    assert reproduce_tiny(tmp_path, "--no-train") == 0
    assert "Per-token products" not in (tmp_path / "reports" / "reproduce.md").read_text()


def test_longer_runs_outside_the_protocol_are_tabled_with_their_trend(tmp_path):
    from lab.experiments.report.long_runs_section import long_run_lines

    assert long_run_lines(tmp_path) == []
    curve = [{"step": s, "reveal_accuracy": a} for s, a in ((500, 0.3), (1000, 0.5), (1500, 0.62), (2000, 0.7))]
    (tmp_path / "search").mkdir()
    (tmp_path / "search" / "long_k1.json").write_text(
        json.dumps(
            {
                "what": "Under-trained or at a limit?",
                "command": "deltalens train X",
                "runs": [
                    {
                        "run": "a",
                        "group": "S5",
                        "arch": "transformer",
                        "lr": 3e-3,
                        "steps_done": 2000,
                        "train_wall_s": 120.0,
                        "validation": curve,
                    }
                ],
            }
        )
    )
    lines = long_run_lines(tmp_path)
    assert lines[0] == "### Longer runs outside the protocol" and "Under-trained or at a limit?" in lines[2]
    assert "| S5 | Transformer | 0.003 | 2000 | 0.700 (2000) | 0.620 → 0.700 | 2.0 min |" in lines
