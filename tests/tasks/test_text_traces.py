"""Text-level traces: per-character labels carried onto any tokenizer's tokens (tasks/text_traces.py),
and the hf tokenizer adapter built on them (tasks/tokenizers/hf.py)."""

from __future__ import annotations

import pytest

from deltalens.core.errors import DeltalensError
from deltalens.tasks.text_traces import TextFormat, align, render, reveal_context
from deltalens.tasks.tokenizers import TokenKind, code_pieces, make_tokenizer
from deltalens.tasks.tokenizers.hf import HFTokenizer
from deltalens.tasks.tokenizers.repl_bpe import train_repl_bpe
from deltalens.tasks.traces import TraceSpec, generate_trace, parse_trace

SPEC = TraceSpec(group="S3", actions=10, spacing=2)


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    """{split: HFTokenizer} learnt from S3 traces: merges within lines, and merges anywhere."""
    folder = tmp_path_factory.mktemp("bpe")
    return {
        split: HFTokenizer.from_file(train_repl_bpe(SPEC, folder / f"{split}.json", 300, n_traces=300, split=split))
        for split in ("lines", "none")
    }


def _offsets(text):
    out, at = [], 0
    for piece in code_pieces(text):
        out.append((at, at + len(piece)))
        at += len(piece)
    return out


@pytest.mark.parametrize("reveal", ["one", "all"])
def test_alignment_on_our_code_pieces_equals_our_code_tokenizer(reveal):
    """Cut at our code tokenizer's pieces, the per-character labels give exactly its per-token labels."""
    spec = TraceSpec(group="S4", action_set="cycles", actions=9, spacing=3, reveal=reveal)
    ours = make_tokenizer("code", spec)
    for seed in range(5):
        trace = generate_trace(spec, seed)
        expected = ours.encode_trace(trace)
        got = align(render(trace), expected.ids[1:], _offsets(trace.text), bos_id=expected.ids[0])
        for field in ("kinds", "action_pos", "perm_ids", "answers", "reveal_vars", "state_steps", "is_reveal"):
            assert getattr(got, field) == getattr(expected, field), field


@pytest.mark.parametrize("split", ["lines", "none"])
def test_bpe_tokens_carry_the_values_they_hold(bpe, split):
    tokenizer = bpe[split]
    for seed in range(6):
        trace = generate_trace(SPEC, seed)
        enc = tokenizer.encode_trace(trace)
        assert tokenizer.decode(enc.ids) == trace.text
        assert enc.ids[0] == tokenizer.bos_id == 1
        values = [x for r in trace.reveals for x in r.values]
        assert len(enc.value_tokens) == len(values)
        for x, positions in zip(values, enc.value_tokens):
            start, end = enc.offsets[positions[0]][0], enc.offsets[positions[-1]][1]
            assert str(x) in trace.text[start:end]  # the value's characters are in its tokens
            assert all(enc.kinds[p] == TokenKind.REVEAL and enc.answers[p] == x for p in positions)
        assert enc.state_steps == sorted(enc.state_steps)  # steps never go back
        assert enc.state_steps[-1] == trace.num_actions
    if split == "none":  # merges cross lines there: some token holds a newline inside it
        assert any("\n" in tokenizer.token_of(i)[:-1] for i in enc.ids[1:])


def test_format_words_names_and_examples(bpe):
    trace = generate_trace(SPEC, 3)
    fmt = TextFormat(names="long_names", values="colors", examples=2)
    tokenizer = bpe["lines"].with_format(fmt)
    enc = tokenizer.encode_trace(trace)
    text = enc.text
    assert text.count(">>> alpha = ") == 3  # the query and each example initialise it
    assert any(f">>> alpha = '{color}'" in text for color in ("red", "green", "blue"))  # a string literal
    assert text.count("\n\n") == 2  # two examples, each followed by a blank line
    query_start = text.rindex("\n\n") + 2
    assert text[query_start:].startswith(">>> alpha = ")
    # the examples are context: never reveal tokens, step 0
    first_query = next(i for i, (s, _) in enumerate(enc.offsets) if s >= query_start)
    assert not any(enc.is_reveal[:first_query]) and set(enc.state_steps[:first_query]) == {0}
    names = ("alpha", "bravo", "charlie")
    for x, positions in zip([x for r in trace.reveals for x in r.values], enc.value_tokens):
        start, end = enc.offsets[positions[0]][0], enc.offsets[positions[-1]][1]
        assert fmt.value(x) in text[start:end]
    assert all(name in text for name in names)
    # the words are cut into several tokens by a tokenizer that never saw them
    assert max(len(p) for p in enc.value_tokens) > 1
    # the rendered text is still Python: replaying it prints its own output lines
    from deltalens.tasks.traces import replay_transcript

    query = text[query_start:]
    assert replay_transcript(query) == query


def test_reveal_context_counts_actions_since_last_shown():
    text = (
        ">>> a = 1\n>>> b = 2\n>>> c = 3\n>>> a, b = b, a\n>>> print('a', a)\na 2\n"
        ">>> b, c = c, b\n>>> a, c = c, a\n>>> print('a', a)\na 1\n>>> print('b', b)\nb 3\n"
    )
    rows = reveal_context(parse_trace(text))
    assert [(r["since"], r["last_value"], r["value"]) for r in rows] == [(1, 1, 2), (2, 2, 1), (3, 2, 3)]


def test_bad_formats_are_refused_in_a_sentence():
    with pytest.raises(DeltalensError, match="names must be"):
        TextFormat(names=("a", "a"))
    with pytest.raises(DeltalensError, match="values must be"):
        TextFormat(values=("x y", "z"))
    with pytest.raises(DeltalensError, match="names only 3"):
        TextFormat(names=("x", "y", "z")).check(4)
    with pytest.raises(DeltalensError, match="hf:path"):
        make_tokenizer("hf:", "S3")
