"""Figures of the reproduce report (plotly): accuracy vs reveal spacing, and vs trace length."""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from deltalens.reports.claims import accuracy_at
from deltalens.training.grid import Thresholds

# How the report names each architecture of the sweep's [models] table (others: the key itself).
ARCH_LABELS = {
    "deltanet-neg": "DeltaNet β∈[0,2]",
    "deltanet-pos": "DeltaNet β∈[0,1]",
    "transformer": "Transformer",
    "lstm": "LSTM",
}
ARCH_COLORS = {"deltanet-neg": "#1f77b4", "deltanet-pos": "#ff7f0e", "transformer": "#2ca02c", "lstm": "#9467bd"}



def _settings(results: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(f"{r['group']} {r['tokenizer']}" for r in results))


def _arch_order(results: list[dict[str, Any]]) -> list[str]:
    known = [a for a in ARCH_LABELS if any(r["arch"] == a for r in results)]
    return known + sorted({r["arch"] for r in results} - set(known))


def spacing_figure(results: list[dict[str, Any]], thresholds: Thresholds | None = None):
    """Reveal accuracy at 1x the training length vs reveal spacing, one line per architecture."""
    t = thresholds or Thresholds()
    settings = _settings(results) or ["no results"]
    fig = make_subplots(rows=1, cols=len(settings), subplot_titles=settings, shared_yaxes=True)
    for arch in _arch_order(results):
        for col, setting in enumerate(settings, 1):
            points = sorted((r["spacing"], a) for r in results if r["arch"] == arch
                            and f"{r['group']} {r['tokenizer']}" == setting and (a := accuracy_at(r, 1)) is not None)
            if points:
                fig.add_scatter(x=[k for k, _ in points], y=[a for _, a in points], mode="lines+markers",
                                row=1, col=col, name=ARCH_LABELS.get(arch, arch), legendgroup=arch,
                                line={"color": ARCH_COLORS.get(arch)})
    fig.add_hline(y=t.learned, line_dash="dot", line_color="grey")
    ticks = sorted({r["spacing"] for r in results}) or None
    fig.update_xaxes(title_text="reveal spacing k", type="log", tickvals=ticks)
    fig.update_yaxes(range=[0, 1.02])
    fig.update_yaxes(title_text="reveal accuracy at 1x", col=1)
    fig.update_layout(title="Held-out reveal accuracy vs reveal spacing (training length)", template="plotly_white",
                      width=max(500, 380 * len(settings)), height=420)
    _dedupe_legend(fig)
    return fig


def length_figure(results: list[dict[str, Any]], thresholds: Thresholds | None = None):
    """Reveal accuracy vs trace length (extrapolation): rows = settings, columns = spacings."""
    t = thresholds or Thresholds()
    settings = _settings(results) or ["no results"]
    spacings = sorted({r["spacing"] for r in results}) or [1]
    titles = [f"{s}, k={k}" for s in settings for k in spacings]
    fig = make_subplots(rows=len(settings), cols=len(spacings), subplot_titles=titles, shared_yaxes=True)
    for arch in _arch_order(results):
        for row, setting in enumerate(settings, 1):
            for col, k in enumerate(spacings, 1):
                for r in results:
                    if r["arch"] == arch and r["spacing"] == k and f"{r['group']} {r['tokenizer']}" == setting:
                        points = [(x["actions"], x["reveal_accuracy"]) for x in r["eval"]["lengths"]
                                  if "reveal_accuracy" in x]
                        fig.add_scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers",
                                        row=row, col=col, name=ARCH_LABELS.get(arch, arch), legendgroup=arch,
                                        line={"color": ARCH_COLORS.get(arch)})
    fig.add_hline(y=t.extrapolates, line_dash="dot", line_color="grey")
    fig.update_xaxes(type="log", title_text="actions per trace")
    fig.update_yaxes(range=[0, 1.02])
    fig.update_yaxes(title_text="reveal accuracy", col=1)
    fig.update_layout(title="Extrapolation: held-out reveal accuracy vs trace length", template="plotly_white",
                      width=max(500, 320 * len(spacings)), height=max(380, 300 * len(settings)))
    _dedupe_legend(fig)
    return fig


def _dedupe_legend(fig) -> None:
    seen = set()
    for trace in fig.data:
        trace.showlegend = trace.legendgroup not in seen
        seen.add(trace.legendgroup)


def checkpoint_length_figure(evals: dict[str, dict[str, Any]], threshold: float = 0.9):
    """Held-out reveal accuracy vs trace length of several checkpoints, from their saved
    `metrics.eval` (name -> that dict): no model is run."""
    fig = go.Figure()
    for name, report in evals.items():
        rows = [r for r in report.get("lengths", []) if "reveal_accuracy" in r]
        fig.add_scatter(x=[r["actions"] for r in rows], y=[r["reveal_accuracy"] for r in rows], mode="lines+markers",
                        name=name)
    fig.add_hline(y=threshold, line_dash="dot", line_color="grey", annotation_text=f"threshold {threshold:g}")
    fig.update_xaxes(type="log", title_text="actions per trace")
    fig.update_yaxes(range=[0, 1.02], title_text="held-out reveal accuracy")
    fig.update_layout(title="Saved held-out accuracy vs trace length (1x, 2x, 4x the training length)",
                      template="plotly_white", height=420)
    return fig
