"""Build a config dataclass from keyword arguments, refusing unknown keys with a readable error."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

from deltalens.core.errors import DeltalensError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = TypeVar("C", bound="DataclassInstance")


def config_from_dict(cls: type[C], config: dict[str, Any], what: str) -> C:
    """`cls(**config)`, but a typo names itself instead of building the wrong model."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(config) - known)
    if unknown:
        raise DeltalensError(
            f"unknown {what} config key(s) {', '.join(map(repr, unknown))}; known keys are {', '.join(sorted(known))}"
        )
    return cls(**config)
