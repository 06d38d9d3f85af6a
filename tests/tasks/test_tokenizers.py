"""tasks.tokenizers: exact round trips, labels that match the ground truth, vocabularies, specs."""

import json
import math
import random

import pytest

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import MAX_N, get_action_set, lex_rank, valid_action_sets
from deltalens.tasks.tokenizers import (
    BOS_ID,
    PAD_ID,
    TOKENIZER_KINDS,
    TOKENIZERS,
    CodeTokenizer,
    StatementTokenizer,
    Tokenizer,
    TokenKind,
    code_pieces,
    make_tokenizer,
)
from deltalens.tasks.traces import LINE_ACTION, TraceSpec, generate_trace

GROUP_NAMES = [f"{f}{n}" for f in "SAZD" for n in range(2, MAX_N + 1) if not (f in "AD" and n == 2)]


def random_spec(rng: random.Random) -> TraceSpec:
    group = rng.choice(GROUP_NAMES)
    schedule = rng.choice(["every", "prob", "never"])
    return TraceSpec(
        group=group,
        action_set=rng.choice(valid_action_sets(group)),
        actions=rng.randint(1, 25),
        spacing=rng.randint(1, 6) if schedule == "every" else None,
        reveal_prob=rng.choice([0.2, 0.6, 1.0]) if schedule == "prob" else None,
        reveal=rng.choice(["one", "all"]),
        identity_init=rng.random() < 0.3,
    )


_TOKENIZERS: dict = {}


def tokenizer_for(kind, spec):
    key = (kind, spec.group if kind == "statement" else spec.n, spec.action_set if kind == "statement" else None)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = make_tokenizer(kind, spec)
    return _TOKENIZERS[key]


def check_labels(tokenizer, trace, enc):
    """Every label of every token against the trace's ground truth."""
    n = trace.n
    assert enc.ids[0] == BOS_ID and enc.kinds[0] == TokenKind.OTHER
    assert all(
        len(getattr(enc, f)) == len(enc.ids)
        for f in ("kinds", "action_pos", "perm_ids", "is_reveal", "answers", "reveal_vars", "state_steps", "states")
    )
    pieces = tokenizer.pieces(enc.ids)
    states = enc.states  # a property: build the list once
    reveal_count = completed = 0
    for t, piece in enumerate(pieces):
        kind, state = enc.kinds[t], states[t]
        assert len(state) == n and state == trace.states[enc.state_steps[t]]
        if enc.is_reveal[t]:
            reveal_count += 1
            assert kind == TokenKind.REVEAL
            assert piece.strip() == str(enc.answers[t])
            assert enc.answers[t] == state[enc.reveal_vars[t]]
        else:
            assert kind != TokenKind.REVEAL and enc.answers[t] == 0 and enc.reveal_vars[t] == -1
        if kind == TokenKind.ACTION:
            pos = enc.action_pos[t]
            assert enc.perm_ids[t] == lex_rank(trace.actions[pos])
            line_ends = piece.endswith("\n")
            assert state == trace.states[pos + 1 if line_ends else pos]
            completed += line_ends
        else:
            assert enc.action_pos[t] == -1 and enc.perm_ids[t] == -1
        assert enc.state_steps[t] == completed  # actions whose line is complete at this token
        if kind == TokenKind.PRINT:
            assert ">>>" in piece or piece in {" print", "(", ")", ",", "\n"} or piece.strip().strip("'").isalpha()
    assert reveal_count == sum(len(r.values) for r in trace.reveals)
    # the state in force is s_t for the number of completed action lines
    assert states[-1] == trace.states[-1]
    assert enc.loss_mask("all") == [False] + [True] * (len(enc.ids) - 1)
    assert enc.loss_mask("reveal") == enc.is_reveal


