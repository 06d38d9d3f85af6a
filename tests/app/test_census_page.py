"""The Census page through AppTest: on the shipped DeltaNet [0, 2] checkpoints its table and first sentence
name the head dl.census itself singles out (the tracking head, near-reflections on the action tokens); bad input
(empty pasted text, a model without a delta rule) gets one sentence, not a traceback."""

from __future__ import annotations

import pytest
from test_app import PAPER, key, page

import deltalens as dl

S5 = "s5-deltanet-neg-statement"
TRANSFORMER = "s3-transformer-statement"


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DELTALENS_APP_CHECKPOINTS", raising=False)


def expected_top(name: str) -> str:
    """The head dl.census singles out (near-reflections on action tokens), over the page's default traces."""
    model = dl.load(name)
    column, (layer, head) = dl.census(model, model.checkpoint.batch(64, seed=0)).most_reflecting()
    assert column == "reflection_fraction_action"
    return f"L{layer}H{head}"


def table_top(app) -> str:
    table = app.dataframe[0].value
    return str(table.loc[table["reflection_fraction_action"].idxmax(), "name"])


def test_census_page_names_the_tracking_head_on_the_shipped_deltanets():
    app = page("views/census.py")
    assert not app.exception and not app.error, [e.value for e in [*app.exception, *app.error]]
    assert app.selectbox(key="census-ckpt").value == PAPER
    assert len(app.get("plotly_chart")) == 1  # the layer x head heatmap
    for name in (PAPER, S5):
        if name != PAPER:
            app.selectbox(key="census-ckpt").select(name).run()
            assert not app.exception and not app.error
        top = expected_top(name)
        assert top == "L0H3"  # the head the census gives on both: the tracking head
        assert table_top(app) == top
        first = app.markdown[0].value  # the page's sentence, above the checkpoint picker
        assert f"**{top}**" in first and name in first and "action tokens" in first
    assert "singles out L0H3" in app.caption[0].value  # the page's summary says it too


def test_census_page_heatmap_follows_the_statistic():
    app = page("views/census.py")
    app.selectbox(key=key("census-statistic")).select("effective_rank").run()
    assert not app.exception and not app.error
    assert "effective rank of S_t" in app.get("plotly_chart")[0].proto.spec
    app.selectbox(key=key("census-statistic")).select("neg_gate").run()  # no shipped family allows alpha < 0
    assert not app.get("plotly_chart") and any("negative gate" in i.value for i in app.info)


def test_census_page_gives_bad_input_one_sentence():
    app = page("views/census.py")
    app.radio(key=key("census-source")).set_value("paste").run()
    assert not app.exception and not app.error and app.dataframe  # the default paste: a trace of the task
    app.text_area(key=key("census-text")).input("   ").run()
    assert not app.exception
    assert len(app.error) == 1 and "empty" in app.error[0].value and "\n" not in app.error[0].value
    assert not app.dataframe
    app.text_area(key=key("census-text")).input("x = 1\nprint(x)").run()  # not in the trace tokenizer's vocabulary
    assert not app.exception and len(app.error) == 1 and "vocabulary" in app.error[0].value
    app.radio(key=key("census-source")).set_value("traces").run()
    app.selectbox(key="census-ckpt").select(TRANSFORMER).run()
    assert not app.exception and not app.error
    assert any("no delta rule" in i.value for i in app.info) and not app.dataframe


def test_a_paste_that_does_not_read_with_another_checkpoint_is_not_carried_there():
    app = page("views/census.py")
    app.radio(key=key("census-source")).set_value("paste").run()  # the S3 model's own trace in the box
    app.selectbox(key="census-ckpt").select("a5-deltaproduct-n4-full").run()
    assert not app.exception and not app.error  # A5's own default, not the S3 trace its tokenizer cannot read
    assert any("does not read with a5-deltaproduct-n4-full" in note.value for note in app.info)
