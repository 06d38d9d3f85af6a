"""The lab's code (lab/experiments/: the report's sections, the controls) from the clone deltalens runs from.

The lab (lab/: its code, grids and results) sits outside the installed package, so the library never imports it by
name; `deltalens reproduce` and the dashboard's claims table reach it here, and a non-editable install (a
wheel, which carries no lab/experiments/) gets one sentence instead.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from deltalens.core.errors import DeltalensError

__all__ = ["clone_root", "lab_module"]


def clone_root() -> Path:
    """The repository this deltalens was installed from (editable), where lab/experiments/ lives."""
    import deltalens

    return Path(deltalens.__file__).resolve().parents[1]


def lab_module(name: str) -> ModuleType:
    """`lab.experiments.<name>` of the clone (e.g. "report.reproduce"), or a sentence saying it needs one."""
    root = clone_root()
    if not (root / "lab" / "experiments" / (name.replace(".", "/") + ".py")).is_file():
        raise DeltalensError(
            "this needs the repository's lab code (lab/experiments/, beside lab/grids/ and lab/results/), which an "
            "installed wheel does not carry: it runs from a clone; clone the repository, `pip install -e .` there "
            "and run it in the clone"
        )
    if str(root) not in sys.path:
        sys.path.append(str(root))
    return importlib.import_module(f"lab.experiments.{name}")
