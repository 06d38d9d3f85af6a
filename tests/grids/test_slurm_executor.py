"""The Slurm executor's logic without a Slurm: a fake submitit executor and a fake scheduler.

The ledger, --status, skipping what is queued or running, --cancel, Ctrl-C during a submission,
and a job stopped by a signal resuming where it stopped. The real cluster is in test_slurm_real.py
(`pytest -m slurm`).
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest
from tiny_runs import tiny_sweep

from deltalens.cli.main import main
from deltalens.core.errors import DeltalensError
from deltalens.grids import slurm_executor, slurm_job
from deltalens.grids.grid import load_grid, read_results, run_cell
from deltalens.grids.slurm_executor import (
    SlurmGrid,
    SlurmOptions,
    cancel_grid,
    grid_states,
    parse_mem,
    parse_sbatch,
    parse_time,
)
from deltalens.grids.slurm_job import CellJob
from deltalens.grids.slurm_ledger import LEDGER, Ledger, format_states

TIMING = ("wall_time_s", "eval_wall_time_s", "finished", "train_wall_s")


class FakeHandle:
    def __init__(self, job_id: str, folder: Path):
        self.job_id = job_id
        self.paths = type("Paths", (), {"stdout": folder / f"{job_id}.out", "stderr": folder / f"{job_id}.err"})()


class FakeExecutor:
    """submitit's submit_array: job ids ARRAY_i; with `run`, each job runs here at once."""

    arrays = 0

    def __init__(self, folder: Path, run: bool = False, during=None):
        self.folder, self.run, self.during, self.submitted = folder, run, during, []

    def __call__(self, options, name):  # the executor factory
        return self

    def submit_array(self, jobs):
        FakeExecutor.arrays += 1
        handles = [FakeHandle(f"{100 + FakeExecutor.arrays}_{i}", self.folder) for i in range(len(jobs))]
        if self.during:
            self.during()
        for job in jobs:
            self.submitted.append(job.cell.name)
            if self.run:
                job()
        return handles


class FakeScheduler:
    def __init__(self, states=None):
        self.states_by_id, self.cancelled = dict(states or {}), []

    def states(self, job_ids):
        return {j: self.states_by_id.get(j, "COMPLETED") for j in job_ids}

    def cancel(self, job_ids):
        self.cancelled += job_ids
        self.states_by_id.update(dict.fromkeys(job_ids, "CANCELLED"))


def _sweep(tmp_path, steps=2):
    return load_grid(tiny_sweep(tmp_path, steps=steps))


def _runner(tmp_path, executor, scheduler, wait=False):
    options = SlurmOptions(folder=tmp_path / "slurm", poll_s=0.01)
    return SlurmGrid(options, scheduler=scheduler, executor_factory=executor, wait=wait, log=lambda text: None)


def _by_name(states):
    return {s.name: s for s in states}


def test_submission_writes_the_ledger_and_a_resubmission_skips_queued_and_running(tmp_path):
    sweep = _sweep(tmp_path)
    todo = read_results(sweep, tmp_path / "res")
    executor, scheduler = FakeExecutor(tmp_path), FakeScheduler()
    _runner(tmp_path, executor, scheduler).train_missing(sweep, todo, tmp_path / "runs", tmp_path / "res", False)
    ledger = Ledger.load(tmp_path / "res")
    assert sorted(ledger.jobs) == sorted(c.name for c in sweep.cells)
    ids = [ledger.jobs[c.name].job_id for c in sweep.cells]
    assert len(set(ids)) == 4 and all("_" in j for j in ids)
    assert all(s.short == "queued on Slurm" for s in todo)

    a, b, c, d = (c.name for c in sweep.cells)
    scheduler.states_by_id = {ledger.jobs[a].job_id: "PENDING", ledger.jobs[b].job_id: "RUNNING"}
    scheduler.states_by_id[ledger.jobs[c].job_id] = "FAILED"
    Path(ledger.jobs[c].stderr).write_text("line 1\nTraceback\nRuntimeError: out of memory\n")
    scheduler.states_by_id[ledger.jobs[d].job_id] = "COMPLETED"  # ended, yet no result file
    states = _by_name(grid_states(sweep, tmp_path / "res", scheduler))
    assert [states[n].state for n in (a, b, c, d)] == ["pending", "running", "failed", "failed"]
    assert states[a].job_id == ledger.jobs[a].job_id
    assert "RuntimeError: out of memory" in states[c].detail and "FAILED" in states[c].detail
    table = format_states(list(states.values()))
    assert "1 pending, 1 running, 2 failed" in table and "| RuntimeError: out of memory" in table

    again = FakeExecutor(tmp_path)
    todo = read_results(sweep, tmp_path / "res")
    _runner(tmp_path, again, scheduler).train_missing(sweep, todo, tmp_path / "runs", tmp_path / "res", False)
    assert sorted(again.submitted) == sorted([c, d])  # the queued and the running one are not sent twice
    ledger2 = Ledger.load(tmp_path / "res")
    assert ledger2.jobs[a].job_id == ledger.jobs[a].job_id and ledger2.jobs[c].job_id != ledger.jobs[c].job_id


