"""Grid cells as Slurm jobs through submitit: submit what is missing, wait, cancel, report states.

    deltalens reproduce --executor slurm [--partition P] [--time 60] [--cpus-per-run 1]
        [--gpus-per-run 0] [--mem 4G] [--array-parallelism 64] [--sbatch KEY=VALUE ...]
    deltalens reproduce --status     every cell: done / pending / running / failed, with job ids
    deltalens reproduce --cancel     scancel this sweep's queued and running jobs

Every cell without a result is one task of one job array (`%array_parallelism` run at once);
each runs training.slurm_job's `CellJob`, which calls the `run_cell` a local lane calls, so the
result files and the report are the same wherever a cell ran. The jobs ledger beside the results
(training.slurm_ledger) holds what was submitted; a resubmission skips cells whose job is queued or
running and resumes the others from their run folders. submitit is imported only here, when a
sweep goes to Slurm (`pip install 'deltalens[slurm]'`).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deltalens.core.display import progress as progress_bar
from deltalens.core.errors import DeltalensError
from deltalens.grids.cells import Grid, SearchRun, config_hash, job_config, search_runs
from deltalens.grids.grid import GridOutcome, check_models, check_output_folders
from deltalens.grids.grid_results import CellStatus, read_results, read_search
from deltalens.grids.slurm_job import CellJob
from deltalens.grids.slurm_ledger import (
    CellState,
    JobEntry,
    Ledger,
    Scheduler,
    cell_states,
    now,
)

ACTIVE = ("pending", "running")
SBATCH_TIMEOUT_S = 120  # an sbatch that has not answered by then is stopped (Ctrl-C waits for it till then)
FINISHED = ("done", "failed", "cancelled", "missing")


@dataclass
class SlurmOptions:
    folder: Path  # submitit's pickles and the jobs' logs: on storage every node sees
    partition: str | None = None
    time_min: int = 60  # per job; Slurm sends SIGUSR2 90 s before it and the job requeues itself
    cpus_per_run: int = 1
    gpus_per_run: int = 0
    mem: str | None = None  # Slurm's --mem, e.g. 4G
    array_parallelism: int = 64
    sbatch: dict[str, Any] = field(default_factory=dict)  # more sbatch options, passed through
    max_requeues: int = 3  # time-outs a job may requeue itself after (preemptions do not count)
    poll_s: float = 10.0  # between two looks at the queue while waiting


def parse_time(text: str) -> int:
    """Minutes from Slurm's time formats: MINUTES, H:MM:SS, MM:SS or D-HH[:MM[:SS]]."""
    raw = text.strip()
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", raw)
    if not match:
        raise DeltalensError(f"--time must be minutes or Slurm's H:MM:SS / D-HH:MM, got {text!r}")
    days, a, b, c = match.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        minutes = int(days) * 1440 + int(a) * 60 + int(b or 0) + (int(c or 0) > 0)
    elif c is not None:  # H:MM:SS
        minutes = int(a) * 60 + int(b) + (int(c) > 0)
    elif b is not None:  # MM:SS
        minutes = int(a) + (int(b) > 0)
    else:
        minutes = int(a)
    if minutes < 1:
        raise DeltalensError(f"--time must be at least one minute, got {text!r}")
    return minutes


def parse_mem(text: str) -> str:
    if not re.fullmatch(r"\d+[KMGT]?", text.strip().upper()):
        raise DeltalensError(f"--mem must be Slurm's memory per job such as 4G or 8000M, got {text!r}")
    return text.strip().upper()


def parse_sbatch(items: list[str]) -> dict[str, Any]:
    """`--sbatch qos=high --sbatch exclusive` -> {"qos": "high", "exclusive": True}."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.strip().lstrip("-").partition("=")
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", key):
            raise DeltalensError(f"--sbatch takes KEY=VALUE or a bare flag (e.g. qos=high, exclusive), got {item!r}")
        out[key.replace("_", "-")] = value if sep else True
    return out


def check_writable(folder: Path) -> None:
    """Create `folder` and write a file into it: Slurm would fail the jobs silently (no log) otherwise."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise DeltalensError(
            f"the Slurm log folder {folder} is not writable ({err.strerror or err}); pass --slurm-folder on storage "
            "every node can write"
        ) from None


