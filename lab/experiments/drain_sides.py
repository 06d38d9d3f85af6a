"""PFSA-SR drain, linearity or one-sidedness: the two analytical filters, the value gate, and the rule.

The drain adversary (tasks/hidden_block.py) separates two things a linear model of the marginal belief M
(M[i, v - 1] = P(variable i holds v)) might lack:

* **renormalisation**: the linear marginal filter never rescales, so its block mass decays with the horizon;
* **the value side**: its reveal "x shows v" zeroes row x *and column v* (no other variable can hold v). Zeroing
  a column multiplies M on the right (the value side); the delta rule's transitions (I - beta k k^T) S act on
  the left (the key side) only.

Two analytical filters, run in fp32 on the same adversary traces as the models and read out as DeltaNet's
per-head output norm does (the queried row, normalised to sum 1):

* ``mask``, the column-masked filter (tasks.pfsa.run_linear_marginal): exact transitions, the full reveal;
* ``row``, the row-only filter (``reveal="row"``): exact transitions, the reveal sets the revealed row only.

Per horizon and adversary at the query: KL and total variation to the exact posterior, whether the top value
is the exact one, the mass on the probe's value (the value the probe variable shows, which the block cannot
hold), and the block mass. The value-gated DeltaNet (models/lm/value_gated_deltanet.py) adds the value side
to DeltaNet, still linear in the state; ``gate_stats`` shows where its gate closes.

**The rule** (stated before the value-gated runs, lab/results/pfsa_drain/README.md), per (lr, training cycles)
cell of the value-gated DeltaNet ("vgated") beside DeltaNet [0, 2] ("deltanet-neg") at the same setting, on
seed means:

* premise: both cells hold the mixture at H = 4 (KL at least 0.1 below the block-uniform guess on both
  adversaries, as the cause-vs-length rule), else **not testable**;
* **one-sidedness**: the gated gap KL(drain) - KL(no-drain) is below GAP = 0.1 nats at every H up to 256,
  and DeltaNet's gap at H = 256 exceeds 1 nat: for this adversary the barrier is the missing value side, not
  linearity (this contradicts the paper's explanation);
* otherwise the gap persists (the gated gap reaches 0.1 at some H): at the H of its largest gap, on drain,
  **the gate is not learned or used** when the model's mass on the probe's value is at least PROBE = 0.5;
  **support for the renormalisation / precision view** when that mass is below 0.1 and the drain KL is within
  0.1 of the block-uniform guess (the mass spread over the block's values);
* anything else: **mixed**, with the numbers.
"""

from __future__ import annotations

import numpy as np

from deltalens.tasks.hidden_block import hidden_block_adversary
from deltalens.tasks.marginal_belief import point_marginals
from deltalens.tasks.pfsa import run_linear_marginal

FILTERS = {"mask": "column-masked filter (analytical)", "row": "row-only filter (analytical)"}
FILTER_HORIZONS = (4, 8, 16, 32, 64, 128, 256, 512)
GAP, PROBE, SPREAD = 0.1, 0.5, 0.1
RULE_HORIZON = 256  # the gated gap stays below GAP up to here; DeltaNet's gap is read here


def probe_value(trace) -> int:
    """The value the first probe variable holds at the query (the adversary never lets it leak)."""
    return int(trace.states[-1][trace.spec.hidden_block])


def filter_metrics(spec, horizon: int, drain: bool, reveal: str, n_traces: int) -> dict[str, float]:
    """One filter on one adversary at one horizon, means over its traces (module docstring)."""
    rows = []
    for seed in range(n_traces):
        trace = hidden_block_adversary(spec, horizon, seed=seed, drain=drain)
        start = point_marginals(trace.q0).astype(np.float32)
        run = run_linear_marginal(trace.n, trace.q0, trace.events, m0=start, full_reset=False, reveal=reveal)
        before = run.marginals[-2]  # before the query, the last event
        row = before[trace.reveals[-1].variables[0]]
        total = row.sum()
        q = row / total if total > 0 else np.full(len(row), 1.0 / len(row))  # underflowed: nothing to read
        p = np.asarray(trace.posteriors[-1][0].predictive, dtype=np.float64)
        on = p > 0
        rows.append(
            {
                "kl": float(np.sum(p[on] * (np.log(p[on]) - np.log(np.maximum(q[on], 1e-300))))),
                "tv": float(0.5 * np.abs(p - q).sum()),
                "top_right": float(np.argmax(q) == np.argmax(p)),
                "probe_mass": float(q[probe_value(trace) - 1]),
                "block_mass": float(before[: spec.hidden_block].sum()),
            }
        )
    return {key: float(np.mean([r[key] for r in rows])) for key in rows[0]} | {
        "max_tv": float(max(r["tv"] for r in rows))
    }


def filter_record(spec, n_traces: int) -> dict:
    """Both filters on both adversaries at every horizon: {reveal: {H: {adversary: metrics}}}."""
    return {
        reveal: {
            str(h): {
                ("drain" if drain else "no_drain"): filter_metrics(spec, h, drain, reveal, n_traces)
                for drain in (True, False)
            }
            for h in FILTER_HORIZONS
        }
        for reveal in FILTERS
    }


