"""Measurements kept on disk, keyed by the checkpoint's weights, so a page opens a checkpoint in a
second after the first time (on any later server too).

Under $DELTALENS_CACHE (default ~/.cache/deltalens; delete it to recompute): sweeps/*.json (the
head sweep) and measures/*.pkl (the pages' reports and figures). A key hashes model.safetensors,
what was asked (step, traces, seed) and, for the reports, the library's source (a changed probe
recomputes); what belongs to no checkpoint (the decay laws, the sweep's figures) is keyed by the
source and what was asked alone. An unreadable file is computed again, never an error. Light to
import (no torch): the Checkpoints page uses it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deltalens import ROOMS
from deltalens.app.folder import cache_dir

LIBRARY = Path(__file__).resolve().parents[1]
COMPUTING_ROOMS = tuple(r for r in ROOMS if r not in ("core", "loading", "cli", "app"))  # what results depend on


def sweep_dir() -> Path:
    return cache_dir() / "sweeps"


@functools.lru_cache(maxsize=64)
def _file_hash(path: str, size: int, mtime_ns: int) -> str:
    return hashlib.sha1(Path(path).read_bytes()).hexdigest()


def weights_hash(folder: Path) -> str:
    """sha1 of the checkpoint's model.safetensors (read once per file version)."""
    file = Path(folder) / "model.safetensors"
    stat = file.stat()
    return _file_hash(str(file), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha1 of the computing rooms' Python sources: a cached report is only as good as the code."""
    digest = hashlib.sha1()
    for room in COMPUTING_ROOMS:
        for file in sorted((LIBRARY / room).rglob("*.py")):
            digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


MISSING = object()  # what read_result returns for a result not on disk (None is a result)


def _result_file(step: str, folder: Path | None, params: str) -> Path:
    weights = weights_hash(folder) if folder is not None else "no-checkpoint"
    key = hashlib.sha1(f"{weights}/{code_fingerprint()}/{step}/{params}".encode()).hexdigest()[:16]
    owner = Path(folder).name if folder is not None else "shared"
    return cache_dir() / "measures" / f"{owner}-{step}-{key}.pkl"


def read_result(step: str, folder: Path | None, params: str) -> Any:
    """What cached_result keeps for this question, or MISSING (a page shows it, or offers a button)."""
    try:
        with open(_result_file(step, folder, params), "rb") as handle:
            return pickle.load(handle)
    except Exception:  # not cached yet, or unreadable (another library version): computed again
        return MISSING


def has_result(step: str, folder: Path | None, params: str) -> bool:
    """Whether cached_result keeps this question on disk (without reading it: a check a page makes on every run)."""
    return _result_file(step, folder, params).is_file()


def cached_result(step: str, folder: Path | None, params: str, compute: Callable[[], Any]) -> Any:
    """compute(), kept in measures/<checkpoint>-<step>-<key>.pkl (written atomically); folder None: a
    result of no checkpoint (measures/shared-<step>-<key>.pkl)."""
    found = read_result(step, folder, params)
    if found is not MISSING:
        return found
    file = _result_file(step, folder, params)
    value = compute()
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        temporary = file.with_suffix(f".{os.getpid()}.tmp")
        with open(temporary, "wb") as handle:
            pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, file)
    except OSError:  # a read-only cache folder: the page still shows the result
        pass
    return value


def is_cached_sweep(checkpoint, n_traces: int, intervention: str = "beta-range", factor: int | None = None) -> bool:
    named = intervention if factor is None else f"{intervention}@factor{factor}"
    return _sweep_file(checkpoint, n_traces, named).is_file()


def sweep_layers(model) -> list[int]:
    """The layers a head sweep visits (a hybrid's delta-rule layers)."""
    from deltalens.models.architecture import delta_layers_of

    return delta_layers_of(model) or list(range(model.cfg.n_layers))


def _sweep_file(checkpoint, n_traces: int, intervention: str) -> Path:
    key = hashlib.sha1(f"{weights_hash(checkpoint.path)}/{intervention}/{n_traces}".encode()).hexdigest()[:16]
    return sweep_dir() / f"{checkpoint.path.name}-{key}.json"


def cached_sweep(
    checkpoint,
    n_traces: int,
    intervention: str = "beta-range",
    on_head: Callable[[int, int], None] | None = None,
    factor: int | None = None,
):
    """The head sweep of `intervention` (one of dl.sweep's kinds; a SweepResult), computed once per checkpoint
    (weights), kind and factor, and kept as JSON.

    on_head(layer, head): called before each head is run (a progress bar)."""
    import pandas as pd

    from deltalens.core.atomic import write_json_atomic
    from deltalens.interp.head_sweep import SweepResult, sweep

    named = intervention if factor is None else f"{intervention}@factor{factor}"
    file = _sweep_file(checkpoint, n_traces, named)
    try:
        data = json.loads(file.read_text())
        return SweepResult(
            baseline=data["baseline"],
            frame=pd.DataFrame(data["heads"]),
            intervention=data["intervention"],
            n_traces=data["n_traces"],
        )
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not cached yet, or unreadable: compute it again

    batch = checkpoint.batch(n_traces, seed=0)
    result = sweep(checkpoint.model, batch, intervention, progress=False, factor=factor, on_head=on_head)
    write_json_atomic(file, result.to_dict())
    return result
