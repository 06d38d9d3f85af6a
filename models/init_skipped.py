"""Build a model whose every weight is about to be read from a file without drawing random
initial weights first: for a 1.3B DeltaNet on a 2-core CPU the random init was 48 s of a 76 s load.

    with random_init_skipped():
        model = build(arch, **config)
    load_weights(model, ...)        # refuses a file that lacks any tensor, so none stays unset

Inside the block torch.nn.init's random initialisers leave their tensor as allocated, in this
thread only (a model another thread builds meanwhile is initialised as usual). Deterministic ones
(zeros_, ones_, constant_) still run: they are cheap and may fill buffers no file holds.
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

_lock = threading.Lock()
_skipping = threading.local()
_originals: dict[str, object] = {}
_users = 0


def _skippable(name: str, original):
    def init(tensor, *args, **kwargs):
        if getattr(_skipping, "on", False):
            return tensor
        return original(tensor, *args, **kwargs)

    init.__wrapped__ = original
    init.__name__ = name
    return init


@contextmanager
def random_init_skipped() -> Iterator[None]:
    global _users
    with _lock:
        if _users == 0:  # the first user installs the wrappers, the last one restores torch's own
            for name in RANDOM_INITS:
                _originals[name] = getattr(torch.nn.init, name)
                setattr(torch.nn.init, name, _skippable(name, _originals[name]))
        _users += 1
    was_on = getattr(_skipping, "on", False)
    _skipping.on = True
    try:
        yield
    finally:
        _skipping.on = was_on
        with _lock:
            _users -= 1
            if _users == 0:
                for name, original in _originals.items():
                    setattr(torch.nn.init, name, original)
                _originals.clear()
