"""Sparse dictionaries of every head's state on the shipped S3 and S5 DeltaNet [0, 2] models, scored against the
true state (issue 57; the rule is lab/results/dictionaries/README.md's, stated before these runs).

    python3 -m lab.experiments.dictionaries RUN --model s3-deltanet-neg-statement --latents 64 \
        [--out lab/results/dictionaries]
    python3 -m lab.experiments.dictionaries --table [--out lab/results/dictionaries]   # the coverage table, the verdict
    python3 -m lab.experiments.dictionaries run --model M --latents N --score-at print reveal   # the second rule's grid
    python3 -m lab.experiments.dictionaries --table --score-at print reveal      # its table and verdict

One record per (model, width): for each head, the dictionary's fact coverage (of n x n at F1 >= 0.9), arrangement
coverage, dead and dense latents, held-out FVU and training seconds, the same head's linear-probe accuracy on its
state (the supervised reference), and for the tracking head the splice accuracy and one fact's ablation.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from deltalens.cli import arguments
from deltalens.core.atomic import write_json_atomic
from lab.experiments import entry

K = 4  # latents active per row
STEPS = 1000
TRACES = 512  # capture: even-numbered traces train, odd-numbered ones are scored
FACT = (0, 1)  # ablated on the tracking head: variable a holds value 2
# the rule (lab/results/dictionaries/README.md)
COVERS, OTHERS_BELOW = 0.9, 0.5


def record(model_name: str, latents: int, seed: int = 0, kinds: tuple[str, ...] | None = None) -> dict:
    import deltalens as dl

    model = dl.load(model_name)
    batch = model.checkpoint.batch(TRACES, seed=seed)
    layers = list(range(model.cfg.n_layers))
    cap = dl.capture(model, batch, names=("resid", "state"))  # the probes read both
    tracking = dl.eigenvalue_report(model, model.checkpoint.batch(64, seed=seed)).tracking_head()
    probes = dl.linear_probes(cap, targets=("value",), seed=seed).by_head()
    test = model.checkpoint.batch(256, seed=seed + 1)
    heads = []
    for layer in layers:
        for head in range(model.cfg.n_heads):
            d = dl.train_sae(
                cap, site="state", layer=layer, head=head, num_latents=latents, k=K, steps=STEPS, seed=seed
            )
            score = dl.score_sae(d, cap, kinds=kinds)
            probe = probes[(probes["layer"] == layer) & (probes["head"] == head)]
            row = {
                "layer": layer,
                "head": head,
                "tracking": (layer, head) == tracking,
                "coverage": score.coverage,
                "n_facts": score.n_facts,
                "arrangement_coverage": score.arrangement_coverage,
                "arrangements": len(score.arrangements),
                "best_fact_f1": [round(float(x), 4) for x in score.facts["f1"]],
                "dead": int(score.features["dead"].sum()),
                "dense": int(score.features["dense"].sum()),
                "fvu": score.fvu,
                "train_seconds": d.meta["train_seconds"],
                "probe_accuracy": float(probe["probe_accuracy_value"].iloc[0]) if len(probe) else None,
            }
            if row["tracking"]:
                splice = dl.splice_report(model, d, test, score, fact=FACT)
                row["splice"] = splice.to_dict()
            heads.append(row)
            print(f"{model_name} {latents} L{layer}H{head}: {score.title()}", file=sys.stderr)
    return {"model": model_name, "latents": latents, "k": K, "steps": STEPS, "traces": TRACES, "seed": seed,
            "score_at": list(kinds) if kinds else None,
            "tracking_head": list(tracking) if tracking else None, "heads": heads}  # fmt: skip


def verdict(records: list[dict]) -> str:
    """The rule of lab/results/dictionaries/README.md over every (model, width) record."""
    if not records:
        return "not testable: no record"
    parts, holds = [], True
    for r in records:
        track = [h for h in r["heads"] if h["tracking"]]
        others = [h for h in r["heads"] if not h["tracking"]]
        if not track:
            return f"not testable: {r['model']} has no tracking head"
        t = track[0]["coverage"] / track[0]["n_facts"]
        o = max(h["coverage"] / h["n_facts"] for h in others)
        ok = t >= COVERS and o < OTHERS_BELOW
        holds &= ok
        parts.append(f"{r['model']} at {r['latents']} latents: tracking head {t:.0%}, best other head {o:.0%}")
    return ("supported" if holds else "not supported") + " (" + "; ".join(parts) + ")"


def verdict_arrangements(records: list[dict]) -> str:
    """The second rule (lab/results/dictionaries/README.md): at the read-out tokens, wherever a dictionary has at least
    as many latents as there are arrangements, the tracking head's covers 90% of them at F1 >= 0.9 and no other
    head's covers half."""
    judged = [r for r in records if r["latents"] >= max(h["arrangements"] for h in r["heads"])]
    if not judged:
        return "not testable: no record has as many latents as arrangements"
    parts, holds = [], True
    for r in judged:
        track = [h for h in r["heads"] if h["tracking"]]
        if not track:
            return f"not testable: {r['model']} has no tracking head"
        t = track[0]["arrangement_coverage"] / track[0]["arrangements"]
        o = max(h["arrangement_coverage"] / h["arrangements"] for h in r["heads"] if not h["tracking"])
        holds &= t >= COVERS and o < OTHERS_BELOW
        parts.append(f"{r['model']} at {r['latents']} latents: tracking head {t:.0%}, best other head {o:.0%}")
    return ("supported" if holds else "not supported") + " (" + "; ".join(parts) + ")"


