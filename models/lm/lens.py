"""TransformerLens habits on every deltalens model: an ActivationCache, and a tokenizer to talk to.

    logits, cache = model.run_with_cache(tokens)   # an ActivationCache, as HookedTransformer gives
    model.to_tokens(text)                          # (1, T) ids of a REPL transcript, <bos> first
    model.to_str_tokens(text or tokens)            # the token strings
    model.to_string(tokens)                        # text back (a list of texts for a batch)

HookedDeltaNet and HookedLSTM inherit `LensModel`; the Transformer is TransformerLens's own
bridge, whose `run_with_cache` already returns an ActivationCache and whose string helpers expect
a Hugging Face tokenizer, so `attach_tokenizer` binds ours onto that one instance. The tokenizer
is the checkpoint's (training/opened.py attaches it when it loads a model).
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

import torch
from transformer_lens import ActivationCache

from deltalens.core.errors import DeltalensError
from deltalens.tasks.tokenizers import BOS_ID, PAD_ID, Tokenizer


class LensModel:
    """Mixin (before HookedRootModule in the bases) with TransformerLens's user-facing helpers."""

    tokenizer: Tokenizer | None = None

    def run_with_cache(self, *model_args: Any, **kwargs: Any):
        """`HookedRootModule.run_with_cache`, returning an ActivationCache instead of a dict."""
        out, cache = super().run_with_cache(*model_args, **kwargs)
        return out, ActivationCache(dict(cache), self, has_batch_dim=not kwargs.get("remove_batch_dim", False))

    def to_tokens(self, text: str | Sequence[str], prepend_bos: bool = True) -> torch.Tensor:
        return to_tokens(self, text, prepend_bos)

    def to_str_tokens(self, text: str | torch.Tensor | Sequence[int], prepend_bos: bool = True) -> list[str]:
        return to_str_tokens(self, text, prepend_bos)

    def to_string(self, tokens: torch.Tensor | Sequence[int]) -> str | list[str]:
        return to_string(self, tokens)


def attach_tokenizer(model, tokenizer: Tokenizer | None):
    """Give `model` its checkpoint's tokenizer and, if it lacks them, the LensModel string helpers."""
    model.tokenizer = tokenizer
    if not isinstance(model, LensModel):  # TransformerLens's bridge: bind ours on this instance only
        for name in ("to_tokens", "to_str_tokens", "to_string"):
            setattr(model, name, types.MethodType(globals()[name], model))
    return model


def _tokenizer_of(model) -> Tokenizer:
    tokenizer = getattr(model, "tokenizer", None)
    if not isinstance(tokenizer, Tokenizer):
        raise DeltalensError(
            "this model has no deltalens tokenizer attached; load it with deltalens.load(name_or_path), "
            "or attach one with deltalens.models.lm.lens.attach_tokenizer(model, tokenizer)."
        )
    return tokenizer


def _device_of(model) -> torch.device:
    weight = next(model.parameters(), None)
    return weight.device if weight is not None else torch.device("cpu")


def to_tokens(model, text: str | Sequence[str], prepend_bos: bool = True) -> torch.Tensor:
    """(B, T) int64 ids of one transcript or a list of them (right-padded with <pad>), on the
    model's device; <bos> first, as in training."""
    tokenizer = _tokenizer_of(model)
    texts = [text] if isinstance(text, str) else list(text)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise DeltalensError("to_tokens takes a REPL transcript (a string) or a list of them.")
    rows = [([BOS_ID] if prepend_bos else []) + tokenizer.encode(t) for t in texts]
    tokens = torch.full((len(rows), max(map(len, rows))), PAD_ID, dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return tokens.to(_device_of(model))


def to_str_tokens(model, text: str | torch.Tensor | Sequence[int], prepend_bos: bool = True) -> list[str]:
    """The token strings of a transcript, or of one sequence of ids (1-D, or a batch of one)."""
    tokenizer = _tokenizer_of(model)
    if isinstance(text, str):
        ids = ([BOS_ID] if prepend_bos else []) + tokenizer.encode(text)
    else:
        ids = _one_sequence(text)
    return tokenizer.pieces(ids)


def to_string(model, tokens: torch.Tensor | Sequence[int]) -> str | list[str]:
    """Text of ids (<bos> and <pad> dropped): one string, or a list for a (B, T) batch."""
    tokenizer = _tokenizer_of(model)
    if torch.is_tensor(tokens) and tokens.ndim == 2:
        return [tokenizer.decode(row.tolist()) for row in tokens]
    return tokenizer.decode(_one_sequence(tokens))


def _one_sequence(tokens: torch.Tensor | Sequence[int]) -> list[int]:
    if torch.is_tensor(tokens):
        if tokens.ndim == 2 and tokens.shape[0] == 1:
            tokens = tokens[0]
        if tokens.ndim != 1:
            raise DeltalensError(f"expected one sequence of token ids, got a tensor of shape {tuple(tokens.shape)}.")
        return [int(i) for i in tokens.tolist()]
    return [int(i) for i in tokens]
