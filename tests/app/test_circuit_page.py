"""The Circuit page through AppTest: on the shipped S3 DeltaNet its four sections render; on a Transformer
and an LSTM the sections that do not apply say so in a sentence."""

from __future__ import annotations

import json

import pytest
from test_app import PAPER, page

TRANSFORMER = "s3-transformer-statement"
LSTM = "s3-lstm-statement-prob"
SECTIONS = ["Effective attention of one reveal", "Direct logit attribution per head", "Patching grid", "Automaton"]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DELTALENS_APP_CHECKPOINTS", raising=False)


def charts(app) -> list[str]:
    return [c.proto.spec for c in app.get("plotly_chart")]


def test_circuit_page_on_the_shipped_s3_deltanet():
    app = page("views/circuit.py")
    assert not app.exception and not app.error
    assert app.selectbox(key="circuit-ckpt").value == PAPER
    assert [s.value for s in app.subheader] == SECTIONS
    specs = charts(app)
    assert len(specs) == 5  # reading, DLA, the two patching grids, the automaton
    assert any("A[t, s]" in s for s in specs) and any("Direct logit attribution" in s for s in specs)
    assert any("activation patching" in s for s in specs) and any("attribution patching" in s for s in specs)
    assert any("Automaton of L0H3" in s for s in specs)  # the default head: attribution patching's top one
    assert any("isomorphic to the Cayley graph" in m.value and "not isomorphic" not in m.value for m in app.markdown)


def test_circuit_page_says_what_does_not_apply():
    app = page("views/circuit.py")
    app.selectbox(key="circuit-ckpt").select(TRANSFORMER).run()
    assert not app.exception and not app.error
    info = " ".join(i.value for i in app.info)
    assert "delta-rule family only" in info and "no matrix state" in info
    assert any("activation patching" in s for s in charts(app))  # patching applies to a Transformer's heads
    # its clean and corrupted runs differ too little for a fraction: the caption says what the cells are then
    assert app.warning and "differ by only" in app.warning[0].value
    assert any("the raw change of the metric" in c.value for c in app.caption)
    app.selectbox(key="circuit-ckpt").select(LSTM).run()
    assert not app.exception and not app.error
    assert "no attention heads" in " ".join(i.value for i in app.info)


def test_circuit_page_on_an_empty_folder_says_so(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    app = page("views/circuit.py", empty, monkeypatch)
    assert app.error and "holds no checkpoints" in app.error[0].value and not app.exception


def test_both_patching_grids_share_one_scale_with_numbers_and_say_how_far_they_agree():
    """Issue 44: activation patching restores 0.998 at L0H3 and attribution patching estimates 0.024; with
    a colour scale each, both cells were the same saturated blue."""
    app = page("views/circuit.py")
    grids = [c for c in app.get("plotly_chart") if "patching: hook_z" in c.proto.spec]
    assert len(grids) == 2
    traces = [json.loads(c.proto.spec)["data"][0] for c in grids]
    assert traces[0]["zmin"] == traces[1]["zmin"] and traces[0]["zmax"] == traces[1]["zmax"]
    assert all(t.get("texttemplate") for t in traces)  # the numbers are in the cells
    agree = [i.value for i in app.info if "Spearman" in i.value]
    assert agree and "L0H3" in agree[0] and "top head" in agree[0]


def test_a_head_chosen_on_one_checkpoint_is_reset_and_noted_on_another():
    app = page("views/circuit.py")
    app.selectbox(key="circuit-head@" + PAPER).select("L1H1").run()
    app.selectbox(key="circuit-ckpt").select("s5-deltanet-neg-statement").run()
    assert not app.exception and not app.error
    shown = app.selectbox(key="circuit-head@s5-deltanet-neg-statement").value
    notes = " ".join(i.value for i in app.info)
    assert "L1H1 was chosen on " + PAPER in notes and f"The head box shows {shown}" in notes


def test_a_head_that_does_not_track_is_said_in_a_sentence_not_drawn():
    app = page("views/circuit.py")
    app.selectbox(key="circuit-head@" + PAPER).select("L1H1").run()
    assert not app.exception and not app.error
    assert "L1H1 does not track" in " ".join(i.value for i in app.info)
    assert not any("Automaton of L1H1" in s for s in charts(app))
