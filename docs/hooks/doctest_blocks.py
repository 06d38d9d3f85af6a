"""A Griffe extension for the API reference: the library's docstrings show their examples as doctest lines
(`>>> ...` and the output after them), which Markdown would read as nested block quotes; each run of them is
fenced as a `pycon` code block before mkdocstrings renders the docstring. The docstrings themselves stay as
they are (doctest runs them: tests/test_api_docs.py)."""

from __future__ import annotations

from typing import Any

import griffe


def fenced(text: str) -> str:
    """`text` with every run of doctest lines (a `>>>` line up to the next blank line) inside a pycon fence."""
    out: list[str] = []
    in_example = False
    for line in text.split("\n"):
        if not in_example and line.startswith(">>>"):
            out.extend(["", "```pycon"] if out and out[-1].strip() else ["```pycon"])  # a fence opens a block
            in_example = True
        elif in_example and not line.strip():
            out.append("```")
            in_example = False
        out.append(line)
    if in_example:
        out.append("```")
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    """Fences the doctest examples of every docstring Griffe reads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fenced(obj.docstring.value)
