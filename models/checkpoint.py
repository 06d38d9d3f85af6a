"""Checkpoint directories: `config.json` + `model.safetensors`, written atomically, read without pickle.

Layout of `config.json`:

    {
      ...fla's config fields...                # delta-rule family only: the file IS an HF/fla config,
                                               # so fla.models.DeltaNetForCausalLM (GatedDeltaNet...,
                                               # GatedDeltaProduct...).from_pretrained(dir) loads it
      "deltalens": {
        "format_version": 1,
        "architecture": "deltanet" | "gated_deltanet" | "deltaproduct" | "transformer" | "lstm",
        "model_config": {...},                 # build(architecture, **model_config) rebuilds the model
        "tokenizer": {...} | null,             # tokenizer spec (tasks)
        "task": {...} | null,                  # task spec: group, reveal spacing, lengths, ...
        "training": {...} | null,              # training config
        "metrics": {...} | null                # evaluation results
      }
    }

A directory written by fla itself (no "deltalens" section, `"model_type"` "delta_net", "gated_deltanet"
or "gated_deltaproduct") loads as that architecture with empty tokenizer/task/training/metrics.

`model.safetensors` holds the model's state dict under the model's own names: fla's names for
the delta-rule family, TransformerLens's (`blocks.0.attn.q.weight`, ...) for the Transformer, HookedLSTM's for
the LSTM. Tensors that share storage (tied weights) are written once; loading accepts a missing
name when the model ties it to one that is present.

Atomic writes: everything goes into a hidden temp directory beside the target
(`.NAME.saving-XXXX`), is flushed to disk, and then swapped into place by core/atomic.py: an
existing checkpoint is first renamed aside (`.NAME.old`) and removed only after the new one is
in place, so a failure at any point leaves either the old or the new checkpoint under NAME
(after a hard crash between the two renames, the old one survives as `.NAME.old`). Listing code
should skip names starting with a dot.

Every problem a person can fix (missing or not-JSON config, unknown architecture, missing,
truncated or corrupt weights, tensors that do not match the config) raises `DeltalensError`
with one sentence naming the file and what is wrong.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from deltalens.core.atomic import fsync_dir, fsync_file, replace_dir
from deltalens.core.errors import DeltalensError
from deltalens.models.architecture import ARCHITECTURES, is_delta_rule
from deltalens.models.build import build, fla_model_config
from deltalens.models.io.configs import ARCH_OF_MODEL_TYPE, SETTINGS


class MissingCheckpointFile(DeltalensError, FileNotFoundError):
    """A checkpoint file that is not there (also a FileNotFoundError, as HF's loaders raise)."""


FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
SECTION = "deltalens"
EXTRA_KEYS = ("tokenizer", "task", "training", "metrics")
_RESERVED_KEYS = ("format_version", "architecture", "model_config")
# HF bookkeeping in an fla config.json that is not a DeltaNetConfig argument.
_HF_BOOKKEEPING = (
    "architectures",
    "transformers_version",
    "model_type",
    "dtype",
    "torch_dtype",
    "_name_or_path",
    SECTION,
)


# ----------------------------------------------------------------------------- save


def save_checkpoint(model, path, extra: dict[str, Any] | None = None, files: dict[str, str] | None = None) -> Path:
    """Write `model` and its metadata to directory `path`, replacing an existing checkpoint atomically.

    `extra` holds the JSON-able "tokenizer", "task", "training" and "metrics" entries (dataclasses,
    numpy and torch scalars are converted); other keys are kept too, except the reserved
    "format_version", "architecture" and "model_config". `files` are text files written beside the
    weights in the same atomic step (a model card, the training config). Returns the checkpoint path.
    """
    files = files or {}
    target = Path(os.path.abspath(path))  # normalises "." and trailing slashes; does not follow symlinks
    arch = _arch_of(model)
    section = _make_section(model, arch, extra or {})

    if target.exists() and not is_replaceable(target, set(files)):
        raise DeltalensError(
            f"{target} exists and is not a checkpoint directory, so it will not be replaced; choose another path"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.saving-", dir=target.parent))
    try:
        _write_checkpoint(model, arch, section, staging)
        for name, text in files.items():
            if name in (CONFIG_NAME, WEIGHTS_NAME) or Path(name).name != name:
                raise DeltalensError(f"cannot write {name!r} beside the weights: use a plain file name of your own")
            (staging / name).write_text(text)
        _apply_umask(staging)
        fsync_dir(staging)
        replace_dir(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _arch_of(model) -> str:
    arch = getattr(model, "arch", None)
    if arch not in ARCHITECTURES:
        raise DeltalensError(
            f"cannot save a {type(model).__name__}: it has no known `arch` attribute; build it with models.build(...)"
        )
    return arch


def _model_config_of(model, arch: str) -> dict[str, Any]:
    config = getattr(model, "model_config", None)
    if config is None and is_delta_rule(arch):
        config = fla_model_config(model.config, arch)
    return dict(config)


def _make_section(model, arch: str, extra: dict[str, Any]) -> dict[str, Any]:
    reserved = [key for key in extra if key in _RESERVED_KEYS]
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


def _write_checkpoint(model, arch: str, section: dict[str, Any], directory: Path) -> None:
    if is_delta_rule(arch) and hasattr(model, "save_pretrained"):
        # The delta-rule models write fla's config.json + model.safetensors; we make sure our section is in it.
        model.save_pretrained(str(directory), extra_config={SECTION: section})
        config_path = directory / CONFIG_NAME
        config = json.loads(config_path.read_text())
        if config.get(SECTION) != section:
            config[SECTION] = section
            _write_json(config_path, config)
        fsync_file(directory / WEIGHTS_NAME)
        return
    _write_weights(model, directory / WEIGHTS_NAME)
    config: dict[str, Any] = {}
    if is_delta_rule(arch):
        # A delta-rule model without save_pretrained: still write fla's fields so fla can read the folder.
        settings = SETTINGS[arch]
        config = {
            **model.config.to_diff_dict(),
            "model_type": settings.model_type,
            "architectures": [settings.fla_model],
        }
    _write_json(directory / CONFIG_NAME, {**config, SECTION: section})


def _write_weights(model, file: Path) -> None:
    tensors = _unique_tensors(model.state_dict())
    save_file(tensors, str(file), metadata={"format": "pt"})
    fsync_file(file)


def _unique_tensors(state_dict) -> dict[str, Any]:
    """CPU-contiguous copies of a state dict, each shared storage written once (safetensors requires it)."""
    seen: dict[tuple, str] = {}
    out: dict[str, Any] = {}
    for name, tensor in state_dict.items():
        tensor = tensor.detach()
        storage = tensor.untyped_storage().data_ptr()
        view = (tensor.device, storage, tensor.storage_offset(), tuple(tensor.shape), tensor.stride())
        if tensor.numel() and view in seen:
            continue  # the same tensor under a second name (tied weights); load restores the tie
        seen[view] = name
        out[name] = tensor.to("cpu").contiguous().clone()
    return out


def _write_json(file: Path, data: dict[str, Any]) -> None:
    """Plain write: the file is inside the staging folder, which replace_dir swaps in atomically."""
    with open(file, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())


def _apply_umask(directory: Path) -> None:
    """mkdtemp (and tempfile-based writers) create private 0700/0600 entries; give the finished
    checkpoint the permissions an ordinary save would have (0777/0666 less the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    for entry in directory.iterdir():
        os.chmod(entry, (0o777 if entry.is_dir() else 0o666) & ~umask)


def is_replaceable(target: Path, rewritten: set[str] = frozenset()) -> bool:
    """Only a checkpoint directory may be replaced, or a folder holding nothing but files this save
    rewrites (e.g. the train.toml a checkpoint is exported beside); never a file or other folder."""
    if not target.is_dir():
        return False
    return (target / CONFIG_NAME).exists() or all(entry.name in rewritten for entry in target.iterdir())


# ----------------------------------------------------------------------------- read


def read_checkpoint_meta(path) -> dict[str, Any]:
    """The "deltalens" section of checkpoint `path` (all keys present, None where unknown); no weights read.

    For a plain fla DeltaNet directory the section is synthesised: architecture "deltanet",
    model_config from its config.json, format_version None.
    """
    directory = _checked_dir(path)
    config_file = directory / CONFIG_NAME
    arch, model_config, section, _ = _read_config(config_file)
    meta = {key: section.get(key) for key in ("format_version", *EXTRA_KEYS)}
    meta.update({key: value for key, value in section.items() if key not in meta})
    meta["architecture"] = arch
    meta["model_config"] = model_config
    return meta


def load_checkpoint(path, **model_config_overrides: Any):
    """Rebuild the model stored in checkpoint directory `path` and load its weights (in eval mode).

    `model_config_overrides` replace entries of the stored model_config before the model is
    built, e.g. `n_ctx=4096` to evaluate a rotary Transformer on longer traces. Overrides that
    change a weight's shape fail with the shape-mismatch error.
    """
    directory = _checked_dir(path)
    config_file = directory / CONFIG_NAME
    weights_file = directory / WEIGHTS_NAME
    arch, model_config, _, raw_config = _read_config(config_file)
    if is_delta_rule(arch):
        # Build from the top-level fla fields, the ones fla itself would load.
        model_config = fla_model_config(_fla_model_config(raw_config), arch)
    model_config = {**model_config, **model_config_overrides}

    try:
        model = build(arch, **model_config)
    except DeltalensError as err:
        raise DeltalensError(f"{config_file} holds a model_config that cannot build a {arch!r} model: {err}") from None
    except (TypeError, ValueError, NotImplementedError) as err:
        raise DeltalensError(
            f"{config_file} holds a model_config that cannot build a {arch!r} model: {_first_line(err)}"
        ) from None

    saved = _read_weights(weights_file)
    described_by = "config.json"
    if model_config_overrides:
        described_by += " with " + ", ".join(f"{k}={v!r}" for k, v in model_config_overrides.items())
    _check_tensors(model, arch, saved, weights_file, described_by)
    with torch.no_grad():
        result = model.load_state_dict(saved, strict=False)
    # Our own check above already vetted names; anything the model still reports is a bug, not user error.
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise RuntimeError(f"load_state_dict rejected {unexpected} after validation")
    model.eval()
    return model


def read_config_json(path) -> dict[str, Any]:
    """The whole config.json of checkpoint `path` (fla's fields and our section), validated."""
    return _read_config(_checked_dir(path) / CONFIG_NAME)[3]


def _checked_dir(path) -> Path:
    directory = Path(path)
    if not directory.exists():
        raise DeltalensError(f"checkpoint directory {directory} does not exist; check the path or train a model first")
    if not directory.is_dir():
        raise DeltalensError(
            f"{directory} is not a checkpoint directory; pass the folder that holds {CONFIG_NAME} and {WEIGHTS_NAME}"
        )
    return directory


def _read_config(config_file: Path) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(architecture, model_config, deltalens section, whole config) from a config.json, validated."""
    if not config_file.is_file():
        raise MissingCheckpointFile(
            f"{config_file} is missing; a checkpoint folder needs {CONFIG_NAME} and {WEIGHTS_NAME}, "
            f"so re-save it with models.save"
        )
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DeltalensError(
            f"{config_file} is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}); "
            f"restore it or re-save the checkpoint"
        ) from None
    except UnicodeDecodeError:
        raise DeltalensError(f"{config_file} is not UTF-8 text; restore it or re-save the checkpoint") from None
    if not isinstance(config, dict):
        raise DeltalensError(
            f"{config_file} must hold a JSON object, not a {type(config).__name__}; re-save the checkpoint"
        )

    section = config.get(SECTION)
    fla_arch = ARCH_OF_MODEL_TYPE.get(config.get("model_type"))
    if isinstance(section, dict) and "architecture" not in section and fla_arch is not None:
        section = None  # an fla config that carries a user's own "deltalens" entry: still fla's model
    if section is None:
        if fla_arch is not None:
            return fla_arch, _fla_model_config(config), {}, config
        raise DeltalensError(
            f"{config_file} has no {SECTION!r} section and is not an fla DeltaNet, Gated DeltaNet or "
            f"DeltaProduct config "
            f"(model_type {config.get('model_type')!r}), so its architecture is unknown; "
            f"save models with models.save"
        )
    if not isinstance(section, dict):
        raise DeltalensError(f"{config_file} has a {SECTION!r} entry that is not a JSON object; re-save the checkpoint")
    arch = section.get("architecture")
    if arch not in ARCHITECTURES:
        raise DeltalensError(
            f"{config_file} names architecture {arch!r}, which deltalens does not know; "
            f"expected one of {', '.join(ARCHITECTURES)}"
        )
    model_config = section.get("model_config")
    if is_delta_rule(arch) and not isinstance(model_config, dict):
        model_config = _fla_model_config(config)
    if not isinstance(model_config, dict):
        raise DeltalensError(
            f"{config_file} has no 'model_config' object in its {SECTION!r} section; re-save the checkpoint"
        )
    return arch, dict(model_config), section, config


def _fla_model_config(config: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in config.items() if key not in _HF_BOOKKEEPING}


def _read_weights(weights_file: Path) -> dict[str, Any]:
    """The state dict in `weights_file`, or in the shards its HF index names (safetensors only)."""
    index = weights_file.with_name(f"{weights_file.name}.index.json")
    files = [weights_file]
    if not weights_file.is_file() and index.is_file():
        try:
            files = [
                weights_file.with_name(s) for s in sorted(set(json.loads(index.read_text())["weight_map"].values()))
            ]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError, ValueError) as err:
            raise DeltalensError(
                f"{index} is not a readable shard index ({_first_line(err)}); save the model again"
            ) from None
    state: dict[str, Any] = {}
    for file in files:
        if not file.is_file():
            pickled = [p.name for p in file.parent.glob("*.bin")] + [p.name for p in file.parent.glob("*.pt")]
            hint = (
                f"; only safetensors weights are loaded, never pickle files such as {pickled[0]}: re-save the "
                "model with save_pretrained"
                if pickled
                else "; the checkpoint is incomplete, so re-save it"
            )
            raise MissingCheckpointFile(f"{file} is missing{hint}")
        try:
            state.update(load_file(str(file), device="cpu"))
        except Exception as err:  # safetensors raises its own SafetensorError and OSErrors
            raise DeltalensError(
                f"{file} is truncated or corrupt ({_first_line(err)}); re-save the checkpoint or copy it again"
            ) from None
    return state


def _check_tensors(model, arch: str, saved: dict[str, Any], weights_file: Path, described_by: str) -> None:
    expected = model.state_dict()
    # Names the model ties to another name (same storage) may be absent from the file.
    groups: dict[tuple, list[str]] = {}
    for name, tensor in expected.items():
        if not tensor.numel():
            continue
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride())
        groups.setdefault(key, []).append(name)
    tied_to = {name: names for names in groups.values() if len(names) > 1 for name in names}

    missing = [
        name for name in expected if name not in saved and not any(alias in saved for alias in tied_to.get(name, ()))
    ]
    unexpected = [name for name in saved if name not in expected]
    if missing:
        raise DeltalensError(
            f"{weights_file} lacks tensor(s) the {arch} needs: {_names(missing)}; "
            f"the weights do not belong to the model {described_by} describes"
        )
    if unexpected:
        raise DeltalensError(
            f"{weights_file} holds tensor(s) the {arch} does not have: {_names(unexpected)}; "
            f"the weights do not belong to the model {described_by} describes"
        )
    for name, tensor in saved.items():
        want = tuple(expected[name].shape)
        if tuple(tensor.shape) != want:
            raise DeltalensError(
                f"{weights_file} tensor {name} has shape {tuple(tensor.shape)} but the model {described_by} "
                f"describes needs {want}; the weights do not belong to this config"
            )


def _names(names: list[str], shown: int = 3) -> str:
    listed = ", ".join(names[:shown])
    return listed + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0].rstrip(".")
