"""The library's figures made readable on the dashboard: distinct colours, titles that fit, named
colourbars, labelled reference lines, explained empty panels.

The figure functions live in the library (probes/, interp/, training/, reports/) and draw for
notebooks and reports too; what only the dashboard needs (Streamlit's theme pairs dark and light
blues and reds, half-width columns cut long titles) is applied here, to the returned figure.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import plotly.graph_objects as go
import streamlit as st

# Okabe-Ito: distinct for colour-blind readers too (Streamlit's default sequence pairs similar hues)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
# raw column names as readers should see them
READABLE = {
    "mean_beta_action": "mean β on actions",
    "mean_beta": "mean β",
    "mean beta action": "mean β on action tokens",
    "mean beta": "mean β",
}


def distinct_colours(fig: go.Figure) -> go.Figure:
    """Give every line, bar or histogram without a colour of its own the next palette colour."""
    i = 0
    for trace in fig.data:
        if trace.type not in ("scatter", "scattergl", "bar", "histogram"):
            continue
        has = trace.marker.color is not None or (trace.type.startswith("scatter") and trace.line.color is not None)
        if has:
            continue
        colour = PALETTE[i % len(PALETTE)]
        i += 1
        trace.marker.color = colour
        if trace.type.startswith("scatter"):
            trace.line.color = colour
    return fig


def wrap_title(fig: go.Figure, width: int = 58) -> go.Figure:
    """Break a long title into lines of at most `width` characters (it would be cut otherwise)."""
    text = fig.layout.title.text
    if text and len(text) > width and "<br>" not in text:
        lines = textwrap.wrap(text, width)
        fig.update_layout(title_text="<br>".join(lines), margin_t=40 + 22 * len(lines))
    return fig


def readable(fig: go.Figure) -> go.Figure:
    """Colourbar and title words from column names (mean_beta_action) in plain words."""
    for trace in fig.data:
        title = trace.colorbar.title.text if trace.type == "heatmap" else None
        if title:  # "mean beta (0 to 2, 1 white)": the name made readable, the range kept
            name, _, rest = title.partition(" (")
            if name in READABLE:
                trace.colorbar.title.text = READABLE[name] + (f" ({rest}" if rest else "")
    text = fig.layout.title.text or ""
    for raw, plain in READABLE.items():
        if text.startswith(raw + " per"):
            fig.update_layout(title_text=plain + text[len(raw) :])
            break
    return fig


def count_heatmap(fig: go.Figure) -> go.Figure:
    """A heatmap of counts: its colour scale from 0 to the largest count, and no colourbar when
    every cell holds the same count (a one-cell map had a bar from 399.6 to 400.4)."""
    for trace in fig.data:
        if trace.type != "heatmap" or trace.z is None:
            continue
        z = np.asarray(trace.z, dtype=float)
        finite = z[np.isfinite(z)]
        if finite.size == 0:
            continue
        trace.zmin, trace.zmax = 0, max(float(finite.max()), 1.0)
        if np.unique(finite).size == 1:
            trace.showscale = False
    return fig


def label_reference_lines(fig: go.Figure) -> go.Figure:
    """Name reference lines that a figure left unlabelled (plotly shows those as "new text"): a
    horizontal line at 1/n is the chance level."""
    for note in fig.layout.annotations:
        if note.text is None and isinstance(note.y, (int, float)) and 0 < note.y < 1:
            n = round(1 / note.y)
            note.text = f"chance 1/{n}" if math.isclose(note.y, 1 / n, rel_tol=1e-6) else f"{note.y:g}"
    return fig


def explain_empty_panels(fig: go.Figure, sentence: str = "no sweep runs in this setting") -> go.Figure:
    """Write `sentence` in every subplot that holds no data (it was an empty frame)."""
    used = {(t.xaxis or "x", t.yaxis or "y") for t in fig.data}
    titles = {round(a.x, 3): a.text for a in fig.layout.annotations if a.xref == "paper" and a.yref == "paper"}
    for name in fig.layout:
        if not name.startswith("xaxis"):
            continue
        x = "x" + name[5:]
        axis = fig.layout[name]
        y = axis.anchor
        if y is None or (x, y) in used:
            continue
        yaxis = fig.layout["yaxis" + y[1:]]
        if axis.domain is None or yaxis.domain is None:
            continue
        middle = (sum(axis.domain) / 2, sum(yaxis.domain) / 2)
        title = titles.get(round(middle[0], 3))
        fig.add_annotation(
            x=middle[0],
            y=middle[1],
            xref="paper",
            yref="paper",
            text=sentence,
            xanchor="center",
            yanchor="middle",
            showarrow=False,
            font={"color": "#777", "size": 11},
            hovertext=title,
        )
    return _row_ticks_beside_empty_panels(fig, used)


def _row_ticks_beside_empty_panels(fig: go.Figure, used: set) -> go.Figure:
    """Shared y axes show their tick labels on a row's first panel only: where that panel is empty, the row's
    first panel with data shows them (else no panel of that row had a scale)."""
    rows: dict[tuple, list[tuple[float, str, bool]]] = {}
    for name in fig.layout:
        if name.startswith("xaxis") and fig.layout[name].anchor and fig.layout[name].domain:
            y = fig.layout[name].anchor
            yaxis = fig.layout["yaxis" + y[1:]]
            if yaxis.domain:
                has_data = ("x" + name[5:], y) in used
                rows.setdefault(tuple(yaxis.domain), []).append((fig.layout[name].domain[0], y, has_data))
    for panels in rows.values():
        panels.sort()
        if panels and not panels[0][2]:
            first = next((y for _, y, has_data in panels if has_data), None)
            if first is not None:
                fig.layout["yaxis" + first[1:]].showticklabels = True
    return fig


def bar_labels_inside(fig: go.Figure) -> go.Figure:
    """Bar values inside the bars, so they do not sit on a reference line's label at the top."""
    fig.update_traces(selector={"type": "bar"}, textposition="inside", insidetextanchor="end")
    return fig


