"""What the tools take as input, TransformerLens's way: a batch of traces, a token tensor, or text.

`as_batch(model, source)` turns any of them into the batch dict the tools read (tasks/dataset.py's keys):

    a batch dict         as it is (`checkpoint.batch(n)`, `make_batch`)
    REPL text            each string parsed as a deterministic REPL transcript (tasks.traces.parse_trace) and
                         encoded with the model's tokenizer: the labels (reveals, states, actions) come with it
    a token tensor       (B, T) or (T,) ids; decoded and parsed the same way when the model has a tokenizer and
                         the text is a REPL transcript, else the tokens alone (no labels)

A tool that needs the labels (reveal accuracy, probes of the true state) and is given tokens without them says so
in one sentence (`require_labels`).
"""

from __future__ import annotations

from typing import Any

import torch

from deltalens.core.errors import DeltalensError
from deltalens.models.lm.lens import check_token_ids

__all__ = ["as_batch", "require_batch", "require_labels"]


def as_batch(model, source: Any) -> dict[str, torch.Tensor]:
    """The batch dict of `source` (module docstring), its ids checked against the model's vocabulary."""
    return _checked(model, _batch_of(model, source))


def _checked(model, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`batch`, unless it holds no token or ids outside the model's vocabulary: then one sentence (every model,
    the Transformer included, whose forward would fail deep in torch)."""
    tokens = batch.get("tokens")
    if not isinstance(tokens, torch.Tensor):
        raise DeltalensError("a batch is a dict with 'tokens' (batch, pos) ids: checkpoint.batch(n), make_batch")
    if tokens.numel() == 0:
        raise DeltalensError(
            f"the batch holds no token (tokens of shape {tuple(tokens.shape)}): give at least one trace"
        )
    vocab = getattr(getattr(model, "cfg", None), "d_vocab", None)
    if isinstance(vocab, int):
        check_token_ids(tokens, vocab)
    return batch


def _batch_of(model, source: Any) -> dict[str, torch.Tensor]:
    if isinstance(source, dict):
        return source
    if isinstance(source, str) or (isinstance(source, (list, tuple)) and source and isinstance(source[0], str)):
        return _from_text(model, [source] if isinstance(source, str) else list(source))
    if isinstance(source, torch.Tensor):
        if source.dtype not in (torch.long, torch.int, torch.int32, torch.int16) or source.ndim not in (1, 2):
            raise DeltalensError(
                f"token ids are an integer tensor (batch, pos) or (pos,); got {source.dtype} {tuple(source.shape)}"
            )
        tokens = source[None] if source.ndim == 1 else source
        parsed = _parsed_tokens(model, tokens)
        if parsed is not None:
            return parsed
        return {"tokens": tokens.long().cpu(), "lengths": _unpadded_lengths(model, tokens)}
    raise DeltalensError(
        f"give a batch of traces (checkpoint.batch(n)), a token tensor (batch, pos) or REPL text, not "
        f"{type(source).__name__}"
    )


def require_batch(batch: Any, what: str) -> None:
    """One sentence unless `batch` is a labelled batch of traces (a dict): tools that read the reveals' answers and
    the true states take no token ids or text here."""
    if not isinstance(batch, dict):
        raise DeltalensError(
            f"{what} takes a batch of traces with their labels (dl.trace_pair(model, n), checkpoint.batch(n)), not "
            f"{type(batch).__name__}"
        )
    require_labels(batch, what)


def require_labels(batch: dict, what: str, source: Any = None) -> None:
    """One sentence unless `batch` carries the reveals' labels; where `source` was text that does not replay as a
    REPL transcript (a print showing a value the statements do not give, say), the parser's sentence."""
    if "reveal_mask" not in batch or "answers" not in batch:
        why = _why_not_a_transcript(source)
        if why:
            raise DeltalensError(
                f"{what} needs the reveals' labels, and the text does not replay as a REPL trace: {why}"
            )
        raise DeltalensError(
            f"{what} needs the reveals' labels, which bare token ids do not carry: pass REPL text, or a batch of "
            "traces (model.checkpoint.batch(n), tasks.dataset.make_batch)"
        )


def _why_not_a_transcript(source: Any) -> str | None:
    """The parser's first line on the first text of `source` it refuses (None: not text, or every text parses)."""
    from deltalens.tasks.traces import parse_trace

    texts = [source] if isinstance(source, str) else source if isinstance(source, (list, tuple)) else []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            return None
        try:
            parse_trace(text if text.endswith("\n") else text + "\n")
        except DeltalensError as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else "it is empty"
            return first if len(texts) == 1 else f"text {i}: {first}"
    return None


def _unpadded_lengths(model, tokens: torch.Tensor) -> torch.Tensor:
    """Each row's length without its trailing <pad> tokens (to_tokens right-pads a list of texts with them);
    the full width where the model's tokenizer names no pad id."""
    pad = getattr(getattr(model, "tokenizer", None), "pad_id", None)
    T = tokens.shape[1]
    if not isinstance(pad, int) or T == 0:
        return torch.full((tokens.shape[0],), T)
    real = (tokens.cpu() != pad).long()
    last = T - real.flip(1).argmax(1)  # one past the last real token
    return torch.where(real.any(1), last, torch.zeros_like(last))


def _tokenizer(model):
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None or not hasattr(tokenizer, "encode_trace"):
        return None
    return tokenizer


def _from_text(model, texts: list[str]) -> dict[str, torch.Tensor]:
    from deltalens.tasks.dataset import collate
    from deltalens.tasks.traces import parse_trace

    tokenizer = _tokenizer(model)
    if tokenizer is None:
        raise DeltalensError(
            "this model has no tokenizer to read text with; attach one (model.tokenizer = ...) or pass token ids"
        )
    try:
        traces = [parse_trace(text if text.endswith("\n") else text + "\n") for text in texts]
    except DeltalensError:  # not a REPL transcript: the tokens alone
        ids = model.to_tokens(texts if len(texts) > 1 else texts[0])
        return {"tokens": ids.cpu(), "lengths": _unpadded_lengths(model, ids)}
    return collate([tokenizer.encode_trace(trace) for trace in traces])


def _parsed_tokens(model, tokens: torch.Tensor) -> dict[str, torch.Tensor] | None:
    """The labelled batch of REPL transcripts written as `tokens`, or None (no tokenizer, or not a transcript)."""
    tokenizer = _tokenizer(model)
    if tokenizer is None:
        return None
    try:
        texts = [tokenizer.decode([int(t) for t in row if int(t) > 1]) for row in tokens]  # pad 0 and bos 1 left out
        batch = _from_text(model, texts)
    except (DeltalensError, ValueError, KeyError, IndexError):
        return None
    if "reveal_mask" not in batch or tuple(batch["tokens"].shape) != tuple(tokens.shape):
        return None  # re-encoding gave other tokens: keep the caller's
    return batch if torch.equal(batch["tokens"], tokens.long().cpu()) else None
