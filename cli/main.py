"""`deltalens` command line: one subcommand per module of this package.

Each command module exposes `register(subparsers)`, which adds its parser and sets `func`.
User errors (DeltalensError) print one line on stderr and exit 2; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
from typing import NoReturn

from deltalens.cli.arguments import check_head_range
from deltalens.core.errors import DeltalensError

# Subcommands in the order `--help` lists them, one module of this package each.
COMMANDS = [
    "app",
    "demo",
    "trace",
    "ptrace",
    "train",
    "eval",
    "reproduce",
    "probe",
    "census",
    "intervene",
    "belief",
    "sae",
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own errors: one line, exit 2
        self.exit(2, f"deltalens: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="deltalens", description="State tracking in linear RNNs: traces, models, probes.")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"deltalens.cli.{name}").register(sub)
    for command in sub.choices.values():  # `deltalens eval X --debug` works as well as `deltalens --debug eval X`
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    _whole_writes_stdout()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # `deltalens train CONFIG --out DIR run.seed=1`: overrides after the options are overrides too
        if not isinstance(getattr(args, "overrides", None), list) or any(e.startswith("-") for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides += extra
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        if isinstance(getattr(args, "checkpoint", None), str):
            args.folder = _check_checkpoint(args.checkpoint)  # read once, passed down to the command
            check_head_range(args)  # before the command loads the model
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a full disk behind `> file` shows here, not silently at exit
        return code
    except DeltalensError as err:
        if args.debug:
            raise
        print(f"deltalens: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("deltalens: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`deltalens trace ... | head`): stop quietly
        _silence_stdout()
        return 141
    except OSError as err:  # a file we could not read or write: name it
        if args.debug:
            raise
        reason = err.strerror or type(err).__name__
        if err.filename:
            print(f"deltalens: error: cannot use {err.filename}: {reason}", file=sys.stderr)
        else:  # no file named: the output stream itself (stdout redirected to a full disk, say)
            _silence_stdout()
            print(
                f"deltalens: error: cannot write the output: {reason}; what was written is incomplete", file=sys.stderr
            )
        return 2
    except Exception as err:  # a bug or an unforeseen input: still one line unless --debug
        if args.debug:
            raise
        print(
            f"deltalens: unexpected {type(err).__name__}: {err} (rerun with --debug for the traceback)", file=sys.stderr
        )
        return 1


def _check_checkpoint(name: str):
    """A model folder from elsewhere is checked before torch loads or anything is allocated; its reading
    (a ModelFolder) is returned for the command, None where the command's loader explains what is missing."""
    from deltalens.models.io.named_folder import locate

    located = locate(name)  # the name's kind, decided once
    return located.read() if located.readable() else None


class _WholeWrites(io.RawIOBase):
    """A file descriptor whose writes finish or raise: Python's stdout buffer reports a short write to a
    filling disk (614,400 of 2,150,050 bytes) as success and drops the rest, so a full disk exited 0."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += os.write(self.fd, view[done:])  # the disk's ENOSPC raises here, on the next call
        return done


def _whole_writes_stdout() -> None:
    """The process's own stdout (not a test's capture) writes through `_WholeWrites`."""
    out = sys.stdout
    if out is not sys.__stdout__ or out is None:  # None last: `is not` would widen it to __stdout__'s type
        return
    try:
        fd = out.fileno()
        out.flush()
    except (OSError, ValueError, AttributeError):
        return
    raw = _WholeWrites(fd)
    sys.stdout = io.TextIOWrapper(  # a second main() in this process finds it is no longer sys.__stdout__
        io.BufferedWriter(raw), encoding=out.encoding, errors=out.errors, line_buffering=out.line_buffering
    )


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not complain a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
