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
from io import BufferedWriter
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

    def __init__(self, path: Path, key: str, rows: int, capture_id: str = ""):
        self.path, self.key, self.rows, self.capture_id = path, key, rows, capture_id
        self.handle: BufferedWriter | None = None  # open from the first slice (or close) on
        self.written = 0  # rows so far
        self.row_bytes = 0
        self.shape: tuple[int, ...] = ()

    def _open(self, trailing: tuple[int, ...]) -> BufferedWriter:
        self.shape = (self.rows, *trailing)
        self.row_bytes = 4 * math.prod(trailing)
        size = self.rows * self.row_bytes
        header = {
            "__metadata__": {"capture": self.capture_id},  # which capture this shard belongs to (open_capture checks)
            self.key: {"dtype": "F32", "shape": list(self.shape), "data_offsets": [0, size]},
        }
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # safetensors pads the header with spaces to 8-byte alignment
        handle = open(self.path, "wb")  # noqa: SIM115 (closed in close(); one handle per hook for the run)
        self.handle = handle
        handle.write(struct.pack("<Q", len(text)) + text)
        self.data_start = 8 + len(text)
        handle.truncate(self.data_start + size)
        return handle

    def write(self, block: torch.Tensor) -> None:
        handle = self.handle if self.handle is not None else self._open(tuple(block.shape[1:]))
        if tuple(block.shape[1:]) != self.shape[1:]:
            raise DeltalensError(
                f"{self.key} changed shape between slices ({tuple(block.shape[1:])} after {self.shape[1:]}); "
                "capture it with one batch_size that covers the batch, or without to=."
            )
        if self.written + block.shape[0] > self.rows:
            raise RuntimeError(f"{self.key}: more rows than the plan kept ({self.rows})")
        handle.seek(self.data_start + self.written * self.row_bytes)
        handle.write(block.detach().to(torch.float32).contiguous().numpy().tobytes())
        self.written += block.shape[0]

    def close(self) -> None:
        # never fired: an empty (0, ...) tensor keeps the name readable
        handle = self.handle if self.handle is not None else self._open(())
        handle.close()
        if self.written != self.rows:
            raise RuntimeError(f"{self.key}: {self.written} rows written, {self.rows} planned")


class CaptureWriter:
    """Receives each slice's kept rows (`add`, `add_logits`) and writes them to a staging folder beside
    `target`; `finish(...)` writes the labels and the index and moves the capture into place.

    Nothing is deleted that the capture did not write: a new `target` is the staging folder renamed; an earlier
    capture there is replaced only with `overwrite=True`, and then only its own files (the index, the shards,
    labels and logits it names), any other file of the folder left as it is. A staging folder left by a killed
    capture (`.NAME.partial-*`, its writer's pid inside) is removed by the next capture to the same target once
    that process is gone. A write that fails (a full disk, a read-only folder) leaves nothing behind and says so.
    """

    def __init__(
        self, target, names: list[str], rows: int, estimated_bytes: int, with_logits: bool, overwrite: bool = False
    ):
        import os
        import uuid

        self.target, self.overwrite = Path(target), overwrite
        if self.target.exists():
            if not (self.target / INDEX_NAME).is_file():
                raise DeltalensError(
                    f"{self.target} exists and is not a capture folder; capture to a new folder (nothing was written)."
                )
            if not overwrite:
                raise DeltalensError(
                    f"{self.target} holds a capture already; pass overwrite=True to replace it (only its own files are "
                    "replaced), or capture to a new folder (nothing was written)."
                )
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(self.target.parent).free
            if estimated_bytes > free:
                raise DeltalensError(
                    f"this capture would write {estimated_bytes / 2**30:,.2f} GB but {self.target.parent} has "
                    f"{free / 2**30:,.2f} GB free; keep fewer layers, tokens or traces, or capture to another disk."
                )
            _remove_stale_partials(self.target)
            self.capture_id = uuid.uuid4().hex
            self.staging = self.target.with_name(f".{self.target.name}.partial-{self.capture_id[:12]}")
            self.staging.mkdir()
            (self.staging / "writer.pid").write_text(str(os.getpid()))
        except OSError as err:
            raise DeltalensError(
                f"cannot write a capture beside {self.target} ({err.strerror or err}): is the folder read-only? "
                "Nothing was written."
            ) from None
        self.files = {name: f"acts-{i:05d}.safetensors" for i, name in enumerate(names)}
        self.shards = {
            name: _Shard(self.staging / file, name, rows, self.capture_id) for name, file in self.files.items()
        }
        self.logits = _Shard(self.staging / LOGITS_FILE, LOGITS_KEY, rows, self.capture_id) if with_logits else None

    def _writing(self, action, *args):
        try:
            return action(*args)
        except OSError as err:
            self.abandon()
            raise DeltalensError(
                f"writing the capture to {self.target} failed ({err.strerror or err}: a full disk, or a file-size "
                "limit?); the partial capture was removed, nothing is left half written."
            ) from None

    def add(self, name: str, rows: torch.Tensor) -> None:
        self._writing(self.shards[name].write, rows)

    def add_logits(self, rows: torch.Tensor) -> None:
        if self.logits is None:
            raise DeltalensError("this capture keeps no logits (with_logits=False); add_logits has nowhere to write")
        self._writing(self.logits.write, rows)

    def finish(self, labels: dict, states: torch.Tensor, lengths: torch.Tensor, meta: dict) -> Path:
        return self._writing(self._finish, labels, states, lengths, meta)

    def _finish(self, labels: dict, states: torch.Tensor, lengths: torch.Tensor, meta: dict) -> Path:
        for shard in [*self.shards.values(), *([self.logits] if self.logits else [])]:
            shard.close()
        tensors = {f"label.{key}": value.contiguous() for key, value in labels.items()}
        tensors["states"], tensors["lengths"] = states.contiguous(), lengths.contiguous()
        save_file(tensors, str(self.staging / LABELS_FILE), metadata={"capture": self.capture_id})
        index = {
            "format": FORMAT,
            "version": VERSION,
            "capture": self.capture_id,
            **meta,
            "shapes": {name: list(shard.shape) for name, shard in self.shards.items()},
            "weight_map": dict(self.files),
            "logits": LOGITS_FILE if self.logits else None,
        }
        (self.staging / INDEX_NAME).write_text(json.dumps(index, indent=1) + "\n")
        (self.staging / "writer.pid").unlink()
        if not self.target.exists():
            replace_dir(self.staging, self.target)
            return self.target
        _move_capture_files(self.staging, self.target)
        return self.target

    def abandon(self) -> None:
        for shard in [*self.shards.values(), *([self.logits] if self.logits else [])]:
            if shard.handle is not None and not shard.handle.closed:
                shard.handle.close()
        shutil.rmtree(self.staging, ignore_errors=True)


