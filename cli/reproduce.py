"""`deltalens reproduce`: train the paper's sweep (only what is missing) and write the report.

    deltalens reproduce [--grid lab/grids/paper.toml] [--results lab/results/grid] [--out lab/results]
                        [--runs runs/grid] [--only CELL_GLOB ...] [--no-train] [--steps N] [--lanes N]
                        [--executor slurm [--partition P --time T ...]] [--status] [--cancel]

Finished runs are read from their result files (results_dir/<cell>.json and results_dir/search/,
the durable record); the learning-rate search runs first (its choices configure the cells), then
every other cell is trained, evaluated and recorded (grids/grid.py), `--lanes` at a time, or
each as a Slurm job with `--executor slurm` (cli/reproduce_slurm.py). Then
lab/experiments/report/reproduce.py writes OUT/reproduce.md: the search, a table per setting with the spread over
seeds, the paper's claims judged from it, wall times, and the figures.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path

from deltalens.cli import arguments, reproduce_slurm
from deltalens.core.errors import DeltalensError


def _add(total, outcome) -> None:
    total.trained += outcome.trained
    total.failed += outcome.failed
    total.interrupted = total.interrupted or outcome.interrupted


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "reproduce",
        help="train the paper's experiment grid (what is missing) and write lab/results/reproduce.md",
        description="Reproduce Siems et al. (2026): train every cell of a grid file (group x architecture x "
        "reveal spacing x tokenizer) that has no result yet, evaluate it at 1x, 2x and 4x the training length, "
        "and write a markdown report with the paper's claims judged against the measured numbers, plus plotly "
        "figures. Killed runs resume; finished cells are never retrained.",
    )
    parser.add_argument("--grid", default="lab/grids/paper.toml", help="grid file (default lab/grids/paper.toml)")
    parser.add_argument("--sweep", dest="grid", help=argparse.SUPPRESS)  # its name before grids were called grids
    parser.add_argument(
        "--results", default="lab/results/grid", help="one JSON per finished cell (default lab/results/grid)"
    )
    parser.add_argument("--out", default="lab/results", help="where reproduce.md and figures/ go (default lab/results)")
    parser.add_argument("--runs", default="runs/grid", help="training run directories, resumable (default runs/grid)")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="CELL_GLOB",
        help="train only runs whose name matches, e.g. 's3-*-k4-*' (cells look like "
        "s3-deltanet-neg-statement-k4-s0, search runs like search-s3-lstm-lr0.001)",
    )
    parser.add_argument(
        "--lanes",
        type=arguments.COUNT,
        default=1,
        help="train this many runs at once, each in its own process with one thread (default 1)",
    )
    parser.add_argument("--no-train", action="store_true", help="write the report from the results that exist")
    parser.add_argument(
        "--steps",
        type=arguments.COUNT,
        help="training budget per cell (default: the grid file's); results "
        "from another budget count as missing and are replaced",
    )
    parser.add_argument(
        "--checkpoints",
        default="checkpoints",
        help="where the PFSA-SR section finds probabilistic checkpoints (default checkpoints)",
    )
    parser.add_argument("--no-pfsa", action="store_true", help="leave out the PFSA-SR section (belief decay and KL)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    reproduce_slurm.add_arguments(parser)
    parser.set_defaults(func=run)


def report_writer():
    """lab.experiments.report.reproduce.write_report from the clone this deltalens runs from (reports/lab.py)."""
    from deltalens.reports.lab import lab_module

    return lab_module("report.reproduce").write_report


def run(args) -> int:
    write_report = report_writer()
    from deltalens.grids.grid import (
        GridOutcome,
        choose_lrs,
        load_grid,
        read_results,
        read_search,
        search_runs,
        select_cells,
        with_choices,
        with_steps,
    )

    reproduce_slurm.check_combination(args)
    sweep = load_grid(args.grid)
    if args.steps is not None:
        sweep = with_steps(sweep, args.steps)
    progress, total, train_missing = not args.no_progress, GridOutcome(), reproduce_slurm.trainer(args)
    names = [r.name for r in search_runs(sweep)] + [c.name for c in sweep.cells]
    if args.only and not any(fnmatch.fnmatchcase(n, g) for n in names for g in args.only):
        raise DeltalensError(
            f"--only {' '.join(args.only)} matches no run of {args.grid}; names look like {', '.join(names[:2])}"
        )
    # the search first: its choices are part of every cell's config
    searches = read_search(sweep, args.results)
    if args.status or args.cancel:
        return reproduce_slurm.status_or_cancel(args, with_choices(sweep, choose_lrs(sweep, searches)))
    todo = select_cells(searches, args.only, args.grid, require_match=False)
    if todo and not args.no_train:
        _add(total, train_missing(sweep, todo, args.runs, args.results, progress))
        searches = read_search(sweep, args.results)
    sweep = with_choices(sweep, choose_lrs(sweep, searches))
    statuses = read_results(sweep, args.results)
    todo = select_cells(statuses, args.only, args.grid, require_match=False)
    waiting = [
        s
        for s in statuses
        if s.short == "waiting for the lr search"
        and (not args.only or any(fnmatch.fnmatchcase(s.cell.name, g) for g in args.only))
    ]
    if waiting and not args.no_train:
        print(
            f"deltalens: note: {len(waiting)} selected cell(s) wait for the learning-rate search of their "
            "architecture; run it first (e.g. --only 'search-*')",
            file=sys.stderr,
        )
    if args.no_train:
        for status in todo:
            status.reason = f"{status.reason} (--no-train)"
        todo = []
    if not total.interrupted:
        _add(total, train_missing(sweep, todo, args.runs, args.results, progress))
    # the controls and later sections belong to the results, not to where the report goes: read them beside
    # --results (lab/results/grid -> the controls under lab/results/), so every --out gets the same report
    report = write_report(
        sweep,
        statuses,
        Path(args.out),
        None if args.no_pfsa else Path(args.checkpoints),
        searches=searches,
        results=Path(args.results).resolve(),
    )
    done = sum(s.result is not None for s in statuses)
    verdicts = [c.verdict for c in report.claims]
    outcome = total
    print(f"trained {outcome.trained} run(s), {outcome.failed} failed; {done} of {len(statuses)} cells measured")
    print(
        f"{report.markdown}: claims {verdicts.count('holds')} hold, {verdicts.count('does not hold')} do not hold, "
        f"{verdicts.count('not measured')} not measured, {verdicts.count('not testable')} not testable"
    )
    for figure in report.figures:
        print(f"  {figure.html}" + (f", {figure.png}" if figure.png else ""))
    if report.png_error:
        print(f"deltalens: warning: {report.png_error}", file=sys.stderr)
    return _exit_code(outcome)


def _exit_code(outcome) -> int:
    """130 when interrupted, 1 when a run failed (the report is written from the others, but a script must not
    read this as success), else 0."""
    if outcome.interrupted:
        print("deltalens: interrupted; rerun `deltalens reproduce` to resume", file=sys.stderr)
        return 130
    if outcome.failed:
        print(f"deltalens: {outcome.failed} run(s) failed (reasons above)", file=sys.stderr)
        return 1
    return 0
