"""`deltalens intervene CKPT ...`: reveal accuracy under per-head interventions.

    deltalens intervene CKPT --sweep beta-range [--json]     every head's beta [0, 2] -> [0, 1], ranked
    deltalens intervene CKPT --sweep beta-clip               (or beta-reflect, zero-z, mean-z, zero-state, mean-state)
    deltalens intervene CKPT --sweep transition-clip         (or transition-range, write-clip, write-half, eigen-abs)
    deltalens intervene CKPT --layer L --head H --beta-scale 0.5 [--json]
    deltalens intervene CKPT --layer L --head H --beta-range 0 1
    deltalens intervene CKPT --layer L --head H --beta-clip 1                only beta > 1 goes (or --beta-reflect)
    deltalens intervene CKPT --layer L --head H --transition-clip 1          the same in I - beta k k^T only, write kept
    deltalens intervene CKPT --layer L --head H --transition-range 0 1       the transition's range, write kept
    deltalens intervene CKPT --layer L --head H --write-clip 1               the write's beta clipped, transition kept
    deltalens intervene CKPT --layer L --head H --write-scale 0.5            the write beta k v^T only, transition kept
    deltalens intervene CKPT --layer L --head H --eigen-abs                  eigenvalue 1 - beta -> |1 - beta|
    deltalens intervene CKPT --layer L --head H --ablate zero [--site z|state]
    deltalens intervene CKPT --layer L --head H --beta-range 0 1 --factor J   one DeltaProduct factor
    deltalens intervene CKPT --sweep beta-range --factor J   factor J of every head in turn (split sweeps too)
    deltalens intervene CKPT --layer L --head H --gate-range 1 1              no forgetting (gated models)
    deltalens intervene CKPT --patch-grid [--site z|beta|state] [--json]      activation patching, layers x heads

`--json` prints {"baseline": accuracy, "heads": [{"layer", "head", "accuracy", ...}, ...]} for a
sweep and {"baseline", "accuracy", "layer", "head", "intervention", ...} for one head.
"""

from __future__ import annotations

import json

from deltalens.cli import arguments
from deltalens.core.errors import DeltalensError
from deltalens.interp.intervention_kinds import INTERVENTIONS, KINDS, kind

