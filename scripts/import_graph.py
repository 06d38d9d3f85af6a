"""Print which rooms each room of deltalens imports, and fail if an arrow points upward.

    python scripts/import_graph.py          # room -> rooms it imports; exit 1 on an upward arrow

The rooms, lowest first: a room may import only rooms listed before it (cli and app import
everything below them and are imported by nothing). Every import of our code must name the one
root, `deltalens` (an `import tasks` would load a second copy of the module under another name).
Imports inside functions count like the others.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("tasks", "models", "training", "interp", "probes", "reports", "cli", "app")
TOP = {"cli", "app"}  # import every room below them; imported by nothing


def room_files(room: str) -> list[Path]:
    return sorted((ROOT / room).rglob("*.py"))


def imported_names(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in the file; relative imports made absolute."""
    package = ".".join(("deltalens", *path.relative_to(ROOT).with_suffix("").parts[:-1]))
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            if module == "deltalens":  # `from deltalens import models`
                out += [(node.lineno, f"deltalens.{alias.name}") for alias in node.names]
            else:
                out.append((node.lineno, module))
    return out


def graph() -> tuple[dict[str, set[str]], list[str]]:
    """room -> rooms it imports, and one line per problem (upward arrow, import bypassing the root)."""
    edges: dict[str, set[str]] = {room: set() for room in ROOMS}
    problems = []
    for room in ROOMS:
        for path in room_files(room):
            where = path.relative_to(ROOT)
            for line, module in imported_names(path):
                head, _, rest = module.partition(".")
                if head in ROOMS:
                    problems.append(f"{where}:{line}: `{module}` bypasses the deltalens root")
                    continue
                if head != "deltalens" or not rest:
                    continue  # a third-party or standard module
                target = rest.split(".")[0]
                if target not in ROOMS or target == room:
                    continue
                edges[room].add(target)
                if target in TOP or (room not in TOP and ROOMS.index(target) > ROOMS.index(room)):
                    problems.append(f"{where}:{line}: {room} imports {target}, a room above it")
    return edges, problems


def main() -> int:
    edges, problems = graph()
    for room in ROOMS:
        below = sorted(edges[room], key=ROOMS.index)
        print(f"{room:9} -> {', '.join(below) if below else '(nothing)'}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
