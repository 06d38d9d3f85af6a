"""`deltalens probe CKPT [--json] [--n-traces N]`: eigenvalues, state subspaces and linear probes per head.

    deltalens probe CKPT --attribution [--json]                     DLA and attribution patching per head
    deltalens probe CKPT --automaton --layer L --head H [--json]    the head's automaton vs the Cayley graph

The measurements are probes/summary.py's `probe_summary` (the same report as data, for notebooks
and the app); this module parses and prints.
"""

from __future__ import annotations

import json
import sys

from deltalens.cli import arguments
from deltalens.core.errors import DeltalensError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "probe",
        help="per-head beta, transition eigenvalues, state subspace and linear probes of a checkpoint",
        description="Measure every head of a checkpoint on held-out traces: beta and the transition eigenvalue "
        "1 - beta on action tokens (reflection fraction: eigenvalue < -0.9), the state's effective rank and PCA "
        "dimension, the span of the action keys, and linear probes decoding each variable's value from the "
        "residual stream and from each head's state. Non-DeltaNet checkpoints get the residual probes only.",
    )
    parser.add_argument("checkpoint", help="checkpoint directory (model.safetensors + config.json)")
    parser.add_argument(
        "--n-traces", type=arguments.whole(2, 1_000_000), default=64, help="held-out traces to measure on (default 64)"
    )
    parser.add_argument("--seed", type=arguments.SEED, default=0, help="trace and probe seed (eval split)")
    parser.add_argument(
        "--actions", type=arguments.ACTIONS, help="actions per trace (default: the checkpoint's eval length)"
    )
    parser.add_argument(
        "--probe-at",
        default="readout",
        help="tokens the probes read: readout (before each revealed value, default), all, or a "
        "token kind (init, action, print, reveal, other)",
    )
    parser.add_argument("--no-probes", action="store_true", help="skip the linear probes (faster)")
    circuit = parser.add_mutually_exclusive_group()
    circuit.add_argument(
        "--attribution",
        action="store_true",
        help="instead: each head's direct logit attribution and its attribution-patching estimate (z, beta, "
        "state) on clean / value-relabelled trace pairs, ranked",
    )
    circuit.add_argument(
        "--automaton",
        action="store_true",
        help="instead: cluster one head's states (--layer, --head) into an automaton and compare it with the "
        "group's Cayley graph",
    )
    parser.add_argument("--layer", type=arguments.whole(0), help="with --automaton: the head's layer")
    parser.add_argument("--head", type=arguments.whole(0), help="with --automaton: the head")
    parser.add_argument(
        "--delay",
        type=arguments.whole(0, 8),
        help="with --automaton: tokens after each action at which to read its state (default: chosen, 0-3)",
    )
    arguments.add_dtype(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    import torch  # the library loads here, not at module import: `deltalens --help` imports every command

    from deltalens.loading.opened import open_checkpoint
    from deltalens.probes.summary import HEAD_COLUMNS, probe_summary

    if args.n_traces < 2:
        raise DeltalensError("--n-traces must be at least 2 (probes hold out whole traces).")
    if not args.automaton and (args.layer is not None or args.head is not None or args.delay is not None):
        raise DeltalensError("--layer, --head and --delay pick the head for --automaton; add --automaton.")
    checkpoint = open_checkpoint(getattr(args, "folder", None) or args.checkpoint, dtype=args.dtype)
    if args.attribution or args.automaton:
        from deltalens.cli import circuit

        return (circuit.attribution if args.attribution else circuit.automaton)(args, checkpoint)
    batch = checkpoint.batch(args.n_traces, seed=args.seed, actions=args.actions)
    with torch.no_grad():
        summary = probe_summary(
            checkpoint.model, batch, probes=not args.no_probes, probe_at=args.probe_at, seed=args.seed, progress=True
        )
    for reason in summary.skipped:
        if not reason.startswith("linear probes"):
            print(f"deltalens: note: skipped {reason}", file=sys.stderr)
    if args.json:
        print(json.dumps({"checkpoint": args.checkpoint, **summary.to_dict()}))
        return 0
    print(f"{args.checkpoint}  ({summary.architecture}, {summary.n_traces} held-out traces)")
    if not summary.heads.empty:
        columns = [c for c in ("layer", "head", *HEAD_COLUMNS) if c in summary.heads]
        print(summary.heads[columns].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        if "reflection_fraction" not in summary.heads:
            pass  # no eigenvalue report (the note above says why)
        elif summary.tracking_head is None:
            print("tracking head: none (no head reflects on an action token: no eigenvalue below -0.9)")
        else:
            layer, head = summary.tracking_head
            row = summary.heads[(summary.heads["layer"] == layer) & (summary.heads["head"] == head)].iloc[0]
            print(
                f"tracking head: layer {layer} head {head} (reflection fraction {row['reflection_fraction']:.3f}, "
                f"mean beta on actions {row['mean_beta_action']:.3f})"
            )
    if not summary.layers.empty:
        print("residual-stream probes (mean over variables; control = shuffled labels):")
        print(
            summary.layers[["site", "target", "accuracy", "control_accuracy", "majority_rate"]].to_string(
                index=False, float_format=lambda x: f"{x:.3f}"
            )
        )
    return 0
