"""`deltalens eval CKPT [--lengths ...] [--spacing K] [--traces FILE] [--json]`."""

from __future__ import annotations

import json
from pathlib import Path

from deltalens.cli import arguments
from deltalens.core.errors import DeltalensError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="reveal and whole-trace accuracy of a checkpoint on held-out traces",
        description="Score a checkpoint on fresh held-out traces (seeds disjoint from training) at several "
        "lengths, or on traces written elsewhere (--traces). Headline numbers: reveal_accuracy (fraction "
        "of revealed values predicted right) and trace_accuracy (fraction of traces with every reveal right); "
        "across several lengths the headline is the lowest.",
    )
    parser.add_argument("checkpoint", help="checkpoint directory (model.safetensors + config.json)")
    parser.add_argument(
        "--lengths", type=arguments.ACTIONS, nargs="+", help="actions per trace (default: 1x, 2x, 4x training)"
    )
    parser.add_argument(
        "--spacing", type=arguments.ACTIONS, help="reveal every K actions (default: the checkpoint's eval spacing)"
    )
    parser.add_argument("--reveal", choices=["one", "all"], help="print one variable or all (default: as trained)")
    parser.add_argument("--n-traces", type=arguments.COUNT, help="held-out traces per length (default 512)")
    parser.add_argument(
        "--seed", type=arguments.SEED, help="evaluation seed (default 0; eval split: never a training trace)"
    )
    parser.add_argument("--traces", help="score code-format REPL traces from FILE, separated by blank lines")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    from deltalens.training.evaluate import evaluate_checkpoint, evaluate_text_file

    generation = {
        "--lengths": args.lengths,
        "--spacing": args.spacing,
        "--reveal": args.reveal,
        "--n-traces": args.n_traces,
        "--seed": args.seed,
    }
    if args.traces:
        given = [flag for flag, value in generation.items() if value is not None]
        if given:
            raise DeltalensError(f"--traces scores the traces in the file as they are; drop {', '.join(given)}")
        result = evaluate_text_file(args.checkpoint, Path(args.traces))
        report = {"checkpoint": args.checkpoint, "traces_file": args.traces, **result.to_dict()}
    else:
        report = evaluate_checkpoint(
            args.checkpoint,
            lengths=args.lengths,
            spacing=args.spacing,
            n_traces=512 if args.n_traces is None else args.n_traces,
            seed=0 if args.seed is None else args.seed,
            reveal=args.reveal,
            progress=True,
        )
    if args.json:
        print(json.dumps(report))
        return 0
    if args.traces:
        print(
            f"{report['n_traces']} traces from {args.traces}: reveal accuracy {report['reveal_accuracy']:.4f}, "
            f"trace accuracy {report['trace_accuracy']:.4f} ({report['n_reveals']} reveals)"
        )
        return 0
    print(
        f"{args.checkpoint}  (spacing {report['spacing']}, reveal {report['reveal']}, "
        f"{report['n_traces']} traces per length)"
    )
    print(f"{'actions':>8} {'reveal acc':>11} {'trace acc':>10}")
    for row in report["lengths"]:
        print(f"{row['actions']:>8} {row['reveal_accuracy']:>11.4f} {row['trace_accuracy']:>10.4f}")
    return 0
