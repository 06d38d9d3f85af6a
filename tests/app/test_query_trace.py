"""Paste mode that asks (issue 24, item 7): tasks.traces.read_query_trace reads a transcript whose
prints lack their output or show a wrong value, and the trace explorer answers with the model."""

from __future__ import annotations

import pytest
from test_app import key, page

from deltalens.core.errors import DeltalensError
from deltalens.tasks.query_trace import read_query_trace
from deltalens.tasks.traces import TraceSpec, generate_trace, parse_trace


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DELTALENS_APP_CHECKPOINTS", raising=False)


def lines_of(seed: int = 0, **spec) -> tuple[list[str], list[int]]:
    """A trace's lines and the indices of its output lines."""
    lines = generate_trace(TraceSpec(group="S3", actions=12, spacing=3, **spec), seed).text.splitlines(keepends=True)
    return lines, [i for i, line in enumerate(lines) if not line.startswith(">>>")]


@pytest.mark.parametrize("reveal", ["one", "all"])
def test_a_complete_trace_reads_as_parse_trace_reads_it(reveal):
    for seed in range(10):
        text = generate_trace(TraceSpec(group="S5", action_set="full", actions=9, spacing=2, reveal=reveal), seed).text
        strict, (lenient, queries) = parse_trace(text), read_query_trace(text)
        assert lenient.text == strict.text and lenient.states == strict.states
        assert lenient.reveals == strict.reveals and lenient.line_info == strict.line_info
        assert all(q.given == q.values and not q.wrong for q in queries)


def test_a_missing_output_is_a_question_and_a_wrong_value_is_kept():
    lines, outputs = lines_of()
    name, value = lines[outputs[1]].split()
    wrong = f"{name} {int(value) % 3 + 1}\n"
    text = "".join(lines[: outputs[0]] + lines[outputs[0] + 1 : outputs[1]] + [wrong] + lines[outputs[1] + 1 :])
    with pytest.raises(DeltalensError):
        parse_trace(text)  # the strict parser still refuses both
    trace, queries = read_query_trace(text)
    asked, given = queries[0], queries[1]
    assert asked.given is None and trace.lines[asked.line] == lines[outputs[0]]  # the replayed values stand in
    assert given.wrong and given.given == (int(wrong.split()[1]),) and given.values == (int(value),)
    assert trace.lines[given.line] == wrong and trace.reveals[1].values == (int(value),)
    questions = read_query_trace("".join(line for i, line in enumerate(lines) if i not in outputs))[1]
    assert len(questions) == len(outputs) and all(q.given is None for q in questions)


@pytest.mark.parametrize(
    "text, words",
    [
        (">>> a = 1\n>>> b = 2\n>>> print('a', a)\nb 1\n", "is not what that print shows"),
        (">>> a = 1\n>>> b = 2\n>>> print('a', a)\na 7\n", "the values are 1..2"),
        (">>> a = 1\n>>> b = 2\n>>> print(a, b)\n1\n", "is not what that print shows"),
        (">>> a = 1\n>>> b = 2\n1 2\n", "no print before it"),
        (">>> a, b = b, a\n", "values 1..n"),
    ],
)
def test_what_cannot_be_read_gets_one_sentence(text, words):
    with pytest.raises(DeltalensError, match=words):
        read_query_trace(text)


def test_the_trace_explorer_answers_a_question_and_shows_a_wrong_value_beside_the_model():
    lines, outputs = lines_of(seed=2)
    name, value = lines[outputs[1]].split()
    wrong = f"{name} {int(value) % 3 + 1}\n"
    text = "".join(lines[: outputs[0]] + lines[outputs[0] + 1 : outputs[1]] + [wrong] + lines[outputs[1] + 1 :])
    app = page("views/trace_explorer.py")
    app.radio(key=key("trace-source")).set_value("paste").run()
    app.text_area(key=key("trace-text")).input(text).run()
    assert not app.error and not app.exception
    table = next(df.value for df in app.dataframe if "replayed" in df.value.columns)
    asked, shown = table.iloc[0], table.iloc[1]
    assert asked["given"] == "(asked)" and asked["model"] == asked["replayed"]  # the paper's model answers right
    assert ":" in asked["model's top (first value)"]  # its top values with probabilities
    assert shown["given"] == wrong.split()[1] and shown["model"] == shown["replayed"] == value
    html = app.get("html")[0].proto.body
    assert "asked: the model answers" in html and "is wrong (replaying gives" in html


def test_ask_reports_its_progress_one_answered_print_at_a_time(shipped_s3):
    from deltalens.app.query import ask

    text = ">>> a = 1\n>>> b = 2\n>>> c = 3\n>>> a, b = b, a\n>>> print('a', a)\n>>> b, c = c, b\n>>> print('c', c)\n"
    seen = []
    view = ask(shipped_s3, shipped_s3.tokenizer, text, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 2), (2, 2)] and len(view.asked) == 2
