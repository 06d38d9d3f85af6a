"""The import root as static tools see it: deltalens/ holds a symlink per room, and the lazy public
names are also imported under TYPE_CHECKING, so an editor resolves `dl.load` and `deltalens.models...`."""

import ast
from pathlib import Path

import jedi  # a test dependency (pyproject's [test] extra): the static view of an editor
import pytest

from deltalens import ROOMS

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("room", ROOMS)
def test_each_room_is_a_symlink_under_the_root(room):
    link = REPO / "deltalens" / room
    assert link.is_symlink() and link.resolve() == (REPO / room).resolve()


def test_the_symlinks_and_the_installed_packages_are_the_rooms():
    """deltalens.ROOMS is the one list: the symlinks under deltalens/ follow it, and pyproject names no room
    (setuptools' find walks the links, so the install carries exactly the rooms)."""
    import tomllib

    from setuptools import find_packages

    links = {p.name for p in (REPO / "deltalens").iterdir() if p.is_symlink()}
    assert links == set(ROOMS)
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert not any(room in str(setuptools["packages"]) for room in ROOMS)  # no room named here
    found = find_packages(str(REPO), **setuptools["packages"]["find"])
    assert {name.split(".")[1] for name in found if name.count(".") == 1} == set(ROOMS)


def _init_tree():
    return ast.parse((REPO / "deltalens" / "__init__.py").read_text())


def test_the_type_checking_imports_match_the_lazy_table():
    import deltalens

    eager = {}
    for node in ast.walk(_init_tree()):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for imp in node.body:
                eager.update({alias.name: imp.module for alias in imp.names})
    assert eager == deltalens._API


def _goto(code: str, line: int, column: int):
    script = jedi.Script(code, path=REPO / "app" / "static_check.py", project=jedi.Project(REPO))
    return script.goto(line, column, follow_imports=True)


def test_jedi_resolves_the_notebook_api_to_its_definition():
    [definition] = _goto("import deltalens as dl\ndl.load\n", 2, 4)
    assert definition.module_path.resolve() == (REPO / "loading" / "opened.py").resolve()
    assert definition.name == "load" and definition.type == "function"


def test_jedi_resolves_a_module_inside_a_models_tier():
    code = "from deltalens.models.ops.delta_rule import chunk_delta_rule\nchunk_delta_rule\n"
    [definition] = _goto(code, 2, 3)
    assert definition.module_path.resolve() == (REPO / "models" / "ops" / "delta_rule.py").resolve()
    assert definition.type == "function"
