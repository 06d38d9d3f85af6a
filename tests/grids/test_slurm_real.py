"""`deltalens reproduce --executor slurm` against a real Slurm (`pytest -m slurm`).

The cluster is scripts/slurm_local.sh's single node on 127.0.0.1 (the fixture starts it when it is
not up; that needs root and apt-get the first time). Run with -s to see the job ids, sacct states,
the steps before and after each interruption, and the overhead per job.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
from tiny_runs import tiny_sweep

from deltalens.cli.main import main
from deltalens.grids.grid import load_grid, read_results, run_cell
from deltalens.grids.slurm_ledger import LEDGER

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[2]
TIMING = ("wall_time_s", "eval_wall_time_s", "finished", "train_wall_s")


def _untimed(value):
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _cluster_up() -> bool:
    if shutil.which("sinfo") is None:
        return False
    done = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True)
    return done.returncode == 0 and any(s.startswith(("idle", "mix", "alloc")) for s in done.stdout.split())


@pytest.fixture(scope="module")
def slurm():
    if not _cluster_up():
        if os.geteuid() != 0:
            pytest.fail("no Slurm here, and only root can start one: run `bash scripts/slurm_local.sh` as root first")
        done = subprocess.run(["bash", str(ROOT / "scripts" / "slurm_local.sh")], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
    assert _cluster_up()


def _sacct(job_ids: list[str]) -> dict[str, dict[str, str]]:
    bases = sorted({j.split("_")[0] for j in job_ids})
    out = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-o", "JobID,State,Submit,Start,End", "-j", ",".join(bases)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = {}
    for line in out.splitlines():
        jid, state, submit, start, end = line.split("|")
        rows[jid] = {"state": state.split()[0], "submit": submit, "start": start, "end": end}
    return {j: rows[j] for j in job_ids if j in rows}


def _marks(log: Path) -> list[dict[str, str]]:
    """The job's `deltalens-job:` lines as dicts (kind, cell, step, ..., time)."""
    found = []
    for line in log.read_text().splitlines() if log.is_file() else []:
        if line.startswith("deltalens-job: "):
            kind, *pairs = line.removeprefix("deltalens-job: ").split()
            found.append({"kind": kind, **dict(p.split("=", 1) for p in pairs if "=" in p)})
    return found


def _argv(tmp_path: Path, sweep: Path, name: str) -> list[str]:
    return [
        "reproduce",
        "--grid",
        str(sweep),
        "--results",
        str(tmp_path / name / "res"),
        "--runs",
        str(tmp_path / name / "runs"),
        "--out",
        str(tmp_path / name / "out"),
        "--no-progress",
        "--no-pfsa",
    ]


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).astimezone().timestamp()


def test_a_sweep_on_slurm_records_what_a_local_run_records(tmp_path, slurm):
    sweep = tiny_sweep(tmp_path, steps=3)
    started = time.time()
    code = main([*_argv(tmp_path, sweep, "slurm"), "--executor", "slurm", "--poll", "1", "--time", "10"])
    slurm_s = time.time() - started
    assert code == 0
    assert main([*_argv(tmp_path, sweep, "local")]) == 0
    ledger = json.loads((tmp_path / "slurm" / "res" / LEDGER).read_text())["jobs"]
    ids = {name: entry["job_id"] for name, entry in ledger.items()}
    assert len(ids) == 4
    states = _sacct(list(ids.values()))
    assert {s["state"] for s in states.values()} == {"COMPLETED"}, states
    for name in ids:
        on_slurm = json.loads((tmp_path / "slurm" / "res" / f"{name}.json").read_text())
        local = json.loads((tmp_path / "local" / "res" / f"{name}.json").read_text())
        assert _untimed(on_slurm) == _untimed(local), name
    print(f"\n4-cell sweep on Slurm: {slurm_s:.0f} s from submit to report")
    for name, jid in ids.items():
        row, marks = states[jid], _marks(Path(ledger[name]["stderr"]))
        begin = next(float(m["time"]) for m in marks if m["kind"] == "start")
        first = next(float(m["time"]) for m in marks if m["kind"] == "first_step")
        queued = _epoch(row["start"]) - _epoch(row["submit"])
        print(
            f"  {name}: job {jid} {row['state']}; submit->start {queued:.0f} s (sacct), "
            f"start->job code {begin - _epoch(row['start']):.1f} s, job code->first step {first - begin:.1f} s; "
            "result equals the local run's (timing fields aside)"
        )


