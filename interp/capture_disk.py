"""Captures that spill to disk: `capture(..., to=DIR)` writes, `open_capture(DIR)` reads back lazily.

A capture bigger than memory (every layer's states at every reveal of thousands of traces) cannot be
held, but it can be written: each slice of traces the capture streams through has its kept rows
written straight into place in a file and dropped, so memory never holds more than one slice.

The folder, in the layout of a sharded Hugging Face checkpoint:

    capture.index.json        what was captured (architecture, sizes, shapes) and `weight_map`:
                              hook name -> the safetensors shard holding it
    acts-00000.safetensors    one hook's rows (N, ...) float32, one shard per hook
    ...
    logits.safetensors        (N, vocab) float32, when with_logits=True
    labels.safetensors        the labels (trace, position, kind, ...), the true states and lengths

Each shard holds one tensor whose size is known before the run (the rows the filters keep times the
hook's trailing shape, from the first slice), so its header is written first and each slice's rows
go to their byte offset: the file is a valid safetensors file once the last slice is written. The
folder is written under a temporary name and renamed into place when complete.

`open_capture(DIR)` gives back a `Capture` (the same class the probes take) whose activations are
memory-mapped on first use: opening reads only the index and the labels, and a probe that reads beta
never touches the states' pages.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from deltalens.core.atomic import replace_dir
from deltalens.core.errors import DeltalensError
from deltalens.interp.capture_result import Capture

__all__ = ["INDEX_NAME", "CaptureWriter", "open_capture", "LazyActs"]

INDEX_NAME = "capture.index.json"
FORMAT = "deltalens-capture"
VERSION = 1
LABELS_FILE = "labels.safetensors"
LOGITS_FILE = "logits.safetensors"
LOGITS_KEY = "logits"


class _Shard:
    """One float32 tensor of `rows` rows, written a slice of rows at a time into a safetensors file."""

    def __init__(self, path: Path, key: str, rows: int):
        self.path, self.key, self.rows = path, key, rows
        self.handle = None
        self.written = 0  # rows so far
        self.row_bytes = 0
        self.shape: tuple[int, ...] = ()

    def _open(self, trailing: tuple[int, ...]) -> None:
        self.shape = (self.rows, *trailing)
        self.row_bytes = 4 * math.prod(trailing)
        size = self.rows * self.row_bytes
        header = {self.key: {"dtype": "F32", "shape": list(self.shape), "data_offsets": [0, size]}}
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # safetensors pads the header with spaces to 8-byte alignment
        self.handle = open(self.path, "wb")  # noqa: SIM115 (closed in close(); one handle per hook for the run)
        self.handle.write(struct.pack("<Q", len(text)) + text)
        self.data_start = 8 + len(text)
        self.handle.truncate(self.data_start + size)

    def write(self, block: torch.Tensor) -> None:
        if self.handle is None:
            self._open(tuple(block.shape[1:]))
        if tuple(block.shape[1:]) != self.shape[1:]:
            raise DeltalensError(
                f"{self.key} changed shape between slices ({tuple(block.shape[1:])} after {self.shape[1:]}); "
                "capture it with one batch_size that covers the batch, or without to=."
            )
        if self.written + block.shape[0] > self.rows:
            raise RuntimeError(f"{self.key}: more rows than the plan kept ({self.rows})")
        self.handle.seek(self.data_start + self.written * self.row_bytes)
        self.handle.write(block.detach().to(torch.float32).contiguous().numpy().tobytes())
        self.written += block.shape[0]

    def close(self) -> None:
        if self.handle is None:  # never fired: an empty (0, ...) tensor keeps the name readable
            self._open(())
        self.handle.close()
        if self.written != self.rows:
            raise RuntimeError(f"{self.key}: {self.written} rows written, {self.rows} planned")


class CaptureWriter:
    """Receives each slice's kept rows (`add`, `add_logits`) and writes them to a staging folder beside
    `target`; `finish(...)` writes the labels and the index and moves the folder into place."""

    def __init__(self, target, names: list[str], rows: int, estimated_bytes: int, with_logits: bool):
        self.target = Path(target)
        if self.target.exists() and not (self.target / INDEX_NAME).is_file():
            raise DeltalensError(
                f"{self.target} exists and is not a capture folder; capture to a new folder (nothing was written)."
            )
        self.target.parent.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.target.parent).free
        if estimated_bytes > free:
            raise DeltalensError(
                f"this capture would write {estimated_bytes / 2**30:,.2f} GB but {self.target.parent} has "
                f"{free / 2**30:,.2f} GB free; keep fewer layers, tokens or traces, or capture to another disk."
            )
        self.staging = self.target.with_name(f".{self.target.name}.partial")
        shutil.rmtree(self.staging, ignore_errors=True)  # a leftover of an interrupted capture
        self.staging.mkdir()
        self.files = {name: f"acts-{i:05d}.safetensors" for i, name in enumerate(names)}
        self.shards = {name: _Shard(self.staging / file, name, rows) for name, file in self.files.items()}
        self.logits = _Shard(self.staging / LOGITS_FILE, LOGITS_KEY, rows) if with_logits else None

    def add(self, name: str, rows: torch.Tensor) -> None:
        self.shards[name].write(rows)

    def add_logits(self, rows: torch.Tensor) -> None:
        self.logits.write(rows)

    def finish(self, labels: dict, states: torch.Tensor, lengths: torch.Tensor, meta: dict) -> Path:
        for shard in [*self.shards.values(), *([self.logits] if self.logits else [])]:
            shard.close()
        tensors = {f"label.{key}": value.contiguous() for key, value in labels.items()}
        tensors["states"], tensors["lengths"] = states.contiguous(), lengths.contiguous()
        save_file(tensors, str(self.staging / LABELS_FILE))
        index = {
            "format": FORMAT,
            "version": VERSION,
            **meta,
            "shapes": {name: list(shard.shape) for name, shard in self.shards.items()},
            "weight_map": dict(self.files),
            "logits": LOGITS_FILE if self.logits else None,
        }
        (self.staging / INDEX_NAME).write_text(json.dumps(index, indent=1) + "\n")
        replace_dir(self.staging, self.target)
        return self.target

    def abandon(self) -> None:
        for shard in [*self.shards.values(), *([self.logits] if self.logits else [])]:
            if shard.handle is not None:
                shard.handle.close()
        shutil.rmtree(self.staging, ignore_errors=True)


class LazyActs(Mapping):
    """hook name -> its (N, ...) tensor, memory-mapped from the folder's shard on first access."""

    def __init__(self, folder: Path, weight_map: dict[str, str]):
        self.folder, self.weight_map = folder, dict(weight_map)
        self._open: dict[str, torch.Tensor] = {}

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._open:
            file = self.weight_map[name]  # KeyError for a name not captured, as a dict
            with safe_open(str(self.folder / file), framework="pt") as handle:
                self._open[name] = handle.get_tensor(name)  # a view of the mapped file: pages load when read
        return self._open[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.weight_map)

    def __len__(self) -> int:
        return len(self.weight_map)

    def __contains__(self, name) -> bool:
        return name in self.weight_map


