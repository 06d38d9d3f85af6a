"""Checkpoints by name: where shipped checkpoints are looked up, and a name, path or Hub id made a folder.

Torch-free for names and paths, so a command can find and check a folder before it imports torch or
builds anything. A Hugging Face Hub id ("org/name", "org/name@revision") that is not a local path is
fetched into the Hugging Face cache (models/io/hub.py), its config.json checked before the weights.
"""

from __future__ import annotations

import os
from pathlib import Path

from deltalens.core.errors import DeltalensError
from deltalens.models.io.hf_folder import CONFIG_NAME
from deltalens.models.io.hub import hub_folder, split_hub_id

# the repository's shipped checkpoints (training/ sits beside checkpoints/ in the repository)
SHIPPED = Path(__file__).resolve().parents[1] / "checkpoints"


def checkpoint_roots() -> list[Path]:
    """Where shipped checkpoints are looked up by name: $DELTALENS_CHECKPOINTS (os.pathsep-separated
    folders), then the repository's checkpoints/ folder."""
    roots = [Path(p) for p in os.environ.get("DELTALENS_CHECKPOINTS", "").split(os.pathsep) if p]
    return [*roots, SHIPPED]


def resolve_checkpoint(name_or_path, revision: str | None = None) -> Path:
    """A checkpoint folder from a path, a shipped checkpoint's name (from any working directory) or a
    Hugging Face Hub id ("org/name" or "org/name@revision"; `revision` pins it too)."""
    path = Path(name_or_path).expanduser()
    hub = split_hub_id(str(name_or_path)) if not path.exists() else None
    if hub is not None:
        repo_id, pinned = hub
        if revision and pinned and revision != pinned:
            raise DeltalensError(f"{name_or_path!r} pins revision {pinned!r} but revision={revision!r} was asked for")
        return hub_folder(repo_id, revision or pinned, check=check_hub_config)
    if revision is not None:
        raise DeltalensError(
            f"revision={revision!r} applies to Hugging Face Hub ids (org/name), not to {name_or_path!r}"
        )
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


def check_hub_config(folder: Path) -> None:
    """Refuse a Hub model before its weights are fetched: a model type deltalens does not open, a
    field it does not implement, or weights that will not fit in memory (each named in the sentence)."""
    from deltalens.models.io.configs import ARCH_OF_MODEL_TYPE
    from deltalens.models.io.footprint import check_folder
    from deltalens.models.io.hf_folder import read_json_object

    config_file = folder / CONFIG_NAME
    config = read_json_object(config_file)
    if "deltalens" not in config and config.get("model_type") not in ARCH_OF_MODEL_TYPE:
        raise DeltalensError(
            f"{folder.parent.parent.name.replace('models--', '').replace('--', '/')} is a "
            f"{config.get('model_type')!r} model; deltalens opens the delta-rule family of fla "
            f"(model_type {', '.join(map(repr, ARCH_OF_MODEL_TYPE))}) and its own checkpoints"
        )
    check_folder(folder)  # typed fields and the memory bound, no torch
    from deltalens.models.checkpoint import check_fits_in_memory
    from deltalens.models.io.deltalens_section import explained_build_errors, fla_build_config, read_config

    arch, model_config, _, raw = read_config(config_file)
    with explained_build_errors(config_file, arch):
        check_fits_in_memory(arch, fla_build_config(raw, arch) if "deltalens" not in raw else model_config)
