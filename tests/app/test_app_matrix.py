"""The conformance matrix's dashboard column: every page on the tiny model of every family (tests/conformance_zoo.py),
the whole page run in Streamlit's AppTest, one app per page, switching checkpoints as a user does.

A cell is the page on one model: it must raise nothing; a delta-rule model's page shows no error box; any other
model's page may say in one box why a section does not apply, in one line. A page whose picker does not offer a
model (the Interventions page lists the models with heads) refuses it by not offering it. The hybrids (fla's with
an attention layer, and the transformers families) and the two baselines run in the default suite; the other
families under `pytest -m slow`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conformance_zoo import ROWS, make_folder  # noqa: E402

from deltalens.models.capabilities import capabilities_of  # noqa: E402

HOME = str(Path(__file__).resolve().parents[2] / "app" / "Home.py")
PAGES = {  # page -> its checkpoint selectbox's key
    "views/heads.py": "heads-ckpt",
    "views/census.py": "census-ckpt",
    "views/interventions.py": "iv-ckpt",
    "views/circuit.py": "circuit-ckpt",
    "views/trace_explorer.py": "trace-ckpt",
    "views/checkpoints.py": "card",
    "views/dictionaries.py": "dict-ckpt",
}
DEFAULT_ROWS = ("deltanet-hybrid", "gated_deltanet-hybrid", "qwen3_5", "olmo_hybrid", "transformer", "lstm")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """One folder holding a link to each row's model folder, named by the row."""
    root = tmp_path_factory.mktemp("matrix-models")
    shelf = root / "shelf"
    shelf.mkdir()
    for row in ROWS:
        (shelf / row).symlink_to(make_folder(row, root / "built"), target_is_directory=True)
    return shelf


def _cells(page: str, rows, folder: Path, monkeypatch, tmp_path) -> dict[str, list[str]]:
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DELTALENS_APP_CHECKPOINTS", str(folder))
    app = AppTest.from_file(HOME, default_timeout=300)
    app.run()
    app.switch_page(page)
    app.run()
    problems: dict[str, list[str]] = {}
    for row in rows:
        box = app.selectbox(key=PAGES[page])
        if row not in box.options:  # the page does not offer this model (its picker's filter): a refusal by design
            continue
        box.select(row).run()
        found = [f"raised: {e.value}" for e in app.exception]
        errors = [e.value for e in app.error]
        from deltalens import load

        delta = "delta" in capabilities_of(load(str(folder / row)))
        found += [f"error box on a delta-rule model: {e}" for e in errors if delta]
        found += [f"an error box of several lines: {e}" for e in errors if "\n" in str(e).strip()]
        if found:
            problems[row] = found
    return problems


@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_on_the_hybrids_and_the_baselines(page, folder, monkeypatch, tmp_path):
    assert not _cells(page, DEFAULT_ROWS, folder, monkeypatch, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_on_every_other_family(page, folder, monkeypatch, tmp_path):
    others = [row for row in ROWS if row not in DEFAULT_ROWS]
    assert not _cells(page, others, folder, monkeypatch, tmp_path)


def test_the_beliefs_page_reads_a_shelf_of_these_models_and_says_what_it_needs(folder, monkeypatch, tmp_path):
    """The Beliefs page compares probabilistic (PFSA-SR) checkpoints; none of these is one: it says so, raising
    nothing."""
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DELTALENS_APP_CHECKPOINTS", str(folder))
    app = AppTest.from_file(HOME, default_timeout=300)
    app.run()
    app.switch_page("views/beliefs.py")
    app.run()
    assert not app.exception
    shown = " ".join(str(e.value) for e in [*app.info, *app.warning, *app.error, *app.markdown, *app.caption])
    assert "probabilistic" in shown
