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

__all__ = [
    "DTYPE_BYTES",
    "FLOATING",
    "check_weight_files",
    "floating_count",
    "other_bytes",
    "read_header",
    "stored_tensors",
]

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


def check_weight_files(weights_file: Path, float_only: bool = False) -> None:
    """Refuse, in one sentence naming the file and the fault, a safetensors folder a reader should not trust:
    an index that is not a JSON object of tensor -> shard names, a shard outside the folder or not a safetensors
    file (a pickle is never read), a header whose length, JSON, dtypes or offsets do not describe the file, and,
    with `float_only`, a tensor of integers where the model holds floats only. Reads headers only."""
    from deltalens.core.errors import DeltalensError

    weights_file = Path(weights_file)
    index = weights_file.with_name(f"{weights_file.name}.index.json")
    if weights_file.is_file():
        shards = [weights_file]
    elif index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
            raise DeltalensError(
                f"{index} is not a JSON shard index with a weight_map ({err}); save the model again"
            ) from None
        if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
        ):
            raise DeltalensError(
                f"{index}'s weight_map must map tensor names to shard file names; save the model again"
            )
        names = sorted(set(weight_map.values()))
        for name in names:
            if Path(name).name != name or name in (".", ".."):
                raise DeltalensError(f"{index} names a shard outside its folder ({name!r}); the folder is refused")
            if not name.endswith(".safetensors"):
                raise DeltalensError(
                    f"{index} names {name!r}, not a safetensors file; deltalens never reads pickled weights"
                )
        shards = [weights_file.with_name(name) for name in names]
    else:
        return  # nothing to check: the loader says the weights are missing
    for shard in shards:
        if not shard.is_file():
            raise DeltalensError(f"{shard} is missing; the checkpoint is incomplete, so copy or save it again")
        _check_header(shard, float_only, DeltalensError)


def _check_header(file: Path, float_only: bool, error: type) -> None:
    size = file.stat().st_size
    try:
        with open(file, "rb") as handle:
            start = handle.read(8)
            if len(start) < 8:
                raise error(f"{file} is too short to be a safetensors file; copy or save it again")
            (length,) = struct.unpack("<Q", start)
            if length > min(MAX_HEADER, size - 8):
                raise error(
                    f"{file} declares a {length:,}-byte header in a {size:,}-byte file: it is not a safetensors "
                    "file (deltalens never reads pickled weights) or it is damaged"
                )
            header = json.loads(handle.read(length))
    except (UnicodeDecodeError, ValueError) as err:
        raise error(f"{file}'s header is not JSON ({err}); it is not a safetensors file or it is damaged") from None
    if not isinstance(header, dict):
        raise error(f"{file}'s header is not a JSON object; it is not a safetensors file or it is damaged")
    data = size - 8 - length
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if dtype not in DTYPE_BYTES or not isinstance(shape, list) or not all(_whole(n) for n in shape):
            raise error(f"{file} describes tensor {name} with dtype {dtype!r} and shape {shape!r}: damaged header")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_whole(n) for n in offsets)):
            raise error(f"{file} gives tensor {name} no byte range (data_offsets {offsets!r}): damaged header")
        begin, end = offsets
        if not begin <= end <= data:
            raise error(
                f"{file}'s tensor {name} lies at bytes {begin}-{end}, past the {data:,} bytes of data: the file is "
                "truncated or damaged"
            )
        if end - begin != math.prod(shape) * DTYPE_BYTES[dtype]:
            raise error(
                f"{file}'s tensor {name} ({dtype}, shape {tuple(shape)}) takes {end - begin} bytes, not "
                f"{math.prod(shape) * DTYPE_BYTES[dtype]}: damaged header"
            )
        if float_only and dtype not in FLOATING:
            raise error(
                f"{file}'s tensor {name} holds {dtype} values; this model holds floating-point weights only, so "
                "the file is not this model's"
            )
