"""The tracking-head mechanism on every seed and depth: per-head measures, four sweeps, decision rules.

For each model folder given (a checkpoint folder, or a run folder of `deltalens reproduce --runs`,
whose final weights are RUN/last: the weights the cell's result JSON was evaluated on) this draws
128 held-out traces at the training length with the model's own task and evaluation spacing
(eval split, seed 0: what `deltalens intervene --n-traces 128` draws) and measures, per head:

* beta on action tokens: the share with beta > 1 (a negative eigenvalue 1 - beta), the mean, and the
  reflection fraction (eigenvalue < -0.9, i.e. beta > 1.9);
* the value probe: a linear probe of every variable's current value from the head's state S_t at
  the read-out tokens (probes/linear_probes.py), mean over variables, with its shuffled-label control;
* the 90%-variance PCA dimension of the head's flattened states (probes/subspace.py, every token);

and reveal accuracy with each head in turn under beta-range ([0, 2] -> [0, 1]), beta-clip
(min(beta, 1)), beta-reflect (2 - beta), mean-ablation of its read-out z (mean-z) and, on [0, 2] models,
the split interventions that change the transition or the write alone (transition-clip, write-clip,
write-half, eigen-abs: lab/experiments/mechanism_split.py, which also holds rule (d) and its table). A [0, 1]
model has no beta > 1, so its beta-range and beta-clip are no-ops and are replaced by beta-half
(beta x 0.5, the same write-halving the [0, 2] -> [0, 1] rescale applies). For a run folder the
re-evaluated test accuracy (512 traces, the result JSON's own protocol and seed) is checked against
the result JSON beside it (RUN/../../results/<cell>.json); a run folder without one is still
training and is skipped.

Decision rules (fixed in this file before seeds 1 and 2 were measured; the seed-0 numbers were known):

(a) Tracking head of a [0, 2] model: the head whose beta-clip drop (baseline minus accuracy) is the
    largest, if that drop is at least MARGIN = 0.10 (with 128 traces the binomial standard error of a
    reveal accuracy is <= 0.03, so 0.10 is > 3 SE); no tracking head otherwise. beta~2 heads: those
    with a reflection on at least half of their action tokens.
(b) The negative eigenvalue is isolated in a model with tracking head T when all three hold:
    b1. clipping any other head drops accuracy by less than NO_EFFECT = 0.05;
    b2. clipping T removes at least CLIP_SHARE = 2/3 of what mean-ablating T removes (the
        mean-ablated accuracy floored at chance: going below chance is read-out damage, not tracking);
    b3. the [0, 1] rescale of every head other than T drops accuracy by less than NO_EFFECT.
(c) Subspace claim ("the tracking head's states use fewer dimensions than the other heads'"): T's
    PCA-90 dimension is the lowest of the model's heads (ties count as lowest). Over a set of models
    with a tracking head the claim is supported when that holds in at least 2/3 of them, else not.
(d) The negative eigenvalue (not the write strength) carries the tracking: lab/experiments/mechanism_split.py.
[0, 1] models: the carrier is the head whose state decodes the values best; mean-ablation
    isolates one head when exactly one head's mean-ablation drop is >= MARGIN.
Decisions are counted over learned models only: test reveal accuracy >= 0.9 at 1x (the result
JSON's, or the checkpoint's recorded evaluation), as the matched-budget and sparse-only tables judge.

    python3 -m lab.experiments.mechanism_seeds MODEL [MODEL ...] --label sweep [--out lab/results/mechanism]
           [--compare lab/results/grid] [--n-traces 128] [--force]
    python3 -m lab.experiments.mechanism_seeds --table-only            # rewrite OUT/README.md from OUT/*.json
    python3 -m lab.experiments.mechanism_seeds MODEL --label L --add-sweeps   # only the split sweeps its JSON lacks

Writes OUT/<label>-<name>.json per model and OUT/README.md, one markdown table over every JSON there
(sections another script keeps there between "<!-- name: begin -->" and its end marker stay).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import torch

from deltalens.cli import arguments
from deltalens.core.atomic import write_json_atomic
from deltalens.core.display import progress
from deltalens.core.errors import DeltalensError
from lab.experiments import entry
from lab.experiments.mechanism_split import SPLIT_SWEEPS, add_sweeps, kept_sections, split_rule

MARGIN = 0.10
NO_EFFECT = 0.05
CLIP_SHARE = 2 / 3
BETA2_REFLECTIONS = 0.5
LEARNED = 0.9
SUBSPACE_SHARE = 2 / 3
SWEEPS_NEG = ("beta-range", "beta-clip", "beta-reflect", "mean-z", *SPLIT_SWEEPS)
SWEEPS_POS = ("beta-half", "beta-reflect", "mean-z")
HASH = re.compile(r"-[0-9a-f]{8}$")


# ---- finding the weights and the result beside them ------------------------------------------


def locate(path: Path) -> dict:
    """weights folder, run folder, cell name and result JSON of a checkpoint or run folder."""
    path = path.resolve()
    if (path / "last" / "model.safetensors").is_file() or (path / "train.toml").is_file():  # a run (maybe new)
        cell = HASH.sub("", path.name)
        result = path.parent.parent / "results" / f"{cell}.json"
        return {"weights": path / "last", "run": path, "name": cell, "result": result}
    if (path / "model.safetensors").is_file():
        return {"weights": path, "run": None, "name": path.name, "result": None}
    raise DeltalensError(f"{path} holds no model.safetensors and no last/model.safetensors; give a checkpoint or run.")


def recorded_lengths(where: dict, meta: dict) -> list[dict]:
    """The test evaluation recorded for these weights: the result JSON's, else the checkpoint's metrics."""
    if where["result"] is not None:
        return json.loads(where["result"].read_text())["eval"]["lengths"]
    return ((meta.get("metrics") or {}).get("eval") or {}).get("lengths", [])


def at(lengths: list[dict], multiple: float) -> float | None:
    row = next((r for r in lengths if r.get("x_train") == multiple and "reveal_accuracy" in r), None)
    return None if row is None else float(row["reveal_accuracy"])


# ---- measuring one model ---------------------------------------------------------------------


def head_measures(model, batch, seed: int) -> tuple[list[dict], list[dict]]:
    """beta on actions, value probe and PCA-90 dimension of every head; the residual stream's value
    probe after each layer (where the values are when no single head's state holds them)."""
    from deltalens.interp.capture import capture
    from deltalens.probes.linear_probes import linear_probes
    from deltalens.probes.subspace import subspace_report
    from deltalens.tasks.tokenizers import TokenKind

    with torch.no_grad():
        cap = capture(model, batch, names=("beta", "k", "state", "resid"))
    actions = cap.labels["kind"] == int(TokenKind.ACTION)
    sub = subspace_report(cap, seed=seed).heads.set_index(["layer", "head"])
    report = linear_probes(cap, sites=("state", "resid"), targets=("value",), seed=seed)
    probes = report.by_head().set_index(["layer", "head"])
    resid = [
        {"site": row["site"], "accuracy": float(row["accuracy"]), "control": float(row["control_accuracy"])}
        for row in report.by_layer().to_dict(orient="records")
    ]
    rows = []
    for layer in range(cap.n_layers):
        beta = cap.layer("beta", layer)  # (N, H)
        for head in range(beta.shape[1]):
            b = beta[actions, head].double()
            rows.append(
                {
                    "layer": layer,
                    "head": head,
                    "beta_gt1_action": float((b > 1).double().mean()),
                    "mean_beta_action": float(b.mean()),
                    "reflection_fraction": float((1 - b < -0.9).double().mean()),
                    "beta_gt1_all": float((beta[:, head] > 1).double().mean()),
                    "probe_value": float(probes.loc[(layer, head), "probe_accuracy_value"]),
                    "probe_control": float(probes.loc[(layer, head), "probe_control_value"]),
                    "pca_dim_90": int(sub.loc[(layer, head), "pca_dim_90"]),
                }
            )
    return rows, resid


def half_beta(model, layer, head):
    from deltalens.interp.interventions import rescale_beta

    return rescale_beta(model, layer, head, scale=0.5)


def measure(path: Path, label: str, n_traces: int, seed: int, compare: Path | None, test_traces: int = 512) -> dict:
    from deltalens.interp.head_sweep import sweep
    from deltalens.loading.opened import open_checkpoint
    from deltalens.tasks.baselines import baseline_scores
    from deltalens.training.evaluate import evaluate
    from lab.experiments.report.baselines_section import MIN_WINDOW

    where = locate(path)
    checkpoint = open_checkpoint(where["weights"])
    model, spec, data = checkpoint.model, checkpoint.spec, checkpoint.require_task()
    config = checkpoint.meta.get("model_config") or {}
    negative = bool(config.get("allow_neg_eigval"))
    recorded = recorded_lengths(where, checkpoint.meta)
    # the result JSON's protocol: 512 test traces, seed 0, batches of 64, at the training length
    test = evaluate(model, data.tokenizer, spec, n_traces=test_traces, seed=0).reveal_accuracy
    window = max(spec.spacing or 1, MIN_WINDOW)  # the report's window-W (a 1-action window at k = 1 is too weak)
    floors = baseline_scores(spec, test_traces, 0, window=window)
    batch = checkpoint.batch(n_traces, seed=seed)
    heads, resid = head_measures(model, batch, seed)
    by_head = {(h["layer"], h["head"]): h for h in heads}
    baseline = None
    for kind in SWEEPS_NEG if negative else SWEEPS_POS:
        result = sweep(model, batch, half_beta if kind == "beta-half" else kind, progress=False)
        baseline = result.baseline
        for row in result.frame.to_dict(orient="records"):
            by_head[(int(row["layer"]), int(row["head"]))][kind] = float(row["accuracy"])
    record = {
        "name": where["name"],
        "label": label,
        "source": str(path),
        "weights": str(where["weights"]),
        "step": (checkpoint.meta.get("training") or {}).get("step"),
        "group": spec.group,
        "spacing": spec.spacing,
        "actions": spec.actions,
        "beta_range": [0, 2] if negative else [0, 1],
        "n_layers": int(config.get("num_hidden_layers", 0)),
        "n_heads": int(config.get("num_heads", 0)),
        "n_traces": n_traces,
        "seed": seed,
        "baseline": baseline,
        "test_512": test,  # re-evaluated on the result JSON's test traces (test_traces of them)
        "test_traces": test_traces,
        "recorded_1x": at(recorded, 1.0),
        "recorded": [{k: r.get(k) for k in ("x_train", "reveal_accuracy")} for r in recorded],
        "result_json": None if where["result"] is None else str(where["result"]),
        "floors": {
            "chance": floors.chance,
            "last_reveal": floors.last_reveal,
            "window": floors.window,
            "window_size": window,
        },
        "heads": heads,
        "resid_probes": resid,
    }
    if compare is not None and (compare / f"{where['name']}.json").is_file():
        committed = json.loads((compare / f"{where['name']}.json").read_text())
        record["committed"] = [
            {k: r.get(k) for k in ("x_train", "reveal_accuracy")} for r in committed["eval"]["lengths"]
        ]
        record["committed_steps"] = committed.get("steps")
    record["decision"] = decide(record)
    return record


# ---- the decision rules (module docstring) ----------------------------------------------------


def _drop(record: dict, head: dict, kind: str) -> float:
    return record["baseline"] - head[kind]


def decide(record: dict) -> dict:
    heads, base = record["heads"], record["baseline"]
    chance = record["floors"]["chance"]
    name = lambda h: f"L{h['layer']}H{h['head']}"  # noqa: E731
    best_probe = max(heads, key=lambda h: h["probe_value"])
    mean_drops = {name(h): _drop(record, h, "mean-z") for h in heads}
    out = {
        "learned": record["recorded_1x"] is not None and record["recorded_1x"] >= LEARNED,
        "best_probe_head": name(best_probe),
        "best_probe": best_probe["probe_value"],
        "highest_beta_head": name(max(heads, key=lambda h: h["mean_beta_action"])),
        "mean_ablation_heads": sorted(k for k, d in mean_drops.items() if d >= MARGIN),
        "reflect_heads": sorted(name(h) for h in heads if _drop(record, h, "beta-reflect") >= MARGIN),
    }
    if record["beta_range"] == [0, 1]:
        carrier = best_probe
        others = [h for h in heads if h is not carrier]
        out.update(
            carrier=name(carrier),
            carrier_mean_drop=mean_drops[name(carrier)],
            mean_ablation_isolates_one=len(out["mean_ablation_heads"]) == 1,
            half_heads=sorted(name(h) for h in heads if _drop(record, h, "beta-half") >= MARGIN),
            carrier_pca_lowest=all(carrier["pca_dim_90"] <= h["pca_dim_90"] for h in others),
        )
        return out
    out["beta2_heads"] = sorted(name(h) for h in heads if h["reflection_fraction"] >= BETA2_REFLECTIONS)
    out["clip_heads"] = sorted(name(h) for h in heads if _drop(record, h, "beta-clip") >= MARGIN)
    top = max(heads, key=lambda h: (_drop(record, h, "beta-clip"), -h["layer"], -h["head"]))
    if _drop(record, top, "beta-clip") < MARGIN:
        out.update(tracking_head=None, isolated=False, pca_lowest=None)
        return out
    others = [h for h in heads if h is not top]
    clip_drop = _drop(record, top, "beta-clip")
    mean_drop = base - max(top["mean-z"], chance)
    b1 = max(_drop(record, h, "beta-clip") for h in others) < NO_EFFECT
    b2 = mean_drop <= 0 or clip_drop >= CLIP_SHARE * mean_drop
    b3 = max(_drop(record, h, "beta-range") for h in others) < NO_EFFECT
    dims = sorted(h["pca_dim_90"] for h in heads)
    out.update(
        tracking_head=name(top),
        tracking_layer=top["layer"],
        clip_drop=clip_drop,
        mean_drop_floored=mean_drop,
        clip_over_mean=clip_drop / mean_drop if mean_drop > 0 else None,
        max_other_clip_drop=max(_drop(record, h, "beta-clip") for h in others),
        max_other_range_drop=max(_drop(record, h, "beta-range") for h in others),
        max_other_reflect_drop=max(_drop(record, h, "beta-reflect") for h in others),
        clip_at_or_below_window=top["beta-clip"] <= record["floors"]["window"],
        b1_other_clips_harmless=b1,
        b2_clip_as_mean_ablation=b2,
        b3_other_rescales_harmless=b3,
        isolated=b1 and b2 and b3,
        agrees_with_beta=name(top) == out["highest_beta_head"],
        agrees_with_probe=name(top) == out["best_probe_head"],
        pca_dim_tracking=top["pca_dim_90"],
        pca_rank=1 + sum(d < top["pca_dim_90"] for d in dims),
        pca_others=[h["pca_dim_90"] for h in others],
        pca_lowest=all(top["pca_dim_90"] <= h["pca_dim_90"] for h in others),
        pca_below_median=top["pca_dim_90"] < statistics.median(h["pca_dim_90"] for h in others),
    )
    out.update(split_rule(record, top, others, mean_drop, CLIP_SHARE, NO_EFFECT))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path, help="checkpoint folders or run folders (RUN/last)")
    parser.add_argument("--label", default="model", help="prefix of the JSON names, e.g. sweep, sparse, shipped")
    parser.add_argument("--out", type=Path, default=Path("lab/results/mechanism"))
    parser.add_argument("--compare", type=Path, help="folder of committed result JSONs to compare test accuracy with")
    parser.add_argument("--n-traces", type=arguments.COUNT, default=128)
    parser.add_argument(
        "--test-traces", type=arguments.COUNT, default=512, help="traces of the test re-evaluation (default 512)"
    )
    parser.add_argument("--seed", type=arguments.SEED, default=0)
    parser.add_argument("--force", action="store_true", help="measure again a model whose JSON exists")
    parser.add_argument("--table-only", action="store_true", help="only rewrite OUT/README.md")
    parser.add_argument("--add-sweeps", action="store_true", help="only add the split sweeps a model's JSON lacks")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for path in args.models:
        entry.existing(path, "checkpoint or run folder")
    if args.compare is not None:
        entry.existing(args.compare, "folder of result JSONs to compare with")
    args.out.mkdir(parents=True, exist_ok=True)
    for path in progress([] if args.table_only else args.models, desc="models", unit="model"):
        where = locate(path)
        target = args.out / f"{args.label}-{where['name']}.json"
        if args.add_sweeps:
            write_json_atomic(target, add_sweeps(target, decide))
            continue
        if where["run"] is not None and not where["result"].is_file():
            print(f"skip {path}: no {where['result']} yet (still training)", file=sys.stderr)
            continue
        if target.is_file() and not args.force:
            continue
        record = measure(path, args.label, args.n_traces, args.seed, args.compare, args.test_traces)
        write_json_atomic(target, record)
        d = record["decision"]
        print(
            f"{target.name}: baseline {record['baseline']:.3f}, test {record['test_512']:.4f} "
            f"(recorded {record['recorded_1x']}), T {d.get('tracking_head', d.get('carrier'))}, "
            f"isolated {d.get('isolated')}",
            file=sys.stderr,
        )
    records = []
    for path in sorted(args.out.glob("*.json")):  # decisions re-taken with this file's rules
        record = json.loads(path.read_text())
        if record.get("decision") != (decision := decide(record)):
            record["decision"] = decision
            write_json_atomic(path, record)
        records.append(record)
    from lab.experiments.mechanism_table import table  # (it reads this file's thresholds)

    readme = args.out / "README.md"
    readme.write_text(table(records) + kept_sections(readme))
    return 0


if __name__ == "__main__":
    entry.run(main)
