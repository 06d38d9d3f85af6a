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
    parser.add_argument(
        "checkpoint", help="checkpoint directory (model.safetensors + config.json), or a Hub id org/name[@revision]"
    )
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
    text = parser.add_argument_group(
        "a model with its own tokenizer (tokenizer.json / tokenizer.model)",
        "scored by reveal, by actions since the variable was last shown, beside chance and the last "
        "revealed value; traces default to the checkpoint's task, else S3 swaps, 12 actions, spacing 2",
    )
    text.add_argument("--group", help="permutation group of the traces, e.g. S3, S5, A4")
    text.add_argument("--action-set", help="swaps | cycles | full | generators")
    text.add_argument("--examples", type=arguments.whole(0, 64), help="solved example traces before each query")
    text.add_argument("--names", help="variable names: letters | words | long_names | a comma-separated list")
    text.add_argument("--values", help="value words: digits | words | colors | a comma-separated list")
    arguments.add_dtype(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    if args.group is not None or args.action_set is not None:  # a typo is said before seconds of imports
        from deltalens.tasks.groups import get_action_set, get_group

        task = ((getattr(args.folder, "section", None) or {}).get("task") or {}).get("eval_spec") or {}
        get_action_set(
            get_group(args.group or task.get("group", "S3")), args.action_set or task.get("action_set", "swaps")
        )
    from deltalens.loading.evaluate_checkpoint import evaluate_checkpoint, evaluate_text_file
    from deltalens.loading.opened import open_checkpoint

    if not args.traces:
        opened = open_checkpoint(getattr(args, "folder", None) or args.checkpoint, load_model=False)
        if getattr(opened.tokenizer, "kind", None) == "hf":
            return run_text(args, opened)
    text_only = {"--group": args.group, "--action-set": args.action_set, "--examples": args.examples}
    text_only.update({"--names": args.names, "--values": args.values})
    given = [flag for flag, value in text_only.items() if value is not None]
    if given:
        raise DeltalensError(
            f"{' and '.join(given)} {'changes' if len(given) == 1 else 'change'} the traces of a model with its own "
            f"tokenizer only; {args.checkpoint} reads the traces of the task it was trained on, so drop "
            f"{'it' if len(given) == 1 else 'them'}"
        )

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
        result = evaluate_text_file(args.checkpoint, Path(args.traces), folder=getattr(args, "folder", None))
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
            dtype=args.dtype,
            folder=getattr(args, "folder", None),
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


def run_text(args, opened) -> int:
    """A model with its own tokenizer: reveal accuracy by actions since last shown (training/text_eval.py)."""
    import dataclasses

    from deltalens import models
    from deltalens.models.lm.lens import attach_tokenizer
    from deltalens.models.ops.precision import cast_model
    from deltalens.tasks.groups import get_action_set, get_group
    from deltalens.tasks.text_traces import TextFormat
    from deltalens.tasks.traces import TraceSpec
    from deltalens.training.text_eval import evaluate_since_reveal

    if args.lengths and len(args.lengths) > 1:
        raise DeltalensError("a model with its own tokenizer is scored at one length; give one --lengths value")
    spec = opened.spec
    changes = {
        "group": args.group,
        "action_set": args.action_set,
        "actions": args.lengths[0] if args.lengths else None,
        "spacing": args.spacing,
        "reveal": args.reveal,
    }
    spec = TraceSpec(**{**spec.to_dict(), **{k: v for k, v in changes.items() if v is not None}})
    base = opened.tokenizer.text_format
    fmt = TextFormat(
        names=args.names if args.names is not None else base.names,
        values=args.values if args.values is not None else base.values,
        examples=args.examples if args.examples is not None else base.examples,
    )
    tokenizer = opened.tokenizer.with_format(fmt)
    get_action_set(get_group(spec.group), spec.action_set)  # the group and its actions, before the model loads
    tokenizer.check_spec(spec)
    model = models.load(opened.folder or opened.path, dtype=args.dtype)  # chosen before the load, as on every path
    attach_tokenizer(model, tokenizer)  # its ids must fit the embedding: one sentence, not an IndexError
    if args.dtype != "auto":
        model = cast_model(model, args.dtype)  # a no-op cast that warns where bf16 is slower on this CPU
    report = evaluate_since_reveal(
        model,
        tokenizer,
        spec,
        n_traces=64 if args.n_traces is None else args.n_traces,
        seed=0 if args.seed is None else args.seed,
        progress=True,
    )
    if args.json:
        print(json.dumps({"checkpoint": args.checkpoint, "path": str(opened.path), **dataclasses.asdict(report)}))
        return 0
    print(f"{args.checkpoint}  ({spec.describe()}; {report.tokens_per_reveal:.2f} tokens per revealed value)")
    print(
        f"reveal accuracy {report.reveal_accuracy:.4f} (mean p {report.mean_p:.3f}) on {report.n_reveals} reveals; "
        f"last-revealed-value baseline {report.last_value_baseline:.4f}; chance {report.chance:.4f}"
    )
    print(f"{'since':>6} {'count':>6} {'accuracy':>9} {'mean p':>7} {'last value':>11} {'chance':>7}")
    for row in report.rows:
        print(
            f"{row['actions_since']!s:>6} {row['count']:>6} {row['accuracy']:>9.4f} {row['mean_p']:>7.3f} "
            f"{row['last_value_baseline']:>11.4f} {row['chance']:>7.4f}"
        )
    return 0