def capture_files(folder: Path) -> list[Path]:
    """The files a capture in `folder` owns: the index and every shard, labels and logits file it names."""
    try:
        index = json.loads((folder / INDEX_NAME).read_text())
        named = {*dict(index.get("weight_map") or {}).values(), LABELS_FILE, index.get("logits") or LOGITS_FILE}
    except (OSError, ValueError, TypeError, AttributeError):
        named = {LABELS_FILE, LOGITS_FILE}
    owned = [folder / name for name in sorted(named) if isinstance(name, str) and Path(name).name == name]
    return [folder / INDEX_NAME, *(p for p in owned if p.is_file())]


def _move_capture_files(staging: Path, target: Path) -> None:
    """Replace the capture in `target` by the one in `staging`, file by file: the old index first (a reader sees
    no capture while the shards change), the new index last; the folder's other files stay."""
    for old in capture_files(target):
        old.unlink(missing_ok=True)
    for new in sorted(staging.iterdir(), key=lambda p: p.name == INDEX_NAME):
        os.replace(new, target / new.name)
    shutil.rmtree(staging, ignore_errors=True)


def _remove_stale_partials(target: Path) -> None:
    """Staging folders of earlier captures to `target` whose writer is gone (a SIGKILL mid-capture)."""
    for partial in target.parent.glob(f".{target.name}.partial*"):
        try:
            pid = int((partial / "writer.pid").read_text())
        except (OSError, ValueError):
            pid = None
        if pid is not None and _alive(pid):
            continue  # another capture is writing there now
        shutil.rmtree(partial, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
        index, stored, weight_map = _checked(folder, index_path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
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


def _checked(folder: Path, index_path: Path):
    """(index, labels, weight_map), after checking that they describe one capture: the index's fields, each file
    inside the folder and a safetensors file of this capture (its id), the rows of every shard, the labels and
    the index the same. Raises ValueError (or OSError, KeyError, TypeError) naming what does not fit."""
    from deltalens.models.io.safetensors_header import check_weight_files

    index = json.loads(index_path.read_text())
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise ValueError("not a deltalens capture index")
    rows = index["rows"]
    for key in ("rows", "n_traces", "n_layers", "n_heads"):
        if isinstance(index[key], bool) or not isinstance(index[key], int) or index[key] < 0:
            raise ValueError(f"the index's {key} is {index[key]!r}, not a count")
    weight_map = index["weight_map"]
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ValueError("the index's weight_map does not map hooks to shard files")
    files = {*weight_map.values(), *([index["logits"]] if index.get("logits") else []), LABELS_FILE}
    for file in files:
        if Path(file).name != file or not file.endswith(".safetensors"):
            raise ValueError(f"shard {file!r} is not a safetensors file inside the folder")
        if not (folder / file).is_file():
            raise ValueError(f"shard {file!r} is missing")
        check_weight_files(folder / file)  # header length, JSON, offsets against the file's size
        with safe_open(str(folder / file), framework="pt") as handle:
            owner = (handle.metadata() or {}).get("capture")
            names = list(handle.keys())
            if index.get("capture") is not None and owner != index["capture"]:
                raise ValueError(f"shard {file!r} belongs to another capture")
            if file != LABELS_FILE:
                first = handle.get_slice(names[0]).get_shape()[0] if names else None
                if first != rows:
                    raise ValueError(f"shard {file!r} holds {first} rows where the index says {rows}")
    stored = load_file(str(folder / LABELS_FILE))
    if stored["states"].shape[0] != rows or any(
        v.shape[0] != rows for k, v in stored.items() if k.startswith("label.")
    ):
        raise ValueError(f"the labels do not have the index's {rows} rows")
    if stored["lengths"].shape[0] != index["n_traces"]:
        raise ValueError("the labels' lengths do not have one entry per trace")
    return index, stored, dict(weight_map)


def folder_bytes(folder) -> int:
    """Bytes the capture folder takes on disk (its files' sizes)."""
    return sum(os.path.getsize(path) for path in Path(folder).iterdir() if path.is_file())
