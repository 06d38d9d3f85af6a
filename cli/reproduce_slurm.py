"""`deltalens reproduce`'s cluster options: --executor slurm, its sbatch settings, --status, --cancel.

    deltalens reproduce --executor slurm --partition gpu --time 4:00:00 --gpus-per-run 1 --mem 8G
    deltalens reproduce --status          done / pending / running / failed per cell, with job ids
    deltalens reproduce --cancel          scancel this grid's queued and running jobs

The cells run as Slurm jobs through grids/slurm_executor.py; their results land in the same
result files as a local run's, and the rest of `deltalens reproduce` (the search first, then the
cells, then the report) is unchanged.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from deltalens.cli import arguments
from deltalens.core.errors import DeltalensError


def add_arguments(parser) -> None:
    group = parser.add_argument_group("on a cluster (Slurm, through submitit)")
    group.add_argument(
        "--executor",
        choices=("lanes", "slurm"),
        default="lanes",
        help="lanes: local processes (default, see --lanes); slurm: every missing cell one job of a job array",
    )
    group.add_argument("--status", action="store_true", help="list every cell as done/pending/running/failed and stop")
    group.add_argument("--cancel", action="store_true", help="scancel this grid's queued and running jobs and stop")
    group.add_argument("--no-wait", action="store_true", help="submit the jobs and return without waiting for them")
    group.add_argument("--partition", help="Slurm partition (default: the cluster's default)")
    group.add_argument("--time", default="60", help="time limit per job: minutes or H:MM:SS (default 60)")
    group.add_argument("--cpus-per-run", type=arguments.whole(1, 1024), default=1, help="CPUs per job (default 1)")
    group.add_argument(
        "--gpus-per-run", type=arguments.whole(0, 64), default=0, help="GPUs per job (default 0; fla's kernels on one)"
    )
    group.add_argument("--mem", help="memory per job, Slurm's --mem such as 4G (default: the partition's)")
    group.add_argument(
        "--array-parallelism",
        type=arguments.whole(1, 100_000),
        default=64,
        help="jobs of the array running at once (default 64)",
    )
    group.add_argument(
        "--sbatch",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="more sbatch options, passed through (e.g. qos=high account=lab exclusive)",
    )
    group.add_argument(
        "--poll", type=arguments.real(0.1, 3600), default=10.0, help="seconds between looks at the queue (default 10)"
    )
    group.add_argument(
        "--slurm-folder",
        help="submitit's pickles and the jobs' logs, on storage every node sees (default RUNS/slurm)",
    )


def slurm_options(args):
    from deltalens.grids.slurm_executor import SlurmOptions, parse_mem, parse_sbatch, parse_time

    folder = Path(args.slurm_folder) if args.slurm_folder else Path(args.runs) / "slurm"
    return SlurmOptions(
        folder=folder.resolve(),
        partition=args.partition,
        time_min=parse_time(args.time),
        cpus_per_run=args.cpus_per_run,
        gpus_per_run=args.gpus_per_run,
        mem=parse_mem(args.mem) if args.mem else None,
        array_parallelism=args.array_parallelism,
        sbatch=parse_sbatch(args.sbatch),
        poll_s=args.poll,
    )


def check_combination(args) -> None:
    if args.status and args.cancel:
        raise DeltalensError("--status and --cancel are two commands; pass one of them")
    slurm_only = [
        flag
        for flag, used in (
            ("--no-wait", args.no_wait),
            ("--partition", args.partition),
            ("--mem", args.mem),
            ("--sbatch", args.sbatch),
            ("--gpus-per-run", args.gpus_per_run),
            ("--slurm-folder", args.slurm_folder),
        )
        if used
    ]
    if slurm_only and args.executor != "slurm" and not (args.status or args.cancel):
        raise DeltalensError(f"{', '.join(slurm_only)} only apply with --executor slurm")


def trainer(args):
    """A callable with training.grid.train_missing's signature for the chosen executor."""
    from deltalens.grids.grid import train_missing

    if args.executor != "slurm":
        return lambda sweep, todo, runs, results, progress: train_missing(
            sweep, todo, runs, results, progress=progress, lanes=args.lanes
        )
    from deltalens.grids.slurm_executor import SlurmGrid

    runner = SlurmGrid(slurm_options(args), wait=not args.no_wait)
    return runner.train_missing


def scheduler():
    from deltalens.grids.slurm_executor import SlurmScheduler

    return SlurmScheduler() if shutil.which("squeue") else None


def status_or_cancel(args, sweep) -> int:
    """--status or --cancel on the sweep (already `with_choices`); the exit code."""
    from deltalens.grids.slurm_executor import cancel_grid, grid_states
    from deltalens.grids.slurm_ledger import format_states

    if args.cancel:
        if shutil.which("scancel") is None:
            raise DeltalensError("--cancel: scancel not found on PATH; run it where the jobs were submitted")
        cancelled = cancel_grid(sweep, args.results, scheduler())
        ids = ", ".join(s.job_id for s in cancelled)
        print(f"cancelled {len(cancelled)} job(s)" + (f": {ids}" if ids else ""))
        return 0
    which = scheduler()
    if which is None:
        print("deltalens: note: no squeue here, so queued jobs show as failed or unknown", file=sys.stderr)
    print(format_states(grid_states(sweep, args.results, which)))
    return 0
