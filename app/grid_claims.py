"""The Checkpoints page's last section: the paper's claims judged from the sweep's saved results
(lab/results/grid/*.json), with their figures, kept on disk by the files' names and times.

Building it needs the sweep and report rooms, which import torch (the sweep's cells carry training
configs); reading it back from disk needs pandas and plotly only. So the page asks `waiting()` first:
while the server's first seconds are still importing those rooms (app/preload.py) and the section is
not on disk, the page shows everything else at once; once they have loaded, `start_building()` builds
the section in a thread of its own (no page run waits for it, seconds on a busy machine) and a rerun
then reads it from disk.
"""

from __future__ import annotations

import threading
from typing import Any

from deltalens.app import preload
from deltalens.app.disk_cache import cached_result, has_result
from deltalens.app.folder import SHIPPED

REPO = SHIPPED.parent
RESULTS = REPO / "lab" / "results" / "grid"
STEP = "sweep-section"
NEEDS = ("deltalens.grids.grid", "deltalens.reports.claims", "deltalens.reports.figures")  # what build() imports
_starting = threading.Lock()
_building = threading.Lock()  # one build at a time: a page run that needs the section waits for the thread's
_builders: dict[tuple, threading.Thread] = {}


CONTROLS = (
    "matched_budget",
    "sparse_only",
    "transformer_lr",
    "transformer_variants",
)  # control folders under lab/results/


def signature() -> tuple:
    """The grid file's, each result file's and each control result's name and modification time: the
    section's disk key."""
    controls = [p for name in CONTROLS for p in sorted((RESULTS.parent / name).rglob("*.json"))]
    files = [REPO / "lab" / "grids" / "paper.toml", *sorted(RESULTS.glob("*.json")), *controls]
    return tuple((f.name, f.stat().st_mtime_ns) for f in files if f.is_file())


def waiting(key: tuple) -> bool:
    """Whether the page should leave the section for a later rerun: it is not on disk (no earlier server
    kept it), and its imports are still running in the preload thread or start_building's thread is on it."""
    if has_result(STEP, None, repr(key)):
        return False
    builder = _builders.get(key)
    return preload.loading(NEEDS) or (builder is not None and builder.is_alive())


def start_building(key: tuple) -> None:
    """Build the section in a daemon thread, once per key, when its imports are in (a no-op before)."""
    if preload.loading(NEEDS):
        return
    with _starting:
        if key not in _builders:
            _builders[key] = threading.Thread(target=_build_quietly, args=(key,), name="deltalens-claims", daemon=True)
            _builders[key].start()


def _build_quietly(key: tuple) -> None:
    try:
        section(key)
    except Exception:  # the page's own run builds it again and says what is wrong in one sentence
        pass


def section(key: tuple) -> tuple[str, Any, list]:
    """(caption, claims table, figures), from disk or built (then kept): seconds the first time."""
    with _building:
        return cached_result(STEP, None, repr(key), build)


def build() -> tuple[str, Any, list]:
    import pandas as pd

    from deltalens.grids.grid import load_grid, read_grid
    from deltalens.reports.figures import length_figure, spacing_figure
    from deltalens.reports.lab import lab_module

    sweep = load_grid(REPO / "lab" / "grids" / "paper.toml")
    sweep, statuses, _ = read_grid(sweep, RESULTS)
    results = [s.result for s in statuses if s.result is not None]
    # the report's own judge (grid + controls under lab/results/), so the page and lab/results/reproduce.md agree
    claims = lab_module("report.controlled_claims").judged_claims(sweep, statuses, RESULTS.parent)
    caption = (
        f"{len(results)} of {len(sweep.cells)} sweep runs measured ({len(sweep.seeds)} seeds per cell; "
        "lab/results/grid/*.json), the verdicts revised by the controls under lab/results/ (matched budgets, the "
        "Transformer at another lr, the full-action cells): the table `deltalens reproduce` writes to "
        "lab/results/reproduce.md. *not measured*: a cell it needs is still training; *not testable*: its premise "
        "failed (no cell learned, or the model did not learn with dense reveals either)."
    )
    table = pd.DataFrame(
        [{"claim": c.statement, "setting": c.setting, "verdict": c.verdict, "measured": c.evidence} for c in claims]
    )
    shown = [spacing_figure(results, sweep.thresholds), length_figure(results, sweep.thresholds)] if results else []
    return caption, table, shown
