"""The paper's claims, judged from the sweep's result files alone.

Each claim is judged per setting (group and tokenizer) with the thresholds of the grid file:
"holds", "does not hold", "not measured" when the cells it needs have no result, or "not testable"
when they have results but the claim's premise failed: a claim about the cells that learned when
none did, or "needs dense reveals" when the model did not learn with dense ones either (a model too
small or too briefly trained to learn at all says nothing about reveal spacing). The rules, in words,
are `claim_rules`; the numbers each verdict rests on travel with it as evidence.

With several seeds per cell, a claim is judged on the seed mean of every cell and on every seed
alone; it holds only when it holds for the mean and for at least two thirds of the seeds (2 of 3),
and a cell counts only once all its seeds have results (`spread` aggregates them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean
from typing import Any

from deltalens.grids.grid import Thresholds

HOLDS, DOES_NOT_HOLD, NOT_MEASURED, NOT_TESTABLE = "holds", "does not hold", "not measured", "not testable"


@dataclass
class Claim:
    key: str
    statement: str  # the paper's claim, in words
    setting: str  # the cells it was judged on, e.g. "S3 statement"
    verdict: str  # HOLDS, DOES_NOT_HOLD, NOT_MEASURED or NOT_TESTABLE
    evidence: str  # the numbers the verdict rests on, or what is missing
    budget_bound: bool = False  # holds, but a cell it rests on was still rising on pace to learn


CLAIMS = {
    "neg-sparse": "DeltaNet β∈[0,2] learns to track with sparse reveals",
    "neg-extrapolates": "DeltaNet β∈[0,2] extrapolates to longer traces",
    "pos-fails": "DeltaNet β∈[0,1] fails with sparse reveals",
    "transformer-dense": "the Transformer needs dense reveals",
    "transformer-no-extrapolation": "the Transformer does not extrapolate",
    # judged on the full-action variant cells (lab/experiments/report/transformer_variants_section.py), not by _judge
    "transformer-full": "the Transformer fails on full permutations even with dense reveals",
}


# the sweep architecture (a [models] key) each claim is about: a sweep without it has no such claim
CLAIM_ARCH = {
    "neg-sparse": "deltanet-neg",
    "neg-extrapolates": "deltanet-neg",
    "pos-fails": "deltanet-pos",
    "transformer-dense": "transformer",
    "transformer-no-extrapolation": "transformer",
}

# the reveal spacings a claim compares: a setting whose grid lacks them does not ask it (the code
# grid has no k = 1 cell, so "needs dense reveals" is not a question there)
CLAIM_SPACINGS = {"neg-sparse": ("sparse",), "pos-fails": ("sparse",), "transformer-dense": ("dense", "sparse")}

# claims that compare sparse reveals with dense ones: untestable once the dense (k = 1) cell is
# complete and did not learn, whatever the sparse cells (which may still be training) show
NEEDS_DENSE = {"transformer-dense"}


def seeds_needed(n_seeds: int) -> int:
    """How many seeds a verdict must hold for: two thirds of them (2 of 3)."""
    return math.ceil(2 * n_seeds / 3)


def claim_rules(t: Thresholds) -> dict[str, str]:
    """How each verdict is computed, in words, for the report."""
    return {
        "neg-sparse": f"holds if deltanet-neg reaches ≥ {t.learned:g} at 1x at every spacing k > 1",
        "neg-extrapolates": f"holds if every deltanet-neg cell that learned (≥ {t.learned:g} at 1x) stays "
        f"≥ {t.extrapolates:g} at the longest length",
        "pos-fails": f"holds if deltanet-pos stays < {t.learned:g} at 1x at every spacing k > 1, and, where the "
        "matched-budget lr grid ran, at every lr tried there on every such k (one that learns or is mixed at "
        "some lr: does not hold)",
        "transformer-dense": f"holds if the Transformer reaches ≥ {t.learned:g} at 1x with k = 1 and stays "
        f"< {t.learned:g} at every k > 1; where it also ran at another lr (lab/results/transformer_lr/), over every lr "
        "(one that learns a k > 1 cell: does not hold)",
        "transformer-no-extrapolation": f"holds if every Transformer cell that learned (≥ {t.learned:g} at 1x) "
        f"falls < {t.extrapolates:g} at the longest length, at every lr it ran at",
        "transformer-full": f"holds if the Transformer learns the full-action k = 1 cell (≥ {t.learned:g} at 1x) "
        f"and falls < {t.extrapolates:g} at its longest length; not testable when it does not learn it at 1x (a "
        "claim about generalising what was learned)",
    }


def accuracy_at(result: dict[str, Any], multiple: float) -> float | None:
    """Held-out reveal accuracy at `multiple` x the training length (None: not evaluated)."""
    for row in result["eval"]["lengths"]:
        if row.get("x_train") == multiple and "reveal_accuracy" in row:
            return row["reveal_accuracy"]
    return None


def longest_accuracy(result: dict[str, Any]) -> tuple[float, float] | None:
    """(multiple, accuracy) at the longest length beyond 1x that was evaluated."""
    rows = [r for r in result["eval"]["lengths"] if "reveal_accuracy" in r and r.get("x_train", 0) > 1]
    if not rows:
        return None
    row = max(rows, key=lambda r: r["x_train"])
    return row["x_train"], row["reveal_accuracy"]


def family_key(result: dict[str, Any]) -> tuple[str, str, str, int]:
    """(group, tokenizer, arch, spacing): the cell a result is one seed of."""
    return result["group"], result["tokenizer"], result["arch"], result["spacing"]


def spread(results: list[dict[str, Any]], seeds: int | None = None) -> list[dict[str, Any]]:
    """One summary per cell over its seeds: `eval.lengths` rows carry the seed mean as
    `reveal_accuracy` plus `min`, `max` and `n`; `seeds`, `wall_time_s` (summed) and `complete`
    (all `seeds` have results; True when `seeds` is None) beside them."""
    families: dict[tuple, list[dict[str, Any]]] = {}
    for result in results:
        families.setdefault(family_key(result), []).append(result)
    summaries = []
    for (group, tokenizer, arch, spacing), runs in families.items():
        runs = sorted(runs, key=lambda r: r.get("seed", 0))
        rows = []
        multiples = sorted({row.get("x_train") for r in runs for row in r["eval"]["lengths"]} - {None})
        for m in multiples:
            values = [a for r in runs if (a := accuracy_at(r, m)) is not None]
            actions = next(row["actions"] for r in runs for row in r["eval"]["lengths"] if row.get("x_train") == m)
            row = {"actions": actions, "x_train": m}
            if values:
                row.update(reveal_accuracy=mean(values), min=min(values), max=max(values), n=len(values))
            else:
                row["error"] = next(
                    r2.get("error", "not evaluated")
                    for r in runs
                    for r2 in r["eval"]["lengths"]
                    if r2.get("x_train") == m
                )
            rows.append(row)
        summaries.append(
            {
                "group": group,
                "tokenizer": tokenizer,
                "arch": arch,
                "spacing": spacing,
                "seeds": [r.get("seed", 0) for r in runs],
                "runs": runs,
                "complete": seeds is None or len(runs) >= seeds,
                "wall_time_s": sum(r.get("wall_time_s", 0) for r in runs),
                "eval": {"lengths": rows},
            }
        )
    return summaries


def evaluate_claims(
    results: list[dict[str, Any]],
    thresholds: Thresholds | None = None,
    settings: Sequence[str] = (),
    seeds: int | None = None,
    expected: dict[str, set[tuple[str, int]]] | None = None,
    archs: set[str] | None = None,
) -> list[Claim]:
    """Judge the paper's claims per setting (group and tokenizer), from result dicts alone;
    `settings` (e.g. "S3 statement") are judged even when none of their cells has a result.
    `seeds`: how many seeds each cell has in the sweep (cells with fewer results do not count).
    `expected`: setting -> the sweep's (arch, k) cells; an architecture is judged in a setting only
    once all of its cells there are complete (a claim over "every k > 1" never rests on some k).
    `archs`: the sweep's architectures; claims about others are left out (None: every claim)."""
    t = thresholds or Thresholds()
    summaries = [s for s in spread(results, seeds) if s["complete"]]
    by_setting: dict[str, list[dict[str, Any]]] = {name: [] for name in settings}
    for summary in summaries:
        by_setting.setdefault(f"{summary['group']} {summary['tokenizer']}", []).append(summary)
    complete = {setting: list(cells) for setting, cells in by_setting.items()}  # before waiting for whole archs
    waiting: dict[str, list[tuple[str, int]]] = {}
    if expected is not None:
        for setting, cells in by_setting.items():
            have = {(c["arch"], c["spacing"]) for c in cells}
            missing = sorted(expected.get(setting, set()) - have)
            incomplete_archs = {arch for arch, _ in missing}
            by_setting[setting] = [c for c in cells if c["arch"] not in incomplete_archs]
            waiting[setting] = missing
    claims = []
    for setting, cells in by_setting.items():
        on_mean = _judge({(c["arch"], c["spacing"]): c for c in cells}, t)
        n_seeds = max((len(c["runs"]) for c in cells), default=1)
        per_seed = [
            _judge({(c["arch"], c["spacing"]): c["runs"][i] for c in cells if len(c["runs"]) > i}, t)
            for i in range(n_seeds)
        ]
        needed = seeds_needed(n_seeds)
        in_setting = {arch for arch, _ in expected[setting]} if expected is not None and setting in expected else None
        for key, (verdict, evidence) in on_mean.items():
            if (archs is not None and CLAIM_ARCH[key] not in archs) or (
                in_setting is not None and CLAIM_ARCH[key] not in in_setting
            ):
                continue  # a claim about an architecture this sweep (or this setting of it) does not train
            if expected is not None and setting in expected and not _asked(key, expected[setting]):
                continue  # the setting's grid lacks the spacings the claim compares
            dense_failed = _dense_failed(complete[setting], CLAIM_ARCH[key], t) if key in NEEDS_DENSE else None
            if dense_failed:
                verdict, evidence = NOT_TESTABLE, dense_failed
            elif verdict in (HOLDS, DOES_NOT_HOLD) and n_seeds > 1:
                holding = sum(judged[key][0] == HOLDS for judged in per_seed)
                if verdict == HOLDS and holding < needed:
                    verdict = DOES_NOT_HOLD
                evidence = f"seed mean {evidence}; holds for {holding} of {n_seeds} seeds"
            elif verdict == NOT_MEASURED and waiting.get(setting):
                pending = [f"{arch} k={k}" for arch, k in waiting[setting] if arch == CLAIM_ARCH[key]]
                if pending:
                    evidence = f"{evidence} (cells not complete yet: {', '.join(pending)})"
            claims.append(Claim(key, CLAIMS[key], setting, verdict, evidence))
    return claims


