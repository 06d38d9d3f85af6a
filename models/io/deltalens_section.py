"""Our "deltalens" section of a checkpoint's config.json: what it holds, how models.save makes it,
and how a config.json says which architecture it is.

    {
      ...fla's config fields...                # delta-rule family only: the file IS an HF/fla config
      "deltalens": {
        "format_version": 1,
        "architecture": "deltanet" | "gated_deltanet" | ... (a family of models/registry.py),
        "model_config": {...},                 # build(architecture, **model_config) rebuilds the model
        "tokenizer": {...} | null,             # tokenizer spec (tasks)
        "task": {...} | null,                  # task spec: group, reveal spacing, lengths, ...
        "training": {...} | null,              # training config
        "metrics": {...} | null                # evaluation results
      }
    }

A config.json written by fla itself (no "deltalens" section, a `"model_type"` a family claims: "delta_net",
"gated_deltanet", "gated_deltaproduct") reads as that architecture with an empty section.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from deltalens.core.errors import DeltalensError
from deltalens.models.io.configs import fla_model_config
from deltalens.models.io.hf_folder import FLA_BOOKKEEPING, first_line, read_json_object
from deltalens.models.registry import architectures, family, family_of_model_type

FORMAT_VERSION = 1
SECTION = "deltalens"
EXTRA_KEYS = ("tokenizer", "task", "training", "metrics")
RESERVED_KEYS = ("format_version", "architecture", "model_config")
# HF bookkeeping in an fla config.json that is not an argument of fla's config
HF_BOOKKEEPING = (*FLA_BOOKKEEPING, "transformers_version", "_name_or_path", SECTION)


# ----------------------------------------------------------------------------- make


def arch_of(model) -> str:
    """The `arch` of a model models.save can write, or one sentence saying why not."""
    arch = getattr(model, "arch", None)
    if arch not in architectures():
        raise DeltalensError(
            f"cannot save a {type(model).__name__}: it has no known `arch` attribute; build it with models.build(...)"
        )
    return arch


def make_section(model, arch: str, extra: dict[str, Any]) -> dict[str, Any]:
    """The JSON-able section of `model`: format, architecture, model_config, then `extra`'s entries."""
    reserved = [key for key in extra if key in RESERVED_KEYS]
    if reserved:
        raise DeltalensError(
            f"extra may not set {', '.join(map(repr, reserved))}; models.save fills those from the model itself"
        )
    section: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "architecture": arch,
        "model_config": _model_config_of(model, arch),
    }
    for key in EXTRA_KEYS:
        section[key] = extra.get(key)
    section.update({key: value for key, value in extra.items() if key not in EXTRA_KEYS})
    for key, value in section.items():
        try:
            section[key] = json.loads(json.dumps(value, default=_to_json))
        except (TypeError, ValueError) as err:
            raise DeltalensError(
                f"checkpoint entry {key!r} cannot be written as JSON ({err}); pass dicts, lists, numbers and strings"
            ) from None
    return section


def _model_config_of(model, arch: str) -> dict[str, Any]:
    config = getattr(model, "model_config", None)
    if config is None and family(arch).settings is not None:
        config = fla_model_config(model.config, arch)
    if config is None:  # a model class outside the registry's two kinds: nothing says what its config is
        raise DeltalensError(
            f"a {arch} model without a model_config cannot be saved: give it one (the dict it is built from)"
        )
    return dict(config)


def _to_json(value: Any) -> Any:
    """json.dumps fallback for the values training code naturally produces."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if hasattr(value, "tolist"):  # numpy arrays and scalars, torch tensors
        return value.tolist()
    raise TypeError(f"object of type {type(value).__name__} is not JSON serializable")


# ----------------------------------------------------------------------------- read


def read_config(config_file: Path) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(architecture, model_config, deltalens section, whole config) from a config.json, validated."""
    return interpret_config(config_file, read_json_object(config_file))


def interpret_config(
    config_file: Path, config: dict[str, Any], hub_id: str | None = None
) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """read_config of the object already read from `config_file` (named in the sentences; a model fetched as
    Hub id `hub_id` whose type deltalens does not open is named by that id)."""
    section = config.get(SECTION)
    fla_family = family_of_model_type(config.get("model_type"))
    fla_arch = fla_family.arch if fla_family is not None else None
    if isinstance(section, dict) and "architecture" not in section and fla_arch is not None:
        section = None  # an fla config that carries a user's own "deltalens" entry: still fla's model
    if section is None:
        if fla_arch is not None:
            return fla_arch, fla_fields(config), {}, config
        from deltalens.models.registry import families  # the model_types deltalens reads, said in the sentence

        known = ", ".join(repr(t) for f in families() for t in f.model_types)
        if hub_id is not None and SECTION not in config:
            raise DeltalensError(
                f"{hub_id} is a {config.get('model_type')!r} model; deltalens opens the delta-rule family of fla "
                f"(model_type {known}) and its own checkpoints"
            )
        raise DeltalensError(
            f"{config_file} is a model of type {config.get('model_type')!r}, which deltalens does not open: it reads "
            f"fla folders of model_type {known} and its own checkpoints (with a {SECTION!r} section)"
        )
    if not isinstance(section, dict):
        raise DeltalensError(f"{config_file} has a {SECTION!r} entry that is not a JSON object; re-save the checkpoint")
    version = section.get("format_version", FORMAT_VERSION)
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise DeltalensError(
            f"{config_file} was written in checkpoint format {version}, newer than this deltalens reads "
            f"({FORMAT_VERSION}): open it with a newer deltalens"
        )
    arch = section.get("architecture")
    if arch not in architectures():
        raise DeltalensError(
            f"{config_file} names architecture {arch!r}, which deltalens does not know; "
            f"expected one of {', '.join(architectures())}"
        )
    model_config = section.get("model_config")
    if family(arch).settings is not None and not isinstance(model_config, dict):
        model_config = fla_fields(config)
    if not isinstance(model_config, dict):
        raise DeltalensError(
            f"{config_file} has no 'model_config' object in its {SECTION!r} section; re-save the checkpoint"
        )
    return arch, dict(model_config), section, config


def meta_of(arch: str, model_config: dict[str, Any], section: dict[str, Any]) -> dict[str, Any]:
    """The section with every key present (None where unknown), its architecture and model_config:
    what models.read_checkpoint_meta returns."""
    meta = {key: section.get(key) for key in ("format_version", *EXTRA_KEYS)}
    meta.update({key: value for key, value in section.items() if key not in meta})
    meta["architecture"] = arch
    meta["model_config"] = model_config
    return meta


def fla_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The keys of an fla config.json that are arguments of fla's config (HF's bookkeeping dropped)."""
    return {key: value for key, value in config.items() if key not in HF_BOOKKEEPING}


def fla_build_config(config: dict[str, Any], arch: str) -> dict[str, Any]:
    """The model_config a delta-rule model is built from: the top-level fla fields fla itself would load."""
    return fla_model_config(fla_fields(config), arch)


@contextmanager
def explained_build_errors(config_file: Path, arch: str) -> Iterator[None]:
    """Turn a model that cannot be built from `config_file` into one sentence naming the file."""
    try:
        yield
    except DeltalensError as err:
        raise DeltalensError(f"{config_file} holds a model_config that cannot build a {arch!r} model: {err}") from None
    except (TypeError, ValueError, NotImplementedError) as err:
        raise DeltalensError(
            f"{config_file} holds a model_config that cannot build a {arch!r} model: {first_line(err)}"
        ) from None
