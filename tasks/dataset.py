"""Traces as a torch Dataset, and ``collate`` to padded batches.

Every item is generated on the fly from its own trace seed, a hash (blake2b) of
(seed, split, index); the lowest bit of a trace seed is the split (train 0, eval 1), so
train and eval traces never share a seed whatever the base seed. Nothing is cached: the dataset
is reproducible by construction and costs no memory.

A batch (``collate``) is a dict of tensors, B traces padded to the longest length T::

    tokens       (B, T)    long   token ids, PAD_ID (0) on padding
    loss_mask    (B, T)    bool   True where tokens[:, t] is a target for logits[:, t-1]
                                  (supervision "all": every real token but the first;
                                   "reveal": only revealed values)
    reveal_mask  (B, T)    bool   revealed-value tokens (TokenKind.REVEAL)
    answers      (B, T)    long   the revealed value 1..n on reveal tokens, 0 elsewhere
    reveal_vars  (B, T)    long   which variable a reveal token shows, -1 elsewhere
    states       (B, T, n) long   true state s_t in force at each token (values 1..n), 0 on padding
    state_steps  (B, T)    long   t: actions completed at each token, -1 on padding
    kinds        (B, T)    long   TokenKind (OTHER = 0 on padding too; use lengths to tell)
    action_pos   (B, T)    long   index of the action in its trace on action tokens, -1 elsewhere
    perm_ids     (B, T)    long   lex rank in S_n of the action's permutation, -1 elsewhere
    lengths      (B,)      long   real tokens per trace
    trace_seeds  (B,)      long   the seed that regenerates each trace with generate_trace (-1: unknown)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from deltalens.core.errors import DeltalensError
from deltalens.tasks.probabilistic import ProbTraceSpec, generate_prob_trace
from deltalens.tasks.tokenizers import PAD_ID, SUPERVISIONS, EncodedTrace, Tokenizer
from deltalens.tasks.traces import Trace, TraceSpec, generate_trace

SPLITS = {"train": 0, "eval": 1}

# value each per-token field takes on padding
_PAD_VALUES = {
    "tokens": PAD_ID,
    "loss_mask": False,
    "reveal_mask": False,
    "answers": 0,
    "reveal_vars": -1,
    "kinds": 0,
    "action_pos": -1,
    "perm_ids": -1,
    "state_steps": -1,
}


def trace_seed(seed: int, split: str, index: int) -> int:
    """The seed of trace ``index`` in ``split``; fits in int64, lowest bit = the split."""
    if split not in SPLITS:
        raise DeltalensError(f"split must be 'train' or 'eval', got {split!r}.")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise DeltalensError(f"a dataset seed must be a whole number >= 0, got {seed!r}.")
    # a keyed hash rather than numpy's SeedSequence: same independence for our use, 30x faster
    digest = hashlib.blake2b(f"deltalens:{int(seed)}:{split}:{int(index)}".encode(), digest_size=8).digest()
    word = int.from_bytes(digest, "little")
    return (word >> 2 << 1) | SPLITS[split]  # 62 random bits, then the split bit


def generate_any(spec, seed: int) -> Trace[Any]:
    """The trace of a TraceSpec or of a ProbTraceSpec (tasks/probabilistic.py) for ``seed``."""
    if isinstance(spec, TraceSpec):
        return generate_trace(spec, seed)
    if isinstance(spec, ProbTraceSpec):
        return generate_prob_trace(spec, seed)
    raise DeltalensError(f"expected a TraceSpec or a ProbTraceSpec, got {type(spec).__name__}.")


class TraceDataset(Dataset):
    """``size`` traces of ``spec``, tokenized; item i is always the same trace."""

    def __init__(
        self,
        spec: TraceSpec | ProbTraceSpec,
        tokenizer: Tokenizer,
        size: int,
        seed: int = 0,
        split: str = "train",
        supervision: str = "all",  # "all": next-token loss on every token; "reveal": on revealed values only
        add_bos: bool = True,  # start every trace with <bos> so its first real token is a target
    ):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise DeltalensError(f"dataset size must be a whole number >= 1, got {size!r}.")
        if supervision not in SUPERVISIONS:
            raise DeltalensError(f"supervision must be 'all' or 'reveal', got {supervision!r}.")
        trace_seed(seed, split, 0)  # validates seed and split
        tokenizer.check_spec(spec)
        self.spec, self.tokenizer, self.size = spec, tokenizer, size
        self.seed, self.split, self.supervision, self.add_bos = seed, split, supervision, add_bos

    def __len__(self) -> int:
        return self.size

    def seed_of(self, index: int) -> int:
        if not -self.size <= index < self.size:
            raise IndexError(f"index {index} is outside a dataset of {self.size} traces")
        return trace_seed(self.seed, self.split, index % self.size)

    def trace(self, index: int) -> Trace:
        return generate_any(self.spec, self.seed_of(index))

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        trace = generate_any(self.spec, self.seed_of(index))
        return encoded_to_item(self.tokenizer.encode_trace(trace, add_bos=self.add_bos), self.supervision)


_INT64 = range(-(2**63), 2**63)


def encoded_to_item(enc: EncodedTrace, supervision: str = "all") -> dict[str, torch.Tensor]:
    """One trace's tensors (the batch fields without B; ``trace_seed`` is a scalar, -1 if unknown)."""
    if supervision not in SUPERVISIONS:
        raise DeltalensError(f"supervision must be 'all' or 'reveal', got {supervision!r}.")
    # labels go through numpy (one conversion, cheap ops) and become tensors at the end:
    # a torch op per field costs more than generating the trace
    rows = np.array(
        [enc.ids, enc.kinds, enc.action_pos, enc.perm_ids, enc.answers, enc.reveal_vars, enc.state_steps],
        dtype=np.int64,
    )  # (7, T)
    tokens, kinds, action_pos, perm_ids, answers, reveal_vars, steps = rows
    reveal_mask = answers > 0
    loss_mask = _loss_mask(tokens, reveal_mask, supervision)
    seed = enc.trace_seed if enc.trace_seed in _INT64 else -1
    item = {
        "tokens": tokens,  # (T,)
        "loss_mask": loss_mask,
        "reveal_mask": reveal_mask,
        "answers": answers,
        "reveal_vars": reveal_vars,
        "states": np.array(enc.trace_states, dtype=np.int64)[steps],  # (T, n)
        "state_steps": steps,
        "kinds": kinds,
        "action_pos": action_pos,
        "perm_ids": perm_ids,
        "trace_seed": np.array(seed, dtype=np.int64),  # ()
    }
    return {key: torch.from_numpy(value) for key, value in item.items()}