def test_jobs_that_ran_record_the_results_a_local_run_records(tmp_path):
    sweep = _sweep(tmp_path)
    todo = [s for s in read_results(sweep, tmp_path / "res") if s.cell.arch == "lstm"][:1]
    runner = _runner(tmp_path, FakeExecutor(tmp_path, run=True), FakeScheduler(), wait=True)
    outcome = runner.train_missing(sweep, todo, tmp_path / "runs", tmp_path / "res", False)
    assert (outcome.trained, outcome.failed, outcome.interrupted) == (1, 0, False)
    assert todo[0].result is not None and todo[0].result["steps"] == 2
    local = run_cell(todo[0].cell, sweep, tmp_path / "runs-local", tmp_path / "res-local", progress=False)
    assert _untimed(local) == _untimed(todo[0].result)
    states = _by_name(grid_states(sweep, tmp_path / "res", FakeScheduler()))
    assert states[todo[0].cell.name].state == "done" and states[todo[0].cell.name].job_id


def _untimed(value):
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def test_cancel_stops_only_this_sweeps_queued_and_running_jobs(tmp_path):
    sweep = _sweep(tmp_path)
    todo = read_results(sweep, tmp_path / "res")
    scheduler = FakeScheduler()
    _runner(tmp_path, FakeExecutor(tmp_path), scheduler).train_missing(
        sweep, todo, tmp_path / "runs", tmp_path / "res", False
    )
    ledger = Ledger.load(tmp_path / "res")
    names = [c.name for c in sweep.cells]
    scheduler.states_by_id = {ledger.jobs[names[0]].job_id: "PENDING", ledger.jobs[names[1]].job_id: "RUNNING"}
    # a job of another sweep sharing the results folder is left alone
    data = json.loads(ledger.path.read_text())
    data["jobs"]["other-cell"] = {**data["jobs"][names[0]], "cell": "other-cell", "job_id": "999_0"}
    ledger.path.write_text(json.dumps(data))
    scheduler.states_by_id["999_0"] = "RUNNING"
    cancelled = cancel_grid(sweep, tmp_path / "res", scheduler)
    assert sorted(s.job_id for s in cancelled) == sorted(scheduler.cancelled)
    assert sorted(scheduler.cancelled) == sorted([ledger.jobs[names[0]].job_id, ledger.jobs[names[1]].job_id])
    states = _by_name(grid_states(sweep, tmp_path / "res", scheduler))
    assert states[names[0]].state == states[names[1]].state == "cancelled"
    assert Ledger.load(tmp_path / "res").jobs[names[0]].note == "cancelled"


@pytest.mark.parametrize("other_thread", [False, True])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_kill_during_a_submission_leaves_every_submitted_job_in_the_ledger(tmp_path, signum, other_thread):
    # with another thread alive (a progress bar's monitor, a server), the kernel may hand the signal
    # to that thread: a mask on the main thread alone does not hold it
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait, daemon=True)
    if other_thread:
        helper.start()
    # Ctrl-C's own handler, as in a terminal: a shell starts a background job with SIGINT ignored, and Python
    # then keeps it ignored, so a suite started with `&` would otherwise never see the signal
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    sweep = _sweep(tmp_path)
    todo = read_results(sweep, tmp_path / "res")
    executor = FakeExecutor(tmp_path, during=lambda: os.kill(os.getpid(), signum))
    try:
        outcome = _runner(tmp_path, executor, FakeScheduler()).train_missing(
            sweep, todo, tmp_path / "runs", tmp_path / "res", False
        )
    finally:
        stop.set()
        signal.signal(signal.SIGINT, previous)
    assert outcome.interrupted  # the signal took effect, after the ledger was written
    assert len(executor.submitted) == 4
    assert sorted(Ledger.load(tmp_path / "res").jobs) == sorted(executor.submitted)


