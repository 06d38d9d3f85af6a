"""Checkpoints by name: where shipped checkpoints are looked up, and a name, path or Hub id made a folder.

Torch-free for names and paths, so a command can find and check a folder before it imports torch or
builds anything. A Hugging Face Hub id ("org/name", "org/name@revision") that is not a local path is
fetched into the Hugging Face cache (models/io/hub.py), its config.json checked before the weights.
"""

from __future__ import annotations

import os
from pathlib import Path

from deltalens.core.errors import DeltalensError, did_you_mean, some_of
from deltalens.models.io.hf_folder import CONFIG_NAME
from deltalens.models.io.hub import hub_cache, hub_model_folder, split_hub_id
from deltalens.models.io.model_folder import ModelFolder, read_model_folder

# the repository's shipped checkpoints (training/ sits beside checkpoints/ in the repository)
SHIPPED = Path(__file__).resolve().parents[1] / "checkpoints"


def checkpoint_roots() -> list[Path]:
    """Where shipped checkpoints are looked up by name: $DELTALENS_CHECKPOINTS (os.pathsep-separated
    folders), then the repository's checkpoints/ folder."""
    roots = [Path(p) for p in os.environ.get("DELTALENS_CHECKPOINTS", "").split(os.pathsep) if p]
    return [*roots, SHIPPED]


# A wheel (a non-editable `pip install .`) carries the code only; the checkpoints stay in the repository.
NO_SHIPPED = (
    "this install has no shipped checkpoints (a non-editable `pip install` leaves the repository's checkpoints/ "
    "folder behind): clone the repository and set DELTALENS_CHECKPOINTS=<clone>/checkpoints, or pass a folder"
)


def no_shipped_checkpoints() -> bool:
    """True when no checkpoint root exists: none shipped beside the code, none named by $DELTALENS_CHECKPOINTS."""
    return not any(root.is_dir() for root in checkpoint_roots())


def resolve_checkpoint(name_or_path, revision: str | None = None) -> Path:
    """A checkpoint folder from a path, a shipped checkpoint's name (from any working directory) or a
    Hugging Face Hub id ("org/name" or "org/name@revision"; `revision` pins it too)."""
    found = locate_checkpoint(name_or_path, revision)
    return found.path if isinstance(found, ModelFolder) else found


def open_folder(name_or_path, revision: str | None = None) -> ModelFolder:
    """resolve_checkpoint's folder read and checked once (config.json's fields and memory bound,
    models/io/model_folder.py); pass it down to models.load / open_checkpoint instead of the name."""
    if isinstance(name_or_path, ModelFolder):
        return name_or_path
    found = locate_checkpoint(name_or_path, revision)
    return found if isinstance(found, ModelFolder) else read_model_folder(found)


def locate_checkpoint(name_or_path, revision: str | None = None) -> Path | ModelFolder:
    """resolve_checkpoint's folder; a Hub model's already read (its config.json is checked before the
    weights are fetched)."""
    if not str(name_or_path).strip():
        raise DeltalensError("the checkpoint name is empty; give a folder, a shipped checkpoint's name or org/name")
    path = Path(name_or_path).expanduser()
    hub = split_hub_id(str(name_or_path)) if not path.exists() and not looks_local(str(name_or_path)) else None
    if hub is not None:
        repo_id, pinned = hub
        if revision and pinned and revision != pinned:
            raise DeltalensError(f"{name_or_path!r} pins revision {pinned!r} but revision={revision!r} was asked for")
        return hub_model_folder(repo_id, revision or pinned)
    if revision is not None:
        raise DeltalensError(
            f"revision={revision!r} applies to Hugging Face Hub ids (org/name), not to {name_or_path!r}"
        )
    if path.is_absolute() or len(path.parts) > 1 or looks_local(str(name_or_path)) or (path / CONFIG_NAME).is_file():
        return path  # a path: models.read_checkpoint_meta says what is wrong with it, if anything
    # a bare name is looked up inside the roots only: "." and ".." name no checkpoint there
    inside = path.name not in ("", ".", "..")
    for root in checkpoint_roots() if inside else []:  # a shipped checkpoint before a stray local folder
        if (root / path / CONFIG_NAME).is_file():
            return root / path
    if path.exists():
        return path
    if no_shipped_checkpoints():
        raise DeltalensError(f"{name_or_path!r} is not a checkpoint folder, and {NO_SHIPPED}.")
    names = [p.name for p in _checkpoint_dirs()]
    raise DeltalensError(
        f"{name_or_path!r} is neither a checkpoint folder nor a shipped checkpoint's name (shipped: {some_of(names)}; "
        f"see deltalens.list_checkpoints()){did_you_mean(str(name_or_path), names) or '.'}"
    )


def looks_local(name: str) -> bool:
    """A name meant as a path, never sent to the Hub: it starts with ./ ../ / or ~, or its first part is a
    folder that exists here (runs/no_such_model names a missing run, not a Hub model "runs") and the Hub
    cache holds no model of that id (deltalens/s3-deltanet-bpe, cached, is still one from the repository root)."""
    if name.startswith(("./", "../", "/", "~", ".\\")):
        return True
    owner = name.partition("/")[0]
    if "/" not in name or not Path(owner).is_dir():
        return False
    hub = split_hub_id(name)
    return hub is None or not (hub_cache() / ("models--" + hub[0].replace("/", "--"))).is_dir()


def _checkpoint_dirs() -> list[Path]:
    """Every checkpoint folder under the roots, the first of each name (hidden folders skipped)."""
    found: dict[str, Path] = {}
    for root in checkpoint_roots():
        if root.is_dir():
            for entry in sorted(root.iterdir()):
                if not entry.name.startswith(".") and (entry / CONFIG_NAME).is_file():
                    found.setdefault(entry.name, entry)
    return list(found.values())
