"""The subspace claim measured on what a head operates with: its keys k_t and read-out queries q_t.

The paper says the tracking head "operates in a low-dimensional subspace". Rule (c) of
lab/experiments/mechanism_seeds.py reads that off the PCA of the head's flattened state S_t; this script
reads it off the vectors the head writes and reads with:

* keys: k_t on action tokens (the Householder directions of the transitions), stacked over held-out
  traces; their 99% dimension is the number of singular values holding 99% of the squared ones
  (probes/subspace.py, `subspace_report`, column key_dim_99);
* read-out queries: q_t on the tokens whose logits predict a revealed value (the directions the
  head is read along there), the same count on the stacked q_t.

The state-PCA reading (pca_dim_90, every token, the same traces) is measured beside them.

Decision rules (from the issue's wording, fixed before any model was measured here):

(k) in a model with a tracking head T, the key claim holds when T's key_dim_99 is the lowest of the
    model's heads (ties count) and equals n, the number of variables (a transposition of values held
    along n variable directions is a reflection along e_i - e_j, inside an n-dim span);
(q) the same for the read-out queries (q_dim_99);
over the models with a tracking head, a claim is supported when it holds in at least 2/3 of them.

Restated (issue 53, after the first table was seen; the reason: rule (k) joined two predictions and its "= n"
had no derivation, since swap keys (u_a - u_b)/sqrt(2) of n variable directions span n - 1 dimensions):

(k1) the paper's claim, "lower than the other heads": T's key_dim_99 is strictly below every other head's;
(k2) the swap prediction, separate: T's key_dim_99 equals n - 1;
each supported over models when it holds in at least 2/3 of them, as (k).
T is the model's tracking head by rule (a) of lab/experiments/mechanism_seeds.py (largest beta-clip drop,
at least 0.10): taken from that script's JSON for the model when one exists, else measured here the
same way (beta clipped at 1 on each head in turn, 128 held-out traces, eval split seed 0).

    python3 -m lab.experiments.key_subspace MODEL [MODEL ...] [--out lab/results/mechanism/key_subspace]  # ckpts, runs
    python3 -m lab.experiments.key_subspace --table-only     # print the markdown section from the JSON
    python3 -m lab.experiments.key_subspace --table-only --readme lab/results/mechanism/README.md   # (re)append it

Writes OUT/key_subspace.json (one record per model; a subfolder, so mechanism_seeds.py's glob over
lab/results/mechanism/*.json never reads it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from deltalens.core.atomic import write_json_atomic
from deltalens.core.errors import DeltalensError
from lab.experiments import entry

KEY_TRACES = 64  # the measurement
SWEEP_TRACES = 128  # rule (a)'s, as in lab/experiments/mechanism_seeds.py
MARGIN = 0.10  # rule (a): the tracking head's beta-clip drop
REFLECTS = 1.9  # beta above this: eigenvalue 1 - beta < -0.9, mechanism_seeds.py's reflection
SHARE = 2 / 3
BEGIN, END = "<!-- key-subspace: begin -->", "<!-- key-subspace: end -->"


def tracking_head(where: dict, mechanism: Path) -> tuple[str | None, str]:
    """(T as 'L0H3', where it came from) from a mechanism_seeds.py JSON of this model, or (None, '').
    Matched on the cell name and the weights folder's last two parts (a checkpoint's folder, or a run's
    hashed folder and last/), so a moved repo still matches and two labels' same-named cells do not."""
    tail = where["weights"].parts[-2:]
    for file in sorted(mechanism.glob("*.json")):
        record = json.loads(file.read_text())
        if record.get("name") == where["name"] and Path(record.get("weights", "")).parts[-2:] == tail:
            return record.get("decision", {}).get("tracking_head"), file.as_posix()
    return None, ""