def test_round_trip_and_labels_on_many_traces():
    rng = random.Random(7)
    for i in range(1100):
        spec = random_spec(rng)
        trace = generate_trace(spec, seed=10_000 + i)
        for kind in ("code", "statement"):
            tok = tokenizer_for(kind, spec)
            ids = tok.encode(trace.text)
            assert tok.decode(ids) == trace.text
            assert all(0 <= x < tok.vocab_size for x in ids) and PAD_ID not in ids and BOS_ID not in ids
            enc = tok.encode_trace(trace)
            assert enc.ids == [BOS_ID] + ids
            assert tok.encode_trace(trace, add_bos=False).ids == ids
            check_labels(tok, trace, enc)
            if kind == "statement":
                statements = sum(line.startswith(">>> ") for line in trace.lines)
                outputs = sum(len(line.split()) + 1 for line in trace.lines if not line.startswith(">>> "))
                assert len(ids) == statements + outputs


def test_code_tokens_look_like_the_paper():
    tok = make_tokenizer("code", "S5")
    cases = {
        ">>> a, b = b, a\n": [">>>", " a", ",", " b", " =", " b", ",", " a", "\n"],
        ">>> print('a', a)\n": [">>>", " print", "(", "'a'", ",", " a", ")", "\n"],
        ">>> print(a, b, c)\n": [">>>", " print", "(", "a", ",", " b", ",", " c", ")", "\n"],
        ">>> e = 5\n": [">>>", " e", " =", " 5", "\n"],
        "a 3\n": ["a", " 3", "\n"],
        "3 1 2\n": ["3", " 1", " 2", "\n"],
    }
    for line, pieces in cases.items():
        assert tok.pieces(tok.encode(line)) == pieces
    assert code_pieces(">>> a += 10\n") == [">>>", " a", " +", "=", " 10", "\n"]
    assert make_tokenizer("code", 10).pieces(make_tokenizer("code", 10).encode("j 10\n")) == ["j", " 10", "\n"]


def test_statement_tokens_are_lines_and_values():
    tok = make_tokenizer("statement", "S5", "swaps")
    text = ">>> a = 3\n>>> a, b = b, a\n>>> print('a', a)\na 3\n>>> print(a, b, c, d, e)\n3 1 2 4 5\n"
    assert tok.pieces(tok.encode(text)) == [
        ">>> a = 3\n",
        ">>> a, b = b, a\n",
        ">>> print('a', a)\n",
        "a",
        " 3",
        "\n",
        ">>> print(a, b, c, d, e)\n",
        "3",
        " 1",
        " 2",
        " 4",
        " 5",
        "\n",
    ]


def test_code_vocabulary_depends_only_on_n():
    five = make_tokenizer("code", 5).tokens
    assert make_tokenizer("code", "S5").tokens == five == make_tokenizer("code", "A5").tokens
    assert make_tokenizer("code", TraceSpec(group="D5", action_set="full")).tokens == five
    assert five[PAD_ID] == "<pad>" and five[BOS_ID] == "<bos>"
    assert len(set(five)) == len(five)
    # a tokenizer for 10 variables reads traces of any smaller group
    big = make_tokenizer("code", 10)
    trace = generate_trace(TraceSpec(group="A4", action_set="full", spacing=2), 0)
    assert big.decode(big.encode(trace.text)) == trace.text


@pytest.mark.parametrize(
    "group, action_set",
    [("S4", "full"), ("S5", "swaps"), ("A5", "cycles"), ("D6", "generators"), ("Z7", "full"), ("D4", "swaps")],
)
def test_statement_vocabulary_enumerates_every_line_of_the_task(group, action_set):
    tok = make_tokenizer("statement", group, action_set)
    tokens = tok.tokens
    assert len(set(tokens)) == len(tokens) == tok.vocab_size
    n = tok.n
    names = "abcdefghij"[:n]
    actions = get_action_set(group, action_set)
    expected_actions = {f">>> {actions.statement(p)}\n" for p in actions.elements()}
    assert expected_actions <= set(tokens)
    assert {f">>> {x} = {v}\n" for x in names for v in range(1, n + 1)} <= set(tokens)
    assert {f">>> print('{x}', {x})\n" for x in names} | {f">>> print({', '.join(names)})\n"} <= set(tokens)
    statement_tokens = [t for t in tokens if t.startswith(">>> ")]
    assert len(statement_tokens) == actions.size + n * n + n + 1  # nothing else
    for token_id, token in enumerate(tokens):  # every token encodes to its own id
        if token.startswith(">>> "):
            assert tok.encode(token) == [token_id]


