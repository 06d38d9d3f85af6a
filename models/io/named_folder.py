"""A model folder by name: the one way in for a folder, a shipped checkpoint's name or a Hugging Face Hub id.

    located = locate("s3-deltanet-neg-statement")        # the kind, decided once: folder, shipped or hub
    folder = open_model_folder("org/name@rev")           # located, fetched if a Hub id, read and checked once

dl.load, open_checkpoint, the CLI's check before torch and resolve_checkpoint all start here, torch-free: the
name's kind is decided once (`locate`), then the folder is read in one pass (models/io/model_folder.py; a Hub id's
config.json is checked before its weights are fetched, models/io/hub.py). Shipped checkpoints are looked up in
$DELTALENS_CHECKPOINTS (os.pathsep-separated folders), then the repository's checkpoints/ folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from deltalens.core.errors import DeltalensError, did_you_mean, some_of
from deltalens.models.io.hf_folder import CONFIG_NAME
from deltalens.models.io.hub import hub_cache, hub_model_folder, split_hub_id
from deltalens.models.io.model_folder import ModelFolder, read_model_folder

# the repository's shipped checkpoints (models/ sits beside checkpoints/ in the repository)
SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints"

# A wheel (a non-editable `pip install .`) carries the code only; the checkpoints stay in the repository.
NO_SHIPPED = (
    "this install has no shipped checkpoints (a non-editable `pip install` leaves the repository's checkpoints/ "
    "folder behind): clone the repository and set DELTALENS_CHECKPOINTS=<clone>/checkpoints, or pass a folder"
)


def checkpoint_roots() -> list[Path]:
    """Where shipped checkpoints are looked up by name: $DELTALENS_CHECKPOINTS (os.pathsep-separated
    folders), then the repository's checkpoints/ folder."""
    roots = [Path(p) for p in os.environ.get("DELTALENS_CHECKPOINTS", "").split(os.pathsep) if p]
    return [*roots, SHIPPED]


def no_shipped_checkpoints() -> bool:
    """True when no checkpoint root exists: none shipped beside the code, none named by $DELTALENS_CHECKPOINTS."""
    return not any(root.is_dir() for root in checkpoint_roots())


def checkpoint_dirs() -> list[Path]:
    """Every checkpoint folder under the roots, the first of each name (hidden folders skipped)."""
    found: dict[str, Path] = {}
    for root in checkpoint_roots():
        if root.is_dir():
            for entry in sorted(root.iterdir()):
                if not entry.name.startswith(".") and (entry / CONFIG_NAME).is_file():
                    found.setdefault(entry.name, entry)
    return list(found.values())


@dataclass(frozen=True)
class Located:
    """What a name points at. kind: "folder" (a path, read as given), "shipped" (a name found under
    checkpoint_roots()) or "hub" (repo_id at revision, not fetched yet: `read` fetches it)."""

    kind: str
    path: Path | None = None
    repo_id: str | None = None
    revision: str | None = None

    def readable(self) -> bool:
        """Whether `read` finds a config.json to read (a Hub id: whether the Hub or its cache has one is for `read`)."""
        return self.kind == "hub" or (self.path is not None and (self.path / CONFIG_NAME).is_file())

    def read(self) -> ModelFolder:
        """The folder read and checked once (a Hub id: its config.json checked before any weight is fetched)."""
        if self.kind == "hub":
            return hub_model_folder(str(self.repo_id), self.revision)
        return read_model_folder(self.path)


def open_model_folder(name_or_path, revision: str | None = None) -> ModelFolder:
    """A folder, a shipped checkpoint's name or a Hub id ("org/name", "org/name@revision"; `revision` pins it
    too) read and checked once; a ModelFolder already read is returned as it is. Pass the reading down
    (models.load(folder), open_checkpoint(folder)) instead of the name."""
    if isinstance(name_or_path, ModelFolder):
        return name_or_path
    return locate(name_or_path, revision).read()


def resolve_checkpoint(name_or_path, revision: str | None = None) -> Path:
    """The folder a name points at (a Hub id's snapshot, fetched); a path is returned unread, so whatever
    opens it says what is wrong with it."""
    located = locate(name_or_path, revision)
    return located.read().path if located.kind == "hub" else Path(str(located.path))


def locate(name_or_path, revision: str | None = None) -> Located:
    """The kind of `name_or_path`, decided once: an existing or local-looking path, a shipped checkpoint's name,
    or a Hub id (spelled org/name and neither a path here nor a folder of this directory); one sentence otherwise."""
    name = str(name_or_path)
    if not name.strip():
        raise DeltalensError("the checkpoint name is empty; give a folder, a shipped checkpoint's name or org/name")
    path = Path(name_or_path).expanduser()
    hub = None if path.exists() else split_hub_id(name)  # the one look at its spelling: a path here is no Hub id
    if hub is not None and not looks_local(name, hub):
        repo_id, pinned = hub
        if revision and pinned and revision != pinned:
            raise DeltalensError(f"{name_or_path!r} pins revision {pinned!r} but revision={revision!r} was asked for")
        return Located("hub", repo_id=repo_id, revision=revision or pinned)
    if revision is not None:
        raise DeltalensError(
            f"revision={revision!r} applies to Hugging Face Hub ids (org/name), not to {name_or_path!r}"
        )
    if path.is_absolute() or len(path.parts) > 1 or looks_local(name, hub) or (path / CONFIG_NAME).is_file():
        return Located("folder", path)  # a path: reading it says what is wrong with it, if anything
    # a bare name is looked up inside the roots only: "." and ".." name no checkpoint there
    inside = path.name not in ("", ".", "..")
    for root in checkpoint_roots() if inside else []:  # a shipped checkpoint before a stray local folder
        if (root / path / CONFIG_NAME).is_file():
            return Located("shipped", root / path)
    if path.exists():
        return Located("folder", path)
    if no_shipped_checkpoints():
        raise DeltalensError(f"{name_or_path!r} is not a checkpoint folder, and {NO_SHIPPED}.")
    names = [p.name for p in checkpoint_dirs()]
    raise DeltalensError(
        f"{name_or_path!r} is neither a checkpoint folder nor a shipped checkpoint's name (shipped: {some_of(names)}; "
        f"see deltalens.list_checkpoints()){did_you_mean(name, names) or '.'}"
    )


def looks_local(name: str, hub: tuple[str, str | None] | None) -> bool:
    """A name meant as a path, never sent to the Hub: it starts with ./ ../ / or ~, or its first part is a
    folder that exists here (runs/no_such_model names a missing run, not a Hub model "runs") and the Hub
    cache holds no model of that id (deltalens/s3-deltanet-bpe, cached, is still one from the repository root).
    `hub`: split_hub_id(name), already asked."""
    if name.startswith(("./", "../", "/", "~", ".\\")):
        return True
    owner = name.partition("/")[0]
    if "/" not in name or not Path(owner).is_dir():
        return False
    return hub is None or not (hub_cache() / ("models--" + hub[0].replace("/", "--"))).is_dir()