def clip_tracking_head(model, batch) -> tuple[str | None, float]:
    """Rule (a) here: the head with the largest beta-clip drop if it is at least MARGIN, and that drop."""
    from deltalens.interp.head_sweep import sweep

    result = sweep(model, batch, "beta-clip", progress=False)
    frame = result.frame.assign(drop=result.baseline - result.frame["accuracy"])
    top = frame.sort_values("drop", ascending=False).iloc[0]
    name = f"L{int(top['layer'])}H{int(top['head'])}"
    return (name if top["drop"] >= MARGIN else None), float(top["drop"])


def measure(path: Path, mechanism: Path, seed: int = 0) -> dict:
    from deltalens.interp.capture import capture
    from deltalens.loading.opened import open_checkpoint
    from deltalens.probes.linear_probes import probe_positions
    from deltalens.probes.subspace import numerical_rank, subspace_report
    from lab.experiments.mechanism_seeds import locate

    where = locate(path)  # a checkpoint folder, or a run folder of `deltalens reproduce --runs` (RUN/last)
    checkpoint = open_checkpoint(where["weights"])
    model, spec = checkpoint.model, checkpoint.spec
    config = checkpoint.meta.get("model_config") or {}
    if not config.get("allow_neg_eigval"):
        raise DeltalensError(f"{path} is not a DeltaNet with beta in [0, 2]; rule (a) needs beta > 1 to clip.")
    head, source = tracking_head(where, mechanism)
    clip_drop = None
    if source == "":
        head, clip_drop = clip_tracking_head(model, checkpoint.batch(SWEEP_TRACES, seed=seed))
        source = f"beta-clip sweep here, {SWEEP_TRACES} traces"
    batch = checkpoint.batch(KEY_TRACES, seed=seed)
    with torch.no_grad():
        cap = capture(model, batch, names=("k", "q", "state", "beta"))
    sub = subspace_report(cap, seed=seed).heads
    readout = torch.from_numpy(probe_positions(cap, "readout"))
    rows = []
    for row in sub.to_dict(orient="records"):
        layer, h = int(row["layer"]), int(row["head"])
        queries = cap.layer("q", layer)[readout, h].reshape(-1, cap.layer("q", layer).shape[-1])
        _, q90, q99, _ = numerical_rank(queries)
        # post hoc (not in rule (k)): only the keys of the tokens where this head reflects (beta > 1.9),
        # since with code or BPE tokens most of an action line's tokens write with small beta
        reflecting = cap.layer("beta", layer)[:, h] > REFLECTS
        _, _, r99, _ = numerical_rank(cap.layer("k", layer)[reflecting, h])
        rows.append(
            {
                "head": f"L{layer}H{h}",
                "key_dim_99": int(row["key_dim_99"]),
                "key_dim_90": int(row["key_dim_90"]),
                "key_rank": int(row["key_rank"]),
                "q_dim_99": q99,
                "q_dim_90": q90,
                "pca_dim_90": int(row["pca_dim_90"]),
                "reflecting_key_dim_99": r99 if int(reflecting.sum()) >= 2 else None,
                "n_reflecting": int(reflecting.sum()),
            }
        )
    record = {
        "name": where["name"],
        "source": path.as_posix(),
        "group": spec.group,
        "n": int(cap.n_vars),
        "spacing": spec.spacing,
        "tokenizer": (checkpoint.meta.get("task") or {}).get("config", {}).get("tokenizer"),
        "short_conv": bool(config.get("use_short_conv", True)),
        "n_layers": int(config.get("num_hidden_layers", 0)),
        "n_traces": KEY_TRACES,
        "n_action_keys": int(sub["n_action_keys"].iloc[0]),
        "n_readouts": int(readout.sum()),
        "tracking_head": head,
        "tracking_head_from": source,
        "clip_drop": clip_drop,
        "heads": rows,
    }
    record["decision"] = decide(record)
    return record