Cells = dict[tuple[str, int], dict[str, Any]]  # (arch, spacing) -> result, within one setting


def _asked(key: str, cells: set[tuple[str, int]]) -> bool:
    """Whether a setting's grid cells (arch, k) have the spacings claim `key` compares."""
    spacings = {k for arch, k in cells if arch == CLAIM_ARCH[key]}
    has = {"dense": 1 in spacings, "sparse": any(k > 1 for k in spacings)}
    return all(has[need] for need in CLAIM_SPACINGS.get(key, ()))


def _dense_failed(cells: list[dict[str, Any]], arch: str, t: Thresholds) -> str | None:
    """Why `arch` counts as not having learned with dense reveals (its complete k = 1 cell is below
    the threshold for the seed mean, or for more than a third of its seeds); None if it learned or
    has no complete k = 1 cell."""
    dense = next((c for c in cells if c["arch"] == arch and c["spacing"] == 1), None)
    if dense is None:
        return None
    row = next((r for r in dense["eval"]["lengths"] if r.get("x_train") == 1), None)
    if row is None or "reveal_accuracy" not in row:
        return None
    per_seed = [a for r in dense["runs"] if (a := accuracy_at(r, 1)) is not None]
    learned = sum(a >= t.learned for a in per_seed)
    if row["reveal_accuracy"] >= t.learned and learned >= seeds_needed(len(per_seed)):
        return None
    spread_text = f" [{row['min']:.3f}–{row['max']:.3f}]" if row.get("n", 1) > 1 else ""
    return (
        f"did not learn with dense reveals: k=1 at 1x {row['reveal_accuracy']:.3f}{spread_text}, "
        f"{learned} of {len(per_seed)} seeds ≥ {t.learned:g}; with no dense baseline, sparse reveals "
        "cannot be what it needs (see the learning-rate search)"
    )


