"""What one Slurm job runs: one sweep cell, trained, evaluated and recorded by `run_cell`, the
same call a local lane makes, so its result file is the one a local run writes.

The job is a submitit checkpointable (it has a `checkpoint()` that returns the job to run again),
and it stops only between optimiser steps, with the finished steps saved:

* SIGUSR2 (Slurm's warning before the time limit, `--signal USR2@90`, or a preemption as
  `scancel --signal USR2` sends it): the training stops at the next step boundary and saves
  `last/`; then submitit's handler calls `checkpoint()` and requeues the job (`scontrol requeue`),
  which resumes from that checkpoint: no finished step is trained twice.
* SIGTERM (`scancel`, or a preemption that requeues the job itself): the same stop and save, then
  the job exits; `scontrol requeue JOB` or the next `deltalens reproduce --executor slurm` resumes it.

Each job writes a few `deltalens-job:` lines to its stderr log (start with the step it resumes
from, first step, stop, done, each with a Unix time): `--status` shows a failure's last lines,
and the overhead per job (submit to start, start to first step) is read from them.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from deltalens.core.errors import DeltalensError
from deltalens.grids.cells import Cell, Grid, SearchRun, config_hash, job_config
from deltalens.grids.grid import run_cell
from deltalens.training.loop import LAST, TRAINER_STATE

MARK = "deltalens-job:"


def say(text: str) -> None:
    print(f"{MARK} {text} time={time.time():.3f}", file=sys.stderr, flush=True)


def job_id() -> str:
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID", "local")


class _StopBetweenSteps:
    """SIGUSR2 and SIGTERM ask the training to stop after its current step, the way Ctrl-C does
    (training.loop's DeferredInterrupt holds SIGINT while it trains); outside a training (the
    evaluation, say) they interrupt at once, which loses nothing: every write is atomic."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> _StopBetweenSteps:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGUSR2, signal.SIGTERM):
                self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.signal is not None:
            return  # Slurm may repeat itself; the first one already asked for the stop
        self.signal = signum
        say(f"caught {signal.Signals(signum).name}: stopping after the current step")
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler) and handler is not signal.default_int_handler:
            handler(signal.SIGINT, frame)  # the training's deferred Ctrl-C
        else:
            raise KeyboardInterrupt

    def __exit__(self, *exc) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


class CellJob:
    """One cell (or search run) as a submitit job; paths must be absolute (the job runs elsewhere)."""

    def __init__(self, cell: Cell | SearchRun, sweep: Grid, runs_dir: str | Path, results_dir: str | Path):
        self.cell, self.sweep = cell, sweep
        self.runs_dir, self.results_dir = str(runs_dir), str(results_dir)

    def state_file(self) -> Path:
        config = job_config(self.cell, self.sweep)
        return Path(self.runs_dir) / f"{self.cell.name}-{config_hash(config)}" / LAST / TRAINER_STATE

    def saved_step(self) -> int:
        try:
            return int(json.loads(self.state_file().read_text())["step"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    def __call__(self) -> dict[str, Any]:
        name, start = self.cell.name, self.saved_step()
        restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
        say(f"start cell={name} job={job_id()} from_step={start} restarts={restarts}")
        first = []

        def on_step(step: int, loss: float) -> None:
            if not first:
                first.append(step)
                say(f"first_step cell={name} step={step}")

        with _StopBetweenSteps() as stop:
            try:
                record = run_cell(
                    self.cell, self.sweep, self.runs_dir, self.results_dir, progress=False, on_step=on_step
                )
            except KeyboardInterrupt:
                if stop.signal is None:
                    raise
                signame = signal.Signals(stop.signal).name
                say(f"stopped cell={name} at_step={self.saved_step()} by={signame} (checkpoint saved)")
                requeue = stop.previous.get(signal.SIGUSR2)
                if stop.signal == signal.SIGUSR2 and callable(requeue):  # SIG_DFL/SIG_IGN are ints
                    requeue(signal.SIGUSR2, None)  # submitit: checkpoint() and `scontrol requeue`, then exit
                raise DeltalensError(
                    f"{name} stopped by {signame} at step {self.saved_step()}; its checkpoint is saved, and "
                    "`scontrol requeue` or `deltalens reproduce --executor slurm` resumes it"
                ) from None
        say(f"done cell={name} steps={record['steps']} resumed_from={start}")
        return {"cell": name, "steps": record["steps"], "resumed_from": start}

    def checkpoint(self, *args: Any, **kwargs: Any):
        """submitit's hook on SIGUSR2: the job to requeue, which resumes from the run folder."""
        from submitit.core.utils import DelayedSubmission

        return DelayedSubmission(CellJob(self.cell, self.sweep, self.runs_dir, self.results_dir))
