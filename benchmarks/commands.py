"""Where users wait at the command line: start-up, `deltalens eval` and `deltalens probe`, before and after.

Prints ONE JSON object. Every figure is measured in this run, each in a fresh Python process:

  startup          `python -c "import deltalens"` and `deltalens --help` (seconds; target < 0.5)
  eval, probe      a shipped DeltaNet checkpoint (default s3-deltanet-neg-statement) with the CLI's
                   defaults (eval: 512 traces at 1x, 2x, 4x; probe: 256 traces), split into
                   import / load / compute seconds, and `first_forward_s` (process start to the end
                   of the first forward of one batch), for
                     before: the chunked torch kernels, plus `import fla`, which opening a DeltaNet
                             checkpoint paid before the fla-free config (issue of the start-up work)
                     after:  today's path (the C kernels, no fla)
                   and `speedup` = before / after of the total.

    python3 benchmarks/commands.py [--checkpoint NAME] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

# One measured job, run in a fresh interpreter: prints {"import_s", "load_s", "compute_s", "first_forward_s"}.
JOB = r"""
import json, sys, time
started = time.perf_counter()
job, name, before = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
import torch
if before:
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import fla  # noqa: F401  (what opening a DeltaNet checkpoint imported before)
from deltalens.models.ops.native import native_kernels
from deltalens.loading.opened import open_checkpoint
from deltalens.loading.evaluate_checkpoint import evaluate_checkpoint
from deltalens.probes.summary import probe_summary
from deltalens.core.display import set_progress
set_progress(False)
imported = time.perf_counter()
with native_kernels(not before):
    checkpoint = open_checkpoint(name)
    loaded = time.perf_counter()
    with torch.no_grad():
        checkpoint.model(checkpoint.batch(64)["tokens"])
    first_forward = time.perf_counter()
    if job == "eval":
        evaluate_checkpoint(name, n_traces=512, seed=0, progress=False)
    else:
        with torch.no_grad():
            probe_summary(checkpoint.model, checkpoint.batch(256, seed=0), seed=0, progress=False)
done = time.perf_counter()
print(json.dumps({"import_s": imported - started, "load_s": loaded - imported,
                  "compute_s": done - loaded,
                  "first_forward_s": first_forward - started}))
"""


def _timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env={**os.environ, "DELTALENS_PROGRESS": "0"})
    return time.perf_counter() - started


def _job(job: str, name: str, before: bool) -> dict:
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", JOB, job, name, "1" if before else "0"], check=True, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    split = json.loads(out.stdout.strip().splitlines()[-1])
    return {**{k: round(v, 2) for k, v in split.items()}, "total_s": round(wall, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="s3-deltanet-neg-statement")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each job (the fastest is kept)")
    args = parser.parse_args()
    deltalens = [sys.executable, "-m", "deltalens.cli.main"]
    out = {
        "benchmark": "commands",
        "checkpoint": args.checkpoint,
        "load_average": os.getloadavg()[0],
        "startup": {
            "import_deltalens_s": round(min(_timed([sys.executable, "-c", "import deltalens"]) for _ in range(3)), 2),
            "deltalens_help_s": round(min(_timed([*deltalens, "--help"]) for _ in range(3)), 2),
        },
    }
    for job in ("eval", "probe"):
        row = {}
        for label, before in (("before", True), ("after", False)):
            runs = [_job(job, args.checkpoint, before) for _ in range(args.repeats)]
            row[label] = min(runs, key=lambda r: r["total_s"])
        row["speedup"] = round(row["before"]["total_s"] / row["after"]["total_s"], 2)
        row["compute_speedup"] = round(row["before"]["compute_s"] / max(row["after"]["compute_s"], 1e-9), 2)
        out[job] = row
    print(json.dumps(out))


if __name__ == "__main__":
    main()
