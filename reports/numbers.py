"""How the reports write a value measured over seeds: `mean [min–max]`, one seed as itself."""

from __future__ import annotations


def mean_range(values: list[float], digits: int = 3) -> str:
    """'0.512 [0.431–0.602]' over several values, '0.512' for one, '–' for none."""
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{sum(values) / len(values):.{digits}f} [{min(values):.{digits}f}–{max(values):.{digits}f}]"
