"""One colour scale per kind of statistic, fixed by what the statistic is, never by the data on screen.

An auto-ranged heatmap makes a share of 0.32 look like none and puts an all-zero model mid-scale; a reader
compares two models' maps only if both use the same scale. So every heatmap the library draws (the census,
beta per head, the eigenvalue and patching maps) asks `scale_for(statistic)`:

    share        0 .. 1, sequential          beta_gt1, neg_gate, reflection_fraction, neg_eig_fraction, ...
    eigenvalue   -1 .. 1, diverging at 0     min_eigenvalue, min_decayed_eigenvalue, mean_eigenvalue
    beta         0 .. 2, diverging at 1      mean_beta, mean_beta_action, ... (1: where 1 - beta changes sign)
    restored     -1 .. 1, diverging at 0     a patching grid's fraction of the clean-corrupt difference
    rank         1 .. its maximum             effective_rank (a state's effective rank is at least 1)

`scale_for` returns plotly Heatmap keywords (colorscale, zmin, zmid, zmax) and the colourbar's title, which
says the range; None for a statistic of no known kind (the caller keeps plotly's own range).
"""

from __future__ import annotations

from typing import Any

__all__ = ["KINDS", "kind_of", "scale_for"]

KINDS: dict[str, dict[str, Any]] = {
    "share": {"colorscale": "Viridis", "zmin": 0.0, "zmax": 1.0, "note": "share, 0 to 1"},
    "eigenvalue": {"colorscale": "RdBu", "zmin": -1.0, "zmid": 0.0, "zmax": 1.0, "note": "-1 to 1, 0 white"},
    "beta": {"colorscale": "RdBu_r", "zmin": 0.0, "zmid": 1.0, "zmax": 2.0, "note": "0 to 2, 1 white"},
    "restored": {"colorscale": "RdBu", "zmin": -1.0, "zmid": 0.0, "zmax": 1.0, "note": "-1 to 1, 0 white"},
    "rank": {"colorscale": "Viridis", "zmin": 1.0, "note": "from 1"},
}


def kind_of(statistic: str) -> str | None:
    """The kind of a statistic's name (module docstring), or None."""
    name = statistic.lower()
    if "eigenvalue" in name and "fraction" not in name:
        return "eigenvalue"
    shares = name.startswith(("beta_gt", "neg_", "share", "reflection")) or name.endswith(("fraction", "_share"))
    if shares or "agreement" in name:
        return "share"
    if "beta" in name:
        return "beta"
    if "rank" in name:
        return "rank"
    if name in ("restored", "normalised"):
        return "restored"
    return None


def scale_for(statistic: str, title: str | None = None, top: float | None = None) -> dict[str, Any] | None:
    """plotly Heatmap keywords for `statistic`: its kind's fixed colour scale and a colourbar title that says the
    range (`title` names the statistic; `top`: the upper end for a kind open at the top, such as rank)."""
    kind = kind_of(statistic)
    if kind is None:
        return None
    spec = dict(KINDS[kind])
    note = spec.pop("note")
    if "zmax" not in spec and top is not None:
        spec["zmax"] = float(top)
    spec["colorbar"] = {"title": {"text": f"{title or statistic} ({note})"}}
    return spec
