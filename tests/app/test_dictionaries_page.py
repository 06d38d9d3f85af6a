"""The Dictionaries page through AppTest: it opens on the head the census singles out, trains a dictionary of its
state on a click (kept on disk after), and shows the fact table, one latent along a trace and the splice."""

from __future__ import annotations

import pytest
from test_app import PAPER, key, page


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DELTALENS_APP_CHECKPOINTS", raising=False)


def test_the_page_trains_scores_and_splices_a_dictionary_of_the_tracking_head(tmp_path):
    app = page("views/dictionaries.py")
    assert not app.exception and not app.error, [e.value for e in [*app.exception, *app.error]]
    assert app.selectbox(key="dict-ckpt").value == PAPER
    assert (app.selectbox(key=key("dict-layer")).value, app.selectbox(key=key("dict-head")).value) == (0, 3)
    app.selectbox(key=key("dict-latents")).select(32).run()
    app.selectbox(key=key("dict-steps")).select(300).run()
    app.selectbox(key=key("dict-traces")).select(128).run()
    assert not app.get("plotly_chart")  # nothing trained before the click
    app.button(key=key("dict-train")).click().run()
    assert not app.exception and not app.error, [e.value for e in [*app.exception, *app.error]]
    text = "\n".join(m.value for m in app.markdown)
    assert "facts have a latent at F1 >= 0.9" in text and "Spliced into the forward" in text
    facts = app.dataframe[0].value
    assert len(facts) == 9 and facts["f1"].between(0, 1).all()
    assert len(app.get("plotly_chart")) == 1  # a latent along the held-out trace
    assert list((tmp_path / "cache" / "measures").glob("*dictionary-*.pkl"))  # kept: no second training


def test_a_model_without_a_state_is_told_so(monkeypatch):
    app = page("views/dictionaries.py")
    app.selectbox(key="dict-ckpt").select("s3-transformer-statement").run()
    assert not app.exception and not app.error
    assert any("no matrix state" in info.value for info in app.info)
