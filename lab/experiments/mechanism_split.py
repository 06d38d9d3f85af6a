"""Rule (d) of lab/experiments/mechanism_seeds.py: the tracking head's transition and write, taken apart.

beta_t enters a delta-rule step twice, S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, so the
beta-clip and [0, 2] -> [0, 1] rescale of the tracking head T (beta ~ 2 on every action) both change
the transition and halve the write. The split interventions (interp/split_interventions.py) change
one and keep the other exactly, on the same 128 held-out traces:

    transition-clip  beta -> min(beta, 1) in the transition only (no negative eigenvalue), write kept
    write-clip       beta -> min(beta, 1) in the write only, the transition (its reflections) kept:
                     with transition-clip, the two halves of beta-clip
    write-half       every write beta k v^T halved, the transition kept
    eigen-abs        the eigenvalue 1 - beta -> |1 - beta| in the transition (sign gone, size kept), write kept

(d) The negative eigenvalue carries the tracking in a model with tracking head T (rule a) when both hold:
    d1. the transition-only clip of T removes at least CLIP_SHARE = 2/3 of what mean-ablating T removes
        (the mean-ablated accuracy floored at chance, as in b2);
    d2. the write-only clip of T drops accuracy by less than NO_EFFECT = 0.05.
    Reported beside it, not part of the rule: write-half, the share the |1 - beta| map removes (sign
    alone), and the largest drop any other head shows under each split intervention. write-half is no
    evidence: with a zero start state S_t is linear in the writes, so halving every write of a head
    halves its o_t, which the per-head output norm (o_norm) undoes except where o_t is within its eps of
    0 (shipped S3, T: logits move by <= 0.14 where reveals are predicted, up to 5.4 at tokens with
    rms(o_t) ~ 3e-4); it leaves reveal accuracy at ~1.000 by construction.
History: the rule was written after the issue's spot checks on the three models on disk were known (they
motivated it), before this script ran them. d2 first read "halving T's write drops accuracy by less than
NO_EFFECT"; it was changed to write-clip when write-half was seen to be the invariance above, before any
write-clip number was measured. A model measured before the split interventions existed has no such
sweeps: its row says how to measure it (`--add-sweeps` on its weights, or retrain them).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

SPLIT_SWEEPS = ("transition-clip", "write-clip", "write-half", "eigen-abs")
RETRAIN = {  # how a label's models were trained (their run folders were not kept)
    "sweep": "lab/grids/paper.toml",
    "sparse": "lab/grids/sparse_only/deltanet-neg.toml",
}


def split_rule(record: dict, top: dict, others: list[dict], mean_drop: float, share: float, no_effect: float) -> dict:
    """Rule (d) on tracking head `top` (module docstring); None where the split sweeps were not run."""
    if any(kind not in top for kind in SPLIT_SWEEPS):
        return {"split_measured": False, "negative_eigenvalue_carries": None}
    base = record["baseline"]
    drops = {kind: base - top[kind] for kind in SPLIT_SWEEPS}
    d1 = mean_drop <= 0 or drops["transition-clip"] >= share * mean_drop
    d2 = drops["write-clip"] < no_effect
    ratio = (lambda d: d / mean_drop) if mean_drop > 0 else (lambda d: None)
    return {
        "split_measured": True,
        "transition_clip_over_mean": ratio(drops["transition-clip"]),
        "eigen_abs_over_mean": ratio(drops["eigen-abs"]),
        "write_clip_drop": drops["write-clip"],
        "write_half_drop": drops["write-half"],
        "max_other_split_drops": {kind: max(base - h[kind] for h in others) for kind in SPLIT_SWEEPS},
        "d1_transition_clip_as_mean_ablation": d1,
        "d2_write_clip_harmless": d2,
        "negative_eigenvalue_carries": d1 and d2,
    }


def _f(x, digits: int = 3) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def to_run(missing: list[dict]) -> list[str]:
    """The commands that would give the models without split sweeps their numbers."""
    lines = []
    for label in sorted({r["label"] for r in missing}):
        names = " ".join(r["name"] for r in missing if r["label"] == label)
        on_disk = all(Path(r["weights"]).exists() for r in missing if r["label"] == label)
        if on_disk:
            lines.append(
                f"* {label}: `python3 -m lab.experiments.mechanism_seeds WEIGHTS --label {label} --add-sweeps`"
            )
            continue
        lines.append(
            f"* {label} (weights lost with their run folders): retrain, `deltalens reproduce --grid "
            f"{RETRAIN.get(label, 'SWEEP')} --only {names} --runs W/runs --results W/results --lanes 2`, then "
            f"`python3 -m lab.experiments.mechanism_seeds W/runs/* --label {label} --force`."
        )
    return lines


def split_table(neg: list[dict]) -> list[str]:
    """The markdown section of rule (d) over the [0, 2] models."""
    lines = [
        "## Transition or write? Split interventions on T (rule d)",
        "",
        "Each split intervention changes one use of beta and keeps the other exactly (v compensated:",
        "interp/split_interventions.py). d1: transition-clip removes >= 2/3 of what mean-ablation removes; d2:",
        "write-clip drops accuracy by < 0.05 (write-half is ~1.000 by construction: the per-head output norm",
        "undoes a uniform write scale wherever the head's output is not ~0).",
        "",
        "| model | baseline | T | T: beta-clip / transition-clip / write-clip / write-half / eigen-abs / mean-z |"
        " transition-clip / mean | eigen-abs / mean | other heads: max drop transition-clip / write-clip /"
        " write-half / eigen-abs | negative eigenvalue carries (d1 d2) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    missing = []
    for r in neg:
        d = r["decision"]
        head = next((h for h in r["heads"] if f"L{h['layer']}H{h['head']}" == d.get("tracking_head")), None)
        name = f"{r['label']} {r['name']}" + ("" if d["learned"] else " (not learned)")
        if head is None:
            lines.append(f"| {name} | {_f(r['baseline'])} | none | | | | | |")
            continue
        if not d.get("split_measured"):
            missing.append(r)
            lines.append(f"| {name} | {_f(r['baseline'])} | {d['tracking_head']} | to run | | | | |")
            continue
        other = d["max_other_split_drops"]
        keys = ("d1_transition_clip_as_mean_ablation", "d2_write_clip_harmless")
        flags = "".join("y" if d[k] else "n" for k in keys)
        lines.append(
            f"| {name} | {_f(r['baseline'])} | {d['tracking_head']} | {_f(head['beta-clip'])} / "
            f"{_f(head['transition-clip'])} / {_f(head['write-clip'])} / {_f(head['write-half'])} / "
            f"{_f(head['eigen-abs'])} / "
            f"{_f(head['mean-z'])} | {_f(d['transition_clip_over_mean'], 2)} | {_f(d['eigen_abs_over_mean'], 2)} | "
            + " / ".join(_f(other[k]) for k in SPLIT_SWEEPS)
            + f" | {'yes' if d['negative_eigenvalue_carries'] else 'no'} ({flags}) |"
        )
    lines += ["", split_count(neg), ""]
    return lines + (["To run (rows marked so):", "", *to_run(missing), ""] if missing else [])


def split_count(neg: list[dict]) -> str:
    """How many learned [0, 2] models with a tracking head rule (d) was measured on, and holds in."""
    found = [r for r in neg if r["decision"]["learned"] and r["decision"].get("tracking_head")]
    measured = [r for r in found if r["decision"].get("split_measured")]
    holds = [r for r in measured if r["decision"]["negative_eigenvalue_carries"]]
    names = ", ".join(f"{r['label']} {r['name']}" for r in measured) or "none"
    rest = len(found) - len(measured)
    return (
        f"* Rule (d) measured on {len(measured)} of the {len(found)} learned [0, 2] models with a tracking head "
        f"({names}); the negative eigenvalue carries the tracking in {len(holds)} of {len(measured)}."
        + (f" The other {rest} have no split sweeps (to run: below)." if rest else "")
    )


def add_sweeps(target: Path, decide, kinds=SPLIT_SWEEPS) -> dict:
    """The JSON at `target` with the sweeps in `kinds` it lacks added, on the same held-out traces (its
    n_traces and seed), and its decision re-taken by `decide`; every other field is kept. Refused when
    the baseline differs from the recorded one (other weights or other traces)."""
    from deltalens.interp.head_sweep import sweep
    from deltalens.loading.opened import open_checkpoint

    if not target.is_file():
        raise SystemExit(f"{target} does not exist yet; measure the model first (without --add-sweeps).")
    record = json.loads(target.read_text())
    checkpoint = open_checkpoint(record["weights"])
    batch = checkpoint.batch(record["n_traces"], seed=record["seed"])
    by_head = {(h["layer"], h["head"]): h for h in record["heads"]}
    for kind in (k for k in kinds if any(k not in h for h in record["heads"])):
        result = sweep(checkpoint.model, batch, kind, progress=False)
        if abs(result.baseline - record["baseline"]) > 1e-9:
            raise SystemExit(f"{target}: baseline {result.baseline} here, {record['baseline']} recorded; not added.")
        for row in result.frame.to_dict(orient="records"):
            by_head[(int(row["layer"]), int(row["head"]))][kind] = float(row["accuracy"])
    record["decision"] = decide(record)
    return record


def kept_sections(readme: Path) -> str:
    """Everything from the first "<!-- name: begin -->" marker on: sections other scripts keep in the README."""
    text = readme.read_text() if readme.is_file() else ""
    found = re.search(r"^<!-- [\w-]+: begin -->", text, flags=re.MULTILINE)
    return "" if found is None else "\n" + text[found.start() :]
