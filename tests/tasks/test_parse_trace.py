"""parse_trace rebuilds a generated trace's ground truth from its text alone."""

import pytest

from deltalens.core.errors import DeltalensError
from deltalens.tasks import TraceSpec, generate_trace, make_tokenizer, parse_trace


@pytest.mark.parametrize(
    "group, action_set, reveal",
    [("S3", "swaps", "one"), ("S5", "full", "all"), ("A4", "cycles", "one"), ("D5", "generators", "all")],
)
def test_parse_matches_generator_ground_truth(group, action_set, reveal):
    for seed in range(40):
        trace = generate_trace(
            TraceSpec(group=group, action_set=action_set, actions=(1, 20), spacing=2, reveal=reveal), seed
        )
        parsed = parse_trace(trace.text, group=group, action_set=action_set)
        assert parsed.text == trace.text
        assert parsed.states == trace.states and parsed.actions == trace.actions
        assert parsed.reveals == trace.reveals and parsed.line_info == trace.line_info
        tokenizer = make_tokenizer("statement", group, action_set=action_set)
        a, b = tokenizer.encode_trace(trace), tokenizer.encode_trace(parsed)
        assert a.ids == b.ids and a.answers == b.answers and a.kinds == b.kinds


def test_parse_refuses_inconsistent_or_foreign_text():
    text = generate_trace(TraceSpec(group="S3", actions=8, spacing=2), 0).text
    lines = text.splitlines(keepends=True)
    out = next(i for i, line in enumerate(lines) if not line.startswith(">>>"))
    name, value = lines[out].split()
    bad = lines[:out] + [f"{name} {int(value) % 3 + 1}\n"] + lines[out + 1 :]
    with pytest.raises(DeltalensError, match=f"line {out + 1}: the print shows"):
        parse_trace("".join(bad))
    with pytest.raises(DeltalensError, match="line 4"):
        parse_trace(">>> a = 1\n>>> b = 2\n>>> c = 3\n>>> a = b + c\n")
    with pytest.raises(DeltalensError, match="values 1..n"):
        parse_trace(">>> a = 1\n>>> b = 1\n")
