"""The imports the pages need (torch, transformer_lens, scikit-learn, the library: 5-15 s of CPU on a
2-core machine), done once per server process in a background thread, so that no page's first render
pays them.

`deltalens app` starts the thread with the server (app/serve.py), before any browser connects; Home.py
starts it after drawing the first page when the server was started otherwise (`streamlit run`). A page
that needs a module still being imported waits for that import only (Python's import lock); the first
page (Checkpoints) needs none of them: it draws its list at once and leaves the one section that does
for a rerun once `loading()` says they are in (app/grid_claims.py).
"""

from __future__ import annotations

import importlib
import os
import threading
import time

HEAVY = (  # in the order the pages need them: the Checkpoints page's claims section first, scikit-learn last
    "torch",
    "pandas",
    "plotly.graph_objects",
    "transformer_lens",
    "deltalens.loading.opened",
    "deltalens.training.loop",
    "deltalens.grids.grid",
    "deltalens.reports.claims",
    "deltalens.reports.figures",
    "deltalens.training.evaluate",
    "deltalens.interp.capture",
    "deltalens.interp.head_sweep",
    "deltalens.interp.circuit",
    "deltalens.interp.effective_attention",
    "deltalens.models.lm.transformer",
    "deltalens.probes.eigenvalues",
    "deltalens.probes.products",
    "deltalens.probes.subspace",
    "deltalens.probes.census",
    "deltalens.training.belief_kl",
    "sklearn.linear_model",
    "sklearn.cluster",
    "deltalens.probes.linear_probes",
    "deltalens.probes.automaton",
)
# what the first page (Checkpoints) imports, all light and none through streamlit (which the server's main
# thread is importing then): done before a browser connects, ahead of HEAVY
FIRST_PAGE = (
    "pandas",
    "plotly.graph_objects",
    "deltalens.app.trace_view",
    "deltalens.app.grid_claims",
    "deltalens.loading.listing",
    "deltalens.reports.checkpoint_figures",
    "deltalens.training.history",
    "deltalens.models.families",
)
FIRST_PAGE_WAIT = 10.0  # seconds the server's HEAVY imports wait for a first page to be drawn, then start anyway
SETTLE = 0.5  # seconds more for the server's loop to send the page's last message (torch's import holds the lock)
_lock = threading.Lock()
_thread: threading.Thread | None = None
_first_page = threading.Event()
_drawn_by: threading.Thread | None = None  # the thread that ran the first page
timing: dict[str, float] = {}  # module -> seconds its import took here (the benchmark reports the total)


def one_thread() -> None:
    """One BLAS/OpenMP thread per computation, set before numpy or torch load (Home.py says why: on 2 busy
    cores, two spinning threads made an SVD 90 times slower); an explicit setting is kept."""
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")


def preload(modules: tuple[str, ...] = HEAVY) -> float:
    """Import `modules` (one that fails is left to the page that needs it, which says why); seconds taken."""
    one_thread()
    started = time.perf_counter()
    for name in modules:
        began = time.perf_counter()
        try:
            importlib.import_module(name)
        except Exception:  # a missing optional package: the page that needs it gives its sentence
            continue
        timing[name] = time.perf_counter() - began
    if modules == HEAVY:  # then the C kernels a DeltaNet's first forward would compile (about a second each)
        try:
            from deltalens.models.ops import native

            for kernel in native.unbuilt():
                native.library(kernel)
        except Exception:  # no compiler or a failed build: the torch kernels run, and native says why
            pass
    return time.perf_counter() - started


def first_page_drawn(thread: threading.Thread | None = None) -> None:
    """Home.py's word after each page it ran, with the thread running it: a preload waiting for the first
    page (start_preload's `wait`) goes on once that thread has ended, i.e. the run has been reported done.
    Started at once, torch's import kept the browser's page "running" 2-6 s after its last element."""
    global _drawn_by
    if not _first_page.is_set():
        _drawn_by = thread
    _first_page.set()


def _after_the_first_page(modules: tuple[str, ...], wait: float) -> None:
    preload(FIRST_PAGE)
    if _first_page.wait(wait) and _drawn_by is not None:
        _drawn_by.join(timeout=wait)  # Streamlit's script thread ends after it has queued the run's end
        time.sleep(SETTLE)
    preload(modules)


def start_preload(modules: tuple[str, ...] = HEAVY, wait: float = 0.0) -> bool:
    """Start preload(modules) in a daemon thread, once per process; whether this call started it.

    With `wait` (the server's start, app/serve.py) the thread imports the first page's own light modules
    (FIRST_PAGE), then waits until a first page has been drawn, or `wait` seconds, before `modules`: one
    interpreter lock serves both threads, and a Checkpoints page drawn while torch was importing took 4.8 s
    of wall time instead of 1.9 s (AppTest, load 5 on 2 cores)."""
    global _thread
    with _lock:
        if _thread is not None:
            return False
        one_thread()  # before the thread starts: the caller may import numpy next
        target, args = (_after_the_first_page, (modules, wait)) if wait > 0 else (preload, (modules,))
        _thread = threading.Thread(target=target, args=args, name="deltalens-preload", daemon=True)
        _thread.start()
        return True


def loading(modules: tuple[str, ...]) -> bool:
    """Whether the preload thread is still to finish importing one of `modules` (False when none runs or
    it has ended): a page then draws what needs them on a later rerun instead of waiting here."""
    thread = _thread
    return thread is not None and thread.is_alive() and not all(name in timing for name in modules)
