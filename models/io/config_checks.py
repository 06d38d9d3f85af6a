"""The one check of a delta-rule config's known fields, read off their type annotations.

    check_fields(config, "deltanet")   raises DeltalensError naming the first field that is wrong

Each field's annotation says what it may hold (`int`, `float`, `bool`, `str`, `dict`/`list`, each
optionally `| None`); the ranges are the family's: sizes and counts are whole numbers >= 1 (a model
may have zero layers, a token id may be 0), epsilons and expansion factors numbers > 0. Only shapes
of values are checked here; whether the fields fit together (hidden_size a multiple of num_heads,
...) is the mixer's to say. Extra keys (not fields) are left alone.
"""

from __future__ import annotations

import numbers
import types
import typing
from collections.abc import Callable
from dataclasses import fields
from functools import cache
from typing import Any

from deltalens.core.errors import DeltalensError

# fields that may be zero (all other numbers must be positive)
MAY_BE_ZERO = frozenset(
    {"num_hidden_layers", "pad_token_id", "bos_token_id", "eos_token_id", "initializer_range", "correction_factor"}
)
# numbers of either sign (KDA's lower_bound: a log-decay, below zero)
ANY_SIGN = frozenset({"lower_bound"})


def check_fields(config: object, what: str) -> None:
    """Raise a DeltalensError naming the first known field of `config` whose value is of the wrong kind."""
    # a class is hashable; mypy's Hashable check misreads a class's __hash__ (python/mypy#11470)
    for name, (rule, accepts) in _rules(type(config)).items():  # type: ignore[arg-type]
        value = getattr(config, name)
        if not accepts(value):
            raise DeltalensError(f"{what} config field {name} must be {rule}, got {value!r}")


@cache
def _rules(cls: type) -> dict[str, tuple[str, Callable[[Any], bool]]]:
    """field name -> (what it must be, in words; the test), from the dataclass's annotations."""
    hints = typing.get_type_hints(cls)
    return {known.name: _rule(known.name, hints[known.name]) for known in fields(cls)}


def _rule(name: str, hint: Any) -> tuple[str, Callable[[Any], bool]]:
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    kinds = [typing.get_origin(arg) or arg for arg in (typing.get_args(hint) if union else (hint,))]
    optional = type(None) in kinds
    kinds = [kind for kind in kinds if kind is not type(None)]
    lowest = 0 if name in MAY_BE_ZERO else 1
    if kinds == [bool]:
        rule, test = "true or false", lambda v: isinstance(v, bool)
    elif kinds == [int]:
        rule, test = f"a whole number >= {lowest}", lambda v: _is_int(v) and v >= lowest
    elif kinds == [float] and name in ANY_SIGN:
        rule, test = "a number", _is_number
    elif kinds == [float]:
        sign = ">=" if lowest == 0 else ">"
        rule, test = f"a number {sign} 0", lambda v: _is_number(v) and (v >= 0 if lowest == 0 else v > 0)
    elif kinds == [str]:
        rule, test = "a string", lambda v: isinstance(v, str)
    else:
        accepted = tuple(kinds)
        rule = " or ".join(f"a {'JSON object' if kind is dict else kind.__name__}" for kind in kinds)
        test = lambda v: isinstance(v, accepted)  # noqa: E731
    if not optional:
        return rule, test
    return f"{rule} or None", lambda v: v is None or test(v)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
