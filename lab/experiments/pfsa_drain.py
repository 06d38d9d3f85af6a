"""PFSA-SR, cause vs length: one model on the drain and the no-drain adversary at every horizon.

    python3 -m lab.experiments.pfsa_drain RUN/last --name deltanet-neg-c16-lr3e-3-s0 [--out lab/results/pfsa_drain]
    python3 -m lab.experiments.pfsa_drain --table [--out lab/results/pfsa_drain]    # seed means and the verdict
    python3 -m lab.experiments.pfsa_drain --seeds [--out lab/results/pfsa_drain]    # one row per run
    python3 -m lab.experiments.pfsa_drain --readme lab/results/pfsa_drain/README.md  # both, between its markers
    python3 -m lab.experiments.pfsa_drain --filters [--out lab/results/pfsa_drain]  # the two analytical filters

The two adversaries (tasks/hidden_block.py, ``hidden_block_adversary(..., drain=True|False)``) write the same
kinds of lines, make the same block moves and ask the same query for a seed, and their exact posteriors are
equal at every horizon H: "no leak" says nothing about the block in either. Only the linear marginal filter's
block mass differs: the drain adversary leaks block <-> probe and the reveal deletes the leaked mass (the block
mass falls roughly 0.9^H), the no-drain one leaks between the two probes (the block mass stays whole). So a
model whose error grows with H on drain but not on no-drain is hurt by the missing renormalisation (the
paper's theory); one whose curves coincide and turn where its training length ends has a length problem.

Per horizon and adversary, at the query (32 traces, the same for every model):
* ``kl``: KL(exact || model) over the values;
* ``top_right``: the model's most likely value is the exact posterior's (the arrangement it believes in);
* ``calibration``: |q_top / (q_top + q_second) - p_top| on the two values the exact mixture puts mass on
  (0: the mixture's odds reproduced), and ``support``: the model's mass on those two values;
* ``probe_mass``: the model's mass on the probe variable's value, which the block cannot hold (records
  written before this metric existed lack it).
A value-gated model's record also has ``vgate`` (lab/experiments/drain_sides.py ``gate_stats``). The one-sidedness
rule, its analytical filters and the value-gated DeltaNet's verdict are lab/experiments/drain_sides.py's.

The decision rule, fixed before the runs (``verdict`` below):
* turning point of a curve: the first H whose seed-mean KL exceeds the KL at the smallest H by TURN = 0.1 nats;
  it "moves" with training length when the 64-cycle models' turning point is at least twice the 16-cycle ones'
  (or the 16-cycle models turn inside the grid and the 64-cycle ones do not);
* supports the theory: DeltaNet [0, 2]'s gap KL(drain) - KL(no-drain) exceeds GAP = 0.1 nats at the largest H
  and grows with H (the gap at the largest H exceeds the gap at the smallest H by GAP), the LSTM's gap stays
  within GAP at every H, and DeltaNet's turning point does not move;
* length generalisation: DeltaNet's drain and no-drain curves coincide (|gap| < GAP at every H) and its turning
  point moves;
* anything else: mixed, with the reason.
Premise (as the grid's "did it learn" rule): a model is compared only if it holds the mixture at the smallest H,
its seed-mean KL there below the block-uniform guess (1/h on each block value: knows which values the block
holds, not their arrangement) by at least TURN on both adversaries; otherwise the verdict is "not testable".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from deltalens.cli import arguments
from deltalens.core.atomic import write_json_atomic, write_text_atomic
from deltalens.loading.opened import open_checkpoint
from deltalens.tasks.hidden_block import hidden_block_adversary, linear_block_mass
from deltalens.tasks.prob_spec import ProbTraceSpec
from deltalens.training.belief_kl import reveal_kl
from lab.experiments import drain_sides, entry

HORIZONS = (4, 8, 16, 32, 64, 128, 256)
TURN, GAP = 0.1, 0.1
ARCHS = {
    "deltanet-neg": "DeltaNet [0, 2]",
    "deltanet-renorm": "renormalised DeltaNet",
    "lstm": "LSTM",
    "lstm-wide": "LSTM, 128 wide, 12,000 steps",
    "hybrid": "hybrid DeltaNet + M²RNN",
    "m2rnn": "M²RNN",
    "m2rnn-8k": "M²RNN, 8,000 steps",
    "vgated": "value-gated DeltaNet",
}


def query_rows(model, tokenizer, spec, horizon: int, drain: bool, n_traces: int) -> list[dict]:
    """The query's KL, top-value agreement and mixture calibration on each adversary trace."""
    traces = [hidden_block_adversary(spec, horizon, seed=i, drain=drain) for i in range(n_traces)]
    kl = reveal_kl(model, tokenizer, traces, kind="drain" if drain else "no-drain", batch_size=8)
    rows = []
    for row in kl.groupby("trace").tail(1).itertuples():  # the query is each trace's last reveal
        p, q = np.asarray(row.p), np.asarray(row.q)
        probe = drain_sides.probe_value(traces[row.trace])
        two = np.argsort(-p)[:2]  # the mixture's two values (the opening's random swap)
        top, second = q[two[0]], q[two[1]]
        rows.append(
            {
                "kl": float(row.kl),
                "top_right": float(np.argmax(q) == two[0]),
                "calibration": float(abs(top / max(top + second, 1e-12) - p[two[0]])),
                "support": float(top + second),
                "probe_mass": float(q[probe - 1]),
            }
        )
    return rows


