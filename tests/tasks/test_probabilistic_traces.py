"""tasks.probabilistic: probabilistic traces are real Python (hidden outcomes from Python's own random),
parse back to the same PFSA-SR inputs, carry exact posteriors, and tokenize with code-prob."""

import random
import re

import numpy as np
import pytest

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import apply_permutation, identity
from deltalens.tasks.pfsa import Action, joint_filter
from deltalens.tasks.probabilistic import (
    ProbTraceSpec,
    generate_prob_trace,
    parse_prob_trace,
    reveal_token_posteriors,
    spec_actions,
)
from deltalens.tasks.tokenizers import (
    BOS_ID,
    PROB_EXTRA_TOKENS,
    CodeTokenizer,
    ProbCodeTokenizer,
    Tokenizer,
    TokenKind,
    make_tokenizer,
)
from deltalens.tasks.traces import LINE_ACTION, TraceSpec, generate_trace, replay_transcript


def random_spec(rng):
    group = rng.choice(["S2", "S3", "S3", "S4", "S5", "A3", "A4", "A5"])
    n = int(group[1:])
    alternating = group[0] == "A"
    det_sets = (
        ["cycles", "full", "generators"]
        if alternating
        else ["swaps", "full", "generators"] + (["cycles"] if n > 2 else [])
    )
    odd_sizes = [k for k in range(3, n + 1, 2)]
    choice_size = rng.choice(odd_sizes if alternating else list(range(2, n + 1)))
    mix = [rng.random() for _ in range(3)]
    if alternating:
        mix[1] = 0.0
    schedule = rng.choice(["every", "prob", "never"])
    return ProbTraceSpec(
        group=group,
        action_set=rng.choice(det_sets),
        actions=rng.choice([rng.randint(1, 24), (4, 16)]),
        mix=tuple(mix),
        swap_prob=rng.choice([0.3, 0.5, 0.05, 0.875]),
        choice_size=choice_size,
        spacing=rng.randint(1, 4) if schedule == "every" else None,
        reveal_prob=0.4 if schedule == "prob" else None,
        full_reveal_prob=rng.choice([0.0, 0.2, 1.0]),
        identity_init=rng.random() < 0.2,
    )


def test_hundreds_of_traces_replay_in_a_real_repl():
    rng = random.Random(11)
    kinds = set()
    for seed in range(300):
        trace = generate_prob_trace(random_spec(rng), seed)
        assert replay_transcript(trace.text) == trace.text, trace.text
        kinds.update(trace.kinds)
    assert kinds == {"det", "swap", "choice"}


def test_first_line_seeds_random_and_the_outcomes_are_pythons():
    spec = ProbTraceSpec(group="S4", actions=30, mix=(0, 0, 1), choice_size=4, spacing=None)
    trace = generate_prob_trace(spec, 5)
    seed = int(re.fullmatch(r">>> import random; random\.seed\((\d+)\)\n", trace.lines[0]).group(1))
    assert seed == trace.python_seed and 0 <= seed < spec.seed_range
    # each choice picked option index random.choice would: the same stream, same order
    stream = random.Random(seed)
    for kernel, realised in zip(trace.kernels, trace.actions):
        assert realised == kernel.perms[stream.choice(range(len(kernel.perms)))]
    spec = ProbTraceSpec(group="S2", actions=40, mix=(0, 1, 0), swap_prob=0.5, spacing=None)
    trace = generate_prob_trace(spec, 6)
    stream = random.Random(trace.python_seed)
    assert [a != identity(2) for a in trace.actions] == [stream.random() < 0.5 for _ in range(40)]