def test_statement_vocabulary_for_full_on_big_groups_is_lazy():
    tok = make_tokenizer("statement", "S10", "full")
    assert tok.vocab_size == tok.action_offset + math.factorial(10)
    trace = generate_trace(TraceSpec(group="S10", action_set="full", actions=30, spacing=5), 0)
    ids = tok.encode(trace.text)
    assert tok.decode(ids) == trace.text
    assert tok.token_of(tok.vocab_size - 1) == ">>> a, b, c, d, e, f, g, h, i, j = j, i, h, g, f, e, d, c, b, a\n"
    s8 = make_tokenizer("statement", "S8", "full")
    rng = random.Random(0)
    for _ in range(200):
        i = rng.randrange(s8.action_offset, s8.vocab_size)
        assert s8.encode(s8.token_of(i)) == [i]
    a8 = make_tokenizer("statement", "A8", "full")
    assert a8.vocab_size == a8.action_offset + math.factorial(8) // 2


@pytest.mark.parametrize(
    "kind, task, text, piece, line",
    [
        ("code", "S3", ">>> a = 1\n>>> b = 4\n", "' 4'", 2),
        ("code", "S5", ">>> a = 3\n>>> a += 1\n", "' +'", 2),
        ("code", "S5", ">>> a = 3\n>>> f = 1\n", "' f'", 2),
        ("code", "S5", ">>> a = 3\n\n>>> a, b = b, a\n>>> print(a) # hi\n", "' #'", 4),
        ("code", "S5", ">>> a  = 3\n", "' '", 1),
        ("code", "S5", "b 3 \n", "' '", 1),
        (
            "statement",
            ("S5", "swaps"),
            ">>> a = 1\n>>> b = 2\n>>> a, b, c = b, c, a\n",
            "'>>> a, b, c = b, c, a\\n'",
            3,
        ),
        ("statement", ("S5", "swaps"), ">>> b, a = a, b\n", "'>>> b, a = a, b\\n'", 1),
        ("statement", ("S5", "swaps"), ">>> a = 6\n", "'>>> a = 6\\n'", 1),
        ("statement", ("S5", "swaps"), ">>> a = 1\n>>> print('a', a)\nx 1\n", "'x'", 3),
        ("statement", ("A5", "cycles"), ">>> a, b = b, a\n", "'>>> a, b = b, a\\n'", 1),
        ("statement", ("S5", "full"), ">>> a, b = b, a\n", "'>>> a, b = b, a\\n'", 1),
        ("statement", ("S5", "swaps"), ">>> a, b = b, a", "'>>> a, b = b, a'", 1),
    ],
)
def test_out_of_vocabulary_text_names_the_piece_and_line(kind, task, text, piece, line):
    tok = make_tokenizer(kind, *task) if isinstance(task, tuple) else make_tokenizer(kind, task)
    with pytest.raises(DeltalensError) as err:
        tok.encode(text)
    message = str(err.value)
    assert message.startswith(f"{piece} on line {line} is not in the vocabulary")
    assert "\n" not in message


def test_specs_round_trip_through_json(tmp_path):
    for tok in [
        make_tokenizer("code", 7),
        make_tokenizer("statement", "A5", "cycles"),
        make_tokenizer("statement", TraceSpec(group="S9", action_set="full")),
    ]:
        spec = tok.to_spec()
        assert set(spec) == {
            "format",
            "version",
            "kind",
            "n",
            "group",
            "action_set",
            "vocab_size",
            "pad_id",
            "bos_id",
            "fingerprint",
        }
        again = Tokenizer.from_json(tok.to_json())
        assert type(again) is type(tok) and again.to_spec() == spec
        assert Tokenizer.from_spec(json.loads(json.dumps(spec))).vocab_size == tok.vocab_size
        path = tmp_path / f"{tok.kind}-{tok.n}.json"
        tok.save(path)
        assert Tokenizer.load(path).to_spec() == spec
        if tok.vocab_size < 1000:
            assert again.tokens == tok.tokens
    code_spec = make_tokenizer("code", "S5").to_spec()
    assert code_spec["kind"] == "code" and code_spec["n"] == 5 and code_spec["group"] is None
    assert isinstance(make_tokenizer("code", 4), CodeTokenizer)
    assert isinstance(Tokenizer.from_spec(make_tokenizer("statement", "D5", "full").to_spec()), StatementTokenizer)


