"""A Hugging Face model folder, `config.json` + `model.safetensors`: the one writer of every
architecture's checkpoint, and the low-level reader of both files (JSON, safetensors; never pickle).

    write_model_folder(model, directory, extra_config)   what models.save and save_pretrained write
    read_json_object(config_file)                        config.json as a dict, or one sentence
    load_weights(model, arch, weights_file, ...)          the file's tensors into the model, checked

config.json of the delta-rule family is fla's config (its fields, "architectures", "model_type",
"dtype"), keys sorted as Hugging Face writes them, plus extra top-level keys such as our "deltalens"
section (models/io/deltalens_section.py); of the other architectures it holds the extra keys alone,
in the order given. model.safetensors holds the state dict under the model's own names; tensors
that share storage (tied weights) are written once, and loading accepts a missing name when the
model ties it to one that is present.

A folder written in place (save_pretrained) gets each file atomically (temp file + rename); one
written into a staging folder (models.save, which swaps the whole folder in) gets plain writes.
Either way each file is flushed to disk (core/atomic.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltalens.core.atomic import fsync_file, write_atomic
from deltalens.core.errors import DeltalensError
from deltalens.models.registry import architectures, family

if TYPE_CHECKING:  # torch loads with the first tensor read or written: reading config.json needs none
    import torch

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
# config.json keys that fla's config would take as its own, beside its fields
FLA_BOOKKEEPING = ("architectures", "model_type", "dtype", "torch_dtype")


class MissingCheckpointFile(DeltalensError, FileNotFoundError):
    """A checkpoint file that is not there (also a FileNotFoundError, as HF's loaders raise)."""


# ----------------------------------------------------------------------------- write


def write_model_folder(
    model, directory: str | os.PathLike, extra_config: dict[str, Any] | None = None, *, staged: bool = False
) -> None:
    """Write `model`'s config.json and model.safetensors into `directory` (created if need be).

    extra_config: top-level config.json keys beside fla's fields (e.g. {"deltalens": {...}}); for
    the delta-rule family they must not shadow one of them (ValueError). staged: `directory` is a
    staging folder its caller swaps in whole, so the files need no rename of their own.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config, sorted_keys = config_json_of(model, extra_config)
    put = _write_in_place if staged else write_atomic
    put(directory / WEIGHTS_NAME, lambda file: write_weights(model, Path(file)))
    put(directory / CONFIG_NAME, lambda file: write_json(Path(file), config, sorted_keys))


def config_json_of(model, extra_config: dict[str, Any] | None) -> tuple[dict[str, Any], bool]:
    """(the config.json object of `model`, whether its keys are written sorted)."""
    arch = getattr(model, "arch", None)
    settings = family(arch).settings if arch in architectures() else None
    if settings is None:  # not an fla-format family: the "deltalens" section alone
        return dict(extra_config or {}), False
    config = model.config.to_dict()
    if extra_config:
        reserved = set(type(model.config)().to_dict()) | set(FLA_BOOKKEEPING)
        clash = sorted(set(extra_config) & reserved)
        if clash:
            raise ValueError(
                f"extra_config keys {clash} would overwrite {settings.fla_config} fields; nest them under "
                "your own key, e.g. extra_config={'deltalens': {...}}."
            )
        config.update(extra_config)
    config["architectures"] = [settings.fla_model]
    config["model_type"] = settings.model_type
    config["dtype"] = str(model.lm_head.weight.dtype).replace("torch.", "")
    return config, True  # sorted, as Hugging Face's PretrainedConfig writes it


def write_weights(model, file: Path) -> None:
    from safetensors.torch import save_file

    save_file(unique_tensors(model.state_dict()), str(file), metadata={"format": "pt"})


def unique_tensors(state_dict) -> dict[str, torch.Tensor]:
    """CPU-contiguous copies of a state dict, each shared storage written once (safetensors requires it)."""
    seen: set[tuple] = set()
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        tensor = tensor.detach()
        storage = tensor.untyped_storage().data_ptr()
        view = (tensor.device, storage, tensor.storage_offset(), tuple(tensor.shape), tensor.stride())
        if tensor.numel() and view in seen:
            continue  # the same tensor under a second name (tied weights); load restores the tie
        seen.add(view)
        out[name] = tensor.to("cpu").contiguous().clone()
    return out


def write_json(file: Path, data: dict[str, Any], sorted_keys: bool = False) -> None:
    with open(file, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=sorted_keys)
        handle.write("\n")


def _write_in_place(path: Path, write: Callable[[str], None]) -> None:
    write(str(path))
    fsync_file(path)


# ----------------------------------------------------------------------------- read


def checked_dir(path) -> Path:
    """`path` as a Path, or one sentence saying why it is not a checkpoint folder."""
    directory = Path(path)
    if not directory.exists():
        raise DeltalensError(f"checkpoint directory {directory} does not exist; check the path or train a model first")
    if not directory.is_dir():
        raise DeltalensError(
            f"{directory} is not a checkpoint directory; pass the folder that holds {CONFIG_NAME} and {WEIGHTS_NAME}"
        )
    return directory


def read_json_object(config_file: Path) -> dict[str, Any]:
    """The JSON object in `config_file`, or one sentence naming the file and what is wrong."""
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
    return config


def load_weights(model, arch: str, weights_file: Path, described_by: str = CONFIG_NAME) -> None:
    """Read `weights_file` (or the shards its index names), check it fits `model`, and put its tensors
    in place of the model's: memory-mapped, not copied (a tensor of another dtype is converted once).

    The model may have been built with its parameters on the meta device (models/io/meta_build.py);
    names it ties to one another (same tensor object) are tied again to the tensor the file holds.
    described_by names what the model was built from, for the error sentences ("config.json").
    """
    import torch

    saved = read_weights(weights_file)
    check_tensors(model, arch, saved, weights_file, described_by)
    targets = model.state_dict(keep_vars=True)
    for name, tensor in saved.items():
        if tensor.dtype != targets[name].dtype:
            saved[name] = tensor.to(targets[name].dtype)  # the one conversion; same dtype stays mapped
    ties = tied_groups(model)
    with torch.no_grad():
        result = model.load_state_dict(saved, strict=False, assign=True)
    # check_tensors already vetted names; anything the model still reports is a bug, not user error.
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise RuntimeError(f"load_state_dict rejected {unexpected} after validation")
    _tie_again(model, ties, saved)
    from deltalens.models.io.meta_build import meta_tensors

    left = meta_tensors(model)
    if left:
        raise RuntimeError(f"tensors {left[:3]} were not loaded from {weights_file} after validation")


def tied_groups(model) -> list[list[str]]:
    """Names (parameters and buffers) that refer to one tensor object: a tie, such as lm_head to the embedding."""
    by_object: dict[int, list[str]] = {}
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    for name, tensor in named:
        by_object.setdefault(id(tensor), []).append(name)
    return [names for names in by_object.values() if len(names) > 1]


def _tie_again(model, ties: list[list[str]], saved: dict[str, Any]) -> None:
    """assign=True replaced the tensor under the name the file holds; point its aliases at it too."""
    for names in ties:
        loaded = next((name for name in names if name in saved), None)
        if loaded is None:
            continue
        owner_name, _, attr = loaded.rpartition(".")
        owner = model.get_submodule(owner_name)
        tensor = owner._parameters[attr] if attr in owner._parameters else owner._buffers[attr]
        for alias in names:
            owner_name, _, attr = alias.rpartition(".")
            owner = model.get_submodule(owner_name)
            slots = owner._parameters if attr in owner._parameters else owner._buffers
            slots[attr] = tensor


def read_weights(weights_file: Path) -> dict[str, torch.Tensor]:
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
                f"{index} is not a readable shard index ({first_line(err)}); save the model again"
            ) from None
    state: dict[str, torch.Tensor] = {}
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
            from safetensors.torch import load_file

            state.update(load_file(str(file), device="cpu"))
        except Exception as err:  # safetensors raises its own SafetensorError and OSErrors
            raise DeltalensError(
                f"{file} is truncated or corrupt ({first_line(err)}); re-save the checkpoint or copy it again"
            ) from None
    return state


def check_tensors(model, arch: str, saved: dict[str, Any], weights_file: Path, described_by: str) -> None:
    """One sentence for a tensor the model lacks, one it does not have, or one of the wrong shape."""
    expected = model.state_dict()
    # Names the model ties to another name (one tensor object; meta tensors have no storage to compare)
    # may be absent from the file.
    tied_to = {name: names for names in tied_groups(model) for name in names}

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
        check_values(name, tensor, expected[name], weights_file)


def check_values(name: str, tensor: torch.Tensor, parameter: torch.Tensor, weights_file: Path) -> None:
    """A float parameter takes float weights of any precision (fla's hub models are bf16), never integers or
    booleans. Whether a weight is NaN or infinite is not scanned here (a pass over every tensor, and the end of
    the memory map): a forward whose logits are not finite names the tensors then (`nonfinite_weights`)."""
    if tensor.dtype.is_floating_point != parameter.dtype.is_floating_point or tensor.is_complex():
        raise DeltalensError(
            f"{weights_file} tensor {name} holds {str(tensor.dtype).replace('torch.', '')} values where the model "
            f"has a {str(parameter.dtype).replace('torch.', '')} parameter; the weights are not this model's"
        )


def _all_finite(tensor: torch.Tensor, chunk: int = 1 << 22) -> bool:
    """isfinite in slices of `chunk` values: no full-size mask."""
    flat = tensor.reshape(-1)
    return all(bool(part.isfinite().all()) for part in flat.split(chunk))


def nonfinite_weights(model) -> list[tuple[str, int]]:
    """(name, count) of every floating-point parameter or buffer holding NaN or infinity (scans them: asked only
    once something non-finite has surfaced)."""
    found = []
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.is_floating_point() and tensor.device.type != "meta" and not _all_finite(tensor.detach()):
            found.append((name, int((~tensor.detach().isfinite()).sum())))
    return found


def refuse_nonfinite(model, logits):
    """`logits`, unless they are not finite because a weight is not: then one sentence naming the tensor(s).
    (Non-finite logits from finite weights, e.g. an intervention's, pass: the caller asked for them.)"""
    import torch

    if model.training or not logits.is_floating_point() or bool(torch.isfinite(logits).all()):
        return logits
    bad = nonfinite_weights(model)
    if not bad:
        return logits
    saved = set(model.state_dict())
    if not any(name in saved for name, _ in bad):  # e.g. a beta range: set in memory, never read from a file
        listed = _names([name for name, _ in bad])
        raise DeltalensError(
            f"{listed} hold non-finite values set after loading (they are not saved with the weights), so the "
            "model's outputs are not finite: reset them (a beta range: model.reset_beta_range())"
        )
    bad = [(name, count) for name, count in bad if name in saved]
    where = getattr(model, "weights_source", None) or "this model"
    listed = _names([f"{name} ({count} values)" for name, count in bad])
    raise DeltalensError(
        f"{where}: tensor(s) {listed} hold non-finite values (NaN or infinity), so the model's outputs are not "
        "finite; the checkpoint is damaged or its training diverged: use an earlier checkpoint"
    )


def _names(names: list[str], shown: int = 3) -> str:
    listed = ", ".join(names[:shown])
    return listed + (f" and {len(names) - shown} more" if len(names) > shown else "")


def first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0].rstrip(".")
