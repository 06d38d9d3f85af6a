"""The family registry: one record per architecture, declared once in its own module, read by everyone.

    from deltalens.models.registry import Family, register, family, families

    register(Family(arch="mynet", display="MyNet", article="a MyNet",
                    config="mypackage.mynet:mynet_config", model="mypackage.mynet:HookedMyNet",
                    class_name="HookedMyNet", act_names=("embed", "resid_pre", ...), layers_field="n_layers",
                    weights=lambda config: ...))
    family("mynet").build({"n_layers": 2, ...})      # what models.build("mynet", ...) does

Each built-in family registers itself in its own module of models/families/ (one per architecture,
like fla's fla/models/<family>/__init__.py); the registry imports those modules the first time it is
asked, so nothing here or there imports torch: the model class and its config factory are named by
dotted path ("package.module:Name") and imported when a model is first built. models.build, load and
save, the memory bound (models/io/footprint.py), the config.json reader (models/io/deltalens_section.py),
act_name's table, the dashboard's family table and the report read this registry instead of tables of
their own, so a new family touches its own module and nothing else (a built-in one also adds its name
to models/families/__init__.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from deltalens.core.errors import DeltalensError

__all__ = [
    "Family",
    "architectures",
    "families",
    "family",
    "family_of_class",
    "family_of_model_type",
    "register",
    "unregister",
]

# the package whose modules declare the built-in families (in its import order), imported on the first
# question to the registry
BUILTIN = "deltalens.models.families"


@dataclass(frozen=True)
class Family:
    """What deltalens knows about one architecture. Only the first seven fields are required.

    arch          the name models.build takes and config.json's "deltalens" section records ("deltanet")
    display       its name in tables and prose ("DeltaNet")
    article       the same with its article, for sentences ("a DeltaNet")
    model         model factory: a callable, or its dotted path "module:name", taking the config object
                  and returning a freshly initialised HookedRootModule that carries `arch` and
                  `model_config` (a model class, or a function such as build_transformer); named by path,
                  it is imported when the first model is built, so asking the registry never imports torch
    class_name    the class name of the models `model` returns (how a model without `arch` is recognised,
                  and what error sentences call it)
    act_names     the short hook names act_name() accepts for it, in forward order ("embed", "resid_pre",
                  "q", ...; models/lm/hook_names.py lists where each lives)
    layers_field  the config key that counts layers ("num_hidden_layers", "n_layers")
    config        config factory: a callable, or its dotted path, taking the build keyword arguments as
                  one dict and returning the object `model` is built from, refusing unknown keys with a
                  sentence (models/io/config_from_dict.py); leave it None when `settings` is given
    delta_rule    True for the delta-rule family: it has beta, a matrix state S_t, and the beta, eigenvalue
                  and state tools apply to it
    hooks, probes, interventions
                  one line each for the family table (dashboard, report, dl.FAMILY): the per-head hooks
                  beyond the residual stream, the probes and the interventions that apply
    model_types   the fla / transformers `model_type`s whose config.json reads as this family without a
                  "deltalens" section; the first is the one it writes (empty: only deltalens checkpoints)
    settings      the fla-free config class of an fla-format family (models/io/configs.py FlaSettings
                  subclass): config.json then holds fla's fields at its top level, and its fields are
                  type-checked before anything is built; None for families saved in the "deltalens"
                  section alone
    extension_keys  deltalens's own config keys beside the settings' fields (kept by fla, ignored by it)
    vocab_field   the config key for the vocabulary size; models.build accepts "vocab_size" for every
                  family and renames it to this one
    weights       weights(config dict) -> how many weights the model holds at least, from the config
                  alone (no torch, no build; never more than the built model has): the memory check
                  multiplies it by 4 bytes. None: no bound (the check passes)
    load          load(folder, config) -> the model with its weights, for a family whose files only its own
                  library reads (transformers renames and splits tensors on save): a callable or dotted
                  path, given the folder and the config object; None = build, then our safetensors reader
    capabilities  what a model of the family can have (models/capabilities.py's names: "delta", "keys", ...):
                  the tools that apply to it follow from these and each tool's needs (capabilities.TOOLS)
    transition    a delta-rule family's per-token transition in words where it is not alpha (I - beta k k^T)
                  (no "householder" capability: Comba, RWKV-7), for the sentence of a tool that refuses it
    """

    arch: str
    display: str
    article: str
    model: Callable[[Any], Any] | str = field(repr=False)
    class_name: str
    act_names: tuple[str, ...]
    layers_field: str
    config: Callable[[dict[str, Any]], Any] | str | None = field(default=None, repr=False)
    delta_rule: bool = False
    hooks: str = ""
    probes: str = "linear probes"
    interventions: str = ""
    model_types: tuple[str, ...] = ()
    settings: SettingsClass | None = None
    extension_keys: tuple[str, ...] = ()
    vocab_field: str = "vocab_size"
    weights: Callable[[dict[str, Any]], float] | None = field(default=None, repr=False)
    load: Callable[[Any, Any], Any] | str | None = None
    capabilities: frozenset[str] = frozenset()
    transition: str = ""

    def config_keys(self) -> list[str] | None:
        """The keys models.build takes for it (the settings' fields, then the extensions); None: not listed."""
        if self.settings is None:
            return None
        return list(self.settings.defaults) + list(self.extension_keys)

    def make_config(self, config: dict[str, Any]):
        """The config object `model` is built from (unknown keys refused with one sentence)."""
        if self.settings is None:
            if self.config is None:  # register() refuses such a record; one built by hand reaches here
                raise DeltalensError(f"{self.arch!r}: give its config factory (`config`) or its fla settings class")
            return _resolve(self.config)(config)
        known = self.config_keys() or []
        unknown = sorted(set(config) - set(known))
        if unknown:  # fla's config swallows unknown keys silently; a typo would build the wrong model
            raise DeltalensError(
                f"unknown {self.arch} config key(s) {', '.join(map(repr, unknown))}; "
                f"use fla {self.settings.fla_config} arguments such as {', '.join(sorted(known))}"
            )
        return self.settings(**config)

    def resolve_model(self) -> Callable[[Any], Any]:
        """The model factory, imported (a class for most families)."""
        return _resolve(self.model)

    def build(self, config: dict[str, Any]):
        """A freshly initialised model of this family from its build keyword arguments."""
        return self.resolve_model()(self.make_config(config))


class SettingsClass(Protocol):
    """What the registry and the folder writers read of an fla settings class (a FlaSettings subclass,
    models/io/configs.py, which imports this module: hence a protocol, not that class)."""

    defaults: dict[str, Any]  # field -> fla's default
    model_type: str
    fla_config: str
    fla_model: str

    def __call__(self, **values: Any) -> Any: ...


_FAMILIES: dict[str, Family] = {}
_loaded = False


def _resolve(target: Callable | str) -> Callable:
    if not isinstance(target, str):
        return target
    module, _, path = target.partition(":")  # "module:name" or "module:Class.method"
    found: Any = importlib.import_module(module)
    for name in path.split("."):
        found = getattr(found, name)
    return found


def _builtins() -> dict[str, Family]:
    global _loaded
    if not _loaded:
        _loaded = True  # before the import: each family module calls register(), which comes back here
        importlib.import_module(BUILTIN)
    return _FAMILIES


def register(record: Family, replace: bool = False) -> Family:
    """Add a family (its module calls this once, at import). A second family of the same `arch`, or one
    claiming a model_type or class name another family has, is refused unless `replace`."""
    known = _builtins()
    if not replace:
        for other in known.values():
            if other.arch == record.arch:
                raise DeltalensError(f"architecture {record.arch!r} is registered already; pick another name")
            clash = set(other.model_types) & set(record.model_types)
            if clash or other.class_name == record.class_name:
                taken = f"model_type {sorted(clash)[0]!r}" if clash else f"class {record.class_name!r}"
                raise DeltalensError(f"{taken} belongs to {other.arch!r} already; {record.arch!r} cannot claim it")
    if (record.config is None) == (record.settings is None):
        raise DeltalensError(
            f"{record.arch!r}: give its config factory (`config`) or its fla settings class, one of them"
        )
    if record.settings is not None and record.model_types[:1] != (record.settings.model_type,):
        raise DeltalensError(
            f"{record.arch!r}: model_types must start with its settings' model_type {record.settings.model_type!r}"
        )
    known[record.arch] = record
    return record


def unregister(arch: str) -> None:
    """Remove a family (tests that register one of their own take it out again)."""
    _builtins().pop(arch, None)


def families() -> tuple[Family, ...]:
    """Every registered family, in registration order (the built-ins first)."""
    return tuple(_builtins().values())


def architectures() -> tuple[str, ...]:
    """The registered architecture names ("deltanet", "gated_deltanet", ...)."""
    return tuple(_builtins())


def family(arch: str) -> Family:
    """The family named `arch`, or one sentence listing the known ones."""
    found = _builtins().get(arch) if isinstance(arch, str) else None
    if found is None:
        raise DeltalensError(f"unknown architecture {arch!r}; choose one of {', '.join(architectures())}")
    return found


def family_of_model_type(model_type: Any) -> Family | None:
    """The family whose config.json carries this fla / transformers `model_type`, or None."""
    return next((f for f in _builtins().values() if model_type in f.model_types), None)


def family_of_class(class_name: str) -> Family | None:
    """The family whose models are of class `class_name`, or None."""
    return next((f for f in _builtins().values() if f.class_name == class_name), None)
