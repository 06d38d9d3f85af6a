"""Every kind of per-head intervention, one record each: what it changes, what a model needs for it, the
function that builds it, its CLI flag, its named sweeps and its dashboard label. The API (`dl.sweep`), the
CLI (`deltalens intervene`) and the Interventions page all read this table; adding a kind is adding a record.

    beta-scale        rescale_beta(model, l, h, scale=F)          beta times F
    beta-range        rescale_beta(model, l, h, to=(LO, HI))      beta's range [0, 2] (or [0, 1]) onto [LO, HI]
    beta-clip         clip_beta(model, l, h, hi=HI)               beta > HI set to HI, the rest untouched
    beta-reflect      reflect_beta(model, l, h)                   beta -> 2 - beta: eigenvalue 1 - beta -> beta - 1
    transition-clip   clip_transition(model, l, h, hi=HI)         the same in I - beta k k^T only, write kept
    transition-range  rescale_transition(model, l, h, to=...)     the transition's beta range, write kept
    write-clip        clip_write(model, l, h, hi=HI)              the write's beta clipped, transition kept
    write-scale       scale_write(model, l, h, scale=F)           the write beta k v^T times F, transition kept
    eigen-abs         abs_eigenvalue(model, l, h)                 eigenvalue 1 - beta -> |1 - beta|, write kept
    ablate            ablate_head(model, l, h, zero|mean, site)   the head's read-out z or state S_t replaced
    gate-range        clamp_gate(model, l, h, LO, HI)             the decay alpha_t clamped into [LO, HI]
    state-patch       patch_state(l, h, donor cache)              S_t taken from a donor trace (the page only)

(the transition/write kinds: interp/split_interventions.py; the rest: interp/interventions.py.) A named
sweep is one setting of a kind applied to every head in turn (interp/head_sweep.py); `INTERVENTIONS` lists
them. Torch-free, so the CLI offers the choices without importing torch (~1.6 s): each record names its
function and imports it when used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["INTERVENTIONS", "KINDS", "Intervention", "Setting", "Sweep", "applicable", "kind", "kind_of_sweep", "lacks"]


@dataclass(frozen=True)
class Setting:
    """One number a kind takes: the function's keyword, the CLI metavar, the page's words, key and bounds."""

    name: str
    metavar: str
    label: str
    default: float
    lo: float
    hi: float
    key: str = ""  # the page's widget key (default: name)


@dataclass(frozen=True)
class Sweep:
    """A named setting of a kind that a head sweep applies to every head."""

    values: dict[str, Any]  # the kind's settings (an ablation: method and site)
    words: str  # the setting in words, for the page's title


@dataclass(frozen=True)
class Intervention:
    """One kind of per-head intervention (module docstring)."""

    key: str  # the CLI flag without its dashes
    label: str  # the dashboard's name of it
    changes: str  # what it changes, one line (the CLI's help)
    needs: tuple[str, ...]  # capabilities (models/capabilities.py) a model must have
    function: str  # "module.name" in deltalens.interp
    settings: tuple[Setting, ...] = ()
    sweeps: dict[str, Sweep] = field(default_factory=dict)
    per_factor: bool = False  # takes factor=J: one Householder factor of a DeltaProduct head
    cli: bool = True  # has a `deltalens intervene --<key>` flag
    to_range: bool = False  # settings LO, HI are passed as to=(LO, HI)

    @property
    def flag(self) -> str:
        return f"--{self.key}"

    def arguments(self, values: dict[str, Any], factor: int | None = None) -> dict[str, Any]:
        """The function's keyword arguments for the kind's setting `values` (and a factor where it takes one)."""
        unknown = set(values) - {s.name for s in self.settings}
        if unknown:
            raise KeyError(f"{self.key} takes {[s.name for s in self.settings]}, not {sorted(unknown)}")
        kwargs = {s.name: values.get(s.name, s.default) for s in self.settings}
        if self.to_range:
            kwargs = {"to": (kwargs.pop("lo"), kwargs.pop("hi")), **kwargs}
        if self.per_factor:
            kwargs["factor"] = factor
        return kwargs

    def builder(self) -> Callable[..., Any]:
        module, name = self.function.rsplit(".", 1)
        return getattr(importlib.import_module(f"deltalens.interp.{module}"), name)

    def build(self, model, layer: int, head: int, values: dict[str, Any] | None = None, factor: int | None = None):
        """The intervention on (layer, head) with the setting `values` (the defaults where absent)."""
        return self.builder()(model, layer, head, **self.arguments(values or {}, factor))


def _range(what: str) -> tuple[Setting, Setting]:
    prefix = "t-" if what.startswith("transition") else ""  # the page's keys: "lo" / "hi", "t-lo" / "t-hi"
    return (
        Setting("lo", "LO", f"{what}lo", 0.0, 0.0, 2.0, key=f"{prefix}lo"),
        Setting("hi", "HI", f"{what}hi", 1.0, 0.0, 2.0, key=f"{prefix}hi"),
    )


def _hi(label: str) -> tuple[Setting]:
    return (Setting("hi", "HI", label, 1.0, 0.0, 2.0, key="t-hi"),)


def _ablations() -> dict[str, Sweep]:
    sites = {"z": "read-out z", "state": "state S_t"}
    return {
        f"{method}-{site}": Sweep({"method": method, "site": site}, f"{method} ablation of the {words}")
        for site, words in sites.items()
        for method in ("zero", "mean")
    }


_DELTA, _SPLIT = ("delta",), ("delta", "keys", "householder")
# one record per paragraph reads as a table
# fmt: off
KINDS: tuple[Intervention, ...] = (
    Intervention(
        "beta-scale", "beta scale", "multiply the head's beta by F", _DELTA, "interventions.rescale_beta",
        (Setting("scale", "F", "multiply beta by", 0.5, 0.0, 4.0),), per_factor=True,
    ),
    Intervention(
        "beta-range", "beta range map", "map the head's beta range onto [LO, HI] (default intervention: 0 1)",
        _DELTA, "interventions.rescale_beta", _range("new "),
        {"beta-range": Sweep({"lo": 0.0, "hi": 1.0}, "beta range [0, 2] -> [0, 1]")}, per_factor=True, to_range=True,
    ),
    Intervention(
        "beta-clip", "beta clip", "set the head's beta to min(beta, HI): with 1, only its negative eigenvalues go",
        _DELTA, "interventions.clip_beta", _hi("beta at most"),
        {"beta-clip": Sweep({"hi": 1.0}, "beta clipped at 1")}, per_factor=True,
    ),
    Intervention(
        "beta-reflect", "beta reflect",
        "set the head's beta to 2 - beta: each eigenvalue 1 - beta keeps its size and flips its sign",
        _DELTA, "interventions.reflect_beta", (), {"beta-reflect": Sweep({}, "beta -> 2 - beta")}, per_factor=True,
    ),
    Intervention(
        "transition-clip", "transition clip",
        "set beta to min(beta, HI) in the head's transition I - beta k k^T only; its write beta k v^T is kept",
        _SPLIT, "split_interventions.clip_transition", _hi("transition beta at most"),
        {"transition-clip": Sweep({"hi": 1.0}, "transition beta clipped at 1, write kept")}, per_factor=True,
    ),
    Intervention(
        "transition-range", "transition range map",
        "map the beta range of the head's transition onto [LO, HI]; its write is kept",
        _SPLIT, "split_interventions.rescale_transition", _range("transition "),
        {"transition-range": Sweep({"lo": 0.0, "hi": 1.0}, "transition beta range [0, 2] -> [0, 1], write kept")},
        per_factor=True, to_range=True,
    ),
    Intervention(
        "write-clip", "write clip", "set beta to min(beta, HI) in the head's write beta k v^T only; its transition "
        "is kept", _SPLIT, "split_interventions.clip_write", _hi("write beta at most"),
        {"write-clip": Sweep({"hi": 1.0}, "write beta clipped at 1, transition kept")}, per_factor=True,
    ),
    Intervention(
        "write-scale", "write scale", "multiply the head's write beta k v^T by F; its transition is kept",
        _SPLIT, "split_interventions.scale_write",
        (Setting("scale", "F", "multiply the write by", 0.5, 0.0, 4.0, key="write"),),
        {"write-half": Sweep({"scale": 0.5}, "write beta k v^T halved, transition kept")}, per_factor=True,
    ),
    Intervention(
        "eigen-abs", "eigenvalue |1 - beta|",
        "map the head's transition eigenvalue 1 - beta to |1 - beta| (beta -> 1 - |1 - beta|); its write is kept",
        _SPLIT, "split_interventions.abs_eigenvalue", (),
        {"eigen-abs": Sweep({}, "eigenvalue 1 - beta -> |1 - beta|, write kept")}, per_factor=True,
    ),
    Intervention(
        "ablate", "ablation", "ablate the head (see --site)", ("heads",), "interventions.ablate_head",
        sweeps=_ablations(),
    ),
    Intervention(
        "gate-range", "gate clamp", "clamp the head's decay alpha_t into [LO, HI] (gated models; 1 1 = no forgetting)",
        ("decay",), "interventions.clamp_gate",
        (
            Setting("lo", "LO", "decay at least", 1.0, 0.0, 1.0, key="gate-lo"),
            Setting("hi", "HI", "decay at most", 1.0, 0.0, 1.0, key="gate-hi"),
        ),
    ),
    Intervention(
        "state-patch", "state patching", "replace the head's S_t by a donor trace's", ("state",),
        "interventions.patch_state", cli=False,  # patch_state(layer, head, donor cache): the page builds it
    ),
)
# fmt: on

INTERVENTIONS: tuple[str, ...] = tuple(name for k in KINDS for name in k.sweeps)  # the named sweeps


def kind(key: str) -> Intervention:
    """The record of the kind whose CLI flag is `--<key>` (KeyError if none)."""
    for record in KINDS:
        if record.key == key:
            return record
    raise KeyError(key)


def kind_of_sweep(name: str) -> Intervention:
    """The kind a named sweep is a setting of (KeyError if no sweep has that name)."""
    for record in KINDS:
        if name in record.sweeps:
            return record
    raise KeyError(name)


def applicable(model) -> list[Intervention]:
    """The kinds whose needs `model` has (models/capabilities.py)."""
    from deltalens.models.capabilities import applies, capabilities_of

    capabilities = capabilities_of(model)
    return [record for record in KINDS if applies(record.needs, capabilities)]


def lacks(record: Intervention, model) -> list[str]:
    """What `model` lacks of the kind's needs, in words."""
    from deltalens.models.capabilities import capabilities_of, missing

    return missing(record.needs, capabilities_of(model))
