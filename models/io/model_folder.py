"""A model folder read once: config.json parsed and checked (fields, memory) before anything is built,
and that reading passed down to whatever opens the folder.

    folder = read_model_folder("checkpoints/s3-deltanet-neg-statement")   # torch-free
    folder.arch, folder.build_config, folder.meta                        # what models.load builds, the section
    models.load(folder)                                                  # no second read of config.json
    folder_tokenizer(folder.meta, folder.path)                           # its tokenizer, read when asked

models.load, dl.load (a name's kind decided in models/io/named_folder.py), the CLI, the dashboard, Hub ids
(models/io/hub.py checks the config before any weight is fetched) and HookedDeltaLM.from_pretrained all go
through `read_model_folder`: config.json is parsed once, the typed fields of an fla-format family are checked
once, and the memory bound (models/io/footprint.py: from the safetensors headers, else the config) is
checked once, in the smallest precision deltalens loads (bf16); the reading keeps that estimate and the
memory budget, and the load checks the precision it chose against them (models/io/load_dtype.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltalens.core.errors import DeltalensError
from deltalens.models.io import footprint
from deltalens.models.io.deltalens_section import (
    explained_build_errors,
    fla_build_config,
    interpret_config,
    meta_of,
)
from deltalens.models.io.footprint import BEYOND_FILE, SMALLEST, WeightsEstimate, check_fits, estimate_weights
from deltalens.models.io.hf_folder import CONFIG_NAME, WEIGHTS_NAME, checked_dir, read_json_object
from deltalens.models.registry import family

if TYPE_CHECKING:  # the tokenizers load when a folder's tokenizer is asked for
    from deltalens.tasks.tokenizers.base import Tokenizer

__all__ = ["ModelFolder", "folder_tokenizer", "read_model_folder"]


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
    estimate      its weights counted before anything is built (footprint.estimate_weights), set by check()
    budget        the memory budget they were checked against (footprint.memory_budget()), set by check()
    """

    path: Path
    arch: str
    recorded: dict[str, Any]
    build_config: dict[str, Any]
    section: dict[str, Any]
    config: dict[str, Any]
    estimate: WeightsEstimate | None = None
    budget: tuple[int | None, str] | None = None

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
        return dataclasses.replace(self, build_config={**self.build_config, **overrides}).checked()

    def checked(self) -> ModelFolder:
        """The typed fields of an fla-format family and the memory bound, one sentence naming the file; the
        reading with its weights estimate and the budget it was checked against."""
        with explained_build_errors(self.config_file, self.arch):
            settings = family(self.arch).settings
            if settings is not None:
                settings(**self.build_config)  # every field's type and range, one sentence naming it
            estimate = estimate_weights(self.arch, self.build_config, self.weights_file)
            budget = footprint.memory_budget()  # read once, kept for the load's own check
            # before anything is built; the load checks the precision it picks (models/io/load_dtype.py). A
            # config asking for more than its file holds cannot be loaded at all: checked as it would be built
            dtype = "fp32" if estimate.source == BEYOND_FILE else SMALLEST
            check_fits(self.arch, self.build_config, estimate=estimate, dtype=dtype, budget=budget)
        return dataclasses.replace(self, estimate=estimate, budget=budget)


def read_model_folder(path, hub_id: str | None = None) -> ModelFolder:
    """Read and check model folder `path` once (torch-free): one sentence for a missing folder or file,
    a config.json that is not a model deltalens opens, a field out of range, or weights too big for memory.

    hub_id: the Hub id the folder was fetched as (its config.json alone so far); a model type deltalens
    does not open is then named as the Hub's."""
    folder = checked_dir(path)
    config_file = folder / CONFIG_NAME
    config = read_json_object(config_file)  # the one parse
    arch, recorded, section, config = interpret_config(config_file, config, hub_id)
    build_config = fla_build_config(config, arch) if family(arch).settings is not None else recorded
    return ModelFolder(folder, arch, dict(recorded), dict(build_config), section, config).checked()


def folder_tokenizer(meta: dict[str, Any], folder: Path | None) -> Tokenizer | None:
    """A checkpoint's tokenizer: the spec its section records, or the folder's own tokenizer files (a model
    from elsewhere); None where it has neither. `folder` None: the section alone (no folder to read)."""
    from deltalens.tasks.tokenizers.base import Tokenizer
    from deltalens.tasks.tokenizers.hf import HFTokenizer, has_tokenizer, spec_is_hf

    spec = meta.get("tokenizer")
    if spec_is_hf(spec):
        if folder is None:
            raise DeltalensError("this checkpoint's tokenizer is its folder's tokenizer.json; open the folder")
        return HFTokenizer.from_spec_in(folder, spec)
    if spec:
        return Tokenizer.from_spec(spec)
    if folder is not None and has_tokenizer(folder):
        return HFTokenizer.from_folder(folder)  # a model from elsewhere with its own tokenizer
    return None
