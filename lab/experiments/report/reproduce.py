"""The reproduce report: OUT/reproduce.md with the paper's claims judged, a table per setting,
the PFSA-SR section, and figures (HTML always, PNG when kaleido finds a browser).

    report = write_report(sweep, read_results(sweep, "lab/results/grid"), Path("lab/results"), Path("checkpoints"))
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import plotly.io as pio

from deltalens.core.atomic import write_text_atomic
from deltalens.grids.grid import best_validation, cell_config, curriculum
from deltalens.models import registry
from deltalens.reports.claims import (
    DOES_NOT_HOLD,
    HOLDS,
    NOT_MEASURED,
    NOT_TESTABLE,
    claim_rules,
    spread,
)
from deltalens.reports.figures import ARCH_LABELS, length_figure, long_budget_figure, search_figure, spacing_figure
from lab.experiments.report.baselines_section import baseline_lines
from lab.experiments.report.controlled_claims import count_line, judged_claims, missing_controls
from lab.experiments.report.controls_section import controls_lines
from lab.experiments.report.long_runs_section import long_run_lines, long_sweep_runs, long_sweep_table
from lab.experiments.report.pfsa_section import pfsa_section
from lab.experiments.report.products_section import products_lines
from lab.experiments.report.transformer_variants_section import transformer_variants_lines


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


def write_report(
    sweep, statuses, out: Path, pfsa_checkpoints: Path | None = None, searches=(), results: Path | None = None
) -> Report:
    """Write OUT/reproduce.md and OUT/figures/*; a PNG failure leaves the rest intact. With
    ``pfsa_checkpoints`` the report gains the PFSA-SR section (pfsa_section.py); ``searches`` are
    the learning-rate search's statuses (training.grid.read_search). ``results`` is the folder of the
    sweep's results (lab/results/grid, lab/results/family/grid; default: `out`/sweep): the controls, products.json
    and the paper grid's later sections are read under its parent, the results root, so what is written does
    not depend on `out`."""
    root = Path(results).parent if results is not None else Path(out)
    section = pfsa_section(pfsa_checkpoints) if pfsa_checkpoints is not None else None
    results = [s.result for s in statuses if s.result is not None]
    # the grid's verdicts revised by the controls under the results root (controlled_claims.py)
    claims = judged_claims(sweep, statuses, root) if sweep.judge_claims else []
    searched = [s.result for s in searches if s.result is not None]
    figures_dir = out / "figures"
    figures_dir.mkdir(parents=True, exist_ok=True)
    named = [
        *(
            [("lr_search", "learning-rate search (validation curves)", search_figure(searched, sweep.chosen_lr))]
            if searched
            else []
        ),
        ("accuracy_vs_spacing", "accuracy vs reveal spacing", spacing_figure(results, sweep.thresholds)),
        ("accuracy_vs_length", "accuracy vs trace length (extrapolation)", length_figure(results, sweep.thresholds)),
        *(section.figures if section else []),
    ]
    long_runs, long_grids = long_sweep_runs(root) if sweep.judge_claims else ([], {})
    if long_runs:
        figure = long_budget_figure(long_runs, long_grids, sweep.thresholds.learned)
        named.append(("long_budget", "longer budget (validation curves)", figure))
    for name, _, fig in named:
        # plotly.js is written once beside the figures (figures/plotly.min.js), so they work offline; a
        # fixed div id (plotly's default is a random uuid) keeps a regenerated report's unchanged figures unchanged
        fig.write_html(figures_dir / f"{name}.html", include_plotlyjs="directory", div_id=f"figure-{name}")
    pngs = [figures_dir / f"{name}.png" for name, _, _ in named]
    png_error = write_pngs([fig for _, _, fig in named], pngs)
    figures = []
    for (name, title, _), png in zip(named, pngs):
        # a PNG that cannot be regenerated is kept (the report says it is an earlier run's), never deleted
        kept = png.is_file()
        shown = png if kept or not png_error else None
        stale = bool(png_error and kept)
        figures.append(FigureFiles(name, title, figures_dir / f"{name}.html", shown, png_error, png_stale=stale))
    markdown = out / "reproduce.md"
    later = sweep.judge_claims  # the paper grid's report reads the lab's later sections under the root
    extra = [
        *baseline_lines(results),
        *(controls_lines(root) if later else []),
        *(transformer_variants_lines(root, results, sweep.thresholds) if later else []),
        *(section.lines if section else []),
        *products_lines(root),
    ]
    long_lines = long_sweep_table(long_runs, long_grids, sweep.thresholds.learned)
    text = render_markdown(sweep, statuses, claims, figures, out, extra, searches, long_lines, root=root)
    write_text_atomic(markdown, text)
    return Report(markdown, claims, figures, png_error)


def write_pngs(figs: list, paths: list[Path]) -> str | None:
    """All PNGs in one kaleido call (its browser starts once: ~5 s, then well under 1 s a figure),
    through temporary files of this process renamed on success, so an earlier PNG is replaced whole
    or kept. None on success, else one line saying what failed and how to fix it."""
    temporary = [path.with_name(f".{path.stem}.{os.getpid()}.tmp.png") for path in paths]
    try:
        # write_images sizes every figure at plotly's default 700 x 500 unless told: a figure's own layout size wins
        sizes = {"width": [fig.layout.width for fig in figs], "height": [fig.layout.height for fig in figs]}
        pio.write_images(figs, temporary, format="png", scale=2, **sizes)
        for tmp, path in zip(temporary, paths):
            tmp.replace(path)
    except Exception as err:  # kaleido raises plain RuntimeErrors (and others) for a missing browser
        text = str(err)
        if "chrome" in text.lower() or "chromium" in text.lower():
            return (
                "PNG export needs Chrome or Chromium for kaleido: run `bash scripts/setup.sh --png` (or "
                "`plotly_get_chrome`), then `deltalens reproduce --no-train`; HTML figures were written"
            )
        first = next((line.strip() for line in text.splitlines() if line.strip()), type(err).__name__)
        return f"PNG export failed ({first}); HTML figures were written"
    finally:
        for tmp in temporary:
            tmp.unlink(missing_ok=True)  # left only where export or a rename failed
    return None


def _fmt_row(row: dict | None) -> str:
    """A summary row as `mean [min–max]` (one seed: the value alone)."""
    if row is None or "reveal_accuracy" not in row:
        return "–"
    if row.get("n", 1) == 1:
        return f"{row['reveal_accuracy']:.3f}"
    return f"{row['reveal_accuracy']:.3f} [{row['min']:.3f}–{row['max']:.3f}]"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _claim_lines(sweep, claims, multiples, root: Path) -> list[str]:
    """The paper's claims, judged (a sweep with `claims = false` in [sweep] has no such section); the
    controls that revise them are read under `root`, and a control folder it lacks is named."""
    t = sweep.thresholds
    lines = [
        "## The paper's claims",
        "",
        f"Thresholds: a model has **learned** when its reveal accuracy at 1x is ≥ {t.learned:g}; it "
        f"**extrapolates** when it stays ≥ {t.extrapolates:g} at the longest length evaluated "
        f"({multiples[-1]}x). Sparse reveals: k > 1. Each claim is judged per setting from the table below, on "
        'the seed means and on each seed; "not measured" means the cells it needs have no result for every seed; '
        '"not testable" means they have, but the claim\'s premise failed (no cell learned, or the model did not '
        "learn with dense reveals either, so the comparison with sparse ones says nothing). Where a control "
        "judges a claim again (the matched-budget lr grid, the full-action Transformer cells: sections below), its "
        "row carries the control's verdict, and the count under the table is computed from the verdicts.",
        "",
        "| paper's claim | setting | verdict | measured (reveal accuracy) | rule |",
        "|---|---|---|---|---|",
    ]
    rules = claim_rules(t)
    verdict_mark = {
        HOLDS: "**holds**",
        DOES_NOT_HOLD: "**does not hold**",
        NOT_MEASURED: "not measured",
        NOT_TESTABLE: "not testable",
    }
    for claim in claims:
        lines.append(
            f"| {claim.statement} | {claim.setting} | {verdict_mark[claim.verdict]} | {claim.evidence} "
            f"| {rules[claim.key]} |"
        )
    if not claims:
        lines.append("| all | – | not measured | no cell has a result yet | – |")
    else:
        lines += ["", count_line(claims)]
    missing = missing_controls(root)
    if missing:
        lines += [
            "",
            f"Controls read from `{root}`: {', '.join(f'{m}/' for m in missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not there, so the verdicts they would revise stand as the "
            "grid gave them.",
        ]
    if "lstm" in sweep.models:
        lines += ["", "The LSTM (a non-linear RNN) is shown for reference; the paper makes no claim about it here."]
    return [*lines, ""]


def _architecture_lines(sweep) -> list[str]:
    """The family table: each architecture of the sweep, its model config, and which hooks, probes and
    interventions apply to it (its family's record, models/registry.py)."""
    lines = [
        "## Architectures",
        "",
        "| sweep name | architecture | config | per-head hooks | probes | interventions |",
        "|---|---|---|---|---|---|",
    ]
    for key, table in sweep.models.items():
        arch = table["arch"]
        record = registry.family(arch) if arch in registry.architectures() else None
        hooks, probes, interventions = (record.hooks, record.probes, record.interventions) if record else ("–",) * 3
        config = ", ".join(f"{k}={v}" for k, v in table.items() if k != "arch")
        lines.append(
            f"| `{key}` | {record.display if record else arch} | {config} | {hooks} | {probes} | {interventions} |"
        )
    return [*lines, ""]


def _search_lines(sweep, searches) -> list[str]:
    """The learning-rate search: per group and architecture, each lr's best validation accuracy."""
    if sweep.search is None:
        return []
    lines = [
        "## Learning-rate search",
        "",
        f"Per group and architecture, one run per lr at k = 1 (spacing 1 throughout), "
        f"{sweep.search.steps or sweep.steps} steps, seed {sweep.search.seed}, validation every "
        f"{sweep.search.eval_every} steps on 256 traces of the validation split (seed {sweep.validation_seed}). "
        "Chosen: the lr whose validation accuracy peaks highest (near-ties within 0.001: the one that got "
        "there first, then the smaller lr). Curves: figure `lr_search`.",
        "",
        "| group | architecture | "
        + " | ".join(f"lr {lr:g}: best (step)" for lr in sweep.search.lrs)
        + " | chosen lr | wall time |",
        "|---|---|" + "---|" * (len(sweep.search.lrs) + 2),
    ]
    pairs = dict.fromkeys((s.cell.group, s.cell.arch) for s in searches)
    for group, arch in pairs:
        runs = {s.cell.lr: s for s in searches if (s.cell.group, s.cell.arch) == (group, arch)}
        cells, wall = [], 0.0
        for lr in sweep.search.lrs:
            status = runs.get(lr)
            if status is None or status.result is None:
                cells.append(f"not run ({status.short if status else 'not in sweep'})")
                continue
            best, step = best_validation(status.result)
            failed = f", diverged at step {status.result.get('steps', '?')}" if status.result.get("failed") else ""
            cells.append(f"{best:.3f} ({step}{failed})")
            wall += status.result.get("wall_time_s", 0)
        chosen = sweep.chosen_lr.get((group, arch))
        lines.append(
            f"| {group} | {ARCH_LABELS.get(arch, arch)} | "
            + " | ".join(cells)
            + f" | {'–' if chosen is None else f'**{chosen:g}**'} | {_minutes(wall)} |"
        )
    return [*lines, ""]


def _wall_time_lines(sweep, statuses, searches) -> list[str]:
    """Training wall time (evaluations excluded) per cell and seed, and in total per architecture."""
    done = [s for s in statuses if s.result is not None]
    if not done:
        return []
    lines = [
        "## Training time",
        "",
        "Training wall time per cell (one CPU thread per run; evaluations excluded), one entry per seed "
        "as `steps trained: time` (fewer steps than the budget: stopped early on validation accuracy).",
        "",
        "| cell | " + " | ".join(f"seed {seed}" for seed in sweep.seeds) + " |",
        "|---|" + "---|" * len(sweep.seeds),
    ]
    families = dict.fromkeys(s.cell.family for s in statuses)
    for family in families:
        by_seed = {s.cell.seed: s.result for s in done if s.cell.family == family}
        if not by_seed:
            continue
        entries = [
            f"{by_seed[seed].get('steps', '?')}: {_minutes(by_seed[seed].get('wall_time_s', 0))}"
            if seed in by_seed
            else "–"
            for seed in sweep.seeds
        ]
        lines.append(f"| {family} | " + " | ".join(entries) + " |")
    per_arch: dict[str, float] = {}
    for s in done:
        per_arch[s.cell.arch] = per_arch.get(s.cell.arch, 0.0) + s.result.get("wall_time_s", 0)
    for s in searches:
        if s.result is not None:
            per_arch[s.cell.arch] = per_arch.get(s.cell.arch, 0.0) + s.result.get("wall_time_s", 0)
    lines += [
        "",
        "Total training time per architecture (search runs and measured cells): "
        + ", ".join(f"{ARCH_LABELS.get(a, a)} {_minutes(w)}" for a, w in per_arch.items())
        + ".",
        "",
    ]
    return lines


def render_markdown(
    sweep,
    statuses,
    claims,
    figures,
    out: Path,
    extra: list[str] = (),
    searches=(),
    long_lines: list[str] = (),
    root: Path | None = None,
) -> str:
    """The report, section by section: header and protocol, architectures, the paper's claims, the
    learning-rate search, longer runs (``long_lines``: long_sweep_table's), a results table per
    setting, cells not run, training time, the ``extra`` sections (PFSA-SR, per-token products), figures."""
    # budget, optimiser (but its lr) and task are shared by every cell
    config = cell_config(statuses[0].cell, sweep, lr=sweep.optim.get("lr", 3e-3)).to_dict()
    searches = list(searches)
    lines = [*_header_lines(sweep, statuses), *_protocol_lines(sweep, config), *_architecture_lines(sweep)]
    root = Path(out if root is None else root)
    if sweep.judge_claims:
        lines += _claim_lines(sweep, claims, sweep.eval_multiples, root)
    lines += [*_search_lines(sweep, searches), *(long_run_lines(root) if sweep.judge_claims else []), *long_lines]
    lines += _results_lines(sweep, statuses, config["task"])
    lines += _not_run_lines(statuses)
    lines += _wall_time_lines(sweep, statuses, searches)
    lines += [*extra, *_figure_lines(figures, out)]
    return "\n".join(lines)


def _length_texts(sweep, task: dict) -> tuple[str, str]:
    """The test lengths as multiples ('1x / 2x / 4x') and in actions ('16 / 32 / 64')."""
    length, multiples = task["actions"][1], sweep.eval_multiples
    return " / ".join(f"{m}x" for m in multiples), " / ".join(str(m * length) for m in multiples)


def _header_lines(sweep, statuses) -> list[str]:
    """The title and what was measured: runs with results, runs missing, total training time."""
    results = [s.result for s in statuses if s.result is not None]
    wall = sum(r.get("wall_time_s", 0) for r in results)
    wall_text = f"{wall / 60:.0f} min" if wall >= 60 else f"{wall:.0f} s"
    not_run = len(statuses) - len(results)
    return [
        f"# {sweep.title}",
        "",
        f"Written by `deltalens reproduce` from sweep `{sweep.path}`: **{len(results)} of {len(statuses)} runs "
        f"measured** ({len(sweep.seeds)} seeds per cell){f', {not_run} not run' if not_run else ''}; the measured "
        f"runs trained for {wall_text} in total. `deltalens reproduce` trains only what is missing (`--lanes N` "
        "at a time); `--no-train` rewrites this report.",
        "",
    ]


def _protocol_lines(sweep, config: dict) -> list[str]:
    """The protocol every cell shares: budget, curriculum, test traces, how spread is reported."""
    task, optim = config["task"], config["optim"]
    lengths, actions = _length_texts(sweep, task)
    mixed, sparse = curriculum(2, sweep.steps, sweep.mixed_from, sweep.sparse_from)[1:]
    seeds = ", ".join(str(x) for x in sweep.seeds)
    if sweep.search is not None:
        lr_text = (
            f"AdamW with the lr chosen per group and architecture by the search below (grid "
            f"{', '.join(f'{lr:g}' for lr in sweep.search.lrs)})"
        )
    else:
        lr_text = f"AdamW lr {optim['lr']:g}"
    by_arch_text = "".join(f", {ARCH_LABELS.get(a, a)} {n}" for a, n in sweep.steps_by_arch.items())
    by_arch_text = f" ({by_arch_text[2:]})" if by_arch_text else ""
    stop_text = (
        f", stopping early once validation reveal accuracy reaches {sweep.early_stop_accuracy:g} "
        f"(validation split: eval-split traces of seed {sweep.validation_seed}, never test traces)"
        if sweep.early_stop_accuracy
        else ""
    )
    return [
        "## Protocol",
        "",
        f"* **Same tuning budget for every architecture:** a learning-rate search at k = 1 chooses each "
        f"architecture's lr per group on the validation split; then every cell trains {sweep.steps} optimiser "
        f"steps at most{by_arch_text}{stop_text}, batch {optim['batch_size']}, {lr_text} "
        f"(warmup {optim['warmup_steps']} steps, cosine decay to {optim['min_lr_ratio']:g}x), seeds {seeds}; "
        f"{task['action_set']}, {task['actions'][1]} actions per training trace, training reveals "
        f"`{task['reveal']}`, loss on `{task['supervision']}` tokens.",
        f"* **Same curriculum for every architecture**, ending at the cell's spacing k, as `[from_step, lo, hi]`: "
        f"`[[0, 1, 1], [{mixed[0]}, 1, k], [{sparse[0]}, k, k]]` at {sweep.steps} steps, stage starts scaled "
        "with a budget (spacing 1 first, then drawn per trace from 1..k, then k alone); for k = 1, `[[0, 1, 1]]`.",
        f"* **Test:** {sweep.eval_traces} fresh held-out traces per length (eval seed {sweep.eval_seed}: never "
        f"used in training, validation or the search) at spacing k, {actions} actions ({lengths} the training "
        "length), each reveal printing one variable. Reveal accuracy = fraction of revealed values predicted "
        "right (argmax over the whole vocabulary); chance is 1/n for S_n.",
        "* **Spread:** every number is the mean over seeds with [min–max]; a claim holds only when it holds for "
        "the seed mean and for at least 2 of 3 seeds; a cell counts once all its seeds have results.",
        "",
    ]


def _results_lines(sweep, statuses, task: dict) -> list[str]:
    """A table per setting (group, tokenizer): architecture x spacing k, seed mean [min–max] per length."""
    lengths, actions = _length_texts(sweep, task)
    multiples = sweep.eval_multiples
    results = [s.result for s in statuses if s.result is not None]
    summaries = {(s["group"], s["tokenizer"], s["arch"], s["spacing"]): s for s in spread(results, len(sweep.seeds))}
    lines = ["## Results", ""]
    for setting in dict.fromkeys(s.cell.setting for s in statuses):
        group, tokenizer = setting.split(" ", 1)
        cells: dict[tuple[str, int], list] = {}
        for s in statuses:
            if s.cell.setting == setting:
                cells.setdefault((s.cell.arch, s.cell.spacing), []).append(s)
        spacings = sorted({k for _, k in cells})
        archs = [a for a in sweep.models if any(a == arch for arch, _ in cells)]
        lines += [
            f"### {group}, {tokenizer} tokenizer",
            "",
            f"Test reveal accuracy, seed mean [min–max], at {lengths} the training length ({actions} actions), at the "
            "cell's spacing k (one line per length).",
            "",
            "| architecture | " + " | ".join(f"k={k}" for k in spacings) + " |",
            "|---|" + "---|" * len(spacings),
        ]
        for arch in archs:
            row = []
            for k in spacings:
                seeds_here = cells.get((arch, k))
                summary = summaries.get((group, tokenizer, arch, k))
                if seeds_here is None:
                    row.append("– (not in sweep)")
                elif summary is None:
                    row.append(f"not run ({seeds_here[0].short})")
                else:
                    rows = {r["x_train"]: r for r in summary["eval"]["lengths"]}
                    text = "<br>".join(f"{m}x: {_fmt_row(rows.get(float(m)))}" for m in multiples)
                    have = len(summary["runs"])
                    row.append(text if have >= len(seeds_here) else f"{have} of {len(seeds_here)} seeds<br>{text}")
            lines.append(f"| {ARCH_LABELS.get(arch, arch)} | " + " | ".join(row) + " |")
        lines.append("")
    return lines


def _not_run_lines(statuses) -> list[str]:
    """The cells without a result (and why), and the lengths that could not be evaluated."""
    missing = [s for s in statuses if s.result is None]
    errors = [(s.cell.name, r) for s in statuses if s.result for r in s.result["eval"]["lengths"] if "error" in r]
    if not (missing or errors):
        return []
    lines = ["### Cells not run", ""] if missing else []
    lines += [f"* `{s.cell.name}`: {s.reason}" for s in missing]
    if errors:
        lines += ["", "Lengths that could not be evaluated (shown as –):", ""]
        lines += [f"* `{name}` at {r['actions']} actions: {r['error']}" for name, r in errors]
    return [*lines, ""]


def _figure_lines(figures, out: Path) -> list[str]:
    """Each figure as its PNG with links to both files (paths relative to OUT), then what is missing or stale."""
    lines = ["## Figures", ""]
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
        lines += [
            f"PNGs kept from an earlier run (they may show older numbers than the HTML figures): {names}. "
            f"{stale[0].png_error}.",
            "",
        ]
    return lines
