"""Clean / corrupted pairs of REPL traces for patching, and the logit-difference metric on them.

`relabel_values(batch, tokenizer, group, action_set)` makes the corrupted twin of every trace: the same
actions and the same prints, with the values relabelled by a cyclic shift (1 -> 2 -> ... -> n -> 1) in
the initial assignments and in every revealed output. Token for token the two traces have the same
layout (kinds, positions), and every reveal's answer differs, so any patch that moves the clean
answer back into the corrupted run can be read off one number:

    reveal_metric(clean, corrupt)(logits) = mean over reveals of logit[clean answer] - logit[corrupt answer]

at the position that predicts each reveal (positive: the clean answer wins).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch

from deltalens.core.errors import DeltalensError
from deltalens.interp.batch_inputs import require_batch
from deltalens.tasks.dataset import collate
from deltalens.tasks.traces import parse_trace

__all__ = ["metric_value", "relabel_values", "reveal_metric", "trace_pair"]

_INIT = re.compile(r"^(>>> [a-z]+ = )(\d+)$")
_OUTPUT = re.compile(r"^([a-z]+ )(\d+)$")


def _shift_line(line: str, n: int, shift: int) -> str:
    for pattern in (_INIT, _OUTPUT):
        m = pattern.fullmatch(line)
        if m:
            return f"{m.group(1)}{(int(m.group(2)) - 1 + shift) % n + 1}"
    return line


def relabel_values(batch: dict[str, torch.Tensor], tokenizer, group: str, action_set: str, shift: int = 1) -> dict:
    """The corrupted twin of a batch of deterministic traces: values relabelled v -> v + shift (mod n).

    >>> twin = dl.relabel_values(batch, model.tokenizer, "S3", "swaps")
    >>> twin["tokens"].shape == batch["tokens"].shape
    True
    """
    n = int(batch["states"].shape[-1])
    if shift % n == 0:
        raise DeltalensError(f"a shift of {shift} maps every one of the {n} values to itself; use 1 .. {n - 1}.")
    encoded = []
    for b, length in enumerate(batch["lengths"].tolist()):
        text = tokenizer.decode(batch["tokens"][b, :length].tolist())
        lines = [_shift_line(line, n, shift) for line in text.splitlines()]
        trace = parse_trace("\n".join(lines) + "\n", group=group, action_set=action_set)
        encoded.append(tokenizer.encode_trace(trace))
    corrupt = collate(encoded)
    if corrupt["tokens"].shape != batch["tokens"].shape or not torch.equal(corrupt["kinds"], batch["kinds"]):
        raise DeltalensError("relabelling changed the traces' token layout; this tokenizer cannot make patching pairs.")
    return corrupt


def trace_pair(
    model, n_traces: int = 16, seed: int = 0, shift: int = 1, actions: int | None = None, checkpoint=None
) -> tuple[dict, dict]:
    """(clean, corrupt) batches of a checkpoint's held-out traces (model.checkpoint, or `checkpoint`: an
    opened Checkpoint), corrupt = relabelled; actions: per trace (default the checkpoint's eval length).

    >>> clean, corrupt = dl.trace_pair(model, 4, seed=0)   # corrupt: the same traces, values relabelled
    >>> bool((clean["tokens"] != corrupt["tokens"]).any()), clean["tokens"].shape == corrupt["tokens"].shape
    (True, True)
    """
    checkpoint = checkpoint if checkpoint is not None else getattr(model, "checkpoint", None)
    if checkpoint is None:
        raise DeltalensError("this model has no checkpoint (and so no task); build the clean/corrupt batches yourself.")
    spec = checkpoint.spec
    if not hasattr(spec, "reveal"):  # a PFSA-SR (probabilistic) task: a trace's values are not a function of it
        raise DeltalensError(
            "this checkpoint's task has random actions, so a relabelled twin has no single answer to patch "
            "towards; use a checkpoint trained on deterministic traces."
        )
    clean = checkpoint.batch(n_traces, seed=seed, actions=actions)
    return clean, relabel_values(clean, checkpoint.tokenizer, spec.group, spec.action_set, shift)


def reveal_metric(clean: dict, corrupt: dict, reduce: bool = True) -> Callable[[torch.Tensor], torch.Tensor]:
    """metric(logits (B, T, vocab)) -> mean logit[clean answer] - logit[corrupt answer] at the positions
    that predict the reveals (per reveal with reduce=False).

    >>> clean, corrupt = dl.trace_pair(model, 4)
    >>> metric = dl.reveal_metric(clean, corrupt)
    >>> float(metric(model(clean["tokens"]))) > 0 > float(metric(model(corrupt["tokens"])))
    True
    """
    require_batch(clean, "reveal_metric's clean run")
    require_batch(corrupt, "reveal_metric's corrupted run")
    shapes = tuple(clean["tokens"].shape), tuple(corrupt["tokens"].shape)
    same_reveals = (
        shapes[0] != shapes[1]
        or "reveal_mask" not in corrupt
        or torch.equal(clean["reveal_mask"], corrupt["reveal_mask"])
    )  # (only asked of a pair of one shape)
    if shapes[0] != shapes[1] or not same_reveals:
        raise DeltalensError(
            f"clean and corrupt must be a pair: as many traces of one length, reveals at the same positions "
            f"(dl.trace_pair makes one); got tokens {shapes[0]} and {shapes[1]}"
            + ("" if same_reveals else " with reveals at other positions")
        )
    reveal = clean["reveal_mask"].clone()
    reveal[:, 0] = False
    b, t = reveal.nonzero(as_tuple=True)
    good, bad = clean["tokens"][b, t], corrupt["tokens"][b, t]
    if not len(b):
        raise DeltalensError("these traces reveal no values; there is no answer to measure.")
    if bool((good == bad).all()):
        raise DeltalensError(
            "the clean and corrupt traces reveal the same values, so the metric is 0 whatever is patched: give a "
            "pair whose answers differ (dl.trace_pair)"
        )

    def metric(logits: torch.Tensor) -> torch.Tensor:
        rows = logits[b.to(logits.device), (t - 1).to(logits.device)]  # (N, vocab)
        diff = (
            rows.gather(1, good.to(logits.device)[:, None])[:, 0] - rows.gather(1, bad.to(logits.device)[:, None])[:, 0]
        )
        return diff.mean() if reduce else diff

    return metric


def metric_value(value) -> float:
    """A metric's value as one number, or one sentence: a metric returns a scalar (reveal_metric's reduce=True)."""
    if torch.is_tensor(value) and value.numel() != 1:
        raise DeltalensError(
            f"the metric returned a tensor of shape {tuple(value.shape)}: it must return one number (a scalar "
            "tensor); reduce it, e.g. dl.reveal_metric(clean, corrupt) with its default reduce=True"
        )
    return float(value)