def decide(record: dict) -> dict:
    """Rules (k), (q) and the state-PCA reading for one model (module docstring)."""
    heads = {h["head"]: h for h in record["heads"]}
    t = heads.get(record["tracking_head"])
    if t is None:
        return {"has_tracking_head": False}
    out = {"has_tracking_head": True}
    for column, name in (("key_dim_99", "key"), ("q_dim_99", "q"), ("pca_dim_90", "pca")):
        others = [h[column] for h in heads.values() if h is not t]
        out[f"{name}_lowest"] = all(t[column] <= d for d in others)
        out[f"{name}_rank"] = 1 + sum(d < t[column] for d in others)
        out[f"{name}_others"] = [min(others), max(others)]
    out["key_strictly_lowest"] = all(
        t["key_dim_99"] < d for d in (h["key_dim_99"] for h in heads.values() if h is not t)
    )
    out["key_equals_n"] = t["key_dim_99"] == record["n"]
    out["key_equals_n_minus_1"] = t["key_dim_99"] == record["n"] - 1
    out["q_equals_n"] = t["q_dim_99"] == record["n"]
    out["key_rule"] = out["key_lowest"] and out["key_equals_n"]
    out["q_rule"] = out["q_lowest"] and out["q_equals_n"]
    return out


def verdict(records: list[dict], rule: str) -> tuple[int, int, str]:
    """(models where `rule` holds, models with a tracking head, 'supported' or 'not supported')."""
    found = [r for r in records if r["decision"].get("has_tracking_head")]
    holding = sum(bool(r["decision"][rule]) for r in found)
    ok = bool(found) and holding >= SHARE * len(found)
    return holding, len(found), "supported" if ok else "not supported"


def reflecting(record: dict) -> str:
    """T's key dimension over the tokens where it reflects, and how many such tokens ('–' if not measured)."""
    t = next(h for h in record["heads"] if h["head"] == record["tracking_head"])
    if t.get("reflecting_key_dim_99") is None:
        return "–"
    return f"{t['reflecting_key_dim_99']} ({t['n_reflecting']})"


