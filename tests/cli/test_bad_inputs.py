"""Bad and hostile inputs, command by command: each gets one sentence naming what is wrong (exit 2),
nothing hangs, and nothing the user had on disk changes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_runs import tiny_config

from deltalens.cli.main import main
from deltalens.core.errors import DeltalensError
from deltalens.tasks.probabilistic import parse_prob_trace
from deltalens.tasks.tokenizers import make_tokenizer
from deltalens.tasks.traces import TraceSpec, generate_trace, parse_trace
from deltalens.training.config import dump_toml

REPO = Path(__file__).resolve().parents[2]
CKPT = str(REPO / "checkpoints" / "s3-deltanet-neg-statement")
TRANSFORMER = str(REPO / "checkpoints" / "s3-transformer-statement")
S3_TRACE = generate_trace(TraceSpec(group="S3", actions=8, spacing=2), 0).text


def digest(folder: Path) -> str:
    h = hashlib.sha1()
    for path in sorted(folder.rglob("*")):
        h.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def run(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own errors exit from parse_args
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.err


def one_sentence(code: int, err: str, words: str) -> None:
    lines = [line for line in err.splitlines() if line.startswith("deltalens:")]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("deltalens: error: "), err
    assert words in lines[0], lines[0]
    assert "Traceback" not in err and "unexpected" not in err


NUMBERS = [  # every numeric option is checked: finite, in range, named
    (["intervene", CKPT, "--layer", "0", "--head", "3", "--beta-scale", "nan"], "--beta-scale: must be a finite"),
    (["intervene", CKPT, "--layer", "0", "--head", "3", "--beta-range", "0", "inf"], "--beta-range: must be a finite"),
    (["intervene", CKPT, "--layer", "-1", "--head", "3"], "--layer: must be a whole number"),
    (["intervene", CKPT, "--layer", "7", "--head", "3"], "layer 7 is out of range"),
    (["intervene", CKPT, "--layer", "0", "--head", "9"], "head 9 is out of range"),
    (["eval", CKPT, "--spacing", "0"], "--spacing: must be a whole number"),
    (["eval", CKPT, "--n-traces", "-5"], "--n-traces: must be a whole number"),
    (["eval", CKPT, "--seed", "-1"], "--seed: must be a whole number"),
    (["eval", CKPT, "--lengths", "1" + "0" * 5000], "--lengths: must be a whole number"),
    (["probe", CKPT, "--n-traces", "1"], "--n-traces: must be a whole number from 2"),
    (["ptrace", "--mix", "1,nan,0"], "--mix takes three weights"),
    (["ptrace", "--mix", "1,-1,0"], "--mix takes three weights"),
    (["ptrace", "--swap-prob", "-0.1"], "--swap-prob: must be a finite number"),
    (["trace", "--actions", "10000000"], "at most 100000 actions per trace"),
    (["trace", "--actions", "١٢"], "--actions takes a number"),  # non-ASCII digits
    (["app", "--port", "70000"], "--port: must be a whole number from 1 to 65535"),
    (["reproduce", "--steps", "0", "--no-train"], "--steps: must be a whole number"),
]


@pytest.mark.parametrize("argv, words", NUMBERS, ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else None)
def test_numbers_are_checked_with_the_option_named(argv, words, capsys):
    one_sentence(*run(argv, capsys), words)


CONFIG_FIELDS = [
    ("run.steps=-5", "[run] steps = -5 must be"),
    ("optim.lr=nan", "[optim] lr = nan must be finite"),
    ("optim.lr=0", "[optim] lr = 0 must be"),
    ("task.swap_prob=1.5", "[task] swap_prob = 1.5"),
    ("task.mix=[1,0,-1]", "[task] mix"),
    ("run.eval_traces=0", "[run] eval_traces = 0"),
    ("optim.batch_size=0", "[optim] batch_size = 0"),
    ("run.seed=-1", "[run] seed = -1"),
    ("task.actions=1000000", "[task] actions"),
    ("run.early_stop_accuracy=2.0", "[run] early_stop_accuracy"),
    ("run.steps=1.5", "[run] steps = 1.5 should be a int"),
    ("task.group=S99", "S99"),
]


@pytest.mark.parametrize("override, words", CONFIG_FIELDS)
def test_config_fields_are_checked_before_anything_is_written(override, words, tmp_path, capsys):
    config = tmp_path / "train.toml"
    config.write_text(dump_toml(tiny_config()))
    one_sentence(*run(["train", str(config), override, "--out", str(tmp_path / "run")], capsys), words)
    assert not (tmp_path / "run").exists()


def test_overrides_after_the_options_are_overrides_too(tmp_path, capsys):
    # the grid files' headers write `deltalens train CONFIG --out DIR run.seed=1`
    config = tmp_path / "train.toml"
    config.write_text(dump_toml(tiny_config(steps=2)))
    out = tmp_path / "run"
    assert main(["train", str(config), "run.steps=1", "--out", str(out), "--no-progress", "run.seed=3"]) == 0
    ran = (out / "train.toml").read_text()
    assert "seed = 3" in ran and "steps = 1\n" in ran
    one_sentence(
        *run(["train", str(config), "--out", str(tmp_path / "r2"), "run.seed=3", "--bogus"], capsys), "--bogus"
    )
    one_sentence(*run(["eval", CKPT, "stray"], capsys), "unrecognized arguments: stray")
    assert not (tmp_path / "r2").exists()


def trace_file(tmp_path: Path, content: str | bytes, name: str = "traces.txt") -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


def test_trace_files_get_one_sentence_naming_file_and_line(tmp_path, capsys):
    cases = [
        (str(tmp_path), "is a folder"),
        (str(tmp_path / "missing.txt"), "does not exist"),
        (trace_file(tmp_path, bytes(range(256)) * 8, "junk.bin"), "is not UTF-8 text"),
        (trace_file(tmp_path, "", "empty.txt"), "holds no traces"),
        (
            trace_file(tmp_path, ">>> a = " + "9" * 5000 + "\n", "digits.txt"),
            "digits.txt line 1 is longer than 1,000 characters",
        ),
        (trace_file(tmp_path, S3_TRACE + "\n" + S3_TRACE + "\n" + S3_TRACE.replace("print('", "print((", 1)), "line "),
        (
            trace_file(
                tmp_path,
                ">>> a = 1\n>>> b = 2\n>>> c = 3\n>>> a, b, c = b, c, a\n>>> print(a, b, c)\n2 3 1\n",
                "cycle.txt",
            ),
            "not in the vocabulary",
        ),
    ]
    for path, words in cases:
        one_sentence(*run(["eval", CKPT, "--traces", path], capsys), words)


def test_a_parse_error_names_the_files_line_not_the_transcripts(tmp_path, capsys):
    lines = S3_TRACE.splitlines()
    bad = "\n".join(lines[:5] + [lines[5].replace(">>> ", ">>>  ")] + lines[6:]) + "\n"
    path = trace_file(tmp_path, S3_TRACE + "\n" + S3_TRACE + "\n" + bad)
    code, err = run(["eval", CKPT, "--traces", path], capsys)
    first_of_third = 2 * (len(lines) + 1) + 1
    one_sentence(code, err, f"{path} line {first_of_third + 5}")


def test_eval_traces_streams_a_long_file(tmp_path, capsys):
    path = trace_file(tmp_path, "\n".join([S3_TRACE] * 300))
    code = main(["eval", CKPT, "--traces", path, "--json"])
    assert code == 0 and '"n_traces": 300' in capsys.readouterr().out


HEAD = ">>> import random\n>>> a = 1\n>>> b = 2\n>>> a, b = (b, a) if random.random() < "


@pytest.mark.parametrize(
    "text",
    [
        HEAD + "0." + "3" * 100_000 + " else (a, b)\n",
        HEAD + "1" * 999 + "x else (a, b)\n",
        ">>> a = 1\n" * 200_000,
        ">>> a = " + "1" * 5000 + "\n>>> b = 2\n",
    ],
)
def test_pathological_transcripts_are_refused_fast(text):
    for parse in (parse_prob_trace, parse_trace):
        started = time.perf_counter()
        with pytest.raises(DeltalensError):
            parse(text if text.endswith("\n") else text + "\n")
        assert time.perf_counter() - started < 2.0


def test_belief_refuses_a_hundred_thousand_digit_probability_at_once(tmp_path, capsys):
    text = (
        ">>> import random\n>>> a = 1\n>>> b = 2\n>>> a, b = (b, a) if random.random() < 0."
        + "5" * 100_000
        + " else (a, b)\n>>> print(a, b)\n1 2\n"
    )
    started = time.perf_counter()
    one_sentence(*run(["belief", "--trace", trace_file(tmp_path, text)], capsys), "characters")
    assert time.perf_counter() - started < 2.0


def test_train_never_writes_into_a_folder_it_did_not_create(tmp_path, capsys):
    config = tmp_path / "train.toml"
    config.write_text(dump_toml(tiny_config(steps=2)))
    mine = tmp_path / "my-files"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    shipped = tmp_path / "shipped"
    shutil.copytree(CKPT, shipped)
    before = digest(tmp_path)
    one_sentence(*run(["train", str(config), "--out", str(mine)], capsys), "is not empty and is not a deltalens")
    one_sentence(*run(["train", str(config), "--out", str(shipped)], capsys), "is not empty and is not a deltalens")
    one_sentence(*run(["train", str(config), "--out", str(mine / "notes.txt")], capsys), "is a file")
    one_sentence(
        *run(["train", str(config), "--out", str(tmp_path / "run"), "--export", str(shipped)], capsys), "pass --replace"
    )
    assert not (tmp_path / "run").exists()  # refused before training
    (tmp_path / "run").mkdir()
    (tmp_path / "run").rmdir()
    assert digest(tmp_path) == before


def test_export_over_a_checkpoint_needs_replace(tmp_path, capsys):
    config = tmp_path / "train.toml"
    config.write_text(dump_toml(tiny_config(arch="lstm", steps=2)))
    shipped = tmp_path / "shipped"
    shutil.copytree(CKPT, shipped)
    args = ["train", str(config), "--out", str(tmp_path / "run"), "--export", str(shipped), "--no-progress"]
    assert main([*args, "--replace"]) == 0
    assert "lstm" in (shipped / "config.json").read_text()


def test_a_second_writer_of_the_same_run_folder_is_refused(tmp_path, capsys):
    config = tmp_path / "train.toml"
    config.write_text(dump_toml(tiny_config(arch="lstm", steps=100_000)))
    run_dir = tmp_path / "run"
    first = subprocess.Popen(
        [sys.executable, "-m", "deltalens.cli.main", "train", str(config), "--out", str(run_dir), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(1200):  # until it has saved a checkpoint: training is under way
            if (run_dir / "last" / "trainer_state.json").is_file():
                break
            time.sleep(0.1)
        one_sentence(
            *run(["train", str(config), "--out", str(run_dir), "--resume", "--no-progress"], capsys),
            "is being written by another training (pid",
        )
    finally:
        first.send_signal(signal.SIGINT)  # Ctrl-C: it saves its finished steps and stops
        first.wait(timeout=120)
    assert first.returncode == 130 and (run_dir / "last" / "trainer_state.json").is_file()


def test_output_piped_into_head_ends_quietly():
    result = subprocess.run(
        f"{sys.executable} -m deltalens.cli.main trace --group S5 --actions 20000 --spacing 1 | head -n 3",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.stdout.count("\n") == 3 and result.stderr == ""


def test_unwritable_output_is_one_sentence(tmp_path, capsys):
    if os.geteuid() == 0:  # root writes anywhere: use a path below a file instead
        blocked = tmp_path / "file"
        blocked.write_text("x")
        config = tmp_path / "train.toml"
        config.write_text(dump_toml(tiny_config(steps=2)))
        one_sentence(*run(["train", str(config), "--out", str(blocked / "run")], capsys), "file")


def test_a_checkpoint_whose_tokenizer_is_not_its_tasks_is_refused(tmp_path, capsys):
    mixed = tmp_path / "mixed"
    shutil.copytree(CKPT, mixed)
    config = json.loads((mixed / "config.json").read_text())
    config["deltalens"]["tokenizer"] = make_tokenizer("statement", "S5", "swaps").to_spec()
    (mixed / "config.json").write_text(json.dumps(config))
    for command in (
        ["eval", str(mixed)],
        ["probe", str(mixed)],
        ["intervene", str(mixed), "--layer", "0", "--head", "3"],
    ):
        one_sentence(*run(command, capsys), "is inconsistent")


def test_a_kill_between_the_two_renames_of_a_checkpoint_swap_resumes(tmp_path):
    """Killed after the old `last` was set aside and before the new one took its place: resume
    puts the old one back and continues from it."""
    from deltalens.training.loop import LAST, train

    config = tiny_config(arch="lstm", steps=6)
    train(config, tmp_path / "run", progress=False)
    last = tmp_path / "run" / LAST
    state = json.loads((last / "trainer_state.json").read_text())
    os.replace(last, last.with_name(f".{LAST}.old"))  # what a kill between the renames leaves
    config.run.steps = 8
    with pytest.raises(DeltalensError, match="differ"):  # the budget is part of the run's identity
        train(config, tmp_path / "run", resume=True, progress=False)
    assert last.is_dir() and json.loads((last / "trainer_state.json").read_text()) == state


def test_a_failure_during_export_leaves_the_old_checkpoint_whole(tmp_path, monkeypatch):
    import deltalens.models.io.hf_folder as checkpoint_module  # the one writer of checkpoint files
    from deltalens.loading.export import export_run
    from deltalens.training.loop import train

    config = tiny_config(arch="lstm", steps=2)
    train(config, tmp_path / "run", progress=False)
    shipped = tmp_path / "shipped"
    shutil.copytree(CKPT, shipped)
    before = digest(shipped)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module, "write_weights", crash)
    with pytest.raises(OSError, match="disk full"):
        export_run(tmp_path / "run", shipped, dump_toml(config), "test", n_traces=8, replace=True)
    assert digest(shipped) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".shipped")]  # no staging left behind


def test_reviewed_edge_cases(tmp_path, monkeypatch, capsys):
    """Windows line endings, names that a stray local folder shares, hidden folders, a fresh run
    over a crashed one, --replace over a folder that is not a checkpoint."""
    from deltalens.loading.opened import list_checkpoints, resolve_checkpoint
    from deltalens.training.loop import LAST, train

    crlf = trace_file(tmp_path, (S3_TRACE + "\n" + S3_TRACE).replace("\n", "\r\n"), "crlf.txt")
    assert main(["eval", CKPT, "--traces", crlf]) == 0
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s3-deltanet-neg-statement").mkdir()  # not a checkpoint: the shipped one wins
    assert resolve_checkpoint("s3-deltanet-neg-statement") == Path(CKPT)
    assert main(["eval", "s3-deltanet-neg-statement", "--traces", crlf]) == 0
    shutil.copytree(CKPT, tmp_path / "dir" / "a")
    shutil.copytree(CKPT, tmp_path / "dir" / ".a.old")
    assert list(list_checkpoints(tmp_path / "dir")["name"]) == ["a"]

    config = tiny_config(arch="lstm", steps=3)
    train(config, tmp_path / "run", progress=False)
    last = tmp_path / "run" / LAST
    os.replace(last, last.with_name(f".{LAST}.old"))  # a kill between the renames of a swap
    one_sentence(
        *run(["train", _toml(tmp_path, config), "--out", str(tmp_path / "run")], capsys), "already holds a run"
    )
    assert last.is_dir()  # the crashed run's checkpoint is back, not deleted

    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    one_sentence(
        *run(
            ["train", _toml(tmp_path, config), "--out", str(tmp_path / "run2"), "--export", str(other), "--replace"],
            capsys,
        ),
        "--replace overwrites only a checkpoint folder",
    )
    assert (other / "notes.txt").read_text() == "keep" and not (tmp_path / "run2").exists()


def _toml(folder: Path, config) -> str:
    path = folder / "train.toml"
    path.write_text(dump_toml(config))
    return str(path)
