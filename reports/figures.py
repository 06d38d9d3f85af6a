"""Figures of the reproduce report (plotly): accuracy vs reveal spacing, vs trace length, and the
learning-rate search's validation curves. Points are seed means with min-max error bars; a dashed
line marks chance (1/n for a group on n variables), a dotted one the labelled threshold."""

from __future__ import annotations

from typing import Any

from plotly.subplots import make_subplots

from deltalens.grids.grid import Thresholds
from deltalens.reports.checkpoint_figures import checkpoint_length_figure, training_curve_figure  # noqa: F401
from deltalens.reports.claims import spread
from deltalens.tasks.groups import get_group

# How the report names each architecture of the sweep's [models] table (others: the key itself).
ARCH_LABELS = {
    "deltanet-neg": "DeltaNet β∈[0,2]",
    "deltanet-pos": "DeltaNet β∈[0,1]",
    "transformer": "Transformer",
    "lstm": "LSTM",
    "transformer-nope": "Transformer, no positions (NoPE)",
    "transformer-4l": "Transformer, 4 layers",
    "transformer-6l": "Transformer, 6 layers",
    "deltaproduct-n2": "DeltaProduct n_h=2 β∈[0,2]",
    "deltaproduct-n3": "DeltaProduct n_h=3 β∈[0,2]",
    "deltaproduct-n4": "DeltaProduct n_h=4 β∈[0,2]",
    "gated-deltaproduct-n3": "Gated DeltaProduct n_h=3 β∈[0,2]",
    "deltaproduct-n3-noconv": "DeltaProduct n_h=3 β∈[0,2], no short conv",
    "deltaproduct-n2-noconv": "DeltaProduct n_h=2 β∈[0,2], no short conv",
    "m2rnn": "M²RNN",
    "hybrid": "DeltaNet β∈[0,2] / M²RNN hybrid",
}
ARCH_COLORS = {
    "deltanet-neg": "#1f77b4",
    "deltanet-pos": "#ff7f0e",
    "transformer": "#2ca02c",
    "lstm": "#9467bd",
    "deltaproduct-n2": "#17becf",
    "deltaproduct-n3": "#d62728",
    "deltaproduct-n4": "#8c564b",
    "gated-deltaproduct-n3": "#e377c2",
    "deltaproduct-n3-noconv": "#bcbd22",
    "deltaproduct-n2-noconv": "#7f7f7f",
}


def _settings(results: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(f"{r['group']} {r['tokenizer']}" for r in results))


def _arch_order(results: list[dict[str, Any]]) -> list[str]:
    known = [a for a in ARCH_LABELS if any(r["arch"] == a for r in results)]
    return known + sorted({r["arch"] for r in results} - set(known))


def chance(group: str) -> float | None:
    """Reveal accuracy of guessing a value: 1/n for a group acting on n variables."""
    try:
        return 1 / get_group(group).n
    except Exception:  # a group name this version does not know: no chance line
        return None


def _row_at(summary: dict[str, Any], multiple: float) -> dict[str, Any] | None:
    return next(
        (r for r in summary["eval"]["lengths"] if r.get("x_train") == multiple and "reveal_accuracy" in r), None
    )


def _error_bars(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "data",
        "symmetric": False,
        "array": [r["max"] - r["reveal_accuracy"] for r in rows],
        "arrayminus": [r["reveal_accuracy"] - r["min"] for r in rows],
        "thickness": 1.2,
        "width": 4,
    }


LEGEND_WIDTH = 380  # the legend sits right of the panels; its longest names (family labels) take ~360 px


def _width(panels: int, per_panel: int) -> int:
    """A figure's width: its panels plus the legend, and never narrower than plotly's default (700)."""
    return max(700, panels * per_panel + LEGEND_WIDTH)


