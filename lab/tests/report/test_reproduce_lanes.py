"""`deltalens reproduce --lanes N`: cells train in parallel processes, Ctrl-C or a kill stops them with their
checkpoints kept, and a crashing lane is its cell's failure only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_runs import TINY_CELLS, reproduce_tiny, tiny_sweep

from deltalens.grids.grid import (
    cell_config,
    load_grid,
)
from deltalens.training.loop import LAST, TRAINER_STATE, RunLock


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state  # a zombie has stopped


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
# 45 s and more each: SIGKILL (no handler runs, the lanes' parent-death signal stops them) in the default run
@pytest.mark.parametrize(
    "how", [pytest.param("Ctrl-C", marks=pytest.mark.slow), pytest.param("SIGTERM", marks=pytest.mark.slow), "SIGKILL"]
)
def test_lanes_stop_with_the_sweep_and_keep_their_checkpoints(tmp_path, how):
    """However the sweep process is stopped, its lanes stop too (saving their last checkpoint):
    an orphaned lane kept training for hours on a locked run folder."""
    tiny_sweep(tmp_path, steps=1_000_000)
    command = [
        sys.executable,
        "-m",
        "deltalens.cli.main",
        "reproduce",
        "--grid",
        str(tmp_path / "tiny.toml"),
        "--results",
        str(tmp_path / "results"),
        "--out",
        str(tmp_path / "reports"),
        "--runs",
        str(tmp_path / "runs"),
        "--no-progress",
        "--no-pfsa",
        "--lanes",
        "2",
    ]
    sweep = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lanes: list[int] = []
    try:
        states = lambda: list((tmp_path / "runs").glob(f"*/{LAST}/{TRAINER_STATE}"))  # noqa: E731
        deadline = time.monotonic() + 120
        while len(states()) < 2 and time.monotonic() < deadline and sweep.poll() is None:
            time.sleep(0.5)
        assert len(states()) == 2, sweep.stderr.read().decode()[-2000:] if sweep.poll() is not None else "no lanes"
        lanes = [int(lock.read_text().split()[1]) for lock in (tmp_path / "runs").glob("*/.lock")]
        assert len(lanes) == 2 and all(_alive(pid) for pid in lanes)
        if how == "Ctrl-C":  # the terminal sends SIGINT to the whole process group
            os.killpg(sweep.pid, signal.SIGINT)
        else:
            os.kill(sweep.pid, getattr(signal, how))
        sweep.wait(timeout=120)
        deadline = time.monotonic() + 60
        while any(_alive(pid) for pid in lanes) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(_alive(pid) for pid in lanes), f"lanes still training after the sweep got {how}"
        if how != "SIGKILL":
            assert sweep.returncode == 130  # stopped as Ctrl-C stops it: the report says what to resume
        steps = [json.loads(state.read_text())["step"] for state in states()]
        assert all(0 < step < 1_000_000 for step in steps)
        # and the run folders are free again: a resumed sweep could take them (no "being written" refusal)
        for run_dir in {state.parent.parent for state in states()}:
            with RunLock(run_dir):
                pass
    finally:  # a failing test leaves no sweep or lane behind
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
        for pid in lanes:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_lanes_train_in_parallel_and_a_crashing_lane_is_that_cells_failure_only(tmp_path, capsys):
    """One sweep in 2 lanes (a lane is a process: ~10 s of imports each, so one test covers both)."""
    from deltalens.grids.grid import config_hash

    sweep = load_grid(tiny_sweep(tmp_path))
    broken = next(c for c in sweep.cells if c.name == "s3-lstm-statement-k1-s0")
    # a trainer state that is not JSON: run_cell raises a plain ValueError inside the worker process
    state = tmp_path / "runs" / f"{broken.name}-{config_hash(cell_config(broken, sweep))}" / LAST / TRAINER_STATE
    state.parent.mkdir(parents=True)
    state.write_text("{not json")
    assert reproduce_tiny(tmp_path, "--lanes", "2") == 1  # the report is written, and the exit code says a run failed
    out = capsys.readouterr()
    assert "trained 3 run(s), 1 failed" in out.out and "1 run(s) failed" in out.err
    assert "s3-lstm-statement-k1-s0: training failed: " in out.err and "trainer_state.json is damaged" in out.err
    finished = [c for c in TINY_CELLS if c != "s3-lstm-statement-k1-s0"]
    results = tmp_path / "results"
    assert sorted(p.name for p in results.iterdir()) == sorted(f"{c}.json" for c in finished)
    records = [json.loads((results / f"{c}.json").read_text()) for c in finished]
    assert all(r["steps"] == 3 and len(r["eval"]["lengths"]) == 3 for r in records)
