"""mkdocs hook: the API page's reference section is every name of `deltalens.__all__`, rendered by mkdocstrings from
its docstring, grouped as the page's table "The API, name by name" groups them, and the table's names link to their
entries. It is written at build time from the package, so it cannot fall behind it; a name the table lacks still
gets its entry, under a heading of its own (and tests/test_api_docs.py fails until the table lists it)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import deltalens

MARKER = "<!-- reference: every name of deltalens.__all__, written by docs/hooks/api_reference.py -->"
PACKAGE = Path(deltalens.__file__).parent  # deltalens/, whose rooms are symlinks to the top-level folders


def table_groups(markdown: str) -> list[tuple[str, list[str]]]:
    """(what, names) for each row of the page's name-by-name table, in its order."""
    groups = []
    for line in markdown.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and len(cells) == 2 and cells[1].startswith("`dl."):
            groups.append((cells[0], re.findall(r"`dl\.(\w+)`", cells[1])))
    return groups


def binds(module: str, name: str) -> bool:
    """Whether `module` binds `name` by a def, a class or an import (mkdocstrings follows the import); otherwise
    `name` is data its module makes on request (ACT_NAMES, FAMILY, ...), explained by the module's docstring."""
    path = PACKAGE.joinpath(*module.split(".")[1:])
    source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.ImportFrom) and any((alias.asname or alias.name) == name for alias in node.names):
            return True
    return False


def entry(target: str, heading: str, members: bool = True) -> str:
    """One mkdocstrings block: the object at `target`, headed `heading`."""
    options = f'    options:\n      heading: "{heading}"\n      toc_label: "{heading}"\n'
    return f"::: {target}\n{options}" + ("" if members else "      members: false\n")


def data_names() -> dict[str, list[str]]:
    """module -> its data names (shown once, under one heading)."""
    data: dict[str, list[str]] = {}
    for name in deltalens.__all__:
        if not binds(deltalens._API[name], name):
            data.setdefault(deltalens._API[name], []).append(name)
    return data


def anchor(name: str, data: dict[str, list[str]]) -> str:
    """The id mkdocstrings gives `name`'s entry."""
    module = deltalens._API[name]
    return module if name in data.get(module, ()) else f"{module}.{name}"


def linked(markdown: str, data: dict[str, list[str]]) -> str:
    """The table's names as links to their entries below."""
    lines = []
    for line in markdown.splitlines():
        if line.startswith("| ") and "`dl." in line:
            line = re.sub(
                r"`dl\.(\w+)`",
                lambda m: f"[`dl.{m[1]}`](#{anchor(m[1], data)})" if m[1] in deltalens._API else m[0],
                line,
            )
        lines.append(line)
    return "\n".join(lines)


def reference(markdown: str) -> str:
    groups = table_groups(markdown)
    listed = {name for _, names in groups for name in names}
    missing = [name for name in deltalens.__all__ if name not in listed]
    if missing:
        groups.append(("Not yet in the table above", missing))
    data = data_names()
    blocks, shown = [], set()
    for what, names in groups:
        blocks.append(f"### {what[0].upper()}{what[1:]}\n")
        for name in (name for name in names if name in deltalens._API):
            module = deltalens._API[name]
            if name not in data.get(module, ()):
                blocks.append(entry(f"{module}.{name}", f"dl.{name}"))
            elif module not in shown:
                shown.add(module)
                blocks.append(entry(module, ", ".join(f"dl.{each}" for each in data[module]), members=False))
    return "\n".join(blocks)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return linked(markdown, data_names()).replace(MARKER, reference(markdown))
