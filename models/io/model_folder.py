"""A model folder read once: config.json parsed and checked (fields, memory) before anything is built,
and that reading passed down to whatever opens the folder.

    folder = read_model_folder("checkpoints/s3-deltanet-neg-statement")   # torch-free
    folder.arch, folder.build_config, folder.meta                        # what models.load builds, the section
    models.load(folder)                                                  # no second read of config.json

models.load, dl.load (training/opened.py), the CLI, the dashboard, Hub ids (models/io/hub.py checks the
config before any weight is fetched) and HookedDeltaLM.from_pretrained all go through
`read_model_folder`: config.json is parsed once, the typed fields of an fla-format family are checked
once, and the memory bound (models/io/footprint.py, a pure function of the config) is checked once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltalens.core.errors import DeltalensError
from deltalens.models.io.deltalens_section import (
    SECTION,
    explained_build_errors,
    fla_build_config,
    interpret_config,
    meta_of,
)
from deltalens.models.io.footprint import check_fits
from deltalens.models.io.hf_folder import CONFIG_NAME, WEIGHTS_NAME, checked_dir, read_json_object
from deltalens.models.registry import family, family_of_model_type

__all__ = ["ModelFolder", "read_model_folder"]


@dataclass(frozen=True)
class ModelFolder:
    """One model folder's config.json, read and checked.

    path          the folder (config.json + model.safetensors)
    arch          its architecture (a family of models/registry.py)
    recorded      the model_config it records (the section's; an fla folder's fla fields)
    build_config  what models.build(arch, **build_config) takes: for an fla-format family the top-level
                  fla fields, the ones fla itself would load; else `recorded`
    section       the "deltalens" section ({} for a folder fla wrote)
    config        the whole config.json
    """

    path: Path
    arch: str
    recorded: dict[str, Any]
    build_config: dict[str, Any]
    section: dict[str, Any]
    config: dict[str, Any]

    @property
    def config_file(self) -> Path:
        return self.path / CONFIG_NAME

    @property
    def weights_file(self) -> Path:
        return self.path / WEIGHTS_NAME

    @property
    def meta(self) -> dict[str, Any]:
        """The "deltalens" section with every key present (None where unknown): models.read_checkpoint_meta."""
        return meta_of(self.arch, self.recorded, self.section)

    def moved(self, path: Path) -> ModelFolder:
        """The same reading for the folder's files at `path` (a Hub snapshot once its weights are there)."""
        return dataclasses.replace(self, path=Path(path))

    def with_overrides(self, **overrides: Any) -> ModelFolder:
        """The folder with entries of build_config replaced (n_ctx=4096, say), the memory bound checked again."""
        if not overrides:
            return self
        changed = dataclasses.replace(self, build_config={**self.build_config, **overrides})
        changed.check()
        return changed

    def check(self) -> None:
        """The typed fields of an fla-format family and the memory bound, one sentence naming the file."""
        with explained_build_errors(self.config_file, self.arch):
            settings = family(self.arch).settings
            if settings is not None:
                settings(**self.build_config)  # every field's type and range, one sentence naming it
            check_fits(self.arch, self.build_config)  # the bound from the config alone, before anything is built


def read_model_folder(path, hub_id: str | None = None) -> ModelFolder:
    """Read and check model folder `path` once (torch-free): one sentence for a missing folder or file,
    a config.json that is not a model deltalens opens, a field out of range, or weights too big for memory.

    hub_id: the Hub id the folder was fetched as (its config.json alone so far); a model type deltalens
    does not open is then named as the Hub's."""
    folder = checked_dir(path)
    config_file = folder / CONFIG_NAME
    config = read_json_object(config_file)  # the one parse
    if hub_id is not None:
        _check_hub_model_type(hub_id, config)
    arch, recorded, section, config = interpret_config(config_file, config)
    build_config = fla_build_config(config, arch) if family(arch).settings is not None else recorded
    opened = ModelFolder(folder, arch, dict(recorded), dict(build_config), section, config)
    opened.check()
    return opened


def _check_hub_model_type(hub_id: str, config: dict[str, Any]) -> None:
    if SECTION not in config and family_of_model_type(config.get("model_type")) is None:
        from deltalens.models.registry import families

        claimed = [t for record in families() for t in record.model_types]
        raise DeltalensError(
            f"{hub_id} is a {config.get('model_type')!r} model; deltalens opens the delta-rule family of fla "
            f"(model_type {', '.join(map(repr, claimed))}) and its own checkpoints"
        )