def evaluate(path: Path, n_traces: int) -> dict:
    checkpoint = open_checkpoint(path)
    model, tokenizer, spec = checkpoint.model, checkpoint.tokenizer, checkpoint.spec
    started = time.perf_counter()
    record: dict = {"checkpoint": str(path), "spec": spec.to_dict(), "horizons": {}}
    for horizon in HORIZONS:
        entry = {}
        for drain in (True, False):
            rows = query_rows(model, tokenizer, spec, horizon, drain, n_traces)
            entry["drain" if drain else "no_drain"] = {
                key: float(np.mean([r[key] for r in rows]))
                for key in ("kl", "top_right", "calibration", "support", "probe_mass")
            }
            traces = [hidden_block_adversary(spec, horizon, seed=i, drain=drain) for i in range(4)]
            block = [linear_block_mass(trace)[-2] for trace in traces]
            entry["drain" if drain else "no_drain"]["linear_block_mass"] = float(np.mean(block))
        record["horizons"][str(horizon)] = entry
        print(f"H={horizon}: drain {entry['drain']['kl']:.3f}, no-drain {entry['no_drain']['kl']:.3f}", flush=True)
    gate = drain_sides.gate_stats(model, tokenizer, spec)
    if gate is not None:
        record["vgate"] = gate
    meta = checkpoint.meta.get("metrics") or {}
    record["training_metrics"] = meta
    record["eval_s"] = round(time.perf_counter() - started, 1)
    return record


# --- the table and the verdict ---------------------------------------------------------------


def block_uniform_kl(spec, horizon: int, n_traces: int = 32) -> float:
    """KL(exact || 1/h on each block value) at the query, the same traces as the models (both adversaries'
    queries have the same exact posterior, so one adversary is enough)."""
    h, kls = spec.hidden_block, []
    for i in range(n_traces):
        p = np.asarray(hidden_block_adversary(spec, horizon, seed=i).posteriors[-1][0].predictive)
        kls.append(float(sum(x * np.log(x * h) for x in p if x > 0)))
    return float(np.mean(kls))


def read_records(folder: Path) -> dict[tuple[str, int, str], list[dict]]:
    """(arch, training cycles, lr) -> the records of its seeds."""
    cells: dict[tuple[str, int, str], list[dict]] = {}
    for path in sorted(folder.glob("*-c*-lr*-s[0-9]*.json")):
        stem = path.stem
        arch, rest = stem.rsplit("-c", 1)
        cycles, lr_seed = rest.split("-lr", 1)
        lr = lr_seed.rsplit("-s", 1)[0]
        record = json.loads(path.read_text())
        record["name"] = stem
        cells.setdefault((arch, int(cycles), lr), []).append(record)
    return cells


def curve(records: list[dict], adversary: str, key: str = "kl") -> np.ndarray:
    return np.array([np.mean([r["horizons"][str(h)][adversary][key] for r in records]) for h in HORIZONS])


