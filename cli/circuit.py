"""Printing for the circuit flags: `probe --attribution`, `probe --automaton`, `intervene --patch-grid`.

Not a command of its own: cli/probe.py and cli/intervene.py parse the flags and hand over here. The
measurements are interp/circuit.py's and probes/automaton.py's.
"""

from __future__ import annotations

import json

from deltalens.core.errors import DeltalensError


def trace_pair(checkpoint, n_traces: int, seed: int, actions):
    """(clean, corrupt) batches: held-out traces and their twins with the values relabelled."""
    from deltalens.interp.circuit import attribution_sites
    from deltalens.interp.trace_pairs import trace_pair as pair

    if n_traces < 1:
        raise DeltalensError("--n-traces must be at least 1.")
    attribution_sites(checkpoint.model)  # a model without heads is refused before any traces are made
    return pair(checkpoint.model, n_traces, seed=seed, actions=actions, checkpoint=checkpoint)


def attribution(args, checkpoint) -> int:
    from deltalens.interp.circuit import head_attribution

    clean, corrupt = trace_pair(checkpoint, args.n_traces, args.seed, args.actions)
    result = head_attribution(checkpoint.model, clean, corrupt)
    if args.json:
        print(json.dumps({"checkpoint": args.checkpoint, **result.to_dict()}))
        return 0
    print(f"{args.checkpoint}: {result.title()}")
    if result.frame["dla"].isna().all():
        print("(direct logit attribution needs a delta-rule model; only attribution patching is shown)")
    else:
        print(
            f"DLA: each head's direct share of logit[answer] - mean logit[others]; sums within {result.dla_error:.1e}"
        )
    print("ap_<site>: estimated restoration of the clean-minus-corrupt logit difference by patching the head")
    print(result.frame.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    return 0


def automaton(args, checkpoint) -> int:
    from deltalens.interp.capture import capture
    from deltalens.probes.automaton import extract_automaton

    if args.layer is None or args.head is None:
        raise DeltalensError("--automaton reads one head: give --layer L --head H (the tracking head, see `probe`).")
    batch = checkpoint.batch(args.n_traces, seed=args.seed, actions=args.actions)
    cap = capture(checkpoint.model, batch, names=("state",))
    result = extract_automaton(cap, args.layer, args.head, seed=args.seed, delay=args.delay)
    if args.json:
        print(json.dumps({"checkpoint": args.checkpoint, **result.to_dict()}))
        return 0
    print(f"{args.checkpoint}: {result.title()}")
    frame = result.display_frame()
    limit = 60
    print(frame.head(limit).to_string(index=False))
    if len(frame) > limit:
        print(f"... {len(frame) - limit} more transitions (--json prints the summary as data)")
    return 0


def patch_grid(args, checkpoint) -> int:
    from deltalens.interp.circuit import patch_grid as grid_of

    clean, corrupt = trace_pair(checkpoint, args.n_traces, args.seed, args.actions)
    grid = grid_of(checkpoint.model, clean, corrupt, site=args.site, progress=True)
    restored = grid.normalised() if grid.span_ok else None  # a fraction only of a difference above the floor
    if args.json:
        report = {
            "checkpoint": args.checkpoint,
            "site": grid.site,
            "clean_metric": grid.clean,
            "corrupt_metric": grid.corrupt,
            "n_forwards": grid.n_forwards,
            "top": list(grid.top()),
            "standout": grid.summary(),  # names a head only when it stands out, with its sign
            "metric": grid.values.tolist(),  # (layers, heads): the corrupted run's metric with the head patched
            "restored": None if restored is None else restored.tolist(),  # the same, 0 = corrupt, 1 = clean
            "warning": grid.span_sentence(),  # why `restored` is None, else None
        }
        print(json.dumps(report))
        return 0
    layer, head = grid.top()
    print(
        f"{args.checkpoint}: activation patching of hook_{grid.site}, {clean['tokens'].shape[0]} trace pairs, "
        f"{grid.n_forwards} forwards; metric clean {grid.clean:.3f}, corrupt {grid.corrupt:.3f}"
    )
    shown = restored if restored is not None else grid.per_head()
    if restored is None:
        print(f"note: {grid.span_sentence()}")
    print(
        ("fraction of the clean logit difference restored" if restored is not None else "change of the metric")
        + " by patching each head (rows: layers):"
    )
    header = "       " + "".join(f"{f'H{h}':>8}" for h in range(shown.shape[1]))
    print(header)
    for lay in range(shown.shape[0]):
        print(f"{f'L{lay}':>6} " + "".join(f"{float(x):8.3f}" for x in shown[lay]))
    print(grid.summary())
    del layer, head
    return 0
