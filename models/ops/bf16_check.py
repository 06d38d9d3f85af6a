"""Is bf16 worth it on this CPU? A measured answer, taken once per machine and shape, kept on disk.

bf16 halves the weights' memory but is fast only where the CPU multiplies bf16 natively (AMX or
AVX512-BF16): there a bf16 matmul runs 3-7x fp32; on AVX2 / plain AVX512 torch converts to fp32 inside
the kernel and a bf16 matmul runs at 0.2-0.4x fp32. The CPU's flags say which kind of machine this is,
but only a measurement says what torch makes of it, so `bf16_check` times `F.linear` in both dtypes at
the model's shapes (a (tokens, d_model) activation times a (d_model, d_model) weight, the shape of
every projection) and caches the result in $DELTALENS_CACHE (default ~/.cache/deltalens)/bf16_check.json,
keyed by CPU model, flags, torch version, threads and shape.

`cast_model(model, "auto")` (models/ops/precision.py) reads it: models below AUTO_MIN_PARAMS keep their
saved dtype (the shipped checkpoints' outputs never change); bigger ones run bf16 only where bf16
matmuls beat fp32 by BF16_MARGIN. Asking for bf16 where it is slower is allowed, with one warning that
gives the measured ratio.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

__all__ = [
    "AUTO_MIN_PARAMS",
    "BF16_MARGIN",
    "Bf16Check",
    "bf16_check",
    "cpu_bf16_flags",
    "model_shape",
    "matmul_gflops",
]

AUTO_MIN_PARAMS = 50_000_000  # below: "auto" keeps the saved dtype (every shipped checkpoint is far below)
BF16_MARGIN = 1.1  # bf16 must beat fp32 by 10%: within the noise of a shared machine, fp32 is the safe side
TOKENS = 128  # activation rows of the timed matmul: a short trace, or a slice of traces
NATIVE_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16")  # /proc/cpuinfo flags of native bf16 arithmetic


@dataclass(frozen=True)
class Bf16Check:
    """What one timing of F.linear said: GFLOP/s in each dtype at `shape` (M, K, N)."""

    cpu: str  # the CPU's model name
    native_flags: tuple[str, ...]  # which of NATIVE_FLAGS the CPU reports
    capability: str  # torch.backends.cpu.get_cpu_capability(): the widest vector ISA torch dispatches to
    threads: int
    shape: tuple[int, int, int]
    fp32_gflops: float
    bf16_gflops: float

    @property
    def ratio(self) -> float:
        """bf16 speed / fp32 speed (> 1: bf16 is faster)."""
        return self.bf16_gflops / self.fp32_gflops if self.fp32_gflops else 0.0

    @property
    def bf16_faster(self) -> bool:
        return self.ratio >= BF16_MARGIN

    def as_dict(self) -> dict:
        return {**asdict(self), "ratio": round(self.ratio, 3), "bf16_faster": self.bf16_faster}


def cpu_bf16_flags() -> tuple[str, str]:
    """(the CPU's model name, its /proc/cpuinfo flags) ("", "") where there is no /proc/cpuinfo."""
    name, flags = "", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not name:
                name = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = value.strip()
            if name and flags:
                break
    except OSError:
        pass
    return name, flags


def matmul_gflops(shape: tuple[int, int, int], dtype: torch.dtype, seconds: float = 0.3) -> float:
    """GFLOP/s of F.linear((M, K) x (N, K)^T) in `dtype` on this CPU, the best of repeated calls."""
    M, K, N = shape
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(M, K, generator=generator).to(dtype)
    w = torch.randn(N, K, generator=generator).to(dtype)
    F.linear(a, w)  # warm-up: packs, allocations
    best, spent, calls = float("inf"), 0.0, 0
    while calls < 2 or (spent < seconds and calls < 50):
        start = time.perf_counter()
        F.linear(a, w)
        took = time.perf_counter() - start
        best, spent, calls = min(best, took), spent + took, calls + 1
    return 2 * M * K * N / best / 1e9


def model_shape(model) -> tuple[int, int, int]:
    """(tokens, d_model, d_model): the timed matmul's shape for `model` (its hidden size)."""
    config = getattr(model, "config", None)
    width = getattr(config, "hidden_size", None) or getattr(getattr(model, "cfg", None), "d_model", None) or 1024
    return TOKENS, int(width), int(width)


def _cache_file() -> Path:
    return Path(os.environ.get("DELTALENS_CACHE") or Path.home() / ".cache" / "deltalens") / "bf16_check.json"


def bf16_check(shape: tuple[int, int, int] = (TOKENS, 2048, 2048), refresh: bool = False) -> Bf16Check:
    """bf16 against fp32 F.linear at `shape` on this machine: from the disk cache, else measured (~1 s) and
    cached. `refresh=True` measures again (after a BIOS or torch change the key changes by itself)."""
    name, flags = cpu_bf16_flags()
    native = tuple(flag for flag in NATIVE_FLAGS if flag in flags.split())
    capability = torch.backends.cpu.get_cpu_capability()
    threads = torch.get_num_threads()
    M, K, N = (int(x) for x in shape)  # plain ints in the cache key (numpy's or torch's print otherwise)
    shape = (M, K, N)
    key = f"{name}|{','.join(native)}|{capability}|torch {torch.__version__}|{threads} threads|{shape}"
    path = _cache_file()
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if not isinstance(cached, dict):
        cached = {}
    entry = cached.get(key)
    if not refresh and isinstance(entry, dict):
        try:
            return Bf16Check(name, native, capability, threads, shape, float(entry["fp32"]), float(entry["bf16"]))
        except (KeyError, TypeError, ValueError):
            pass  # a damaged entry: measure again
    fp32 = matmul_gflops(shape, torch.float32)
    bf16 = matmul_gflops(shape, torch.bfloat16)
    check = Bf16Check(name, native, capability, threads, shape, fp32, bf16)
    cached[key] = {"fp32": round(fp32, 3), "bf16": round(bf16, 3), "measured": time.strftime("%Y-%m-%d")}
    try:  # a cache that cannot be written costs a re-measurement next time, nothing else
        from deltalens.core.atomic import write_json_atomic

        write_json_atomic(path, cached)
    except Exception as err:  # noqa: BLE001 (read-only home, full disk: never fail a load over a cache)
        warnings.warn(f"deltalens: could not cache the bf16 check in {path} ({err})", RuntimeWarning, stacklevel=2)
    return check
