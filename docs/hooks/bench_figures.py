"""mkdocs hook: a measured figure on a docs page is read from its benchmark's JSON when the site is built, not
copied into the prose, so it cannot go stale: `{{ bench: load.json best_s/init_skipped }}` becomes that value of
benchmarks/results/load.json; `{{ bench: load.json load_s/init_skipped | .1f }}` formats it, and a list of numbers
becomes its range ("24.5-28.6"). A file or key that is not there stops the build with a sentence naming it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
FIGURE = re.compile(r"\{\{ bench: (\S+) ([^|}]+?)(?: \| (\S+))? \}\}")


def formatted(value: Any, spec: str) -> str:
    if isinstance(value, list) and value and all(isinstance(x, int | float) for x in value):
        return f"{formatted(min(value), spec)}-{formatted(max(value), spec)}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if spec:
        return format(value, spec)
    return f"{value:,}" if isinstance(value, int) else str(value)


def figure(match: re.Match[str]) -> str:
    file, path, spec = match.group(1), match.group(2), match.group(3) or ""
    source = RESULTS / file
    if not source.is_file():
        raise ValueError(f"docs: {match.group(0)} names benchmarks/results/{file}, which does not exist")
    value: Any = json.loads(source.read_text())
    for key in path.split("/"):
        try:
            value = value[int(key)] if isinstance(value, list) else value[key]
        except (KeyError, IndexError, ValueError, TypeError):
            raise ValueError(f"docs: {match.group(0)}: benchmarks/results/{file} has no {path!r}") from None
    return formatted(value, spec)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return FIGURE.sub(figure, markdown)