def test_statements_look_like_the_brief():
    spec = ProbTraceSpec(
        group="S3", actions=60, mix=(1, 1, 1), swap_prob=0.3, choice_size=3, spacing=1, full_reveal_prob=0.5
    )
    text = generate_prob_trace(spec, 0).text
    assert ">>> a, b, c = random.choice([(a, b, c), (b, c, a), (c, a, b)])\n" in text
    assert re.search(r">>> ([a-c]), ([a-c]) = \(\2, \1\) if random\.random\(\) < 0\.3 else \(\1, \2\)\n", text)
    assert re.search(r">>> print\('([a-c])', \1\)\n\1 [1-3]\n", text)
    assert re.search(r">>> print\(a, b, c\)\n[1-3] [1-3] [1-3]\n", text)


def test_ground_truth_is_consistent():
    rng = random.Random(12)
    for seed in range(80):
        spec = random_spec(rng)
        trace = generate_prob_trace(spec, seed)
        assert len(trace.states) == len(trace.actions) + 1 == len(trace.kinds) + 1 == len(trace.kernels) + 1
        for t, p in enumerate(trace.actions):
            assert trace.states[t + 1] == apply_permutation(trace.states[t], p)
            assert p in trace.kernels[t].perms  # the realised branch is one the kernel allows
        for reveal, posts in zip(trace.reveals, trace.posteriors):
            assert reveal.values == tuple(trace.states[reveal.after_action][v] for v in reveal.variables)
            assert [p.variable for p in posts] == list(reveal.variables)
            assert all(p.probability > 0 and np.isclose(p.predictive.sum(), 1) for p in posts)
        for line, info in zip(trace.lines, trace.line_info):
            assert (info.kind == LINE_ACTION) == (
                line.startswith(">>> ") and "=" in line and not re.match(r">>> [a-j] = \d", line)
            )
        if spec.mix == (1.0, 0.0, 0.0):
            assert set(trace.kinds) <= {"det"}


def test_same_seed_same_trace_and_knobs_do_what_they_say():
    spec = ProbTraceSpec(
        group="S4", actions=200, mix=(0.5, 0.3, 0.2), spacing=None, reveal_prob=0.5, full_reveal_prob=0.25
    )
    a, b = generate_prob_trace(spec, 3), generate_prob_trace(spec, 3)
    assert a.text == b.text and a.text != generate_prob_trace(spec, 4).text
    counts = {k: a.kinds.count(k) / 200 for k in ("det", "swap", "choice")}
    assert abs(counts["det"] - 0.5) < 0.12 and abs(counts["swap"] - 0.3) < 0.12 and abs(counts["choice"] - 0.2) < 0.1
    full = sum(len(r.variables) == 4 for r in a.reveals) / len(a.reveals)
    assert abs(len(a.reveals) / 200 - 0.5) < 0.12 and abs(full - 0.25) < 0.15
    spaced = generate_prob_trace(ProbTraceSpec(group="S3", actions=12, spacing=4), 0)
    assert [r.after_action for r in spaced.reveals] == [4, 8, 12]
    none = generate_prob_trace(ProbTraceSpec(group="S3", actions=12, spacing=None), 0)
    assert none.reveals == [] and "print" not in none.text


def test_parse_gives_back_the_pfsa_inputs_and_posteriors():
    rng = random.Random(13)
    for seed in range(60):
        trace = generate_prob_trace(random_spec(rng), seed)
        program = parse_prob_trace(trace.text)
        assert program.events == trace.events and program.q0 == trace.q0 and program.n == trace.n
        assert program.python_seed == trace.python_seed
        lines = [e.line for e in program.events]
        assert lines == [e.line for e in trace.events] and all(x > 0 for x in lines)
        got = joint_filter(program.pfsa(), program.events).reveals
        want = [p for line in trace.posteriors for p in line]
        assert all(np.allclose(g.predictive, w.predictive, atol=1e-12) for g, w in zip(got, want))