def _loss_mask(tokens, reveal_mask, supervision: str):
    """The loss mask of one unpadded trace, for numpy arrays or tensors."""
    if supervision == "reveal":
        return reveal_mask.copy() if isinstance(reveal_mask, np.ndarray) else reveal_mask.clone()
    mask = tokens != PAD_ID  # every token is a target except the first, which nothing predicts
    mask[0] = False
    return mask


def collate(
    items: Sequence[dict[str, torch.Tensor] | EncodedTrace],
    supervision: str | None = None,
) -> dict[str, torch.Tensor]:
    """Pad traces into one batch (keys and shapes in the module docstring).

    ``items`` are dataset items or ``EncodedTrace`` objects (``tokenizer.encode_trace(trace)``).
    ``supervision`` picks the loss mask ("all" or "reveal"): for EncodedTrace it defaults to
    "all"; for dataset items it replaces the mask they carry, and None keeps it.
    """
    if not items:
        raise DeltalensError("cannot collate an empty list of traces.")
    if supervision is not None and supervision not in SUPERVISIONS:
        raise DeltalensError(f"supervision must be 'all' or 'reveal', got {supervision!r}.")
    rows: list[dict[str, torch.Tensor]] = [
        encoded_to_item(item, supervision or "all")
        if isinstance(item, EncodedTrace)
        else item
        if supervision is None
        else {**item, "loss_mask": _loss_mask(item["tokens"], item["reveal_mask"], supervision)}
        for item in items
    ]
    lengths = torch.tensor([len(item["tokens"]) for item in rows], dtype=torch.long)
    B, T = len(rows), int(lengths.max())
    n = rows[0]["states"].shape[-1]
    if any(item["states"].shape[-1] != n for item in rows):
        raise DeltalensError("cannot collate traces with different numbers of variables in one batch.")
    batch: dict[str, torch.Tensor] = {}
    for key, pad in _PAD_VALUES.items():
        out = torch.full((B, T), pad, dtype=rows[0][key].dtype)
        for b, item in enumerate(rows):
            out[b, : len(item[key])] = item[key]
        batch[key] = out
    states = torch.zeros(B, T, n, dtype=torch.long)  # (B, T, n)
    for b, item in enumerate(rows):
        states[b, : len(item["states"])] = item["states"]
    batch["states"] = states
    batch["lengths"] = lengths
    batch["trace_seeds"] = torch.stack([item["trace_seed"] for item in rows])
    return batch


def make_batch(
    spec: TraceSpec | ProbTraceSpec,
    tokenizer: Tokenizer,
    batch_size: int,
    seed: int = 0,
    split: str = "eval",
    supervision: str = "all",
) -> dict[str, torch.Tensor]:
    """Traces 0..batch_size-1 of ``TraceDataset(spec, tokenizer, batch_size, seed, split)``, collated.

    >>> spec = dl.TraceSpec(group="S3", actions=8, spacing=2)
    >>> tokens = dl.make_batch(spec, dl.make_tokenizer("statement", spec), 4)["tokens"]
    >>> tokens.shape[0]
    4
    """
    dataset = TraceDataset(spec, tokenizer, batch_size, seed=seed, split=split, supervision=supervision)
    return collate([dataset[i] for i in range(batch_size)])


def split_batch(batch: dict[str, torch.Tensor], size: int) -> list[dict[str, torch.Tensor]]:
    """Split a batch into consecutive pieces of at most `size` traces (labels travel along)."""
    B = batch["tokens"].shape[0]
    out = []
    for start in range(0, B, size):
        piece = {
            key: value[start : start + size] for key, value in batch.items() if torch.is_tensor(value) and value.ndim
        }
        piece.update({key: value for key, value in batch.items() if not (torch.is_tensor(value) and value.ndim)})
        out.append(piece)
    return out
