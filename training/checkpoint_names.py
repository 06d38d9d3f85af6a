"""Checkpoints by name: where shipped checkpoints are looked up, and a name or path made a folder.

Torch-free, so a command can find and check a folder before it imports torch or builds anything.
"""

from __future__ import annotations

import os
from pathlib import Path

from deltalens.core.errors import DeltalensError
from deltalens.models.io.hf_folder import CONFIG_NAME

# the repository's shipped checkpoints (training/ sits beside checkpoints/ in the repository)
SHIPPED = Path(__file__).resolve().parents[1] / "checkpoints"


def checkpoint_roots() -> list[Path]:
    """Where shipped checkpoints are looked up by name: $DELTALENS_CHECKPOINTS (os.pathsep-separated
    folders), then the repository's checkpoints/ folder."""
    roots = [Path(p) for p in os.environ.get("DELTALENS_CHECKPOINTS", "").split(os.pathsep) if p]
    return [*roots, SHIPPED]


def resolve_checkpoint(name_or_path) -> Path:
    """A checkpoint folder from a path or a shipped checkpoint's name (from any working directory)."""
    path = Path(name_or_path).expanduser()
    if path.is_absolute() or len(path.parts) > 1 or (path / CONFIG_NAME).is_file():
        return path  # a path: models.read_checkpoint_meta says what is wrong with it, if anything
    # a bare name is looked up inside the roots only: "." and ".." name no checkpoint there
    inside = path.name not in ("", ".", "..")
    for root in checkpoint_roots() if inside else []:  # a shipped checkpoint before a stray local folder
        if (root / path / CONFIG_NAME).is_file():
            return root / path
    if path.exists():
        return path
    known = ", ".join(p.name for p in _checkpoint_dirs()[:6]) or "none found"
    raise DeltalensError(
        f"{name_or_path!r} is neither a checkpoint folder nor a shipped checkpoint's name "
        f"(shipped: {known}; see deltalens.list_checkpoints())."
    )


def _checkpoint_dirs() -> list[Path]:
    """Every checkpoint folder under the roots, the first of each name (hidden folders skipped)."""
    found: dict[str, Path] = {}
    for root in checkpoint_roots():
        if root.is_dir():
            for entry in sorted(root.iterdir()):
                if not entry.name.startswith(".") and (entry / CONFIG_NAME).is_file():
                    found.setdefault(entry.name, entry)
    return list(found.values())
