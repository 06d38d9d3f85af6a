"""`deltalens reproduce`: train the paper's sweep (only what is missing) and write the report.

    deltalens reproduce [--sweep sweep/paper.toml] [--results reports/sweep] [--out reports]
                        [--runs runs/sweep] [--only CELL_GLOB ...] [--no-train] [--steps N]

Finished cells are read from their result files (results_dir/<cell>.json, the durable record);
every other cell is trained, evaluated and recorded (training/grid.py), one progress bar over
cells and one per training. Then reports/reproduce.py writes OUT/reproduce.md: a table per
setting, the paper's claims judged from the data, and the figures.
"""
from __future__ import annotations

import sys
from pathlib import Path

from deltalens.cli import arguments


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "reproduce",
        help="train the paper's experiment sweep (what is missing) and write reports/reproduce.md",
        description="Reproduce Siems et al. (2026): train every cell of a sweep file (group x architecture x "
        "reveal spacing x tokenizer) that has no result yet, evaluate it at 1x, 2x and 4x the training length, "
        "and write a markdown report with the paper's claims judged against the measured numbers, plus plotly "
        "figures. Killed runs resume; finished cells are never retrained.",
    )
    parser.add_argument("--sweep", default="sweep/paper.toml", help="sweep file (default sweep/paper.toml)")
    parser.add_argument("--results", default="reports/sweep", help="one JSON per finished cell (default reports/sweep)")
    parser.add_argument("--out", default="reports", help="where reproduce.md and figures/ go (default reports)")
    parser.add_argument("--runs", default="runs/sweep", help="training run directories, resumable (default runs/sweep)")
    parser.add_argument("--only", nargs="+", metavar="CELL_GLOB",
                        help="train only cells whose name matches, e.g. 's3-*-k4' "
                        "(names look like s3-deltanet-neg-statement-k4)")
    parser.add_argument("--no-train", action="store_true", help="write the report from the results that exist")
    parser.add_argument(
        "--steps",
        type=arguments.COUNT,
        help="training budget per cell (default: the sweep file's); results "
        "from another budget count as missing and are replaced",
    )
    parser.add_argument("--checkpoints", default="checkpoints",
                        help="where the PFSA-SR section finds probabilistic checkpoints (default checkpoints)")
    parser.add_argument("--no-pfsa", action="store_true", help="leave out the PFSA-SR section (belief decay and KL)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    parser.set_defaults(func=run)


def run(args) -> int:
    from deltalens.reports.reproduce import write_report
    from deltalens.training.grid import load_sweep, read_results, select_cells, train_missing, with_steps

    sweep = load_sweep(args.sweep)
    if args.steps is not None:
        sweep = with_steps(sweep, args.steps)
    statuses = read_results(sweep, args.results)
    todo = select_cells(statuses, args.only, args.sweep)
    if args.no_train:
        for status in todo:
            status.reason = f"{status.reason} (--no-train)"
        todo = []
    outcome = train_missing(sweep, todo, args.runs, args.results, progress=not args.no_progress)
    report = write_report(sweep, statuses, Path(args.out), None if args.no_pfsa else Path(args.checkpoints))
    done = sum(s.result is not None for s in statuses)
    verdicts = [c.verdict for c in report.claims]
    print(f"trained {outcome.trained} cell(s), {outcome.failed} failed; {done} of {len(statuses)} cells measured")
    print(f"{report.markdown}: claims {verdicts.count('holds')} hold, {verdicts.count('does not hold')} do not hold, "
          f"{verdicts.count('not measured')} not measured")
    for figure in report.figures:
        print(f"  {figure.html}" + (f", {figure.png}" if figure.png else ""))
    if report.png_error:
        print(f"deltalens: warning: {report.png_error}", file=sys.stderr)
    if outcome.interrupted:
        print("deltalens: interrupted; rerun `deltalens reproduce` to resume", file=sys.stderr)
        return 130
    return 0
