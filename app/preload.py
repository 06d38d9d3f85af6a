"""The imports the pages need (torch, transformer_lens, scikit-learn, the library: 5-15 s of CPU on a
2-core machine), done once per server process in a background thread, so that no page's first render
pays them.

`deltalens app` starts the thread with the server (app/serve.py), before any browser connects; Home.py
starts it after drawing the first page when the server was started otherwise (`streamlit run`). A page
that needs a module still being imported waits for that import only (Python's import lock).
"""

from __future__ import annotations

import importlib
import os
import threading
import time

HEAVY = (  # in the order the pages need them: the Checkpoints page's (the first) first, scikit-learn last
    "torch",
    "pandas",
    "plotly.graph_objects",
    "transformer_lens",
    "deltalens.loading.opened",
    "deltalens.training.loop",
    "deltalens.sweeps.grid",
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
_lock = threading.Lock()
_thread: threading.Thread | None = None
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
    return time.perf_counter() - started


def start_preload(modules: tuple[str, ...] = HEAVY) -> bool:
    """Start preload(modules) in a daemon thread, once per process; whether this call started it."""
    global _thread
    with _lock:
        if _thread is not None:
            return False
        one_thread()  # before the thread starts: the caller may import numpy next
        _thread = threading.Thread(target=preload, args=(modules,), name="deltalens-preload", daemon=True)
        _thread.start()
        return True
