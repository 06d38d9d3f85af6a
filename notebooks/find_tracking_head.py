"""Find the state-tracking head of a trained DeltaNet and show that it carries the task.

    python notebooks/find_tracking_head.py [CHECKPOINT] [--n-traces N]

Default checkpoint: checkpoints/s3-deltanet-neg-statement (DeltaNet, beta in [0, 2], S3 swaps).
Steps, each a call you can make in a notebook:

1. per-head beta and transition eigenvalue 1 - beta on action tokens (probes.eigenvalues): the
   tracking head is the one whose transitions are reflections (eigenvalue < -0.9) most often;
2. that head's state dimensionality (probes.subspace);
3. the paper's test (interp.head_sweep): map each head's beta range [0, 2] -> [0, 1] in turn and
   measure held-out reveal accuracy. Only the tracking head's rescale should collapse it.

Runs in well under a minute on a laptop CPU (most of it is importing torch and fla).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent.parent / "checkpoints" / "s3-deltanet-neg-statement"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", nargs="?", default=str(DEFAULT), help="a DeltaNet checkpoint directory")
    parser.add_argument("--n-traces", type=int, default=64, help="held-out traces (default 64)")
    args = parser.parse_args(argv)

    if not (Path(args.checkpoint) / "model.safetensors").is_file():
        print(
            f"{args.checkpoint} holds no trained model yet (no model.safetensors). Train it with\n"
            f"  deltalens train checkpoints/s3-deltanet-neg-statement/train.toml --out runs/s3 "
            f"--export checkpoints/s3-deltanet-neg-statement\n"
            f"or pass the path of another DeltaNet checkpoint: python {sys.argv[0]} PATH",
            file=sys.stderr,
        )
        return 1

    import torch

    torch.set_num_threads(1)
    from deltalens.core.errors import DeltalensError
    from deltalens.interp.capture import capture
    from deltalens.interp.head_sweep import sweep
    from deltalens.loading.opened import open_checkpoint
    from deltalens.probes.eigenvalues import eigenvalue_report
    from deltalens.probes.subspace import subspace_report

    try:
        checkpoint = open_checkpoint(args.checkpoint)
        batch = checkpoint.batch(args.n_traces)
        cap = capture(checkpoint.model, batch, names=("beta", "k", "state"))
    except DeltalensError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    eig = eigenvalue_report(cap)
    sub = subspace_report(cap)
    heads = eig.heads.merge(sub.heads, on=["layer", "head"])
    print(f"{args.checkpoint}: {args.n_traces} held-out traces of {checkpoint.spec.describe()}\n")
    print("per head, on action tokens (eigenvalue of I - beta k k^T along k is 1 - beta):")
    columns = [
        "layer",
        "head",
        "mean_beta_action",
        "neg_eig_fraction",
        "reflection_fraction",
        "effective_rank",
        "pca_dim_99",
        "key_rank",
        "key_dim_90",
    ]
    print(heads[columns].to_string(index=False, float_format=lambda x: f"{x:.3f}"))

    layer, head = eig.require_tracking_head()
    row = eig.head(layer, head)
    print(
        f"\ntracking head: layer {layer}, head {head}: mean beta on actions {row['mean_beta_action']:.3f}, "
        f"{100 * row['reflection_fraction']:.1f}% of action transitions are reflections (eigenvalue < -0.9)"
    )

    result = sweep(checkpoint.model, batch, "beta-range", progress=False)
    print(f"\nbeta range [0, 2] -> [0, 1] on one head at a time (baseline reveal accuracy {result.baseline:.3f}):")
    for r in result.frame.itertuples():
        mark = "  <- tracking head" if (r.layer, r.head) == (layer, head) else ""
        print(f"  layer {r.layer} head {r.head}: reveal accuracy {r.accuracy:.3f}{mark}")
    others = result.frame[(result.frame["layer"] != layer) | (result.frame["head"] != head)]
    tracked = result.frame[(result.frame["layer"] == layer) & (result.frame["head"] == head)]["accuracy"].iloc[0]
    if len(others):
        print(f"\ntracking head rescaled: {tracked:.3f}; worst other head rescaled: {others['accuracy'].min():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