def turning_point(kl: np.ndarray) -> int | None:
    over = np.nonzero(kl > kl[0] + TURN)[0]
    return HORIZONS[int(over[0])] if len(over) else None


def moves(short: int | None, long: int | None) -> bool:
    if short is None:
        return False
    return long is None or long >= 2 * short


def verdict(cells: dict, lr: str, folder: Path, reference: str = "lstm", reference_cycles=(16, 64)) -> str:
    """The rule of the module docstring, on the seed means of one lr. `reference` is the non-linear arm
    (the LSTM; the wider LSTM of lab/grids/pfsa_drain/lstm-wide-c16.toml stands in for it, at 16 cycles only, when
    the 64-wide ones never hold the mixture)."""
    need = [("deltanet-neg", c) for c in (16, 64)] + [(reference, c) for c in reference_cycles]
    missing = [f"{a} c{c}" for a, c in need if len(cells.get((a, c, lr), [])) < 3]
    if missing:
        return f"not measured at lr {lr}: fewer than 3 seeds for {', '.join(missing)}"
    gaps = {
        c: curve(cells[("deltanet-neg", c, lr)], "drain") - curve(cells[("deltanet-neg", c, lr)], "no_drain")
        for c in (16, 64)
    }
    reference_gap = max(
        np.abs(curve(cells[(reference, c, lr)], "drain") - curve(cells[(reference, c, lr)], "no_drain")).max()
        for c in reference_cycles
    )
    guess = json.loads((folder / "guesses.json").read_text())["block_uniform"]
    unlearned = [
        f"{a} c{c}"
        for a, c in need
        if max(curve(cells[(a, c, lr)], adv)[0] for adv in ("drain", "no_drain")) > guess[str(HORIZONS[0])] - TURN
    ]
    if unlearned:
        return (
            f"not testable at lr {lr}: {', '.join(unlearned)} do not hold the mixture at H = {HORIZONS[0]} "
            f"(KL not {TURN} below the block-uniform guess, {guess[str(HORIZONS[0])]:.2f})"
        )
    turns = [turning_point(curve(cells[("deltanet-neg", c, lr)], "drain")) for c in (16, 64)]
    moved = moves(*turns)
    theory = all(g[-1] > GAP and g[-1] - g[0] > GAP for g in gaps.values()) and reference_gap < GAP and not moved
    length = all(np.abs(g).max() < GAP for g in gaps.values()) and moved
    facts = (
        f"DeltaNet [0, 2] gap at H = {HORIZONS[-1]}: {gaps[16][-1]:.2f} (c16), {gaps[64][-1]:.2f} (c64); "
        f"{ARCHS.get(reference, reference)}'s largest |gap| {reference_gap:.2f}; "
        f"DeltaNet's turning point {turns[0]} (c16) -> {turns[1]} (c64)"
    )
    if theory:
        return f"supports the theory at lr {lr} ({facts})"
    if length:
        return f"length generalisation at lr {lr} ({facts})"
    return f"mixed at lr {lr} ({facts})"


def table(folder: Path) -> list[str]:
    cells = read_records(folder)
    guess = json.loads((folder / "guesses.json").read_text())["block_uniform"]
    lines = [
        "| model | train cycles | lr | seeds | "
        + " | ".join(f"H={h}" for h in HORIZONS)
        + " | turn (drain / no-drain) |",
        "|---|---|---|---|" + "---|" * len(HORIZONS) + "---|",
    ]
    for (arch, cycles, lr), records in sorted(cells.items()):
        d, n = curve(records, "drain"), curve(records, "no_drain")
        cols = " | ".join(f"{a:.2f} / {b:.2f}" for a, b in zip(d, n))
        lines.append(
            f"| {ARCHS.get(arch, arch)} | {cycles} | {lr} | {len(records)} | {cols} | "
            f"{turning_point(d)} / {turning_point(n)} |"
        )
    lines.append("| block-uniform guess | | | | " + " | ".join(f"{guess[str(h)]:.2f}" for h in HORIZONS) + " | |")
    lines.append("")
    lines.append("Cells: seed-mean KL at the query, drain / no-drain (nats).")
    for lr in sorted({lr for _, _, lr in cells}):
        lines.append(f"- Verdict: {verdict(cells, lr, folder)}")
        if ("lstm-wide", 16, lr) in cells:
            lines.append(
                "- With the wider, longer-trained LSTM as the non-linear reference (c16 only, stated before its "
                f"runs): {verdict(cells, lr, folder, reference='lstm-wide', reference_cycles=(16,))}"
            )
        for cycles in (16, 64):
            if ("vgated", cycles, lr) in cells:
                lines.append(
                    "- Linearity or one-sidedness (lab/experiments/drain_sides.py, stated before the value-gated "
                    "runs): " + drain_sides.sides_verdict(cells, lr, cycles, guess, HORIZONS)
                )
    return lines