def open_capture(folder):
    """The capture written by `capture(..., to=folder)`, its activations read lazily (module docstring).

    >>> import tempfile
    >>> folder = tempfile.mkdtemp() + "/capture"            # a new folder: activations kept on disk
    >>> _ = dl.capture(model, batch, names=("beta",), to=folder)
    >>> dl.open_capture(folder).n_traces
    8
    """
    folder = Path(folder)
    index_path = folder / INDEX_NAME
    if not index_path.is_file():
        raise DeltalensError(f"{folder} is not a capture folder (no {INDEX_NAME}); write one with capture(..., to=).")
    try:
        index = json.loads(index_path.read_text())
        if index.get("format") != FORMAT:
            raise ValueError("not a deltalens capture index")
        stored = load_file(str(folder / LABELS_FILE))
        weight_map = dict(index["weight_map"])
        for file in {*weight_map.values(), *([index["logits"]] if index.get("logits") else [])}:
            if Path(file).name != file or not (folder / file).is_file():
                raise ValueError(f"shard {file!r} is missing")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DeltalensError(f"{folder} holds a damaged capture ({err}); capture it again.") from None
    logits = None
    if index.get("logits"):
        with safe_open(str(folder / index["logits"]), framework="pt") as handle:
            logits = handle.get_tensor(LOGITS_KEY)
    return Capture(
        arch=index["arch"],
        acts=LazyActs(folder, weight_map),
        labels={key.removeprefix("label."): value for key, value in stored.items() if key.startswith("label.")},
        states=stored["states"],
        n_traces=int(index["n_traces"]),
        n_layers=int(index["n_layers"]),
        n_heads=int(index["n_heads"]),
        lengths=stored["lengths"],
        logits=logits,
        estimated_bytes=index.get("estimated_bytes"),
        slices=int(index.get("slices", 1)),
        delta_layers=None if index.get("delta_layers") is None else tuple(int(x) for x in index["delta_layers"]),
    )


def folder_bytes(folder) -> int:
    """Bytes the capture folder takes on disk (its files' sizes)."""
    return sum(os.path.getsize(path) for path in Path(folder).iterdir() if path.is_file())
