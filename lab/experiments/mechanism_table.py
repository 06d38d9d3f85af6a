"""The markdown table of lab/experiments/mechanism_seeds.py over every model's JSON: per model, the tracking head
and its measures, then the counts of its decision rules (the rules themselves: mechanism_seeds.py)."""

from __future__ import annotations

import math

from lab.experiments.mechanism_seeds import MARGIN, SUBSPACE_SHARE
from lab.experiments.mechanism_split import split_table


def _f(x, digits: int = 3) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _setting(r: dict) -> str:
    beta = "[0,2]" if r["beta_range"] == [0, 2] else "[0,1]"
    return f"{r['label']} {r['group']} {beta} k={r['spacing']} {r['n_layers']}L"


def table(records: list[dict]) -> str:
    records = sorted(
        records, key=lambda r: (r["beta_range"] != [0, 2], r["label"], r["group"], r["spacing"], r["name"])
    )
    neg = [r for r in records if r["beta_range"] == [0, 2]]
    pos = [r for r in records if r["beta_range"] == [0, 1]]
    lines = [
        "# Mechanism across seeds and depth",
        "",
        "Written by `python3 -m lab.experiments.mechanism_seeds` (its docstring has the decision rules). 128 held-out",
        "traces at the training length per model; accuracies are reveal accuracies; a drop is the baseline minus",
        "the accuracy with that one head intervened on. T = the tracking head by rule (a).",
        "",
        "## DeltaNet [0, 2]",
        "",
        "| model | test 1x (JSON / re-eval) | baseline | beta~2 heads | T | T: beta>1 on actions, mean beta |"
        " T: probe, PCA-90 (others) | T: range / clip / reflect / mean-z | other heads: max drop range / clip /"
        " reflect | clip/mean | isolated (b1 b2 b3) | PCA lowest |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in neg:
        d = r["decision"]
        mark = "" if d["learned"] else " (not learned)"
        head = next((h for h in r["heads"] if f"L{h['layer']}H{h['head']}" == d.get("tracking_head")), None)
        if head is None:
            lines.append(
                f"| {r['label']} {r['name']}{mark} | {_f(r['recorded_1x'])} / {_f(r['test_512'])} | "
                f"{_f(r['baseline'])} | {', '.join(d['beta2_heads']) or '-'} | none | | | | | | | |"
            )
            continue
        others = sorted(d["pca_others"])
        flags = "".join(
            "y" if d[k] else "n"
            for k in ("b1_other_clips_harmless", "b2_clip_as_mean_ablation", "b3_other_rescales_harmless")
        )
        lines.append(
            f"| {r['label']} {r['name']}{mark} | {_f(r['recorded_1x'])} / {_f(r['test_512'])} | {_f(r['baseline'])} | "
            f"{', '.join(d['beta2_heads']) or '-'} | {d['tracking_head']} | {_f(head['beta_gt1_action'], 2)}, "
            f"{_f(head['mean_beta_action'], 2)} | {_f(head['probe_value'], 2)}, {head['pca_dim_90']} "
            f"({others[0]}-{others[-1]}) | {_f(head['beta-range'])} / {_f(head['beta-clip'])} / "
            f"{_f(head['beta-reflect'])} / {_f(head['mean-z'])} | {_f(d['max_other_range_drop'])} / "
            f"{_f(d['max_other_clip_drop'])} / {_f(d['max_other_reflect_drop'])} | {_f(d['clip_over_mean'], 2)} | "
            f"{'yes' if d['isolated'] else 'no'} ({flags}) | "
            f"{'yes' if d['pca_lowest'] else 'no'} (rank {d['pca_rank']}) |"
        )
    lines += ["", *summary_lines(neg), "", *split_table(neg)]
    if pos:
        lines += [
            "## DeltaNet [0, 1] (no beta > 1: beta-half = beta x 0.5 in place of the [0, 2] -> [0, 1] rescale)",
            "",
            "| model | test 1x (JSON / re-eval) | baseline | carrier (best state probe) | its probe, PCA-90 (others) |"
            " carrier: half / reflect / mean-z | heads with mean-z drop >= 0.10 | half >= 0.10 | reflect >= 0.10 |"
            " residual-stream probe after each layer |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in pos:
            d = r["decision"]
            mark = "" if d["learned"] else " (not learned)"
            c = next(h for h in r["heads"] if f"L{h['layer']}H{h['head']}" == d["carrier"])
            others = sorted(h["pca_dim_90"] for h in r["heads"] if h is not c)
            resid = " / ".join(f"{x['site']} {x['accuracy']:.2f}" for x in r.get("resid_probes", []))
            lines.append(
                f"| {r['label']} {r['name']}{mark} | {_f(r['recorded_1x'])} / {_f(r['test_512'])} | "
                f"{_f(r['baseline'])} | {d['carrier']} | {_f(c['probe_value'], 2)}, {c['pca_dim_90']} "
                f"({others[0]}-{others[-1]}) | {_f(c['beta-half'])} / {_f(c['beta-reflect'])} / {_f(c['mean-z'])} | "
                f"{', '.join(d['mean_ablation_heads']) or '-'} | {', '.join(d['half_heads']) or '-'} | "
                f"{', '.join(d['reflect_heads']) or '-'} | "
                f"{resid} |"
            )
        lines += ["", positive_line(pos)]
    lines += reproduction_lines(records)
    return "\n".join(lines) + "\n"


def positive_line(pos: list[dict]) -> str:
    learned = [r for r in pos if r["decision"]["learned"]]
    probes = [r["decision"]["best_probe"] for r in learned]
    isolates = sum(r["decision"]["mean_ablation_isolates_one"] for r in learned)
    many = [len(r["decision"]["mean_ablation_heads"]) for r in learned]
    return (
        f"* Over the {len(learned)} learned [0, 1] models: the best single head's state decodes the values at "
        f"{_f(min(probes), 2)}-{_f(max(probes), 2)}; mean-ablation isolates one head in {isolates} (heads whose "
        f"mean-ablation drops accuracy by >= {MARGIN:.2f}: {', '.join(map(str, many))})."
        if learned
        else "* No learned [0, 1] model."
    )


def reproduction_lines(records: list[dict]) -> list[str]:
    """Retrained cells against the committed result of the same cell (--compare): test reveal accuracy."""
    rows = [r for r in records if r.get("committed")]
    if not rows:
        return []

    def accs(lengths):
        return " / ".join(_f(r.get("reveal_accuracy")) for r in sorted(lengths, key=lambda r: r["x_train"]))

    lines = [
        "",
        "## Retrained cells against the committed results (test reveal accuracy at 1x / 2x / 4x, 512 traces)",
        "",
        "| cell | retrained | committed | largest difference | steps retrained / committed |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        ours = {x["x_train"]: x.get("reveal_accuracy") for x in r["recorded"]}
        theirs = {x["x_train"]: x.get("reveal_accuracy") for x in r["committed"]}
        diffs = [abs(ours[k] - theirs[k]) for k in ours if k in theirs and None not in (ours[k], theirs[k])]
        largest = _f(max(diffs)) if diffs else ""
        steps = f"{r.get('step')} / {r.get('committed_steps')}"
        lines.append(f"| {r['name']} | {accs(r['recorded'])} | {accs(r['committed'])} | {largest} | {steps} |")
    return lines


def summary_lines(neg: list[dict]) -> list[str]:
    """The counts the decision rules produce: over each label's learned [0, 2] models, then over all."""
    labels = sorted({r["label"] for r in neg})
    groups = [(f"{label} models", [r for r in neg if r["label"] == label]) for label in labels]
    return [count_line(what, rows) for what, rows in [*groups, ("models in all", neg)]]


def count_line(what: str, neg: list[dict]) -> str:
    learned = [r for r in neg if r["decision"]["learned"]]
    found = [r for r in learned if r["decision"]["tracking_head"]]
    n = len(learned)
    layers = {}
    for r in found:
        layers[r["decision"]["tracking_layer"]] = layers.get(r["decision"]["tracking_layer"], 0) + 1
    lowest = sum(bool(r["decision"]["pca_lowest"]) for r in found)
    below = sum(bool(r["decision"].get("pca_below_median")) for r in found)
    verdict = "supported" if found and lowest >= SUBSPACE_SHARE * len(found) else "not supported"
    beta2 = [len(r["decision"]["beta2_heads"]) for r in learned]
    return (
        f"* Over the {n} learned [0, 2] {what}: a tracking head (rule a) in {len(found)}; in layer "
        + ", ".join(f"{layer}: {count}" for layer, count in sorted(layers.items()))
        + f"; beta~2 heads per model: {', '.join(map(str, beta2))}; "
        f"T is also the highest-mean-beta head in {sum(r['decision']['agrees_with_beta'] for r in found)}"
        f" and the best state-probe head in {sum(r['decision']['agrees_with_probe'] for r in found)};"
        f" negative eigenvalue isolated (rule b) in {sum(r['decision']['isolated'] for r in found)};"
        f" T's PCA-90 dimension the lowest (rule c) in {lowest} of {len(found)}: subspace claim {verdict}"
        f" (below the other heads' median in {below} of {len(found)})."
    )