def probe_table(folder: Path) -> list[str]:
    """Mass on the probe's value at the query on drain (no-drain), by H: every cell whose runs all have it,
    and the two analytical filters (filters.json, written by --filters)."""
    cells = read_records(folder)
    lines = [
        "| model | train cycles | lr | seeds | " + " | ".join(f"H={h}" for h in HORIZONS) + " |",
        "|---|---|---|---|" + "---|" * len(HORIZONS),
    ]
    for (arch, cycles, lr), records in sorted(cells.items()):
        measured = [r for r in records if "probe_mass" in r["horizons"][str(HORIZONS[0])]["drain"]]
        if not measured:
            continue
        d, n = curve(measured, "drain", "probe_mass"), curve(measured, "no_drain", "probe_mass")
        cols = " | ".join(f"{a:.2f} / {b:.2f}" for a, b in zip(d, n))
        lines.append(f"| {ARCHS.get(arch, arch)} | {cycles} | {lr} | {len(measured)} of {len(records)} | {cols} |")
    filters = folder / "filters.json"
    if filters.is_file():
        record = json.loads(filters.read_text())
        for reveal, label in drain_sides.FILTERS.items():
            at = [record[reveal][str(h)] for h in HORIZONS]
            cols = " | ".join(f"{r['drain']['probe_mass']:.2f} / {r['no_drain']['probe_mass']:.2f}" for r in at)
            lines.append(f"| {label} | | | | {cols} |")
    lines += ["", "Cells: seed-mean mass on the probe's value at the query, drain / no-drain (exact: 0)."]
    return lines


def _show(fmt: str, x: float) -> str:
    """x in fmt, a rounding error below zero shown as 0 ("-0.00" reads as a sign)."""
    return fmt.format(x if abs(x) > 5e-3 or "e" in fmt else 0.0)


def filter_table(folder: Path) -> list[str]:
    """The analytical filters (filters.json): KL, top value right, block mass, by H up to 512."""
    record = json.loads((folder / "filters.json").read_text())
    hs = drain_sides.FILTER_HORIZONS
    lines = [
        "| filter | quantity | " + " | ".join(f"H={h}" for h in hs) + " |",
        "|---|---|" + "---|" * len(hs),
    ]
    for reveal, label in drain_sides.FILTERS.items():
        for key, name, fmt in (
            ("kl", "KL (nats)", "{:.2f}"),
            ("max_tv", "largest TV to the exact posterior", "{:.1e}"),
            ("top_right", "top value right", "{:.2f}"),
            ("block_mass", "block mass (of 3)", "{:.2g}"),
        ):
            at = [record[reveal][str(h)] for h in hs]
            cols = " | ".join(f"{_show(fmt, r['drain'][key])} / {_show(fmt, r['no_drain'][key])}" for r in at)
            lines.append(f"| {label.split(' (')[0]} | {name} | {cols} |")
    lines += ["", f"Cells: drain / no-drain, means over {record.get('traces', 32)} adversary traces, fp32."]
    return lines


def holds_mixture(record: dict, guess: dict) -> bool:
    """The premise on one run: its KL at the smallest H at least TURN below the block-uniform guess on both
    adversaries."""
    h = str(HORIZONS[0])
    return max(record["horizons"][h][adv]["kl"] for adv in ("drain", "no_drain")) < guess[h] - TURN


