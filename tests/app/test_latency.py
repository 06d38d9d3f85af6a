"""What keeps the dashboard's first renders short (issue 44, item 5): results kept on disk that a page can
ask for without computing, the imports done at server start, and the long computations behind a button."""

from __future__ import annotations

import argparse
import os

import pytest
from test_app import PAPER, page

from deltalens.app import disk_cache, preload
from deltalens.cli import app as app_command
from deltalens.loading.opened import open_checkpoint

S5 = "s5-deltanet-neg-statement"


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DELTALENS_APP_CHECKPOINTS", raising=False)


def test_a_page_can_ask_the_disk_without_computing_and_shared_results_have_no_checkpoint():
    folder = open_checkpoint(PAPER, load_model=False).path
    assert disk_cache.read_result("step", folder, "64/0") is disk_cache.MISSING
    assert disk_cache.cached_result("step", folder, "64/0", lambda: None) is None  # None is a result too
    assert disk_cache.read_result("step", folder, "64/0") is None
    other = open_checkpoint(S5, load_model=False).path
    assert disk_cache.read_result("step", other, "64/0") is disk_cache.MISSING  # keyed by the weights
    assert disk_cache.cached_result("laws", None, "a", lambda: [1, 2]) == [1, 2]
    assert disk_cache.read_result("laws", None, "a") == [1, 2] and disk_cache.read_result("laws", None, "b") is (
        disk_cache.MISSING
    )


def test_the_app_command_serves_through_the_preloading_launcher():
    args = argparse.Namespace(host="127.0.0.1", port=8501)
    command = app_command.command(args)
    assert command[1:4] == ["-m", "deltalens.app.serve", "run"] and command[4].endswith("Home.py")


def test_the_preload_runs_once_with_one_thread(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(preload, "_thread", None)
    assert preload.preload(("json", "no_such_module_here")) >= 0.0  # a missing module is left to its page
    assert "json" in preload.timing and "no_such_module_here" not in preload.timing
    assert os.environ["OMP_NUM_THREADS"] == "1"
    assert preload.start_preload(("json",)) is True and preload.start_preload(("json",)) is False
    preload._thread.join(timeout=30)


@pytest.mark.slow  # the S5 automaton, on a click: about 15-30 s on 2 busy cores
def test_an_expensive_automaton_waits_for_its_button_and_is_then_kept():
    app = page("views/circuit.py")
    app.selectbox(key="circuit-ckpt").select(S5).run()
    assert not app.exception and not app.error
    specs = [c.proto.spec for c in app.get("plotly_chart")]
    assert any("activation patching" in s for s in specs) and not any("Automaton of" in s for s in specs)
    button = next(b for b in app.button if b.key == f"circuit-automaton@{S5}")
    assert button.label.startswith("extract the automaton of L")
    button.click().run()
    assert not app.exception and not app.error
    drawn = any("Automaton of" in c.proto.spec for c in app.get("plotly_chart"))
    assert drawn or any("does not track" in i.value for i in app.info)  # a verdict either way
    app.run()  # kept on disk: shown at once, no button
    assert not any(b.key == f"circuit-automaton@{S5}" for b in app.button)
