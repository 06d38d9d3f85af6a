"""`deltalens train CONFIG [table.key=value ...] --out DIR [--resume] [--log tensorboard]`."""

from __future__ import annotations

import json
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a model from a TOML config",
        description="Train a model by next-token prediction on REPL traces, from a TOML config "
        "(tables task, model, optim, run) with table.key=value overrides.",
    )
    parser.add_argument("config", help="TOML config file (e.g. checkpoints/s3-deltanet-neg-statement/train.toml)")
    parser.add_argument("overrides", nargs="*", help="overrides such as run.steps=200 optim.lr=1e-3 task.group=S5")
    parser.add_argument("--out", required=True, help="run directory (its checkpoint is OUT/last)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    parser.add_argument(
        "--export", metavar="DIR", help="when done, write the model, its config and a model card to DIR"
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="let --export overwrite an existing checkpoint folder (e.g. a shipped one)",
    )
    parser.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        help="training precision (run.precision; default fp32): bf16 autocasts the matmuls, the recurrence "
        "and the weights stay fp32 (on CUDA: fla's chunk kernels)",
    )
    parser.add_argument(
        "--log",
        choices=("tensorboard",),
        help="also write the loss, learning rate and held-out accuracy at 1x/2x/4x the training length as "
        "TensorBoard event files in OUT/tensorboard (view: tensorboard --logdir OUT/tensorboard)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--json", action="store_true", help="print the final result as one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    from deltalens.loading.export import check_export_target, export_run
    from deltalens.training.config import dump_toml, load_config
    from deltalens.training.loop import train

    overrides = [*args.overrides, *([f"run.precision={args.precision}"] if args.precision else [])]
    config = load_config(args.config, overrides)
    if args.export:  # before training, not after it
        check_export_target(args.export, args.replace, run_dir=args.out)
    result = train(config, args.out, resume=args.resume, progress=not args.no_progress, log=args.log)
    final = result.history[-1]
    if args.export:
        command = " ".join(
            ["deltalens train", args.config, *overrides, "--out", args.out, "--export", args.export]
            + (["--replace"] if args.replace else [])
        )
        # the shipped train.toml is the config as run, overrides applied, so it retrains alone
        text = Path(args.config).read_text() if not overrides else dump_toml(config)
        report = export_run(args.out, args.export, text, command, replace=args.replace)
        final = {**final, "exported": args.export, "eval": report["lengths"]}
    if args.json:
        print(
            json.dumps(
                {
                    "checkpoint": str(result.checkpoint),
                    "step": result.step,
                    "wall_time_s": round(result.wall_time_s, 1),
                    **final,
                }
            )
        )
    else:
        print(
            f"checkpoint {result.checkpoint}: step {result.step}, {result.wall_time_s:.0f} s, "
            f"held-out reveal accuracy {final['reveal_accuracy']:.4f}"
        )
    return 0
