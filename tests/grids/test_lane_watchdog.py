"""A lane whose parent (the sweep) died and that does not stop on the interrupt (here: it ignores SIGINT)
is still ended by its watchdog after the grace time: no lane outlives the sweep."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

# the sweep: starts a lane that ignores interrupts and watches it, prints the lane's pid, then waits to be killed
SWEEP = """
import subprocess, sys
lane = subprocess.Popen([sys.executable, "-c", {lane!r}])
print(lane.pid, flush=True)
import time
time.sleep(600)
"""
LANE = """
import os, signal, time
import deltalens.grids.lanes as lanes
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a lane stuck where no interrupt reaches it
lanes.GRACE_S = 1.0
lanes.threading.Thread(target=lanes._watch_parent, args=(os.getppid(),), daemon=True).start()
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def test_a_lane_that_ignores_the_interrupt_is_ended_after_the_grace_time():
    sweep = subprocess.Popen([sys.executable, "-c", SWEEP.format(lane=LANE)], stdout=subprocess.PIPE, text=True)
    lane = int(sweep.stdout.readline())
    try:
        time.sleep(3)  # the lane has imported and its watchdog runs
        assert _alive(lane)
        sweep.kill()
        sweep.wait()
        deadline = time.monotonic() + 30
        while _alive(lane) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(lane)
    finally:
        if _alive(lane):
            subprocess.run(["kill", "-9", str(lane)])