FACTORED_SWEEPS = tuple(name for record in KINDS if record.per_factor for name in record.sweeps)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "intervene",
        help="reveal accuracy when one head's beta is rescaled or a head is ablated (one head, or a sweep)",
        description="Evaluate a checkpoint on held-out traces with an intervention on one head, or on every head in "
        "turn (--sweep). The paper's test: rescaling the tracking head's beta range from [0, 2] to [0, 1] "
        "collapses accuracy while other heads do not matter (--sweep beta-range).",
    )
    parser.add_argument("checkpoint", help="checkpoint directory (model.safetensors + config.json)")
    parser.add_argument("--sweep", choices=INTERVENTIONS, help="apply this intervention to every head in turn")
    parser.add_argument(
        "--patch-grid",
        action="store_true",
        help="activation patching: each head's hook_<site> from clean traces into their value-relabelled twins, "
        "the fraction of the clean answer's logit difference restored (layers x heads)",
    )
    parser.add_argument("--layer", type=arguments.whole(0), help="layer of the head to intervene on")
    parser.add_argument("--head", type=arguments.whole(0), help="head to intervene on")
    what = parser.add_mutually_exclusive_group()
    for record in KINDS:  # one flag per kind of intervention (interp/intervention_kinds.py)
        if record.key == "ablate":
            what.add_argument(record.flag, choices=("zero", "mean"), help=record.changes)
        elif record.cli and not record.settings:
            what.add_argument(record.flag, action="store_true", help=record.changes)
        elif record.cli:
            metavars = tuple(setting.metavar for setting in record.settings)
            many = {"nargs": len(metavars)} if len(metavars) > 1 else {}
            metavar = metavars if many else metavars[0]
            what.add_argument(record.flag, type=arguments.real(), metavar=metavar, help=record.changes, **many)
    parser.add_argument(
        "--factor",
        type=arguments.whole(0),
        metavar="J",
        help="with --beta-*/--transition-*/--write-*/--eigen-abs, --sweep beta-range or a split sweep: only "
        "Householder factor J of a DeltaProduct",
    )
    parser.add_argument(
        "--site",
        choices=("z", "beta", "state"),
        default="z",
        help="what --ablate replaces (z or state) or --patch-grid patches (z, beta or state): the head's read-out z "
        "(default), its write strength beta or its state S_t",
    )
    parser.add_argument("--n-traces", type=arguments.COUNT, default=128, help="held-out traces (default 128)")
    parser.add_argument("--seed", type=arguments.SEED, default=0, help="evaluation seed (eval split)")
    parser.add_argument(
        "--actions", type=arguments.ACTIONS, help="actions per trace (default: the checkpoint's eval length)"
    )
    arguments.add_dtype(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    from deltalens.loading.opened import open_checkpoint

    asked = _asked(args)
    single = asked is not None
    per_factor = asked.per_factor if asked is not None else args.sweep in (None, *FACTORED_SWEEPS)
    if args.factor is not None and not per_factor:
        raise DeltalensError(
            "--factor picks the factor whose beta --beta-*, --transition-*, --write-*, --eigen-abs or "
            f"--sweep {'/'.join(FACTORED_SWEEPS)} changes; use it with one of those."
        )
    if args.patch_grid:
        if args.sweep or single or args.layer is not None or args.head is not None or args.factor is not None:
            raise DeltalensError("--patch-grid patches every head in turn; drop --sweep/--layer/--head/--beta-*.")
        from deltalens.cli import circuit

        return circuit.patch_grid(
            args, open_checkpoint(getattr(args, "folder", None) or args.checkpoint, dtype=args.dtype)
        )
    if args.site == "beta" and args.ablate:
        raise DeltalensError("--ablate replaces the head's z or state; --site beta is for --patch-grid.")
    if args.sweep and (single or args.layer is not None or args.head is not None):
        raise DeltalensError("--sweep applies its intervention to every head; drop --layer/--head/--beta-*/--ablate.")
    if not args.sweep and (args.layer is None or args.head is None):
        raise DeltalensError("say which head: --layer L --head H (or --sweep beta-range for every head).")
    if args.n_traces < 1:
        raise DeltalensError("--n-traces must be at least 1.")
    checkpoint = open_checkpoint(getattr(args, "folder", None) or args.checkpoint, dtype=args.dtype)
    batch = checkpoint.batch(args.n_traces, seed=args.seed, actions=args.actions)
    if args.sweep:
        return _sweep(args, checkpoint.model, batch)
    return _single(args, checkpoint.model, batch, asked)


def _sweep(args, model, batch) -> int:
    from deltalens.interp.head_sweep import sweep

    result = sweep(model, batch, args.sweep, progress=True, factor=args.factor)
    if args.json:
        print(json.dumps({"checkpoint": args.checkpoint, **result.to_dict()}))
        return 0
    print(f"{args.checkpoint}: {result.intervention} on each head, {result.n_traces} held-out traces")
    print(f"baseline reveal accuracy {result.baseline:.4f}")
    print(
        result.frame[["layer", "head", "accuracy", "trace_accuracy", "drop"]].to_string(
            index=False, float_format=lambda x: f"{x:.4f}"
        )
    )
    return 0


def _asked(args):
    """The kind of intervention whose flag was given (None: none was)."""
    for record in KINDS:
        value = getattr(args, record.key.replace("-", "_"), None) if record.cli else None
        if value is not None and value is not False:
            return record
    return None


def _single(args, model, batch, asked) -> int:
    from deltalens.interp.interventions import ablate_head, reveal_accuracy

    record = asked or kind("beta-range")  # the paper's [0, 1] rescale when no kind is asked
    if record.key == "ablate":
        reference = batch if args.ablate == "mean" else None
        iv = ablate_head(model, args.layer, args.head, args.ablate, site=args.site, reference=reference)
    else:
        given = getattr(args, record.key.replace("-", "_")) if asked is not None else None
        numbers = [] if given is None or given is True else given if isinstance(given, list) else [given]
        values = {setting.name: float(x) for setting, x in zip(record.settings, numbers)}
        iv = record.build(model, args.layer, args.head, values, factor=args.factor)
    baseline = reveal_accuracy(model, batch)
    after = reveal_accuracy(model, batch, iv)
    report = {
        "checkpoint": args.checkpoint,
        "layer": args.layer,
        "head": args.head,
        "intervention": iv.label,
        "n_traces": after.n_traces,
        "baseline": baseline.reveal_accuracy,
        "accuracy": after.reveal_accuracy,
        "baseline_trace_accuracy": baseline.trace_accuracy,
        "trace_accuracy": after.trace_accuracy,
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{args.checkpoint}: {iv.label}, {after.n_traces} held-out traces")
    print(
        f"reveal accuracy {baseline.reveal_accuracy:.4f} -> {after.reveal_accuracy:.4f}; "
        f"trace accuracy {baseline.trace_accuracy:.4f} -> {after.trace_accuracy:.4f}"
    )
    return 0