def test_a_job_stopped_by_sigterm_resumes_from_its_checkpoint_without_retraining(tmp_path, monkeypatch):
    sweep = _sweep(tmp_path, steps=5)
    cell = next(c for c in sweep.cells if c.arch == "lstm")
    job = CellJob(cell, sweep, tmp_path / "runs", tmp_path / "res")
    lines = []

    def say(text):  # the job's log lines; SIGTERM (scancel) lands right after the first step
        lines.append(text)
        if text.startswith("first_step") and len(lines) < 4:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(slurm_job, "say", say)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(DeltalensError, match="stopped by SIGTERM at step 1"):
        job()
    assert signal.getsignal(signal.SIGTERM) is before
    assert job.saved_step() == 1
    summary = job()  # what `scontrol requeue` runs again
    assert summary == {"cell": cell.name, "steps": 5, "resumed_from": 1}
    assert any(line.startswith(f"first_step cell={cell.name} step=2") for line in lines)  # step 1 not retrained
    local = run_cell(cell, sweep, tmp_path / "runs-local", tmp_path / "res-local", progress=False)
    resumed = json.loads((tmp_path / "res" / f"{cell.name}.json").read_text())
    assert _untimed(resumed) == _untimed(local)


def test_sigusr2_checkpoints_and_hands_the_job_to_submitit_for_requeueing(tmp_path, monkeypatch):
    import submitit  # noqa: F401  (scripts/setup.sh installs it: the [slurm] extra)

    sweep = _sweep(tmp_path, steps=4)
    cell = next(c for c in sweep.cells if c.arch == "lstm")
    job = CellJob(cell, sweep, tmp_path / "runs", tmp_path / "res")
    requeued = []

    def submitit_handler(signum, frame):  # what submitit installs: checkpoint(), requeue, exit
        requeued.append(job.checkpoint())
        raise SystemExit(-1)

    monkeypatch.setattr(
        slurm_job, "say", lambda text: text.startswith("first_step") and os.kill(os.getpid(), signal.SIGUSR2)
    )
    previous = signal.signal(signal.SIGUSR2, submitit_handler)
    try:
        with pytest.raises(SystemExit):
            job()
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert job.saved_step() == 1
    again = requeued[0].function
    assert isinstance(again, CellJob) and again.cell == cell and again.saved_step() == 1


def test_option_parsers():
    assert [parse_time(t) for t in ("90", "1:30:00", "2-00:00", "10:30")] == [90, 90, 2880, 11]
    assert parse_mem("8g") == "8G"
    passed = parse_sbatch(["qos=high", "--exclusive", "account=lab"])
    assert passed == {"qos": "high", "exclusive": True, "account": "lab"}
    for bad, parse in (("soon", parse_time), ("lots", parse_mem), ("=x", lambda t: parse_sbatch([t]))):
        with pytest.raises(DeltalensError):
            parse(bad)


def test_the_sbatch_file_carries_every_option(tmp_path, monkeypatch):
    import submitit  # noqa: F401  (scripts/setup.sh installs it: the [slurm] extra)

    monkeypatch.setattr(slurm_executor.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    options = SlurmOptions(
        folder=tmp_path / "slurm",
        partition="gpu",
        time_min=90,
        cpus_per_run=2,
        gpus_per_run=1,
        mem="8G",
        sbatch={"qos": "high", "exclusive": True},
    )
    executor = slurm_executor.make_executor(options, "deltalens-tiny")
    text = executor._make_submission_file_text("python -m x", "uid")
    for flag in (
        "--partition=gpu",
        "--time=90",
        "--cpus-per-task=2",
        "--gpus-per-node=1",
        "--mem=8G",
        "--requeue",
        "--qos=high",
        "--exclusive",
        "--job-name=deltalens-tiny",
        "--signal=USR2@90",
    ):
        assert f"#SBATCH {flag}" in text, flag


def test_missing_sbatch_and_unwritable_folders_are_one_sentence(tmp_path, monkeypatch, capsys):
    sweep = tiny_sweep(tmp_path)
    argv = ["reproduce", "--grid", str(sweep), "--results", str(tmp_path / "res"), "--runs", str(tmp_path / "runs")]
    argv += ["--out", str(tmp_path / "out"), "--no-progress", "--no-pfsa"]
    assert main([*argv, "--partition", "gpu"]) == 2
    assert "only apply with --executor slurm" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    assert main([*argv, "--executor", "slurm", "--slurm-folder", str(tmp_path / "afile" / "logs")]) == 2
    assert "is not writable" in capsys.readouterr().err
    monkeypatch.setattr(slurm_executor.shutil, "which", lambda tool: None)
    assert main([*argv, "--executor", "slurm"]) == 2
    err = capsys.readouterr().err
    assert "sbatch and srun not found on PATH" in err or "needs submitit" in err
    assert not (tmp_path / "res" / LEDGER).exists()


def test_status_without_a_ledger_lists_every_cell_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("deltalens.cli.reproduce_slurm.scheduler", lambda: None)
    sweep = tiny_sweep(tmp_path)
    code = main(["reproduce", "--grid", str(sweep), "--results", str(tmp_path / "res"), "--status"])
    assert code == 0
    out = capsys.readouterr().out
    assert "4 missing" in out and "s3-lstm-statement-k2-s0" in out
