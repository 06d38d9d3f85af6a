"""`deltalens trace` and `deltalens demo` through the CLI's main."""

import json

import pytest

from deltalens.cli.main import main
from deltalens.core.errors import DeltalensError
from deltalens.tasks.tokenizers import Tokenizer
from deltalens.tasks.traces import TraceSpec, generate_trace, replay_transcript


def run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors exit through SystemExit
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_default_trace_is_exactly_the_transcript(capsys):
    code, out, err = run(["trace"], capsys)
    assert code == 0 and err == ""
    assert out == generate_trace(TraceSpec(group="S5", action_set="swaps", actions=24, spacing=4), 0).text
    assert replay_transcript(out) == out


def test_documented_example(capsys):
    code, out, err = run(["trace", "--group", "S5", "--actions", "24", "--spacing", "4", "--seed", "0"], capsys)
    assert code == 0 and err == ""
    assert out.count(">>> print(") == 6 and out.count("\n") == 5 + 24 + 12
    assert replay_transcript(out) == out


@pytest.mark.parametrize(
    "argv",
    [
        ["--group", "A5", "--actions-set", "cycles", "--actions", "16-32", "--reveal-prob", "0.3"],
        ["--group", "D6", "--actions-set", "full", "--reveal", "all", "--identity-init", "--seed", "4"],
        ["--group", "z7", "--action-set", "generators", "--spacing", "1"],
        ["--group", "S10", "--actions-set", "full", "--actions", "40", "--spacing", "3"],
    ],
)
def test_trace_options_replay_in_a_real_repl(argv, capsys):
    code, out, err = run(["trace", *argv], capsys)
    assert code == 0 and err == ""
    assert out and replay_transcript(out) == out


def test_options_reach_the_spec(capsys):
    _, out, _ = run(
        [
            "trace",
            "--group",
            "A5",
            "--actions-set",
            "cycles",
            "--actions",
            "16-32",
            "--reveal-prob",
            "0.3",
            "--seed",
            "5",
        ],
        capsys,
    )
    spec = TraceSpec(group="A5", action_set="cycles", actions=(16, 32), spacing=None, reveal_prob=0.3)
    assert out == generate_trace(spec, 5).text
    _, out, _ = run(["trace", "--no-reveals", "--actions", "10"], capsys)
    assert "print" not in out and out.count("\n") == 15
    _, out, _ = run(["trace", "--identity-init", "--reveal", "all", "--actions", "4", "--spacing", "2"], capsys)
    assert out.startswith(">>> a = 1\n>>> b = 2\n>>> c = 3\n>>> d = 4\n>>> e = 5\n")
    assert out.count(">>> print(a, b, c, d, e)\n") == 2


def test_statement_format_shows_each_token(capsys):
    code, out, err = run(["trace", "--format", "statement", "--actions", "8", "--spacing", "4"], capsys)
    assert code == 0 and err == ""
    text = generate_trace(TraceSpec(actions=8, spacing=4), 0).text
    lines = out.splitlines()
    assert len(lines) == text.count("\n")
    assert lines[0] == f"[{text.splitlines()[0]}\\n]"
    assert all(line.startswith("[") and line.endswith("]") for line in lines)
    # undo the display: drop brackets, turn the written \n back into newlines
    rebuilt = "".join(line[1:-1].replace("][", "").replace("\\n", "\n") for line in lines)
    assert rebuilt == text
    assert any(line.startswith("[") and "][ " in line for line in lines)  # output lines: [a][ 3][\n]


@pytest.mark.parametrize("fmt", ["code", "statement"])
def test_json_output_carries_tokens_and_labels(fmt, capsys):
    code, out, err = run(["trace", "--json", "--format", fmt, "--actions", "12", "--spacing", "3"], capsys)
    assert code == 0 and err == ""
    data = json.loads(out)
    tokenizer = Tokenizer.from_spec(data["tokenizer"])
    assert tokenizer.kind == fmt
    assert tokenizer.decode(data["ids"]) == data["text"] == generate_trace(TraceSpec(actions=12, spacing=3), 0).text
    assert "".join(data["tokens"][1:]) == data["text"] and data["tokens"][0] == "<bos>"
    length = len(data["ids"])
    for key in ("tokens", "kinds", "action_pos", "perm_ids", "is_reveal", "answers", "reveal_vars", "states"):
        assert len(data[key]) == length, key
    assert data["kinds"].count("reveal") == sum(data["is_reveal"]) == 4
    assert set(data["kinds"]) == {"other", "init", "action", "print", "reveal"}
    assert TraceSpec.from_dict(data["spec"]) == TraceSpec(actions=12, spacing=3)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--group", "X5"], "unknown group 'X5'"),
        (["--group", "S11"], "S11 is out of range"),
        (["--group", "A2"], "A2 is out of range"),
        (["--spacing", "0"], "argument --spacing: must be a whole number from 1 to 100000, got '0'"),
        (["--spacing", "-3"], "argument --spacing: must be a whole number"),
        (["--group", "A5"], "A5 has no transpositions; use --actions-set cycles, full or generators"),
        (["--group", "Z5", "--actions-set", "cycles"], "Z5 has no 3-cycles"),
        (["--actions-set", "shuffles"], "unknown action set 'shuffles'"),
        (["--reveal-prob", "0"], "probability must be in (0, 1]"),
        (["--reveal-prob", "1.2"], "argument --reveal-prob: must be a finite number from 0 to 1"),
        (["--reveal-prob", "nan"], "argument --reveal-prob: must be a finite number"),
        (["--seed", "-1"], "argument --seed: must be a whole number"),
        (["--actions", "1" + "0" * 5000], "--actions takes a number like 24"),
        (["--actions", "10000000"], "at most 100000 actions per trace"),
        (["--actions", "0"], "number of actions"),
        (["--actions", "30-10"], "action range 30-10"),
        (["--actions", "lots"], "--actions takes a number like 24 or a range like 16-32"),
        (["--spacing", "2", "--reveal-prob", "0.5"], "not allowed with argument"),
        (["--spacing", "two"], "argument --spacing: must be a whole number"),
        (["--reveal", "some"], "invalid choice"),
        (["--format", "bpe"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, words, capsys):
    code, out, err = run(["trace", *argv], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("deltalens: error: ")
    assert words in err


def test_debug_shows_the_exception():
    with pytest.raises(DeltalensError):
        main(["--debug", "trace", "--group", "X5"])


def test_demo_prints_a_trace_and_its_statistics(capsys):
    code, out, err = run(["demo"], capsys)
    assert code == 0 and err == ""
    text = generate_trace(TraceSpec(), 0).text
    assert text in out
    for words in (
        "actions                 24",
        "reveals                 6 (after actions 4, 8, 12, 16, 20, 24)",
        "tokens (code)",
        "tokens (statement)      53 (6 revealed values; vocabulary 59)",
        "replays in Python REPL  yes",
    ):
        assert words in out, words
