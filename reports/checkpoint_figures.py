"""Figures of saved checkpoints (plotly only): accuracy by trace length from each checkpoint's saved
evaluation, and training curves from the history a run keeps. No model is run and nothing but plotly is
imported, so the dashboard's first page draws them before torch has loaded; figures.py re-exports them.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go


def checkpoint_length_figure(evals: dict[str, dict[str, Any]], threshold: float = 0.9):
    """Held-out reveal accuracy vs trace length of several checkpoints, from their saved
    `metrics.eval` (name -> that dict): no model is run."""
    fig = go.Figure()
    for name, report in evals.items():
        rows = [r for r in report.get("lengths", []) if "reveal_accuracy" in r]
        fig.add_scatter(
            x=[r["actions"] for r in rows], y=[r["reveal_accuracy"] for r in rows], mode="lines+markers", name=name
        )
    fig.add_hline(y=threshold, line_dash="dot", line_color="grey", annotation_text=f"threshold {threshold:g}")
    fig.update_xaxes(type="log", title_text="actions per trace (1x, 2x, 4x the training length)")
    fig.update_yaxes(range=[0, 1.02], title_text="held-out reveal accuracy")
    return _half_width(fig, "Saved accuracy vs trace length")


def training_curve_figure(histories: dict[str, list[dict[str, Any]]]):
    """Held-out reveal accuracy during training, one line per run (name -> its history: the entries
    training/loop.py appends at each evaluation; at 2x and 4x the length too where the run logged them)."""
    fig = go.Figure()
    for name, history in histories.items():
        rows = [h for h in history if "reveal_accuracy" in h]
        fig.add_scatter(
            x=[h["step"] for h in rows], y=[h["reveal_accuracy"] for h in rows], mode="lines+markers", name=name
        )
        for multiple in ("2x", "4x"):
            longer = [h for h in rows if multiple in (h.get("reveal_accuracy_by_length") or {})]
            if longer:
                fig.add_scatter(
                    x=[h["step"] for h in longer],
                    y=[h["reveal_accuracy_by_length"][multiple] for h in longer],
                    mode="lines",
                    line={"dash": "dot"},
                    name=f"{name} at {multiple} the length",
                )
    fig.update_xaxes(title_text="optimiser step")
    fig.update_yaxes(range=[0, 1.02], title_text="held-out reveal accuracy")
    return _half_width(fig, "Training curves (validation during training)")


def _half_width(fig, title: str):
    """A short title and the legend below: these figures often sit in half the page's width."""
    fig.update_layout(
        title=title,
        template="plotly_white",
        height=460,
        legend={"orientation": "h", "yanchor": "top", "y": -0.25, "x": 0},
    )
    return fig