@pytest.mark.parametrize(
    "edit, words",
    [
        ({"fingerprint": "sha256:00"}, "differs from the one this version"),
        ({"vocab_size": 12}, "differs from the one this version"),
        ({"format": "gpt2"}, "not a deltalens tokenizer spec"),
        ({"version": 99}, "version 99 is not supported"),
        ({"kind": "bytes"}, "unknown tokenizer kind 'bytes'"),
        ({"kind": "statement", "group": "S5", "action_set": "swaps"}, "differs from the one this version"),
    ],
)
def test_bad_specs_are_refused(edit, words):
    spec = {**make_tokenizer("code", 5).to_spec(), **edit}
    with pytest.raises(DeltalensError) as err:
        Tokenizer.from_spec(spec)
    assert words in str(err.value)
    with pytest.raises(DeltalensError):
        Tokenizer.from_json("{not json")


def test_decode_skips_specials_and_rejects_unknown_ids():
    tok = make_tokenizer("code", 3)
    ids = tok.encode(">>> a = 1\n")
    assert tok.decode([BOS_ID] + ids + [PAD_ID, PAD_ID]) == ">>> a = 1\n"
    with pytest.raises(DeltalensError):
        tok.decode([tok.vocab_size])
    st = make_tokenizer("statement", "S3", "swaps")
    with pytest.raises(DeltalensError):
        st.decode([st.vocab_size])


def test_make_tokenizer_errors():
    with pytest.raises(DeltalensError, match="unknown tokenizer 'bpe'"):
        make_tokenizer("bpe", "S5")
    with pytest.raises(DeltalensError, match="needs an action set"):
        make_tokenizer("statement", "S5")
    with pytest.raises(DeltalensError, match="not just n"):
        make_tokenizer("statement", 5, "swaps")
    with pytest.raises(DeltalensError, match="A5 has no transpositions"):
        make_tokenizer("statement", "A5", "swaps")
    with pytest.raises(DeltalensError, match="n from 2 to 10"):
        make_tokenizer("code", 11)


def test_check_spec():
    make_tokenizer("code", 6).check_spec(TraceSpec(group="D5", action_set="full"))
    with pytest.raises(DeltalensError, match="knows only 4"):
        make_tokenizer("code", 4).check_spec(TraceSpec(group="S5"))
    with pytest.raises(DeltalensError, match="cannot encode S5 cycles traces"):
        make_tokenizer("statement", "S5", "swaps").check_spec(TraceSpec(group="S5", action_set="cycles"))


def test_action_tokens_carry_the_state_after_the_action_only_on_the_last_token():
    spec = TraceSpec(group="S4", actions=3, spacing=None, identity_init=True)
    trace = generate_trace(spec, 1)
    enc = make_tokenizer("code", spec).encode_trace(trace)
    first_action_line = next(i for i, info in enumerate(trace.line_info) if info.kind == LINE_ACTION)
    start = 1 + 5 * 4  # <bos> + four init lines of five tokens
    stop = start + len(code_pieces(trace.lines[first_action_line]))
    assert all(enc.states[t] == trace.states[0] for t in range(start, stop - 1))
    assert enc.states[stop - 1] == trace.states[1]
    assert set(enc.action_pos[start:stop]) == {0}


def test_every_kind_has_its_module_and_one_entry_in_the_table():
    assert TOKENIZERS == Tokenizer.kinds  # every class registers itself under its kind
    assert tuple(TOKENIZERS) == TOKENIZER_KINDS
    modules = {cls.__module__.rsplit(".", 1)[1] for cls in TOKENIZERS.values()}
    assert modules == {"code", "statement", "code_prob", "statement_prob"}  # one module a kind
    for kind, cls in TOKENIZERS.items():
        assert cls.kind == kind
