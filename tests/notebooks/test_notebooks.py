"""The tutorial notebooks run top to bottom in a fresh kernel, print no warnings, and ship clean."""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_the_five_tutorials_ship():
    assert [p.stem[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_saved_without_outputs(path):
    book = nbformat.read(path, as_version=4)
    code = [cell for cell in book.cells if cell.cell_type == "code"]
    assert code and all(cell.outputs == [] and cell.execution_count is None for cell in code)


# 25-55 s each: 03_beliefs and 05_circuit (the quickest, under 30 s) run by default, the others with -m slow
@pytest.mark.parametrize(
    "path",
    [p if p.stem[:2] in ("03", "05") else pytest.param(p, marks=pytest.mark.slow) for p in NOTEBOOKS],
    ids=lambda p: p.stem,
)
def test_notebook_runs_headless(path, tmp_path):
    book = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    # cwd outside the repository: the notebooks load shipped checkpoints by name
    NotebookClient(book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    seconds = time.perf_counter() - started
    errors = [o for c in book.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
    warned = [
        o["text"]
        for c in book.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "stream" and o.name == "stderr" and "Warning" in o["text"]
    ]
    assert warned == []
    print(f"{path.name}: {seconds:.1f} s")
