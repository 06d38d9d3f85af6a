"""Atomic writes: a reader (or a crash) sees the old file or folder or the new one, never half of one.

Every room writes through these: checkpoints and fla-format model folders (models), training
runs and sweep results (training), the reproduce report (reports).

    write_atomic(path, write)        write(tmp) fills a temp file beside `path`, renamed over it
    write_text_atomic(path, text)    the same for text; write_json_atomic(path, data) for JSON
    replace_dir(staging, target)     swap a finished folder into place; the old one is set aside
                                     as `.NAME.old` and removed only once the new one is in place
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deltalens.core.errors import reporting_storage_failure


def write_atomic(path: str | os.PathLike, write: Callable[[str], object]) -> None:
    """Call `write(tmp)` on a temp file in `path`'s folder, flush it to disk, rename it over `path`."""
    path = Path(path)
    intact = "the file there before is intact" if path.exists() else "nothing was written there"
    with reporting_storage_failure(path, intact):  # a full disk: one sentence, the temp file removed
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            write(tmp)
            fsync_file(tmp)
            usual_mode(tmp)  # mkstemp makes 0600; an ordinary write would not
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


def usual_mode(path: str | os.PathLike) -> None:
    """Give a file another library wrote the mode an ordinary write gives (safetensors writes 0600)."""
    os.chmod(path, 0o666 & ~_umask())


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_json_atomic(path: str | os.PathLike, data: Any, indent: int | None = 1) -> None:
    write_text_atomic(path, json.dumps(data, indent=indent) + "\n")


def replace_dir(staging: Path, target: Path) -> None:
    """Move the finished folder `staging` to `target`, replacing what is there.

    At every moment one complete copy is on disk: the old folder is renamed to `.NAME.old`
    first, restored if the second rename fails, and removed after it. A process killed between
    the two renames leaves only `.NAME.old`; `recover_dir(target)` puts it back.
    """
    backup = target.with_name(f".{target.name}.old")
    if target.exists():
        shutil.rmtree(backup, ignore_errors=True)  # a leftover of an earlier, finished swap
        os.replace(target, backup)
    try:
        os.replace(staging, target)
    except BaseException:
        if backup.exists() and not target.exists():
            os.replace(backup, target)  # put the old folder back
        raise
    fsync_dir(target.parent)
    shutil.rmtree(backup, ignore_errors=True)


def recover_dir(target: Path) -> bool:
    """After a kill between replace_dir's two renames, move `.NAME.old` back to `target`."""
    backup = target.with_name(f".{target.name}.old")
    if target.exists() or not backup.is_dir():
        return False
    os.replace(backup, target)
    return True


def fsync_file(path: str | os.PathLike) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def fsync_dir(directory: str | os.PathLike) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # platforms without directory fds (Windows): rename is still atomic there
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask
