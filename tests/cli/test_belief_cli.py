"""`deltalens belief` (exact posteriors of a probabilistic trace) and `deltalens ptrace`, through the CLI's main."""

import io
import json

import numpy as np
import pytest

from deltalens.cli.main import COMMANDS, main
from deltalens.tasks.adversary import adversarial_sequence
from deltalens.tasks.probabilistic import ProbTraceSpec, generate_prob_trace, parse_prob_trace
from deltalens.tasks.traces import replay_transcript

EXAMPLE = """>>> import random; random.seed(8)
>>> a = 1
>>> b = 2
>>> c = 3
>>> a, c = (c, a) if random.random() < 0.75 else (a, c)
>>> print('a', a)
a 3
>>> a, b, c = random.choice([(a, b, c), (b, c, a), (c, a, b)])
>>> print(a, b, c)
2 1 3
"""


def run(argv, capsys, monkeypatch=None, stdin=None):
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def with_ptrace():
    """ptrace is one of the CLI's commands."""
    assert "ptrace" in COMMANDS


def test_documented_json_example(tmp_path, capsys):
    path = tmp_path / "t.txt"
    path.write_text(EXAMPLE)
    assert replay_transcript(EXAMPLE) == EXAMPLE  # the example is itself a real transcript
    code, out, err = run(["belief", "--trace", str(path), "--json"], capsys)
    assert code == 0 and err == ""
    report = json.loads(out)
    first = report["reveals"][0]
    assert first == {"line": 7, "variable": "a", "revealed": 3, "predictive": {"1": 0.25, "2": 0.0, "3": 0.75}}
    # the full reveal gives one entry per variable, each given the values before it on the line
    full = report["reveals"][1:]
    assert [e["variable"] for e in full] == ["a", "b", "c"] and all(e["line"] == 10 for e in full)
    # a = 3 before the rotation: a ends as 3, 2 or 1 with 1/3 each (b, c hold 2 and 1 in some order)
    assert full[0]["predictive"] == pytest.approx({"1": 1 / 3, "2": 1 / 3, "3": 1 / 3}, abs=1e-12)
    assert full[1]["predictive"] == pytest.approx({"1": 1.0, "2": 0.0, "3": 0.0}, abs=1e-12)
    assert full[2]["predictive"] == pytest.approx({"1": 0.0, "2": 0.0, "3": 1.0}, abs=1e-12)
    assert report["log_likelihood"] == pytest.approx(np.log(0.75 / 3))


def test_json_agrees_with_the_trace_labels(tmp_path, capsys):
    spec = ProbTraceSpec(group="S4", actions=20, spacing=2, full_reveal_prob=0.3)
    for seed in range(5):
        trace = generate_prob_trace(spec, seed)
        path = tmp_path / f"{seed}.txt"
        path.write_text(trace.text)
        code, out, _ = run(["belief", "--trace", str(path), "--json"], capsys)
        assert code == 0
        entries = json.loads(out)["reveals"]
        flat = [p for line in trace.posteriors for p in line]
        assert len(entries) == len(flat)
        for entry, post in zip(entries, flat):
            assert entry["revealed"] == post.value and entry["line"] == post.line
            assert np.allclose([entry["predictive"][str(v)] for v in range(1, 5)], post.predictive, atol=1e-9)


def test_text_output_and_stdin(capsys, monkeypatch):
    code, out, err = run(["belief", "--trace", "-"], capsys, monkeypatch, stdin=EXAMPLE)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("# 3 variables, 4 printed values") and len(lines) == 5
    assert "a = 3" in lines[1] and "1: 0.2500  2: 0.0000  3: 0.7500" in lines[1] and lines[1].endswith("0.7500")


def test_marginal_representation_is_offered_and_differs_where_it_should(capsys, monkeypatch):
    _, out, _ = run(
        ["belief", "--trace", "-", "--json", "--representation", "marginal"], capsys, monkeypatch, stdin=EXAMPLE
    )
    report = json.loads(out)
    assert report["representation"] == "marginal"
    assert report["reveals"][0]["predictive"] == {"1": 0.25, "2": 0.0, "3": 0.75}  # before any reveal: exact
    assert report["reveals"][2]["predictive"]["1"] == pytest.approx(0.5)  # the joint says 1.0


