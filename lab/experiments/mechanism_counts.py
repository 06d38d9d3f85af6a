"""Two counts over the mechanism JSONs of lab/experiments/mechanism_seeds.py, by that script's own cuts:

* "one β≈2 head": per learned DeltaNet [0, 2] model, whether exactly one head reflects (eigenvalue
  < -0.9) on at least half of its action tokens and it is the tracking head T (rule (a)), split by
  sparse (k > 1) and dense (k = 1) reveals; and where T sits (layer, head);
* dense reveals: what clipping T's beta at 1 costs (baseline minus accuracy), and on which tokens T's
  beta is above 1 (action tokens vs all tokens), to say where the negative eigenvalues sit.

    python3 -m lab.experiments.mechanism_counts [--mechanism lab/results/mechanism] \
        [--readme lab/results/mechanism/README.md]

Prints a markdown section; with --readme, (re)writes it between its markers there, keeping the rest.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from deltalens.core.errors import DeltalensError
from lab.experiments import entry

BEGIN, END = "<!-- mechanism-counts: begin -->", "<!-- mechanism-counts: end -->"


def models(folder: Path) -> list[dict]:
    """Learned [0, 2] models with their tracking head's row (`T`) and whether T is the one β≈2 head."""
    out = []
    for file in sorted(folder.glob("*.json")):
        record = json.loads(file.read_text())
        decision = record.get("decision", {})
        if record.get("beta_range") != [0, 2] or not decision.get("learned"):
            continue
        heads = {f"L{h['layer']}H{h['head']}": h for h in record["heads"]}
        t = heads.get(decision.get("tracking_head"))
        beta2 = decision.get("beta2_heads") or []
        out.append({**record, "T": t, "one_beta2": t is not None and beta2 == [decision["tracking_head"]]})
    return out


def _span(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def section(records: list[dict]) -> str:
    sparse = [r for r in records if r["spacing"] > 1]
    dense = [r for r in records if r["spacing"] == 1]
    layer0 = sum(r["decision"].get("tracking_layer") == 0 for r in records)
    lines = [
        BEGIN,
        "",
        "## Counts by the cuts above (`lab/experiments/mechanism_counts.py`)",
        "",
        f"Over the {len(records)} learned DeltaNet [0, 2] models: a tracking head T in layer 0 in {layer0} of "
        f"{len(records)}. Exactly one β≈2 head (reflections on at least half of its action tokens), and it is T: "
        f"{sum(r['one_beta2'] for r in sparse)} of {len(sparse)} with sparse reveals (k > 1), "
        f"{sum(r['one_beta2'] for r in dense)} of {len(dense)} with dense ones (k = 1), "
        f"{sum(r['one_beta2'] for r in records)} of {len(records)} overall. Where it fails:",
        "",
        "| model | k | T | β≈2 heads | T: mean β on actions | T: reflections on actions |",
        "|---|---|---|---|---|---|",
    ]
    for r in records:
        if not r["one_beta2"] and r["T"] is not None:
            lines.append(
                f"| `{r['label']}-{r['name']}` | {r['spacing']} | {r['decision']['tracking_head']} "
                f"| {', '.join(r['decision'].get('beta2_heads') or []) or 'none'} | {r['T']['mean_beta_action']:.2f} "
                f"| {r['T']['reflection_fraction']:.2f} |"
            )
    if dense:
        drops = [r["baseline"] - r["T"]["beta-clip"] for r in dense if r["T"] is not None]
        lines += [
            "",
            f"Dense reveals (k = 1, {len(dense)} models): clipping T's beta at 1 costs {_span(drops)} (baseline minus "
            "accuracy), so these models lean on T's negative eigenvalues too; where they sit:",
            "",
            "| model | clip drop | T: β > 1 on action tokens | T: β > 1 on all tokens |",
            "|---|---|---|---|",
        ]
        for r in dense:
            t = r["T"]
            lines.append(
                f"| `{r['label']}-{r['name']}` | {r['baseline'] - t['beta-clip']:.3f} | {t['beta_gt1_action']:.2f} "
                f"| {t['beta_gt1_all']:.2f} |"
            )
    lines += ["", END]
    return "\n".join(lines) + "\n"


def append_section(readme: Path, text: str) -> None:
    """Replace this script's section of `readme` (between BEGIN and END), or append it; the rest is kept."""
    current = readme.read_text() if readme.is_file() else ""
    if BEGIN in current and END in current:
        head, rest = current.split(BEGIN, 1)
        current = head.rstrip("\n") + "\n" + rest.split(END, 1)[1].lstrip("\n")
    readme.write_text(current.rstrip("\n") + "\n\n" + text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mechanism", type=Path, default=Path("lab/results/mechanism"))
    parser.add_argument("--readme", type=Path, help="also (re)write the section into this README")
    args = parser.parse_args(argv)
    found = models(entry.existing(args.mechanism, "mechanism results folder (mechanism_seeds.py's JSONs)"))
    if not found:
        raise DeltalensError(f"{args.mechanism} holds no mechanism_seeds.py JSON to count; run that script first")
    text = section(found)
    if args.readme is not None:
        append_section(args.readme, text)
    print(text)
    return 0


if __name__ == "__main__":
    entry.run(main)