def _wait(predicate, what: str, timeout: float = 300.0, every: float = 0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def _queue_state(jid: str) -> str:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", jid, "-o", "%T"], capture_output=True, text=True).stdout
    return out.strip()


def test_scancel_then_requeue_resumes_from_the_checkpoint(tmp_path, slurm):
    """A preemption (scancel --signal USR2: submitit checkpoints and requeues the job itself), then
    a plain scancel (SIGTERM: checkpoint, exit) and `scontrol requeue`: every restart resumes from
    the step it stopped at, and the result equals an unbroken local run's."""
    sweep_file = tiny_sweep(tmp_path, steps=150)
    cell_name = "s3-lstm-statement-k2-s0"
    argv = [*_argv(tmp_path, sweep_file, "slurm"), "--executor", "slurm", "--no-wait", "--only", cell_name]
    assert main([*argv, "--time", "30"]) == 0  # 30 min: submitit reads a USR2 in the first 20 as a preemption
    entry = json.loads((tmp_path / "slurm" / "res" / LEDGER).read_text())["jobs"][cell_name]
    jid, log = entry["job_id"], Path(entry["stderr"])
    sweep = load_grid(sweep_file)
    cell = next(c for c in sweep.cells if c.name == cell_name)
    state_files = lambda: list((tmp_path / "slurm" / "runs").glob(f"{cell_name}-*/last/trainer_state.json"))  # noqa: E731

    def saved_step() -> int:
        files = state_files()
        try:
            return json.loads(files[0].read_text())["step"] if files else 0
        except (OSError, ValueError):
            return 0

    _wait(lambda: saved_step() >= 10, "the job's 10th step")
    subprocess.run(["scancel", "--signal=USR2", jid], check=True)  # what a preemption sends
    _wait(lambda: len([m for m in _marks(log) if m["kind"] == "start"]) >= 2, "the self-requeued job to start")
    first_stop = next(m for m in _marks(log) if m["kind"] == "stopped")
    _wait(lambda: saved_step() >= int(first_stop["at_step"]) + 10, "ten more steps")
    subprocess.run(["scancel", jid], check=True)
    _wait(lambda: _queue_state(jid).startswith("CANCELLED"), "the job to be cancelled")
    cancelled_at = saved_step()
    subprocess.run(["scontrol", "requeue", jid], check=True)  # eligible again after cred_expire (10 s here)
    _wait(lambda: (tmp_path / "slurm" / "res" / f"{cell_name}.json").is_file(), "the result", timeout=600)
    marks = _marks(log)
    starts = [m for m in marks if m["kind"] == "start"]
    firsts = [m for m in marks if m["kind"] == "first_step"]
    stops = [m for m in marks if m["kind"] == "stopped"]
    assert [s["by"] for s in stops] == ["SIGUSR2", "SIGTERM"]
    assert [int(s["from_step"]) for s in starts] == [0, int(stops[0]["at_step"]), int(stops[1]["at_step"])]
    assert int(stops[1]["at_step"]) == cancelled_at
    # every session trains from the step after the one it resumed: no finished step is trained twice
    assert [int(f["step"]) for f in firsts] == [int(s["from_step"]) + 1 for s in starts]
    done = next(m for m in marks if m["kind"] == "done")
    assert int(done["steps"]) == 150
    on_slurm = json.loads((tmp_path / "slurm" / "res" / f"{cell_name}.json").read_text())
    local = run_cell(cell, sweep, tmp_path / "local-runs", tmp_path / "local-res", progress=False)
    assert _untimed(on_slurm) == _untimed(local)
    assert read_results(sweep, tmp_path / "slurm" / "res")[[c.name for c in sweep.cells].index(cell_name)].result
    sessions = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-D", "-o", "JobID,State,Start,End", "-j", jid], capture_output=True, text=True
    ).stdout.split()
    print(f"\nsacct -D (every session of job {jid}): {sessions}")
    print(
        f"job {jid}: preempted (USR2) at step {stops[0]['at_step']}, requeued itself, resumed at step "
        f"{int(starts[1]['from_step']) + 1}; cancelled (SIGTERM) at step {stops[1]['at_step']}, `scontrol requeue`, "
        f"resumed at step {int(starts[2]['from_step']) + 1}; finished {done['steps']} steps; "
        f"sacct {_sacct([jid])[jid]['state']}; result equals an unbroken local run's"
    )
