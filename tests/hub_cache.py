"""A local Hugging Face cache in the Hub's own layout, for tests that open models by Hub id offline.

    put_in_hub_cache(folder, cache, "org/name", revision)   -> the snapshot folder (cache/models--org--name/...)

Files are copied into models--ORG--NAME/snapshots/REV/ and refs/main names REV, as huggingface_hub
writes them (it keeps blobs apart and links to them; it reads plain files just as well).
"""

from __future__ import annotations

from deltalens.models.io.hub import put_in_cache


def put_in_hub_cache(folder, cache, repo_id: str, revision: str | None = None, branch: str = "main"):
    return put_in_cache(folder, repo_id, revision=revision, cache=cache, branch=branch)
