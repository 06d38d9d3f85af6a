"""Print which rooms each room of deltalens imports, and fail on an upward arrow or an import circle.

    python scripts/import_graph.py          # room -> rooms it imports; exit 1 on an upward arrow or a circle

The rooms, lowest first: a room may import only rooms listed before it (cli and app import
everything below them and are imported by nothing). Inside models/ the same rule holds for its
tiers (TIERS: kernels, layers, file format, language models, then build and checkpoint on top).
No module may reach itself through imports (a circle), even across rooms that flow downward.
Every import of our code must name the one root, `deltalens` (an `import tasks` would load a
second copy of the module under another name). Imports inside functions count like the others.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root holds the import root, deltalens/
from deltalens import ROOMS  # noqa: E402  (the one list of the rooms, lowest first)

TOP = {"cli", "app"}  # import every room below them; imported by nothing
# models/ in tiers, lowest first; models/__init__.py is the room's face and may import any of them
TIERS = ("architecture", "ops", "layers", "io", "lm", "build", "checkpoint")


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
                if head == "lab":  # the lab's code, in a clone only: the library never needs it
                    problems.append(f"{where}:{line}: {room} imports the lab's experiments (not installed)")
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


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(("deltalens", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def tier_of(module: str) -> str | None:
    """The models tier of a deltalens.models... module (None for the face and for other rooms)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "models" and parts[2] in TIERS else None


def module_graph() -> dict[str, set[str]]:
    """deltalens module -> deltalens modules it imports (`from pkg import name` counts as pkg.name when
    that is a module of ours, else as pkg)."""
    paths = {module_of(path): path for room in ROOMS for path in room_files(room)}
    edges: dict[str, set[str]] = {}
    for module, path in paths.items():
        targets = set()
        for _, name in imported_names(path):
            while name and name not in paths:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        edges[module] = targets
    return edges


def tier_problems(edges: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, targets in edges.items():
        tier = tier_of(module)
        for target in targets:
            other = tier_of(target)
            if tier and other and TIERS.index(other) > TIERS.index(tier):
                problems.append(f"{module} (models tier {tier}) imports {target}, a tier above it")
    return problems


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def main() -> int:
    edges, problems = graph()
    modules = module_graph()
    problems += tier_problems(modules)
    problems += [f"import circle: {' -> '.join(group)}" for group in circles(modules)]
    for room in ROOMS:
        below = sorted(edges[room], key=ROOMS.index)
        print(f"{room:9} -> {', '.join(below) if below else '(nothing)'}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
