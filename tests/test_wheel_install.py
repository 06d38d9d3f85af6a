"""A non-editable install (`pip install .`, a wheel) carries the code but not checkpoints/: asked for a
shipped checkpoint by name, it says in one sentence how to get them, and finds them once told where."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NAME = "s3-deltanet-neg-statement"
# what the install runs: a shipped name looked up from outside the repository (torch-free: names and paths)
LOOKUP = f"""
import sys
from pathlib import Path
# the checkout's editable install (seen through --system-site-packages) would answer first, as a finder or as a
# path entry (which form depends on the setuptools that made it): drop both
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != Path({str(REPO)!r})]
import deltalens
from deltalens.core.errors import DeltalensError
from deltalens.models.io.named_folder import resolve_checkpoint
print(deltalens.__file__)
try:
    print(resolve_checkpoint({NAME!r}))
except DeltalensError as err:
    print("error:", err)
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The python of a fresh venv holding a non-editable install of a copy of the repository, checkpoints/ too."""
    root = tmp_path_factory.mktemp("wheel")
    venv = root / "venv"
    # the system packages (torch, setuptools, ...) stay visible; deltalens comes from the venv
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    src = root / "src"
    skip = shutil.ignore_patterns(".git", "runs", "lab", "*.egg-info", "build", "__pycache__", ".mypy_cache")
    shutil.copytree(REPO, src, ignore=skip)
    python = venv / "bin" / "python"
    flags = ["--quiet", "--no-deps", "--no-build-isolation", "--ignore-installed", "--no-index"]
    done = subprocess.run([python, "-m", "pip", "install", *flags, str(src)], capture_output=True, text=True)
    if done.returncode != 0:  # no setuptools/wheel to build with here: pip's own isolated build
        flags = ["--quiet", "--no-deps", "--ignore-installed"]
        done = subprocess.run([python, "-m", "pip", "install", *flags, str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return python


def _lookup(python: Path, **env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("DELTALENS_CHECKPOINTS", "PYTHONPATH")} | env
    done = subprocess.run([python, "-c", LOOKUP], cwd="/", env=environ, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()


def test_a_wheel_says_how_to_get_the_shipped_checkpoints(installed):
    where, answer = _lookup(installed)
    assert not Path(where).resolve().is_relative_to(REPO)  # the installed copy, not this checkout
    assert answer.startswith("error:") and "DELTALENS_CHECKPOINTS=<clone>/checkpoints" in answer, answer


def test_a_wheel_finds_them_in_a_clone_named_by_the_environment(installed):
    _, answer = _lookup(installed, DELTALENS_CHECKPOINTS=str(REPO / "checkpoints"))
    assert Path(answer) == REPO / "checkpoints" / NAME


REPRODUCE = """
import sys
from pathlib import Path
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != Path({repo!r})]
from deltalens.cli.reproduce import report_writer
from deltalens.core.errors import DeltalensError
try:
    report_writer()
    print("found")
except DeltalensError as err:
    print("error:", err)
"""


def test_a_wheel_says_reproduce_runs_from_a_clone(installed):
    """The report's code (lab/experiments/) is not installed: `deltalens reproduce` says so in one sentence."""
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = REPRODUCE.format(repo=str(REPO))
    done = subprocess.run([installed, "-c", code], cwd="/", env=environ, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    answer = done.stdout.strip()
    assert answer.startswith("error:") and "runs from a clone" in answer and answer.count(". ") == 0, answer


def test_a_clone_finds_the_reports_code():
    from deltalens.cli.reproduce import report_writer

    assert report_writer().__module__ == "lab.experiments.report.reproduce"
