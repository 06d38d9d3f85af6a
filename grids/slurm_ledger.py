"""The jobs ledger of a sweep run on Slurm, and the state of each cell read from it.

`results_dir/slurm-jobs.json` sits beside the result files: one entry per submitted cell (its
job id, the config hash it was submitted with, when, and where its logs are). It is rewritten
atomically (core/atomic.py) after every submission, so a reader (or a killed submitter) sees it
before or after a submission, never half of one. The result files stay the record of what is
done; the ledger only says what was sent where, so the scheduler can be asked how it is going:

    done       the result file holds the sweep's config (wherever it ran)
    pending    queued (PENDING, REQUEUED, ...): a resubmission skips it
    running    RUNNING or COMPLETING: a resubmission skips it
    failed     the job ended without a result; `detail` holds the last lines of its log
    cancelled  `deltalens reproduce --cancel` (or scancel) stopped it; a resubmission resumes it
    missing    never submitted, or submitted with another config

Nothing here imports submitit or calls Slurm: the scheduler is passed in (training.slurm_executor's
`SlurmScheduler`, or a fake in the tests).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from deltalens.core.atomic import write_json_atomic
from deltalens.core.errors import DeltalensError
from deltalens.grids.cells import Grid, config_hash, job_config
from deltalens.grids.grid_results import CellStatus

LEDGER = "slurm-jobs.json"
LOG_TAIL_LINES = 12

# Slurm's job states (squeue / sacct) grouped by what they mean for a cell
QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RESIZING", "SUSPENDED", "STOPPED"}
RUNNING = {"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT"}
CANCELLED = {"CANCELLED"}


class Scheduler(Protocol):
    def states(self, job_ids: list[str]) -> dict[str, str]:
        """job id -> Slurm state (PENDING, RUNNING, COMPLETED, FAILED, ...); unknown ids left out."""

    def cancel(self, job_ids: list[str]) -> None: ...


@dataclass
class JobEntry:
    cell: str  # the cell's (or search run's) name
    job_id: str  # Slurm's id, "ARRAY_TASK" for a job of an array
    config: str  # config_hash of the job's TrainConfig when submitted
    submitted: str  # ISO time (UTC)
    stdout: str = ""  # the job's log files (submitit's)
    stderr: str = ""
    note: str = ""  # "cancelled" once --cancel stopped it


@dataclass
class Ledger:
    path: Path
    sweep: str = ""  # the grid file it belongs to
    jobs: dict[str, JobEntry] = field(default_factory=dict)  # cell name -> its latest job

    @classmethod
    def load(cls, results_dir: str | Path) -> Ledger:
        path = Path(results_dir) / LEDGER
        if not path.is_file():
            return cls(path)
        try:
            data = json.loads(path.read_text())
            jobs = {name: JobEntry(**entry) for name, entry in data["jobs"].items()}
            for name, entry in jobs.items():  # every field is text: a null log path is a damaged ledger
                for key, value in vars(entry).items():
                    if not isinstance(value, str):
                        raise TypeError(f"job {name!r} has {key}={value!r}, not text")
            if not isinstance(data.get("sweep", ""), str):
                raise TypeError(f"sweep={data['sweep']!r} is not text")
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as err:
            raise DeltalensError(
                f"{path} is not a jobs ledger ({err}); move it aside to start a new one "
                "(the result files are the record of what is done)"
            ) from None
        return cls(path, data.get("sweep", ""), jobs)

    def save(self) -> None:
        data = {"sweep": self.sweep, "jobs": {name: asdict(entry) for name, entry in self.jobs.items()}}
        write_json_atomic(self.path, data)

    def record(self, entry: JobEntry) -> None:
        self.jobs[entry.cell] = entry


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class CellState:
    name: str
    state: str  # done | pending | running | failed | cancelled | missing | waiting
    job_id: str = ""
    detail: str = ""  # the scheduler's state, the reason it is missing, or the log's last lines


def log_tail(path: str | Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log file ("" when it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - 16384))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def cell_states(
    sweep: Grid,
    statuses: list[CellStatus],
    ledger: Ledger,
    scheduler: Scheduler | None,
    reread: Callable[[], list[CellStatus]] | None = None,
) -> list[CellState]:
    """One state per status (cells and search runs), from the result files, the ledger and the
    scheduler (None: no scheduler to ask, so a job without a result reads as unknown).

    A job that ends between reading its result file and asking the scheduler would read as
    ended without a result; `reread()` reads the statuses again after the scheduler answered."""
    live = [ledger.jobs[s.cell.name] for s in statuses if s.result is None and s.cell.name in ledger.jobs]
    states = scheduler.states([e.job_id for e in live]) if scheduler is not None and live else {}
    if reread is not None and live:
        statuses = reread()
    return [_state(sweep, status, ledger.jobs.get(status.cell.name), states) for status in statuses]


def _state(sweep: Grid, status: CellStatus, entry: JobEntry | None, states: dict[str, str]) -> CellState:
    name = status.cell.name
    if status.result is not None:
        return CellState(name, "done", entry.job_id if entry else "", "result file written")
    if status.short == "waiting for the lr search":
        return CellState(name, "waiting", "", status.short)
    if entry is None:
        return CellState(name, "missing", "", status.short or "not submitted")
    try:
        current = config_hash(job_config(status.cell, sweep))
    except DeltalensError:
        current = ""
    if entry.config != current:
        return CellState(name, "missing", "", f"job {entry.job_id} was submitted with another config")
    slurm = states.get(entry.job_id, "")
    if slurm in QUEUED:
        return CellState(name, "pending", entry.job_id, slurm)
    if slurm in RUNNING:
        return CellState(name, "running", entry.job_id, slurm)
    if entry.note == "cancelled" or slurm in CANCELLED:
        return CellState(name, "cancelled", entry.job_id, f"{slurm or 'cancelled'}; resubmitting resumes it")
    what = f"job {entry.job_id} ended {slurm or '(state unknown)'} without a result"
    tail = log_tail(entry.stderr)
    return CellState(name, "failed", entry.job_id, f"{what}; the log ends:\n{tail}" if tail else what)


def format_states(states: list[CellState]) -> str:
    """A table for the terminal: cell, state, job id, detail (a failure's log lines indented below)."""
    if not states:
        return "no cells"
    width = max(len(s.name) for s in states)
    lines = []
    for s in states:
        first, *rest = (s.detail or "").splitlines() or [""]
        lines.append(f"{s.name:<{width}}  {s.state:<9}  {s.job_id or '-':<12}  {first}".rstrip())
        lines += [f"{'':<{width}}    | {line}" for line in rest]
    counts = {}
    for s in states:
        counts[s.state] = counts.get(s.state, 0) + 1
    lines.append(", ".join(f"{n} {state}" for state, n in counts.items()))
    return "\n".join(lines)
