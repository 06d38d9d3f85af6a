"""The one exception type for mistakes a person can fix (bad group name, corrupt checkpoint, ...),
and the sentence for a write that the disk refused.

It lives in `core` because every room imports it. The CLI prints its message as one line on
stderr and exits 2; a traceback is shown only with `--debug`.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator

# errors of the storage, not of the program: a full disk, a quota, a file too big, a read-only mount
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}
# the same errors from writers that re-raise them as their own type (safetensors' SafetensorError)
_STORAGE_TEXT = ("No space left on device", "Disk quota exceeded", "File too large", "Read-only file system")


class DeltalensError(ValueError):
    """A problem with the user's input, stated as one sentence that names the problem and the fix.

    >>> try:
    ...     dl.load("no-such-checkpoint")
    ... except dl.DeltalensError as err:
    ...     print("refused:", type(err).__name__)
    refused: DeltalensError
    """


class StorageError(DeltalensError):
    """A write the storage refused; `reason` is what it said ("No space left on device", ...)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class ContextTooLong(DeltalensError):
    """An input longer than a Transformer's context; `n_tokens` and `n_ctx` let a caller act on it (the
    dashboard offers the longest trace that fits)."""

    def __init__(self, message: str, n_tokens: int, n_ctx: int) -> None:
        super().__init__(message)
        self.n_tokens = n_tokens
        self.n_ctx = n_ctx


def storage_failure(err: BaseException) -> str | None:
    """What the storage refused ("No space left on device", ...), or None for any other error."""
    if isinstance(err, OSError) and err.errno in _STORAGE_ERRNOS:
        return err.strerror or errno.errorcode.get(err.errno, "write error")
    text = str(err)
    return next((reason for reason in _STORAGE_TEXT if reason in text), None)


@contextlib.contextmanager
def reporting_storage_failure(path, intact: str) -> Iterator[None]:
    """Turn a write the storage refused into one sentence naming `path` and saying what is intact.

    The writer inside must already have cleaned up after itself (staging folders, temp files). Nested,
    the outermost sentence wins: it knows what the user asked to write (a training run's `last/`,
    not the staging folder a save inside it was writing)."""
    try:
        yield
    except StorageError as err:
        raise StorageError(f"cannot write {path}: {err.reason}; {intact}", err.reason) from None
    except DeltalensError:
        raise
    except Exception as err:
        reason = storage_failure(err)
        if reason is None:
            raise
        raise StorageError(f"cannot write {path}: {reason}; {intact}", reason) from None


def did_you_mean(name: str, known, cutoff: float = 0.6) -> str:
    """The clause "; did you mean 'x'?" for the known name closest to a typo, or "" when none is close."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1, cutoff=cutoff)
    return f"; did you mean {close[0]!r}?" if close else ""


def some_of(names, limit: int = 8) -> str:
    """A list for a sentence, cut at `limit` and saying how many more there are (never cut silently)."""
    names = [str(n) for n in names]
    if not names:
        return "none found"
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"