def test_deterministic_traces_and_seedless_headers_parse_too():
    trace = generate_trace(TraceSpec(group="S4", actions=10, spacing=2, reveal="all"), 1)
    program = parse_prob_trace(trace.text)
    assert program.python_seed is None
    assert [e.perms[0] for e in program.events if isinstance(e, Action)] == trace.actions
    assert all(np.allclose(p.predictive.max(), 1) for p in joint_filter(program.pfsa(), program.events).reveals)
    text = (
        ">>> import random\n>>> a = 1\n>>> b = 2\n>>> a, b = random.choice([(a, b), (b, a), (b, a), (b, a)])\n"
        ">>> print('a', a)\na 2\n"
    )
    program = parse_prob_trace(text)
    assert program.events[0].branches() == [((0, 1), 0.25), ((1, 0), 0.75)]
    assert np.allclose(joint_filter(program.pfsa(), program.events).reveals[0].predictive, [0.25, 0.75])


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "empty"),
        (">>> a = 1\n", "values 1..n"),
        (">>> a = 1\n>>> b = 2\n>>> a, b = random.choice([(b, a)])\n", "never runs 'import random'"),
        (">>> import random\n>>> a = 1\n>>> b = 2\n>>> a = b\n", "line 4"),
        (">>> import random\n>>> a = 1\n>>> b = 2\n>>> print('a', a)\nb 1\n", "line 5"),
        (">>> import random\n>>> a = 1\n>>> b = 2\n>>> print(a, b)\n1 3\n", "line 5"),
        (">>> import random\n>>> a = 1\n>>> b = 2\na 1\n", "output line with no print"),
        (
            ">>> import random\n>>> a = 1\n>>> b = 2\n>>> a, b = (b, a) if random.random() < 1.5 else (a, b)\n",
            "not in \\[0, 1\\]",
        ),
        (">>> import random\n>>> a = 1\n>>> b = 2\n>>> a, b = (b, b) if random.random() < 0.5 else (a, b)\n", "line 4"),
        (">>> import random\n>>> a = 1\n>>> b = 2\n>>> print('a', a)\n", "no output line"),
    ],
)
def test_bad_transcripts_are_refused_with_the_line(text, words):
    with pytest.raises(DeltalensError, match=words):
        parse_prob_trace(text)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(group="Z5"), "S<n> or A<n>"),
        (dict(group="S9"), "up to 8"),
        (dict(group="A4", mix=(1, 1, 0), action_set="cycles"), "no swaps"),
        (dict(group="A4", mix=(0, 0, 1), choice_size=2), "odd"),
        (dict(swap_prob=1e-5), "written like 0.3"),
        (dict(swap_prob=1.0), "written like 0.3"),
        (dict(mix=(0, 0, 0)), "not all 0"),
        (dict(mix=(1, 1)), "three weights"),
        (dict(choice_size=4), "from 2 to 3"),
        (dict(spacing=2, reveal_prob=0.5), "not both"),
        (dict(full_reveal_prob=1.5), "full_reveal_prob"),
    ],
)
def test_bad_specs_are_refused(kwargs, words):
    with pytest.raises(DeltalensError, match=words):
        ProbTraceSpec(**kwargs)


def test_sigma_of_a_spec_lists_every_statement_kind():
    actions = list(spec_actions(ProbTraceSpec(group="S4", action_set="swaps", swap_prob=0.25)))
    assert len(actions) == 6 + 6 + 4  # deterministic swaps, random swaps, choices over 3 of 4 variables
    assert sum(a.is_deterministic for a in actions) == 6
    assert all(sorted(a.probs) == [0.25, 0.75] for a in actions[6:12])
    trace = generate_prob_trace(ProbTraceSpec(group="S4", action_set="swaps", swap_prob=0.25, actions=30), 0)
    assert all(kernel in actions for kernel in trace.kernels)


def test_spec_round_trips_through_a_dict():
    spec = ProbTraceSpec(group="s4", actions=(4, 9), mix=(1, 2, 3), spacing=None, reveal_prob=0.5)
    assert spec.group == "S4" and ProbTraceSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(DeltalensError, match="unknown"):
        ProbTraceSpec.from_dict({"groups": "S3"})