def _reference_lines(
    fig, settings: list[str], threshold: float, label: str, cols_per_setting: int = 1, by_row: bool = False
) -> None:
    """The labelled threshold everywhere; each setting's chance line in its own panels."""
    fig.add_hline(
        y=threshold,
        line_dash="dot",
        line_color="grey",
        annotation_text=f"{label} {threshold:g}",
        annotation_position="bottom right",
        annotation_font_size=10,
    )
    for i, setting in enumerate(settings, 1):
        level = chance(setting.split(" ", 1)[0])
        if level is None:
            continue
        for j in range(1, cols_per_setting + 1):
            row, col = (i, j) if by_row else (1, i)
            # the label once per setting; an annotation_text of None would show plotly's placeholder "new text"
            named: dict[str, object] = (
                {
                    "annotation_text": f"chance 1/{round(1 / level)}",
                    "annotation_position": "top left",
                    "annotation_font_size": 10,
                }
                if j == 1
                else {}
            )
            fig.add_hline(y=level, line_dash="dash", line_color="#bbbbbb", row=row, col=col, **named)


def spacing_figure(results: list[dict[str, Any]], thresholds: Thresholds | None = None):
    """Reveal accuracy at 1x the training length vs reveal spacing, one line per architecture
    (seed mean, min-max error bars)."""
    t = thresholds or Thresholds()
    settings = _settings(results) or ["no results"]
    summaries = spread(results)
    fig = make_subplots(rows=1, cols=len(settings), subplot_titles=settings, shared_yaxes=True)
    for arch in _arch_order(results):
        for col, setting in enumerate(settings, 1):
            points = sorted(
                (s["spacing"], row)
                for s in summaries
                if s["arch"] == arch
                and f"{s['group']} {s['tokenizer']}" == setting
                and (row := _row_at(s, 1)) is not None
            )
            if points:
                rows = [row for _, row in points]
                fig.add_scatter(
                    x=[k for k, _ in points],
                    y=[r["reveal_accuracy"] for r in rows],
                    error_y=_error_bars(rows),
                    mode="lines+markers",
                    row=1,
                    col=col,
                    name=ARCH_LABELS.get(arch, arch),
                    legendgroup=arch,
                    line={"color": ARCH_COLORS.get(arch)},
                    hovertemplate="k=%{x}: %{y:.3f} (seed mean)<extra>%{fullData.name}</extra>",
                )
    _reference_lines(fig, settings, t.learned, "learned ≥")
    ticks = sorted({r["spacing"] for r in results}) or None
    fig.update_xaxes(title_text="reveal spacing k", type="log", tickvals=ticks)
    fig.update_yaxes(range=[0, 1.02])
    fig.update_yaxes(title_text="reveal accuracy at 1x", col=1)
    fig.update_layout(
        title="Test reveal accuracy vs reveal spacing (training length; seed mean, bars min-max)",
        template="plotly_white",
        width=_width(len(settings), 380),
        height=420,
    )
    _dedupe_legend(fig)
    return fig


def length_figure(results: list[dict[str, Any]], thresholds: Thresholds | None = None):
    """Reveal accuracy vs trace length (extrapolation): rows = settings, columns = spacings."""
    t = thresholds or Thresholds()
    settings = _settings(results) or ["no results"]
    spacings = sorted({r["spacing"] for r in results}) or [1]
    titles = [f"{s}, k={k}" for s in settings for k in spacings]
    fig = make_subplots(rows=len(settings), cols=len(spacings), subplot_titles=titles, shared_yaxes=True)
    summaries = spread(results)
    for arch in _arch_order(results):
        for row, setting in enumerate(settings, 1):
            for col, k in enumerate(spacings, 1):
                for s in summaries:
                    if s["arch"] == arch and s["spacing"] == k and f"{s['group']} {s['tokenizer']}" == setting:
                        rows = [x for x in s["eval"]["lengths"] if "reveal_accuracy" in x]
                        fig.add_scatter(
                            x=[x["actions"] for x in rows],
                            y=[x["reveal_accuracy"] for x in rows],
                            error_y=_error_bars(rows),
                            mode="lines+markers",
                            row=row,
                            col=col,
                            name=ARCH_LABELS.get(arch, arch),
                            legendgroup=arch,
                            line={"color": ARCH_COLORS.get(arch)},
                        )
    _reference_lines(fig, settings, t.extrapolates, "extrapolates ≥", cols_per_setting=len(spacings), by_row=True)
    fig.update_xaxes(type="log", title_text="actions per trace")
    fig.update_yaxes(range=[0, 1.02])
    fig.update_yaxes(title_text="reveal accuracy", col=1)
    fig.update_layout(
        title="Extrapolation: test reveal accuracy vs trace length (seed mean, bars min-max)",
        template="plotly_white",
        width=_width(len(spacings), 320),
        height=max(380, 300 * len(settings)),
    )
    _dedupe_legend(fig)
    return fig