def test_adversary_text_is_readable(capsys, monkeypatch):
    seq = adversarial_sequence(n=3, block=2, p=0.5, cycles=4)
    _, out, _ = run(["belief", "--trace", "-", "--json"], capsys, monkeypatch, stdin=seq.text())
    assert [e["predictive"]["3"] for e in json.loads(out)["reveals"]] == [0.5] * 4


@pytest.mark.parametrize(
    "text, words",
    [
        (
            ">>> import random\n>>> a = 1\n>>> b = 2\n>>> a, b = (b, a) if random.random() < 0.5 else (a, b)\n"
            ">>> print('a', a)\na 2\n>>> print('b', b)\nb 2\n",
            "line 8: the print shows b = 2",
        ),
        (">>> a = 1\n>>> b = 2\n>>> a = a + 1\n", "line 3"),
        ("hello\n", "init lines"),
        ("", "empty"),
    ],
)
def test_bad_traces_fail_with_one_line_and_exit_2(text, words, capsys, monkeypatch):
    code, out, err = run(["belief", "--trace", "-"], capsys, monkeypatch, stdin=text)
    assert code == 2 and out == ""
    assert err.startswith("deltalens: error: ") and err.count("\n") == 1 and words in err


def test_missing_file_and_missing_option(tmp_path, capsys):
    code, _, err = run(["belief", "--trace", str(tmp_path / "nope.txt")], capsys)
    assert code == 2 and "cannot read the trace file" in err and err.count("\n") == 1
    code, _, err = run(["belief"], capsys)
    assert code == 2 and "--trace" in err


def test_ptrace_prints_a_replayable_trace(capsys, with_ptrace):
    code, out, err = run(
        [
            "ptrace",
            "--group",
            "S4",
            "--actions",
            "16",
            "--spacing",
            "2",
            "--seed",
            "3",
            "--mix",
            "0.2,0.5,0.3",
            "--swap-prob",
            "0.25",
            "--full-reveal-prob",
            "0.5",
        ],
        capsys,
    )
    assert code == 0 and err == ""
    spec = ProbTraceSpec(group="S4", actions=16, spacing=2, mix=(0.2, 0.5, 0.3), swap_prob=0.25, full_reveal_prob=0.5)
    assert out == generate_prob_trace(spec, 3).text and replay_transcript(out) == out
    code, out, _ = run(["ptrace", "--no-reveals", "--actions", "5"], capsys)
    assert code == 0 and "print" not in out and out.count("\n") == 1 + 3 + 5


def test_ptrace_json_and_pipe_into_belief(capsys, monkeypatch, with_ptrace):
    code, out, _ = run(["ptrace", "--json", "--seed", "2"], capsys)
    report = json.loads(out)
    assert code == 0 and report["tokenizer"]["kind"] == "code-prob"
    assert len(report["ids"]) == len(report["tokens"]) == len(report["predictive"]) == len(report["is_reveal"])
    assert all((p is not None) == r for p, r in zip(report["predictive"], report["is_reveal"]))
    assert "".join(report["tokens"][1:]) == report["text"]
    _, belief, _ = run(["belief", "--trace", "-", "--json"], capsys, monkeypatch, stdin=report["text"])
    assert [e["predictive"] for e in json.loads(belief)["reveals"]] == [
        {k: round(v, 12) for k, v in e["predictive"].items()} for e in report["reveals"]
    ]
    assert parse_prob_trace(report["text"]).python_seed == report["python_seed"]


def test_ptrace_bad_options(capsys, with_ptrace):
    for argv, words in (
        (["--mix", "1,2"], "three weights"),
        (["--group", "D4"], "S<n> or A<n>"),
        (["--swap-prob", "2"], "--swap-prob"),
    ):
        code, _, err = run(["ptrace", *argv], capsys)
        assert code == 2 and words in err and err.count("\n") == 1
