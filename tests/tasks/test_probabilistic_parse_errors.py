"""A probabilistic trace that cannot be read names the line and the character (issue 58)."""

import pytest

import deltalens as dl
from deltalens.core.errors import DeltalensError
from deltalens.tasks.probabilistic import parse_prob_trace


def _lines():
    return dl.generate_prob_trace(dl.ProbTraceSpec(group="S3", actions=6), seed=0, posteriors=False).text.splitlines(
        keepends=True
    )


def test_a_unicode_variable_name_is_named_with_its_line_and_column():
    lines = _lines()
    init = "".join([lines[0], lines[1].replace("a =", "aé ="), *lines[2:]])
    with pytest.raises(DeltalensError, match="Line 2, '>>> aé = 1', is not one; its character 'é' at column 6"):
        parse_prob_trace(init)
    action = "".join([*lines[:5], ">>> a, bé = bé, a\n", *lines[5:]])
    with pytest.raises(DeltalensError, match="line 6: .*its character 'é' at column 9 is not ASCII"):
        parse_prob_trace(action)
