"""Models on the Hugging Face Hub by id: "org/name" (optionally "org/name@revision") made a local folder.

    hub_folder("fla-hub/delta_net-1.3B-100B", revision=None, check=...)   -> the snapshot folder
    hub_model_folder("fla-hub/delta_net-1.3B-100B")                       -> its reading (a ModelFolder)

The files land in the standard Hugging Face cache (huggingface_hub's own layout,
models--ORG--NAME/snapshots/REV with refs/main), so a model fetched by transformers is found here and
the other way round. The environment is read at each call, not at import: HF_HUB_CACHE, else
HF_HOME/hub, else ~/.cache/huggingface/hub; HF_HUB_OFFLINE=1 reads the cache only. A revision (a
branch, tag or commit) pins what is read.

config.json comes first and `check` (hub_model_folder's: model type, fields, memory) sees it before any
weight is fetched, so a 5 GB download never starts for a model that would be refused. Only the files
a folder is opened from are fetched: config and tokenizer files and safetensors weights (never pickle).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from deltalens.core.errors import DeltalensError
from deltalens.models.io.hf_folder import CONFIG_NAME, first_line
from deltalens.models.io.model_folder import ModelFolder, read_model_folder

# an id as the Hub spells them: one "/" between an owner and a name of letters, digits, - _ .
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
# what a folder is opened from; tokenizer files of either kind, never *.bin / *.pt (pickle)
FETCHED = ["*.json", "*.safetensors", "tokenizer.model", "*.txt", "*.md"]
_TRUE = {"1", "true", "yes", "on"}


def split_hub_id(name: str) -> tuple[str, str | None] | None:
    """(repo id, revision or None) when `name` is spelled like a Hub id ("org/name" or "org/name@rev"),
    else None. Whether it exists is not asked here."""
    if not isinstance(name, str):
        return None
    repo, _, revision = name.partition("@")
    if not _HUB_ID.fullmatch(repo) or ".." in repo or repo.endswith((".", "-")):
        return None
    return repo, (revision or None)


def hub_cache() -> Path:
    """The Hub cache folder as the environment names it now (huggingface_hub reads it only at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hub's host cannot be reached now (no name resolution, no connection), or None when it can."""
    import socket
    from urllib.parse import urlparse

    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        return f"{host}: {err.strerror or type(err).__name__}"
    return None


def hub_model_folder(repo_id: str, revision: str | None = None) -> ModelFolder:
    """The snapshot folder of `repo_id` at `revision`, its config.json read and checked once (model type,
    fields, memory: models/io/model_folder.py) before any weight is fetched."""
    read: list[ModelFolder] = []
    folder = hub_folder(repo_id, revision, check=lambda where: read.append(read_model_folder(where, hub_id=repo_id)))
    return read[0].moved(folder)


def hub_folder(repo_id: str, revision: str | None = None, check: Callable[[Path], None] | None = None) -> Path:
    """The local snapshot folder of `repo_id` at `revision` (default: main), fetched if need be.

    check(folder) runs once config.json is there and before the weights are fetched; it raises
    DeltalensError to refuse the model."""
    try:
        from huggingface_hub import hf_hub_download, snapshot_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            GatedRepoError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:  # pragma: no cover - a dependency of transformers, always there in practice
        raise DeltalensError(
            f"{repo_id!r} looks like a Hugging Face Hub id, but huggingface_hub is not installed: "
            "pip install huggingface_hub"
        ) from None
    offline, cache = hub_offline(), hub_cache()
    at = f" at revision {revision}" if revision else ""
    unreachable = None if offline else hub_unreachable()
    if unreachable:  # read the cache alone: huggingface_hub would retry for ~25 s before saying the same
        offline = True
    try:
        config_file = Path(
            hf_hub_download(repo_id, CONFIG_NAME, revision=revision, cache_dir=str(cache), local_files_only=offline)
        )
        if check is not None:
            check(config_file.parent)
        folder = Path(
            snapshot_download(
                repo_id, allow_patterns=FETCHED, revision=revision, cache_dir=str(cache), local_files_only=offline
            )
        )
    except LocalEntryNotFoundError:
        partial = _partial_snapshot(cache, repo_id, revision)
        if partial is not None and (offline or unreachable):
            raise DeltalensError(
                f"{repo_id}{at} is in the Hugging Face cache, but its snapshot {partial} lacks {CONFIG_NAME} (a "
                "partial or damaged download): download it again on a machine that reaches the Hub"
            ) from None
        if unreachable:
            raise DeltalensError(
                f"{repo_id}{at} is not in the Hugging Face cache {cache} and the Hub cannot be reached "
                f"({unreachable}); check the network, or give a local folder"
            ) from None
        if offline:
            raise DeltalensError(
                f"{repo_id}{at} is not in the Hugging Face cache {cache} and HF_HUB_OFFLINE is set; download it "
                f"once on a machine that reaches the Hub (or unset HF_HUB_OFFLINE), or give a local folder"
            ) from None
        raise DeltalensError(
            f"{repo_id}{at} could not be fetched from the Hugging Face Hub and is not cached in {cache}; check the "
            f"network (or set HF_HOME to a cache that holds it)"
        ) from None
    except GatedRepoError:
        raise DeltalensError(
            f"{repo_id} is a gated model on the Hugging Face Hub; accept its terms there and log in (hf auth login)"
        ) from None
    except RevisionNotFoundError:
        raise DeltalensError(f"{repo_id} has no revision {revision!r} on the Hugging Face Hub") from None
    except RepositoryNotFoundError:
        raise DeltalensError(
            f"{repo_id!r} is neither a local folder nor a model on the Hugging Face Hub (or it is private); check "
            f"the spelling"
        ) from None
    except EntryNotFoundError:
        raise DeltalensError(f"{repo_id}{at} has no {CONFIG_NAME}, so it is not a model deltalens can open") from None
    except DeltalensError:
        raise  # `check` refused the model
    except Exception as err:  # a full disk, an unwritable cache, a network that fails half way
        raise DeltalensError(f"could not fetch {repo_id}{at} into {cache}: {first_line(err)}") from None
    if not (folder / CONFIG_NAME).is_file():  # pragma: no cover - hf_hub_download put it there
        raise DeltalensError(f"{repo_id}{at} has no {CONFIG_NAME} in {folder}")
    return folder


def put_in_cache(folder, repo_id: str, revision: str | None = None, cache=None, branch: str = "main") -> Path:
    """Copy the files of model folder `folder` into the Hub cache as `repo_id` at `revision` (default: a
    commit-like hash of the files), with refs/`branch` naming it, the layout huggingface_hub reads; the
    snapshot folder is returned. This is how a model reaches a machine that never sees the Hub."""
    import hashlib
    import shutil

    if split_hub_id(repo_id) is None or "@" in repo_id:
        raise DeltalensError(f"{repo_id!r} is not a Hub id of the form org/name")
    files = sorted(p for p in Path(folder).iterdir() if p.is_file())
    if not any(p.name == CONFIG_NAME for p in files):
        raise DeltalensError(f"{folder} has no {CONFIG_NAME}, so it is not a model folder")
    if revision is None:
        digest = hashlib.sha1()
        for p in files:
            digest.update(p.name.encode() + b"\x00" + p.read_bytes())
        revision = digest.hexdigest()
    repo = Path(cache or hub_cache()) / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    for p in files:
        shutil.copy2(p, snapshot / p.name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / branch).write_text(revision)
    return snapshot


def _partial_snapshot(cache: Path, repo_id: str, revision: str | None) -> Path | None:
    """The cached snapshot of `repo_id` at `revision` (the Hub's layout: models--ORG--NAME/refs/REF ->
    snapshots/COMMIT) when it exists without a config.json (a partial download); else None."""
    repo = Path(cache) / f"models--{repo_id.replace('/', '--')}"
    ref = repo / "refs" / (revision or "main")
    commit = ref.read_text().strip() if ref.is_file() else (revision or "")
    snapshot = repo / "snapshots" / commit if commit else None
    return snapshot if snapshot is not None and snapshot.is_dir() and not (snapshot / CONFIG_NAME).exists() else None
