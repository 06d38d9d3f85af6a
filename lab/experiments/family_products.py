"""The product-of-reflections probe (probes/products.py) on every finished run of a sweep.

For each cell with a result, opens the run's final checkpoint (RUNS/<cell>-<config hash>/last), draws
held-out traces (eval split, seed 0), and asks of every head whether its per-token product of
reflections applies the action's permutation, whether the product of every token's transition
between consecutive read-outs applies the permutation composed there (span="readout"), and which
head's state holds the variables' values (a linear probe: a model can track the state with
per-token products that are no fixed representation). Writes OUT/products.json, which the
"Per-token products" section of `deltalens reproduce --results OUT/sweep` reads (OUT: the results root).
A run whose checkpoint is gone keeps its row from the products.json already there if that row probed
the same model (same 1x accuracy as the result now): run folders are often deleted after a sweep.

    python3 -m lab.experiments.family_products [--grid lab/grids/family.toml] [--results lab/results/family/grid]
                                       [--runs runs/family] [--out lab/results/family] [--traces 64]
                                       [--state-traces 256]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from deltalens.cli import arguments
from deltalens.core.atomic import write_json_atomic
from deltalens.core.display import progress
from deltalens.grids.grid import config_hash, job_config, load_grid, read_grid
from deltalens.interp.capture import capture
from deltalens.loading.opened import open_checkpoint
from deltalens.probes.linear_probes import linear_probes
from deltalens.probes.products import product_report
from deltalens.training.loop import LAST
from lab.experiments import entry


def probe_run(path: Path, traces: int, state_traces: int) -> dict:
    checkpoint = open_checkpoint(path)
    batch = checkpoint.batch(traces, seed=0)
    with torch.no_grad():
        cap = capture(checkpoint.model, batch, names=("beta", "k"))
    report, between = product_report(cap), product_report(cap, span="readout")
    layer, head = report.tracking_head()
    composed = between.heads.set_index(["layer", "head"]).loc[between.tracking_head()]
    best = report.heads[(report.heads["layer"] == layer) & (report.heads["head"] == head)].iloc[0]
    return {
        "tracking_head": [layer, head],
        "verdict": report.verdict(),
        **{
            key: (bool(best[key]) if key == "implements" else best[key] if key == "acts_as" else float(best[key]))
            for key in (
                "decoded_accuracy",
                "heldout_residual",
                "spectral_agreement",
                "context_spread",
                "implements",
                "acts_as",
                "n_actions",
            )
        },
        "readout_head": list(between.tracking_head()),
        "readout_decoded_accuracy": float(composed["decoded_accuracy"]),
        "readout_heldout_residual": float(composed["heldout_residual"]),
        **state_decoding(checkpoint, state_traces),
        "heads": report.heads.to_dict(orient="records"),
    }


def state_decoding(checkpoint, traces: int) -> dict:
    """The head whose state S_t holds the variables' values best: a linear probe per head and variable
    (probes/linear_probes.py, at the read-out tokens), mean over variables. Whether some head tracks
    the state at all, whatever its per-token products look like."""
    report = linear_probes(checkpoint.model, checkpoint.batch(traces, seed=0), sites=("state",), targets=("value",))
    per_head = report.results.groupby(["layer", "head"])[["accuracy", "control_accuracy"]].mean()
    (layer, head), row = next(per_head.sort_values("accuracy", ascending=False).iterrows())
    return {
        "state_head": [int(layer), int(head)],
        "state_value_accuracy": float(row["accuracy"]),
        "state_value_control": float(row["control_accuracy"]),
    }


def previous_rows(path: Path, sweep: str) -> dict[str, dict]:
    """{cell: row} of an earlier products.json of the same sweep; empty when there is none."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {row["cell"]: row for row in data.get("runs", [])} if data.get("sweep") == sweep else {}


def merge_rows(
    accuracies: dict[str, float | None], probed: dict[str, dict], previous: dict[str, dict]
) -> tuple[list[dict], list[str], list[str]]:
    """(rows in the sweep's order, cells kept from the earlier file, cells with neither) for the cells
    of `accuracies` ({cell: its result's 1x accuracy}): a fresh probe wins; a run without a checkpoint
    keeps its earlier row rather than vanishing from the table, unless that row probed another model
    (a retrained cell: its 1x accuracy differs)."""
    rows, kept, missing = [], [], []
    for name, accuracy in accuracies.items():
        if name in probed:
            rows.append(probed[name])
        elif name in previous and previous[name].get("reveal_accuracy_1x") == accuracy:
            rows.append(previous[name])
            kept.append(name)
        else:
            missing.append(name)
    return rows, kept, missing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default="lab/grids/family.toml")
    parser.add_argument("--results", default="lab/results/family/grid")
    parser.add_argument("--runs", default="runs/family")
    parser.add_argument("--out", default="lab/results/family")
    parser.add_argument(
        "--traces", type=arguments.COUNT, default=64, help="held-out traces per run for the product probe"
    )
    parser.add_argument(
        "--state-traces", type=arguments.COUNT, default=256, help="held-out traces per run for the state probe"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    sweep, statuses, _ = read_grid(load_grid(args.grid), args.results)
    out = Path(args.out) / "products.json"
    previous = previous_rows(out, args.grid)
    probed, accuracies = {}, {}
    for status in progress([s for s in statuses if s.result is not None], desc="products", unit="run"):
        cell = status.cell
        accuracy = {row["x_train"]: row.get("reveal_accuracy") for row in status.result["eval"]["lengths"]}
        accuracies[cell.name] = accuracy.get(1.0)
        path = Path(args.runs) / f"{cell.name}-{config_hash(job_config(cell, sweep))}" / LAST
        if not path.is_dir():
            continue
        probed[cell.name] = {
            "cell": cell.name,
            "group": cell.group,
            "arch": cell.arch,
            "seed": cell.seed,
            "reveal_accuracy_1x": accuracy.get(1.0),
            **probe_run(path, args.traces, args.state_traces),
        }
    rows, kept, missing = merge_rows(accuracies, probed, previous)
    write_json_atomic(out, {"sweep": args.grid, "traces": args.traces, "runs": rows, "missing_checkpoints": missing})
    print(
        f"{len(probed)} runs probed -> {out}"
        + (f"; {len(kept)} kept from the earlier file (no checkpoint now)" if kept else "")
        + (f"; no checkpoint and no earlier row for {missing}" if missing else "")
    )


if __name__ == "__main__":
    entry.run(main)