def seed_table(folder: Path) -> list[str]:
    """One row per run: did it hold the mixture, its gap and turning points, and the top value's agreement
    with the exact posterior at H = 16 (the c16 training length) on each adversary."""
    cells = read_records(folder)
    guess = json.loads((folder / "guesses.json").read_text())["block_uniform"]
    lines = [
        f"| model | train cycles | lr | seed | holds the mixture | KL at H={HORIZONS[0]} | gap at H=16 | "
        f"gap at H={HORIZONS[-1]} | turn (drain / no-drain) | top right at H=16 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    held: dict[tuple[str, str], list[bool]] = {}
    for (arch, cycles, lr), records in sorted(cells.items()):
        for record in sorted(records, key=lambda r: r["name"]):
            seed = record["name"].rsplit("-s", 1)[-1]
            d, n = curve([record], "drain"), curve([record], "no_drain")
            ok = holds_mixture(record, guess)
            held.setdefault((arch, lr), []).append(ok)
            top = [record["horizons"]["16"][adv]["top_right"] for adv in ("drain", "no_drain")]
            i16 = HORIZONS.index(16)
            lines.append(
                f"| {ARCHS.get(arch, arch)} | {cycles} | {lr} | {seed} | {'yes' if ok else 'no'} | "
                f"{d[0]:.2f} / {n[0]:.2f} | {d[i16] - n[i16]:+.2f} | {d[-1] - n[-1]:+.2f} | "
                f"{turning_point(d)} / {turning_point(n)} | {top[0]:.2f} / {top[1]:.2f} |"
            )
    lines.append("")
    lines.append(
        "Runs that hold the mixture: "
        + "; ".join(f"{ARCHS.get(a, a)} lr {lr}: {sum(v)} of {len(v)}" for (a, lr), v in sorted(held.items()))
        + "."
    )
    return lines


def figure(folder: Path):
    """Seed-mean KL by horizon, one panel per architecture: drain solid, no-drain dashed, one colour per
    (training cycles, lr) cell, the block-uniform guess dotted."""
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    cells = read_records(folder)
    archs = [a for a in ARCHS if any(arch == a for arch, _, _ in cells)]
    columns = 3
    rows = -(-len(archs) // columns)
    fig = make_subplots(
        rows=rows,
        cols=columns,
        subplot_titles=[ARCHS[a] for a in archs],
        vertical_spacing=0.16,
        horizontal_spacing=0.05,
    )
    guess = json.loads((folder / "guesses.json").read_text())["block_uniform"]
    settings = sorted({(c, lr) for _, c, lr in cells})
    colours = {setting: qualitative.Plotly[i % len(qualitative.Plotly)] for i, setting in enumerate(settings)}
    shown = set()
    for index, arch in enumerate(archs):
        row, col = index // columns + 1, index % columns + 1
        for (a, cycles, lr), records in sorted(cells.items()):
            if a != arch:
                continue
            for adversary, dash in (("drain", "solid"), ("no_drain", "dash")):
                label = f"{cycles} cycles, lr {lr}, {adversary.replace('_', '-')}"
                fig.add_scatter(
                    x=list(HORIZONS),
                    y=curve(records, adversary),
                    mode="lines+markers",
                    name=label,
                    legendgroup=label,
                    showlegend=label not in shown,
                    row=row,
                    col=col,
                    line={"color": colours[(cycles, lr)], "dash": dash},
                    hovertemplate=f"{label}<br>H=%{{x}}: KL %{{y:.2f}} ({len(records)} seeds)<extra></extra>",
                )
                shown.add(label)
        fig.add_scatter(
            x=list(HORIZONS),
            y=[guess[str(h)] for h in HORIZONS],
            mode="lines",
            name="block-uniform guess",
            legendgroup="guess",
            showlegend=index == 0,
            line={"color": "grey", "dash": "dot"},
            row=row,
            col=col,
        )
    # one log y-axis for every panel: the learned models' no-drain KL (~0.05) and the drained one (~4) both show
    fig.update_xaxes(type="log", tickvals=list(HORIZONS), tickangle=0, title_text="H", title_standoff=4)
    fig.update_yaxes(type="log", matches="y", tickvals=[0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5])
    fig.update_yaxes(title_text="KL at the query (nats)", col=1)
    fig.update_layout(
        title="PFSA-SR, drain (solid) vs no-drain (dashed): seed-mean KL(exact || model) by horizon H",
        height=340 * rows + 160,
        width=1300,
        template="plotly_white",
        margin={"t": 90},
        legend={"orientation": "h", "yanchor": "top", "y": -0.1, "x": 0},
    )
    fig.update_annotations(font_size=14)  # the panel titles
    return fig


def write_figure(fig, stem: Path) -> None:
    """HTML (plotly.js written once beside it, so it works offline) and, where kaleido can, PNG."""
    from lab.experiments.report.reproduce import write_pngs

    stem.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(stem.with_suffix(".html"), include_plotlyjs="directory", div_id=f"figure-{stem.name}")
    error = write_pngs([fig], [stem.with_suffix(".png")])
    print(f"figure: {stem}.html" + (f" ({error})" if error else f", {stem}.png"), file=sys.stderr)


def fill_readme(readme: Path, folder: Path) -> None:
    """Rewrite the generated blocks of a README: the lines between ``<!-- table -->`` and ``<!-- /table -->``
    (``table``) and between ``<!-- seeds -->`` and ``<!-- /seeds -->`` (``seed_table``), and where it has their
    markers ``<!-- probe -->`` (``probe_table``), ``<!-- filters -->`` (``filter_table``) and ``<!-- gate -->``
    (``drain_sides.gate_table``); the prose stays."""
    text = readme.read_text()
    blocks = [("table", table(folder)), ("seeds", seed_table(folder))]
    if "<!-- probe -->" in text:  # the later blocks only where the README has their markers
        blocks.append(("probe", probe_table(folder)))
    if "<!-- filters -->" in text and (folder / "filters.json").is_file():
        blocks.append(("filters", filter_table(folder)))
    if "<!-- gate -->" in text:
        blocks.append(("gate", drain_sides.gate_table(read_records(folder))))
    for name, lines in blocks:
        start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
        if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
            raise SystemExit(f"{readme}: needs exactly one {start} ... {end} block")
        head, rest = text.split(start)
        text = head + start + "\n" + "\n".join(lines) + "\n" + end + rest.split(end, 1)[1]
    write_text_atomic(readme, text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", nargs="?", type=Path)
    parser.add_argument("--name", help="the record's name: <arch>-c<cycles>-lr<lr>-s<seed>")
    parser.add_argument("--out", type=Path, default=Path("lab/results/pfsa_drain"))
    parser.add_argument("--traces", type=arguments.COUNT, default=32, help="adversary traces per horizon and adversary")
    parser.add_argument("--table", action="store_true", help="print the markdown table of --out and exit")
    parser.add_argument("--seeds", action="store_true", help="print the per-run table of --out and exit")
    parser.add_argument("--filters", action="store_true", help="write the analytical filters' filters.json to --out")
    parser.add_argument(
        "--readme", type=Path, help="rewrite the two tables in this README, write the figure beside --out, and exit"
    )
    args = parser.parse_args()
    if args.readme:
        fill_readme(args.readme, args.out)
        write_figure(figure(args.out), args.out / "figures" / "drain_vs_no_drain")
        return
    if args.filters:
        first = next(iter(sorted(args.out.glob("*-c*-lr*-s[0-9]*.json"))), None)
        if first is None:
            raise SystemExit(f"{args.out}: no run record to read the adversary's spec from")
        spec = ProbTraceSpec.from_dict(json.loads(first.read_text())["spec"])
        record = drain_sides.filter_record(spec, args.traces) | {"traces": args.traces}
        write_json_atomic(args.out / "filters.json", record)
        print("\n".join(filter_table(args.out)))
        return
    if args.table or args.seeds:
        print("\n".join(table(args.out) if args.table else seed_table(args.out)))
        return
    if args.checkpoint is None or not args.name:
        parser.error("give a checkpoint folder and --name, or --table")
    target = args.out / f"{args.name}.json"
    if target.is_file():
        print(f"{args.name}: done already ({target})")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    record = evaluate(args.checkpoint, args.traces)
    guesses = args.out / "guesses.json"
    if not guesses.is_file():
        spec = ProbTraceSpec.from_dict(record["spec"])
        guess = {str(h): block_uniform_kl(spec, h, args.traces) for h in HORIZONS}
        write_json_atomic(guesses, {"block_uniform": guess, "traces": args.traces})
    write_json_atomic(target, record)
    print(f"{args.name}: written to {target}", file=sys.stderr)


if __name__ == "__main__":
    entry.run(main)
