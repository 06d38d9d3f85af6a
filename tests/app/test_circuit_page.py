"""The Circuit page through AppTest: on the shipped S3 DeltaNet its four sections render; on a Transformer
and an LSTM the sections that do not apply say so in a sentence."""

from __future__ import annotations

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
    app.selectbox(key="circuit-ckpt").select(LSTM).run()
    assert not app.exception and not app.error
    assert "no attention heads" in " ".join(i.value for i in app.info)


def test_circuit_page_on_an_empty_folder_says_so(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    app = page("views/circuit.py", empty, monkeypatch)
    assert app.error and "holds no checkpoints" in app.error[0].value and not app.exception
