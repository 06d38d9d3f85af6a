"""A model on the hidden-block adversary (training/hidden_block_eval.py, belief_kl's adversarial kind)."""

import pytest

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.tasks import make_tokenizer
from deltalens.tasks.probabilistic import ProbTraceSpec
from deltalens.training.belief_kl import adversarial_traces, belief_kl
from deltalens.training.hidden_block_eval import query_kl
from tests.conftest import build_tiny

SPEC = ProbTraceSpec(group="S4", actions=(8, 16), mix=(0.75, 0.25, 0.0), swap_prob=0.3, hidden_block=3)


@pytest.fixture(scope="module")
def small():
    tokenizer = make_tokenizer("statement-prob", SPEC)
    return build_tiny("deltanet", vocab_size=tokenizer.vocab_size), tokenizer


def test_belief_kl_uses_the_hidden_block_adversary(small):
    model, tokenizer = small
    result = belief_kl(model, tokenizer, SPEC, n_random=4, n_adversarial=3, cycles=6)
    adversarial = result.rows[result.rows.kind == "adversarial"]
    assert len(adversarial) == 3 * 7  # 6 probe reveals and the query per trace
    assert adversarial.partial_reveals.max() == 6


def test_the_block_2_adversary_is_refused_where_its_fair_swap_is_not_in_the_vocabulary(small):
    family = ProbTraceSpec(group="S4", swap_prob=0.3)
    with pytest.raises(DeltalensError, match="fair swap"):
        adversarial_traces(family, 2, cycles=4)
    model = build_tiny("deltanet", vocab_size=make_tokenizer("statement-prob", family).vocab_size)
    tokenizer = make_tokenizer("statement-prob", family)
    kinds = set(belief_kl(model, tokenizer, family, n_random=4, n_adversarial=3).rows.kind)
    assert kinds == {"random"}  # the card of such a checkpoint still gets its random-trace KL


def test_query_kl_one_row_per_trace_and_an_error_row_past_the_context(small):
    model, tokenizer = small
    rows = query_kl(model, tokenizer, SPEC, horizons=(4, 9), n_traces=3)
    assert list(rows.groupby("horizon").size()) == [3, 3] and (rows.kl >= 0).all()
    short = models.build("transformer", vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2, n_ctx=40)
    rows = query_kl(short, tokenizer, SPEC, horizons=(2, 40), n_traces=2)
    assert rows[rows.horizon == 2].kl.notna().all()
    assert rows[rows.horizon == 40].error.notna().all()
