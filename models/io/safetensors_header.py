"""What a folder's safetensors files hold, read from their headers alone (no torch, no tensor data).

A safetensors file starts with an 8-byte little-endian header length and a JSON header giving each
tensor's dtype and shape; a sharded checkpoint names its shards in model.safetensors.index.json. So the
bytes a model's weights take in any precision are known before anything is built or read:

    stored = stored_tensors(folder / "model.safetensors")   # {name: ("BF16", (4096, 4096)), ...} or None
    floating_count(stored), other_bytes(stored)             # what a load converts, what it keeps as is

Anything unreadable (a missing shard, a damaged header) gives None: the estimate falls back to the
config, and the loader explains the damage in its own sentence.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

__all__ = ["DTYPE_BYTES", "FLOATING", "floating_count", "other_bytes", "read_header", "stored_tensors"]

# safetensors' dtype names and their sizes
DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "U64": 8, "I32": 4, "U32": 4, "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1,
}  # fmt: skip
FLOATING = frozenset({"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"})  # converted to the load's dtype
MAX_HEADER = 100 * 2**20  # safetensors itself refuses headers over 100 MB

Tensors = dict[str, tuple[str, tuple[int, ...]]]


def read_header(file: Path) -> Tensors | None:
    """{name: (dtype, shape)} of one safetensors file, None where the header cannot be read."""
    try:
        with open(file, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > min(MAX_HEADER, file.stat().st_size - 8):
                return None
            header = json.loads(handle.read(length))
    except (OSError, struct.error, ValueError):
        return None
    if not isinstance(header, dict):
        return None
    tensors: Tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        if dtype not in DTYPE_BYTES or not isinstance(shape, list) or not all(_whole(n) for n in shape):
            return None
        tensors[name] = (dtype, tuple(shape))
    return tensors


def _whole(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def stored_tensors(weights_file: Path) -> Tensors | None:
    """The tensors of `weights_file`, or of the shards its index (`<name>.index.json`) names; None where
    neither is there or a header (or the index) cannot be read."""
    weights_file = Path(weights_file)
    if weights_file.is_file():
        return read_header(weights_file)
    index = weights_file.with_name(f"{weights_file.name}.index.json")
    try:
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    tensors: Tensors = {}
    for shard in shards:
        if not isinstance(shard, str) or Path(shard).name != shard:
            return None  # a shard outside the folder is the loader's to refuse
        found = read_header(weights_file.with_name(shard))
        if found is None:
            return None
        tensors.update(found)
    return tensors


def floating_count(tensors: Tensors) -> int:
    """How many floating-point values the tensors hold (each takes the load's dtype size)."""
    return sum(math.prod(shape) for dtype, shape in tensors.values() if dtype in FLOATING)


def other_bytes(tensors: Tensors) -> int:
    """Bytes of the tensors that are not floating point (integer buffers: kept as stored)."""
    return sum(math.prod(shape) * DTYPE_BYTES[dtype] for dtype, shape in tensors.values() if dtype not in FLOATING)