def _name(model: str, latents: int, kinds) -> str:
    return f"{model}-latents{latents}" + (f"-at-{'-'.join(kinds)}" if kinds else "") + ".json"


def table(folder: Path, kinds=None) -> list[str]:
    pattern = _name("*", "*", kinds) if kinds else "*-latents[0-9]*[0-9].json"
    records = [json.loads(p.read_text()) for p in sorted(folder.glob(pattern))]
    lines = [
        "| model | latents | head | facts covered | arrangements covered | best-fact F1 (mean) | dead | dense | FVU "
        "| probe accuracy | train s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        for h in r["heads"]:
            name = f"L{h['layer']}H{h['head']}" + (" (tracking)" if h["tracking"] else "")
            probe = "-" if h["probe_accuracy"] is None else f"{h['probe_accuracy']:.3f}"
            mean_f1 = sum(h["best_fact_f1"]) / len(h["best_fact_f1"])
            lines.append(
                f"| {r['model']} | {r['latents']} | {name} | {h['coverage']} of {h['n_facts']} | "
                f"{h['arrangement_coverage']} of {h['arrangements']} | {mean_f1:.2f} "
                f"| {h['dead']} | {h['dense']} | {h['fvu']:.3f} | {probe} | {h['train_seconds']:.0f} |"
            )
    lines.append("")
    for r in records:
        for h in r["heads"]:
            if "splice" in h:
                s = h["splice"]
                lines.append(
                    f"- {r['model']}, {r['latents']} latents, L{h['layer']}H{h['head']} spliced in: reveal accuracy "
                    f"{s['baseline']:.3f} -> {s['spliced']:.3f}; without the latents of 'a holds 2' ({s['dropped']}): "
                    f"{s['fact_accuracy_ablated']:.3f} on its {s['fact_reveals']} reveals "
                    f"(spliced {s['fact_accuracy_spliced']:.3f}), "
                    f"{s['other_accuracy_ablated']:.3f} on the others (spliced {s['other_accuracy_spliced']:.3f})"
                )
    if kinds:
        lines += ["", f"Verdict by the second rule (arrangements at {', '.join(kinds)} tokens): "
                  f"{verdict_arrangements(records)}"]  # fmt: skip
    else:
        lines += ["", f"Verdict by the rule: {verdict(records)}"]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", choices=["run"])
    parser.add_argument("--model", default="s3-deltanet-neg-statement")
    parser.add_argument("--latents", type=arguments.COUNT, default=64)
    parser.add_argument("--out", type=Path, default=Path("lab/results/dictionaries"))
    parser.add_argument("--table", action="store_true")
    parser.add_argument("--score-at", nargs="+", metavar="KIND", help="score at these token kinds only")
    args = parser.parse_args()
    if args.table:
        print("\n".join(table(entry.existing(args.out, "results folder"), args.score_at)))
        return
    if args.run is None:
        parser.error("give `run` (with --model and --latents) or --table")
    torch.set_num_threads(1)
    target = args.out / _name(args.model, args.latents, args.score_at)
    if target.is_file():
        print(f"{target}: done already", file=sys.stderr)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    kinds = tuple(args.score_at) if args.score_at else None
    write_json_atomic(target, record(args.model, args.latents, kinds=kinds))
    print(f"written: {target}", file=sys.stderr)


if __name__ == "__main__":
    entry.run(main)
