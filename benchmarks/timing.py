"""The timer every speed benchmark here shares (run them as `python3 benchmarks/NAME.py`), and the time budget
of a report made of parts (benchmarks/gpu.py, scripts/device_check.py): each part timed, a failing one reported
in place of its figures, the seconds left counted from the start, one JSON object out."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional


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


def machine_limits(shapes: dict[str, tuple[int, int, int]], seconds: float = 0.5) -> dict:
    """This machine's matmul speed in this run: F.linear GFLOP/s in fp32 and bf16 at each named (M, K, N)
    shape, with the CPU's name, its native bf16 flags and the threads. Benchmarks divide their own figures by
    these, so that a result on a loaded or a different machine reads as a fraction of what it could do."""
    import torch

    from deltalens.models.ops.bf16_check import NATIVE_FLAGS, cpu_bf16_flags, matmul_gflops

    name, flags = cpu_bf16_flags()
    out = {
        "cpu": name,
        "native_bf16_flags": [flag for flag in NATIVE_FLAGS if flag in flags.split()],
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "matmul_gflops": {},
    }
    for label, shape in shapes.items():
        fp32 = matmul_gflops(shape, torch.float32, seconds)
        bf16 = matmul_gflops(shape, torch.bfloat16, seconds)
        out["matmul_gflops"][label] = {
            "shape": list(shape),
            "fp32": round(fp32, 2),
            "bf16": round(bf16, 2),
            "bf16_over_fp32": round(bf16 / fp32, 3),
        }
    return out


def linear_flops(model, tokens: int) -> int:
    """Multiply-add FLOPs of every nn.Linear of `model` on `tokens` tokens (2 x tokens x in x out each)."""
    import torch

    return sum(2 * tokens * m.in_features * m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear))


def timed(part: Callable[..., dict], *args: Any) -> dict:
    """part(*args) -> dict with its wall time added; an exception becomes {"error": ...}, so that the other
    parts of the report still run."""
    started = time.perf_counter()
    try:
        result = part(*args)
    except Exception as err:  # reported, not raised: one JSON with every part
        result = {"error": f"{type(err).__name__}: {err}"}
    result["wall_s"] = round(time.perf_counter() - started, 1)
    return result


class Budget:
    """A run's seconds, counted from when it is made."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.started = seconds, time.perf_counter()

    def spent(self) -> float:
        return time.perf_counter() - self.started

    def left(self, reserve: float = 0.0) -> float:
        """Seconds still to spend, keeping `reserve` back for what comes after."""
        return self.seconds - self.spent() - reserve


def print_report(report: dict, one_line: bool, out: Optional[str]) -> int:
    """The report as one JSON object (one line, else indented) on stdout and in `out` if given; the exit code."""
    text = json.dumps(report) if one_line else json.dumps(report, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n")
    return 0
