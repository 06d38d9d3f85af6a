"""app/figures.py's helpers on the shared-axis subplot grids the Checkpoints page draws."""

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from deltalens.app.figures import explain_empty_panels


def test_a_row_whose_first_panel_is_empty_shows_its_scale_on_the_first_panel_with_data():
    fig = make_subplots(rows=2, cols=3, shared_yaxes=True, subplot_titles=list("abcdef"))
    fig.add_trace(go.Scatter(x=[1, 2], y=[0.3, 0.9]), row=1, col=2)  # row 1: the first panel empty
    fig.add_trace(go.Scatter(x=[1, 2], y=[0.3, 0.9]), row=2, col=1)  # row 2: the first panel holds data
    explain_empty_panels(fig, "nothing here")
    assert fig.layout.yaxis2.showticklabels is True and fig.layout.yaxis3.showticklabels is False
    assert fig.layout.yaxis4.showticklabels is None and fig.layout.yaxis5.showticklabels is False  # as drawn
    assert sum(a.text == "nothing here" for a in fig.layout.annotations) == 4