def section(records: list[dict]) -> str:
    """The markdown section appended to lab/results/mechanism/README.md."""

    def cell(r: dict, column: str, name: str) -> str:
        t = next(h for h in r["heads"] if h["head"] == r["tracking_head"])
        d = r["decision"]
        lo, hi = d[f"{name}_others"]
        mark = "lowest" if d[f"{name}_lowest"] else f"rank {d[f'{name}_rank']}"
        return f"**{t[column]}** ({mark}; others {lo}-{hi})"

    lines = [
        BEGIN,
        "",
        "## The subspace claim on the keys and read-out queries (`lab/experiments/key_subspace.py`)",
        "",
        "Rule (c) above reads the subspace claim off the PCA of the flattened state. This section reads it off "
        "the vectors the head works with: per head, the 99%-variance dimension of its keys k_t on action tokens "
        "(`subspace_report`, key_dim_99) and of its queries q_t at the read-out tokens (those whose logits predict "
        f"a revealed value), {KEY_TRACES} held-out traces (eval split, seed 0), beside the state's PCA-90 dimension "
        "on the same traces. Rule (k), fixed before measuring: T's key dimension is the lowest of its model's heads "
        "(ties count) and equals n, the number of variables; rule (q) the same on the queries; supported over "
        f"models when it holds in at least 2/3 of those with a tracking head. The per-seed run folders of the grid "
        "are gone, so this is measured on the models that exist: every shipped DeltaNet [0, 2] checkpoint that learned "
        "(statement, code and BPE tokens, and the renormalised one) and the 6-layer model "
        "(`lab/results/mechanism/key_subspace/key_subspace.json`). With code and BPE tokens an action line is several "
        "tokens and every one of their keys counts.",
        "",
        "| model | n | T (from) | keys: T's dim (others) | read-out q: T's dim (others) | state PCA-90: T's dim "
        "(others) | rule (k) | rule (q) | post hoc: T's keys where it reflects (tokens) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        d = r["decision"]
        if not d.get("has_tracking_head"):
            lines.append(
                f"| `{r['name']}` | {r['n']} | none (top clip drop {r['clip_drop']:.3f}) | – | – | – | – | – | – |"
            )
            continue
        origin = "mechanism JSON" if r["tracking_head_from"].endswith(".json") else "beta-clip here"
        lines.append(
            f"| `{r['name']}` | {r['n']} | {r['tracking_head']} ({origin}) | {cell(r, 'key_dim_99', 'key')} "
            f"| {cell(r, 'q_dim_99', 'q')} | {cell(r, 'pca_dim_90', 'pca')} "
            f"| {'holds' if d['key_rule'] else 'fails'} | {'holds' if d['q_rule'] else 'fails'} | {reflecting(r)} |"
        )
    k_hold, found, k_verdict = verdict(records, "key_rule")
    q_hold, _, q_verdict = verdict(records, "q_rule")
    low, _, _ = verdict(records, "key_lowest")
    q_low, _, _ = verdict(records, "q_lowest")
    p_hold, _, p_verdict = verdict(records, "pca_lowest")
    n_hold, _, _ = verdict(records, "key_equals_n")
    k1_hold, _, k1_verdict = verdict(records, "key_strictly_lowest")
    k2_hold, _, k2_verdict = verdict(records, "key_equals_n_minus_1")
    lines += [
        "",
        f"Over the {found} models with a tracking head: rule (k) holds in {k_hold} of {found}, the keys' subspace "
        f"claim is **{k_verdict}** (T's key dimension the lowest, ties counted, in {low} of {found}; "
        f"equal to n in {n_hold} of {found}); rule (q) "
        f"holds in {q_hold} of {found}: **{q_verdict}** (T's query dimension the lowest in {q_low} of {found}); "
        "the state-PCA reading (rule (c) on these traces) has T "
        f"lowest in {p_hold} of {found}: {p_verdict}. The last column was added after the rest was seen and is "
        "no part of the rules: T's keys on the tokens where T reflects (beta > 1.9), of any kind.",
        "",
        "Restated (the module docstring's rules (k1) and (k2), written after this table was seen): the paper's "
        f"claim that the tracking head's keys span fewer dimensions than the other heads' (T strictly lowest) holds in "
        f"{k1_hold} of {found}: **{k1_verdict}** (tied for lowest in {low - k1_hold} more); the swap prediction, T's "
        f"key dimension = n - 1, holds in {k2_hold} of {found}: **{k2_verdict}** (= n in {n_hold}).",
        "",
        END,
    ]
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
    parser.add_argument("models", nargs="*", type=Path, help="checkpoint or run folders of DeltaNet [0, 2] models")
    parser.add_argument("--out", type=Path, default=Path("lab/results/mechanism/key_subspace"))
    parser.add_argument(
        "--mechanism", type=Path, default=Path("lab/results/mechanism"), help="mechanism_seeds.py JSONs"
    )
    parser.add_argument("--table-only", action="store_true", help="only print the section from OUT's JSON")
    parser.add_argument("--readme", type=Path, help="also (re)write the section into this README")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for path in args.models:
        entry.existing(path, "checkpoint or run folder")
    target = args.out / "key_subspace.json"
    records = json.loads(target.read_text()) if target.is_file() else []
    if not args.table_only:
        done = {r["source"] for r in records}
        for path in args.models:
            if path.as_posix() in done:
                continue
            record = measure(path, args.mechanism)
            records.append(record)
            args.out.mkdir(parents=True, exist_ok=True)
            write_json_atomic(target, records)  # after each model: an interrupted run keeps what it measured
            print(f"{path}: T {record['tracking_head']} {record['decision']}", file=sys.stderr)
    for record in records:  # the rules from the stored measurements (a rule added later applies to old records)
        record["decision"] = decide(record)
    text = section(records)
    if args.readme is not None:
        append_section(args.readme, text)
    print(text)
    return 0


if __name__ == "__main__":
    entry.run(main)
