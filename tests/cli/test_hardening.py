"""Second-round hostile inputs: names outside their roots, intervention ranges, a full disk behind
stdout, model cards from outside the folder, non-ASCII digits in traces."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deltalens.cli.main import main
from deltalens.core.errors import DeltalensError, reporting_storage_failure, storage_failure
from deltalens.loading.opened import read_card
from deltalens.models.io.named_folder import resolve_checkpoint
from deltalens.tasks.probabilistic import parse_prob_trace
from deltalens.tasks.traces import parse_trace

REPO = Path(__file__).resolve().parents[2]
CKPT = REPO / "checkpoints" / "s3-deltanet-neg-statement"


def test_a_name_resolves_only_inside_its_root(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "inner").mkdir(parents=True)
    shutil.copy(CKPT / "config.json", root / "config.json")  # the folder above the root looks like a checkpoint
    monkeypatch.setenv("DELTALENS_CHECKPOINTS", str(root / "inner"))
    monkeypatch.chdir(tmp_path)
    assert resolve_checkpoint("..") == Path("..")  # a path from here, not the root's parent
    assert resolve_checkpoint("s3-deltanet-neg-statement") == CKPT


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--beta-range", "2", "-1"], "0 <= lo <= hi <= 2"),
        (["--beta-range", "0", "3"], "0 <= lo <= hi <= 2"),
        (["--beta-range", "1.5", "0.5"], "0 <= lo <= hi <= 2"),
        (["--beta-scale", "-1"], "finite number >= 0"),
    ],
)
def test_intervention_ranges_are_checked_like_the_gate(argv, words, capsys):
    code = main(["intervene", str(CKPT), "--layer", "0", "--head", "3", *argv, "--n-traces", "8"])
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1, err


def test_a_full_disk_behind_stdout_is_an_error_not_exit_zero():
    with open("/dev/full", "w") as full:
        out = subprocess.run(
            [sys.executable, "-m", "deltalens.cli.main", "trace", "--group", "S3", "--actions", "40"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "deltalens: error: cannot write the output: No space left on device; what was written is incomplete"
    )


def test_a_storage_failure_becomes_one_sentence_naming_what_is_intact():
    with pytest.raises(DeltalensError, match=r"^cannot write /x: No space left on device; the old one is intact$"):
        with reporting_storage_failure("/x", "the old one is intact"), open("/dev/full", "w") as full:
            full.write("a" * 100_000)
            full.flush()
    assert storage_failure(RuntimeError("SafetensorError: No space left on device (os error 28)"))
    assert storage_failure(ValueError("bad shape")) is None


def card_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    return folder


def test_a_card_that_links_outside_the_folder_is_not_read(tmp_path):
    folder = card_folder(tmp_path)
    (tmp_path / "secret.txt").write_text("not a card")
    os.symlink(tmp_path / "secret.txt", folder / "CARD.md")
    with pytest.raises(DeltalensError, match="not a plain file inside the checkpoint folder"):
        read_card(folder)


def test_a_card_that_is_not_utf8_gets_a_sentence(tmp_path):
    folder = card_folder(tmp_path)
    (folder / "CARD.md").write_bytes(b"# card\n\xff\xfe broken")
    with pytest.raises(DeltalensError, match="is not UTF-8 text"):
        read_card(folder)
    (folder / "CARD.md").write_text("# fine\n")
    assert read_card(folder) == "# fine\n" and read_card(tmp_path) is None


@pytest.mark.parametrize("digit", ["\u0661", "\u00b2", "\uff11"])  # Arabic-Indic one, superscript two, fullwidth one
def test_trace_values_are_python_ascii_digits_only(digit):
    with pytest.raises(DeltalensError):
        parse_trace(f">>> a = 1\n>>> b = {digit}\n>>> a, b = b, a\n")
    assert parse_trace(">>> a = 1\n>>> b = 2\n>>> a, b = b, a\n").states[-1] == (2, 1)


@pytest.mark.parametrize("digit, name", [("\u0661", "ARABIC-INDIC DIGIT ONE"), ("\u00b2", "SUPERSCRIPT TWO")])
def test_the_belief_parser_takes_only_ascii_digits(digit, name):
    head = ">>> import random\n>>> a = 1\n"
    with pytest.raises(DeltalensError, match=f"^line 3: '{digit}' \\({name}\\) is not an ASCII digit"):
        parse_prob_trace(f"{head}>>> b = {digit}\n")
    with pytest.raises(DeltalensError, match=f"^line 5: '{digit}' \\({name}\\)"):
        parse_prob_trace(f"{head}>>> b = 2\n>>> print('a', a)\na {digit}\n")
    assert parse_prob_trace(f"{head}>>> b = 2\n>>> print('a', a)\na 1\n")


def test_an_export_into_the_run_folder_is_refused_before_training(tmp_path, capsys):
    config = Path(__file__).resolve().parents[2] / "checkpoints" / "s3-deltanet-neg-statement" / "train.toml"
    run = tmp_path / "run"
    code = main(["train", str(config), "--out", str(run), "--export", str(run / "export"), "--no-progress"])
    assert code == 2 and "is the run folder (--out" in capsys.readouterr().err
    assert not run.exists()  # nothing trained, nothing written
