"""Reading a run's validation curve (its result JSON's `history`): is it still rising at its end,
and would it reach a threshold if the same pace held for another budget?

A verdict "does not learn" on a run that is still climbing says as much about the budget as about
the model; `on_pace` is the rule the report uses to call such a verdict budget-bound.
"""

from __future__ import annotations

RISING = 0.02  # a validation gain over the last quarter above this: still rising (one eval's noise is ~0.015)


def last_quarter(result: dict) -> tuple[float, float] | None:
    """Validation at the last evaluation at or before 75% of the run's last step, and at that step
    (None with fewer than two evaluations)."""
    curve = [(h["step"], h["reveal_accuracy"]) for h in result.get("history", [])]
    if len(curve) < 2:
        return None
    before = [a for s, a in curve if s <= 0.75 * curve[-1][0]]
    return (before[-1] if before else curve[0][1]), curve[-1][1]


def still_rising(result: dict) -> bool:
    """The validation curve gained more than RISING over its last quarter (and did not stop early)."""
    quarter = last_quarter(result)
    return not result.get("stopped_early") and quarter is not None and quarter[1] - quarter[0] > RISING


def on_pace(result: dict, threshold: float) -> bool:
    """Still rising, and its last quarter's gain, kept up for another run of the same length (four more
    quarters, a straight line), would take its validation to `threshold`."""
    quarter = last_quarter(result)
    if not still_rising(result) or quarter is None:
        return False
    start, end = quarter
    return end + 4 * (end - start) >= threshold
