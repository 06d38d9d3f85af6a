"""Layer, head and factor indices as Python ints, whatever integer type the caller has.

An index picked off a report (`np.argmax`, a DataFrame row, a tensor's `.argmax()`) is an np.int64 or a
0-d tensor; the tools check their indices with isinstance(x, int), which those fail. `@integer_indices`
turns such values (and lists or tuples of them) into ints at a public function's door; anything else,
bools and floats included, reaches the function unchanged, to be refused there in words.
"""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

__all__ = ["as_index", "integer_indices"]

P = ParamSpec("P")
R = TypeVar("R")


def as_index(value: Any) -> Any:
    """An integer scalar of any library as an int; a list or tuple of them element by element; else `value`."""
    if isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, numbers.Integral):  # numpy's integer scalars
        return int(value)
    if getattr(value, "ndim", None) == 0 and hasattr(value, "dtype") and hasattr(value, "item"):
        item = value.item()  # a 0-d tensor or array: an integer one only
        return item if isinstance(item, int) and not isinstance(item, bool) else value
    if isinstance(value, (list, tuple)):
        return type(value)(as_index(x) for x in value)
    return value


def integer_indices(*names: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function whose parameters `names` are indices: their values arrive as_index'ed."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(fn)
        unknown = [name for name in names if name not in signature.parameters]
        if unknown:
            raise TypeError(f"{fn.__qualname__} has no parameter {', '.join(unknown)}")

        @functools.wraps(fn)
        def inner(*args: P.args, **kwargs: P.kwargs) -> R:
            bound = signature.bind_partial(*args, **kwargs)
            for name in names:
                if name in bound.arguments:
                    bound.arguments[name] = as_index(bound.arguments[name])
            return fn(*bound.args, **bound.kwargs)

        return inner

    return wrap