def make_executor(options: SlurmOptions, name: str):
    """submitit's SlurmExecutor with the options (imported here: submitit is an optional extra)."""
    try:
        import submitit
    except ImportError:
        raise DeltalensError(
            "--executor slurm needs submitit, which is not installed: pip install 'deltalens[slurm]' "
            "(or pip install submitit)"
        ) from None
    missing = [tool for tool in ("sbatch", "srun") if shutil.which(tool) is None]
    if missing:
        raise DeltalensError(
            f"--executor slurm: {' and '.join(missing)} not found on PATH; run on a Slurm login node "
            "(or start a local cluster with scripts/slurm_local.sh)"
        )
    executor = submitit.SlurmExecutor(folder=str(options.folder / "%j"), max_num_timeout=options.max_requeues)
    params: dict[str, Any] = {
        "job_name": name,
        "time": options.time_min,
        "cpus_per_task": options.cpus_per_run,
        "array_parallelism": options.array_parallelism,
        "additional_parameters": {"requeue": True, **options.sbatch},  # preempted jobs go back to the queue
    }
    if options.partition:
        params["partition"] = options.partition
    if options.gpus_per_run:
        params["gpus_per_node"] = options.gpus_per_run
    if options.mem:
        params["mem"] = options.mem
    try:
        executor.update_parameters(**params)
    except ValueError as err:
        raise DeltalensError(f"bad Slurm option: {str(err).splitlines()[0]}") from None
    return executor


@contextmanager
def bounded_sbatch() -> Iterator[None]:
    """Within the block `sbatch` is a shim that stops the real one after SBATCH_TIMEOUT_S (coreutils' timeout;
    --kill-after, since sbatch inherits the held SIGTERM). A PATH entry, because submitit builds its own
    executor for job arrays and runs plain "sbatch" from PATH."""
    real = shutil.which("sbatch")
    if real is None or shutil.which("timeout") is None:
        yield
        return
    with tempfile.TemporaryDirectory(prefix="deltalens-sbatch-") as shim:
        script = Path(shim) / "sbatch"
        script.write_text(f'#!/bin/sh\nexec timeout --kill-after=5 {SBATCH_TIMEOUT_S} {shlex.quote(real)} "$@"\n')
        script.chmod(0o700)
        old = os.environ.get("PATH", "")
        os.environ["PATH"] = shim + os.pathsep + old
        try:
            yield
        finally:
            os.environ["PATH"] = old


def sbatch_failure(err: BaseException) -> str:
    """One sentence for a submission that failed: sbatch's refusal, its silence, or an answer without a job id."""
    text = str(err)
    unclear = re.search(r'Could not make sense of sbatch output "(.*)"', text, re.DOTALL)
    if unclear:
        said = unclear.group(1).strip().splitlines()
        return (
            f"sbatch answered without a job id ({said[-1][:200] if said else 'nothing'!r}), so no job is in the "
            "ledger; check squeue for this grid's jobs before submitting again"
        )
    cause = getattr(err, "__cause__", None)
    if getattr(cause, "returncode", None) in (124, 137, -9) and shutil.which("timeout"):
        return (
            f"sbatch did not answer within {SBATCH_TIMEOUT_S} s and was stopped; check that slurmctld is up "
            "(sinfo), then submit again"
        )
    lines = [line for line in text.splitlines() if line.strip()]
    return f"sbatch refused the jobs: {lines[-1] if lines else type(err).__name__}"


