"""The family's corrections on the shipped DeltaProduct checkpoints: representation, cycle type, factor ablation.

For each checkpoint (default: the four shipped family checkpoints), on held-out traces (eval split):

1. the per-representation product probe (probes/product_reps.py): per action and between read-outs,
   the head that decodes best in the standard representation and in each 3-dim rotation
   representation of S4 / A5, with the reflections each representation needs and the tracking head's
   decoding by cycle type;
2. reveal accuracy by cycle type (probes/cycle_accuracy.py): one action, then one reveal of a moved
   variable, by the action's cycle type; and the first reveal of the ordinary test traces (k = 4) by
   the number of actions needing more than 2 reflections in the standard representation;
3. one Householder factor ablated at a time: factor j's beta set to 0 (the factor becomes the identity
   and writes nothing) in every layer and head, then per head; test reveal accuracy at k = 4 and the
   single-action accuracy by cycle type under it.

Writes OUT/corrections.json and OUT/corrections.md (the tables).

    python3 -m lab.experiments.family_corrections [--out lab/results/family] [--checkpoints DIR ...]
                                          [--traces 512] [--probe-traces 64] [--single 2048]
    python3 -m lab.experiments.family_corrections --out DIR --checkpoints RUNS/<cell>-<hash>/last   # a training run
    python3 -m lab.experiments.family_corrections --markdown-only     # corrections.md again from corrections.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import torch

from deltalens.cli import arguments
from deltalens.core.atomic import write_json_atomic
from deltalens.core.display import progress
from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import capture
from deltalens.interp.interventions import Intervention, check_factor, rescale_beta
from deltalens.loading.opened import open_checkpoint
from deltalens.probes.cycle_accuracy import position_table, reveal_frame, single_action_table, stretch_table
from deltalens.probes.product_reps import representation_report
from deltalens.probes.products import product_report
from deltalens.training.loop import LAST
from lab.experiments import entry

SHIPPED = (
    "checkpoints/s4-deltaproduct-n3-full",
    "checkpoints/s4-deltaproduct-n3-noconv-full",
    "checkpoints/a5-deltaproduct-n4-full",
    "checkpoints/a5-deltaproduct-n2-noconv-full",
)


BY_TYPE_COLUMNS = ["cycle_type", "reflections", "decoded_accuracy", "median_residual", "n"]


def checkpoint_name(path: Path) -> str:
    """A shipped checkpoint's folder name; for a training run's `last` checkpoint, the run folder's."""
    return path.parent.name if path.name == LAST else path.name


def factor_ablation(model, n_layers: int, n_heads: int, factor: int, head: tuple[int, int] | None = None):
    """beta of Householder factor `factor` times 0 in every layer and head, or in one (layer, head)."""
    if head is not None:
        return rescale_beta(model, head[0], head[1], scale=0.0, factor=factor)
    iv = Intervention(f"factor {factor} off everywhere")
    for layer in range(n_layers):
        iv = iv + rescale_beta(model, layer, None, scale=0.0, factor=factor)
    return iv


def representations_part(checkpoint, traces: int) -> dict:
    batch = checkpoint.batch(traces, seed=0)
    with torch.no_grad():
        cap = capture(checkpoint.model, batch, names=("beta", "k"))
    out = {}
    for span in ("action", "readout"):
        report = representation_report(cap, span=span)
        probe = product_report(cap, span=span)
        tracking = probe.tracking_head()
        verdict = probe.heads.set_index(["layer", "head"]).loc[tracking]
        best = {}
        for rep in dict.fromkeys(report.heads["rep"]):
            row = report.best(rep)
            mine = report.heads[
                (report.heads["rep"] == rep)
                & (report.heads["layer"] == tracking[0])
                & (report.heads["head"] == tracking[1])
            ].iloc[0]
            types = report.by_type[
                (report.by_type["rep"] == rep)
                & (report.by_type["layer"] == tracking[0])
                & (report.by_type["head"] == tracking[1])
            ]
            mine_products = report.products[
                (report.products["rep"] == rep)
                & (report.products["layer"] == tracking[0])
                & (report.products["head"] == tracking[1])
            ]
            # beside each decoded accuracy its median residual: a product can be nearest the right
            # element (decoded) and still far from it (not implementing it)
            by_need = (
                mine_products.groupby("most_reflections_of_an_action")
                .agg(decoded_accuracy=("right", "mean"), median_residual=("residual", "median"), n=("right", "size"))
                .reset_index()
            )
            best[rep] = {
                "max_reflections": int(row["max_reflections"]),
                "best_head": [int(row["layer"]), int(row["head"])],
                "best_decoded": float(row["decoded_accuracy"]),
                "best_residual": float(row["heldout_residual"]),
                "best_applies": bool(row["applies"]),
                "tracking_decoded": float(mine["decoded_accuracy"]),
                "tracking_residual": float(mine["heldout_residual"]),
                "tracking_by_type": types[BY_TYPE_COLUMNS].to_dict("records"),
                "tracking_by_most_reflections": by_need.to_dict("records"),
            }
        out[span] = {
            "tracking_head": list(tracking),
            "product_probe": {  # probes/products.py's own verdict on that head (its best-fitting irrep)
                "rep": verdict["rep"],
                "decoded": float(verdict["decoded_accuracy"]),
                "residual": float(verdict["heldout_residual"]),
                "implements": bool(verdict["implements"]),
            },
            "reps": best,
        }
    return out


