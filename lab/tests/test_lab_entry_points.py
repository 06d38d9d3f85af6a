"""The lab's entry points (`python3 -m lab.experiments.NAME`) answer as the CLI does (issue 58): a missing checkpoint,
folder or a bad count gets one line on stderr and exit 2, never a traceback or a silent exit 0."""

import runpy
import sys

import pytest


@pytest.mark.parametrize(
    "argv, words",
    [
        (["mechanism_seeds", "--n-traces", "0"], "must be a whole number from 1"),
        (["mechanism_counts", "--mechanism", "/nonexistent/mechanism"], "does not exist"),
        (["family_a5_puzzle", "--samples", "0"], "must be a whole number from 1"),
        (["pfsa_drain", "/nonexistent/last", "--name", "x-c16-lr1e-3-s0", "--out", "/tmp/x"], "does not exist"),
        (["key_subspace", "/nonexistent/run"], "does not exist"),
        (["pfsa_hidden_block", "/nonexistent/ckpt"], "does not exist"),
    ],
)
def test_an_entry_point_with_a_bad_argument_says_so_in_one_line(argv, words, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [f"{argv[0]}.py", *argv[1:]])
    monkeypatch.delenv("DELTALENS_DEBUG", raising=False)
    with pytest.raises(SystemExit) as stopped:
        runpy.run_module(f"lab.experiments.{argv[0]}", run_name="__main__", alter_sys=False)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and words in err and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if "error:" in line]) == 1