class SlurmScheduler:
    """Asks Slurm about jobs: squeue for what slurmctld still holds, sacct for the rest."""

    def states(self, job_ids: list[str]) -> dict[str, str]:
        wanted, out = set(job_ids), {}
        if not wanted:
            return out
        for line in _run(["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T", "-u", _user()]).splitlines():
            jid, _, state = line.partition("|")
            if jid in wanted:
                out[jid] = state.strip()
        rest = sorted({jid.split("_")[0] for jid in wanted - set(out)})
        if rest:
            for line in _run(["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(rest)]).splitlines():
                jid, _, state = line.partition("|")
                if jid in wanted and jid not in out:
                    out[jid] = state.split()[0] if state.strip() else ""
        return out

    def cancel(self, job_ids: list[str]) -> None:
        if job_ids:
            _run(["scancel", *job_ids], check=True)


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return os.environ.get("USER", "")


def _run(command: list[str], check: bool = False) -> str:
    """A Slurm command's stdout; "" when it fails (sacct without accounting), unless `check`."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        if check:
            raise DeltalensError(f"{command[0]} failed: {err}") from None
        return ""
    if done.returncode and check:
        raise DeltalensError(f"{' '.join(command[:2])} failed: {done.stderr.strip() or done.returncode}")
    return done.stdout if done.returncode == 0 else ""


@contextmanager
def held_signals() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block ends: a job is either submitted and in the ledger,
    or not submitted. Two holds, because either alone leaks: the mask keeps them from sbatch (a
    child inherits it) and from this thread, but the kernel hands a process-wide signal to any
    other thread that does not mask it (a progress bar's monitor, a server) and Python then runs the
    handler in the main thread; so the handlers only note the signal, and the old ones run after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = (signal.SIGINT, signal.SIGTERM)
    caught: list[int] = []
    handlers = {signum: signal.signal(signum, lambda signum, frame: caught.append(signum)) for signum in held}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # pending signals reach the noting handlers
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        if caught:
            _deliver(caught[0], handlers[signal.Signals(caught[0])])  # a handler is given the number


def _deliver(signum: int, handler) -> None:
    """Run what a held signal would have done."""
    if callable(handler):
        handler(signum, None)  # Ctrl-C's default_int_handler raises KeyboardInterrupt here
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """`kill PID` stops the submitter the way Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigterm(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def grid_statuses(sweep: Grid, results_dir: str | Path) -> list[CellStatus]:
    """The search runs' and the cells' statuses (the sweep already `with_choices`)."""
    return read_search(sweep, results_dir) + read_results(sweep, results_dir)


def grid_states(sweep: Grid, results_dir: str | Path, scheduler: Scheduler | None) -> list[CellState]:
    def read() -> list[CellStatus]:
        return grid_statuses(sweep, results_dir)

    return cell_states(sweep, read(), Ledger.load(results_dir), scheduler, reread=read)


@dataclass
class SlurmGrid:
    """`train_missing` for Slurm: the same inputs and outcome as training.grid's, run as jobs."""

    options: SlurmOptions
    scheduler: Scheduler = field(default_factory=SlurmScheduler)
    executor_factory: Callable[[SlurmOptions, str], Any] = make_executor
    wait: bool = True  # wait for the jobs (False: submit and return)
    log: Callable[[str], None] = lambda text: print(f"deltalens: {text}", file=sys.stderr)

    def train_missing(
        self,
        sweep: Grid,
        todo: list[CellStatus],
        runs_dir: str | Path,
        results_dir: str | Path,
        progress: bool = True,
    ) -> GridOutcome:
        outcome = GridOutcome()
        if not todo:
            return outcome
        runs_dir, results_dir = Path(runs_dir).resolve(), Path(results_dir).resolve()
        check_models(sweep, {s.cell.arch for s in todo})
        check_output_folders(todo, runs_dir, results_dir)
        check_writable(self.options.folder)
        with sigterm_as_interrupt():
            try:
                submitted = self.submit(sweep, todo, runs_dir, results_dir)
                if self.wait:
                    self.wait_for(sweep, todo, submitted, results_dir, progress, outcome)
                else:
                    for status in todo:
                        status.short = "queued on Slurm"
                        status.reason = "submitted to Slurm; `deltalens reproduce --status` shows how it goes"
            except KeyboardInterrupt:
                outcome.interrupted = True
                self.log(
                    "interrupted; the submitted jobs keep running on Slurm (`deltalens reproduce --status`, "
                    "`--cancel` to stop them)"
                )
        return outcome

    def submit(self, sweep: Grid, todo: list[CellStatus], runs_dir: Path, results_dir: Path) -> list[CellStatus]:
        """Submit every cell of `todo` whose job is not queued or running, as one array; returns
        the cells now waited for (those submitted and those already on the queue)."""
        ledger = Ledger.load(results_dir)
        ledger.sweep = ledger.sweep or str(sweep.path)
        states = cell_states(sweep, todo, ledger, self.scheduler)
        active = [(status, state) for status, state in zip(todo, states) if state.state in ACTIVE]
        fresh = [status for status, state in zip(todo, states) if state.state not in ACTIVE]
        if active:
            shown = ", ".join(f"{s.cell.name} ({st.job_id} {st.state})" for s, st in active[:4])
            more = f" and {len(active) - 4} more" if len(active) > 4 else ""
            self.log(f"{len(active)} cell(s) already on the queue, not submitted again: {shown}{more}")
        if fresh:
            executor = self.executor_factory(self.options, f"deltalens-{sweep.path.stem}")
            jobs = [CellJob(status.cell, sweep, runs_dir, results_dir) for status in fresh]
            with held_signals():
                try:
                    with bounded_sbatch():  # a hung sbatch holds Ctrl-C and SIGTERM only this long
                        handles = executor.submit_array(jobs)
                except Exception as err:  # sbatch refused, hung or answered without an id: one sentence
                    raise DeltalensError(sbatch_failure(err)) from None
                for status, handle in zip(fresh, handles):
                    ledger.record(
                        JobEntry(
                            cell=status.cell.name,
                            job_id=str(handle.job_id),
                            config=config_hash(job_config(status.cell, sweep)),
                            submitted=now(),
                            stdout=str(handle.paths.stdout),
                            stderr=str(handle.paths.stderr),
                        )
                    )
                ledger.save()
            first, last = handles[0].job_id, handles[-1].job_id
            self.log(f"submitted {len(handles)} job(s) to Slurm: {first}" + (f" .. {last}" if len(handles) > 1 else ""))
        return [status for status, _ in active] + fresh

    def wait_for(
        self,
        sweep: Grid,
        todo: list[CellStatus],
        waited: list[CellStatus],
        results_dir: Path,
        progress: bool,
        outcome: GridOutcome,
    ) -> None:
        """Poll until every waited-for job has ended; then each status of `todo` holds its result
        or why it has none (the failed job's log lines)."""
        names = {s.cell.name for s in waited}
        bar = progress_bar(total=len(names), enabled=progress, desc="slurm", unit="cell")
        try:
            while True:

                def read() -> list[CellStatus]:
                    return [s for s in grid_statuses(sweep, results_dir) if s.cell.name in names]

                ledger = Ledger.load(results_dir)
                states = cell_states(sweep, read(), ledger, self.scheduler, reread=read)
                fresh = {s.cell.name: s for s in read()}
                ended = [s for s in states if s.state in FINISHED]
                bar.n = len(ended)
                counts = {k: sum(s.state == k for s in states) for k in ("pending", "running", "done", "failed")}
                bar.set_postfix_str(", ".join(f"{n} {k}" for k, n in counts.items() if n))
                bar.refresh()
                if len(ended) == len(states):
                    break
                time.sleep(self.options.poll_s)
        finally:
            bar.close()
        by_name = {s.name: s for s in states}
        for status in todo:
            if status.cell.name not in names:
                continue
            state, new = by_name[status.cell.name], fresh[status.cell.name]
            if state.state == "done":
                status.result, status.short, status.reason = new.result, "", ""
                outcome.trained += 1
            else:
                status.short = "training failed" if state.state == "failed" else state.state
                status.reason = f"Slurm job {state.job_id}: {state.detail}"
                outcome.failed += 1
                self.log(f"{status.cell.name}: {status.reason}")


def cancel_grid(sweep: Grid, results_dir: str | Path, scheduler: Scheduler) -> list[CellState]:
    """scancel the queued and running jobs of this sweep's cells (others in the ledger are left alone)."""
    ledger = Ledger.load(results_dir)
    states = grid_states(sweep, results_dir, scheduler)
    active = [s for s in states if s.state in ACTIVE]
    if active:
        with held_signals():
            scheduler.cancel([s.job_id for s in active])
            for s in active:
                ledger.jobs[s.name].note = "cancelled"
            ledger.save()
    return active


def job_names(sweep: Grid) -> list[str]:
    return [r.name for r in search_runs(sweep)] + [c.name for c in sweep.cells]


__all__ = [
    "SearchRun",
    "SlurmOptions",
    "SlurmScheduler",
    "SlurmGrid",
    "cancel_grid",
    "check_writable",
    "job_names",
    "make_executor",
    "parse_mem",
    "parse_sbatch",
    "parse_time",
    "grid_states",
    "grid_statuses",
]
