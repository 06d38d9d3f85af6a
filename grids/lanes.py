"""Training cells in parallel worker processes ("lanes") that never outlive the sweep.

A lane trains one cell at a time. However the sweep process stops, its lanes stop the way Ctrl-C
stops a training (after the current optimiser step, saving the last checkpoint), so the next
`deltalens reproduce` resumes them:

* Ctrl-C reaches every process of the terminal's group: each lane saves and stops;
* SIGTERM (`kill PID`) reaches the sweep process only: it passes an interrupt on to its lanes;
* SIGKILL, or any other death of the sweep process: on Linux each lane asked the kernel at start
  (prctl PR_SET_PDEATHSIG) for an interrupt when its parent dies; and a watchdog thread in each lane
  ends it outright if it is still there GRACE_S seconds after its parent died (elsewhere it sends the
  interrupt itself first), so no lane can outlive the sweep, whatever it was doing when the signal came.

Without this an orphaned lane kept training for hours, holding its run folder's lock.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import TYPE_CHECKING, Any

from deltalens.core.errors import DeltalensError

if TYPE_CHECKING:  # imported by run_in_lanes when it runs
    from multiprocessing.synchronize import Event

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
GRACE_S = 30.0  # after the sweep's death, time a lane has to save its checkpoint before it is ended


_parent: int | None = None  # in a lane: the sweep process's pid
_stop: Event | None = None  # in a lane: the sweep's "start no more cells" event


def _start_lane(parent: int, stop: Event) -> None:
    """Worker initializer: remember the sweep, and ask for SIGINT when it dies (Linux prctl;
    elsewhere `_guarded` still refuses new cells once the parent is gone)."""
    global _parent, _stop
    _parent, _stop = parent, stop
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGINT)
    if os.getppid() != parent:  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="lane-watchdog").start()


def _watch_parent(parent: int) -> None:
    """Poll for the sweep's death; then interrupt (where no parent-death signal did) and, after the grace
    time, end the lane: an interrupted lane that found no parent to report to must not wait forever."""
    import time

    while os.getppid() == parent:
        time.sleep(0.5)
    if not sys.platform.startswith("linux"):
        os.kill(os.getpid(), signal.SIGINT)
    time.sleep(GRACE_S)
    os._exit(130)


def _guarded(work: Callable[[Any], Any], item: Any) -> Any:
    """Start `item` only while the sweep runs: the executor hands a lane its next cell ahead of
    time, and after an interrupt (or the sweep's death) that cell must not start."""
    if _stop is None:  # _start_lane sets it
        raise DeltalensError("a grid cell runs in a lane that run_in_lanes started; this process is not one")
    if _stop.is_set() or os.getppid() != _parent:
        raise KeyboardInterrupt
    try:
        return work(item)
    except KeyboardInterrupt:
        if os.getppid() != _parent:  # the sweep died: its checkpoint is saved, and nobody waits for this lane
            os._exit(130)
        raise


def _hide_main_script():
    """A spawned lane re-imports the parent's __main__ script unless it has none. The work is a deltalens
    function, importable by name, so the script is not needed; and it may be a dashboard page
    (Streamlit's AppTest, a notebook's kernel) that must not run again in a worker."""
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    if main is not None and script is not None:
        del main.__file__
    return main, script


def _restore_main_script(hidden) -> None:
    main, script = hidden
    if script is not None:
        main.__file__ = script


def run_in_lanes(
    todo: list, lanes: int, work: Callable[[Any], Any], running: list, record: Callable[[Any, Callable[[], Any]], None]
) -> None:
    """`work(item)` for each item of `todo` in `lanes` worker processes; `record(item, result_getter)`
    as each finishes (in the order they finish); `running` holds what is being trained (for the
    caller's report of an interrupt). On Ctrl-C or SIGTERM the items not started are cancelled, the
    running ones are interrupted and waited for (they save their checkpoints), and
    KeyboardInterrupt goes on to the caller."""
    import multiprocessing

    # spawn, not fork: a forked copy of a process that already ran torch can deadlock in OpenMP
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    pool = ProcessPoolExecutor(
        max_workers=lanes, mp_context=context, initializer=_start_lane, initargs=(os.getpid(), stop)
    )
    futures: dict = {}
    recorded: set[int] = set()  # ids of the items whose result (or failure) was recorded

    def on_sigterm(signum, frame) -> None:
        stop.set()
        for process in list((pool._processes or {}).values()):  # the executor keeps no public list
            if process.is_alive() and process.pid is not None:  # a started process has a pid
                os.kill(process.pid, signal.SIGINT)  # what Ctrl-C would have sent them
        raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()  # signal handlers live there only
    previous = signal.signal(signal.SIGTERM, on_sigterm) if main_thread else None
    hidden = _hide_main_script()
    try:
        futures = {pool.submit(_guarded, work, item): item for item in todo}
        running[:] = list(futures.values())[:lanes]
        for future in as_completed(futures):
            record(futures[future], future.result)
            recorded.add(id(futures[future]))
            running[:] = [item for f, item in futures.items() if f.running()]
    except KeyboardInterrupt:
        stop.set()
        running[:] = [
            item
            for f, item in futures.items()
            if f.running() or (f.done() and not f.cancelled() and id(item) not in recorded)
        ]
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        _restore_main_script(hidden)
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    pool.shutdown(wait=True)