def power_ticks(fig: go.Figure) -> go.Figure:
    """Log axes in powers of ten (plotly's SI prefixes wrote 1e-12 as "1p"), a log y axis ending at
    the data (a tick at 1e-324, below what a double holds, was labelled "0")."""
    fig.update_yaxes(exponentformat="power")
    fig.update_xaxes(exponentformat="power")
    if fig.layout.yaxis.type == "log":
        values = np.concatenate([np.asarray(t.y, dtype=float) for t in fig.data if t.y is not None] or [np.ones(1)])
        positive = values[np.isfinite(values) & (values > 0)]
        if positive.size:
            low, high = np.log10(positive.min()), np.log10(positive.max())
            fig.update_yaxes(range=[max(low - 0.3, -323.0), high + 0.3])
    return fig


def level_line_labels(fig: go.Figure, size: int = 10) -> go.Figure:
    """Vertical lines' labels written horizontally, one under the other (turned and side by side
    they overlapped)."""
    vertical = [a for a in fig.layout.annotations if a.textangle == -90]
    for i, note in enumerate(sorted(vertical, key=lambda a: a.x or 0)):
        text = (note.text or "").replace(": 0 at ", " is 0 from ")  # "float16: 0 at 25": the mass underflows there
        note.update(
            text=text,
            textangle=0,
            yref="paper",
            y=0.03 + 0.08 * i,  # from the bottom: the decaying lines start at the top left
            yanchor="bottom",
            xanchor="left",
            font_size=size,
            bgcolor="rgba(255,255,255,0.85)",
        )
    if vertical:  # the legend below: a half-width figure needs its width for the lines
        fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.22, "x": 0}, margin_b=140)
    return fig


def show(fig: go.Figure, where=st, title_width: int = 58, **kwargs) -> None:
    """st.plotly_chart of the figure, with distinct colours and a title that fits."""
    fig.update_yaxes(automargin=True)  # tick labels ("layer 0") whole, not cut at the left edge
    where.plotly_chart(wrap_title(distinct_colours(fig), title_width), width="stretch", **kwargs)
