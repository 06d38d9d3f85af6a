"""The reproduce report: OUT/reproduce.md with the paper's claims judged, a table per setting,
the PFSA-SR section, and figures (HTML always, PNG when kaleido finds a browser).

    report = write_report(sweep, read_results(sweep, "reports/sweep"), Path("reports"), Path("checkpoints"))
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import plotly.io as pio

from deltalens.models.atomic import write_text_atomic
from deltalens.reports.claims import accuracy_at, claim_rules, evaluate_claims
from deltalens.reports.figures import ARCH_LABELS, length_figure, spacing_figure
from deltalens.reports.pfsa_section import pfsa_section
from deltalens.training.grid import cell_config, curriculum


@dataclass
class FigureFiles:
    name: str
    title: str
    html: Path
    png: Path | None  # None when there is no PNG (export failed and none was there)
    png_error: str | None = None  # why this run could not write it
    png_stale: bool = False  # the PNG is an earlier run's: export failed this time, and it was kept


@dataclass
class Report:
    markdown: Path
    claims: list
    figures: list[FigureFiles]
    png_error: str | None  # the first PNG failure, one line naming the fix


def write_report(sweep, statuses, out: Path, pfsa_checkpoints: Path | None = None) -> Report:
    """Write OUT/reproduce.md and OUT/figures/*; a PNG failure leaves the rest intact. With
    ``pfsa_checkpoints`` the report gains the PFSA-SR section (pfsa_section.py)."""
    section = pfsa_section(pfsa_checkpoints) if pfsa_checkpoints is not None else None
    results = [s.result for s in statuses if s.result is not None]
    claims = evaluate_claims(results, sweep.thresholds, settings=[s.cell.setting for s in statuses])
    figures_dir = out / "figures"
    figures_dir.mkdir(parents=True, exist_ok=True)
    figures, png_error = [], None
    for name, title, fig in [
        ("accuracy_vs_spacing", "accuracy vs reveal spacing", spacing_figure(results, sweep.thresholds)),
        ("accuracy_vs_length", "accuracy vs trace length (extrapolation)", length_figure(results, sweep.thresholds)),
        *(section.figures if section else []),
    ]:
        html, png = figures_dir / f"{name}.html", figures_dir / f"{name}.png"
        # plotly.js is written once beside the figures (figures/plotly.min.js), so they work offline
        fig.write_html(html, include_plotlyjs="directory")
        error = png_error or _write_png(fig, png)  # after one failure (no browser) the others fail alike
        if error:
            png_error = png_error or error
        # a PNG that cannot be regenerated is kept (the report says it is an earlier run's), never deleted
        kept = png.is_file()
        shown = png if kept or not error else None
        figures.append(FigureFiles(name, title, html, shown, error, png_stale=bool(error and kept)))
    markdown = out / "reproduce.md"
    write_text_atomic(
        markdown, render_markdown(sweep, statuses, claims, figures, out, section.lines if section else [])
    )
    return Report(markdown, claims, figures, png_error)


def _write_png(fig, path: Path) -> str | None:
    """None on success, else one line saying what failed and how to fix it."""
    try:
        pio.write_image(fig, path, format="png", scale=2)
    except Exception as err:  # kaleido raises plain RuntimeErrors (and others) for a missing browser
        text = str(err)
        if "chrome" in text.lower() or "chromium" in text.lower():
            return ("PNG export needs Chrome or Chromium for kaleido: run `bash scripts/setup.sh --png` (or "
                    "`plotly_get_chrome`), then `deltalens reproduce --no-train`; HTML figures were written")
        first = next((line.strip() for line in text.splitlines() if line.strip()), type(err).__name__)
        return f"PNG export failed ({first}); HTML figures were written"
    return None


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def render_markdown(sweep, statuses, claims, figures, out: Path, extra: list[str] = ()) -> str:
    t = sweep.thresholds
    results = [s.result for s in statuses if s.result is not None]
    config = cell_config(statuses[0].cell, sweep).to_dict()  # budget, optimiser and task are shared
    task, optim, run = config["task"], config["optim"], config["run"]
    length, multiples = task["actions"][1], sweep.eval_multiples
    lengths = " / ".join(f"{m}x" for m in multiples)
    actions = " / ".join(str(m * length) for m in multiples)
    mixed, sparse = curriculum(2, sweep.steps, sweep.mixed_from, sweep.sparse_from)[1:]
    wall = sum(r.get("wall_time_s", 0) for r in results)
    wall_text = f"{wall / 60:.0f} min" if wall >= 60 else f"{wall:.0f} s"
    not_run = len(statuses) - len(results)
    lines = [
        "# Reproduction: Siems et al. (2026), \"Learning State-Tracking from Code Using Linear RNNs\"",
        "",
        f"Written by `deltalens reproduce` from sweep `{sweep.path}`: **{len(results)} of {len(statuses)} cells "
        f"measured**{f', {not_run} not run' if not_run else ''}; the measured cells trained for {wall_text} "
        "in total. `deltalens reproduce` trains only what is missing; `--no-train` rewrites this report.",
        "",
        "## Protocol",
        "",
        f"* **Same budget for every cell:** {sweep.steps} optimiser steps, batch {optim['batch_size']}, AdamW "
        f"lr {optim['lr']:g} (warmup {optim['warmup_steps']} steps, cosine decay to {optim['min_lr_ratio']:g}x), "
        f"seed {run['seed']}; {task['action_set']}, {length} actions per training trace, training reveals "
        f"`{task['reveal']}`, loss on `{task['supervision']}` tokens.",
        f"* **Same curriculum for every architecture**, ending at the cell's spacing k, as `[from_step, lo, hi]`: "
        f"`[[0, 1, 1], [{mixed[0]}, 1, k], [{sparse[0]}, k, k]]` (spacing 1 first, then drawn per trace "
        "from 1..k, then k alone); for k = 1, `[[0, 1, 1]]`.",
        f"* **Evaluation:** {sweep.eval_traces} fresh held-out traces per length (seeds never used in training) "
        f"at spacing k, {actions} actions ({lengths} the training length), each reveal printing one variable. "
        "Reveal accuracy = fraction of revealed values predicted right (argmax over the whole vocabulary); "
        "chance is about 1/n for S_n.",
        "",
        "## The paper's claims",
        "",
        f"Thresholds: a model has **learned** when its reveal accuracy at 1x is ≥ {t.learned:g}; it "
        f"**extrapolates** when it stays ≥ {t.extrapolates:g} at the longest length evaluated "
        f"({multiples[-1]}x). Sparse reveals: k > 1. Each claim is judged per setting from the table below; "
        "\"not measured\" means the cells it needs have no result.",
        "",
        "| paper's claim | setting | verdict | measured (reveal accuracy) | rule |",
        "|---|---|---|---|---|",
    ]
    rules = claim_rules(t)
    verdict_mark = {"holds": "**holds**", "does not hold": "**does not hold**", "not measured": "not measured"}
    for claim in claims:
        lines.append(f"| {claim.statement} | {claim.setting} | {verdict_mark[claim.verdict]} | {claim.evidence} "
                     f"| {rules[claim.key]} |")
    if not claims:
        lines.append("| all | – | not measured | no cell has a result yet | – |")
    lines += ["", "The LSTM (a non-linear RNN) is shown for reference; the paper makes no claim about it here.", ""]

    lines += ["## Results", ""]
    settings = list(dict.fromkeys(s.cell.setting for s in statuses))
    for setting in settings:
        group, tokenizer = setting.split(" ", 1)
        cells = {(s.cell.arch, s.cell.spacing): s for s in statuses if s.cell.setting == setting}
        spacings = sorted({k for _, k in cells})
        archs = [a for a in sweep.models if any(a == arch for arch, _ in cells)]
        lines += [
            f"### {group}, {tokenizer} tokenizer",
            "",
            f"Held-out reveal accuracy at {lengths} the training length ({actions} actions), at the cell's spacing k.",
            "",
            "| architecture | " + " | ".join(f"k={k}" for k in spacings) + " |",
            "|---|" + "---|" * len(spacings),
        ]
        for arch in archs:
            row = []
            for k in spacings:
                status = cells.get((arch, k))
                if status is None:
                    row.append("– (not in sweep)")
                elif status.result is None:
                    row.append(f"not run ({status.short})")
                else:
                    row.append(" / ".join(_fmt(accuracy_at(status.result, float(m))) for m in multiples))
            lines.append(f"| {ARCH_LABELS.get(arch, arch)} | " + " | ".join(row) + " |")
        lines.append("")

    missing = [s for s in statuses if s.result is None]
    errors = [(s.cell.name, r) for s in statuses if s.result for r in s.result["eval"]["lengths"] if "error" in r]
    if missing or errors:
        lines += ["### Cells not run", ""] if missing else []
        lines += [f"* `{s.cell.name}`: {s.reason}" for s in missing]
        if errors:
            lines += ["", "Lengths that could not be evaluated (shown as –):", ""]
            lines += [f"* `{name}` at {r['actions']} actions: {r['error']}" for name, r in errors]
        lines.append("")

    lines += [*extra, "## Figures", ""]
    for figure in figures:
        html = figure.html.relative_to(out).as_posix()
        if figure.png is not None:
            png = figure.png.relative_to(out).as_posix()
            note = " (PNG from an earlier run: this run could not write PNGs)" if figure.png_stale else ""
            links = f"{figure.title}: [interactive HTML]({html}), [PNG]({png}){note}"
            lines += [f"![{figure.title}]({png})", "", links, ""]
        else:
            lines += [f"{figure.title}: [interactive HTML]({html}); PNG missing", ""]
    missing_png = [f for f in figures if f.png is None]
    if missing_png:
        names = ", ".join(f"figures/{f.name}.png" for f in missing_png)
        lines += [f"Missing PNGs: {names}. {missing_png[0].png_error}.", ""]
    stale = [f for f in figures if f.png_stale]
    if stale:
        names = ", ".join(f"figures/{f.name}.png" for f in stale)
        lines += [f"PNGs kept from an earlier run (they may show older numbers than the HTML figures): {names}. "
                  f"{stale[0].png_error}.", ""]
    return "\n".join(lines)