def accuracy_part(checkpoint, model, n: int, traces: int, single: int, hooks=(), positions: bool = False) -> dict:
    test = reveal_frame(model, checkpoint.batch(traces, seed=0), hooks)
    one = reveal_frame(model, checkpoint.batch(single, seed=0, actions=1, spacing=1), hooks)
    out = {
        "reveal_accuracy": float(test["correct"].mean()),
        "by_reveal_number": test.groupby("reveal")["correct"].mean().tolist(),
        "single_action": single_action_table(one, n).to_dict("records"),
        "first_reveal": stretch_table(test, n).to_dict("records"),
    }
    if positions:
        out["by_position"] = position_table(test).to_dict("records")
    return out


def probe_checkpoint(path: str, traces: int, probe_traces: int, single: int) -> dict:
    checkpoint = open_checkpoint(path)
    model, n = checkpoint.model, checkpoint.spec.n
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    factors = check_factor(model, None)
    if not factors:
        raise DeltalensError(f"{path} is not a DeltaProduct (no Householder factor axis); the ablation needs one.")
    result = {
        "checkpoint": checkpoint_name(Path(path)),
        "group": checkpoint.spec.group,
        "n_householder": factors,
        "representations": representations_part(checkpoint, probe_traces),
        "accuracy": accuracy_part(checkpoint, model, n, traces, single, positions=True),
        "ablation": [],
        "ablation_per_head": [],
    }
    for j in range(factors):
        iv = factor_ablation(model, n_layers, n_heads, j)
        result["ablation"].append({"factor": j, **accuracy_part(checkpoint, model, n, traces, single, iv)})
    small = checkpoint.batch(traces // 2, seed=0)
    for layer in range(n_layers):
        for head in range(n_heads):
            for j in range(factors):
                iv = factor_ablation(model, n_layers, n_heads, j, (layer, head))
                acc = float(reveal_frame(model, small, iv)["correct"].mean())
                result["ablation_per_head"].append({"layer": layer, "head": head, "factor": j, "reveal_accuracy": acc})
    return result


def _md(frame: pd.DataFrame) -> str:
    def cell(v):
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    head = "| " + " | ".join(frame.columns) + " |\n|" + "---|" * len(frame.columns) + "\n"
    return head + "".join("| " + " | ".join(cell(v) for v in row) + " |\n" for row in frame.itertuples(index=False))


def markdown(results: list[dict]) -> str:
    parts = ["# The family corrected: representations, cycle types, factor ablations\n"]
    parts.append(
        "Written by `python3 -m lab.experiments.family_corrections`; numbers in corrections.json. Residuals are "
        "||P F - F rho(g)|| with ||F|| = 1 under the true element g: a product decodes to the nearest "
        "element, so it can decode right with a large residual (it is nearest g without acting as g).\n"
    )
    rows = []
    for r in results:
        for span in ("action", "readout"):
            for rep, v in r["representations"][span]["reps"].items():
                rows.append(
                    {
                        "checkpoint": r["checkpoint"],
                        "span": span,
                        "rep": rep,
                        "reflections needed (max)": v["max_reflections"],
                        "best head": f"L{v['best_head'][0]}H{v['best_head'][1]}",
                        "decoded": v["best_decoded"],
                        "residual": v["best_residual"],
                        "applies": v["best_applies"],
                    }
                )
    parts.append("## Product probe per representation\n\n" + _md(pd.DataFrame(rows)))
    for r in results:
        lines = []
        for span in ("action", "readout"):
            t = r["representations"][span]["tracking_head"]
            for rep, v in r["representations"][span]["reps"].items():
                for row in v["tracking_by_type"]:
                    lines.append({"span": f"{span} (L{t[0]}H{t[1]})", "rep": rep, **row})
        parts.append(
            f"### {r['checkpoint']}: the tracking head's decoding by cycle type\n\n" + _md(pd.DataFrame(lines))
        )
        needs = []
        for span in ("action", "readout"):
            t = r["representations"][span]["tracking_head"]
            for rep, v in r["representations"][span]["reps"].items():
                for row in v["tracking_by_most_reflections"]:
                    needs.append({"span": f"{span} (L{t[0]}H{t[1]})", "rep": rep, **row})
        parts.append(
            "By the most reflections (in that representation) any action of the product needs:\n\n"
            + _md(pd.DataFrame(needs))
        )
    for r in results:
        base = pd.DataFrame(r["accuracy"]["single_action"])[
            ["cycle_type", "reflections (standard rep)", "accuracy", "n"]
        ]
        for a in r["ablation"]:
            base[f"factor {a['factor']} off"] = pd.DataFrame(a["single_action"])["accuracy"].values
        base["chance"] = pd.DataFrame(r["accuracy"]["single_action"])["chance"].values
        parts.append(
            f"## {r['checkpoint']} (n_h = {r['n_householder']}): one action, then a reveal of a moved variable\n\n"
            f"Test reveal accuracy (k = 4, 1x): {r['accuracy']['reveal_accuracy']:.3f}; with factor j off "
            + ", ".join(f"j = {a['factor']}: {a['reveal_accuracy']:.3f}" for a in r["ablation"])
            + ".\n\n"
            + _md(base)
            + "\n"
            + _md(pd.DataFrame(r["accuracy"]["first_reveal"]))
        )
        by_position = pd.DataFrame(r["accuracy"]["by_position"])
        hard = by_position.columns[1]
        accuracy = by_position.pivot_table(index="reveal", columns=hard, values="accuracy")
        counts = by_position.pivot_table(index="reveal", columns=hard, values="n")
        cells = (accuracy.map(lambda v: f"{v:.3f}") + " (" + counts.map(lambda v: f"{v:.0f}") + ")").where(
            counts.notna(), "–"
        )
        cells.columns = [f"{c} hard" for c in cells.columns]
        parts.append(
            "Reveal accuracy by reveal number (rows) and the number of actions since the previous reveal that "
            f"need more than 2 reflections in the standard representation ({hard}; columns), over reveals of a "
            "moved variable whose earlier reveals were all right (count in brackets); all reveals by number: "
            + ", ".join(f"{v:.3f}" for v in r["accuracy"]["by_reveal_number"])
            + ":\n\n"
            + _md(cells.reset_index())
        )
        per_head = pd.DataFrame(r["ablation_per_head"]).pivot_table(
            index=["layer", "head"], columns="factor", values="reveal_accuracy"
        )
        per_head.columns = [f"factor {c} off" for c in per_head.columns]
        parts.append(f"Per head (k = 4, 1x):\n\n{_md(per_head.reset_index())}")
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="lab/results/family")
    parser.add_argument("--checkpoints", nargs="*", default=list(SHIPPED))
    parser.add_argument("--traces", type=arguments.COUNT, default=512, help="held-out test traces (k = 4, 16 actions)")
    parser.add_argument(
        "--probe-traces", type=arguments.COUNT, default=64, help="held-out traces for the product probe"
    )
    parser.add_argument(
        "--single", type=arguments.COUNT, default=2048, help="one-action traces for the cycle-type table"
    )
    parser.add_argument(
        "--markdown-only",
        action="store_true",
        help="rewrite OUT/corrections.md from OUT/corrections.json, measure nothing",
    )
    args = parser.parse_args()
    out = Path(args.out)
    if args.markdown_only:
        (out / "corrections.md").write_text(markdown(json.loads((out / "corrections.json").read_text())["checkpoints"]))
        print(f"{out / 'corrections.md'} rewritten from {out / 'corrections.json'}")
        return
    torch.set_num_threads(1)
    results = [
        probe_checkpoint(path, args.traces, args.probe_traces, args.single)
        for path in progress(args.checkpoints, desc="checkpoints", unit="checkpoint")
    ]
    write_json_atomic(out / "corrections.json", {"checkpoints": results})
    (out / "corrections.md").write_text(markdown(results))
    print(f"{len(results)} checkpoints -> {out / 'corrections.json'}, {out / 'corrections.md'}")


if __name__ == "__main__":
    entry.run(main)
