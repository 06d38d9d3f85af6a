"""`deltalens probe CKPT [--json] [--n-traces N]`: eigenvalues, state subspaces and linear probes per head.

For a DeltaNet checkpoint: one row per (layer, head) with the beta / eigenvalue statistics on
action tokens (probes.eigenvalues), the state's effective rank, PCA dimension and action-key span
(probes.subspace) and the linear-probe accuracy of its state (probes.linear_probes), plus the
residual-stream probes per layer and the tracking head (highest reflection fraction). For a
Transformer or LSTM the beta and state parts are skipped with a note saying why, and the
residual-stream probes are still reported.

`probe_summary(model, batch)` is the same report as data (a `ProbeSummary`), for notebooks and the app.
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tasks.errors import DeltalensError

if TYPE_CHECKING:  # pandas loads on first use: every CLI start imports this module
    import pandas as pd

HEAD_COLUMNS = ("mean_beta_action", "neg_eig_fraction", "reflection_fraction", "effective_rank", "pca_dim_90",
                "pca_dim_99", "key_rank", "key_dim_90", "probe_accuracy_value", "probe_accuracy_source")


@dataclass
class ProbeSummary:
    architecture: str
    n_traces: int
    heads: pd.DataFrame  # one row per (layer, head); empty without beta / state
    layers: pd.DataFrame  # residual-stream probes: site, layer, target, accuracy, control_accuracy, chance
    tracking_head: tuple[int, int] | None = None
    skipped: list[str] = field(default_factory=list)  # what was not measured, and why
    reports: dict[str, Any] = field(default_factory=dict)  # the full reports: eigenvalues, subspace, probes

    def to_dict(self) -> dict[str, Any]:
        def clean(rows):
            return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
                    for row in rows]

        heads = clean(self.heads.to_dict(orient="records"))
        for row in heads:
            row["layer"], row["head"] = int(row["layer"]), int(row["head"])
            # headline probe accuracy: decoding each variable's current value from the head's state
            row["probe_accuracy"] = row.get("probe_accuracy_value")
        return {
            "architecture": self.architecture, "n_traces": self.n_traces,
            "tracking_head": None if self.tracking_head is None else
            {"layer": self.tracking_head[0], "head": self.tracking_head[1]},
            "heads": heads, "layers": clean(self.layers.to_dict(orient="records")), "skipped": self.skipped,
        }


def probe_summary(model, batch, probes: bool = True, probe_at: str = "readout", seed: int = 0) -> ProbeSummary:
    """Every per-head measurement of this issue on one batch of held-out traces."""
    import pandas as pd

    from interp.capture import ARTICLE, architecture_of, capture
    from probes.eigenvalues import eigenvalue_report
    from probes.linear_probes import linear_probes
    from probes.subspace import subspace_report

    arch = architecture_of(model)
    n_traces = int(batch["tokens"].shape[0])
    skipped, reports = [], {}
    heads = pd.DataFrame()
    tracking = None
    if arch == "deltanet":
        cap = capture(model, batch, names=("beta", "k", "state", "resid"))
        eig = eigenvalue_report(cap)
        sub = subspace_report(cap, seed=seed)
        reports.update(eigenvalues=eig, subspace=sub)
        heads = eig.heads.merge(sub.heads, on=["layer", "head"])
        tracking = eig.tracking_head()
    else:
        cap = capture(model, batch, names=("resid",))
        skipped.append(f"eigenvalues and state subspaces: {ARTICLE.get(arch, arch)} has no beta and no matrix "
                       f"state S_t (only DeltaNet does); residual-stream probes only.")
    layers = pd.DataFrame()
    if probes:
        report = linear_probes(cap, at=probe_at, seed=seed)
        reports["probes"] = report
        layers = report.by_layer()
        if not heads.empty:
            heads = heads.merge(report.by_head(), on=["layer", "head"], how="left")
    else:
        skipped.append("linear probes: turned off (--no-probes).")
    return ProbeSummary(architecture=arch, n_traces=n_traces, heads=heads, layers=layers, tracking_head=tracking,
                        skipped=skipped, reports=reports)


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
    parser.add_argument("--n-traces", type=int, default=64, help="held-out traces to measure on (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="trace and probe seed (eval split)")
    parser.add_argument("--actions", type=int, help="actions per trace (default: the checkpoint's eval length)")
    parser.add_argument("--probe-at", default="readout",
                        help="tokens the probes read: readout (before each revealed value, default), all, or a "
                        "token kind (init, action, print, reveal, other)")
    parser.add_argument("--no-probes", action="store_true", help="skip the linear probes (faster)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    import torch

    from interp.capture import open_checkpoint

    if args.n_traces < 2:
        raise DeltalensError("--n-traces must be at least 2 (probes hold out whole traces).")
    checkpoint = open_checkpoint(args.checkpoint)
    batch = checkpoint.batch(args.n_traces, seed=args.seed, actions=args.actions)
    with torch.no_grad():
        summary = probe_summary(checkpoint.model, batch, probes=not args.no_probes, probe_at=args.probe_at,
                                seed=args.seed)
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
        layer, head = summary.tracking_head
        row = summary.heads[(summary.heads["layer"] == layer) & (summary.heads["head"] == head)].iloc[0]
        print(f"tracking head: layer {layer} head {head} (reflection fraction {row['reflection_fraction']:.3f}, "
              f"mean beta on actions {row['mean_beta_action']:.3f})")
    if not summary.layers.empty:
        print("residual-stream probes (mean over variables; control = shuffled labels):")
        print(summary.layers[["site", "target", "accuracy", "control_accuracy", "chance"]]
              .to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    return 0
