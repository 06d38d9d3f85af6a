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
from deltalens.interp.intervention_names import INTERVENTIONS, SPLIT_INTERVENTIONS


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
    what.add_argument("--beta-scale", type=arguments.real(), metavar="F", help="multiply the head's beta by F")
    what.add_argument(
        "--beta-range",
        type=arguments.real(),
        nargs=2,
        metavar=("LO", "HI"),
        help="map the head's beta range onto [LO, HI] (default intervention: 0 1)",
    )
    what.add_argument(
        "--beta-clip",
        type=arguments.real(),
        metavar="HI",
        help="set the head's beta to min(beta, HI): with 1, only its negative eigenvalues go",
    )
    what.add_argument(
        "--beta-reflect",
        action="store_true",
        help="set the head's beta to 2 - beta: each eigenvalue 1 - beta keeps its size and flips its sign",
    )
    what.add_argument(
        "--transition-clip",
        type=arguments.real(),
        metavar="HI",
        help="set beta to min(beta, HI) in the head's transition I - beta k k^T only; its write beta k v^T is kept",
    )
    what.add_argument(
        "--transition-range",
        type=arguments.real(),
        nargs=2,
        metavar=("LO", "HI"),
        help="map the beta range of the head's transition onto [LO, HI]; its write is kept",
    )
    what.add_argument(
        "--write-clip",
        type=arguments.real(),
        metavar="HI",
        help="set beta to min(beta, HI) in the head's write beta k v^T only; its transition is kept",
    )
    what.add_argument(
        "--write-scale",
        type=arguments.real(),
        metavar="F",
        help="multiply the head's write beta k v^T by F; its transition is kept",
    )
    what.add_argument(
        "--eigen-abs",
        action="store_true",
        help="map the head's transition eigenvalue 1 - beta to |1 - beta| (beta -> 1 - |1 - beta|); its write is kept",
    )
    what.add_argument("--ablate", choices=("zero", "mean"), help="ablate the head (see --site)")
    what.add_argument(
        "--gate-range",
        type=arguments.real(),
        nargs=2,
        metavar=("LO", "HI"),
        help="clamp the head's decay alpha_t into [LO, HI] (gated models; 1 1 = no forgetting)",
    )
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

    split = (args.transition_clip, args.transition_range, args.write_clip, args.write_scale)
    single = (
        any(x is not None for x in (args.beta_scale, args.beta_range, args.beta_clip, args.ablate, args.gate_range))
        or any(x is not None for x in split)
        or args.beta_reflect
        or args.eigen_abs
    )
    factored_sweeps = (None, "beta-range", *SPLIT_INTERVENTIONS)
    if args.factor is not None and (args.sweep not in factored_sweeps or args.ablate or args.gate_range):
        raise DeltalensError(
            "--factor picks the factor whose beta --beta-*, --transition-*, --write-*, --eigen-abs, "
            "--sweep beta-range or a split sweep changes; use it with one of those."
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
    return _single(args, checkpoint.model, batch)


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


def _single(args, model, batch) -> int:
    from deltalens.interp.interventions import (
        ablate_head,
        clamp_gate,
        clip_beta,
        reflect_beta,
        rescale_beta,
        reveal_accuracy,
    )

    if args.ablate:
        iv = ablate_head(
            model,
            args.layer,
            args.head,
            args.ablate,
            site=args.site,
            reference=batch if args.ablate == "mean" else None,
        )
    elif args.gate_range is not None:
        iv = clamp_gate(model, args.layer, args.head, *args.gate_range)
    elif args.beta_clip is not None:
        iv = clip_beta(model, args.layer, args.head, hi=args.beta_clip, factor=args.factor)
    elif args.beta_reflect:
        iv = reflect_beta(model, args.layer, args.head, factor=args.factor)
    elif args.beta_scale is not None:
        iv = rescale_beta(model, args.layer, args.head, scale=args.beta_scale, factor=args.factor)
    elif args.beta_range is not None:
        iv = rescale_beta(model, args.layer, args.head, to=tuple(args.beta_range), factor=args.factor)
    else:
        iv = _split(args, model)
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


def _split(args, model):
    """One of the transition-only / write-only interventions, or the paper's [0, 1] rescale when none is asked."""
    from deltalens.interp import split_interventions as split
    from deltalens.interp.interventions import rescale_beta

    layer, head, factor = args.layer, args.head, args.factor
    if args.transition_clip is not None:
        return split.clip_transition(model, layer, head, hi=args.transition_clip, factor=factor)
    if args.transition_range is not None:
        return split.rescale_transition(model, layer, head, to=tuple(args.transition_range), factor=factor)
    if args.write_clip is not None:
        return split.clip_write(model, layer, head, hi=args.write_clip, factor=factor)
    if args.write_scale is not None:
        return split.scale_write(model, layer, head, scale=args.write_scale, factor=factor)
    if args.eigen_abs:
        return split.abs_eigenvalue(model, layer, head, factor=factor)
    return rescale_beta(model, layer, head, to=(0.0, 1.0), factor=factor)
