"""The library type-checks: `python3 -m mypy` from the repository root, configured by pyproject's [tool.mypy].

A cold run takes about 6 s of CPU (the big dependencies are read as Any); later runs reuse .mypy_cache."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _mypy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=REPO, capture_output=True, text=True)


def test_mypy_passes_on_the_library():
    result = _mypy()
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    # the whole library was read, through the one import root (no "Duplicate module named" stop)
    checked = re.search(r"no issues found in (\d+) source files", out)
    assert checked and int(checked.group(1)) > 150, out
    assert "unused section" not in out, out  # an exception in pyproject names a module that is gone


def test_mypy_reports_a_wrong_attribute_of_a_library_module(tmp_path):
    # the same settings on one snippet (mypy takes either the configured package or a snippet, not both)
    config = (REPO / "pyproject.toml").read_text().replace('packages = ["deltalens"]\n', "", 1)
    (tmp_path / "pyproject.toml").write_text(config)
    snippet = "from deltalens.core import errors\nerrors.no_such_name\n"
    result = _mypy("--config-file", str(tmp_path / "pyproject.toml"), "-c", snippet)  # shares .mypy_cache
    assert result.returncode == 1
    assert 'Module has no attribute "no_such_name"' in result.stdout, result.stdout + result.stderr
