"""A long sequence through a recurrent model in chunks, the state carried between them, so memory is set
by the chunk and not by the sequence: 5 traces of 93,000 actions took 4.4 GB in one forward.

A linear RNN needs only its state between chunks (the delta rule's S_t and the short convolutions'
last W - 1 inputs; an LSTM's (h, c)), so the chunked result equals the unchunked forward (tests say
so at 1e-5). The Transformer has no such state: it runs whole, and refuses past its context.

    logits = forward_in_chunks(model, tokens)                        # (B, T, vocab)
    logits, cache = forward_in_chunks(model, tokens, names_filter=f)  # cache: name -> (B, T, ...)
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import math
from collections.abc import Callable, Iterator
from typing import Optional, Union

import torch

from deltalens.core.errors import DeltalensError
from deltalens.models.architecture import architecture_of, is_delta_rule
from deltalens.models.layers.carry import Carry

__all__ = ["DEFAULT_CHUNK", "argmax_in_chunks", "carried", "forward_in_chunks", "log_probs_at"]

DEFAULT_CHUNK = 4096  # tokens per chunk: a few MB of activations at this project's sizes


def _recurrent_layers(model) -> list:
    """The layers that carry a state between chunks; none (the model runs whole) for a Transformer, any other
    model, or one with a layer that cannot carry its state."""
    try:
        arch = architecture_of(model)
    except DeltalensError:  # not a deltalens model (a stand-in in a test, say): run it whole
        return []
    if arch == "lstm":
        return list(model.blocks)
    if not (is_delta_rule(arch) or arch == "m2rnn"):
        return []
    layers = [block.attn for block in model.blocks]
    # A layer without a carry (a production hybrid's own attention) would restart in every chunk: run whole
    return layers if all(hasattr(layer, "carry") for layer in layers) else []


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


@functools.cache
def _return_freed_memory() -> None:
    """Serve large allocations by mmap (returned to the system when freed). Chunk after chunk of
    same-sized tensors otherwise fragments glibc's heap: 250 chunks peaked 350 MB above one chunk's
    needs, 35 MB with this. Process-wide, set once, only when a sequence is run in chunks."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt(_M_MMAP_THRESHOLD, 1 << 17)


@contextlib.contextmanager
def carried(model) -> Iterator[list]:
    """Within the block, every recurrent layer of `model` carries its state from one forward to the next."""
    _return_freed_memory()
    layers = _recurrent_layers(model)
    for layer in layers:
        layer.carry = Carry()
    try:
        yield layers
    finally:
        for layer in layers:
            layer.carry = None


def _grid(model, chunk_size: int) -> int:
    """The chunk size rounded up to the renormalisation grid (state_norm_every) of a renormalised DeltaNet."""
    every = math.lcm(1, *(getattr(layer, "state_norm_every", 0) or 1 for layer in _recurrent_layers(model)))
    return -(-chunk_size // every) * every


def forward_in_chunks(
    model,
    tokens: torch.Tensor,
    chunk_size: int = DEFAULT_CHUNK,
    names_filter: Optional[Union[Callable[[str], bool], list[str]]] = None,
):
    """The model's logits (B, T, vocab) on `tokens` (B, T), `chunk_size` tokens at a time.

    With names_filter (as run_with_cache's), also the cached activations, each concatenated along its
    position axis (TransformerLens order: batch, pos, ...)."""
    if chunk_size < 1:
        raise DeltalensError(f"chunk_size must be a positive number of tokens, got {chunk_size}")
    T = tokens.shape[-1]
    if not _recurrent_layers(model) or T <= chunk_size:  # nothing to carry, or one chunk anyway
        return model(tokens) if names_filter is None else _cached(model, tokens, names_filter)
    step = _grid(model, chunk_size)
    logits, caches = [], []
    with carried(model):
        for start in range(0, T, step):
            piece = tokens[..., start : start + step]
            if names_filter is None:
                logits.append(model(piece))
            else:
                out, cache = _cached(model, piece, names_filter)
                logits.append(out)
                caches.append(cache)
    joined = torch.cat(logits, dim=1)
    if names_filter is None:
        return joined
    return joined, {name: torch.cat([cache[name] for cache in caches], dim=1) for name in caches[0]}


def _cached(model, tokens: torch.Tensor, names_filter):
    logits, cache = model.run_with_cache(tokens, names_filter=names_filter)
    return logits, dict(cache.items())


def log_probs_at(model, tokens: torch.Tensor, where: torch.Tensor, chunk_size: int = DEFAULT_CHUNK) -> torch.Tensor:
    """(N, vocab) float32 log-probabilities of the next token at the N positions where `where` (B, T, bool)
    is True, in row-major order, holding one chunk's logits at a time (a model with its own tokenizer
    scores reveals spread over traces of a million tokens this way)."""
    T = tokens.shape[-1]
    step = T if not _recurrent_layers(model) or T <= chunk_size else _grid(model, chunk_size)
    rows = []
    with carried(model) if step < T else contextlib.nullcontext():
        for start in range(0, T, step):
            logits = model(tokens[..., start : start + step])
            b, t = where[:, start : start + step].to(logits.device).nonzero(as_tuple=True)
            rows.append((b, t + start, logits[b, t].float().log_softmax(-1)))
    b, t, picked = (torch.cat(parts) for parts in zip(*rows))
    order = torch.argsort(b * T + t)  # chunks come position-major; the caller reads trace by trace
    return picked[order]


def argmax_in_chunks(model, tokens: torch.Tensor, chunk_size: int = DEFAULT_CHUNK) -> torch.Tensor:
    """The model's predicted token at every position (B, T), without holding all the logits at once."""
    if not _recurrent_layers(model) or tokens.shape[-1] <= chunk_size:
        return model(tokens).argmax(-1)
    step = _grid(model, chunk_size)
    with carried(model):
        return torch.cat([model(tokens[..., s : s + step]).argmax(-1) for s in range(0, tokens.shape[-1], step)], 1)
