"""Build a model whose every weight is about to be read from a file without drawing random
initial weights first (the 1.3B DeltaNet loads 1.9x faster: benchmarks/load.py).

    with random_init_skipped():
        model = build(arch, **config)
    load_weights(model, ...)        # refuses a file that lacks any tensor, so none stays unset

Inside the block torch.nn.init's random initialisers leave their tensor as allocated, in this
thread only (a model another thread builds meanwhile is initialised as usual). Deterministic ones
(zeros_, ones_, constant_) still run: they are cheap and may fill buffers no file holds. The
first use wraps the random initialisers in torch.nn.init once, for good: outside a block (and in
other threads) a wrapper calls torch's own function, so nothing has to be put back, and another
library patching torch.nn.init meanwhile cannot be undone by us.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

RANDOM_INITS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "xavier_uniform_",
    "xavier_normal_",
    "orthogonal_",
)

_install = threading.Lock()
_skipping = threading.local()


def _skippable(original):
    def init(tensor, *args, **kwargs):
        if getattr(_skipping, "on", False):
            return tensor
        return original(tensor, *args, **kwargs)

    init.__name__ = init.__qualname__ = original.__name__
    init.__doc__ = original.__doc__
    init.__dict__.update(__wrapped__=original, skippable=True)  # through __dict__: not attributes of its type
    return init


def _wrap_torch_inits() -> None:
    with _install:
        for name in RANDOM_INITS:
            current = getattr(torch.nn.init, name)
            if not getattr(current, "skippable", False):
                setattr(torch.nn.init, name, _skippable(current))


@contextmanager
def random_init_skipped() -> Iterator[None]:
    _wrap_torch_inits()
    was_on = getattr(_skipping, "on", False)
    _skipping.on = True
    try:
        yield
    finally:
        _skipping.on = was_on