# --- the code-prob tokenizer ------------------------------------------------------------------------


def test_code_prob_round_trips_and_labels_every_trace():
    rng = random.Random(14)
    for seed in range(150):
        trace = generate_prob_trace(random_spec(rng), seed)
        tok = ProbCodeTokenizer(trace.n)
        ids = tok.encode(trace.text)
        assert tok.decode(ids) == trace.text and all(0 <= i < tok.vocab_size for i in ids)
        enc = tok.encode_trace(trace)
        assert enc.ids == [BOS_ID] + ids
        flat = [p for line in trace.posteriors for p in line]
        assert sum(enc.is_reveal) == len(flat)
        assert [a for a, r in zip(enc.answers, enc.is_reveal) if r] == [p.value for p in flat]
        pred = reveal_token_posteriors(trace, enc)
        assert np.isnan(pred[~np.array(enc.is_reveal)]).all()
        assert np.allclose(pred[np.array(enc.is_reveal)].sum(axis=1), 1)
        header = enc.kinds[1 : 1 + len(tok.encode(trace.lines[0]))]
        assert set(header) == {TokenKind.INIT}
        assert enc.states[-1] == trace.states[-1]


def test_code_prob_extends_code_append_only():
    for n in range(2, 9):
        code, prob = CodeTokenizer(n), ProbCodeTokenizer(n)
        assert prob.tokens[: code.vocab_size] == code.tokens
        assert set(prob.tokens[code.vocab_size :]) <= set(PROB_EXTRA_TOKENS)
        assert prob.fingerprint() != code.fingerprint() and prob.kind == "code-prob" and code.kind == "code"
        trace = generate_trace(TraceSpec(group=f"S{n}", actions=12, spacing=3), n)
        assert prob.encode(trace.text) == code.encode(trace.text)  # deterministic traces: identical ids


def test_code_prob_tokens_and_digit_spelling():
    tok = ProbCodeTokenizer(3)
    assert tok.pieces(tok.encode(">>> import random; random.seed(4821)\n")) == [
        ">>>",
        " import",
        " random",
        ";",
        " random",
        ".",
        "seed",
        "(",
        "4",
        "8",
        "2",
        "1",
        ")",
        "\n",
    ]
    assert tok.pieces(tok.encode(">>> a, b = (b, a) if random.random() < 0.25 else (a, b)\n")) == [
        ">>>",
        " a",
        ",",
        " b",
        " =",
        " (",
        "b",
        ",",
        " a",
        ")",
        " if",
        " random",
        ".",
        "random",
        "(",
        ")",
        " <",
        " 0",
        ".",
        "2",
        "5",
        " else",
        " (",
        "a",
        ",",
        " b",
        ")",
        "\n",
    ]
    assert tok.pieces(tok.encode(">>> a, b, c = random.choice([(a, b, c), (b, c, a)])\n"))[9:13] == [
        "choice",
        "(",
        "[",
        "(",
    ]
    with pytest.raises(DeltalensError, match="'d'"):
        tok.encode(">>> print('d', d)\n")


def test_code_prob_spec_round_trips():
    tok = ProbCodeTokenizer(4)
    spec = tok.to_spec()
    assert spec["kind"] == "code-prob" and ProbCodeTokenizer.from_spec(spec).tokens == tok.tokens
    assert isinstance(ProbCodeTokenizer.from_spec(CodeTokenizer(4).to_spec()), CodeTokenizer)
    with pytest.raises(DeltalensError, match="differs"):
        ProbCodeTokenizer.from_spec({**spec, "fingerprint": "sha256:0"})


def test_code_prob_is_a_registered_tokenizer_kind():
    tokenizer = make_tokenizer("code-prob", "S3")
    assert isinstance(tokenizer, ProbCodeTokenizer)
    again = Tokenizer.from_spec(tokenizer.to_spec())
    assert isinstance(again, ProbCodeTokenizer) and again.fingerprint() == tokenizer.fingerprint()
