"""The documentation site builds: `mkdocs build --strict` (mkdocs.yml at the top level, the pages in docs/) into a
temporary folder, with no warning (a broken link or anchor, a page left out of the nav, a snippet that is gone);
the API reference holds every public name, rendered from its docstring with its example as code; the benchmark
figures are filled in from their JSON, and a figure whose JSON lost its key stops the build."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_readme import model_table_rows

import deltalens as dl

REPO = Path(__file__).resolve().parents[1]
LOAD = json.loads((REPO / "benchmarks" / "results" / "load.json").read_text())  # a recorded run the page quotes


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner about its successor
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    assert "WARNING" not in done.stderr, done.stderr[-4000:]
    return out


def test_the_site_builds_strict_with_every_page_of_the_nav(site):
    pages = [
        "index.html",
        "api/index.html",
        "results/index.html",
        "benchmarks/index.html",
        "conformance/index.html",
    ]
    guide = sorted(path.stem for path in (REPO / "docs" / "guide").glob("*.md"))
    assert len(guide) >= 11 and all((site / "guide" / name / "index.html").is_file() for name in guide)
    assert all((site / page).is_file() for page in pages)


def test_the_api_reference_renders_every_public_name_from_its_docstring(site):
    html = (site / "api" / "index.html").read_text()
    headings = re.findall(r'class="doc doc-heading">\s*([^<]+?)\s*<', html)
    shown = {name.strip() for heading in headings for name in heading.split(",")}
    assert [name for name in dl.__all__ if f"dl.{name}" not in shown] == []
    assert "&gt;&gt;&gt; " in html and "<blockquote>" not in html  # doctest lines as code, not nested quotes


def test_the_models_page_shows_the_readme_table_and_the_benchmarks_their_json(site):
    models = (site / "guide" / "models" / "index.html").read_text()
    rows = model_table_rows()
    assert len(rows) > 10 and all(f"<td><code>{arch}</code></td>" in models for arch in rows)
    benchmarks = (site / "benchmarks" / "index.html").read_text()
    assert "{{ bench:" not in benchmarks and f"loads in {LOAD['best_s']['init_skipped']} s" in benchmarks


def test_a_figure_whose_json_lost_its_key_stops_the_build():
    spec = importlib.util.spec_from_file_location("bench_figures", REPO / "docs" / "hooks" / "bench_figures.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    best, runs = LOAD["best_s"]["init_skipped"], LOAD["load_s"]["init_skipped"]
    assert hook.on_page_markdown("{{ bench: load.json best_s/init_skipped | .1f }} s") == f"{best:.1f} s"
    assert hook.on_page_markdown("{{ bench: load.json load_s/init_skipped }}") == f"{min(runs)}-{max(runs)}"
    with pytest.raises(ValueError, match="has no 'best_s/nothing'"):
        hook.on_page_markdown("{{ bench: load.json best_s/nothing }}")
    with pytest.raises(ValueError, match="which does not exist"):
        hook.on_page_markdown("{{ bench: gone.json x }}")
