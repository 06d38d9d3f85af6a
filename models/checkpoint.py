"""Checkpoint directories: `config.json` + `model.safetensors`, written atomically, read without pickle.

    models.save(model, path, extra={...})     save_checkpoint: the folder, swapped in whole
    models.load(path)                         load_checkpoint: rebuild the model, load its weights
    models.read_checkpoint_meta(path)         the "deltalens" section, no weights read

The file format is models/io's: config.json is fla's config for the delta-rule family plus our
"deltalens" section (models/io/deltalens_section.py, which documents it), and model.safetensors the
state dict under the model's own names; the one writer and the low-level reader of both files are
models/io/hf_folder.py's (HookedDeltaLM.save_pretrained / from_pretrained use them too). A directory
written by fla itself (no "deltalens" section) loads as its architecture with empty tokenizer, task,
training and metrics.

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

import os
import shutil
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

from deltalens.core.atomic import fsync_dir, replace_dir
from deltalens.core.errors import DeltalensError, reporting_storage_failure
from deltalens.models.build import build
from deltalens.models.io.deltalens_section import (
    EXTRA_KEYS,
    FORMAT_VERSION,
    SECTION,
    arch_of,
    explained_build_errors,
    make_section,
    meta_of,
    read_config,
)
from deltalens.models.io.hf_folder import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    MissingCheckpointFile,
    checked_dir,
    load_weights,
    write_model_folder,
)
from deltalens.models.io.model_folder import ModelFolder, read_model_folder
from deltalens.models.registry import _resolve, family

__all__ = [
    "CONFIG_NAME",
    "EXTRA_KEYS",
    "FORMAT_VERSION",
    "SECTION",
    "WEIGHTS_NAME",
    "MissingCheckpointFile",
    "is_replaceable",
    "load_checkpoint",
    "read_checkpoint_meta",
    "read_config_json",
    "save_checkpoint",
]


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
    arch = arch_of(model)
    section = make_section(model, arch, extra or {})

    if target.exists() and not is_replaceable(target, set(files)):
        raise DeltalensError(
            f"{target} exists and is not a checkpoint directory, so it will not be replaced; choose another path"
        )
    intact = "the checkpoint already there is intact" if target.exists() else "nothing was written there"
    with reporting_storage_failure(target, intact + " (the partial copy was removed)"):
        _save_staged(model, target, section, files)
    return target


def _save_staged(model, target: Path, section: dict[str, Any], files: dict[str, str]) -> None:
    """Write everything into a hidden folder beside `target`, then swap it in (removed on any failure)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.saving-", dir=target.parent))
    try:
        write_model_folder(model, staging, {SECTION: section}, staged=True)
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


def _apply_umask(directory: Path) -> None:
    """mkdtemp (and tempfile-based writers) create private 0700/0600 entries; give the finished
    checkpoint the permissions an ordinary save would have (0777/0666 less the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    for entry in directory.iterdir():
        os.chmod(entry, (0o777 if entry.is_dir() else 0o666) & ~umask)


def is_replaceable(target: Path, rewritten: Collection[str] = frozenset()) -> bool:
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
    if isinstance(path, ModelFolder):
        return path.meta
    arch, model_config, section, _ = read_config(checked_dir(path) / CONFIG_NAME)
    return meta_of(arch, model_config, section)


def load_checkpoint(path, *, dtype=None, **model_config_overrides: Any):
    """Rebuild the model stored in checkpoint directory `path` and load its weights (in eval mode).

    `path`: a folder, or its reading (a ModelFolder, models/io/model_folder.py) when the caller has
    read and checked it already, so config.json is not read again. `model_config_overrides` replace
    entries of the stored model_config before the model is built, e.g. `n_ctx=4096` to evaluate a
    rotary Transformer on longer traces. Overrides that change a weight's shape fail with the
    shape-mismatch error. `dtype` (a torch floating dtype, "fp32", "bf16" or "auto"; None = fp32): the
    weights' dtype, chosen and checked against memory before the build (models/io/load_dtype.py: a big
    model's estimate is printed first) and set while the model is still empty, so a bf16 file opened in
    bf16 is never held in fp32 (each tensor converted once).
    """
    from deltalens.models.io.load_dtype import load_dtype  # imports torch: not for metadata reads

    folder = path if isinstance(path, ModelFolder) else read_model_folder(path)  # fields and memory checked
    folder = folder.with_overrides(**model_config_overrides)
    dtype = load_dtype(folder, dtype)  # the precision that fits, before anything is built
    record = family(folder.arch)
    if record.load is not None:  # a library's own files (transformers' production LMs): its reader
        with explained_build_errors(folder.config_file, folder.arch):
            config = record.make_config(folder.build_config)  # checked before any weight is read
        opened = _resolve(record.load)(folder.path, config, dtype).eval()
        opened.weights_source = str(folder.path)  # what a non-finite weight's sentence names
        return opened
    with explained_build_errors(folder.config_file, folder.arch):
        model = _built_for_weights(folder.arch, folder.build_config, dtype)

    described_by = CONFIG_NAME
    if model_config_overrides:
        described_by += " with " + ", ".join(f"{k}={v!r}" for k, v in model_config_overrides.items())
    load_weights(model, folder.arch, folder.weights_file, described_by)
    model.eval()
    model.weights_source = str(folder.weights_file)  # what a non-finite weight's sentence names
    return model if dtype is None else model.to(dtype)  # a no-op where the build was cast already


def _built_for_weights(arch: str, build_config: dict[str, Any], dtype=None):
    """The model with no memory for its weights (parameters on meta, nothing drawn, cast to `dtype` for
    free): load_weights assigns the file's tensors. A family that derives a buffer from a parameter is
    built on the CPU (and cast after loading: casting empty CPU weights would touch all their memory)."""
    from deltalens.models.init_skipped import random_init_skipped  # imports torch: not for metadata reads
    from deltalens.models.io.meta_build import meta_buffers, parameters_on_meta

    with parameters_on_meta(), random_init_skipped():
        model = build(arch, **build_config)
    if not meta_buffers(model):
        return model if dtype is None else model.to(dtype)
    with random_init_skipped():  # load_weights below sets every parameter
        return build(arch, **build_config)


def read_config_json(path) -> dict[str, Any]:
    """The whole config.json of checkpoint `path` (fla's fields and our section), validated."""
    return read_config(checked_dir(path) / CONFIG_NAME)[3]
