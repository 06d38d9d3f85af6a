"""The lab's entry points (`python3 -m lab.experiments.NAME ...`) with the `deltalens` command's error handling.

    if __name__ == "__main__":
        run(main)

A DeltalensError (a missing checkpoint, a folder that is not one, a bad argument) prints one line on stderr and
exits 2, as the CLI does; a missing or unreadable file the same; Ctrl-C exits 130. $DELTALENS_DEBUG=1 shows the
traceback instead. `existing(path, what)` is the check an argument naming a folder or file gets first.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from deltalens.core.errors import DeltalensError

__all__ = ["existing", "run"]


def run(main: Callable[[], Any]) -> NoReturn:
    name = Path(sys.argv[0]).stem
    try:
        code = main()
    except KeyboardInterrupt:
        print(f"lab.experiments.{name}: interrupted", file=sys.stderr)
        sys.exit(130)
    except (DeltalensError, OSError) as err:
        if os.environ.get("DELTALENS_DEBUG"):
            raise
        text = str(err) if isinstance(err, DeltalensError) else f"{err.strerror or err}: {err.filename or ''}"
        print(f"lab.experiments.{name}: error: {text}", file=sys.stderr)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


def existing(path: Path | str, what: str) -> Path:
    """`path`, or one sentence saying that the `what` (a checkpoint, a results folder, ...) is not there."""
    path = Path(path)
    if not path.exists():
        raise DeltalensError(f"{path} does not exist; give the {what} to read")
    return path
