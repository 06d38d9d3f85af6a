"""The timer every speed benchmark here shares (run them as `python3 benchmarks/NAME.py`)."""

from __future__ import annotations

import time


def best_seconds(fn, budget_s: float = 1.0, max_calls: int = 20) -> float:
    """Best of repeated calls within about budget_s (at least 2 calls after one warm-up)."""
    fn()
    best, spent, calls = float("inf"), 0.0, 0
    while calls < 2 or (spent < budget_s and calls < max_calls):
        started = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - started
        best, spent, calls = min(best, elapsed), spent + elapsed, calls + 1
    return best