def _at_1x(cells: Cells, arch: str, sparse: bool) -> list[tuple[int, float]]:
    """[(k, reveal accuracy at 1x)] of `arch`'s sparse (k > 1) or dense (k = 1) cells."""
    return sorted(
        (k, a)
        for (name, k), r in cells.items()
        if name == arch and (k > 1) == sparse and (a := accuracy_at(r, 1)) is not None
    )


def _learned_longest(cells: Cells, arch: str, t: Thresholds) -> list[tuple[int, float, float]]:
    """[(k, multiple, accuracy at the longest length)] of `arch`'s cells that learned at 1x."""
    rows = []
    for (name, k), r in sorted(cells.items()):
        a, longest = accuracy_at(r, 1), longest_accuracy(r)
        if name == arch and a is not None and a >= t.learned and longest is not None:
            rows.append((k, *longest))
    return rows


def _judge(cells: Cells, t: Thresholds) -> dict[str, tuple[str, str]]:
    """claim key -> (verdict, evidence) for one setting; the rules are `claim_rules`."""

    def listing(pairs) -> str:
        return "1x: " + ", ".join(f"k={k}: {a:.3f}" for k, a in pairs)

    def long_listing(rows) -> str:
        return ", ".join(f"k={k}: {a:.3f} at {m:g}x" for k, m, a in rows)

    def verdict(ok: bool) -> str:
        return HOLDS if ok else DOES_NOT_HOLD

    def extrapolation(arch: str, ok) -> tuple[str, str]:
        """A claim about `arch`'s cells that learned: each one's accuracy at the longest length passes `ok`."""
        rows = _learned_longest(cells, arch, t)
        if rows:
            return verdict(all(ok(a) for *_, a in rows)), long_listing(rows)
        at_1x = [
            (k, a) for (name, k), r in sorted(cells.items()) if name == arch and (a := accuracy_at(r, 1)) is not None
        ]
        if at_1x and all(a < t.learned for _, a in at_1x):  # it has results, none learned: nothing to extrapolate
            return NOT_TESTABLE, f"no {arch} cell learned (≥ {t.learned:g} at 1x); {listing(at_1x)}"
        return NOT_MEASURED, f"no {arch} result that learned at 1x and was evaluated beyond it"

    out = {}
    sparse = _at_1x(cells, "deltanet-neg", sparse=True)
    out["neg-sparse"] = (
        (verdict(all(a >= t.learned for _, a in sparse)), listing(sparse))
        if sparse
        else (NOT_MEASURED, "no deltanet-neg result with spacing k > 1")
    )
    out["neg-extrapolates"] = extrapolation("deltanet-neg", lambda a: a >= t.extrapolates)
    sparse = _at_1x(cells, "deltanet-pos", sparse=True)
    out["pos-fails"] = (
        (verdict(all(a < t.learned for _, a in sparse)), listing(sparse))
        if sparse
        else (NOT_MEASURED, "no deltanet-pos result with spacing k > 1")
    )
    dense, sparse = _at_1x(cells, "transformer", sparse=False), _at_1x(cells, "transformer", sparse=True)
    if dense and sparse:
        ok = dense[0][1] >= t.learned and all(a < t.learned for _, a in sparse)
        out["transformer-dense"] = (verdict(ok), listing(dense + sparse))
    else:
        missing = " and ".join(n for n, got in (("k = 1", dense), ("k > 1", sparse)) if not got)
        out["transformer-dense"] = (NOT_MEASURED, f"no Transformer result with {missing}")
    out["transformer-no-extrapolation"] = extrapolation("transformer", lambda a: a < t.extrapolates)
    return out
