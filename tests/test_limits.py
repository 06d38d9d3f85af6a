"""Size limits of the installed library: no file over 500 lines, no function over 80, except the listed ones.

A listed exception must still be over its limit (the list only shrinks), and says why it is allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

from deltalens import ROOMS

REPO = Path(__file__).resolve().parents[1]
# under deltalens
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80

FILE_EXCEPTIONS = {}
FUNCTION_EXCEPTIONS: dict[str, str] = {}  # "file:function" -> the design reason it may be longer


def library_files() -> list[Path]:
    return sorted(p for room in ROOMS for p in (REPO / room).rglob("*.py"))


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """name -> lines (def line to its last line, docstring included) of each function, nested ones too, over `limit`."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                found[node.name] = length
    return found


def over_limits() -> tuple[dict[str, int], dict[str, int]]:
    files, functions = {}, {}
    for path in library_files():
        name, source = path.relative_to(REPO).as_posix(), path.read_text()
        if len(source.splitlines()) > MAX_FILE_LINES:
            files[name] = len(source.splitlines())
        functions.update({f"{name}:{fn}": n for fn, n in long_functions(source).items()})
    return files, functions


def test_no_library_file_over_500_lines():
    files, _ = over_limits()
    unlisted = {name: n for name, n in files.items() if name not in FILE_EXCEPTIONS}
    assert not unlisted, (
        f"library files over {MAX_FILE_LINES} lines (split them, or list one with a reason): {unlisted}"
    )


def test_no_library_function_over_80_lines():
    _, functions = over_limits()
    unlisted = {name: n for name, n in functions.items() if name not in FUNCTION_EXCEPTIONS}
    assert not unlisted, (
        f"functions over {MAX_FUNCTION_LINES} lines (split them, or list one with a reason): {unlisted}"
    )


def test_every_exception_is_still_needed_and_has_a_reason():
    files, functions = over_limits()
    assert not set(FILE_EXCEPTIONS) - set(files), "a listed file is back under the limit: remove it from the list"
    assert not set(FUNCTION_EXCEPTIONS) - set(functions), "a listed function is back under the limit: remove it"
    assert all(reason.strip() for reason in [*FILE_EXCEPTIONS.values(), *FUNCTION_EXCEPTIONS.values()])
    assert len(FILE_EXCEPTIONS) + len(FUNCTION_EXCEPTIONS) <= 15  # the list stays short


def test_the_measure_sees_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    source = f"def outer():\n    def inner():\n{body.replace('    ', '        ')}\n    return 1\n"
    assert long_functions(source) == {"outer": 83, "inner": 81}
    assert long_functions("def short():\n    return 1\n") == {}
