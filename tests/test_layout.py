"""The shape of the code: rooms import only downward, one import root, a clean lint."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import import_graph  # noqa: E402  (scripts/ is not a package)

ROOMS = import_graph.ROOMS  # deltalens.ROOMS


def test_every_arrow_between_rooms_points_down():
    edges, problems = import_graph.graph()
    assert problems == []
    # the graph is read from the code, not empty: the probes measure captures, the report judges runs
    assert "interp" in edges["probes"] and "grids" in edges["reports"] and "tasks" in edges["models"]
    assert edges["core"] == set() and edges["tasks"] == {"core"}  # core is the bottom room, tasks the next


def test_no_models_tier_imports_a_tier_above_and_no_module_reaches_itself():
    modules = import_graph.module_graph()
    assert len(modules) > 100  # read from the code
    assert import_graph.tier_problems(modules) == []
    assert import_graph.circles(modules) == []
    # and the checks see a circle and an upward tier when there is one
    assert import_graph.circles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    upward = {"deltalens.models.ops.x": {"deltalens.models.io.y"}}
    assert import_graph.tier_problems(upward) != []


def test_the_graph_script_catches_an_upward_import(tmp_path, monkeypatch):
    for room in import_graph.ROOMS:
        (tmp_path / room).mkdir()
    (tmp_path / "tasks" / "bad.py").write_text("from deltalens.probes import eigenvalues\nimport models\n")
    (tmp_path / "app" / "bad.py").write_text("from lab.experiments.report.reproduce import write_report\n")
    monkeypatch.setattr(import_graph, "ROOT", tmp_path)
    _, problems = import_graph.graph()
    assert any("tasks imports probes" in p for p in problems)
    assert any("bypasses the deltalens root" in p for p in problems)
    assert any("app imports the lab's experiments" in p for p in problems)


def test_every_module_loads_once_under_the_deltalens_root():
    code = """
import importlib, json, pkgutil, sys
names = []
# app: run by streamlit
for room in ROOMS:
    package = importlib.import_module(f"deltalens.{room}")
    for info in pkgutil.walk_packages(package.__path__, f"deltalens.{room}."):
        importlib.import_module(info.name)
        names.append(info.name)
files = {}
for name, module in list(sys.modules.items()):
    path = getattr(module, "__file__", None) or ""
    if "/work/" in path or name.split(".")[0] in ROOMS:
        files.setdefault(path, []).append(name)
print(json.dumps({"names": names, "files": files}))
"""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code.replace('"/work/"', repr(str(REPO) + "/")).replace("ROOMS", repr(import_graph.ROOMS[1:-1])),
        ],
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert len(report["names"]) > 40  # every room's modules were imported
    twice = {path: names for path, names in report["files"].items() if len(names) > 1}
    assert twice == {}
    assert all(name.startswith("deltalens") for names in report["files"].values() for name in names)


def _ruff() -> str:
    return shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))


def test_ruff_check_is_clean():
    result = subprocess.run([_ruff(), "check", "--no-cache", str(REPO)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean():
    result = subprocess.run([_ruff(), "format", "--check", "--no-cache", str(REPO)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# pyproject's [build-system] requires setuptools>=68; --no-build-isolation builds with whatever the venv sees
CAN_BUILD_IN_PLACE = """
import importlib.util
try:
    import setuptools
except ImportError:
    print(False)
else:
    wheel = any(importlib.util.find_spec(m) for m in ("setuptools.command.bdist_wheel", "wheel"))
    print(int(setuptools.__version__.split(".")[0]) >= 68 and wheel)
"""


def _build_isolation(python: Path) -> list[str]:
    """--no-build-isolation when the setuptools `python` sees can build the wheel (>= 68, with bdist_wheel);
    otherwise pip's isolated build, which installs a setuptools that meets the requirement (from PyPI)."""
    out = subprocess.run([python, "-c", CAN_BUILD_IN_PLACE], capture_output=True, text=True, check=True).stdout
    return ["--no-build-isolation"] if out.strip() == "True" else []


def test_pip_install_claims_only_the_deltalens_name(tmp_path):
    """A fresh venv (seeing this interpreter's packages for setuptools) gains only `deltalens`."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    purelib.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in purelib.iterdir()}
    build = tmp_path / "src"
    shutil.copytree(
        REPO, build, ignore=shutil.ignore_patterns(".git", "runs", "*.egg-info", "build", "__pycache__", "checkpoints")
    )
    # the venv's own interpreter, and --ignore-installed: pip must never touch this environment's install
    flags = ["--quiet", "--no-deps", *_build_isolation(python), "--ignore-installed"]
    installed = subprocess.run([python, "-m", "pip", "install", *flags, str(build)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    added = {p.name for p in purelib.iterdir()} - before
    top_level = {name for name in added if not name.endswith((".dist-info", ".pth")) and name != "__pycache__"}
    assert top_level == {"deltalens"}, added
    assert {p.name for p in (purelib / "deltalens").iterdir()} >= {
        "core",
        "tasks",
        "models",
        "cli",
        "reports",
        "__init__.py",
    }
    assert (venv / "bin" / "deltalens").is_file()
    # the C sources of the CPU kernels travel with the package (they are built on first use)
    assert {p.name for p in (purelib / "deltalens" / "models" / "ops" / "csrc").iterdir()} >= {
        "delta_rule.c",
        "short_conv.c",
    }
    # results (reports' .md, .json, figures) live in lab/results/, outside the package: reports/ ships code only
    shipped = [
        p for p in (purelib / "deltalens" / "reports").rglob("*") if p.is_file() and "__pycache__" not in p.parts
    ]
    assert shipped and all(p.suffix == ".py" for p in shipped), sorted(str(p) for p in shipped if p.suffix != ".py")
    assert sysconfig  # the purelib above is the venv's own, not this interpreter's


@pytest.mark.parametrize("room", import_graph.ROOMS)
def test_each_room_says_what_it_is_for(room):
    init = REPO / room / "__init__.py"
    assert init.is_file() and init.read_text().startswith('"""')
