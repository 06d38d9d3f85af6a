"""The first page of a new server is drawn before torch, TransformerLens and scikit-learn load (issue 44,
item 5): its imports, and the page itself while the preload thread is still importing, leave all three out
of sys.modules. Each check runs in a fresh interpreter (this one imported torch long ago)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from deltalens.app import grid_claims, preload

REPO = Path(__file__).resolve().parents[2]
FIRST_PAGE = ("app/Home.py", "app/views/checkpoints.py")  # Home.py opens on the Checkpoints page
HEAVY = ("torch", "transformer_lens", "sklearn")


def fresh(code: str, tmp_path: Path) -> dict:
    """Run `code` in a new interpreter from the repository root; the JSON it prints last."""
    env = {**os.environ, "DELTALENS_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    env.pop("DELTALENS_APP_CHECKPOINTS", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def page_imports(path: str) -> str:
    """The import statements of a page script's top level, as source (its Streamlit calls left out)."""
    tree = ast.parse((REPO / path).read_text())
    return "\n".join(ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom)))


def test_the_first_page_imports_nothing_heavy(tmp_path):
    imports = "\n".join(page_imports(path) for path in FIRST_PAGE)
    assert "deltalens.app.common" in imports and "streamlit" in imports  # the statements were found
    code = f"import json, sys\n{imports}\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    assert fresh(code, tmp_path) == []


def test_the_first_page_draws_its_list_while_the_preload_imports(tmp_path):
    """Home.py through AppTest with a preload thread that has not finished: the table, the cards and
    curves are drawn, the claims are announced for later, and nothing heavy was imported on the way."""
    code = f"""
import json, sys, threading
from deltalens.app import preload, grid_claims
gate = threading.Event()
preload._thread = threading.Thread(target=gate.wait, daemon=True)  # a preload still importing
preload._thread.start()
from streamlit.testing.v1 import AppTest
app = AppTest.from_file({str(REPO / "app" / "Home.py")!r}, default_timeout=240).run()
print(json.dumps({{
    "heavy": sorted(m for m in {HEAVY!r} if m in sys.modules),
    "problems": [str(e.value)[:300] for e in [*app.exception, *app.error]],
    "title": [t.value for t in app.title],
    "names": list(app.dataframe[0].value["name"]) if app.dataframe else [],
    "charts": len(app.get("plotly_chart")),
    "info": [i.value for i in app.info],
}}))
gate.set()
"""
    shown = fresh(code, tmp_path)
    assert shown["problems"] == [] and shown["title"] == ["Checkpoints"]
    assert "s3-deltanet-neg-statement" in shown["names"] and len(shown["names"]) > 5
    assert shown["charts"] >= 1  # the saved accuracies (and curves) of the card's checkpoint
    assert any("claims are judged" in text for text in shown["info"])  # left for a rerun, said so
    assert shown["heavy"] == []


def test_loading_is_true_only_while_the_preload_thread_has_modules_to_go(monkeypatch):
    gate = threading.Event()
    monkeypatch.setattr(preload, "_thread", threading.Thread(target=gate.wait, daemon=True))
    monkeypatch.setattr(preload, "timing", {"json": 0.1})
    assert preload.loading(("json",)) is False  # not started: no thread imports anything
    preload._thread.start()
    assert preload.loading(("json", "pandas")) is True and preload.loading(("json",)) is False
    gate.set()
    preload._thread.join(timeout=10)
    assert preload.loading(("json", "pandas")) is False  # ended (a failed import is the page's to report)


def test_the_servers_heavy_imports_wait_for_the_first_page(monkeypatch):
    """`deltalens app` (app/serve.py) starts the thread with a wait: the first page's light imports, then
    nothing until Home.py says a page was drawn, so the first page has the interpreter to itself."""
    monkeypatch.setattr(preload, "_thread", None)
    monkeypatch.setattr(preload, "_first_page", threading.Event())
    monkeypatch.setattr(preload, "FIRST_PAGE", ("json",))
    monkeypatch.setattr(preload, "timing", {})
    assert preload.start_preload(("csv",), wait=120) is True
    for _ in range(200):  # the light part goes first, at once
        if "json" in preload.timing:
            break
        time.sleep(0.05)
    time.sleep(0.3)
    assert "json" in preload.timing and "csv" not in preload.timing and preload.loading(("csv",))
    preload.first_page_drawn()
    preload._thread.join(timeout=30)
    assert "csv" in preload.timing and not preload.loading(("csv",))


def test_the_claims_wait_for_their_imports_then_for_a_thread_that_builds_them(tmp_path, monkeypatch):
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(grid_claims, "_builders", {})
    release = threading.Event()
    monkeypatch.setattr(grid_claims, "build", lambda: release.wait(30) and ("caption", None, []))
    key = (("paper.toml", 1),)
    monkeypatch.setattr(preload, "_thread", None)
    assert not grid_claims.waiting(key)  # no preload running (streamlit run, AppTest): the page builds it
    gate = threading.Event()
    monkeypatch.setattr(preload, "_thread", threading.Thread(target=gate.wait, daemon=True))
    monkeypatch.setattr(preload, "timing", {})
    preload._thread.start()
    grid_claims.start_building(key)
    assert grid_claims.waiting(key) and grid_claims._builders == {}  # imports still running: nothing built yet
    gate.set()
    preload._thread.join(timeout=10)
    grid_claims.start_building(key)
    assert grid_claims.waiting(key)  # the thread builds it: the page still leaves it for later
    release.set()
    grid_claims._builders[key].join(timeout=30)
    assert not grid_claims.waiting(key) and grid_claims.section(key) == ("caption", None, [])  # kept on disk
