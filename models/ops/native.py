"""Small C kernels for the CPU path: compiled on first use with the system C compiler, loaded by ctypes.

Why C: at the sizes this project trains (d_model 64, d_k = d_v = 16, a few hundred tokens) the
torch CPU path spends its time in many small tensor ops, not in arithmetic; one pass in C over
the tokens does the same work several times faster (the delta rule, the short convolution).
The torch code stays the reference and the fallback: every caller checks `library(name)`.

Each source models/ops/csrc/<name>.c is plain C99 (no Python or torch headers: it builds in about a
second) and is compiled once per machine into $DELTALENS_CACHE (default ~/.cache/deltalens)/kernels/,
keyed by the source, the flags and the CPU's features (-march=native code must not move to another
CPU). No compiler, a failed build, or DELTALENS_NATIVE=0 means "not available".
"""

from __future__ import annotations

import _ctypes
import contextlib
import ctypes
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import torch

__all__ = ["library", "library_error", "native_kernels", "pointer", "unbuilt"]

SOURCES = Path(__file__).with_name("csrc")
FLAGS = ["-O3", "-march=native", "-std=c99", "-shared", "-fPIC", "-fno-math-errno"]

_lock = threading.Lock()
_loaded: dict[str, Optional[ctypes.CDLL]] = {}
_errors: dict[str, str] = {}
_enabled = True


def _cache_dir() -> Path:
    return Path(os.environ.get("DELTALENS_CACHE") or Path.home() / ".cache" / "deltalens") / "kernels"


def _cpu_signature() -> str:
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        flags = ""
    return f"{platform.machine()}|{flags}"


def _compiler() -> Optional[str]:
    for name in filter(None, [os.environ.get("CC"), "cc", "gcc", "clang"]):
        if shutil.which(name):
            return name
    return None


def exported_symbols(source: Path) -> list[str]:
    """The functions a kernel source exports: its definitions at column 0 that are not static."""
    return re.findall(r"^(?:void|int64_t|int|double|float)\s+\**(\w+)\s*\(", source.read_text(), re.M)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verified(target: Path) -> Optional[bool]:
    """A cached build is loaded only when its bytes match the digest written beside it at build time:
    a truncated or replaced file would crash the process inside dlopen or at its first call (SIGBUS).
    None: no digest (a cache entry from before digests were written)."""
    try:
        expected = target.with_suffix(".sha256").read_text().strip()
    except OSError:
        return None
    return expected == _digest(target)


def _compile(name: str, source: Path, target: Path) -> None:
    compiler = _compiler()
    if compiler is None:
        raise RuntimeError("no C compiler found (set $CC or install gcc)")
    target.parent.mkdir(parents=True, exist_ok=True)
    # built beside the target, then renamed (digest first): a concurrent process never loads a half-written file
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        result = subprocess.run(
            [compiler, *FLAGS, str(source), "-o", str(built), "-lm"], capture_output=True, text=True, timeout=120
        )
        if result.returncode != 0:
            raise RuntimeError(f"{compiler} failed on {source.name}: {result.stderr.strip()[:500]}")
        digest = Path(tmp) / "digest"
        digest.write_text(_digest(built) + "\n")
        os.replace(digest, target.with_suffix(".sha256"))
        os.replace(built, target)


def _open(target: Path, symbols: list[str]) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(target))
    missing = [symbol for symbol in symbols if not hasattr(lib, symbol)]
    if missing:
        # unload it, or dlopen would hand the same handle back for the rebuilt file at this path
        getattr(_ctypes, "dlclose", lambda handle: None)(lib._handle)
        raise OSError(f"{target.name} lacks {', '.join(missing)}")
    return lib


def _target(source: Path) -> Path:
    key = hashlib.sha256(source.read_bytes() + " ".join(FLAGS).encode() + _cpu_signature().encode()).hexdigest()
    return _cache_dir() / f"{source.stem}-{key[:16]}.so"


def unbuilt() -> list[str]:
    """The kernels a first call would compile now (none cached for this CPU, none loaded): a dashboard says
    so while they build (about a second each) instead of going quiet."""
    if not _enabled or os.environ.get("DELTALENS_NATIVE", "1") == "0" or _compiler() is None:
        return []
    return [s.stem for s in sorted(SOURCES.glob("*.c")) if s.stem not in _loaded and not _target(s).is_file()]


def _build(name: str) -> ctypes.CDLL:
    source = SOURCES / f"{name}.c"
    target = _target(source)
    symbols = exported_symbols(source)
    if target.is_file():
        verified, damaged = _verified(target), None
        if verified:
            try:
                return _open(target, symbols)
            except OSError as err:
                damaged = str(err)
        elif verified is False:
            damaged = "its bytes do not match the digest written when it was built"
        if damaged:
            warnings.warn(
                f"deltalens: rebuilding the cached C kernel {target} ({damaged})", RuntimeWarning, stacklevel=3
            )
        target.unlink(missing_ok=True)
    _compile(name, source, target)
    return _open(target, symbols)


def library(name: str) -> Optional[ctypes.CDLL]:
    """The loaded kernel library models/ops/csrc/<name>.c, or None when it cannot be built or loaded here
    (or `native_kernels(False)` is in force)."""
    if not _enabled:
        return None
    with _lock:
        if name not in _loaded:
            _loaded[name] = None
            if os.environ.get("DELTALENS_NATIVE", "1") == "0":
                _errors[name] = "turned off by DELTALENS_NATIVE=0"
            else:
                try:
                    _loaded[name] = _build(name)
                except (OSError, RuntimeError, subprocess.SubprocessError) as err:
                    _errors[name] = str(err)
                    if not isinstance(err, RuntimeError):  # not "no compiler": something is wrong, say it once
                        warnings.warn(
                            f"deltalens: the C kernel {name} cannot be loaded ({err}); the torch kernels run instead",
                            RuntimeWarning,
                            stacklevel=2,
                        )
    return _loaded[name]


def library_error(name: str) -> Optional[str]:
    """Why `library(name)` is None (None when it loaded)."""
    if not _enabled:
        return "turned off by native_kernels(False)"
    library(name)
    return _errors.get(name)


@contextlib.contextmanager
def native_kernels(enabled: bool) -> Iterator[None]:
    """Within the block, use (True) or do not use (False) the C kernels; the torch code runs instead.
    For side-by-side measurements and parity checks; not thread-local."""
    global _enabled
    before, _enabled = _enabled, bool(enabled)
    try:
        yield
    finally:
        _enabled = before


def pointer(x: Optional[torch.Tensor]) -> Optional[ctypes.c_void_p]:
    """A contiguous tensor's data pointer for a C call (None -> NULL)."""
    return None if x is None else ctypes.c_void_p(x.data_ptr())