def gate_stats(model, tokenizer, spec, horizon: int = 16, n_traces: int = 8) -> dict[str, list[float]] | None:
    """Where the value gate closes, per "layer.head": [mean over the revealed values' tokens, mean over every
    other token] of the smallest channel's gamma_t, on drain traces at `horizon` (None: no value gate)."""
    import torch

    names = [name for name in model.hook_dict if name.endswith("attn.hook_vgate")]
    if not names:
        return None
    sums: dict[str, list[float]] = {}
    for seed in range(n_traces):
        trace = hidden_block_adversary(spec, horizon, seed=seed, drain=True)
        encoded = tokenizer.encode_trace(trace)
        tokens = torch.tensor([encoded.ids])
        reveal = torch.tensor(encoded.is_reveal, dtype=torch.bool)
        with torch.no_grad():
            _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names)
        for name in names:
            layer = name.split(".")[1]
            smallest = cache[name][0].min(dim=-1).values  # (T, H)
            for head in range(smallest.shape[1]):
                at = sums.setdefault(f"{layer}.{head}", [0.0, 0.0])
                at[0] += float(smallest[reveal, head].mean()) / n_traces
                at[1] += float(smallest[~reveal, head].mean()) / n_traces
    return sums


def seed_mean(records: list[dict], horizon: int, adversary: str, key: str) -> float | None:
    values = [r["horizons"][str(horizon)][adversary].get(key) for r in records]
    return None if any(v is None for v in values) else float(np.mean(values))


def sides_verdict(cells: dict, lr: str, cycles: int, guess: dict, horizons: tuple[int, ...]) -> str:
    """The rule of the module docstring for one (lr, cycles) setting."""
    gated, plain = cells.get(("vgated", cycles, lr), []), cells.get(("deltanet-neg", cycles, lr), [])
    where = f"lr {lr}, {cycles} cycles"
    if len(gated) < 3 or len(plain) < 3:
        return f"not measured at {where}: {len(gated)} value-gated and {len(plain)} DeltaNet [0, 2] seeds of 3"
    first = horizons[0]
    unheld = [
        label
        for label, records in (("value-gated DeltaNet", gated), ("DeltaNet [0, 2]", plain))
        if max(seed_mean(records, first, adv, "kl") for adv in ("drain", "no_drain")) > guess[str(first)] - GAP
    ]
    if unheld:
        verb = "does" if len(unheld) == 1 else "do"
        return f"not testable at {where}: {' and '.join(unheld)} {verb} not hold the mixture at H = {first}"
    upto = [h for h in horizons if h <= RULE_HORIZON]
    gap = {h: seed_mean(gated, h, "drain", "kl") - seed_mean(gated, h, "no_drain", "kl") for h in upto}
    plain_gap = seed_mean(plain, RULE_HORIZON, "drain", "kl") - seed_mean(plain, RULE_HORIZON, "no_drain", "kl")
    worst = max(gap, key=lambda h: gap[h])
    facts = (
        f"value-gated gap {min(gap.values()):+.2f} to {gap[worst]:+.2f} over H = {upto[0]}-{upto[-1]} "
        f"(largest at H = {worst}); DeltaNet [0, 2] gap at H = {RULE_HORIZON}: {plain_gap:+.2f}"
    )
    if gap[worst] < GAP:
        if plain_gap > 1:
            return f"one-sidedness at {where} ({facts})"
        return f"mixed at {where}: no value-gated gap, but DeltaNet's is not above 1 nat either ({facts})"
    probe = seed_mean(gated, worst, "drain", "probe_mass")
    kl = seed_mean(gated, worst, "drain", "kl")
    measured = "not measured" if probe is None else f"{probe:.2f}"
    facts += f"; at H = {worst} on drain: mass on the probe's value {measured}"
    if probe is None:
        return f"mixed at {where}: the gap persists and the probe's mass was not measured ({facts})"
    if probe >= PROBE:
        return f"gate not learned or used at {where} ({facts})"
    facts += f", drain KL {kl:.2f} (block-uniform guess {guess[str(worst)]:.2f})"
    if probe < SPREAD and abs(kl - guess[str(worst)]) <= SPREAD:
        return f"support for the renormalisation / precision view at {where} ({facts})"
    return f"mixed at {where} ({facts})"


# a head "closes a column at the reveals" when its smallest gamma averages below CLOSED there and at least OPEN
# at every other token (selective: a head whose gate is low everywhere only decays)
CLOSED, OPEN = 0.1, 0.5


def gate_table(cells: dict[tuple[str, int, str], list[dict]]) -> list[str]:
    """The value gate of every value-gated run (its record's `vgate`, `gate_stats` on drain traces at H = 16):
    per head, the smallest channel's gamma at the revealed values' tokens / at every other token, and how many
    heads close a column at the reveals (below CLOSED there, at least OPEN elsewhere)."""
    runs = sorted((r for (arch, _, _), records in cells.items() if arch == "vgated" for r in records if r.get("vgate")),
                  key=lambda r: r["name"])  # fmt: skip
    if not runs:
        return ["(no value-gated record yet)"]
    heads = sorted(runs[0]["vgate"], key=lambda h: tuple(int(x) for x in h.split(".")))
    lines = [
        "| run | "
        + " | ".join(f"L{h.split('.')[0]}H{h.split('.')[1]}" for h in heads)
        + " | heads closing at reveals |",
        "|---|" + "---|" * (len(heads) + 1),
    ]
    for record in runs:
        gate = record["vgate"]
        closing = sum(gate[h][0] < CLOSED and gate[h][1] >= OPEN for h in heads)
        cols = " | ".join(f"{gate[h][0]:.3f} / {gate[h][1]:.2f}" for h in heads)
        lines.append(f"| {record['name']} | {cols} | {closing} of {len(heads)} |")
    lines += [
        "",
        "Cells: the smallest channel's gamma averaged over the revealed values' tokens / over every other token, "
        f"8 drain traces at H = 16; a head closes a column at the reveals when the first is below {CLOSED} and the "
        f"second at least {OPEN}.",
    ]
    return lines