def search_figure(searches: list[dict[str, Any]], chosen: dict[tuple[str, str], float]):
    """The learning-rate search: validation reveal accuracy during training, one panel per group,
    one colour per architecture, solid = the chosen lr, dotted = the others."""
    groups = list(dict.fromkeys(r["group"] for r in searches)) or ["no search results"]
    fig = make_subplots(rows=1, cols=len(groups), subplot_titles=[f"{g}, k = 1" for g in groups], shared_yaxes=True)
    # the chosen lr's curve first, so the legend shows its (solid) line
    searches = sorted(searches, key=lambda r: chosen.get((r["group"], r["arch"])) != r["lr"])
    for col, group in enumerate(groups, 1):
        for r in searches:
            if r["group"] != group:
                continue
            picked = chosen.get((group, r["arch"])) == r["lr"]
            fig.add_scatter(
                x=[h["step"] for h in r["history"]],
                y=[h["reveal_accuracy"] for h in r["history"]],
                mode="lines",
                row=1,
                col=col,
                legendgroup=r["arch"],
                name=f"{ARCH_LABELS.get(r['arch'], r['arch'])}",
                line={"color": ARCH_COLORS.get(r["arch"]), "dash": "solid" if picked else "dot"},
                hovertemplate=f"lr {r['lr']:g}"
                + (" (chosen)" if picked else "")
                + ": %{y:.3f} at step %{x}<extra>%{fullData.name}</extra>",
            )
    title = "Learning-rate search at k = 1: validation curves (solid: chosen lr, dotted: other lr)"
    return _validation_layout(fig, groups, 0.9, title, width=_width(len(groups), 480))


def _validation_layout(fig, settings: list[str], threshold: float, title: str, width: int):
    """Axes, threshold and chance lines, title and legend of a figure of validation curves."""
    _reference_lines(fig, settings, threshold, "learned ≥")
    fig.update_xaxes(title_text="training step")
    fig.update_yaxes(range=[0, 1.02])
    fig.update_yaxes(title_text="validation reveal accuracy", col=1)
    fig.update_layout(title=title, template="plotly_white", width=width, height=420)
    _dedupe_legend(fig)
    return fig


def _dedupe_legend(fig) -> None:
    seen = set()
    for trace in fig.data:
        trace.showlegend = trace.legendgroup not in seen
        seen.add(trace.legendgroup)


SEED_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")


def long_budget_figure(runs: list[dict[str, Any]], grids: dict[str, dict[str, Any]], learned: float = 0.9):
    """Grid cells trained again with a longer budget: each run's validation curve (solid) over the
    grid's run of the same cell and seed (dotted, same colour), one panel per group and architecture
    (`runs` is not empty)."""
    panels = list(dict.fromkeys((r["group"], r["arch"]) for r in runs))
    titles = [f"{group}, {ARCH_LABELS.get(arch, arch)}" for group, arch in panels]
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=titles, shared_yaxes=True)
    for col, (group, arch) in enumerate(panels, 1):
        for r in (r for r in runs if (r["group"], r["arch"]) == (group, arch)):
            color = SEED_COLORS[r["seed"] % len(SEED_COLORS)]
            for source, dash, label in (
                (r, "solid", f"{r['steps']:,} steps"),
                (grids.get(r["cell"]), "dot", "grid run"),
            ):
                if source is None:
                    continue
                fig.add_scatter(
                    x=[h["step"] for h in source["history"]],
                    y=[h["reveal_accuracy"] for h in source["history"]],
                    mode="lines",
                    row=1,
                    col=col,
                    legendgroup=f"seed {r['seed']}",
                    name=f"seed {r['seed']}",
                    line={"color": color, "dash": dash},
                    hovertemplate=f"seed {r['seed']}, {label}: %{{y:.3f}} at step %{{x}}<extra></extra>",
                )
    title = "Longer budget: solid the long run, dotted the grid run (same seed)"
    return _validation_layout(fig, [g for g, _ in panels], learned, title, width=_width(len(panels), 520))
