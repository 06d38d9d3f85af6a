"""Build a model whose weights are about to come from a file, without memory for them: every
parameter lands on the meta device (shape and dtype only), while buffers (rotary caches, causal
masks, beta bounds: what no file holds) are computed on the CPU as usual.

    with parameters_on_meta(), random_init_skipped():
        model = build(arch, **config)
    load_weights(model, ...)       # assigns the file's (memory-mapped) tensors in place of the meta ones

Modules create a parameter on the CPU and register it; registering moves it to meta at once, so the
untouched allocation is freed before the next one (nothing is drawn: random init is skipped too). A
module that computed a buffer from a parameter would leave that buffer on meta:
`meta_buffers(model)` names them, and the caller builds on the CPU instead.

Like models/init_skipped.py, the switch is per thread: the first use wraps
nn.Module.register_parameter once, for good, and outside a block the wrapper is a plain call.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

_install = threading.Lock()
_on_meta = threading.local()


def _wrap_register_parameter() -> None:
    with _install:
        current = torch.nn.Module.register_parameter
        if getattr(current, "meta_aware", False):
            return

        def register_parameter(module, name, param):
            current(module, name, param)
            if getattr(_on_meta, "on", False) and param is not None and param.device.type != "meta":
                moved = param.detach().to("meta")
                module._parameters[name] = type(param)(moved, requires_grad=param.requires_grad)

        # through __dict__: a function's own attributes are not attributes of its type
        register_parameter.__dict__.update(meta_aware=True, __wrapped__=current)
        torch.nn.Module.register_parameter = register_parameter


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    _wrap_register_parameter()
    was_on = getattr(_on_meta, "on", False)
    _on_meta.on = True
    try:
        yield
    finally:
        _on_meta.on = was_on


def meta_buffers(model: torch.nn.Module) -> list[str]:
    """Names of buffers left on meta (computed from a parameter at build time): such a model needs a CPU build."""
    return [name for name, buffer in model.named_buffers() if buffer.device.type == "meta"]


def meta_tensors(model: torch.nn.Module) -> list[str]:
    """Names of parameters and buffers still on meta (after loading: none should be)."""
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    return [name for name, tensor in named if tensor.device.type == "meta"]
